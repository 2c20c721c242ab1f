// Writing a file into a job folder that someone else may have prepared: the shim's .report.json and .dump.json
// (NCCLWATCH_DIR/<job>/) and the live collector's live-report.txt/.json (OUT/<job>/, <job> named by a client).
// Nothing planted there is followed:
// - the parent (NCCLWATCH_DIR, --out) is the operator's choice: created as needed (0750), a symlink there followed;
// - the job folder is created with 0750 and opened with O_NOFOLLOW|O_DIRECTORY, so a symlink (or a file) in its
//   place is refused;
// - the text goes to a temporary file of a fresh, unguessable name, created with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC
//   and mode 0640 (whatever the umask allows of it), then renamed over the final name: a symlink at the final name is
//   replaced as an entry, never written through.
// Not for the hot path (syscalls): the watchdog, exit paths and the collector's thread.
#pragma once

#include <string>

namespace ncw::files {

// mkdir -p of `path` with `mode` (symlinks along it followed); "" on success, else the reason.
std::string make_dirs(const std::string& path, unsigned mode);

// Creates (0750) and opens PARENT/NAME as a folder without following a symlink there; NAME is one component.
// Returns the descriptor (O_CLOEXEC), or -1 with *why set (errno kept).
int open_job_dir(const std::string& parent, const std::string& name, std::string* why);

// Writes `text` to NAME in the folder `dir_fd` through a fresh temporary file (see above) and a rename; with
// `durable` the data is fsync'ed before the rename. true on success, else false with *why (the temporary removed).
bool write_file_at(int dir_fd, const std::string& name, const std::string& text, bool durable, std::string* why);

// Both: PARENT/JOB/NAME. *why names the path and the reason.
bool write_job_file(const std::string& parent, const std::string& job, const std::string& name, const std::string& text,
                    bool durable, std::string* why);

}  // namespace ncw::files
