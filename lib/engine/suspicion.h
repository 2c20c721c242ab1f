// Early suspicion: a stall named before the timeout, from the communicator's own rhythm. Each rank's shim keeps a
// running baseline of the gaps between completions while the communicator is busy (shim/watch/gap_baseline.h) and
// publishes its p99 in the comm slot (completion_gap_p99_ns, format 1.4; 0 while there is none). A wait past
// max(kSuspectFactor x that p99, kSuspectFloorS) is *suspected*: the same verdict functions as a stall
// (diagnose_stall) run at that threshold, their verdicts labelled Verdict::suspected. The stall itself is still the
// timeout's. One rule for the shim's watchdog, the live collector and `analyze`.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

inline constexpr double kSuspectFactor = 20.0;  // x the baseline's p99 gap
inline constexpr double kSuspectFloorS = 5.0;   // never sooner: a scheduler hiccup, a page-cache flush

// A communicator init is suspected this long after its first rank entered it while a rank of it has never appeared
// (not launched, crashed, or still busy before init): there is no rhythm before the first completion, and a slow
// bootstrap with every rank present (sockets under load: 11 to 15 s at forty ranks on one GPU) is no suspect. Above
// the start skew of healthy ranks (4 s at forty ranks on one GPU).
inline constexpr double kInitSuspectS = 8.0;

// Seconds without completion after which one rank's wait is suspected, from its baseline; 0 when it has none.
double suspect_after_s(uint64_t gap_p99_ns);

// The communicator's threshold: the largest of its visible ranks' (a suspicion must not come from the rank that
// happens to see the tightest rhythm); 0 when no visible rank has a baseline.
double comm_suspect_after_s(const CommView& view);

// The suspicion of a communicator that diagnose_stall found no stall in at `timeout_s`: its verdicts at the
// communicator's threshold, labelled suspected, each with one evidence line first that says why (init hangs are
// left out: there is no rhythm before the first completion). Empty without a baseline, or when the threshold is not
// below the timeout (timeout_s 0: no timeout, any threshold counts).
std::vector<Verdict> diagnose_suspicion(const CommView& view, uint64_t now_ns, double timeout_s);

// The suspicion of an init that has waited kInitSuspectS for a rank never seen: the INIT_HANG verdict at that
// threshold, labelled suspected. Empty when every rank entered, or when the threshold is not below the timeout; and
// while ranks are still arriving: the last rank seen must have entered kInitSuspectS ago, and at least as long ago as
// the seen ranks took to arrive (a start spread over 5 s under load, one rank 8.5 s late: late, not missing).
std::vector<Verdict> diagnose_init_suspicion(const CommView& view, uint64_t now_ns, double timeout_s);

}  // namespace ncw::verdict
