// The live collector (see live_server.h): one class, LiveServer::Impl, run by one thread (a large job's analysis runs
// on live/analysis_worker.h's, on snapshots shared with it: own_snapshot copies before a write). It is declared first,
// with what it keeps per job, rank and connection; its methods follow by part:
//   connections and frames: accept, read, write, the frame dispatch, HTTP /metrics requests
//   the ranks' Hello and Digest, kept as snapshots on the collector's clock (clock offsets)
//   analysis as digests change, the report (worded in report/report_text.h), dump requests, /metrics
//   the bounds: buffer budgets, deadlines, job eviction, rate-limited logging (log_limiter.h)
//   the loop, start and stop
#include "live/live_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/job_view.h"
#include "engine/suspicion.h"
#include "live/admission.h"
#include "live/analysis_worker.h"
#include "live/http_request.h"
#include "live/live_auth.h"
#include "live/log_limiter.h"
#include "live/net.h"
#include "live/offset_filter.h"
#include "live/peer_proof.h"
#include "ncclwatch/format.h"
#include "ncclwatch/version.h"
#include "read/gpu_spans.h"
#include "read/safe_write.h"
#include "read/time_base.h"
#include "read/wire.h"
#include "report/analysis_json.h"
#include "report/headline.h"
#include "report/metrics.h"
#include "report/report_json.h"
#include "report/report_text.h"

namespace ncw::live {

using json = nlohmann::json;
using report::clean;

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxOutBuffer = 4u << 20;  // a rank that does not read its DumpRequests is dropped past this
constexpr size_t kMaxRelayChannels = 4096;  // ranks on one relay's connection (a node has tens)
constexpr size_t kMaxHttpRequest = 8 * 1024;
constexpr uint64_t kTickNs = 100'000'000;
// Ranks send a frame at least each second; a healthy collector reads it within milliseconds. Behind by more than
// this, what it holds is that old: a rank that has moved on still looks behind, so nothing is reported until it
// catches up.
constexpr int64_t kBehindNs = 1'000'000'000;
constexpr uint64_t kLagWindowNs = 250'000'000;        // "lately", for how late frames are read
constexpr uint64_t kUnprovenGraceNs = 1'000'000'000;  // a connection without a Hello is evicted only past this age

inline uint64_t mono_ns() { return time_base::clock_ns(CLOCK_MONOTONIC); }

struct RankState {
    std::string key;
    uint64_t conn_id = 0;  // 0 = not connected
    uint64_t last_frame_ns = 0;
    // When its connection closed. A process's sockets close as it dies, so it was alive until then: a rank that died
    // without its last State frame (SIGKILL, or the frame lost) departed here, not at its last keep-alive up to a
    // second before, which would put it beside ranks the launcher's teardown ended later.
    uint64_t closed_ns = 0;
    bool bye = false;
    OffsetFilter clock;
    uint64_t rank_start_mono_ns = 0;  // as the rank sent it (its own clock)
    size_t est_bytes = 0;             // its snapshot's estimated size, as counted in Impl::state_bytes

    // The last moment the rank is known alive: now while connected, else its last frame or its connection's close.
    uint64_t alive_at(uint64_t now) const { return conn_id ? now : std::max(last_frame_ns, closed_ns); }
    // A frame read at `now` that the rank sent at `sent` (its clock; 0: not said). Returns how late it was read: its
    // delay past the smallest in the clock's window.
    int64_t heard(uint64_t now, uint64_t sent) {
        last_frame_ns = now;
        if (!sent) return 0;
        const int64_t delay = int64_t(now - sent);
        if (!clock.exact) clock.add(delay);
        return std::max<int64_t>(0, delay - clock.offset());
    }
};

struct Job {
    std::string id;
    uint64_t serial = 0;  // this Job among every one made (a task's result is for it, not a later job of its id)
    // Parallel to ranks; timestamps on the collector's clock. Shared with the analysis thread while it judges the
    // job (in_analysis): a snapshot it holds (shared[i]) is copied before the loop writes to it (own_snapshot).
    std::vector<std::shared_ptr<FileSnapshot>> snaps;
    std::vector<uint8_t> shared;
    bool in_analysis = false;
    // Digests read while the analysis thread judges the job, applied once it is done: the frequent frame is not
    // made to copy a snapshot (copies and their page faults would slow the thread and this one alike).
    std::vector<std::pair<size_t, wire::Digest>> deferred;
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
    // Per communicator whose latest verdict names culprits (report::culprit_verdict): its kind and who, where, in
    // which op (/metrics' ncclwatch_stall_culprit_info).
    std::map<uint64_t, std::pair<std::string, report::CulpritLabels>> culprits;
    std::set<std::string> suspect_said;  // suspicions already logged (kind, comm, seq, culprits)
    uint64_t dump_requests = 0;
    double last_analysis_cost_s = 0;
    bool write_failure_logged = false;
    bool folder_risk_said = false;  // its report folder others can write to (files::folder_risk), said once
    bool py_stacks_news = false;    // a rank's Python stacks arrived since the last report (protocol 1.4)
    // Protocol 1.6: a rank's process ended by an exit or a crash since the last analysis: judged at once, at timeout
    // 0, so that a death is reported before the launcher's teardown ends the others.
    bool end_news = false;
    double ranks_timeout_s = 0;  // the shortest timeout the job's ranks run with (protocol 1.6 Hello); 0: unknown
    bool due_judged = false;     // the latest analysis ran with something due (maybe_analyze)
    // The environment audit (engine/env_audit.h) of the processes and GPUs as they stood at audited_gen; facts_gen
    // counts their changes (a Hello, a rank's communicators or GPU changed). Audited again only after one.
    uint64_t facts_gen = 1, audited_gen = 0;
    std::vector<audit::Finding> audit;
    uint64_t last_progress_ns = 0;  // a digest showed more completed operations (admission.h: never evicted for room)
    bool set_aside_said = false;    // a communicator claiming more ranks than a job may have was logged
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
    // Protocol 1.7, a relay's connection (`ncclwatch-collector relay`): it carries ranks as channels, each rank a Conn
    // of its own without a socket (fd -1, `via` naming the relay), judged exactly as its own connection would be;
    // what is queued for it goes out wrapped in a Relay frame.
    bool relay = false;
    std::unordered_map<uint32_t, uint64_t> channels;  // on a relay: channel -> the relayed rank's Conn
    uint64_t via = 0;                                 // on a relayed rank: its relay's Conn
    uint32_t channel = 0;
    // Issue 28, point 5: who the peer is (peer_proof.h), for a loopback peer without a token.
    bool loopback = false;
    bool uid_known = false;
    uint32_t peer_uid = 0;
    int relay_own_user = -1;  // on a relay: whether it runs as the collector's user (-1: not asked yet)
};

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
    uint64_t jobs_made = 0;
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
        st_refused{0}, st_evicted{0}, st_buffered{0}, st_suppressed{0}, st_claims{0}, st_unproven_closed{0},
        st_state_bytes{0};
    // Issue 28, points 4, 5 and 8 (admission.h, peer_proof.h).
    Unproven unproven;  // connections without a Hello
    PidScanBudget scan_budget;
    size_t state_bytes = 0;  // the ranks' estimated state (opt.memory_budget)
    uint32_t own_uid = 0;
    KeyedLimiter wrong_token_named;  // a wrong token that claims a known job: named once a minute per (job, rank)
    uint16_t port = 0, metrics_port = 0;

    static constexpr uint64_t kListenId = 1, kMetricsId = 2, kWakeId = 3;

    // ---- connections and frames ----

    void log(const std::string& line);
    void news(const std::string& line);  // opt.log_news, else log
    void set_events(Conn& c, bool want_out);
    void close_conn(uint64_t id);
    // A relayed rank's Conn closed by us: its relay forgets the channel and closes the rank's socket (RelayClose),
    // unless the relay said first that it closed.
    void tell_relay_closed(uint64_t via, uint32_t channel, uint64_t id);
    void bad(Conn& c, const char* cause, const std::string& reason);
    // Returns false when the connection was closed.
    bool flush(Conn& c);
    bool queue(Conn& c, const std::vector<uint8_t>& bytes);
    void accept_all(int lfd, bool http);
    void on_readable(Conn& c);
    // false: the connection was closed (or is closing).
    bool on_frame(Conn& c, const wire::FrameHeader& h);
    // A relay's frame: a rank's frame under its channel (the channel's Conn made at its first frame), or a channel
    // closed. false: the relay's connection was closed.
    bool on_relay_frame(Conn& c, const wire::FrameHeader& h);
    void on_http(Conn& c, const uint8_t* p, size_t n);
    void respond(Conn& c, const char* status, const std::string& body);
    void respond(Conn& c, const char* status, std::shared_ptr<const std::string> body,
                 const char* content_type = "text/plain; charset=utf-8");

    // ---- the ranks' Hello and Digest, on the collector's clock ----

    // A Hello: challenged when a token is required (1.2), refused when it comes from an older peer then, else
    // admitted. on_proof: the answer to the challenge, checked in constant time. admit: the (job, rank) slot, never
    // taken from a connection that is open and alive (refused, retry later). false: the connection is closing.
    bool on_hello(Conn& c, const wire::FrameHeader& h, wire::Hello& m, uint64_t now);
    bool on_proof(Conn& c, const wire::Proof& m, uint64_t now);
    bool admit(Conn& c, wire::Hello& m, uint64_t now);
    bool refuse(Conn& c, const std::string& reason, bool retry = false);
    // Without a token, who a loopback peer is (peer_proof.h): its pid, its user, its rank file. false: refused.
    bool prove_hello(Conn& c, const wire::Hello& m, uint64_t now);
    // A rank's snapshot changed: its estimate in state_bytes follows.
    void account_rank(Job& job, size_t i);
    void drop_pending(Conn& c);
    // The analysis runs in live mode on this boot's clock: the header is made to look like a file of this boot
    // (so nothing is rebased through wall clocks), with the start moved by the measured offset. A rank on another
    // host keeps its host name, so job_view never probes its pid here; one on another boot of a host with our name
    // is renamed, for the same reason.
    void put_header_on_our_clock(const RankState& r, HeaderInfo& h);
    void on_digest(Conn& c, wire::Digest& m, uint64_t now);
    void apply_digest(Job& job, size_t rank, wire::Digest& m);
    void on_state(Conn& c, wire::State& m, uint64_t now);
    // How late the frames read lately were: the latest of this window and the last. Frames wait in the sockets
    // until the one thread reads them, so when those read now are late, every rank's unread ones are: the collector
    // is behind for all of them, also for a rank whose last frame read was on time.
    int64_t lag_now = 0, lag_before = 0;
    uint64_t lag_window_ns = 0;
    void roll_lag(uint64_t now) {
        if (now - lag_window_ns < kLagWindowNs) return;
        lag_before = now - lag_window_ns < 2 * kLagWindowNs ? lag_now : 0;
        lag_now = 0;
        lag_window_ns = now;
    }
    void note_lag(int64_t lag, uint64_t now) {
        roll_lag(now);
        lag_now = std::max(lag_now, lag);
    }
    int64_t read_lag(uint64_t now) {
        roll_lag(now);
        return std::max(lag_now, lag_before);
    }
    double timeout_of(const Job& job) const {
        return opt.timeout_from_ranks && job.ranks_timeout_s > 0 ? job.ranks_timeout_s : opt.timeout_s;
    }
    void take_py_stacks(Job& job, HeaderInfo& h, wire::PyStacksBlock& b, int64_t d);

