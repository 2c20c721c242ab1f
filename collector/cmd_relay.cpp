// `ncclwatch-collector relay`: a node's relay (live/relay.h) in the foreground until SIGINT/SIGTERM.
#include <fmt/format.h>
#include <signal.h>
#include <time.h>

#include <memory>
#include <string>

#include "cli.h"
#include "live/relay.h"
#include "read/endpoint.h"

namespace ncw::cli {

namespace {

int run_relay(live::RelayOptions& opt) {
    // The relay's thread inherits this mask, so only sigtimedwait below sees SIGINT/SIGTERM.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    live::Relay relay(opt);
    std::string err;
    if (!relay.start(&err)) {
        fmt::print(stderr, "{}: relay: {}\n", kProg, clean(err));
        return 2;
    }
    fmt::print("{}: relaying {}:{} to the collector at {}\n", kProg, opt.listen.substr(0, opt.listen.rfind(':')),
               relay.stats().port, clean(opt.upstream));
    fflush(stdout);
    for (;;) {
        const int sig = sigwaitinfo(&stop_signals, nullptr);
        if (sig == SIGINT || sig == SIGTERM) {
            fmt::print(stderr, "{}: relay: stopping ({})\n", kProg, sig == SIGINT ? "SIGINT" : "SIGTERM");
            break;
        }
    }
    relay.stop();
    return 0;
}

}  // namespace

Command add_relay(CLI::App& sub) {
    auto o = std::make_shared<live::RelayOptions>();
    add_endpoint(sub, "--to", "the collector (`serve`) to carry the node's ranks to (required)", EndpointKind::Connect,
                 o->upstream)
        ->required();
    add_endpoint(sub, "--listen",
                 "where the node's ranks connect (default 127.0.0.1:29612; port 0\npicks a free one, printed at start)",
                 EndpointKind::Listen, o->listen);
    add_value(
        sub, "--max-ranks", "N", "rank connections at once; more are closed at once (default 1024)",
        [o](const std::string& v) { return parse_count(v, o->max_ranks, true); },
        "a count (digits, optionally K, M or G)");
    sub.footer(
        R"(Run one per node, and give that node's ranks NCCLWATCH_COLLECTOR=127.0.0.1:PORT: the relay carries them all to
the collector on one connection (live protocol 1.7), so a collector for 16,384 nodes holds 16,384 connections, not
one per rank. It reads frame headers only, and each rank's Hello for the pid it claims: it proves that pid as the
collector proves a direct rank's (the process must hold the rank's socket) and forwards what it found, the
process's pid, user and group (live protocol 1.16; not to an older collector, which does not answer the relay's
probe). The collector judges each rank as if it had connected itself, token proofs included (the relay needs no
token); without a token it takes them only from a relay of a user it takes. While the collector is unreachable,
ranks that connect are closed at once and retry; when it goes, the node's rank connections go with it and come back
with it.
SIGINT or SIGTERM stops it. Exit status: 0 stopped, 2 usage error or the listener could not start.)");
    return [o] { return run_relay(*o); };
}

}  // namespace ncw::cli
