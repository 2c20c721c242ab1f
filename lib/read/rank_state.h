// What one rank's file says about one communicator, in the form the verdict engine (engine/verdict.h) takes it. The
// reader builds it (read/rank_file.h: to_rank_comm_state) and the engine consumes it, so it lives below both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ncclwatch/format.h"
#include "read/cow_vector.h"
#include "read/py_stacks.h"
#include "read/reader_fields.h"

namespace ncw::verdict {

// One collective as a rank issued it (from CommSlot::recent or from the ring): the one signature struct of the
// reader, the live protocol and the engine, generated from format_fields.h's NCW_SIG_FIELDS.
struct OpSig {
    NCW_SIG_FIELDS(NCW_READER_MEMBER)
};

// PeerP2p's one list of fields, in the order a State frame carries them (read/wire.cpp): X(type, name, wire kind,
// initial value). peer: the peer's comm rank; t_oldest_*_pending_ns: the issue time of the oldest op of that direction
// not completed (0: none).
#define NCW_PEER_P2P_FIELDS(X) NCW_PEER_P2P_FIELDS_1_6(X) NCW_PEER_P2P_FIELDS_1_8(X) NCW_PEER_P2P_FIELDS_1_13(X)
#define NCW_PEER_P2P_FIELDS_1_6(X)                \
    X(int, peer, i32, -1)                         \
    X(uint64_t, sends_issued, u64, 0)             \
    X(uint64_t, sends_completed, u64, 0)          \
    X(uint64_t, recvs_issued, u64, 0)             \
    X(uint64_t, recvs_completed, u64, 0)          \
    X(uint64_t, t_oldest_send_pending_ns, u64, 0) \
    X(uint64_t, t_oldest_recv_pending_ns, u64, 0)
// Live protocol 1.8 (a State's peer block ends with them; zero from an older rank: not known): the highest send and
// receive its GPU is known to have started (a record's GPU start: NCCL's profiler, or a sampled CUDA event).
#define NCW_PEER_P2P_FIELDS_1_8(X)     \
    X(uint64_t, sends_reached, u64, 0) \
    X(uint64_t, recvs_reached, u64, 0)
// Live protocol 1.13 (before the op window, below): the median time the rank's GPU spent inside its newest sends to and
// receives from the peer that NCCL's profiler timed (kFlagGpuTimed: the op's own first channel start to last channel
// stop), and over how many (0: none known). A receive's time is mostly its wait for the peer's send: a pipeline's slow
// stage is the one its peers wait longest for (engine/straggler.h).
#define NCW_PEER_P2P_FIELDS_1_13(X)      \
    X(uint64_t, sends_gpu_ns, u64, 0)    \
    X(uint64_t, sends_gpu_timed, u64, 0) \
    X(uint64_t, recvs_gpu_ns, u64, 0)    \
    X(uint64_t, recvs_gpu_timed, u64, 0)
// GPU-timed ops per direction that read_p2p takes the median over, the newest.
inline constexpr size_t kP2pGpuSamples = 32;

// One send or receive as a rank issued it, for pairing the n-th send of A to B with the n-th receive of B from A by
// size, and for telling what a pending one is queued behind (its stream and group). The live protocol 1.13 carries
// them in a State's peer block (read/wire.cpp), in this order: X(type, name, wire kind).
#define NCW_P2P_OP_FIELDS(X)     \
    X(uint64_t, seq, u64)        \
    X(uint64_t, count, u64)      \
    X(uint64_t, stream, u64)     \
    X(uint64_t, t_issue_ns, u64) \
    X(uint32_t, group_id, u32)   \
    X(uint8_t, dtype, u8)        \
    X(uint8_t, send, u8)         \
    X(uint8_t, state, u8)
struct P2pOp {
    // state's bits: what is known of the op.
    enum : uint8_t { kReturned = 1, kReached = 2, kDone = 4, kFailed = 8 };
#define NCW_P2P_OP_MEMBER(type, name, kind) type name = 0;
    NCW_P2P_OP_FIELDS(NCW_P2P_OP_MEMBER)
#undef NCW_P2P_OP_MEMBER
    uint64_t bytes() const { return count * disk::dtype_size(dtype); }  // 0: a dtype this reader does not know
    bool done() const { return state & kDone; }
};
// The newest sends and the newest receives kept per peer (PeerP2p::ops): enough to pair the ops a stall waits in, and
// the last ones before it, with the peer's.
inline constexpr size_t kP2pOpWindow = 4;

// Point-to-point traffic of one rank with one peer on one communicator, from the rank's ring. p2p sequence numbers
// count per (comm, peer, direction), so "issued" is the highest seq seen, "reached" the highest its GPU started and
// "completed" the highest that completed.
struct PeerP2p {
#define NCW_PEER_P2P_MEMBER(type, name, kind, init) type name = init;
    NCW_PEER_P2P_FIELDS(NCW_PEER_P2P_MEMBER)
#undef NCW_PEER_P2P_MEMBER
    // The newest kP2pOpWindow sends and receives with the peer, in seq order per direction (empty: not known, an
    // older rank's State).
    std::vector<P2pOp> ops;
    const P2pOp* op(bool send, uint64_t seq) const {
        for (const auto& o : ops)
            if (bool(o.send) == send && o.seq == seq) return &o;
        return nullptr;
    }
};

// One collective's time inside NCCL on one rank's GPU (format 1.4: a collective's ring record flagged kFlagGpuTimed,
// whose t_reached_ns / t_done_ns are the GPU's own start and end of the op, from NCCL's profiler). gpu_ns is a
// duration on the rank's own clock, so it compares across ranks and hosts; t_end_ns is an instant on that clock,
// never moved by a time base: compare it only with the same rank's other ends (the gaps between its collectives).
struct GpuSpan {
    uint64_t seq = 0;
    uint64_t gpu_ns = 0;    // t_done_ns - t_reached_ns
    uint64_t t_end_ns = 0;  // t_done_ns, on the rank's own clock
};

// What one rank's file says about one communicator.
struct RankCommState {
    int comm_rank = -1;
    int global_rank = -1;
    std::string host;
    int64_t pid = 0;
    int cuda_dev = -1;          // the GPU this rank's communicator uses
    std::string pci_bus_id;     // of that GPU
    std::string gpu_uuid;       // and its UUID, "GPU-..." (format 1.6; "" unknown)
    std::string file;           // where this came from, for the evidence
    int local_rank = -1;        // LOCAL_RANK as the launcher set it (-1: unknown)
    int nranks_declared = 0;    // the communicator size this rank passed to init (0: unknown)
    int world_size = -1;        // WORLD_SIZE of the process (-1: unknown)
    int local_world_size = -1;  // LOCAL_WORLD_SIZE of the process (-1: unknown): the job's ranks on its host
    std::string master_addr;    // MASTER_ADDR:MASTER_PORT of the process ("" unknown)

