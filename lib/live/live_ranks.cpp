// What the ranks say, kept as snapshots on the collector's clock: Hello (job, rank, token, clock anchor) and Digest
// (progress per communicator, moved by each rank's measured clock offset; its in-collective GPU times kept across
// digests).
#include <fmt/format.h>

#include "live/live_impl.h"
#include "ncclwatch/format.h"
#include "read/gpu_spans.h"
#include "read/time_base.h"

namespace ncw::live {

namespace {

// Constant time in the length of the expected token.
bool token_ok(const std::string& expected, const std::string& got) {
    unsigned diff = expected.size() != got.size();
    for (size_t i = 0; i < expected.size(); ++i) diff |= uint8_t(expected[i]) ^ uint8_t(i < got.size() ? got[i] : 0);
    return diff == 0;
}

}  // namespace

bool LiveServer::Impl::on_hello(Conn& c, wire::Hello& m, uint64_t now) {
    if (!opt.token.empty() && !token_ok(opt.token, m.token)) {
        ++st_bad;
        // Its own log budget: junk of other kinds can never hide a wrong token.
        if (m.token.empty())
            log_peer(c, "no token", "no token (NCCLWATCH_TOKEN is required)");
        else
            log_peer(c, "wrong token", "wrong token");
        std::vector<uint8_t> f;
        wire::encode(wire::Reject{"token refused"}, f);
        c.close_after_flush = true;
        queue(c, f);
        return false;
    }
    const HeaderInfo& hi = m.header;
    const std::string key =
        hi.global_rank >= 0 ? fmt::format("rank {}", hi.global_rank) : fmt::format("pid {}:{}", hi.host, hi.pid);
    auto jit = jobs.find(hi.job_id);
    if (jit == jobs.end() || !jit->second->index.count(key)) {
        // Idle jobs make room (the oldest first); "full" only while every job kept has a rank connected.
        const bool new_job = jit == jobs.end();
        if (!make_room(new_job ? nullptr : jit->second.get())) {
            ++st_bad;
            log_peer(c, "full", "collector full (too many ranks or jobs)");
            std::vector<uint8_t> f;
            wire::encode(wire::Reject{"collector full"}, f);
            c.close_after_flush = true;
            queue(c, f);
            return false;
        }
    }
    jit = jobs.find(hi.job_id);  // make_room may have evicted jobs
    if (jit == jobs.end()) {
        auto j = std::make_unique<Job>();
        j->id = hi.job_id;
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
        job.snaps.emplace_back();
        ++ranks_known;
        st_ranks = ranks_known;
    } else {
        idx = rit->second;
        // A reconnect: the old connection (if the collector has not noticed it die yet) is stale.
        if (job.ranks[idx].conn_id && job.ranks[idx].conn_id != c.id) close_conn(job.ranks[idx].conn_id);
    }
    RankState& r = job.ranks[idx];
    FileSnapshot& s = job.snaps[idx];
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
    s.header = std::move(m.header);
    if (restarted) s.comms.clear();
    put_header_on_our_clock(r, s.header);
    c.hello = true;
    c.job = &job;
    c.rank = idx;
    job.dirty = true;

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
    RankState& r = job.ranks[c.rank];
    FileSnapshot& s = job.snaps[c.rank];
    r.last_frame_ns = now;
    if (m.sent_mono_ns && !r.clock.exact) r.clock.add(int64_t(now - m.sent_mono_ns));
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
        for (const auto& old : s.comms)
            if (old.comm_id == ci.comm_id && !old.recent.empty()) {
                const uint64_t first_new = ci.recent.empty() ? UINT64_MAX : ci.recent.front().seq;
                std::vector<SigInfo> sigs;
                for (const auto& g : old.recent)
                    if (g.seq < first_new) sigs.push_back(g);
                sigs.insert(sigs.end(), ci.recent.begin(), ci.recent.end());
                if (sigs.size() > disk::kRecentSigs) sigs.erase(sigs.begin(), sigs.end() - disk::kRecentSigs);
                ci.recent = std::move(sigs);
                break;
            }
    }
    s.comms = std::move(m.comms);
    job.dirty = true;
}

}  // namespace ncw::live
