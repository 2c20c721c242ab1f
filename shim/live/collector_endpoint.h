// Where the live digest client connects and when it tries again: the collector's address from NCCLWATCH_COLLECTOR
// (HOST:PORT, [IPv6]:PORT, or auto: MASTER_ADDR and the auto port), and the reconnect backoff. Pure: no I/O, besides
// is_this_host (for the client's own thread) and start_embedded_collector (embedded_collector.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "read/endpoint.h"

#ifdef NCW_HAVE_LIVE_SERVER
#include "live/live_server.h"
#endif

namespace ncw {

struct Config;

namespace live_client {

using ncw::Endpoint;
using ncw::parse_endpoint;

// Where the client connects (and, for auto on rank 0, where the collector binds), from the resolved config and the
// launcher's MASTER_ADDR. false with *err when there is nothing to connect to (auto without MASTER_ADDR, say).
bool resolve_endpoint(const Config& cfg, const char* master_addr, Endpoint& out, std::string* err);

// The loopback rule, the same as `serve`'s: without NCCLWATCH_TOKEN the collector that auto runs in rank 0 listens on
// 127.0.0.1 only (there is no insecure option for it), so the ranks of rank 0's host reach it there and the ranks of
// other hosts are not watched live.
bool auto_loopback_only(const Config& cfg);

// Whether `host` (a name or an address) is an address of this machine: loopback, or one a socket can bind. A DNS
// lookup: on the client's thread only, never a training thread.
bool is_this_host(const std::string& host);

// Applies the loopback rule on the client's thread: under it, rank 0 (`runs_server`) and the ranks of its host connect
// to 127.0.0.1 (ep.host is changed); a rank of another host gets false with *why (it sends no digests). true and ep
// unchanged when the rule does not apply.
bool apply_loopback_rule(const Config& cfg, bool runs_server, Endpoint& ep, std::string* why);

#ifdef NCW_HAVE_LIVE_SERVER
// The live collector that NCCLWATCH_COLLECTOR=auto runs inside rank 0's process, bound to `ep` (MASTER_ADDR and the
// auto port; 127.0.0.1 and the port without a token: auto_loopback_only), /metrics on the same address and the
// next port (none past 65535; the collector runs without them when that port is taken), with the server's bounds
// far tighter than `serve`'s (one job's ranks, a scrape now and then). The caller sets the log sink.
// With the launching job's id and WORLD_SIZE (0: unknown), it takes that job's ranks only.
live::ServerOptions embedded_server_options(const Config& cfg, const Endpoint& ep, const std::string& job_id = "",
                                            int world_size = 0);
#endif

// NCCLWATCH_COLLECTOR=auto on global rank 0: starts that collector on `ep`, running until the process exits (other
// ranks may still report after we exit). false, logged, when it cannot (no live server in this build, address taken).
bool start_embedded_collector(const Config& cfg, const Endpoint& ep, const std::string& job_id = "",
                              int world_size = 0);

// Exponential reconnect delays with "equal jitter": attempt n waits in [d/2, d] with d = min(max, initial * 2^n), so
// ranks that lost the collector together do not all return in the same instant.
class Backoff {
public:
    explicit Backoff(double initial_s = 0.5, double max_s = 30.0, uint64_t seed = 0)
        : initial_s_(initial_s), max_s_(max_s), rng_(seed) {}
    double next_delay_s();
    void reset() { attempts_ = 0; }
    int attempts() const { return attempts_; }

private:
    double initial_s_, max_s_;
    int attempts_ = 0;
    std::mt19937_64 rng_;
};

}  // namespace live_client
}  // namespace ncw