    // Liveness of the process.
    bool alive = true;          // process exists (same host: kill(pid, 0)) and its heartbeat is fresh
    bool exited_clean = false;  // the process ran its exit handlers (often exit code 0 after leaving a loop early)
    double heartbeat_age_s = 0;

    // Progress, as collective sequence numbers (0 = none yet).
    uint64_t issued = 0;
    uint64_t returned = 0;  // calls returned (coll_returned): an op issued after it is still inside its NCCL call
    uint64_t reached = 0;
    uint64_t completed = 0;
    bool gpu_tracking = false;  // reached/completed come from GPU events; otherwise completion means "call returned"
    // Format 1.4: where they come from (disk::GpuSource; None in older files, where gpu_tracking means events) and
    // what they prove. Exact: every op's GPU start and end was seen (NCCL's profiler), so ops after `reached` are
    // proven not reached and ops after `completed` proven not completed. Otherwise both are lower bounds; an op is
    // proven not reached only at or after `unreached` (a pending event recorded before it), and proven not completed
    // only at or after `uncompleted` (a pending event recorded right after it); 0: none proven.
    uint32_t gpu_source = 0;
    bool progress_exact = false;
    uint64_t unreached = 0;
    uint64_t uncompleted = 0;
    uint64_t completion_gap_p99_ns = 0;  // the shim's running baseline of the gap between completions (0: none yet)
    uint64_t t_last_issue_ns = 0;
    uint64_t t_last_progress_ns = 0;
    uint64_t stall_since_ns = 0;  // 0 = this rank is not stalled
    int32_t async_error = 0;
    // Format 1.5: calls that returned an error. A failed collective is outstanding with an error, never completed:
    // `completed` stays below it, and first_failed_seq says which one (0: none, or a p2p op).
    uint64_t ops_failed = 0;
    uint64_t first_failed_seq = 0;
    int32_t first_failed_result = 0;
    uint64_t t_first_failed_ns = 0;
    // Format 1.5: how the process ended (disk::EndKind; 0: running, or no trace: SIGKILL), its exit code or signal,
    // and when (on the view's clock).
    uint32_t end_kind = 0;
    int32_t end_status = 0;
    uint64_t end_mono_ns = 0;
    // Format 1.12: the name of the thread that took the end path ("pt_nccl_watchdg": torch's NCCL watchdog raised
    // SIGABRT), and of the thread whose ncclCommAbort came first in the process, with its time (the view's clock; 0:
    // none).
    std::string end_thread;
    std::string abort_thread;
    uint64_t abort_mono_ns = 0;
    // Format 1.13: the last SIGTERM / SIGINT the program's own handler took and went on after, and when (the view's
    // clock; 0: none).
    int32_t absorbed_signal = 0;
    uint64_t absorbed_mono_ns = 0;
    // Format 1.15: the lines the process printed on stderr (the node's ranks that share one share a budget).
    uint32_t stderr_lines = 0;
    // Format 1.9: the process's last words (an uncaught Python exception: "torch.OutOfMemoryError: ... (train.py:88)"),
    // when they were noted (the view's clock), and whether in the main thread (the process is then on its way out).
    std::string last_words;
    uint64_t last_words_mono_ns = 0;
    bool last_words_main = false;
    // Format 1.9: this process has been inside a teardown of this communicator since then (the view's clock; 0:
    // not), in ncclCommDestroy, ncclCommFinalize or ncclCommAbort (teardown_op, disk::OpType).
    uint64_t teardown_since_ns = 0;
    uint32_t teardown_op = 0;
    uint32_t comm_state = 0;  // disk::CommState
    int32_t blocking = -1;    // the communicator's config.blocking (-1: not given, NCCL's default: blocking)
    uint64_t t_init_start_ns = 0;
    uint64_t t_init_done_ns = 0;  // 0 = init has not returned

