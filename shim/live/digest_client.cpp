// The live digest client: see digest_client.h. Everything here runs on the client's own thread, except
// start_digest_client (start_runtime, once) and stop_digest_client (atexit), which only signal it.
#include "shim/live/digest_client.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "live/live_auth.h"
#include "live/net.h"
#include "ncclwatch/format_fields.h"
#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/live/collector_endpoint.h"
#include "shim/record/rank_file_writer.h"
#include "shim/record/runtime.h"

namespace ncw {
namespace live_client {

// ---- The client thread ----

namespace {

constexpr double kConnectTimeoutS = 5.0;
constexpr uint64_t kKeepAliveNs = 1000000000ull;
// A frame that cannot leave for this long means a collector that stopped reading (or a path that silently died):
// drop the connection and reconnect rather than stay stuck behind it.
constexpr uint64_t kSendStallNs = 30000000000ull;
// NCCLWATCH_COLLECTOR=auto: the collector is rank 0's, and starts with rank 0's shim, so a rank that starts first
// finds nothing listening yet. Until the first connection, for this long, a refused attempt is expected: it is
// retried quietly, at least each second; past it, the first failure is a warning as any other.
constexpr uint64_t kAutoStartGraceNs = 60000000000ull;
constexpr double kAutoStartRetryS = 1.0;
// A State carries the point-to-point counts (read from the ring at most once this long, and once more this long after
// the rank's last change, at rest): what a stall verdict pairs, without reading the ring for every digest.
constexpr uint64_t kP2pAfterNs = 1000000000ull;

class Client {
public:
    Client(Runtime& rt, Endpoint ep, bool run_server)
        : rt_(rt), ep_(std::move(ep)), run_server_(run_server), backoff_(0.5, 30.0, seed()) {
        wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }

    void run() noexcept {
        pthread_setname_np(pthread_self(), "ncw-digest");  // visible in top -H, and measurable in /proc
        started_ns_ = clock_mono_ns();
        try {
            std::string why;
            if (apply_loopback_rule(rt_.cfg, run_server_, ep_, &why)) {
                if (run_server_)  // ep_ is MASTER_ADDR (or 127.0.0.1) here; it takes our job's ranks only
                    start_embedded_collector(rt_.cfg, ep_, rt_.id.job_id, rt_.id.world_size);
                reader_ = std::make_unique<SelfReader>(rt_.file, &rt_.slots, &rt_.digest_pass);
                // From here on the process's end reaches the collector (process_end.cpp wakes us: tell_live_end).
                rt_.live_end.wake_fd.store(wake_fd_, std::memory_order_release);
                if (!reader_->error().empty())
                    log().warn("live digests read this process's state from memory ({} could not be read back: {})",
                               rt_.file.path, reader_->error());
                loop();
            } else {
                log().warn("no live digests: {}", why);
            }
        } catch (const std::exception& e) {
            try {
                NCW_LOG_ONCE(error, "the live digest client stopped: {}", e.what());
            } catch (...) {  // this thread lives in the host's process: nothing may escape it
            }
        } catch (...) {
            try {
                NCW_LOG_ONCE(error, "the live digest client stopped");
            } catch (...) {
            }
        }
        rt_.live_end.wake_fd.store(-1, std::memory_order_release);
        answer_end();  // nobody waits for an end this thread will not send
        close_socket();
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = true;
        cv_.notify_all();
    }

    // From the exiting thread: ask for a Bye and wait for it briefly.
    void stop(std::chrono::milliseconds wait) noexcept {
        stopping_.store(true, std::memory_order_release);
        wake();
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, wait, [&] { return finished_; });
    }

    // In a forked child (only the forking thread exists): close our copies of the descriptors, never touch the rest.
    void forget_after_fork() noexcept {
        forked_ = true;
        rt_.live_end.wake_fd.store(-1, std::memory_order_relaxed);
        if (fd_ >= 0) ::close(fd_);
        if (wake_fd_ >= 0) ::close(wake_fd_);
        fd_ = wake_fd_ = -1;
    }

private:
    enum class State { Idle, Connecting, Open, Rejected };

    static uint64_t seed() { return uint64_t(getpid()) * 0x9e3779b97f4a7c15ull ^ clock_mono_ns(); }

