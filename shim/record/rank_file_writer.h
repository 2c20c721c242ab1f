// Creates this process's rank file in its job folder and maps it: the ring and the comm table live in the mapping,
// so the page cache holds them whatever happens to the process. If the folder or the disk fails us, the same
// structures live in anonymous memory instead (nothing survives a crash then, but the job is not harmed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ncclwatch/format.h"
#include "shim/record/process_identity.h"

namespace ncw {

struct RankFileWriter {
    std::string job_dir;    // <root>/<job_id>
    std::string base_path;  // <job_dir>/rank<R>-<host>-<pid>[.ALT]; files are base_path + ".ncw", ".report.json"...
    std::string path;       // base_path + ".ncw"
    bool file_backed = false;
    uint8_t* base = nullptr;
    size_t size = 0;
    disk::FileHeader* hdr = nullptr;
    disk::CommSlot* comms = nullptr;
    disk::OpRecord* ring = nullptr;
    uint64_t* frames = nullptr;  // bt_depth frames per ring slot, or nullptr
    uint32_t ring_mask = 0;
    uint32_t bt_depth = 0;
    char* env = nullptr;  // the environment region (format 1.1): see FileHeader::env_bytes
    uint32_t env_capacity = 0;
};

// How many names create_rank_file tries when one is taken: rank<R>-<host>-<pid>.ncw, then .1, .2, .3 before ".ncw",
// then unguessable ones (".<8 hex digits>.ncw").
constexpr int kRankFileNameTries = 8;

// Never fails: on any error it logs once (naming the folder and the reason) and returns anonymous memory. A name
// already taken in the folder (planted) is not an error: another is taken, said once, and base_path and path follow
// it. A root or job folder that others can write to, or another user owns, is warned about once (files::folder_risk).
RankFileWriter create_rank_file(const std::string& root_dir, const ProcessIdentity& id, uint32_t ring_capacity,
                                uint32_t bt_depth);

// Appends "NAME=value" entries to the environment region and publishes them. Whole entries only: one that does not
// fit, leaving `keep_free` bytes for later appends, is skipped (counted in the return value). One writer at a time:
// start_runtime, then the environment probe's thread, never concurrently. Not for the hot path.
size_t append_env_entries(RankFileWriter& w, const std::vector<std::string>& entries, size_t keep_free = 0);

// Writes `content` to `path` (ROOT/JOB/NAME: a file beside the rank file) atomically, through a fresh O_EXCL|O_NOFOLLOW
// temporary (mode 0640), fsync and rename, in a job folder never followed if a symlink (read/safe_write.h). true on
// success, else false with *why (path and reason). Not for the hot path.
bool write_file_atomic(const std::string& path, const std::string& content, std::string* why);

}  // namespace ncw