    CowVector<OpSig> recent;  // recent collective signatures, any order; shared with the snapshot's
    // The newest collectives' in-collective GPU times, by seq (read/gpu_spans.h); empty without NCCL's profiler.
    std::vector<GpuSpan> gpu_spans;

    // Point-to-point counts per peer (only when the caller read the ring: p2p_known).
    bool p2p_known = false;
    bool p2p_wrapped = false;   // the ring dropped older records: a peer absent from `p2p` may have had traffic
    uint64_t p2p_as_of_ns = 0;  // when the counts stood at least (the view's clock; 0: not known)
    std::vector<PeerP2p> p2p;

    // This rank's clock relative to the view's common clock: add clock_offset_ns to its timestamps. The uncertainty
    // is what the offset may be wrong by; < 0 means unknown (wall clocks synchronised by NTP, say).
    int64_t clock_offset_ns = 0;
    double clock_uncertainty_s = -1;

    // Format 1.5: the process's Python stacks at their last capture (read/py_stacks.h; nullptr: none), what the
    // capture is (disk::PyStacksStatus, disk::PyStacksReason), when (on this rank's clock, like the others), and
    // the region's text where it is a message rather than stacks (unavailable on this CPython).
    std::shared_ptr<const py::Stacks> py_stacks;
    uint32_t py_stacks_status = 0;
    uint32_t py_stacks_reason = 0;
    uint64_t py_stacks_mono_ns = 0;
    std::string py_stacks_note;
    // Format 1.8: the held capture, the first the process took for a stall (format.h), kept after the one above
    // replaced it; a report picks the capture taken while the rank was where its verdict says (report/headline.h).
    py::Capture py_held;
};

}  // namespace ncw::verdict