    // ---- analysis, reports and /metrics ----

    // Whether something in the job may already be a verdict the analysis would report: an outstanding collective
    // without progress for the timeout, an init running that long, a flagged stall or error, a connection lost past
    // the grace. One pass over the snapshots, far cheaper than the analysis, so a stall is caught on the first tick
    // after it passes the timeout while the full analysis (for mismatches) runs less often.
    bool something_due(const Job& job, uint64_t now) const;
    void maybe_analyze(uint64_t now);
    // false: not run (the analysis thread is busy with another); the next tick tries again.
    bool analyze_job(Job& job, uint64_t now);
    // What the loop does with an analysis, inline or from the analysis thread: the verdicts, the report.
    void judged(Job& job, const Analysis& a, uint64_t now, bool death, double cost_s);
    // A finished task of the analysis thread, if any (the loop is woken for it).
    void take_analysis();
    void keep_audit(Job& job, Analysis& a, uint64_t facts_gen);
    // The rank's snapshot, to write to: copied first while the analysis thread holds it.
    FileSnapshot& own_snapshot(Job& job, size_t i);
    std::unique_ptr<AnalysisWorker> worker;
    // How the ranks' clocks were put on ours (exact, estimated, the widest spread), for the report's clock line.
    report::LiveClocks clocks(const Job& job) const;
    // with_new_stacks: the same verdicts again, now with the ranks' Python stacks (no dump requests).
    void report(Job& job, const Analysis& a, uint64_t now, bool with_new_stacks = false);
    std::string render_metrics(metrics::Format format);

    // ---- the bounds ----

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

    // ---- the loop, start and stop ----

    void run() noexcept;
    void close_all();
};

// ---- connections and frames: accept, read, write, the frame dispatch, HTTP /metrics requests ----

void LiveServer::Impl::log(const std::string& line) {
    try {
        if (opt.log)
            opt.log(line);
        else
            fprintf(stderr, "ncclwatch-collector: %s\n", line.c_str());
    } catch (...) {
    }
}

void LiveServer::Impl::news(const std::string& line) {
    if (!opt.log_news) return log(line);
    try {
        opt.log_news(line);
    } catch (...) {
    }
}

void LiveServer::Impl::set_events(Conn& c, bool want_out) {
    if (c.fd < 0 || c.want_out == want_out) return;
    epoll_event ev{};
    ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
    c.want_out = want_out;
}

void LiveServer::Impl::close_conn(uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (c.job && c.rank < c.job->ranks.size() && c.job->ranks[c.rank].conn_id == c.id) {
        c.job->ranks[c.rank].conn_id = 0;
        c.job->ranks[c.rank].closed_ns = mono_ns();
        c.job->dirty = true;
    }
    if (c.fd >= 0) {
        epoll_ctl(epfd, EPOLL_CTL_DEL, c.fd, nullptr);
        close(c.fd);
    }
    unproven.remove(id);
    buffered_total -= std::min(buffered_total, c.buffered + c.pending_bytes);
    st_buffered = buffered_total;
    if (!c.http) --rank_conns;
    const uint64_t via = c.via;
    const uint32_t channel = c.channel;
    std::vector<uint64_t> relayed;
    for (const auto& [ch, cid] : c.channels) relayed.push_back(cid);
    conns.erase(it);
    st_connections = rank_conns;
    for (const uint64_t r : relayed) close_conn(r);  // a relay gone takes its ranks' connections with it
    if (via) tell_relay_closed(via, channel, id);
}

void LiveServer::Impl::tell_relay_closed(uint64_t via, uint32_t channel, uint64_t id) {
    auto r = conns.find(via);
    if (r == conns.end()) return;
    auto ch = r->second->channels.find(channel);
    if (ch == r->second->channels.end() || ch->second != id) return;
    r->second->channels.erase(ch);
    std::vector<uint8_t> f;
    wire::encode_relay_close(channel, f);
    queue(*r->second, f);
}

void LiveServer::Impl::bad(Conn& c, const char* cause, const std::string& reason) {
    ++st_bad;
    log_peer(c, cause, reason);
    close_conn(c.id);
}

// Returns false when the connection was closed. The queued bytes go first, then the streamed body (/metrics), as
// much as the socket takes each time it drains.
bool LiveServer::Impl::flush(Conn& c) {
    if (c.fd < 0) return true;  // a relayed rank: queue() handed its bytes to the relay
    for (;;) {
        const bool head = c.out_pos < c.out.size();
        if (!head && (!c.body || c.body_pos >= c.body->size())) break;
        const uint8_t* p =
            head ? c.out.data() + c.out_pos : reinterpret_cast<const uint8_t*>(c.body->data()) + c.body_pos;
        const size_t len = head ? c.out.size() - c.out_pos : c.body->size() - c.body_pos;
        const ssize_t n = send(c.fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            (head ? c.out_pos : c.body_pos) += size_t(n);
            c.out_progress_ns = mono_ns();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        close_conn(c.id);
        return false;
    }
    if (c.body && c.body_pos >= c.body->size()) c.body.reset();  // the shared rendering is not held past its use
    if (c.out_pos == c.out.size() && !c.body) {
        c.out.clear();
        c.out_pos = 0;
        if (c.close_after_flush) {
            close_conn(c.id);
            return false;
        }
        set_events(c, false);
    } else {
        if (c.out_pos > (1u << 20)) {
            c.out.erase(c.out.begin(), c.out.begin() + ptrdiff_t(c.out_pos));
            c.out_pos = 0;
        }
        set_events(c, true);
    }
    return true;
}

bool LiveServer::Impl::queue(Conn& c, const std::vector<uint8_t>& bytes) {
    if (c.via) {  // a relayed rank: wrapped for its relay; closing after it (a Reject) closes the channel after it
        const uint64_t id = c.id;
        const bool closing = c.close_after_flush;
        auto r = conns.find(c.via);
        std::vector<uint8_t> f;
        wire::encode_relay(c.channel, bytes.data(), bytes.size(), f);
        const bool sent = r != conns.end() && queue(*r->second, f);
        if (!sent || closing) {
            close_conn(id);
            return false;
        }
        return true;
    }
    if (!c.http && c.out.size() - c.out_pos + bytes.size() > kMaxOutBuffer) {
        log_peer(c, "not reading", "not reading what the collector sends (output buffer full)");
        close_conn(c.id);
        return false;
    }
    c.out.insert(c.out.end(), bytes.begin(), bytes.end());
    return flush(c);
}

void LiveServer::Impl::accept_all(int lfd, bool http) {
    for (int i = 0; i < 1024; ++i) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = accept4(lfd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                // Level-triggered epoll would spin on the pending connection: take it with the spare descriptor
                // and drop it.
                ++st_refused;
                if (spare_fd >= 0) {
                    close(spare_fd);
                    const int dropped = accept(lfd, nullptr, nullptr);
                    if (dropped >= 0) close(dropped);
                    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
                static bool said = false;
                if (!said) log("out of file descriptors: refusing connections (raise RLIMIT_NOFILE)");
                said = true;
            }
            return;
        }
        std::string ip;
        const std::string peer = peer_name(ss, ip);
        // Connections held open without a Hello never keep a rank out: past the bounds the oldest of them goes
        // (admission.h), and a new one is refused only when every connection has said Hello.
        if (!http) {
            const size_t total = std::min(opt.max_unproven, opt.max_connections);
            const size_t per_ip = is_loopback(ss) ? 0 : opt.max_unproven_per_ip;  // loopback: one address for all
            uint64_t victim = unproven.victim(ip, total, per_ip);
            if (!victim && conns.size() >= opt.max_connections && unproven.size()) victim = unproven.victim(ip, 1, 0);
            // Only one that had its chance: an honest rank says Hello within milliseconds of connecting, so a
            // burst of fresh connections (a large job starting) is read, not evicted; past the bound while all are
            // fresh, the new one is refused below and its rank retries.
            if (victim) {
                auto v = conns.find(victim);
                if (v != conns.end() && mono_ns() - v->second->opened_ns < kUnprovenGraceNs) victim = 0;
            }
            if (victim) {
                ++st_unproven_closed;
                if (auto v = conns.find(victim); v != conns.end())
                    log_peer(*v->second, "no Hello yet",
                             "closed for room: a newer connection came while it had sent no Hello (--max-unproven)");
                close_conn(victim);
            }
        }
        if (conns.size() >= opt.max_connections ||
            (!http && (unproven.size() >= opt.max_unproven ||
                       (!is_loopback(ss) && unproven.of_ip(ip) >= opt.max_unproven_per_ip)))) {
            ++st_refused;
            close(fd);
            continue;
        }
        auto c = std::make_unique<Conn>();
        c->id = next_conn_id++;
        c->fd = fd;
        c->http = http;
        c->opened_ns = mono_ns();
        c->peer = peer;
        c->ip = ip;
        c->loopback = is_loopback(ss);
        if (!http) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = c->id;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            continue;
        }
        if (!http) {
            ++rank_conns;
            unproven.add(c->id, c->ip);
        }
        conns.emplace(c->id, std::move(c));
        st_connections = rank_conns;
    }
}

void LiveServer::Impl::on_readable(Conn& c) {
    uint8_t buf[kReadChunk];
    const uint64_t id = c.id;
    const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close_conn(id);
        return;
    }
    if (n < 0) return;
    if (c.close_after_flush) return;  // refused: what it still sends is ignored
    if (c.http) {
        on_http(c, buf, size_t(n));
        return;
    }
    c.reader.feed(buf, size_t(n));
    wire::FrameHeader h;
    std::string err;
    bool completed = false;
    while (conns.count(id) && !c.close_after_flush) {
        const auto s = c.reader.next(h, scratch, &err);
        if (s == wire::FrameReader::Status::NeedMore) break;
        if (s == wire::FrameReader::Status::Error) {
            const char* cause = err.rfind("bad magic", 0) == 0                       ? "bad magic"
                                : err.find("exceeds the limit") != std::string::npos ? "oversize"
                                                                                     : "malformed";
            bad(c, cause, err.empty() ? "malformed frame" : err);
            return;
        }
        ++st_frames;
        completed = true;
        if (!on_frame(c, h)) return;
    }
    if (conns.count(id)) account(c, mono_ns(), completed);
}

