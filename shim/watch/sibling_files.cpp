#include "shim/watch/sibling_files.h"

#include "read/gpu_spans.h"
#include "shim/base/log.h"
#include "shim/record/process_identity.h"

namespace ncw {

SiblingFiles::SiblingFiles(const std::string& host) : host_tag_("-" + sanitize_component(host) + "-") {}

std::vector<FileSnapshot> SiblingFiles::read(const std::string& job_dir, bool with_p2p, bool with_spans) {
    std::vector<FileSnapshot> out;
    if (job_dir.empty()) return out;
    for (const std::string& p : list_rank_files(job_dir)) {
        if (p.find(host_tag_, p.rfind('/')) == std::string::npos) continue;
        auto it = files_.find(p);
        if (it == files_.end()) {
            RankFile f;
            if (!f.open(p)) continue;  // a file still being created, or not ours to read: try next time
            // A live writer's file always has its full size: a cut one is a copy or a wreck, not a rank's evidence
            // now. Named once, like one that changes under us below, and tried again next poll.
            if (f.truncated()) {
                if (damaged_.insert(p).second)
                    log().warn("skipping rank file {}: {}", p, f.warnings().empty() ? "truncated" : f.warnings()[0]);
                continue;
            }
            it = files_.emplace(p, std::move(f)).first;
        }
        FileSnapshot s = snapshot(it->second, with_p2p);
        if (!s.ok) {
            // Truncated, regrown or replaced under us: skipped, reopened next poll, named once per file.
            if (damaged_.insert(p).second) log().warn("skipping rank file {}: {}", p, s.error);
            files_.erase(it);
            continue;
        }
        if (with_spans) read_gpu_spans(it->second, s.comms, kLiveSpanRecords);
        out.push_back(std::move(s));
    }
    return out;
}

const RankFile* SiblingFiles::find(const std::string& path) const {
    auto it = files_.find(path);
    return it == files_.end() ? nullptr : &it->second;
}

}  // namespace ncw
