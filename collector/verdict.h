// The verdict engine: pure functions over the per-rank states of one communicator. No I/O, no clocks: the caller
// passes `now`. The shim's watchdog (ranks of its node), the live collector and the offline analyser all call it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ncw::verdict {

// One collective as a rank issued it (from CommSlot::recent or from the ring).
struct OpSig {
    uint64_t seq = 0;
    uint8_t op = 0;  // disk::OpType
    uint8_t dtype = 0;
    int32_t redop = 0;
    int32_t root = -1;
    uint64_t count = 0;
    uint64_t t_issue_ns = 0;
    uint32_t tid = 0;
    uint64_t stream = 0;
    uint8_t flags = 0;  // disk::RecordFlags (kFlagSampledOut: no GPU events of its own)
};

// Point-to-point traffic of one rank with one peer on one communicator, from the rank's ring. p2p sequence numbers
// count per (comm, peer, direction), so "issued" is the highest seq seen and "completed" the highest that completed.
struct PeerP2p {
    int peer = -1;  // comm rank of the peer
    uint64_t sends_issued = 0;
    uint64_t sends_completed = 0;
    uint64_t recvs_issued = 0;
    uint64_t recvs_completed = 0;
    uint64_t t_oldest_send_pending_ns = 0;  // issue time of the oldest send not completed (0: none)
    uint64_t t_oldest_recv_pending_ns = 0;
};

// What one rank's file says about one communicator.
struct RankCommState {
    int comm_rank = -1;
    int global_rank = -1;
    std::string host;
    int64_t pid = 0;
    int cuda_dev = -1;        // the GPU this rank's communicator uses
    std::string pci_bus_id;   // of that GPU
    std::string file;         // where this came from, for the evidence
    int local_rank = -1;      // LOCAL_RANK as the launcher set it (-1: unknown)
    int nranks_declared = 0;  // the communicator size this rank passed to init (0: unknown)
    int world_size = -1;      // WORLD_SIZE of the process (-1: unknown)
    std::string master_addr;  // MASTER_ADDR:MASTER_PORT of the process ("" unknown)

    // Liveness of the process.
    bool alive = true;          // process exists (same host: kill(pid, 0)) and its heartbeat is fresh
    bool exited_clean = false;  // the process ran its exit handlers (often exit code 0 after leaving a loop early)
    double heartbeat_age_s = 0;

    // Progress, as collective sequence numbers (0 = none yet).
    uint64_t issued = 0;
    uint64_t reached = 0;
    uint64_t completed = 0;
    bool gpu_tracking = false;  // reached/completed come from GPU events; otherwise completion means "call returned"
    uint64_t t_last_issue_ns = 0;
    uint64_t t_last_progress_ns = 0;
    uint64_t stall_since_ns = 0;  // 0 = this rank is not stalled
    int32_t async_error = 0;
    uint32_t comm_state = 0;  // disk::CommState
    uint64_t t_init_start_ns = 0;
    uint64_t t_init_done_ns = 0;  // 0 = init has not returned

    std::vector<OpSig> recent;  // recent collective signatures, any order

    // Point-to-point counts per peer (only when the caller read the ring: p2p_known).
    bool p2p_known = false;
    bool p2p_wrapped = false;  // the ring dropped older records: a peer absent from `p2p` may have had traffic
    std::vector<PeerP2p> p2p;

    // This rank's clock relative to the view's common clock: add clock_offset_ns to its timestamps. The uncertainty
    // is what the offset may be wrong by; < 0 means unknown (wall clocks synchronised by NTP, say).
    int64_t clock_offset_ns = 0;
    double clock_uncertainty_s = -1;
};

struct CommView {
    uint64_t comm_id = 0;
    int nranks = 0;                    // size of the communicator
    std::vector<RankCommState> ranks;  // the ranks that are visible (may be fewer than nranks)
    std::string clock_note;            // how the ranks' clocks were put on one clock, for the evidence
};

enum class Kind {
    NotJoined,      // rank(s) never issued the sequence number the others wait in
    GpuNotReached,  // all issued it, but some rank's GPU has not reached it (busy with earlier work)
    StuckInNccl,    // all reached it, none completed it
    Mismatch,       // ranks disagree on op/dtype/count/root/redop at one sequence number
    Dead,           // a rank's process is gone while others wait for it
    AsyncError,     // NCCL reported an error on a rank
    Unknown,        // a stall whose culprit is not visible from here (ranks missing)
    ExtraOp,        // a rank issued an operation no other rank issued: it is ahead, the others are not "behind"
    InitHang,       // communicator init entered by some ranks and not finished (or never entered by others)
    Straggler,      // not a hang: a rank consistently last to arrive at collectives
};

// Where a stall sits among the job's stalled communicators (set by the job-level pass, see cascade.h).
enum class Role {
    None,        // the only stall, or not a stall
    Initiating,  // stalled first; others wait because of it
    Cascade,     // waits because a rank is held up in another (initiating) communicator
};

const char* kind_name(Kind k);  // "NOT_JOINED", "GPU_NOT_REACHED", ...

struct Verdict {
    Kind kind = Kind::Unknown;
    uint64_t comm_id = 0;
    uint64_t seq = 0;                   // the sequence number the verdict is about
    std::vector<int> culprits;          // comm ranks named as the cause
    std::vector<int> waiting;           // comm ranks waiting in `seq`
    std::vector<int> missing;           // comm ranks not visible (no file)
    OpSig op;                           // what `seq` is, as the waiting (or majority) ranks issued it
    double stalled_for_s = 0;           // how long the oldest waiting rank has waited
    std::string summary;                // one line in plain words
    std::vector<std::string> evidence;  // one line per supporting fact
    Role role = Role::None;
    uint64_t caused_by_comm = 0;  // Role::Cascade: the initiating communicator
};

// A stall is present when some visible rank has issued a collective (or a send/recv, when p2p counts are known) and
// its completion has not advanced for `timeout_s`, or when communicator init has not finished within it. Returns the
// verdicts explaining it (empty if nothing is stalled). Mismatches at the stalled sequence number are reported too.
std::vector<Verdict> diagnose_stall(const CommView& view, uint64_t now_ns, double timeout_s);

// Communicator init entered by some ranks and not finished within `timeout_s`: who entered, who finished, who never
// appeared, with the seed checklist (size/master disagreement, a missing set_device, two ranks on one GPU).
// diagnose_stall includes it; exposed for callers that only look at init.
std::vector<Verdict> diagnose_init(const CommView& view, uint64_t now_ns, double timeout_s);

// Compares the signatures of the ranks at each sequence number that at least two ranks recorded; reports every
// sequence number where they disagree, naming the odd rank(s) out against the majority; with p2p counts, also sends
// that no receive on the peer matches. Does not need a stall.
std::vector<Verdict> find_mismatches(const CommView& view);

// Human-readable names for the evidence.
std::string describe_op(const OpSig& op);  // "AllReduce #42 (float32, 1048576 elements, sum, stream 0x..., tid 7)"

}  // namespace ncw::verdict
