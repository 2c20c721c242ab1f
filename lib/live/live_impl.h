// The live collector's inside, shared by its parts: the server state (LiveServer::Impl) and what it keeps per job,
// rank and connection. One thread runs all of it (live_server.h). Its methods are defined by part:
//   live_conns.cpp    connections and frames: accept, read, write, the frame dispatch, HTTP
//   live_ranks.cpp    the ranks' Hello and Digest as snapshots on the collector's clock (clock offsets)
//   live_reports.cpp  analysis as digests change, the report (text, JSON, dump requests), /metrics
//   live_limits.cpp   the bounds: buffer budgets, deadlines, job eviction, rate-limited logging
//   live_server.cpp   the loop, start and stop
#pragma once

#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/job_view.h"
#include "live/live_auth.h"
#include "live/live_server.h"
#include "read/time_base.h"
#include "read/wire.h"
#include "report/metrics.h"

namespace ncw::live {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxOutBuffer = 4u << 20;  // a rank that does not read its DumpRequests is dropped past this
constexpr size_t kMaxHttpRequest = 8 * 1024;
constexpr size_t kMaxTableRows = 256;  // per communicator in the text report (the JSON has every rank)
constexpr uint64_t kTickNs = 100'000'000;
constexpr uint64_t kIdleAnalysisNs = 1'000'000'000;  // full analysis (mismatches) at most this often

inline uint64_t mono_ns() { return time_base::clock_ns(CLOCK_MONOTONIC); }

// One-way minimum filter: offset = min over the last kWindow samples of (receive time - send time), i.e. the rank's
// clock moved onto ours plus the smallest one-way delay seen. The spread of the window bounds how noisy it is.
struct OffsetFilter {
    static constexpr size_t kWindow = 64;
    std::array<int64_t, kWindow> samples{};
    size_t count = 0;
    size_t next = 0;
    bool exact = false;  // same boot as the collector: the clocks are one clock, offset 0

    void add(int64_t v) {
        samples[next] = v;
        next = (next + 1) % kWindow;
        count = std::min(count + 1, kWindow);
    }
    int64_t offset() const {
        if (exact || !count) return 0;
        return *std::min_element(samples.begin(), samples.begin() + count);
    }
    int64_t spread() const {
        if (exact || !count) return 0;
        auto [lo, hi] = std::minmax_element(samples.begin(), samples.begin() + count);
        return *hi - *lo;
    }
};

struct Job;

struct RankState {
    std::string key;
    uint64_t conn_id = 0;  // 0 = not connected
    uint64_t last_frame_ns = 0;
    bool bye = false;
    OffsetFilter clock;
    uint64_t rank_start_mono_ns = 0;  // as the rank sent it (its own clock)
};

struct Job {
    std::string id;
    std::vector<FileSnapshot> snaps;  // parallel to ranks; timestamps on the collector's clock
    std::vector<RankState> ranks;
    std::unordered_map<std::string, size_t> index;
    bool dirty = false;
    uint64_t last_analysis_ns = 0;
    std::set<std::string> reported;  // verdicts already reported (kind, comm, seq, culprits)
    uint64_t stall_reported_ns = 0;  // when the active stall was first reported; 0 = none
    // From the latest analysis: per communicator, the comm ranks named as culprits and as waiting.
    std::map<uint64_t, std::pair<std::set<int>, std::set<int>>> named;
    std::set<uint64_t> suspected;  // communicators suspected in the latest analysis (engine/suspicion.h)
    std::set<std::pair<uint64_t, std::string>> verdicts;  // (communicator, kind name) of the latest analysis
    std::set<std::string> suspect_said;                   // suspicions already logged (kind, comm, seq, culprits)
    uint64_t dump_requests = 0;
    double last_analysis_cost_s = 0;
    bool write_failure_logged = false;
    bool py_stacks_news = false;  // a rank's Python stacks arrived since the last report (protocol 1.4)
};

struct Conn {
    uint64_t id = 0;
    int fd = -1;
    bool http = false;
    bool hello = false;
    bool close_after_flush = false;
    std::string peer;  // "ip:port"
    std::string ip;
    uint64_t opened_ns = 0;
    wire::FrameReader reader;
    std::vector<uint8_t> out;
    size_t out_pos = 0;
    bool want_out = false;
    std::string http_in;
    // A /metrics response streams from a rendering shared by the scrapers that asked within the same second.
    std::shared_ptr<const std::string> body;
    size_t body_pos = 0;
    uint64_t out_progress_ns = 0;  // last time the peer took bytes (or the response was queued)
    size_t buffered = 0;           // bytes of a partly received frame, as counted in Impl::buffered_total
    uint64_t frame_start_ns = 0;   // first byte of the partly received frame; 0 = none
    Job* job = nullptr;
    size_t rank = 0;
    // A Hello waiting for its Proof (the collector requires a token): the Hello, the proof it must come with, and
    // its payload's size as counted in Impl::buffered_total.
    std::unique_ptr<wire::Hello> pending;
    Digest32 expected{};
    size_t pending_bytes = 0;
};

// Log lines per cause (a fixed set of names from the code, never from the network): a burst, then a steady trickle;
// what is left out is counted and summed up now and then, so no cause can exhaust another's budget.
struct LogLimiter {
    static constexpr double kBurst = 10;
    static constexpr double kPerSecond = 0.2;
    struct Bucket {
        double tokens = kBurst;
        uint64_t last_ns = 0;
        uint64_t suppressed = 0;
    };
    std::map<std::string, Bucket> buckets;
    uint64_t last_summary_ns = 0;
    uint64_t suppressed_total = 0;

