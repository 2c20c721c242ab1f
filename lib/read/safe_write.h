// Writing a file into a job folder that someone else may have prepared: the shim's .report.json and .dump.json
// (NCCLWATCH_DIR/<job>/) and the live collector's live-report.txt/.json (OUT/<job>/, <job> named by a client).
// Nothing planted there is followed:
// - the parent (NCCLWATCH_DIR, --out) is the operator's choice: created as needed (0750), a symlink there followed;
// - the job folder is created with 0750 and opened with O_NOFOLLOW|O_DIRECTORY, so a symlink (or a file) in its
//   place is refused;
// - the text goes to a temporary file of a fresh, unguessable name, created with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC
//   and mode 0640 (whatever the umask allows of it), then renamed over the final name: a symlink at the final name is
//   replaced as an entry, never written through.
// A folder others can write to (without the sticky bit), or that another user owns, lets them replace or remove what
// we leave there, and plant names ahead of us: folder_risk says so, for the caller to warn once; nothing is refused.
// Not for the hot path (syscalls): the watchdog, exit paths and the collector's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncw::files {

// A job id as one folder component of at most `max` bytes (letters, digits, '.', '_', '-'; never "", "." or ".."):
// as it is where it already is one, else with "-" and 8 hex digits of its hash at the end, so that ids the
// replacement or the cut would make one ("run-ä" / "run-ö", "a/b" / "a_b") stay apart.
std::string job_component(const std::string& id, size_t max = 100);

// mkdir -p of `path` with `mode` (symlinks along it followed); "" on success, else the reason.
std::string make_dirs(const std::string& path, unsigned mode);

// Creates (0750) and opens PARENT/NAME as a folder without following a symlink there; NAME is one component.
// Returns the descriptor (O_CLOEXEC), or -1 with *why set (errno kept). With `risks`, what folder_risk finds in
// PARENT and in PARENT/NAME, joined by "; " ("" when both are the caller's alone).
int open_job_dir(const std::string& parent, const std::string& name, std::string* why, std::string* risks = nullptr);

// What makes the folder open at `dir_fd` (named `path` in the words) unsafe for the files we keep there, with what to
// do about it: others (group or world) may write there and the sticky bit is not set, so anyone of them can rename,
// replace or remove our files; or a user other than this one and root owns it, and can do the same. "" when neither.
// errno is kept.
std::string folder_risk(int dir_fd, const std::string& path);

// 64 bits no one can guess ahead (the kernel's random source, else the clock, the pid and a counter mixed): for names
// someone may try to plant before we create them.
uint64_t unguessable_bits();

// Writes `text` to NAME in the folder `dir_fd` through a fresh temporary file (see above) and a rename; with
// `durable` the data is fsync'ed before the rename. true on success, else false with *why (the temporary removed).
bool write_file_at(int dir_fd, const std::string& name, const std::string& text, bool durable, std::string* why);

// Both: PARENT/JOB/NAME. *why names the path and the reason. With `job_risk`, what folder_risk finds in PARENT/JOB.
bool write_job_file(const std::string& parent, const std::string& job, const std::string& name, const std::string& text,
                    bool durable, std::string* why, std::string* job_risk = nullptr);

}  // namespace ncw::files
