// Point-to-point (verdict_p2p.cpp): sends and receives that do not pair, at rest (for find_mismatches) and in a stall
// (for diagnose_stall).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

// Sends whose receive the peer never posted (and the reverse) among ranks otherwise at rest.
std::vector<Verdict> p2p_mismatches(const CommView& view);
// The n-th send of A to B and the n-th receive of B from A that disagree in size: one MISMATCH for the communicator
// (Verdict::pair_sizes), naming the rank in the most such pairs. `open_only`: pairs one side of which still waits.
std::optional<Verdict> p2p_size_mismatch(const CommView& view, bool open_only);
// A cycle of point-to-point waits past the timeout, each rank's oldest open op waiting on a peer whose match is queued
// behind (or blocked in) the peer's own open op: a DEADLOCK naming them (Verdict::cycle, one link per rank).
std::optional<Verdict> p2p_cycle(const CommView& view, uint64_t now_ns, double timeout_s);
// What holds the ranks of a stalled communicator in sends and receives, ahead of any collective they wait in: a cycle,
// a pair's sizes that disagree.
std::vector<Verdict> p2p_blockers(const CommView& view, uint64_t now_ns, double timeout_s);
// Only sends/receives are outstanding past the timeout: pair each pending one with what its peer posted.
// `with_blockers`: p2p_blockers first (false: the caller asked them already).
std::vector<Verdict> diagnose_p2p_stall(const CommView& view, uint64_t now_ns, double timeout_s,
                                        bool with_blockers = true);
// Whether some rank's oldest open send or receive on the communicator is younger than the timeout, and was issued
// within the timeout of a collective stall that began `stalled_for_s` ago: it may yet prove a cycle or a pair that
// holds the stall (ranks that both send first time out moments after the ranks that wait for them in the next
// collective), so the stall is judged once it is past the timeout or done. Bounded: ops issued later do not count.
bool p2p_wait_maturing(const CommView& view, uint64_t now_ns, double timeout_s, double stalled_for_s);
// Whether `r` has a send or receive open (not seen done, not failed) that it issued on `stream` before `t_ns`: an op
// it issued there later, a collective, runs only after it.
bool open_p2p_before(const RankCommState& r, uint64_t stream, uint64_t t_ns);

}  // namespace ncw::verdict
