// The live collector's loop, start and stop (see live_server.h; its parts: live_impl.h).
#include "live/live_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "live/live_impl.h"

namespace ncw::live {

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
                if (id == kWakeId) continue;
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
    s.port = m.port;
    s.metrics_port = m.metrics_port;
    return s;
}

}  // namespace ncw::live
