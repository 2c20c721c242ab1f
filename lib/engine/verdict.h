// The verdict engine: pure functions over the per-rank states of one communicator. No I/O, no clocks: the caller
// passes `now`. The shim's watchdog (ranks of its node), the live collector and the offline analyser all call it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "read/rank_state.h"  // OpSig, PeerP2p, RankCommState: the engine's input, as the reader builds it

namespace ncw::verdict {

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