// false: the connection was closed (or is closing).
bool LiveServer::Impl::on_frame(Conn& c, const wire::FrameHeader& h) {
    const uint64_t now = mono_ns();
    // The frame's body decoded; or the connection dropped as malformed (false).
    auto decoded = [&](auto& m, const char* what) {
        std::string err;
        if (wire::decode(scratch.data(), scratch.size(), m, &err)) return true;
        bad(c, "malformed", fmt::format("bad {}: {}", what, err));
        return false;
    };
    const auto type = wire::FrameType(h.type);
    const bool relay_type = type == wire::FrameType::Relay || type == wire::FrameType::RelayClose;
    // A connection whose first frame is a relay's is a relay's for good.
    if (c.relay || (relay_type && !c.hello && !c.pending && !c.via)) return on_relay_frame(c, h);
    if (c.pending && type != wire::FrameType::Proof) {
        bad(c, "protocol", fmt::format("frame type {} before the token proof", h.type));
        return false;
    }
    if (!c.hello && !c.pending && type != wire::FrameType::Hello) {
        bad(c, "protocol", fmt::format("first frame is type {}, not Hello", h.type));
        return false;
    }
    switch (type) {
        case wire::FrameType::Hello: {
            if (c.hello) {
                bad(c, "protocol", "second Hello on one connection");
                return false;
            }
            wire::Hello m;
            if (!decoded(m, "Hello")) return false;
            return on_hello(c, h, m, now);
        }
        case wire::FrameType::Proof: {
            if (!c.pending) {
                bad(c, "protocol", "a Proof without a Challenge");
                return false;
            }
            wire::Proof m;
            if (!decoded(m, "Proof")) return false;
            return on_proof(c, m, now);
        }
        case wire::FrameType::Digest: {
            wire::Digest m;
            if (!decoded(m, "Digest")) return false;
            on_digest(c, m, now);
            return true;
        }
        case wire::FrameType::State: {
            wire::State m;
            if (!decoded(m, "State")) return false;
            on_state(c, m, now);
            return true;
        }
        case wire::FrameType::KeepAlive: {
            wire::KeepAlive m;
            if (!decoded(m, "KeepAlive")) return false;
            note_lag(c.job->ranks[c.rank].heard(now, m.sent_mono_ns), now);
            return true;
        }
        case wire::FrameType::Bye: {
            RankState& r = c.job->ranks[c.rank];
            r.last_frame_ns = now;
            r.bye = true;
            HeaderInfo& h = own_snapshot(*c.job, c.rank).header;
            h.process_state = uint32_t(disk::ProcessState::ExitedClean);
            // When it left, if its last State did not say (engine/causal.h: a departure needs a time to be first).
            if (!h.end_mono_ns) h.end_mono_ns = now;
            c.job->dirty = true;
            return true;
        }
        case wire::FrameType::Relay:
        case wire::FrameType::RelayClose: bad(c, "protocol", "a relay's frame on a rank's connection"); return false;
        case wire::FrameType::HelloAck:
        case wire::FrameType::Challenge:
        case wire::FrameType::Reject:
        case wire::FrameType::DumpRequest:
            bad(c, "protocol", fmt::format("frame type {} goes from the collector to ranks, not back", h.type));
            return false;
    }
    return true;  // a type a newer minor added: skipped
}

bool LiveServer::Impl::on_relay_frame(Conn& c, const wire::FrameHeader& h) {
    std::string err;
    uint32_t channel = 0;
    if (wire::FrameType(h.type) == wire::FrameType::RelayClose) {
        if (!wire::decode_relay_close(scratch.data(), scratch.size(), channel, &err)) {
            bad(c, "malformed", "bad RelayClose: " + err);
            return false;
        }
        c.relay = true;
        unproven.remove(c.id);
        if (auto ch = c.channels.find(channel); ch != c.channels.end()) {
            const uint64_t id = ch->second;
            c.channels.erase(ch);  // the relay said it: nothing to tell it back
            close_conn(id);
        }
        return true;
    }
    wire::FrameHeader inner;
    if (wire::FrameType(h.type) != wire::FrameType::Relay) {
        bad(c, "protocol", fmt::format("frame type {} on a relay's connection", h.type));
        return false;
    }
    if (!wire::decode_relay(scratch.data(), scratch.size(), channel, inner, &err)) {
        bad(c, "malformed", "bad Relay frame: " + err);
        return false;
    }
    c.relay = true;
    unproven.remove(c.id);
    uint64_t rank_id = 0;
    if (auto ch = c.channels.find(channel); ch != c.channels.end()) {
        rank_id = ch->second;
    } else {
        if (c.channels.size() >= kMaxRelayChannels || conns.size() >= opt.max_connections) {
            ++st_refused;  // as a connection over the limit is: closed at once
            std::vector<uint8_t> f;
            wire::encode_relay_close(channel, f);
            return queue(c, f);
        }
        auto k = std::make_unique<Conn>();
        k->id = rank_id = next_conn_id++;
        k->via = c.id;
        k->channel = channel;
        k->peer = fmt::format("{} (relayed, channel {})", c.peer, channel);
        k->ip = c.ip;
        k->loopback = c.loopback;
        k->opened_ns = mono_ns();
        c.channels.emplace(channel, rank_id);
        conns.emplace(rank_id, std::move(k));
        ++rank_conns;
        st_connections = rank_conns;
    }
    // The wrapped frame, handled as if its rank had sent it on a connection of its own.
    scratch.erase(scratch.begin(), scratch.begin() + wire::kRelayPrefixBytes + wire::kHeaderBytes);
    const uint64_t relay_id = c.id;
    on_frame(*conns.at(rank_id), inner);
    return conns.count(relay_id) > 0;
}

void LiveServer::Impl::on_http(Conn& c, const uint8_t* p, size_t n) {
    // Held up to one byte past the cap: enough to tell TooLarge, never more.
    c.http_in.append(reinterpret_cast<const char*>(p), std::min(n, kMaxHttpRequest + 1 - c.http_in.size()));
    const HttpRequest req = parse_http_request(c.http_in, kMaxHttpRequest);
    if (req.status == HttpRequest::Status::TooLarge)
        respond(c, "431 Request Header Fields Too Large", "request too large\n");
    else if (req.route == HttpRequest::Route::Metrics) {
        const auto f = req.openmetrics ? metrics::Format::OpenMetrics : metrics::Format::Prometheus;
        respond(c, "200 OK", metrics_body(mono_ns(), f), metrics::content_type(f));
    } else if (req.status == HttpRequest::Status::Complete)
        respond(c, "404 Not Found", "not found (try GET /metrics)\n");
}

void LiveServer::Impl::respond(Conn& c, const char* status, const std::string& body) {
    respond(c, status, std::make_shared<const std::string>(body));
}

void LiveServer::Impl::respond(Conn& c, const char* status, std::shared_ptr<const std::string> body,
                               const char* content_type) {
    const std::string head =
        fmt::format("HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status,
                    content_type, body->size());
    c.out.insert(c.out.end(), head.begin(), head.end());
    c.body = std::move(body);
    c.body_pos = 0;
    c.close_after_flush = true;
    c.out_progress_ns = mono_ns();  // the scrape timeout runs from here
    flush(c);
}

// ---- the ranks' Hello and Digest, on the collector's clock ----
//
// What the ranks say, kept as snapshots on the collector's clock: Hello (job, rank, token, clock anchor) and Digest
// (progress per communicator, moved by each rank's measured clock offset; its in-collective GPU times kept across
// digests).

namespace {

// A rank whose connection carried a frame this recently is alive: a second Hello for it is refused. Real ranks send
// a KeepAlive each second; a connection silent past the window (a peer gone without a FIN) is stale and replaced.
uint64_t alive_window_ns(double dead_after_s) { return uint64_t(std::max(2.0, dead_after_s) * 1e9); }

}  // namespace

bool LiveServer::Impl::refuse(Conn& c, const std::string& reason, bool retry) {
    std::vector<uint8_t> f;
    wire::encode(wire::Reject{reason, retry}, f);
    c.close_after_flush = true;
    queue(c, f);
    return false;
}

void LiveServer::Impl::drop_pending(Conn& c) {
    buffered_total -= std::min(buffered_total, c.pending_bytes);
    st_buffered = buffered_total;
    c.pending_bytes = 0;
    c.pending.reset();
}

bool LiveServer::Impl::on_hello(Conn& c, const wire::FrameHeader& h, wire::Hello& m, uint64_t now) {
    const HeaderInfo& hi = m.header;
    // The collector inside rank 0 watches the launching job only: its id, its WORLD_SIZE ranks.
    if (!opt.only_job.empty() && hi.job_id != opt.only_job) {
        ++st_claims;
        log_peer(c, "other job",
                 fmt::format("Hello for job {}: this collector runs inside job {} and watches that job only",
                             report::clean(hi.job_id), report::clean(opt.only_job)));
        return refuse(c, "this collector watches another job only");
    }
    if (hi.global_rank >= 0 && size_t(hi.global_rank) >= opt.max_job_ranks) {
        ++st_claims;
        log_peer(c, "rank out of range",
                 fmt::format("Hello as rank {} of job {}: past the {} ranks a job may have here (--max-job-ranks)",
                             hi.global_rank, report::clean(hi.job_id), opt.max_job_ranks));
        return refuse(c, "rank out of the collector's range");
    }
    if (opt.token.empty()) return prove_hello(c, m, now) && admit(c, m, now);
    if (h.minor < wire::kMinorTokenProof) {
        ++st_bad;
        // Its own log budget: junk of other kinds can never hide a refused token.
        if (m.token.empty()) {
            log_peer(c, "no token", "no token (NCCLWATCH_TOKEN is required)");
            return refuse(c, "token refused");
        }
        const std::string why = fmt::format(
            "live protocol {}.{} sends the token in clear; this collector needs {}.{} or newer, which proves it "
            "(upgrade ncclwatch on that rank)",
            h.major, h.minor, wire::kMajor, wire::kMinorTokenProof);
        log_peer(c, "old protocol", why);
        return refuse(c, "token refused: " + why);
    }
    std::string nonce;
    if (!fresh_nonce(nonce)) {
        log_limited("nonce", "cannot draw a nonce from the kernel (getrandom, /dev/urandom): refusing the rank");
        return refuse(c, "the collector cannot draw a nonce; retry later", true);
    }
    // The proof covers the nonce and every byte of this Hello: the identity it claims is the one the token holder
    // signed.
    c.expected = token_proof(opt.token, nonce, scratch.data(), scratch.size());
    c.pending = std::make_unique<wire::Hello>(std::move(m));
    c.pending_bytes = scratch.size();
    buffered_total += c.pending_bytes;
    st_buffered = buffered_total;
    std::vector<uint8_t> f;
    wire::encode(wire::Challenge{nonce}, f);
    return queue(c, f);
}

