// The verdict engine: pure functions over the per-rank states of one communicator. No I/O, no clocks: the caller
// passes `now`. The shim's watchdog (ranks of its node), the live collector and the offline analyser all call it.
// One file per question: verdict_stall.cpp, verdict_mismatch.cpp, verdict_init.cpp, verdict_p2p.cpp, verdict_drift.cpp;
// what one part asks of another has the header of the part that answers it (verdict_text.h: the words of the
// evidence, verdict_ranks.h: where each rank is, verdict_inferred.h, verdict_mismatch.h, verdict_tie.h,
// verdict_drift.h, verdict_p2p.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ncclwatch/verdict_kinds.h"
#include "read/rank_state.h"  // OpSig, PeerP2p, RankCommState: the engine's input, as the reader builds it

namespace ncw::verdict {

struct CommView {
    uint64_t comm_id = 0;
    int nranks = 0;                    // size of the communicator
    std::vector<RankCommState> ranks;  // the ranks that are visible (may be fewer than nranks)
    std::string clock_note;            // how the ranks' clocks were put on one clock, for the evidence
};

// The kinds and what each means: include/ncclwatch/verdict_kinds.h, the one list.
enum class Kind {
#define NCW_KIND_ENUM(id, name, importance, meaning) id,
    NCW_VERDICT_KINDS(NCW_KIND_ENUM)
#undef NCW_KIND_ENUM
};

// Where a stall sits among the job's stalled communicators (set by the job-level pass, see cascade.h).
enum class Role {
    None,        // the only stall, or not a stall
    Initiating,  // stalled first; others wait because of it
    Cascade,     // waits because a rank is held up in another (initiating) communicator
};

// "NOT_JOINED", "GPU_NOT_REACHED", ...: the name in the JSON and the text reports.
constexpr const char* kind_name(Kind k) {
    switch (k) {
#define NCW_KIND_NAME(id, name, importance, meaning) \
    case Kind::id: return name;
        NCW_VERDICT_KINDS(NCW_KIND_NAME)
#undef NCW_KIND_NAME
    }
    return "UNKNOWN";
}

// The kind's one-line meaning.
constexpr const char* kind_meaning(Kind k) {
    switch (k) {
#define NCW_KIND_MEANING(id, name, importance, meaning) \
    case Kind::id: return meaning;
        NCW_VERDICT_KINDS(NCW_KIND_MEANING)
#undef NCW_KIND_MEANING
    }
    return "";
}

// Where one rank's op stream drifted from the others' (verdict_drift.cpp): from the drift on, its collectives are the
// others' shifted by `shift`, which NCCL paired silently because they had the same shape.
struct Drift {
    int rank = -1;  // the comm rank whose stream drifted
    int shift = 0;  // > 0: it skipped `shift` ops; < 0: it added -shift ops
    // The drift began at one of first_seq..last_seq: same-shaped ops before last_seq cannot tell where exactly.
    uint64_t first_seq = 0;
    uint64_t last_seq = 0;
    bool from_window = false;  // first_seq is the first seq both sides show: it may have begun before it
    uint64_t odd_from = 0;     // its ops odd_from..odd_to are the others' odd_from+shift..odd_to+shift
    uint64_t odd_to = 0;
    size_t aligned = 0;        // ops compared from the drift on, every one equal once shifted
    size_t explained = 0;      // sequence numbers at which the signatures differ unshifted, each explained by the shift
    uint64_t last_differ = 0;  // the last of them
    std::vector<OpSig> ops;    // the ops skipped (the others', from last_seq) or added (its own, from last_seq)
};

struct Verdict {
    Kind kind = Kind::Unknown;
    uint64_t comm_id = 0;
    uint64_t seq = 0;                   // the sequence number the verdict is about
    std::vector<int> culprits;          // comm ranks named as the cause
    std::vector<int> waiting;           // comm ranks waiting in `seq`
    std::vector<int> missing;           // comm ranks not visible (no file)
    OpSig op;                           // what `seq` is, as the waiting (or majority) ranks issued it
    double stalled_for_s = 0;           // how long the oldest waiting rank has waited
    std::string summary;                // the engine's account in plain words, after the headline (report/headline.h)
    std::vector<std::string> evidence;  // one line per supporting fact
    Role role = Role::None;
    uint64_t caused_by_comm = 0;  // Role::Cascade: the initiating communicator
    bool suspected = false;  // early suspicion (engine/suspicion.h): past the baseline's threshold, not the timeout
    // NOT_JOINED / EXTRA_OP found by aligning the op streams: the skip or the extra op, and the drift it caused.
    // Without ranks waiting it is the drift alone (found while the job runs, before or without a stall).
    std::optional<Drift> drift;
    // Follows from another verdict of the same communicator (a drift's later MISMATCH, its final hang): shown after
    // the lead, never the lead; consequence_of names the lead in its words (drift_words).
    bool consequence = false;
    std::string consequence_of;
    // UNKNOWN: comm ranks that completed `seq` while the others are proven inside it (their ops were not paired as
    // numbered: not the transport).
    std::vector<int> completed_it;
    // DEADLOCK: the stalls of the cycle, each waiting for the ranks held in the next (the last in the first).
    struct CycleLink {
        uint64_t comm_id = 0;
        uint64_t seq = 0;
        OpSig op;
        std::vector<int> waiting;         // comm ranks waiting in seq there
        std::vector<int> waiting_global;  // the same, global ranks (-1: not known)
        std::vector<int> for_global;      // the ranks it waits for, which never issued seq there (global ranks)
        // A cycle of point-to-point waits on one communicator (op is a Send or Recv, op.root its peer): the peer's
        // match of it, posted or not, waits behind the peer's own op `behind` (its Send or Recv, root its peer).
        bool match_posted = false;
        OpSig behind;
    };
    std::vector<CycleLink> cycle;
    // MISMATCH of a pair's sizes: the n-th send of `sender` to `receiver` carries a different size from the n-th
    // receive of `receiver` from `sender` (the send's count and dtype in `send`, the receive's in `recv`, both seq n).
    struct PairSizes {
        int sender = -1;
        int receiver = -1;
        OpSig send;
        OpSig recv;
        bool grouped = false;  // both in NCCL groups with ops to other peers: an all-to-all's
        size_t pairs = 1;      // pairs that disagree on the communicator (this one the first)
    };
    std::optional<PairSizes> pair_sizes;
    // A point-to-point MISMATCH / NOT_JOINED whose culprit never posted `op` (op.root: the rank that waits on it),
    // rather than one waiting in `op` itself (a send to a wrong peer).
    bool unposted = false;
    // SETTING_DIFFERS: the difference in the audit's words ("NCCL_ALGO differs across ranks: rank 3 has 'Tree'; ...").
    std::string setting;
    // FAILED: the shortest timeout of the ended ranks' torch process groups (format 1.15), 0 when not known.
    double torch_timeout_s = 0;
};

// A stall is present when some visible rank has issued a collective (or a send/recv, when p2p counts are known) and
// its completion has not advanced for `timeout_s`, or when communicator init has not finished within it. Returns the
// verdicts explaining it (empty if nothing is stalled). Mismatches at the stalled sequence number are reported too.
// `view` must not be a const object at its origin: the counts that peers' completions prove are set in it while the
// rules run and put back before this returns (a copy of every rank's signatures cost more than the rules).
std::vector<Verdict> diagnose_stall(const CommView& view, uint64_t now_ns, double timeout_s);

// Communicator init entered by some ranks and not finished within `timeout_s`: who entered, who finished, who never
// appeared, with the seed checklist (size/master disagreement, a missing set_device, two ranks on one GPU).
// diagnose_stall includes it; exposed for callers that only look at init.
std::vector<Verdict> diagnose_init(const CommView& view, uint64_t now_ns, double timeout_s);

// Ranks inside ncclCommDestroy, ncclCommFinalize or ncclCommAbort of the communicator for `timeout_s` or longer
// (verdict_teardown.cpp): TEARDOWN_HANG naming them, with what they still have outstanding there.
std::vector<Verdict> diagnose_teardown(const CommView& view, uint64_t now_ns, double timeout_s);

// Compares the signatures of the ranks at each sequence number that at least two ranks recorded; reports every
// sequence number where they disagree, naming the odd rank(s) out against the majority; with p2p counts, also sends
// that no receive on the peer matches. Does not need a stall.
std::vector<Verdict> find_mismatches(const CommView& view);

// ---- Drift (verdict_drift.cpp) ----

// Aligns one rank's collectives (`odd`) against the others' (`others`, one signature per seq as most of them issued
// it): if the signatures differ at some seq and, from a point s on, odd's ops equal the others' shifted by k
// (0 < |k| <= kMaxDriftShift), the rank skipped k ops (k > 0) or added -k (k < 0) at s. Claimed only when exactly one
// shift explains every difference, at least kMinDriftDiffers seqs differ unshifted and at least kMinDriftAligned ops
// after the drift match once shifted; otherwise (ties, short windows, a genuine mismatch) nothing.
inline constexpr int kMaxDriftShift = 4;
inline constexpr size_t kMinDriftAligned = 6;
inline constexpr size_t kMinDriftDiffers = 2;
std::optional<Drift> align_streams(const std::vector<OpSig>& odd, const std::vector<OpSig>& others);
// Every rank of the view whose stream drifted from the majority's (at least two other ranks agreeing at each seq).
std::vector<Drift> find_drifts(const CommView& view);
// Whether every live rank has issued far enough past `seq` (kMaxDriftShift + kMinDriftAligned ops) for a drift that
// began at or before it to be found: a MISMATCH at `seq` may be the first sign of one, and the drift, not the
// MISMATCH, is the verdict to lead with.
bool drift_decidable(const CommView& view, uint64_t seq);
// A MISMATCH at `seq` where the job hung at once, nothing after it to align: whether `odd`'s collectives since its last
// proven point of agreement with `other`'s equal `other`'s with one op removed (skipped) or one added among ops of one
// shape, which NCCL pairs silently. Its words ("rank 3 may instead have skipped one AllReduce between #11 and #19:
// ..."), "" when neither (or both: nothing tells them apart) fits with at least one same-shaped op before `seq`.
std::string drift_alternative(const RankCommState& odd, const RankCommState& other, uint64_t seq);
// A NOT_JOINED at `seq` where `odd` issued one op fewer than the others (added: an EXTRA_OP, `odd` waits in `seq`,
// one op more), every op of the window the same shape on every rank: a skip (an added op) NCCL paired silently looks
// the same. Each rank's own pace (the gaps between its issue times, never compared across clocks) locates where: one
// gap of `odd`'s about a step longer (shorter) than the others' at the same seq, standing out from every other. Its
// words ("rank 3 may instead have skipped one AllReduce between its #10 and #11: ..."), "" when no gap stands out or
// fewer than 8 are comparable.
std::string pace_shift(const CommView& view, const RankCommState& odd, uint64_t seq, bool added = false);
// The words of a drift, after "skipped" / "added": what, "AllReduce #23" or "one AllReduce between #14 and #23"; and
// with where: "AllReduce #23: its #23..#32 are the others' #24..#33, which NCCL paired silently".
std::string drift_what(const Drift& d);
std::string drift_pairing(const Drift& d);  // "its #23..#32 are the others' #24..#33, which NCCL paired silently"
std::string drift_words(const Drift& d);    // what: pairing
// One verdict per event: a drift found among the mismatches joins the stall's NOT_JOINED / EXTRA_OP of the same rank
// (or stands alone as the drift's verdict), and the verdicts that follow from it (its MISMATCHes, the hang it ends
// in) are marked consequences of it. Verdicts of one communicator.
void fold_drifts(std::vector<Verdict>& verdicts);
// A drift found while nothing waits: not a stall (it holds nothing up yet).
inline bool drift_only(const Verdict& v) { return v.drift && v.waiting.empty() && v.stalled_for_s <= 0; }

// Human-readable names for the evidence.
std::string describe_op(const OpSig& op);  // "AllReduce #42 (float32, 1048576 elements, sum, stream 0x..., tid 7)"
// A rank's progress on a communicator, saying what its counts are worth: "issued #20, reached #9, completed #8
// (lower bounds: CUDA events, sampled; #11 proven not reached)"; exact counts carry no label. The stall lines of the
// shim's stderr and every report's evidence use it.
std::string progress_words(const RankCommState& r);

}  // namespace ncw::verdict

namespace ncw {

// Importance of a verdict kind, 0 = most important (reported first): the list's third column.
constexpr int verdict_importance(verdict::Kind k) noexcept {
    switch (k) {
#define NCW_KIND_IMPORTANCE(id, name, importance, meaning) \
    case verdict::Kind::id: return importance;
        NCW_VERDICT_KINDS(NCW_KIND_IMPORTANCE)
#undef NCW_KIND_IMPORTANCE
    }
    return 10;
}

// Every kind has an importance of its own, 0 .. n-1: the order of the reports is total.
static_assert([] {
    constexpr verdict::Kind kinds[] = {
#define NCW_KIND_VALUE(id, name, importance, meaning) verdict::Kind::id,
        NCW_VERDICT_KINDS(NCW_KIND_VALUE)
#undef NCW_KIND_VALUE
    };
    constexpr int n = int(sizeof kinds / sizeof kinds[0]);
    bool seen[n] = {};
    for (verdict::Kind k : kinds) {
        const int i = verdict_importance(k);
        if (i < 0 || i >= n || seen[i]) return false;
        seen[i] = true;
    }
    return true;
}());

}  // namespace ncw