    void wake() noexcept {
        if (wake_fd_ >= 0) {
            const uint64_t one = 1;
            ssize_t r = ::write(wake_fd_, &one, sizeof one);
            (void)r;
        }
    }

    std::string where() const { return ep_.host + ":" + std::to_string(ep_.port); }

    void loop() {
        uint64_t connect_deadline = 0;
        uint64_t next_tick = 0;
        // Ticks come at the digest period, and at least each second for the keep-alive.
        const uint64_t tick_ns = std::min(digest_ns_, kKeepAliveNs);
        for (;;) {
            const uint64_t now = clock_mono_ns();
            if (stopping_.load(std::memory_order_acquire)) {
                if (state_ == State::Open) send_bye();
                return;
            }
            if (forked_) return;
            if (rt_.live_end.asked.load(std::memory_order_acquire) != rt_.live_end.sent.load(std::memory_order_acquire))
                send_end();

            switch (state_) {
                case State::Idle:
                    if (now >= next_attempt_) {
                        begin_connect();
                        connect_deadline = now + uint64_t(kConnectTimeoutS * 1e9);
                    }
                    break;
                case State::Connecting:
                    if (now >= connect_deadline) {
                        close_socket();
                        connect_failed("timed out");
                    }
                    break;
                case State::Open:
                    if (now >= next_tick) {
                        tick(now);
                        next_tick = now + tick_ns;
                    }
                    if (send_.busy() && now - busy_since_ > kSendStallNs) {
                        lost("the collector has not read for 30 s");
                    }
                    break;
                case State::Rejected: return;  // refused for good: the thread has nothing left to do
            }

            // Wait for the socket or the next deadline.
            uint64_t until = now + 1000000000ull;
            if (state_ == State::Idle) until = std::min(until, next_attempt_);
            if (state_ == State::Connecting) until = std::min(until, connect_deadline);
            if (state_ == State::Open) until = std::min(until, next_tick);
            pollfd fds[2];
            nfds_t nfds = 0;
            fds[nfds++] = {wake_fd_, POLLIN, 0};
            int sock_idx = -1;
            if (fd_ >= 0) {
                sock_idx = int(nfds);
                fds[nfds++] = {fd_, socket_events(), 0};
            }
            const uint64_t now2 = clock_mono_ns();
            const int timeout_ms = until > now2 ? int(std::min<uint64_t>((until - now2 + 999999) / 1000000, 1000)) : 0;
            const int r = ::poll(wake_fd_ >= 0 ? fds : fds + 1, wake_fd_ >= 0 ? nfds : nfds - 1, timeout_ms);
            if (r <= 0) continue;
            if (wake_fd_ >= 0 && fds[0].revents) {
                uint64_t v;
                ssize_t rd = ::read(wake_fd_, &v, sizeof v);
                (void)rd;
            }
            if (sock_idx < 0 || fd_ < 0) continue;
            on_socket(fds[sock_idx].revents);
        }
    }

    // What the socket is polled for: the connection's completion, what the collector sends, room for the pending frame.
    short socket_events() const { return short(POLLIN | (state_ == State::Connecting || send_.busy() ? POLLOUT : 0)); }

    // What the poll said of the socket: the connection made (or failed), frames from the collector, the pending frame
    // sent on.
    void on_socket(short rev) {
        if (state_ == State::Connecting) {
            if (rev & (POLLOUT | POLLERR | POLLHUP)) finish_connect();
            return;
        }
        if (state_ != State::Open) return;
        if (rev & (POLLIN | POLLERR | POLLHUP)) receive();
        if (state_ == State::Open && fd_ >= 0 && (rev & POLLOUT)) flush();
    }

    // Every way into Idle goes through here: the next attempt waits out the backoff (short while auto starts up).
    void schedule_retry() {
        double delay = backoff_.next_delay_s();
        if (auto_start_up()) delay = std::min(delay, kAutoStartRetryS);
        next_attempt_ = clock_mono_ns() + uint64_t(delay * 1e9);
    }

    // Auto mode before the first connection, within the grace: rank 0's collector may not be listening yet.
    bool auto_start_up() const {
        return auto_ && !ever_connected_ && clock_mono_ns() - started_ns_ < kAutoStartGraceNs;
    }

    void begin_connect() {
        std::string why;
        fd_ = live::connect_start(ep_, &why);
        if (fd_ < 0) return connect_failed(why);
        state_ = State::Connecting;
    }