bool LiveServer::Impl::on_proof(Conn& c, const wire::Proof& m, uint64_t now) {
    std::unique_ptr<wire::Hello> hello = std::move(c.pending);
    drop_pending(c);
    if (m.mac.empty() || !equal_ct(c.expected.data(), c.expected.size(), m.mac)) {
        ++st_bad;
        const HeaderInfo& hi = hello->header;
        auto jit = jobs.find(hi.job_id);
        // A wrong token that claims a job this collector has ranks of is a misconfigured rank of it (or someone
        // after it): named on a line of its own, once a minute per (job, rank), whatever else is refused. The rest
        // (jobs nobody runs here) is a flood, summed up on its own line (sweep).
        if (!m.mac.empty() && jit != jobs.end() && !jit->second->ranks.empty()) {
            const std::string key = fmt::format("{}\n{}", hi.job_id, hi.global_rank);
            if (wrong_token_named.allow(key, now))
                log(
                    fmt::format("closed connection from {}: wrong token (its proof does not match) for job {} rank "
                                "{} pid {} host {}: a job this collector watches; is NCCLWATCH_TOKEN the same there?",
                                c.peer, report::clean(hi.job_id), hi.global_rank, hi.pid, report::clean(hi.host)));
            else {  // the same claim again within the minute: counted in the summary
                ++st_suppressed;
                ++limiter.buckets["wrong token for a known job (repeated)"].suppressed;
            }
        } else if (m.mac.empty()) {
            log_peer(c, "no token", "no token (NCCLWATCH_TOKEN is required)");
        } else {
            log_peer(c, "wrong token", "wrong token (its proof does not match)");
        }
        return refuse(c, "token refused");
    }
    return admit(c, *hello, now);
}

bool LiveServer::Impl::prove_hello(Conn& c, const wire::Hello& m, uint64_t now) {
    if (!opt.prove_peers) return true;
    const HeaderInfo& hi = m.header;
    const std::string who = fmt::format("job {} rank {} pid {}", report::clean(hi.job_id), hi.global_rank, hi.pid);
    const auto refused = [&](const std::string& why, bool retry) {
        ++st_claims;
        log_limited(retry ? "identity unproven" : "identity refused",
                    fmt::format("refused Hello from {} ({}): {}", c.peer, who, why));
        return refuse(c, (retry ? "identity not proven yet: " : "identity refused: ") + why, retry);
    };
    if (c.via) {
        // A relay's ranks cannot be proven one by one (their sockets are the relay's): without a token they are
        // taken only from a relay that runs as the collector's own user, on this host.
        auto r = conns.find(c.via);
        if (r == conns.end()) return false;
        Conn& relay = *r->second;
        if (relay.relay_own_user < 0) {
            PeerSocket ps;
            std::string why;
            const bool found = relay.loopback && find_peer_socket(relay.fd, ps, &why);
            relay.relay_own_user = found && ps.uid == own_uid ? 1 : 0;
            if (relay.loopback)
                log_limited("relay", fmt::format("relay from {}: {}", relay.peer,
                                                 relay.relay_own_user
                                                     ? "runs as the collector's user: its ranks are taken (without a "
                                                       "token, a relay's ranks cannot prove their pids)"
                                                     : fmt::format("not the collector's user ({}): without a token its "
                                                                   "ranks are refused (set NCCLWATCH_TOKEN)",
                                                                   found ? fmt::format("uid {}", ps.uid) : why)));
        }
        if (!relay.loopback) return true;  // --insecure: a remote peer proves nothing, as `serve --help` says
        return relay.relay_own_user == 1 ||
               refused("without a token, a relay's ranks are taken only from a relay of the collector's own user",
                       false);
    }
    if (!c.loopback) return true;  // --insecure: nothing to prove a remote peer by
    const PidProof p = prove_peer_pid(c.fd, hi.pid, scan_budget, now, "/proc", c.opened_ns);
    if (p.uid_known) {
        c.uid_known = true;
        c.peer_uid = p.peer_uid;
    }
    if (p.result == PidProof::Result::Unproven) return refused(p.why, true);
    if (p.result == PidProof::Result::Refused) return refused(p.why, false);
    if (opt.own_uid_only && c.peer_uid != own_uid)
        return refused(fmt::format("runs as uid {}, not as the job's user (uid {})", c.peer_uid, own_uid), false);
    // Where the job's folder is known (the collector inside rank 0: its NCCLWATCH_DIR), the rank made a file there.
    if (!opt.ranks_dir.empty() && !hi.job_id.empty() && hi.job_id.find('/') == std::string::npos && hi.job_id != "." &&
        hi.job_id != "..") {
        const std::string why =
            check_rank_file(opt.ranks_dir + "/" + hi.job_id, hi.pid, hi.global_rank, hi.job_id, c.peer_uid, true);
        if (!why.empty()) return refused(why, false);
    }
    return true;
}

bool LiveServer::Impl::admit(Conn& c, wire::Hello& m, uint64_t now) {
    const HeaderInfo& hi = m.header;
    const std::string key =
        hi.global_rank >= 0 ? fmt::format("rank {}", hi.global_rank) : fmt::format("pid {}:{}", hi.host, hi.pid);
    auto jit = jobs.find(hi.job_id);
    if (jit == jobs.end() || !jit->second->index.count(key)) {
        if (jit != jobs.end() && jit->second->ranks.size() >= opt.max_job_ranks) {
            ++st_claims;
            log_peer(c, "job full",
                     fmt::format("job {} already has {} ranks here, the most a job may have (--max-job-ranks)",
                                 report::clean(hi.job_id), jit->second->ranks.size()));
            return refuse(c, "collector full for this job");
        }
        // Within the memory budget (the collector inside rank 0): a new rank is refused past it, said once a
        // minute (the rate limit), never a rank already kept.
        if (opt.memory_budget && state_bytes + snapshot_bytes(FileSnapshot{}) > opt.memory_budget) {
            ++st_claims;
            log_limited("memory budget",
                        fmt::format("refused {} of job {} from {}: the collector's state is at its memory budget of "
                                    "{} bytes (about {} bytes now)",
                                    key, report::clean(hi.job_id), c.peer, opt.memory_budget, state_bytes));
            return refuse(c, "collector full (memory budget)");
        }
        // Idle jobs make room (the oldest first), then jobs without progress; never a job that is training.
        const bool new_job = jit == jobs.end();
        if (!make_room(new_job ? nullptr : jit->second.get())) {
            ++st_bad;
            log_peer(c, "full", "collector full (too many ranks or jobs, all of them making progress)");
            // For now: a job that stops progressing, or ends, makes room.
            return refuse(c, "collector full", true);
        }
    }
    jit = jobs.find(hi.job_id);  // make_room may have evicted jobs
    if (jit == jobs.end()) {
        auto j = std::make_unique<Job>();
        j->id = hi.job_id;
        j->serial = ++jobs_made;
        jit = jobs.emplace(hi.job_id, std::move(j)).first;
    }
    Job& job = *jit->second;
    size_t idx;
    auto rit = job.index.find(key);
    if (rit == job.index.end()) {
        idx = job.ranks.size();
        job.index.emplace(key, idx);
        job.ranks.emplace_back();
        job.ranks.back().key = key;
        job.snaps.push_back(std::make_shared<FileSnapshot>());
        job.shared.push_back(0);
        ++ranks_known;
        st_ranks = ranks_known;
    } else {
        idx = rit->second;
        // A rank's identity is bound to its connection: while that one is open and alive, a second Hello for the
        // same (job, rank) is refused and never takes the slot (an impostor, or a duplicate launch). One silent past
        // the window is stale (the peer went without a FIN): a reconnect replaces it.
        const RankState& held = job.ranks[idx];
        auto held_conn = held.conn_id ? conns.find(held.conn_id) : conns.end();
        // Without a token, a slot held by another user's process gives way to a proven process of the collector's
        // own user: a local process cannot keep the collector's user's rank out by saying Hello first.
        const bool own_user_wins = c.uid_known && c.peer_uid == own_uid && held_conn != conns.end() &&
                                   held_conn->second->uid_known && held_conn->second->peer_uid != own_uid;
        if (own_user_wins)
            log_limited("rank taken", fmt::format("job {} {}: the connection from {} (uid {}) gives the rank to {}, "
                                                  "a proven process of the collector's user",
                                                  report::clean(job.id), key, held_conn->second->peer,
                                                  held_conn->second->peer_uid, c.peer));
        if (held.conn_id && held.conn_id != c.id) {
            if (!own_user_wins && now - held.last_frame_ns <= alive_window_ns(opt.dead_after_s)) {
                ++st_bad;
                auto old = conns.find(held.conn_id);
                log_limited("rank taken", fmt::format("closed connection from {}: job {} {}: a second Hello while "
                                                      "the rank's connection from {} is alive: refused",
                                                      c.peer, report::clean(job.id), key,
                                                      old == conns.end() ? "?" : old->second->peer));
                return refuse(c, "this rank is already connected to the collector (a second Hello is refused)", true);
            }
            close_conn(held.conn_id);
        }
    }
    RankState& r = job.ranks[idx];
    FileSnapshot& s = own_snapshot(job, idx);
    const bool restarted = s.ok && s.header.pid != hi.pid;
    r.conn_id = c.id;
    r.last_frame_ns = now;
    r.bye = false;
    if (restarted || !s.ok) r.clock = OffsetFilter{};
    r.clock.exact = hi.boot_id_hash != 0 && hi.boot_id_hash == boot;
    r.rank_start_mono_ns = hi.start_mono_ns;
    if (!r.clock.exact && hi.heartbeat_mono_ns) r.clock.add(int64_t(now - hi.heartbeat_mono_ns));

    s.ok = true;
    s.error.clear();
    s.path = hi.host + ":" + (m.file.empty() ? std::string("(live)") : m.file);
    if (hi.timeout_ms && (job.ranks_timeout_s == 0 || hi.timeout_ms / 1000.0 < job.ranks_timeout_s))
        job.ranks_timeout_s = hi.timeout_ms / 1000.0;
    s.header = std::move(m.header);
    ++job.facts_gen;
    if (restarted) {
        s.comms.clear();
        // Digests of the process before it, read during an analysis, are not this one's.
        std::erase_if(job.deferred, [&](const auto& d) { return d.first == idx; });
    }
    put_header_on_our_clock(r, s.header);
    c.hello = true;
    c.job = &job;
    c.rank = idx;
    job.dirty = true;
    unproven.remove(c.id);
    account_rank(job, idx);

    std::vector<uint8_t> f;
    wire::encode_hello_ack(f);
    return queue(c, f);
}

// The analysis runs in live mode on this boot's clock: the header is made to look like a file of this boot
// (so nothing is rebased through wall clocks), with the start moved by the measured offset. A rank on another
// host keeps its host name, so job_view never probes its pid here; one on another boot of a host with our name
// is renamed, for the same reason.
void LiveServer::Impl::put_header_on_our_clock(const RankState& r, HeaderInfo& h) {
    const bool same_boot = r.clock.exact;
    if (!same_boot && h.host == hostname) h.host += " (other boot)";
    h.boot_id_hash = boot;
    h.start_mono_ns = time_base::shift(r.rank_start_mono_ns, r.clock.offset());
}

void LiveServer::Impl::on_digest(Conn& c, wire::Digest& m, uint64_t now) {
    Job& job = *c.job;
    note_lag(job.ranks[c.rank].heard(now, m.sent_mono_ns), now);
    if (job.in_analysis && job.shared[c.rank]) {
        job.deferred.emplace_back(c.rank, std::move(m));
        return;
    }
    apply_digest(job, c.rank, m);
}

