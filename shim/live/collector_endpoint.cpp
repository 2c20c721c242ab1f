// The collector's address and the reconnect backoff (see collector_endpoint.h).
#include "shim/live/collector_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "read/text.h"
#include "shim/base/config.h"

namespace ncw::live_client {

bool resolve_endpoint(const Config& cfg, const char* master_addr, Endpoint& out, std::string* err) {
    if (cfg.collector.empty()) {
        if (err) *err = "NCCLWATCH_COLLECTOR is not set";
        return false;
    }
    if (cfg.collector != "auto") return parse_endpoint(cfg.collector, out, err, EndpointKind::Collector);
    if (!master_addr || !*master_addr) {
        if (err) *err = "NCCLWATCH_COLLECTOR=auto needs MASTER_ADDR (the host of global rank 0), which is not set";
        return false;
    }
    out.host = master_addr;
    // An IPv6 MASTER_ADDR may come in brackets.
    if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
        out.host = out.host.substr(1, out.host.size() - 2);
    out.port = uint16_t(cfg.collector_port);
    return true;
}

bool auto_loopback_only(const Config& cfg) { return cfg.collector == "auto" && cfg.token.empty(); }

bool is_this_host(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
    bool local = false;
    for (addrinfo* a = res; a && !local; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
            in->sin_port = 0;
            local = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        } else if (a->ai_family == AF_INET6) {
            auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ai_addr);
            in6->sin6_port = 0;
            local = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        } else {
            continue;
        }
        // Only an address of this machine can be bound (port 0: any; nothing is sent).
        if (!local) {
            const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            if (fd >= 0) {
                local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
                close(fd);
            }
        }
    }
    freeaddrinfo(res);
    return local;
}

bool apply_loopback_rule(const Config& cfg, bool runs_server, Endpoint& ep, std::string* why) {
    if (!auto_loopback_only(cfg)) return true;
    if (!runs_server && !is_this_host(ep.host)) {
        if (why)
            *why =
                "NCCLWATCH_COLLECTOR=auto without NCCLWATCH_TOKEN listens on loopback only, on rank 0's host "
                "(MASTER_ADDR " +
                text::echo(ep.host) +
                "), and this rank is on another host; set NCCLWATCH_TOKEN (the same on every rank) to watch every "
                "host live";
        return false;
    }
    ep.host = "127.0.0.1";
    return true;
}

double Backoff::next_delay_s() {
    const double d = std::min(max_s_, initial_s_ * double(1ull << std::min(attempts_, 30)));
    if (attempts_ < 64) ++attempts_;
    std::uniform_real_distribution<double> half(d / 2, d);
    return half(rng_);
}

#ifdef NCW_HAVE_LIVE_SERVER
live::ServerOptions embedded_server_options(const Config& cfg, const Endpoint& ep, const std::string& job_id,
                                            int world_size) {
    live::ServerOptions opt;
    // With a token, bound to MASTER_ADDR, the address the job already uses to reach rank 0's host: every rank can
    // reach it, and nothing is exposed on interfaces the job does not use.
    // Without a token, loopback only, as `serve` (auto_loopback_only).
    const std::string host = auto_loopback_only(cfg) ? "127.0.0.1" : ep.host;
    opt.listen = format_endpoint(Endpoint{host, ep.port});
    // /metrics on the same address (the same loopback rule): NCCLWATCH_METRICS_PORT, else the next port (MASTER_PORT+2
    // by default; none past 65535).
    const int metrics_port = cfg.metrics_port > 0 ? cfg.metrics_port : ep.port < 65535 ? ep.port + 1 : 0;
    if (metrics_port > 0) opt.metrics_listen = format_endpoint(Endpoint{host, uint16_t(metrics_port)});
    opt.token = cfg.token;
    opt.timeout_s = cfg.timeout_sec;
    opt.dead_after_s = cfg.dead_after_sec;
    opt.out_dir = cfg.dir;  // reports land in <dir>/<job>/, the job folder
    opt.quiet = true;
    // Inside the training process: the same bounds, far tighter (one job's ranks, a scrape now and then).
    opt.max_connections = 20000;
    opt.max_ranks = 20000;
    opt.max_jobs = 4;
    opt.retention_s = 120;
    opt.max_buffered_total = 16u << 20;
    opt.metrics_max_bytes = 4u << 20;
    opt.metrics_queue_max = 8u << 20;
    opt.hello_timeout_s = 5;
    opt.frame_timeout_s = 5;
    opt.scrape_timeout_s = 5;
    // Issue 28, point 4: inside the training process, what the launching job is and nothing more: its job id, its
    // WORLD_SIZE ranks, within 64 MB of rank state; connections without a Hello few.
    opt.only_job = job_id;
    if (world_size > 0) opt.max_job_ranks = size_t(world_size);
    opt.max_ranks = std::min(opt.max_ranks, opt.max_job_ranks);
    opt.memory_budget = 64u << 20;
    opt.max_unproven = 256;
    opt.max_unproven_per_ip = 64;
    // Point 5: without a token, a rank proves its pid, runs as this process's user and has its rank file in the job
    // folder (its NCCLWATCH_DIR, ours).
    opt.prove_peers = cfg.token.empty();
    opt.own_uid_only = cfg.token.empty();
    if (cfg.token.empty()) opt.ranks_dir = cfg.dir;
    return opt;
}
#endif

}  // namespace ncw::live_client