    void finish_connect() {
        std::string why;
        if (!live::connect_finished(fd_, &why)) {
            close_socket();
            state_ = State::Idle;
            return connect_failed(why);
        }
        state_ = State::Open;
        reader_frames_ = wire::FrameReader();
        last_digest_.clear();
        send_.clear();
        connected_at_ = clock_mono_ns();
        // A connection is quiet (debug level); a lost one that was warned of has its return said, one that was not
        // (rank 0's collector in auto mode, a moment's outage under load) returns quietly too.
        if (ever_connected_ && failures_logged_)
            log().info("reconnected to the live collector at {}", where());
        else if (ever_connected_)
            log().debug("reconnected to the live collector at {}", where());
        else
            log().debug("sending live digests to the collector at {}", where());
        const bool resumed = ever_connected_;
        ever_connected_ = true;
        failures_logged_ = false;

        wire::Hello hello;  // 1.2: no token in it; a collector that requires one challenges, and we prove it
        hello.header = reader_->header();
        // The file's environment region also holds the library scan's facts; without a file, the process's own list.
        if (hello.header.env.empty())
            for (const auto& [name, value] : rt_.env) hello.header.env.push_back(name + "=" + value);
        hello.file = rt_.file.file_backed ? rt_.file.path : std::string();
        hello.resumed = resumed;
        std::vector<uint8_t> frame;
        wire::encode(hello, frame);
        hello_payload_.assign(frame.begin() + wire::kHeaderBytes, frame.end());
        acked_ = false;
        queue(std::move(frame));
    }

    void connect_failed(const std::string& why) {
        state_ = State::Idle;
        schedule_retry();
        if (auto_start_up()) {
            log().debug("rank 0's live collector at {} is not up yet ({}); retrying", where(), why);
            return;
        }
        if (auto_ && ever_connected_) {
            // Rank 0's collector ends with rank 0, and a healthy job's end often takes rank 0 first: the ranks still
            // closing would warn of an outage nobody can act on. A rank 0 that died is named by the watchdog's files.
            log().debug("rank 0's live collector at {} is gone ({}); retrying", where(), why);
            return;
        }
        // Once per outage: a collector that is not up yet (or never will be) is not worth a line every retry.
        if (!failures_logged_) {
            failures_logged_ = true;
            log().warn("cannot reach the live collector at {} ({}{}); retrying with backoff, training is not affected",
                       where(), why,
                       auto_ && !ever_connected_ ? "; rank 0's collector (NCCLWATCH_COLLECTOR=auto) has not come up "
                                                   "in 60 s"
                                                 : "");
        } else {
            log().debug("live collector at {} still unreachable ({})", where(), why);
        }
    }

    void lost(const std::string& why) {
        close_socket();
        state_ = State::Idle;
        if (auto_) {
            // Rank 0's collector goes with rank 0, which a healthy job's end takes first: not worth a line.
            log().debug("lost the live collector at {} ({}); reconnecting with backoff", where(), why);
        } else if (!failures_logged_) {
            failures_logged_ = true;
            log().warn("lost the live collector at {} ({}); reconnecting with backoff", where(), why);
        }
        // A connection that lasted a while was a good one: start the backoff over.
        if (clock_mono_ns() - connected_at_ > 10000000000ull) backoff_.reset();
        schedule_retry();
    }

    void close_socket() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        send_.clear();
    }

    // Offers a frame; false when an older one is still pending (the caller's frame is dropped: it is rebuilt fresh
    // next tick).
    bool queue(std::vector<uint8_t>&& frame) {
        if (!send_.offer(std::move(frame))) return false;
        busy_since_ = clock_mono_ns();
        last_sent_ = busy_since_;
        flush();
        return true;
    }

    void flush() {
        std::string err;
        if (!send_.flush(fd_, &err)) lost(err);
    }