void LiveServer::Impl::apply_digest(Job& job, size_t rank, wire::Digest& m) {
    const RankState& r = job.ranks[rank];
    // A communicator's claimed size is no rank's proof: past what a job may hold, its claim is set aside rather than
    // sizing the analysis (admission.h).
    if (set_aside_oversized(m.comms, opt.max_job_ranks) && !job.set_aside_said) {
        job.set_aside_said = true;
        log_limited("set aside", fmt::format("job {} {}: a communicator claims more than {} ranks (--max-job-ranks) "
                                             "or a rank outside them: set aside, not analysed",
                                             clean(job.id), r.key, opt.max_job_ranks));
    }
    FileSnapshot& s = own_snapshot(job, rank);
    if (shows_progress(s.comms, m.comms)) job.last_progress_ns = mono_ns();
    const int64_t d = r.clock.offset();
    s.header.start_mono_ns = time_base::shift(r.rank_start_mono_ns, d);
    s.header.process_state = m.process_state;
    s.header.num_comms = uint32_t(m.comms.size());
    for (auto& ci : m.comms) {
        time_base::rebase(ci, d);
        // Each digest carries a comm's newest in-collective GPU times; the history of them is the window the
        // straggler rule judges (read/gpu_spans.h).
        for (const auto& old : s.comms)
            if (old.comm_id == ci.comm_id && !old.gpu_spans.empty()) {
                std::vector<verdict::GpuSpan> spans = old.gpu_spans;
                merge_gpu_spans(spans, ci.gpu_spans);
                ci.gpu_spans = std::move(spans);
                break;
            }
        // And its newest signatures (kMaxDigestSigs): kept across digests up to a signature window (kRecentSigs), so
        // that a drift (engine/verdict.h) is aligned over as many ops as a rank file shows.
        // Merged where the old ones are (no allocation per digest) unless an analysis still holds them.
        for (auto& old : s.comms)
            if (old.comm_id == ci.comm_id && !old.recent.empty()) {
                const uint64_t first_new = ci.recent.empty() ? UINT64_MAX : ci.recent.front().seq;
                std::vector<SigInfo>& sigs = old.recent.mut();
                std::erase_if(sigs, [&](const SigInfo& g) { return g.seq >= first_new; });
                sigs.insert(sigs.end(), ci.recent.begin(), ci.recent.end());
                if (sigs.size() > disk::kRecentSigs) sigs.erase(sigs.begin(), sigs.end() - disk::kRecentSigs);
                ci.recent = std::move(old.recent);
                break;
            }
    }
    const auto same_gpu_facts = [](const CommInfo& x, const CommInfo& y) {
        return x.comm_id == y.comm_id && x.cuda_dev == y.cuda_dev && x.pci_bus_id == y.pci_bus_id;
    };
    if (!std::equal(s.comms.begin(), s.comms.end(), m.comms.begin(), m.comms.end(), same_gpu_facts)) ++job.facts_gen;
    s.comms = std::move(m.comms);
    if (m.py_stacks) take_py_stacks(job, s.header, *m.py_stacks, d);
    job.dirty = true;
    account_rank(job, rank);
}

void LiveServer::Impl::account_rank(Job& job, size_t i) {
    RankState& r = job.ranks[i];
    const size_t b = snapshot_bytes(*job.snaps[i]);
    state_bytes = state_bytes - std::min(state_bytes, r.est_bytes) + b;
    r.est_bytes = b;
    st_state_bytes = state_bytes;
}

// Protocol 1.6: what the rank's file says beyond its comm slots, as `analyze` reads it there: how the process ended
// (its exit code or signal, sent once more as it ends) and, while an op waits, its point-to-point counts per peer.
void LiveServer::Impl::on_state(Conn& c, wire::State& m, uint64_t now) {
    Job& job = *c.job;
    RankState& r = job.ranks[c.rank];
    FileSnapshot& s = own_snapshot(job, c.rank);
    note_lag(r.heard(now, m.sent_mono_ns), now);
    const int64_t d = r.clock.offset();
    const uint32_t ended_before = s.header.end_kind;
    s.header.process_state = m.live.process_state;
    s.header.end_kind = m.live.end_kind;
    s.header.end_status = m.live.end_status;
    s.header.end_mono_ns = m.live.end_mono_ns ? time_base::shift(m.live.end_mono_ns, d) : 0;
    const bool new_words = !m.live.last_words.empty() && s.header.last_words.empty();
    s.header.last_words = m.live.last_words;
    s.header.last_words_main = m.live.last_words_main;
    s.header.last_words_mono_ns = m.live.last_words_mono_ns ? time_base::shift(m.live.last_words_mono_ns, d) : 0;
    s.header.teardown_comm_id = m.live.teardown_comm_id;
    s.header.teardown_op = m.live.teardown_op;
    s.header.teardown_since_ns = m.live.teardown_since_ns ? time_base::shift(m.live.teardown_since_ns, d) : 0;
    s.header.write_ticket = m.live.write_ticket;
    s.header.dumps_written = m.live.dumps_written;
    s.header.reports_written = m.live.reports_written;
    // An exit with an error or a crash: a death, judged at once (a clean exit or a launcher's SIGTERM waits for the
    // timeout, as any rank that stopped issuing).
    const auto end = disk::EndKind(m.live.end_kind);
    // An uncaught exception in the main thread: the rank is on its way out (its exit may take a while), judged at once.
    if ((!ended_before &&
         (end == disk::EndKind::FatalSignal || (end == disk::EndKind::Exit && m.live.end_status != 0))) ||
        (new_words && m.live.last_words_main))
        job.end_news = true;
    if (m.p2p_read) {
        for (auto& t : m.p2p)
            for (auto& p : t.peers) {
                p.t_oldest_send_pending_ns =
                    p.t_oldest_send_pending_ns ? time_base::shift(p.t_oldest_send_pending_ns, d) : 0;
                p.t_oldest_recv_pending_ns =
                    p.t_oldest_recv_pending_ns ? time_base::shift(p.t_oldest_recv_pending_ns, d) : 0;
            }
        s.p2p_read = true;
        s.p2p_wrapped = m.p2p_wrapped;
        // When the counts were read (1.11; before, the State's sending, up to a second later than the reading).
        const uint64_t as_of = m.p2p_read_mono_ns ? m.p2p_read_mono_ns : m.sent_mono_ns;
        s.p2p_as_of_ns = as_of ? time_base::shift(as_of, d) : 0;
        s.p2p = std::move(m.p2p);
    } else {
        s.p2p_read = false;
        s.p2p_as_of_ns = 0;
        s.p2p.clear();
    }
    job.dirty = true;
    account_rank(job, c.rank);
}

// Protocol 1.4: a rank's Python stacks, in the first Digest after each capture, kept in its header as a rank file
// holds them (the analysis and the reports read them there), until the next capture.
void LiveServer::Impl::take_py_stacks(Job& job, HeaderInfo& h, wire::PyStacksBlock& b, int64_t d) {
    h.py_stacks_seq = b.seq;
    h.py_stacks_mono_ns = b.mono_ns ? time_base::shift(b.mono_ns, d) : 0;
    h.py_stacks_reason = b.reason;
    h.py_stacks_status = b.status;
    h.py_stacks_len = uint32_t(b.text.size());
    h.py_stacks.reset();
    try {
        if (b.status == uint32_t(disk::PyStacksStatus::Captured))
            h.py_stacks = std::make_shared<const py::Stacks>(py::parse(b.text));
    } catch (const std::bad_alloc&) {
    }
    h.py_stacks_text = std::move(b.text);
    // A stall already reported is reported again with them (its culprit's frame), once per capture; a process
    // without Python says so once and changes nothing in a report.
    if (h.py_stacks) job.py_stacks_news = true;
}

// ---- analysis, reports and /metrics ----
//
// The analysis as digests change, the report of new verdicts (text and JSON, in the verdicts' one voice:
// report/headline.h, report/report_text.h), the dump requests, and /metrics.

namespace {

// Job ids come from the network: keep a path component of safe characters only.
std::string safe_component(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 128)) out += (isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : '_';
    if (out.empty() || out == "." || out == "..") out = "job";
    return out;
}

std::string verdict_key(const verdict::Verdict& v) {
    // A straggler's seq moves on with every step: it is news once per communicator and rank.
    std::string k = v.kind == verdict::Kind::Straggler
                        ? fmt::format("{}|{:x}|", verdict::kind_name(v.kind), v.comm_id)
                        : fmt::format("{}|{:x}|{}|", verdict::kind_name(v.kind), v.comm_id, v.seq);
    for (int r : v.culprits) k += std::to_string(r) + ",";
    return k;
}

// A stall (as opposed to a mismatch, a drift found while nothing waits or a straggler, which hold nothing up).
bool is_stall(const verdict::Verdict& v) {
    return v.kind != verdict::Kind::Mismatch && v.kind != verdict::Kind::Straggler && !verdict::drift_only(v);
}

}  // namespace

// Whether something in the job may already be a verdict the analysis would report: an outstanding collective
// without progress for the timeout, an init running that long, a flagged stall or error, a connection lost past
// the grace. One pass over the snapshots, far cheaper than the analysis, so a stall is caught on the first tick
// after it passes the timeout while the full analysis (for mismatches) runs less often.
bool LiveServer::Impl::something_due(const Job& job, uint64_t now) const {
    if (job.end_news) return true;
    const uint64_t timeout = uint64_t(timeout_of(job) * 1e9), grace = uint64_t(opt.dead_after_s * 1e9);
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        if (!r.conn_id && !r.bye && now - r.alive_at(now) >= grace) return true;
        for (const auto& c : job.snaps[i]->comms) {
            if (c.stall_since_ns || c.async_error) return true;
            if (c.coll_issued > c.coll_completed) {
                const uint64_t since = std::max(c.t_last_progress_ns, c.t_last_issue_ns);
                // The timeout, or the rank's own suspicion threshold (the analysis judges the communicator's).
                const uint64_t suspect = uint64_t(verdict::suspect_after_s(c.completion_gap_p99_ns) * 1e9);
                if (since && now > since && (now - since >= timeout || (suspect && now - since >= suspect)))
                    return true;
            }
            if (c.state == uint32_t(disk::CommState::Initializing) && c.t_init_start_ns && now > c.t_init_start_ns &&
                now - c.t_init_start_ns >= timeout)
                return true;
        }
    }
    return false;
}

