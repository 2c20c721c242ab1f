// The live collector: accepts one TCP connection per rank (include/ncclwatch/wire.h), keeps each rank's latest
// Hello + Digest as a FileSnapshot, runs the same analysis as `analyze` (job_view.h) as the digests change, writes
// the report once a stall passes the timeout, asks every rank of the job for a dump, and serves Prometheus /
// OpenMetrics text on an optional HTTP port.
//
// A relay (`ncclwatch-collector relay`, protocol 1.7) may carry a node's ranks on one connection, each rank a channel
// that is handled exactly as its own connection would be.
//
// One thread (epoll) reads the frames and does everything else; the analysis of a large job runs on a second
// (live/analysis_worker.h), so that reading never waits for it. Used by `ncclwatch-collector serve` and, with
// NCCLWATCH_COLLECTOR=auto, inside the shim of global rank 0.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ncw::live {

struct ServerOptions {
    std::string listen = "127.0.0.1:29610";  // HOST:PORT to bind (loopback unless told otherwise); port 0 = any
    std::string metrics_listen;              // HOST:PORT for HTTP /metrics; "" = off
    std::string token;                       // required from every rank when not empty (NCCLWATCH_TOKEN)
    bool metrics_ids = false;                // with a token, /metrics still shows job, communicator and pid ids
    double timeout_s = 60;                   // seconds without progress before a stall is reported
    // The job's ranks say the timeout they run with (protocol 1.6): use theirs (the shortest, as their own watchdogs
    // report at it) rather than timeout_s. `serve` without --timeout.
    bool timeout_from_ranks = false;
    double dead_after_s = 10;       // grace after a rank's last frame (connection lost) before it is DEAD
    std::string out_dir;            // reports go to OUT_DIR/<job>/ (live-report.txt, .json); "" = stdout only
    bool request_dumps = true;      // ask every rank of a job for a dump when a verdict is reached
    double analyze_period_s = 0.5;  // at most this often per job while digests change
    double idle_analysis_s = 1;     // a full analysis (mismatches, stragglers) while nothing is due: at most this often
    // A job whose last analysis took this long or more is judged on a thread of its own, while this one goes on
    // reading frames (live/analysis_worker.h); 0: every analysis there.
    double offload_analysis_s = 0.05;
    bool quiet = false;               // no report on stdout (the in-shim collector logs instead)
    size_t max_connections = 262144;  // beyond this, new connections are closed at once
    double hello_timeout_s = 10;      // a connection that sends no Hello within this is closed
    // Bounds, so that no client (hostile or broken) can grow the collector without limit. The defaults hold 131,072
    // ranks (about 4 KiB each); the collector inside rank 0 (shim/live/collector_endpoint.cpp) sets much smaller ones.
    size_t max_ranks = 262144;  // distinct (job, rank) kept; then the oldest idle job is evicted
    size_t max_jobs = 4096;     // jobs kept; likewise
    double retention_s = 600;   // a job with no rank connected and silent this long is evicted
    // Bytes of a partly received frame per connection: the wire maximum, a relayed frame's (protocol 1.7).
    size_t max_conn_buffer = (1u << 20) + 36;
    size_t max_buffered_total = 64u << 20;  // the same, all connections together (16,384 ranks x 4 KiB)
    double frame_timeout_s = 10;            // a frame must be complete this long after its first byte
    size_t metrics_max_bytes = 16'000'000;  // one /metrics response; series past it are left out (and counted)
    size_t metrics_queue_max = 64u << 20;   // /metrics renderings held for scrapers, all together
    double scrape_timeout_s = 10;           // a scraper that reads nothing of its response this long is closed
    double log_summary_s = 60;              // how often suppressed log lines are summed up
    // Issue 28, point 4: the cost follows what is real (live/admission.h).
    size_t max_job_ranks = 65536;      // ranks of one job, and the most a communicator may claim (more: set aside)
    size_t max_unproven = 4096;        // connections without a Hello, all together: past it the oldest is closed
    size_t max_unproven_per_ip = 256;  // the same, per peer address (not loopback: one address for every process)
    double progress_protect_s = 120;   // a job whose completed counts grew this recently is never evicted for room
    size_t memory_budget = 0;          // estimated bytes of rank state; past it new ranks are refused (0: none)
    std::string only_job;              // accept this job id only ("": any); the collector inside rank 0: its own
    // Issue 45: the estimated bytes of one rank's state (what its connection sent and is kept) and of one job's ranks
    // together; past either, the rank's communicators are dropped and its connection refused, and a job's new ranks
    // are refused. The most a rank can hold is 4,096 communicators of 64 signatures (about 20 MB); 65,536 ranks of
    // 8 communicators of 64 signatures each are 2.1 GB.
    size_t max_rank_bytes = 32u << 20;
    size_t max_job_bytes = size_t(4) << 30;
    // Issue 28, point 5: without a token, a loopback Hello proves the pid it claims (live/peer_proof.h); a relay's
    // ranks by the proof their relay forwards (protocol 1.16), taken only from a relay that is proven itself (issue
    // 45, item 3). `serve` and auto turn it on.
    bool prove_peers = false;
    // Only peers of the collector's own uid and of allowed_uids (auto: the launching job's ranks; `serve` without a
    // token: plus --allow-uid / --allow-user). allow_option: the option a refusal names ("": none to name).
    bool own_uid_only = false;
    std::vector<uint32_t> allowed_uids;
    std::string allow_option;
    std::string ranks_dir;  // the ranks' NCCLWATCH_DIR (auto): a rank file of the claimed pid in its job folder
    // Where log lines go (one line, no trailing newline); empty = stderr with a "ncclwatch-collector: " prefix.
    // Called on the server thread.
    std::function<void(const std::string&)> log;
    // Where the job's news goes (a verdict's or a suspicion's line, a recovery, a report written) when set: the
    // collector inside rank 0, whose ranks' shims say the verdicts themselves, once per node; empty: to `log`.
    std::function<void(const std::string&)> log_news;
};

struct ServerStats {
    uint64_t connections = 0;  // rank connections open now (not /metrics): a relay and each rank it carries count one
    uint64_t ranks_known = 0;  // distinct (job, rank) seen
    uint64_t frames = 0;
    uint64_t bad_frames = 0;  // connections closed for a malformed or refused frame
    uint64_t reports = 0;     // verdict reports written
    uint64_t analyses = 0;    // analysis runs
    uint64_t refused = 0;     // connections closed at once (over max_connections, out of descriptors)
    uint64_t evicted_jobs = 0;
    uint64_t buffered_bytes = 0;   // bytes of partly received frames held now
    uint64_t log_suppressed = 0;   // log lines left out by the rate limits
    uint64_t claims_refused = 0;   // Hellos whose pid, uid or rank file did not prove the claim
    uint64_t unproven_closed = 0;  // connections without a Hello closed to make room for newer ones
    uint64_t state_bytes = 0;      // estimated bytes of rank state held (ServerOptions::memory_budget)
    uint16_t port = 0;             // the bound port (useful with port 0)
    uint16_t metrics_port = 0;
};

class LiveServer {
public:
    explicit LiveServer(ServerOptions opt);
    ~LiveServer();  // stops and joins
    LiveServer(const LiveServer&) = delete;
    LiveServer& operator=(const LiveServer&) = delete;

    // Binds and starts the server thread. false with *err when the address cannot be bound.
    bool start(std::string* err) noexcept;
    void stop() noexcept;
    ServerStats stats() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ncw::live