    void tick(uint64_t now) {
        if (!acked_) return;       // nothing but the Proof goes out before the collector accepted the Hello
        if (send_.busy()) return;  // the collector is behind: this tick's digest would be stale by the time it left
        std::vector<uint8_t> frame;
        const wire::Digest digest = make_digest(reader_->header(), reader_->comms(), now, last_digest_);
        const size_t sent = wire::encode(digest, frame);
        if (sent < digest.comms.size())
            NCW_LOG_ONCE(warn,
                         "{} live communicators: a live digest holds {} of them; the other {} are watched by this "
                         "process only (not by the live collector)",
                         digest.comms.size(), sent, digest.comms.size() - sent);
        // A change goes out at most once per digest period; in between (changed or not), a keep-alive each second.
        const bool due = last_digest_.empty() || now - last_digest_at_ >= digest_ns_;
        const bool changed = due && digest_changed(last_digest_.frame, frame);
        // A rank at rest on a communicator with point-to-point traffic sends its counts once, a second after its last
        // change: a peer's wait is then paired with what it posted (a pipeline stage in the user's code before its
        // send), which the digest's collective counts cannot say.
        const bool p2p_refresh = !changed && p2p_unsent_ && now - last_digest_at_ >= kP2pAfterNs;
        if (changed || p2p_refresh) {
            std::vector<uint8_t> copy = frame;
            const bool p2p_fresh = append_state(digest.comms, now, p2p_refresh, frame);
            if (queue(std::move(frame))) {
                last_digest_.take(std::move(copy));
                last_digest_at_ = now;
                p2p_unsent_ = !p2p_fresh && has_p2p(digest.comms);
            }
        } else if (now - last_sent_ >= kKeepAliveNs) {
            std::vector<uint8_t> ka;
            wire::encode(wire::KeepAlive{now}, ka);
            queue(std::move(ka));
        }
    }

    // Protocol 1.6: after a Digest, what the file says beyond its comm slots (how the process ended; the point-to-point
    // counts per peer while an op has waited a second or more).
    // Whether the point-to-point counts it carried were read now (not the cached table of an earlier State).
    bool append_state(const std::vector<CommInfo>& comms, uint64_t now, bool fresh_p2p, std::vector<uint8_t>& out) {
        wire::State st;
        st.sent_mono_ns = now;
        const HeaderInfo h = reader_->header();
#define NCW_COPY_LIVE(type, name, ...) st.live.name = h.name;
        NCW_HEADER_LIVE_FIELDS(NCW_COPY_LIVE)
        // Protocol 1.9: the last words and the teardown in progress.
        NCW_HEADER_LAST_WORDS_FIELDS(NCW_COPY_LIVE)
        NCW_HEADER_TEARDOWN_FIELDS(NCW_COPY_LIVE)
        // Protocol 1.14: who ended the process and who aborted a communicator first.
        NCW_HEADER_END_CAUSE_FIELDS(NCW_COPY_LIVE)
        // Protocol 1.15: the last termination signal the program's own handler took.
        NCW_HEADER_ABSORBED_FIELDS(NCW_COPY_LIVE)
#undef NCW_COPY_LIVE
        // Once a communicator has point-to-point traffic, every State carries its counts (the collector keeps only
        // the latest State's): read from the ring at most once a kP2pAfterNs, else the table read last.
        bool read_now = false;
        if (has_p2p(comms)) {
            if (fresh_p2p || !p2p_cached_ || now - p2p_read_at_ >= kP2pAfterNs) {
                FileSnapshot s;
                s.comms = comms;
                reader_->p2p(s);
                p2p_cache_ = std::move(s.p2p);
                p2p_cache_wrapped_ = s.p2p_wrapped;
                p2p_cached_ = true;
                p2p_read_at_ = now;
                read_now = true;
            }
            st.p2p_read = true;
            st.p2p_wrapped = p2p_cache_wrapped_;
            st.p2p = p2p_cache_;
            st.p2p_read_mono_ns = p2p_read_at_;  // the counts are as new as their reading, not as this State
        }
        wire::encode(st, out);
        return read_now;
    }

    static bool has_p2p(const std::vector<CommInfo>& comms) {
        return std::any_of(comms.begin(), comms.end(), [](const CommInfo& c) { return c.p2p_sends || c.p2p_recvs; });
    }