void LiveServer::Impl::maybe_analyze(uint64_t now) {
    for (auto& [id, job] : jobs) {
        // Never more than a third of the time in analysis, however large the job.
        const uint64_t cost = uint64_t(job->last_analysis_cost_s * 3e9);
        const uint64_t period = std::max(uint64_t(std::max(0.01, opt.analyze_period_s) * 1e9), cost);
        const uint64_t full_period = std::max(period, uint64_t(std::max(0.01, opt.idle_analysis_s) * 1e9));
        const uint64_t since = now - job->last_analysis_ns;
        // Something that just became due (a stall past the timeout, a death) is judged on this tick, whatever the
        // last analysis cost: the throttle is for analyses that find nothing new, and at 131,072 ranks (0.8 s each)
        // it would hold the verdict back by up to 2.4 s. Once per event: while it stays due, the throttle holds.
        // One pass over the ranks per tick at most: at 131,072 ranks it is not free.
        const bool first = !job->due_judged, news = first && something_due(*job, now);
        if (since < period && !news) continue;
        const bool due = first ? news : something_due(*job, now);
        if (!due) job->due_judged = false;
        const bool run = due || (job->dirty && since >= full_period) ||
                         (job->dirty && (job->stall_reported_ns || !job->suspected.empty())) ||
                         since >= 4 * full_period;
        if (!run) continue;
        // An analysis on the analysis thread holds it for as long as it costs: one that nothing made due is not
        // started when something becomes due within that time, so that the thread is free for it then.
        if (!due && job->last_analysis_cost_s >= opt.offload_analysis_s &&
            something_due(*job, now + uint64_t(job->last_analysis_cost_s * 1.5e9)))
            continue;
        // Behind reading the ranks' frames: what is read so far proves nothing about now (a rank that has moved on
        // would still look behind), so no analysis until it has caught up; skipping it also leaves the thread to
        // reading.
        if (const int64_t behind = read_lag(now); behind > kBehindNs) {
            if (due)
                log_limited("behind", fmt::format("job {}: the collector reads the ranks' frames {:.1f} s late (more "
                                                  "than one thread carries): no verdict until it catches up",
                                                  clean(job->id), double(behind) / 1e9));
            job->due_judged = false;
            continue;
        }
        if (!analyze_job(*job, now)) continue;
        job->due_judged = due;
    }
}

FileSnapshot& LiveServer::Impl::own_snapshot(Job& job, size_t i) {
    if (job.in_analysis && job.shared[i]) {
        job.snaps[i] = std::make_shared<FileSnapshot>(*job.snaps[i]);
        job.shared[i] = 0;
    }
    return *job.snaps[i];
}

bool LiveServer::Impl::analyze_job(Job& job, uint64_t now) {
    // A job whose analysis costs more than a tick goes to the analysis thread, one at a time; a small one is judged
    // here at once (a collector that only ever sees small jobs, as the one inside rank 0, never starts that thread).
    const bool offload = job.last_analysis_cost_s >= opt.offload_analysis_s;
    if (offload && (job.in_analysis || (worker && worker->busy()))) return false;
    job.dirty = false;
    job.last_analysis_ns = now;
    // Connected ranks are alive now; a disconnected one ages from its last frame and is gone after dead_after_s.
    for (size_t i = 0; i < job.ranks.size(); ++i)
        own_snapshot(job, i).header.heartbeat_mono_ns = job.ranks[i].alive_at(now);
    AnalysisOptions ao;
    ao.live = true;
    ao.now_mono_ns = now;
    ao.now_real_ns = time_base::clock_ns(CLOCK_REALTIME);
    // A death (protocol 1.6) is judged at timeout 0: what waits on the rank that died waits for good.
    const bool death = job.end_news;
    job.end_news = false;
    ao.timeout_s = death ? 0 : timeout_of(job);
    ao.stale_after_s = opt.dead_after_s;
    ao.audit = job.audited_gen != job.facts_gen;
    if (offload) {
        if (!worker) worker = std::make_unique<AnalysisWorker>(wake_fd);
        auto task = std::make_unique<AnalysisTask>();
        task->job_id = job.id;
        task->job_serial = job.serial;
        task->facts_gen = job.facts_gen;
        task->snaps.assign(job.snaps.begin(), job.snaps.end());
        task->options = ao;
        task->now = now;
        task->death = death;
        std::fill(job.shared.begin(), job.shared.end(), uint8_t(1));
        job.in_analysis = true;
        if (worker->post(task)) return true;
        job.in_analysis = false;  // no thread: judged here
    }
    std::vector<const FileSnapshot*> files;
    files.reserve(job.snaps.size());
    for (const auto& f : job.snaps) files.push_back(f.get());
    const uint64_t t0 = mono_ns();
    Analysis a = analyze(files, ao);
    const double cost_s = double(mono_ns() - t0) / 1e9;
    keep_audit(job, a, job.facts_gen);
    judged(job, a, now, death, cost_s);
    return true;
}

// An analysis that audited (at facts_gen) leaves its findings for the next; one that did not takes them.
void LiveServer::Impl::keep_audit(Job& job, Analysis& a, uint64_t facts_gen) {
    for (auto& jr : a.jobs) {
        if (job.audited_gen == facts_gen) {
            jr.audit = job.audit;
        } else {
            job.audit = jr.audit;
            job.audited_gen = facts_gen;
        }
    }
}

void LiveServer::Impl::take_analysis() {
    if (!worker) return;
    std::unique_ptr<AnalysisTask> t = worker->take();
    if (!t) return;
    auto it = jobs.find(t->job_id);
    if (it == jobs.end() || it->second->serial != t->job_serial) return;  // evicted meanwhile
    Job& job = *it->second;
    job.in_analysis = false;
    std::vector<std::pair<size_t, wire::Digest>> deferred;
    deferred.swap(job.deferred);
    for (auto& [rank, m] : deferred)
        if (rank < job.ranks.size()) apply_digest(job, rank, m);
    keep_audit(job, t->result, t->facts_gen);
    judged(job, t->result, t->now, t->death, t->cost_s);
}

void LiveServer::Impl::judged(Job& job, const Analysis& a, uint64_t now, bool death, double cost_s) {
    if (death) {
        const auto refs = a.all_verdicts();
        const bool dead = std::any_of(refs.begin(), refs.end(), [](const Analysis::VerdictRef& ref) {
            return ref.verdict->kind == verdict::Kind::Dead;
        });
        // Nothing waits on it (yet): the timeout judges the job as usual.
        if (!dead) {
            job.dirty = true;
            job.last_analysis_cost_s = cost_s;
            analyze_job(job, mono_ns());
            return;
        }
    }
    last_analysis_s = cost_s;
    job.last_analysis_cost_s = last_analysis_s;
    ++st_analyses;

    job.named.clear();
    job.verdicts.clear();
    job.culprits.clear();
    for (const auto& jr : a.jobs)
        for (const auto& cr : jr.comms)
            if (const verdict::Verdict* v = report::culprit_verdict(cr))
                job.culprits[cr.comm_id] = {verdict::kind_name(v->kind), report::culprit_labels(jr, cr, *v)};
    bool stalled = false, fresh = false;
    std::set<std::string> keys;
    for (const auto& ref : a.all_verdicts()) {
        const auto& v = *ref.verdict;
        job.verdicts.emplace(v.comm_id, verdict::kind_name(v.kind));
        if (v.kind == verdict::Kind::Straggler) {  // reported while the job runs, but it holds nothing up
            const std::string k = verdict_key(v);
            keys.insert(k);
            if (!job.reported.count(k)) fresh = true;
            continue;
        }
        auto& named = job.named[v.comm_id];
        named.first.insert(v.culprits.begin(), v.culprits.end());
        named.second.insert(v.waiting.begin(), v.waiting.end());
        stalled = stalled || is_stall(v);
        const std::string k = verdict_key(v);
        keys.insert(k);
        if (!job.reported.count(k)) fresh = true;
    }
    // Suspicions: /metrics says so while they last; the log says each once (the report is the stall's).
    job.suspected.clear();
    std::set<std::string> suspect_keys;
    for (const auto& jr : a.jobs)
        for (const auto& cr : jr.comms) {
            if (cr.suspected.empty()) continue;
            job.suspected.insert(cr.comm_id);
            const auto& v = cr.suspected.front();
            const std::string k = verdict_key(v);
            suspect_keys.insert(k);
            if (job.suspect_said.insert(k).second)
                news(fmt::format("job {}: {}", clean(job.id), report::verdict_lines(jr, cr, v).front()));
        }
    // A suspicion that ended (recovered, or became a stall) is news again if it comes back.
    for (auto it = job.suspect_said.begin(); it != job.suspect_said.end();)
        it = suspect_keys.count(*it) ? std::next(it) : job.suspect_said.erase(it);
    if (fresh) {
        job.reported.insert(keys.begin(), keys.end());
        report(job, a, now);
        if (stalled && !job.stall_reported_ns) job.stall_reported_ns = now;
    } else if (job.py_stacks_news && stalled && job.stall_reported_ns) {
        // The ranks' Python stacks came after the report (captured at its dump requests): the same report again,
        // with the frames, and no new requests.
        report(job, a, now, true);
    }
    job.py_stacks_news = false;
    if (!stalled && job.stall_reported_ns) {
        news(fmt::format("job {}: recovered: no stall any more ({:.1f} s after the report)", clean(job.id),
                         double(now - job.stall_reported_ns) / 1e9));
        job.stall_reported_ns = 0;
        // A later stall at the same place is news again; mismatches and stragglers stay reported once.
        for (auto it = job.reported.begin(); it != job.reported.end();)
            it = it->rfind("MISMATCH|", 0) == 0 || it->rfind("STRAGGLER|", 0) == 0 ? std::next(it)
                                                                                   : job.reported.erase(it);
    }
}

report::LiveClocks LiveServer::Impl::clocks(const Job& job) const {
    report::LiveClocks c;
    c.window = OffsetFilter::kWindow;
    for (const auto& r : job.ranks) {
        if (r.clock.exact)
            ++c.exact;
        else if (r.clock.count) {
            ++c.estimated;
            c.widest_spread_ns = std::max(c.widest_spread_ns, r.clock.spread());
        }
    }
    return c;
}

