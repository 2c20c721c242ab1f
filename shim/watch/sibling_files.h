// The rank files of this host's other ranks, as the watchdog reads them: opened once and read with pread (a file that
// shrinks cannot fault us), skipped and named once when one is cut, replaced or changes size under a read.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "read/rank_file.h"
#include "read/snapshot.h"

namespace ncw {

class SiblingFiles {
public:
    explicit SiblingFiles(const std::string& host);

    // Snapshots of the job folder's rank files from this host (file names carry the host: on a shared filesystem
    // every rank reading every other rank's file each second would be N^2 network reads; the whole job is the
    // collector's business). with_spans: with the newest in-collective GPU times of their profiler-timed
    // communicators (read/gpu_spans.h). An empty `job_dir` (no file of our own): none.
    std::vector<FileSnapshot> read(const std::string& job_dir, bool with_p2p, bool with_spans);
    // The open file at `path` (read since), nullptr when it is not open.
    const RankFile* find(const std::string& path) const;

private:
    std::string host_tag_;  // "-<host>-": the part of a rank file's name that says it is from this host
    std::map<std::string, RankFile> files_;
    std::set<std::string> damaged_;  // files already named as cut or changed under a read
};

}  // namespace ncw