    bool allow(const std::string& cause, uint64_t now);
    // "cause: n, ..." of what was left out since the last summary; "" when nothing was.
    std::string take_summary();
};

// Binds HOST:PORT ("[v6]:port", "*:port"; port 0 = any) and listens; the bound port in port_out. -1 with *err.
int listen_on(const std::string& addr, uint16_t& port_out, std::string* err);

struct LiveServer::Impl {
    ServerOptions opt;
    int epfd = -1;
    int listen_fd = -1;
    int metrics_fd = -1;
    int wake_fd = -1;
    int spare_fd = -1;  // closed to accept-and-drop when out of descriptors
    std::thread thread;
    std::atomic<bool> stopping{false};
    bool started = false;

    std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
    uint64_t next_conn_id = 16;  // ids below are the listening sockets
    std::map<std::string, std::unique_ptr<Job>> jobs;
    size_t ranks_known = 0;
    size_t rank_conns = 0;      // conns that are not HTTP
    size_t buffered_total = 0;  // partly received frames, all connections
    LogLimiter limiter;
    std::vector<std::weak_ptr<const std::string>> renders;  // /metrics renderings handed out, alive while streamed
    std::weak_ptr<const std::string> fresh_render[2];       // per metrics::Format
    uint64_t fresh_render_ns[2] = {0, 0};
    uint64_t boot = 0;
    std::string hostname;
    uint64_t request_id = 0;
    std::string pseudonym_key;  // /metrics names jobs and communicators by a keyed hash when a token is set
    double last_analysis_s = 0;
    std::vector<uint8_t> scratch;

    std::atomic<uint64_t> st_connections{0}, st_ranks{0}, st_frames{0}, st_bad{0}, st_reports{0}, st_analyses{0},
        st_refused{0}, st_evicted{0}, st_buffered{0}, st_suppressed{0};
    uint16_t port = 0, metrics_port = 0;

    static constexpr uint64_t kListenId = 1, kMetricsId = 2, kWakeId = 3;

    // ---- connections and frames (live_conns.cpp) ----

