// Point-to-point (verdict_p2p.cpp): sends and receives that do not pair, at rest (for find_mismatches) and in a stall
// (for diagnose_stall).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/verdict.h"

namespace ncw::verdict {

// Sends whose receive the peer never posted (and the reverse) among ranks otherwise at rest.
std::vector<Verdict> p2p_mismatches(const CommView& view);
// Only sends/receives are outstanding past the timeout: pair each pending one with what its peer posted.
std::vector<Verdict> diagnose_p2p_stall(const CommView& view, uint64_t now_ns, double timeout_s);

}  // namespace ncw::verdict
