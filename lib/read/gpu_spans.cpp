// In-collective GPU times from the ring (read/gpu_spans.h).
#include "read/gpu_spans.h"

#include <algorithm>
#include <map>

#include "ncclwatch/format.h"

namespace ncw {

void read_gpu_spans(const RankFile& file, std::vector<CommInfo>& comms, uint64_t max_records) noexcept {
    try {
        std::map<uint64_t, std::map<uint64_t, verdict::GpuSpan>> by_comm;  // comm id -> seq -> span
        for (const auto& c : comms)
            if (c.gpu_source == uint32_t(disk::GpuSource::Profiler) && c.comm_id) by_comm[c.comm_id];
        if (by_comm.empty()) return;
        const uint64_t wt = file.write_ticket();
        const RecordSet set = file.records(wt > max_records ? wt - max_records : 0);
        for (const auto& r : set.records) {
            if (!(r.flags & disk::kFlagGpuTimed) || !r.seq || !disk::is_collective(disk::OpType(r.op))) continue;
            if (!r.t_reached_ns || r.t_done_ns < r.t_reached_ns) continue;  // not done yet (or damaged)
            auto it = by_comm.find(r.comm_id);
            if (it == by_comm.end()) continue;
            it->second[r.seq] = verdict::GpuSpan{r.seq, r.t_done_ns - r.t_reached_ns, r.t_done_ns};
        }
        for (auto& c : comms) {
            auto it = by_comm.find(c.comm_id);
            if (it == by_comm.end() || c.gpu_source != uint32_t(disk::GpuSource::Profiler)) continue;
            std::vector<verdict::GpuSpan> spans;
            spans.reserve(std::min(it->second.size(), kMaxGpuSpans));
            const size_t skip = it->second.size() > kMaxGpuSpans ? it->second.size() - kMaxGpuSpans : 0;
            size_t i = 0;
            for (const auto& [seq, span] : it->second)
                if (i++ >= skip) spans.push_back(span);
            c.gpu_spans = std::move(spans);
        }
    } catch (...) {  // out of memory: no spans, no verdict drawn from them
    }
}

void merge_gpu_spans(std::vector<verdict::GpuSpan>& into, const std::vector<verdict::GpuSpan>& newer) {
    if (newer.empty()) return;
    std::map<uint64_t, verdict::GpuSpan> all;
    for (const auto& s : into) all[s.seq] = s;
    for (const auto& s : newer) all[s.seq] = s;
    into.clear();
    const size_t skip = all.size() > kMaxGpuSpans ? all.size() - kMaxGpuSpans : 0;
    size_t i = 0;
    for (const auto& [seq, span] : all)
        if (i++ >= skip) into.push_back(span);
}

}  // namespace ncw