void LiveServer::Impl::report(Job& job, const Analysis& a, uint64_t now, bool with_new_stacks) {
    const auto refs = a.all_verdicts();
    const std::string job_name = job.id.empty() ? "(no job id)" : clean(job.id);
    const uint64_t real = time_base::clock_ns(CLOCK_REALTIME);
    const report::LiveText live = report::live_report_text(a, job.id, real, with_new_stacks, clocks(job));
    const std::string& text = live.text;
    const std::string& first_line = live.first_line;

    // Text first: it is small (the table is capped) and what a person or a script watches for.
    const std::string comp = safe_component(job.id);
    const std::string dir = opt.out_dir.empty() ? "" : opt.out_dir + "/" + comp;
    // Nothing planted in the job folder (its name is the client's) is followed: read/safe_write.h.
    std::string why, risk;
    const bool wrote = !dir.empty() && files::write_job_file(opt.out_dir, comp, "live-report.txt", text, false, &why,
                                                             job.folder_risk_said ? nullptr : &risk);
    // A job folder someone else made first (its name is the job's, known ahead) can have its reports replaced.
    if (!risk.empty()) {
        job.folder_risk_said = true;
        log_limited("report folder", fmt::format("job {}: the report folder is not the collector's alone: {}. Whoever "
                                                 "can write there can replace or remove the live reports",
                                                 job_name, risk));
    }
    // Once per job (and rate-limited): a folder someone made unwritable must not fill the log.
    auto write_failed = [&](const std::string& what) {
        if (job.write_failure_logged) return;
        job.write_failure_logged = true;
        log_limited("report write", fmt::format("cannot write {}: {}", what, why));
    };
    if (!dir.empty() && !wrote) write_failed("the report into " + dir);
    if (!opt.quiet) {
        fwrite(text.data(), 1, text.size(), stdout);
        fflush(stdout);
    } else {
        news(fmt::format("job {}: {}", job_name, first_line));
    }

    json j;
    j["schema"] = "ncclwatch.live/1";
    j["ncclwatch_version"] = kVersionLine;
    j["job_id"] = job.id;
    j["time"] = report::wall_time(real);
    j["timeout_s"] = timeout_of(job);
    j["dead_after_s"] = opt.dead_after_s;
    json verdicts = json::array();
    for (const auto& ref : refs)
        verdicts.push_back(report::verdict_json_with_headline(*ref.job, *ref.comm, *ref.verdict));
    j["verdicts"] = std::move(verdicts);
    json ranks = json::array();
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const auto& r = job.ranks[i];
        const auto& h = job.snaps[i]->header;
        ranks.push_back(json{{"global_rank", h.global_rank},
                             {"host", h.host},
                             {"pid", h.pid},
                             {"connected", r.conn_id != 0},
                             {"exited_clean", r.bye},
                             {"seconds_since_last_frame", double(now - r.last_frame_ns) / 1e9},
                             {"clock_offset_ns", r.clock.offset()},
                             {"clock_offset_exact", r.clock.exact},
                             {"clock_offset_spread_ns", r.clock.spread()}});
        if (h.py_stacks_status)  // protocol 1.4: its Python stacks, as its latest digest with them carried
            ranks.back()["python"] = report::py_stacks_json(h.py_stacks_status, h.py_stacks_reason, h.py_stacks.get(),
                                                            h.py_stacks.get() ? "" : h.py_stacks_text);
    }
    j["ranks"] = std::move(ranks);
    json comms = json::array();
    for (const auto& jr : a.jobs)
        for (const auto& cr : jr.comms) {
            json rows = json::array();
            for (const auto& r : cr.view.ranks) {
                rows.push_back(json{{"comm_rank", r.comm_rank},
                                    {"global_rank", r.global_rank},
                                    {"host", r.host},
                                    {"pid", r.pid},
                                    {"alive", r.alive},
                                    {"issued", r.issued},
                                    {"reached", r.reached},
                                    {"completed", r.completed}});
                report::add_progress_basis(rows.back(), r);
            }
            comms.push_back(json{{"comm_id", report::hex(cr.comm_id)},
                                 {"name", cr.name},
                                 {"nranks", cr.view.nranks},
                                 {"ranks", std::move(rows)}});
            report::put_rank_list(comms.back(), "missing", cr.missing);
        }
    j["comms"] = std::move(comms);
    j["audit"] = a.jobs.empty() ? json::array() : report::audit_json(a.jobs.front().audit);
    j["warnings"] = a.warnings.size() > 100
                        ? json(std::vector<std::string>(a.warnings.begin(), a.warnings.begin() + 100))
                        : json(a.warnings);

    if (wrote) {
        if (files::write_job_file(opt.out_dir, comp, "live-report.json", report::dump_json(j) + "\n", false, &why))
            news(
                fmt::format("job {}: report written to {}/live-report.txt and .json ({:.3f} s after the analysis "
                            "started)",
                            job_name, dir, double(mono_ns() - now) / 1e9));
        else
            write_failed(dir + "/live-report.json");
    }
    // Counted once its files are in place: whoever waits for the count then reads this report, not the one before.
    ++st_reports;

    // A straggler is not a hang: no rank is asked for a dump for it alone.
    const bool only_stragglers = std::all_of(refs.begin(), refs.end(), [](const Analysis::VerdictRef& ref) {
        return ref.verdict->kind == verdict::Kind::Straggler;
    });
    if (!opt.request_dumps || only_stragglers || with_new_stacks) return;
    wire::DumpRequest dr;
    dr.request_id = ++request_id;
    dr.reason = first_line.substr(0, wire::kMaxString);
    std::vector<uint8_t> f;
    wire::encode(dr, f);
    for (auto& r : job.ranks) {
        if (!r.conn_id) continue;
        auto it = conns.find(r.conn_id);
        if (it != conns.end()) queue(*it->second, f);
        ++job.dump_requests;
    }
}

namespace {

// A keyed hash of an id, stable for this collector's life, that names nothing outside it.
uint64_t pseudonym(const std::string& key, const std::string& what) {
    const Digest32 d = hmac_sha256(key, reinterpret_cast<const uint8_t*>(what.data()), what.size());
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | d[size_t(i)];
    return v;
}

}  // namespace

std::string LiveServer::Impl::render_metrics(metrics::Format format) {
    const uint64_t now = mono_ns();
    const double now_unix_s = double(time_base::clock_ns(CLOCK_REALTIME)) / 1e9;
    // With a token, the ids a rank's Hello carries (job, communicator, pid) are not shown to whoever can scrape,
    // unless asked (--metrics-ids): an impostor would need no more than them.
    const bool hide_ids = !opt.token.empty() && !opt.metrics_ids;
    std::vector<metrics::RankCommSample> samples;
    std::vector<metrics::VerdictSample> verdicts;
    std::vector<metrics::CulpritSample> culprits;
    for (const auto& [id, job] : jobs) {
        const std::string job_label =
            hide_ids ? fmt::format("job-{:012x}", pseudonym(pseudonym_key, "job " + job->id) >> 16) : job->id;
        const auto comm_label = [&](uint64_t comm_id) {
            return hide_ids ? pseudonym(pseudonym_key, fmt::format("comm {} {}", job->id, comm_id)) : comm_id;
        };
        for (const auto& [comm_id, kind] : job->verdicts) verdicts.push_back({job_label, comm_label(comm_id), kind});
        for (const auto& [comm_id, c] : job->culprits)
            culprits.push_back({job_label, comm_label(comm_id), c.first, c.second.ranks, c.second.hosts, c.second.op});
        for (size_t i = 0; i < job->ranks.size(); ++i) {
            const auto& s = *job->snaps[i];
            const auto& r = job->ranks[i];
            for (const auto& ci : s.comms) {
                if (ci.comm_id == 0) continue;
                metrics::RankCommSample m;
                m.job = job_label;
                m.global_rank = s.header.global_rank;
                m.host = s.header.host;
                m.comm_id = comm_label(ci.comm_id);
                m.comm_rank = ci.rank;
                m.pci_bus_id = ci.pci_bus_id;
                m.gpu_uuid = ci.gpu_uuid;
                m.ops_issued = ci.ops_issued;
                m.ops_completed = ci.ops_completed;
                m.issued = ci.coll_issued;
                m.reached = ci.coll_reached;
                m.completed = ci.coll_completed;
                // On the collector's clock: as old as it is now, from the wall clock's now.
                if (ci.t_last_progress_ns)
                    m.last_progress_unix_s =
                        now_unix_s - (now > ci.t_last_progress_ns ? double(now - ci.t_last_progress_ns) / 1e9 : 0.0);
                auto nit = job->named.find(ci.comm_id);
                if (nit != job->named.end()) {
                    m.culprit = nit->second.first.count(ci.rank) > 0;
                    m.stalled = m.culprit || nit->second.second.count(ci.rank) > 0;
                }
                m.stalled = m.stalled || ci.stall_since_ns != 0;
                m.suspected = job->suspected.count(ci.comm_id) > 0;
                if (ci.completion_gap_p99_ns) m.gap_p99_s = double(ci.completion_gap_p99_ns) / 1e9;
                m.connected = r.conn_id != 0;
                m.alive = !r.bye && double(now - r.alive_at(now)) / 1e9 <= opt.dead_after_s;
                samples.push_back(std::move(m));
            }
        }
    }
    metrics::CollectorTotals t;
    t.connections = st_connections;
    t.ranks_known = ranks_known;
    t.jobs = jobs.size();
    t.frames = st_frames;
    t.bad_frames = st_bad;
    t.reports = st_reports;
    t.analyses = st_analyses;
    t.last_analysis_s = last_analysis_s;
    t.evicted_jobs = st_evicted;
    return metrics::render(samples, verdicts, culprits, t, {kVersion, kGitHash}, format, opt.metrics_max_bytes);
}

// ---- the bounds ----
//
// What a partly received frame may hold (per connection and in all), how long a frame, a Hello or a scraper may take,
// when a job is forgotten, and log lines rate-limited per cause. A client, hostile or broken, can cost the collector a
// bounded amount of memory, time and log, and never lock real ranks out for good.

namespace {

uint64_t to_ns(double s) { return s <= 0 ? 0 : s >= 1e7 ? uint64_t(1e16) : uint64_t(s * 1e9); }

}  // namespace

void LiveServer::Impl::log_limited(const char* cause, const std::string& line) {
    if (limiter.allow(cause, mono_ns()))
        log(line);
    else
        ++st_suppressed;
}

void LiveServer::Impl::log_peer(const Conn& c, const char* cause, const std::string& reason) {
    log_limited(cause, fmt::format("closed connection from {}: {}", c.peer, report::clean(reason)));
}

bool LiveServer::Impl::account(Conn& c, uint64_t now, bool completed_frame) {
    const size_t b = c.reader.buffered();
    buffered_total = buffered_total - c.buffered + b;
    c.buffered = b;
    st_buffered = buffered_total;
    if (b == 0) {
        c.reader = wire::FrameReader{};  // gives back the capacity a large frame left behind
        c.frame_start_ns = 0;
        return true;
    }
    if (completed_frame || !c.frame_start_ns) c.frame_start_ns = now;
    if (b > opt.max_conn_buffer) {
        bad(c, "oversize", fmt::format("a frame of more than {} bytes (--max-conn-buffer)", opt.max_conn_buffer));
        return false;
    }
    // Whoever pushes the total over the budget goes: an honest rank's digest arrives whole in one read or two, so
    // the budget binds only when many connections hold half-sent frames.
    if (buffered_total > opt.max_buffered_total) {
        bad(c, "budget",
            fmt::format("partly received frames over the collector's budget of {} bytes (--buffer-budget)",
                        opt.max_buffered_total));
        return false;
    }
    return true;
}

