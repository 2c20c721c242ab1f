// What the ranks say, kept as snapshots on the collector's clock: Hello (job, rank, token, clock anchor) and Digest
// (progress per communicator, moved by each rank's measured clock offset; its in-collective GPU times kept across
// digests).
#include <fmt/format.h>

#include <algorithm>

#include "live/live_impl.h"
#include "ncclwatch/format.h"
#include "read/gpu_spans.h"
#include "read/time_base.h"
#include "report/report_json.h"

namespace ncw::live {

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
    if (opt.token.empty()) return admit(c, m, now);
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
        // Its own log budget: junk of other kinds can never hide a wrong token.
        if (m.mac.empty())
            log_peer(c, "no token", "no token (NCCLWATCH_TOKEN is required)");
        else
            log_peer(c, "wrong token", "wrong token (its proof does not match)");
        return refuse(c, "token refused");
    }
    return admit(c, *hello, now);
}

bool LiveServer::Impl::admit(Conn& c, wire::Hello& m, uint64_t now) {
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
        // A rank's identity is bound to its connection: while that one is open and alive, a second Hello for the
        // same (job, rank) is refused and never takes the slot (an impostor, or a duplicate launch). One silent past
        // the window is stale (the peer went without a FIN): a reconnect replaces it.
        const RankState& held = job.ranks[idx];
        if (held.conn_id && held.conn_id != c.id) {
            if (now - held.last_frame_ns <= alive_window_ns(opt.dead_after_s)) {
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
    if (m.py_stacks) take_py_stacks(job, s.header, *m.py_stacks, d);
    job.dirty = true;
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

}  // namespace ncw::live
