// Format 1.4: each collective's time inside NCCL on its rank's own GPU (verdict::GpuSpan), from the ring records the
// shim flags kFlagGpuTimed (t_reached_ns / t_done_ns: the GPU's own start and end of the op, from NCCL's profiler).
// The reader fills them here (offline from the file, live from its own file for the digests, or from the siblings'
// files in the watchdog); the engine's GPU straggler rule (engine/straggler.h) judges them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "read/rank_file.h"

namespace ncw {

// Spans kept per communicator, the newest: the window the straggler rule looks at (= disk::kRecentSigs).
inline constexpr size_t kMaxGpuSpans = 64;
// Ring records a live reader (watchdog, digest client) looks through, newest first: 128 KB per read.
inline constexpr uint64_t kLiveSpanRecords = 1024;

// Sets each comm's gpu_spans from the newest `max_records` ring records of `file`: collectives of that comm flagged
// kFlagGpuTimed with both times, t_done_ns >= t_reached_ns; one per seq, ordered by seq, the newest kMaxGpuSpans. Reads
// the ring only when some comm takes its GPU times from NCCL's profiler (gpu_source Profiler); comms that do not are
// left as they are.
void read_gpu_spans(const RankFile& file, std::vector<CommInfo>& comms, uint64_t max_records) noexcept;

// A live collector's history: `newer` (a digest's, ordered by seq) merged into `into` (ordered by seq); at one seq
// the newer span wins; the newest kMaxGpuSpans are kept.
void merge_gpu_spans(std::vector<verdict::GpuSpan>& into, const std::vector<verdict::GpuSpan>& newer);

}  // namespace ncw