    // The process is ending (process_end.cpp asked): its last Digest and State go out now, whatever the period, the
    // frame still pending first; then the asking thread may go on. Bounded: it waits for us at most kLiveEndWaitMs.
    void send_end() {
        const uint64_t deadline = clock_mono_ns() + 150000000ull;
        if (ready_for_end(deadline)) {
            while (send_.busy() && fd_ >= 0 && clock_mono_ns() < deadline) {
                flush();
                pollfd p{fd_, POLLOUT, 0};
                if (send_.busy() && fd_ >= 0) ::poll(&p, 1, 5);
            }
            if (fd_ >= 0 && !send_.busy()) {
                const uint64_t now = clock_mono_ns();
                std::vector<uint8_t> frame;
                const wire::Digest digest = make_digest(reader_->header(), reader_->comms(), now, last_digest_);
                wire::encode(digest, frame);
                append_state(digest.comms, now, has_p2p(digest.comms), frame);
                if (queue(std::move(frame))) {
                    last_digest_at_ = now;
                    while (send_.busy() && fd_ >= 0 && clock_mono_ns() < deadline) {
                        pollfd p{fd_, POLLOUT, 0};
                        ::poll(&p, 1, 5);
                        flush();
                    }
                }
            }
        }
        answer_end();
    }

    // A process that ends in its first milliseconds may not have been accepted yet (connecting, or its Hello not
    // answered): finish the connection and the handshake within the end's deadline, one attempt where none is under
    // way, so the collector still learns how it ended instead of seeing a socket close with no evidence.
    bool ready_for_end(uint64_t deadline) {
        if (state_ == State::Idle) begin_connect();
        while (fd_ >= 0 && !(state_ == State::Open && acked_)) {
            const uint64_t now = clock_mono_ns();
            if (now >= deadline) break;
            pollfd p{fd_, socket_events(), 0};
            if (::poll(&p, 1, int(std::min<uint64_t>((deadline - now) / 1000000 + 1, 10))) > 0) on_socket(p.revents);
        }
        return state_ == State::Open && acked_ && fd_ >= 0;
    }

    void answer_end() noexcept {
        const uint32_t asked = rt_.live_end.asked.load(std::memory_order_acquire);
        uint32_t sent = rt_.live_end.sent.load(std::memory_order_relaxed);
        while (sent < asked && !rt_.live_end.sent.compare_exchange_weak(sent, asked, std::memory_order_acq_rel)) {
        }
    }

    void receive() {
        uint8_t buf[4096];
        for (;;) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                reader_frames_.feed(buf, size_t(n));
                if (size_t(n) < sizeof buf) break;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            return lost(n == 0 ? "closed by the collector" : strerror(errno));
        }
        wire::FrameHeader h;
        std::vector<uint8_t> payload;
        std::string err;
        for (;;) {
            const auto st = reader_frames_.next(h, payload, &err);
            if (st == wire::FrameReader::Status::NeedMore) return;
            if (st == wire::FrameReader::Status::Error) return lost("malformed frame from the collector: " + err);
            handle(h, payload);
            if (state_ != State::Open) return;
        }
    }

    void handle(const wire::FrameHeader& h, const std::vector<uint8_t>& payload) {
        std::string err;
        switch (wire::FrameType(h.type)) {
            case wire::FrameType::HelloAck:
                backoff_.reset();
                acked_ = true;
                hello_payload_.clear();
                break;
            case wire::FrameType::Challenge: {
                wire::Challenge m;
                if (acked_ || hello_payload_.empty() || !wire::decode(payload.data(), payload.size(), m, &err))
                    return lost("a malformed or unexpected token challenge from the collector" +
                                (err.empty() ? std::string() : ": " + err));
                // The token never leaves: only its HMAC over the collector's nonce and our Hello.
                wire::Proof proof;
                if (!rt_.cfg.token.empty()) {
                    const live::Digest32 mac =
                        live::token_proof(rt_.cfg.token, m.nonce, hello_payload_.data(), hello_payload_.size());
                    proof.mac.assign(mac.begin(), mac.end());
                }
                std::vector<uint8_t> frame;
                wire::encode(proof, frame);
                if (!queue(std::move(frame))) return lost("could not answer the token challenge");
                break;
            }
            case wire::FrameType::Reject: {
                wire::Reject m;
                if (!wire::decode(payload.data(), payload.size(), m, &err))
                    m.reason = "(unreadable reason: " + err + ")";
                if (h.flags & wire::kFlagRetry) return lost("refused for now: " + m.reason);
                log().error("the live collector at {} refused this rank: {}; no more live digests from this process",
                            where(), m.reason);
                close_socket();
                state_ = State::Rejected;
                break;
            }
            case wire::FrameType::DumpRequest: {
                wire::DumpRequest m;
                if (!wire::decode(payload.data(), payload.size(), m, &err)) {
                    log().warn("ignoring a malformed dump request from the live collector: {}", err);
                    break;
                }
                // Its verdict is said once per node by the watchdog (check_collector_verdict), the dump at debug.
                log().debug("the live collector asks for a dump{}{}", m.reason.empty() ? "" : ": ", m.reason);
                // Its reason is the job's verdict: the watchdog leads with it where this node cannot name the culprit.
                if (!m.reason.empty()) rt_.collector_verdict.put(m.reason.data(), m.reason.size(), clock_mono_ns());
                // The watchdog notices the bump at its next poll and writes the dump, as for a sibling's request.
                rt_.file.hdr->dump_request.fetch_add(1, std::memory_order_relaxed);
                break;
            }
            default: break;  // a frame type of a newer minor, or one meant for the collector: skipped
        }
    }