uint64_t LiveServer::Impl::sweep_period_ns() const {
    const double shortest = std::min({opt.hello_timeout_s, opt.frame_timeout_s, opt.scrape_timeout_s});
    return std::clamp(to_ns(shortest / 4), uint64_t(20'000'000), uint64_t(1'000'000'000));
}

void LiveServer::Impl::sweep(uint64_t now) {
    const uint64_t hello_ns = to_ns(opt.hello_timeout_s), frame_ns = to_ns(opt.frame_timeout_s),
                   scrape_ns = to_ns(opt.scrape_timeout_s);
    struct Late {
        uint64_t id;
        const char* why;
    };
    std::vector<Late> late;
    for (const auto& [id, c] : conns) {
        if (c->http) {
            if (!c->close_after_flush && now - c->opened_ns > hello_ns)
                late.push_back({id, nullptr});  // no whole request within the hello timeout
            else if (c->close_after_flush && now - c->out_progress_ns > scrape_ns)
                late.push_back({id, "a /metrics scraper read nothing within the scrape timeout"});
        } else if (!c->hello && !c->relay && now - c->opened_ns > hello_ns) {
            late.push_back({id, "no Hello within the hello timeout"});
        } else if (c->frame_start_ns && now - c->frame_start_ns > frame_ns) {
            late.push_back({id, "a frame not complete within the frame timeout"});
        }
    }
    for (const auto& l : late) {
        auto it = conns.find(l.id);
        if (it == conns.end()) continue;
        if (l.why) log_peer(*it->second, "timeout", l.why);
        close_conn(l.id);
    }

    // Finished jobs (every rank of the world said Bye) go at once, silent ones after the retention: their series
    // and their rank slots with them, so a table filled once does not stay full.
    const uint64_t keep_ns = to_ns(opt.retention_s), grace_ns = to_ns(opt.dead_after_s);
    std::vector<std::string> gone;
    for (const auto& [id, j] : jobs) {
        bool all_bye = !j->ranks.empty(), connected = false;
        uint64_t last = 0;
        int world = 0;
        for (size_t i = 0; i < j->ranks.size(); ++i) {
            const auto& r = j->ranks[i];
            all_bye = all_bye && r.bye;
            connected = connected || r.conn_id != 0;
            last = std::max(last, r.last_frame_ns);
            world = std::max(world, j->snaps[i]->header.world_size);
        }
        const bool finished = all_bye && j->ranks.size() >= size_t(std::max(world, 1));
        if ((finished && (!connected || now - last > grace_ns)) || (!connected && now - last > keep_ns))
            gone.push_back(id);
    }
    for (const auto& id : gone) evict_job(id);

    if (now - limiter.last_summary_ns >= to_ns(opt.log_summary_s)) {
        if (limiter.last_summary_ns) {
            // Wrong tokens for jobs nobody runs here are a flood: on their own line, so that a misconfigured rank of
            // a known job (named one by one, on_proof) is never just a number among them.
            if (const uint64_t flood = limiter.take_suppressed("wrong token"))
                log(
                    fmt::format("wrong-token Hellos for jobs this collector does not watch, left out in the last "
                                "{:.0f} s: {} (a wrong token for a job it watches is named on a line of its own)",
                                double(now - limiter.last_summary_ns) / 1e9, flood));
            const std::string s = limiter.take_summary();
            if (!s.empty())
                log(fmt::format("log lines left out by the rate limits in the last {:.0f} s: {}",
                                double(now - limiter.last_summary_ns) / 1e9, s));
        }
        limiter.last_summary_ns = now;
    }
}

void LiveServer::Impl::evict_job(const std::string& id) {
    auto it = jobs.find(id);
    if (it == jobs.end()) return;
    Job& j = *it->second;
    bool finished = !j.ranks.empty();
    for (auto& r : j.ranks) {
        finished = finished && r.bye;
        if (r.conn_id) close_conn(r.conn_id);  // the only connection that points at this job's rank
    }
    log_limited("eviction", fmt::format("job {}: forgotten ({}, {} rank(s))", report::clean(id),
                                        finished ? "every rank said Bye" : "silent past the retention or for room",
                                        j.ranks.size()));
    ranks_known -= std::min(ranks_known, j.ranks.size());
    st_ranks = ranks_known;
    for (const auto& r : j.ranks) state_bytes -= std::min(state_bytes, r.est_bytes);
    st_state_bytes = state_bytes;
    jobs.erase(it);
    ++st_evicted;
}

bool LiveServer::Impl::make_room(const Job* keep) {
    const uint64_t now = mono_ns(), protect = to_ns(opt.progress_protect_s);
    while ((!keep && jobs.size() >= opt.max_jobs) || ranks_known >= opt.max_ranks) {
        // A finished idle job first, then the idle one heard from least recently, then a connected one that shows
        // no progress: connections held open and made-up jobs never lock out a job that is training.
        std::vector<JobWeight> w;
        std::vector<const std::string*> keys;  // parallel to w (no copy of every job's id per Hello)
        w.reserve(jobs.size());
        keys.reserve(jobs.size());
        int keep_i = -1;
        for (const auto& [id, j] : jobs) {
            JobWeight x;
            keys.push_back(&id);
            x.finished = !j->ranks.empty();
            for (const auto& r : j->ranks) {
                x.connected = x.connected || r.conn_id != 0;
                x.finished = x.finished && r.bye;
                x.last_frame_ns = std::max(x.last_frame_ns, r.last_frame_ns);
            }
            x.progressing = j->last_progress_ns && now - j->last_progress_ns < protect;
            if (j.get() == keep) keep_i = int(w.size());
            w.push_back(std::move(x));
        }
        const int v = pick_victim(w, keep_i);
        if (v < 0) return false;
        evict_job(std::string(*keys[size_t(v)]));
    }
    return true;
}

std::shared_ptr<const std::string> LiveServer::Impl::metrics_body(uint64_t now, metrics::Format format) {
    const size_t f = format == metrics::Format::OpenMetrics ? 1 : 0;
    if (auto fresh = fresh_render[f].lock(); fresh && now - fresh_render_ns[f] < 1'000'000'000ull) return fresh;
    renders.erase(std::remove_if(renders.begin(), renders.end(), [](const auto& w) { return w.expired(); }),
                  renders.end());
    size_t held = 0;
    std::shared_ptr<const std::string> newest;
    // A rendering's format is in its last line: "# EOF" ends OpenMetrics only.
    const auto is_om = [](const std::string& b) { return b.size() >= 6 && b.compare(b.size() - 6, 6, "# EOF\n") == 0; };
    for (const auto& w : renders)
        if (auto r = w.lock()) {
            held += r->size();
            if (is_om(*r) == (f == 1)) newest = std::move(r);
        }
    // Scrapers that do not read keep their renderings alive until the scrape timeout: past the budget, a new one
    // gets the newest rendering of its format already held (a little stale) rather than one more.
    if (newest && held + opt.metrics_max_bytes > opt.metrics_queue_max) return newest;
    auto body = std::make_shared<const std::string>(render_metrics(format));
    renders.push_back(body);
    fresh_render[f] = body;
    fresh_render_ns[f] = now;
    return body;
}

// ---- the loop, start and stop ----

void LiveServer::Impl::run() noexcept {
    try {
        std::vector<epoll_event> events(1024);
        uint64_t last_sweep = mono_ns(), last_tick = 0;
        while (!stopping.load(std::memory_order_relaxed)) {
            const int n = epoll_wait(epfd, events.data(), int(events.size()), 50);
            if (n < 0 && errno != EINTR) {
                log(fmt::format("epoll_wait failed: {}", strerror(errno)));
                break;
            }
            for (int i = 0; i < n; ++i) {
                const uint64_t id = events[size_t(i)].data.u64;
                const uint32_t ev = events[size_t(i)].events;
                if (id == kListenId) {
                    accept_all(listen_fd, false);
                    continue;
                }
                if (id == kMetricsId) {
                    accept_all(metrics_fd, true);
                    continue;
                }
                if (id == kWakeId) {
                    uint64_t n = 0;
                    if (read(wake_fd, &n, sizeof n) < 0) {
                    }
                    take_analysis();
                    continue;
                }
                auto it = conns.find(id);
                if (it == conns.end()) continue;  // closed earlier in this batch
                Conn& c = *it->second;
                if (ev & EPOLLOUT) {
                    if (!flush(c)) continue;
                }
                if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
            }
            const uint64_t now = mono_ns();
            if (now - last_tick >= kTickNs / 2) {
                last_tick = now;
                maybe_analyze(now);
            }
            if (now - last_sweep >= sweep_period_ns()) {
                last_sweep = now;
                sweep(now);
            }
        }
    } catch (const std::exception& e) {
        log(std::string("live collector stopped: ") + e.what());
    } catch (...) {
        log("live collector stopped: unknown error");
    }
}

void LiveServer::Impl::close_all() {
    std::vector<uint64_t> ids;
    for (const auto& [id, c] : conns) ids.push_back(id);
    for (uint64_t id : ids) close_conn(id);
    for (int* fd : {&listen_fd, &metrics_fd, &wake_fd, &epfd, &spare_fd})
        if (*fd >= 0) close(*fd), *fd = -1;
}

LiveServer::LiveServer(ServerOptions opt) : impl_(std::make_unique<Impl>()) { impl_->opt = std::move(opt); }

LiveServer::~LiveServer() { stop(); }

bool LiveServer::start(std::string* err) noexcept {
    try {
        Impl& m = *impl_;
        if (m.started) return true;
        m.boot = this_boot_id_hash();
        m.own_uid = geteuid();
        m.hostname = this_hostname();
        if (!m.opt.token.empty() && !m.opt.metrics_ids && !fresh_nonce(m.pseudonym_key))
            m.pseudonym_key = m.opt.token + m.hostname;  // never shown; only keys the /metrics pseudonyms
        m.epfd = epoll_create1(EPOLL_CLOEXEC);
        m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        m.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (m.epfd < 0 || m.wake_fd < 0) {
            if (err) *err = std::string("epoll/eventfd: ") + strerror(errno);
            m.close_all();
            return false;
        }
        m.listen_fd = listen_on(m.opt.listen, m.port, err);
        if (m.listen_fd < 0) {
            m.close_all();
            return false;
        }
        if (!m.opt.metrics_listen.empty()) {
            m.metrics_fd = listen_on(m.opt.metrics_listen, m.metrics_port, err);
            if (m.metrics_fd < 0) {
                m.close_all();
                return false;
            }
        }
        auto add = [&](int fd, uint64_t id) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u64 = id;
            epoll_ctl(m.epfd, EPOLL_CTL_ADD, fd, &ev);
        };
        add(m.listen_fd, Impl::kListenId);
        if (m.metrics_fd >= 0) add(m.metrics_fd, Impl::kMetricsId);
        add(m.wake_fd, Impl::kWakeId);
        m.stopping = false;
        m.thread = std::thread([&m] { m.run(); });
        m.started = true;
        return true;
    } catch (const std::exception& e) {
        if (err) *err = e.what();
        impl_->close_all();
        return false;
    } catch (...) {  // noexcept, and with NCCLWATCH_COLLECTOR=auto it runs inside rank 0's training process
        if (err) *err = "unknown error";
        impl_->close_all();
        return false;
    }
}

void LiveServer::stop() noexcept {
    Impl& m = *impl_;
    if (!m.started) return;
    m.stopping = true;
    const uint64_t one = 1;
    if (write(m.wake_fd, &one, sizeof one) < 0) {
    }
    if (m.thread.joinable()) m.thread.join();
    m.worker.reset();  // joins the analysis thread (after the task it may be running)
    m.close_all();
    m.started = false;
}

ServerStats LiveServer::stats() const noexcept {
    const Impl& m = *impl_;
    ServerStats s;
    s.connections = m.st_connections;
    s.ranks_known = m.st_ranks;
    s.frames = m.st_frames;
    s.bad_frames = m.st_bad;
    s.reports = m.st_reports;
    s.analyses = m.st_analyses;
    s.refused = m.st_refused;
    s.evicted_jobs = m.st_evicted;
    s.buffered_bytes = m.st_buffered;
    s.log_suppressed = m.st_suppressed;
    s.claims_refused = m.st_claims;
    s.unproven_closed = m.st_unproven_closed;
    s.state_bytes = m.st_state_bytes;
    s.port = m.port;
    s.metrics_port = m.metrics_port;
    return s;
}

}  // namespace ncw::live