    void log(const std::string& line);
    void set_events(Conn& c, bool want_out);
    void close_conn(uint64_t id);
    void bad(Conn& c, const char* cause, const std::string& reason);
    // Returns false when the connection was closed.
    bool flush(Conn& c);
    bool queue(Conn& c, const std::vector<uint8_t>& bytes);
    void accept_all(int lfd, bool http);
    void on_readable(Conn& c);
    // false: the connection was closed (or is closing).
    bool on_frame(Conn& c, const wire::FrameHeader& h);
    void on_http(Conn& c, const uint8_t* p, size_t n);
    void respond(Conn& c, const char* status, const std::string& body);
    void respond(Conn& c, const char* status, std::shared_ptr<const std::string> body,
                 const char* content_type = "text/plain; charset=utf-8");

    // ---- the bounds (live_limits.cpp) ----

    // Rate-limited per cause (LogLimiter); `cause` is one of the code's own names.
    void log_limited(const char* cause, const std::string& line);
    void log_peer(const Conn& c, const char* cause, const std::string& reason);
    // After a read: counts the partly received frame against the budgets (false: the connection was closed) and
    // restarts its deadline when a frame completed.
    bool account(Conn& c, uint64_t now, bool completed_frame);
    // Deadlines (Hello, frame, scraper), eviction of finished and silent jobs, the log summary.
    void sweep(uint64_t now);
    uint64_t sweep_period_ns() const;
    void evict_job(const std::string& id);
    // Room for one more rank (of a new job when keep is null): evicts the idle job heard from least recently,
    // never `keep`. false: none is idle.
    bool make_room(const Job* keep);
    // The body of one /metrics response: shared with scrapers that asked within a second, and bounded in total
    // (metrics_queue_max) by handing out the newest rendering still held instead of a new one.
    std::shared_ptr<const std::string> metrics_body(uint64_t now, metrics::Format format);

    // ---- the ranks' Hello and Digest, on the collector's clock (live_ranks.cpp) ----

    // A Hello: challenged when a token is required (1.2), refused when it comes from an older peer then, else
    // admitted. on_proof: the answer to the challenge, checked in constant time. admit: the (job, rank) slot, never
    // taken from a connection that is open and alive (refused, retry later). false: the connection is closing.
    bool on_hello(Conn& c, const wire::FrameHeader& h, wire::Hello& m, uint64_t now);
    bool on_proof(Conn& c, const wire::Proof& m, uint64_t now);
    bool admit(Conn& c, wire::Hello& m, uint64_t now);
    bool refuse(Conn& c, const std::string& reason, bool retry = false);
    void drop_pending(Conn& c);
    // The analysis runs in live mode on this boot's clock: the header is made to look like a file of this boot
    // (so nothing is rebased through wall clocks), with the start moved by the measured offset. A rank on another
    // host keeps its host name, so job_view never probes its pid here; one on another boot of a host with our name
    // is renamed, for the same reason.
    void put_header_on_our_clock(const RankState& r, HeaderInfo& h);
    void on_digest(Conn& c, wire::Digest& m, uint64_t now);
    void take_py_stacks(Job& job, HeaderInfo& h, wire::PyStacksBlock& b, int64_t d);

    // ---- analysis, reports and /metrics (live_reports.cpp) ----

    // Whether something in the job may already be a verdict the analysis would report: an outstanding collective
    // without progress for the timeout, an init running that long, a flagged stall or error, a connection lost past
    // the grace. One pass over the snapshots, far cheaper than the analysis, so a stall is caught on the first tick
    // after it passes the timeout while the full analysis (for mismatches) runs less often.
    bool something_due(const Job& job, uint64_t now) const;
    void maybe_analyze(uint64_t now);
    void analyze_job(Job& job, uint64_t now);
    std::string clock_line(const Job& job) const;
    // with_new_stacks: the same verdicts again, now with the ranks' Python stacks (no dump requests).
    void report(Job& job, const Analysis& a, uint64_t now, bool with_new_stacks = false);
    std::string render_metrics(metrics::Format format);

    // ---- the loop (live_server.cpp) ----

    void run() noexcept;
    void close_all();
};

}  // namespace ncw::live
