// A node's relay (`ncclwatch-collector relay`, protocol 1.7): the node's ranks connect to it as they would to the
// collector (NCCLWATCH_COLLECTOR=127.0.0.1:PORT), and it carries them all on one connection to the collector, each
// rank a channel; what the collector sends a rank comes back the same way. At 16,384 nodes the collector then holds
// 16,384 connections instead of 131,072 ranks' (one descriptor each).
//
// It reads frame headers only, and the payload of a rank's first frame, its Hello, for the pid it claims: the relay
// proves it as the collector proves a direct rank (live/peer_proof.h: the process that holds the rank's socket, its
// user) and forwards what it found before the Hello (RelayPeer, protocol 1.16), since the collector sees only the
// relay's socket. The collector handles each channel's frames exactly as it would that rank's own connection, token
// proofs included, so the relay needs no token and keeps no job state. Its own state is one connection per rank and
// one upstream:
//   - while the upstream is down, ranks that connect are closed at once (their clients retry with backoff); so they
//     are until the collector answered the relay's probe (a RelayClose of channel 0), or did not within a second
//     (older than 1.16: it gets no proofs);
//   - when the upstream goes, every rank's connection goes with it (the collector forgot their Hellos), and the
//     ranks reconnect to a relay that reconnects upstream;
//   - a rank's connection closing is told upstream (RelayClose), as the collector would see a socket close.
// One thread (epoll) does everything.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ncw::live {

struct RelayOptions {
    std::string listen = "127.0.0.1:29612";  // HOST:PORT for the node's ranks; port 0 = any
    std::string upstream;                    // HOST:PORT of the collector (`serve`)
    size_t max_ranks = 1024;                 // rank connections at once; more are closed at once
    // Where log lines go (one line, no trailing newline); empty = stderr with a "ncclwatch-collector: " prefix.
    std::function<void(const std::string&)> log;
};

struct RelayStats {
    uint64_t ranks = 0;              // rank connections open now
    uint64_t frames_up = 0;          // rank frames carried to the collector
    uint64_t frames_down = 0;        // collector frames handed to ranks
    uint64_t upstream_connects = 0;  // connections made to the collector
    bool upstream_up = false;        // connected, and whether it takes proofs known (ranks are taken)
    uint16_t port = 0;               // the bound port (useful with port 0)
};

class Relay {
public:
    explicit Relay(RelayOptions opt);
    ~Relay();  // stops and joins
    Relay(const Relay&) = delete;
    Relay& operator=(const Relay&) = delete;

    // Binds and starts the relay's thread. false with *err when the address cannot be bound or the upstream is not
    // HOST:PORT.
    bool start(std::string* err) noexcept;
    void stop() noexcept;
    RelayStats stats() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ncw::live
