// The live collector's one class, LiveServer::Impl (live_server.h), run by one thread (a large job's analysis runs on
// live/analysis_worker.h's, on snapshots shared with it: own_snapshot copies before a write): what it keeps per job,
// rank and connection, and its methods, defined by part:
//   live_server.cpp          connections and frames: accept, read, write, the frame dispatch, HTTP /metrics
//                            requests; the loop, start and stop
//   live_server_ranks.cpp    the ranks' Hello and Digest, kept as snapshots on the collector's clock (clock offsets)
//   live_server_reports.cpp  analysis as digests change, the report (worded in report/report_text.h), dump requests,
//                            /metrics
//   live_server_bounds.cpp   the bounds: buffer budgets, deadlines, job eviction, rate-limited logging (log_limiter.h)
// Private to lib/live.
#pragma once

#include <fmt/format.h>
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
#include "live/live_server.h"
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
// A job met mid-run (Job::resume_wait_until_ns) waits this long at most for its ranks to come back: their clients
// retry with a backoff of at most 30 s (shim/live/collector_endpoint.cpp), plus a digest's tick.
constexpr uint64_t kResumeGraceNs = 32'000'000'000;
constexpr uint64_t kLagWindowNs = 250'000'000;        // "lately", for how late frames are read
constexpr uint64_t kUnprovenGraceNs = 1'000'000'000;  // a connection without a Hello is evicted only past this age
constexpr size_t kMaxPinnedSigs = 4;                  // Job::pinned_sigs, per communicator
// Issue 45: the absent ranks a job's communicators may have in its analysis beyond the ranks it reported
// (AnalysisOptions::absent_floor): a few nodes' ranks that never connected are still judged; a claimed size is not.
constexpr size_t kAbsentFloor = 64;
// Said once the job's ranks stopped arriving this long: a large job starting up has communicators whose ranks are not
// all in yet, set aside for a moment.
constexpr uint64_t kSetAsideSayNs = 2'000'000'000;

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
    bool digest_since_hello = false;  // its state is known on this connection (Job::resume_wait counts it back)
    OffsetFilter clock;
    uint64_t rank_start_mono_ns = 0;  // as the rank sent it (its own clock)
    size_t est_bytes = 0;             // its snapshot's estimated size, as counted in Impl::state_bytes
    // Its connection proved who it is (Conn::proven) when it said Hello: such a job is never evicted for an unproven
    // one (admission.h).
    bool proven = false;
    size_t deferred = 0;  // 1 + its index in Job::deferred while a digest of it waits there; 0: none

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
    // One per rank at most (RankState::deferred): a rank's second digest meanwhile applies both, on a copy of its
    // snapshot, so that a rank sending fast during a long analysis grows nothing. A rank of SIZE_MAX: taken already.
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
    bool absent_said = false;       // communicators set aside by the analysis (JobResult::set_aside) were logged
    uint64_t last_new_rank_ns = 0;  // when its newest rank said its first Hello
    size_t bytes = 0;               // its ranks' RankState::est_bytes (ServerOptions::max_job_bytes)
    // Per communicator, the sequence numbers of the collective MISMATCHes found (the earliest kMaxPinnedSigs): every
    // rank's signatures there outlive the window of kRecentSigs, so that a later analysis still finds the first
    // disagreement, as `analyze` does in the ranks' rings, beside a stall that follows it.
    std::map<uint64_t, std::set<uint64_t>> pinned_sigs;
    // Met mid-run (protocol 1.15: its first Hello was a reconnection; this collector was restarted): until every rank
    // is back, or kResumeGraceNs, nothing is judged. The ranks that reconnected first would be judged against
    // ranks not heard from yet, and innocent ones named (resume_wait). 0: not waiting.
    uint64_t resume_wait_until_ns = 0;
    bool resume_said = false;
    uint64_t signature = 0;  // its first rank's rendezvous (job_signature): another under its id is another job
};

