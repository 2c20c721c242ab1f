// The shim's live digest client (NCCLWATCH_COLLECTOR): one TCP connection per process to the live collector
// (include/ncclwatch/wire.h), on a thread of its own. It sends a Hello, then a Digest of every communicator's progress
// whenever it changed (at most every NCCLWATCH_DIGEST_MS) and a KeepAlive each second otherwise, and a Bye at clean
// exit. A DumpRequest from the collector bumps FileHeader::dump_request, so the watchdog writes the dump.
//
// The socket is non-blocking and at most one frame is ever pending: when the collector is slow the stale digest is
// dropped and the latest sent once the socket drains. Training threads never touch any of it; a collector that is
// absent, slow or gone costs them nothing. Reconnects back off exponentially (0.5 s .. 30 s, with jitter); a Reject
// stops reconnecting.
//
// NCCLWATCH_COLLECTOR=auto: the process of global rank 0 also runs the live collector (lib/live/live_server.h) on
// MASTER_ADDR and the auto port, from this thread; every rank, 0 included, connects to MASTER_ADDR:port.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "read/wire.h"

namespace ncw {

struct Runtime;
struct Config;
struct RankFileWriter;

// Starts the client thread when cfg.collector is set (no-op otherwise). Called once, from start_runtime, after the
// watchdog has started.
void start_digest_client(Runtime& rt);
// At clean exit (the runtime's atexit path): sends Bye, waits briefly (never more than ~200 ms) and closes.
void stop_digest_client();
// In a forked child: the parent's thread and socket are not ours.
void digest_client_forget_after_fork();

namespace live_client {

// ---- Pure parts (unit-tested) ----

struct Endpoint {
    std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
    uint16_t port = 0;
};

// "host:port" or "[v6addr]:port". false with *err naming what is wrong.
bool parse_endpoint(const std::string& s, Endpoint& out, std::string* err);

// Where the client connects (and, for auto on rank 0, where the collector binds), from the resolved config and the
// launcher's MASTER_ADDR. false with *err when there is nothing to connect to (auto without MASTER_ADDR, say).
bool resolve_endpoint(const Config& cfg, const char* master_addr, Endpoint& out, std::string* err);

// The auto port: NCCLWATCH_COLLECTOR_PORT when set, else MASTER_PORT+1, else 29610.
int derive_auto_port(int configured_port, const char* master_port);

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

// The Digest of a snapshot: every communicator with its most recent kMaxDigestSigs signatures.
wire::Digest make_digest(const HeaderInfo& h, std::vector<CommInfo> comms, uint64_t now_mono_ns);

// Whether two encoded Digest frames differ in anything but their send time (the first 8 payload bytes).
bool digest_changed(const std::vector<uint8_t>& prev_frame, const std::vector<uint8_t>& next_frame);

// What the client asks of its own state: a snapshot of this process's rank file, through RankFile when the file is on
// disk, straight from the mapping when the shim fell back to anonymous memory.
class SelfReader {
public:
    explicit SelfReader(const RankFileWriter& w);
    HeaderInfo header() const;
    std::vector<CommInfo> comms() const;
    const std::string& error() const { return error_; }

private:
    RankFile file_;
    std::string error_;
};

// Outgoing bytes of one connection: at most one frame pending. offer() refuses a new frame while an older one is not
// fully written, so the caller keeps only "something changed" and rebuilds the newest digest later.
class SendSlot {
public:
    bool busy() const { return sent_ < buf_.size(); }
    // Takes `frame` when idle (true); false when a frame is still pending.
    bool offer(std::vector<uint8_t>&& frame);
    // Writes what it can to a non-blocking socket. false on a dead connection (*err says why).
    bool flush(int fd, std::string* err);
    void clear() {
        buf_.clear();
        sent_ = 0;
    }

private:
    std::vector<uint8_t> buf_;
    size_t sent_ = 0;
};

}  // namespace live_client
}  // namespace ncw