    void send_bye() {
        // Best effort within the time stop() waits: the pending frame, then Bye.
        const uint64_t deadline = clock_mono_ns() + 150000000ull;
        std::vector<uint8_t> bye;
        wire::encode_bye(bye);
        bool queued = false;
        while (fd_ >= 0 && clock_mono_ns() < deadline) {
            if (!queued && !send_.busy()) queued = send_.offer(std::move(bye));
            flush();
            if (queued && !send_.busy()) break;
            pollfd p{fd_, POLLOUT, 0};
            ::poll(&p, 1, 10);
        }
        if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
    }

    Runtime& rt_;
    Endpoint ep_;
    bool run_server_;
    const bool auto_ = rt_.cfg.collector == "auto";
    uint64_t started_ns_ = 0;
    Backoff backoff_;
    int wake_fd_ = -1;
    int fd_ = -1;
    State state_ = State::Idle;
    std::unique_ptr<SelfReader> reader_;
    wire::FrameReader reader_frames_;
    SendSlot send_;
    LastDigest last_digest_;
    std::vector<uint8_t> hello_payload_;  // what the token proof covers, until the Hello is accepted
    bool acked_ = false;
    const uint64_t digest_ns_ = uint64_t(rt_.cfg.digest_ms) * 1000000ull;
    uint64_t next_attempt_ = 0;
    uint64_t last_digest_at_ = 0;
    // The last State's point-to-point counts were not read at that change (a cached table), and some communicator has
    // such traffic: a refresh goes out once the rank is at rest.
    bool p2p_unsent_ = false;
    std::vector<FileSnapshot::P2pTable> p2p_cache_;
    bool p2p_cache_wrapped_ = false;
    bool p2p_cached_ = false;
    uint64_t p2p_read_at_ = 0;
    uint64_t last_sent_ = 0;
    uint64_t busy_since_ = 0;
    uint64_t connected_at_ = 0;
    bool ever_connected_ = false;
    bool failures_logged_ = false;

    std::atomic<bool> stopping_{false};
    std::atomic<bool> forked_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    bool finished_ = false;
};

std::atomic<Client*> g_client{nullptr};

}  // namespace
}  // namespace live_client

void start_digest_client(Runtime& rt) {
    using namespace live_client;
    if (rt.cfg.collector.empty() || g_client.load()) return;
    try {
        Endpoint ep;
        std::string err;
        if (!resolve_endpoint(rt.cfg, getenv("MASTER_ADDR"), ep, &err)) {
            log().error("no live digests: {}", err);
            return;
        }
        const bool run_server = rt.cfg.collector == "auto" && rt.id.global_rank == 0;
        auto* client = new Client(rt, ep, run_server);  // never freed: the thread may outlive every destructor
        g_client.store(client);
        std::thread([client] { client->run(); }).detach();
    } catch (const std::exception& e) {
        NCW_LOG_ONCE(error, "could not start the live digest client: {}", e.what());
    } catch (...) {
        NCW_LOG_ONCE(error, "could not start the live digest client");
    }
}

void stop_digest_client() {
    if (live_client::Client* c = live_client::g_client.load()) c->stop(std::chrono::milliseconds(200));
}

void digest_client_forget_after_fork() {
    // The parent's thread does not exist in the child; its object (and socket) stay, unused.
    if (live_client::Client* c = live_client::g_client.exchange(nullptr)) c->forget_after_fork();
}

}  // namespace ncw