// A job's rendezvous as its ranks see it: WORLD_SIZE, MASTER_ADDR and MASTER_PORT (from the Hello's environment).
// Every rank of one job has the same; two jobs given one id differ in it. 0: the Hello names no MASTER_ADDR or
// MASTER_PORT (nothing to tell jobs apart by).
uint64_t job_signature(const HeaderInfo& h);

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
    // Issue 28, point 5: who the peer is (peer_proof.h), for a loopback peer without a token; on a relay, the
    // relay's own user (asked once: relay_asked).
    bool loopback = false;
    bool uid_known = false;
    uint32_t peer_uid = 0;
    // Issue 45, item 3 (protocol 1.16). On a relay: the newest minor its frames said, whether its probe (a RelayClose
    // of channel 0) was answered, whether its user was asked. On a relayed rank: what its relay found at the rank's
    // socket (a RelayPeer before the channel's first frame), none from an older relay.
    uint16_t relay_minor = 0;
    bool relay_answered = false;
    bool relay_asked = false;
    std::unique_ptr<wire::RelayPeer> relay_peer;
    // Issue 45: who it is was proven at its Hello (the token, or, without one, the pid of a loopback peer), and by
    // which process (Impl::pid_conns: one process is one rank). A remote peer with --insecure, or a relay's rank
    // without a token, is not proven.
    bool proven = false;
    int64_t proven_pid = 0;
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
    uint64_t own_pid_ns = 0;  // our pid namespace (peer_proof.h own_pid_namespace): a relay's pids are ours in it
    KeyedLimiter wrong_token_named;  // a wrong token that claims a known job: named once a minute per (job, rank, ip)
    // Wrong-token claims of jobs with no rank here, by job: the distinct ranks seen within a minute (bounded).
    struct WrongTokenJob {
        uint64_t since_ns = 0;
        std::set<int> ranks;
    };
    std::map<std::string, WrongTokenJob> wrong_token_jobs;
    // Without a token, the process that holds each proven rank's connection (Conn::proven_pid -> its Conn): the shim
    // sends one Hello a process, so a process's second rank is a claim no rank makes (15,000 fake ranks from 3
    // processes took 1.44 GB).
    std::unordered_map<int64_t, uint64_t> pid_conns;
    // Set by stop(): an analysis on the loop's thread stops at its next step (AnalysisOptions::cancel).
    std::atomic<bool> cancel_analysis{false};
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
    // A relay's frame: a rank's frame under its channel (the channel's Conn made at its first frame), a channel
    // closed, the relay's probe (1.16), or what it found at a rank's socket (1.16). false: the relay's connection was
    // closed.
    bool on_relay_frame(Conn& c, const wire::FrameHeader& h);
    // The Conn of a relay's channel, made at its first frame; nullptr: over the bounds (the relay was told to close
    // it) or the relay's connection closed (*relay_gone).
    Conn* channel_conn(Conn& relay, uint32_t channel, bool* relay_gone);
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
    // The rank's key in its Job ("rank R", or "pid HOST:PID" without a global rank).
    static std::string rank_key(const HeaderInfo& h);
    bool refuse(Conn& c, const std::string& reason, bool retry = false);
    // Without a token, who a loopback peer is (peer_proof.h): its user, its pid, its rank file; the process proven
    // goes into the Hello's header (HeaderInfo::proven_pid). A relayed rank by what its relay forwarded, from a relay
    // that is proven itself (prove_relayed). false: refused.
    bool prove_hello(Conn& c, wire::Hello& m, uint64_t now);
    bool prove_relayed(Conn& c, wire::Hello& m);
    // A rank whose process here is not the pid it says (a container's), or is not seen here: said, rate-limited.
    void note_proven_pid(const Conn& c, const HeaderInfo& h);
    // A claim refused: counted, logged rate-limited (under `cause`, else by retry), answered with a Reject.
    bool refuse_claim(Conn& c, const HeaderInfo& hi, const std::string& why, bool retry, const char* cause = nullptr);
    // Whether the collector takes the ranks of `uid` without a token; else why not, for the log and the Reject.
    bool uid_allowed(uint32_t uid) const;
    std::string uid_refused(uint32_t uid) const;
    // A rank's snapshot changed: its estimate in state_bytes follows.
    void account_rank(Job& job, size_t i);
    void drop_pending(Conn& c);
    // The analysis runs in live mode on this boot's clock: the header is made to look like a file of this boot
    // (so nothing is rebased through wall clocks), with the start moved by the measured offset. A rank on another
    // host keeps its host name, so job_view never probes its pid here; one on another boot of a host with our name
    // is renamed, for the same reason.
    void put_header_on_our_clock(const RankState& r, HeaderInfo& h);
    // false: the connection was closed (or is closing): the rank went past its budget (within_budget).
    bool on_digest(Conn& c, wire::Digest& m, uint64_t now);
    void apply_digest(Job& job, size_t rank, wire::Digest& m);
    bool on_state(Conn& c, wire::State& m, uint64_t now);
    // After a rank's state grew: within ServerOptions::max_rank_bytes and its job within max_job_bytes, else its
    // communicators and tables are dropped and its connection refused, with a log line. false: refused.
    bool within_budget(Job& job, size_t rank);
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
    // A job met mid-run whose ranks are not all back yet (Job::resume_wait_until_ns): said once, judged later.
    bool resume_wait(Job& job, uint64_t now);
    // Notes a wrong-token claim of a job with no rank here; how many distinct ranks of it did so within a minute.
    int wrong_token_job(const HeaderInfo& hi, uint64_t now);
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
    // never `keep`; for a proven newcomer, at last a training job that is not proven. false: none is idle.
    bool make_room(const Job* keep, bool proven);
    // The body of one /metrics response: shared with scrapers that asked within a second, and bounded in total
    // (metrics_queue_max) by handing out the newest rendering still held instead of a new one.
    std::shared_ptr<const std::string> metrics_body(uint64_t now, metrics::Format format);

    // ---- the loop, start and stop ----

    void run() noexcept;
    void close_all();
};

}  // namespace ncw::live
