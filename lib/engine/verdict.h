// The verdict engine: pure functions over the per-rank states of one communicator. No I/O, no clocks: the caller
// passes `now`. The shim's watchdog (ranks of its node), the live collector and the offline analyser all call it.
// One file per question: verdict_stall.cpp, verdict_mismatch.cpp, verdict_init.cpp, verdict_p2p.cpp (verdict_detail.h
// has what they share).
#pragma once

#include <cstdint>
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
