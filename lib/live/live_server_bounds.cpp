// The live collector (live_server_impl.h): the bounds.
#include "live/live_server_impl.h"

namespace ncw::live {

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
    // A job that ended well is news (quiet inside rank 0, NCCLWATCH_COLLECTOR=auto); one dropped is the log's.
    const std::string forgotten =
        fmt::format("job {}: forgotten ({}, {} rank(s))", report::clean(id),
                    finished ? "every rank said Bye" : "silent past the retention or for room", j.ranks.size());
    if (finished)
        news(forgotten);
    else
        log_limited("eviction", forgotten);
    ranks_known -= std::min(ranks_known, j.ranks.size());
    st_ranks = ranks_known;
    for (const auto& r : j.ranks) state_bytes -= std::min(state_bytes, r.est_bytes);
    st_state_bytes = state_bytes;
    jobs.erase(it);
    ++st_evicted;
}

bool LiveServer::Impl::make_room(const Job* keep, bool proven) {
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
            x.proven = true;
            for (const auto& r : j->ranks) {
                x.connected = x.connected || r.conn_id != 0;
                x.finished = x.finished && r.bye;
                x.proven = x.proven && (!r.conn_id || r.proven);
                x.last_frame_ns = std::max(x.last_frame_ns, r.last_frame_ns);
            }
            x.progressing = j->last_progress_ns && now - j->last_progress_ns < protect;
            if (j.get() == keep) keep_i = int(w.size());
            w.push_back(std::move(x));
        }
        const int v = pick_victim(w, keep_i, proven);
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

}  // namespace ncw::live
