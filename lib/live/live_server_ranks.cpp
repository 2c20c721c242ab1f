// The live collector (live_server_impl.h): the ranks' Hello, Digest and State.
#include "live/live_server_impl.h"

namespace ncw::live {

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
    c.proven = true;  // the token holder signed this Hello
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
    // One process is one rank (issue 45): the shim says Hello once a process, so a process whose connection speaks
    // for another (job, rank) claims what no rank does (one pid took 5,000 ranks). The same rank again is admit's
    // to judge (a reconnection).
    if (auto held = pid_conns.find(p.peer_pid); held != pid_conns.end() && held->second != c.id) {
        auto o = conns.find(held->second);
        const Conn* other = o == conns.end() ? nullptr : o->second.get();
        if (other && other->job && (other->job->id != hi.job_id || other->job->ranks[other->rank].key != rank_key(hi)))
            return refused(
                fmt::format("one process is one rank: pid {} already speaks for job {} {} on the "
                            "connection from {}",
                            p.peer_pid, report::clean(other->job->id), other->job->ranks[other->rank].key, other->peer),
                false);
    }
    c.proven = true;
    c.proven_pid = p.peer_pid;
    return true;
}

std::string LiveServer::Impl::rank_key(const HeaderInfo& h) {
    return h.global_rank >= 0 ? fmt::format("rank {}", h.global_rank) : fmt::format("pid {}:{}", h.host, h.pid);
}

bool LiveServer::Impl::admit(Conn& c, wire::Hello& m, uint64_t now) {
    const HeaderInfo& hi = m.header;
    const std::string key = rank_key(hi);
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
        // And within its job's (issue 45): what one job holds is bounded, however many ranks it claims.
        if (jit != jobs.end() && jit->second->bytes + snapshot_bytes(FileSnapshot{}) > opt.max_job_bytes) {
            ++st_claims;
            log_limited("job budget", fmt::format("refused {} of job {} from {}: the job's state is at its budget of "
                                                  "{} bytes (--max-job-bytes)",
                                                  key, report::clean(hi.job_id), c.peer, opt.max_job_bytes));
            return refuse(c, "collector full for this job (memory budget)");
        }
        // Idle jobs make room (the oldest first), then jobs without progress; never a job that is training, unless
        // it is unproven and this rank is proven.
        const bool new_job = jit == jobs.end();
        if (!make_room(new_job ? nullptr : jit->second.get(), c.proven)) {
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
        if (m.resumed) j->resume_wait_until_ns = now + kResumeGraceNs;
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
        job.last_new_rank_ns = now;
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
    r.digest_since_hello = false;
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
        // Digests of the process before it, read during an analysis, are not this one's (taken, in place: the
        // others' RankState::deferred point into the list).
        for (auto& d : job.deferred)
            if (d.first == idx) d.first = SIZE_MAX;
        r.deferred = 0;
    }
    put_header_on_our_clock(r, s.header);
    c.hello = true;
    c.job = &job;
    c.rank = idx;
    r.proven = c.proven;
    if (c.proven_pid) pid_conns[c.proven_pid] = c.id;
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

bool LiveServer::Impl::on_digest(Conn& c, wire::Digest& m, uint64_t now) {
    Job& job = *c.job;
    RankState& r = job.ranks[c.rank];
    note_lag(r.heard(now, m.sent_mono_ns), now);
    r.digest_since_hello = true;
    if (job.in_analysis && job.shared[c.rank]) {
        if (!r.deferred) {
            r.deferred = job.deferred.size() + 1;
            job.deferred.emplace_back(c.rank, std::move(m));
            return true;
        }
        // A second one within the analysis: the first is applied now, on a copy of the rank's snapshot, then this.
        auto& first = job.deferred[r.deferred - 1];
        first.first = SIZE_MAX;
        r.deferred = 0;
        apply_digest(job, c.rank, first.second);
        first.second = wire::Digest{};
    }
    apply_digest(job, c.rank, m);
    return within_budget(job, c.rank);
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
        // that a drift (engine/verdict.h) is aligned over as many ops as a rank file shows, and those of a MISMATCH
        // found (Job::pinned_sigs) for as long as the job.
        // Merged where the old ones are (no allocation per digest) unless an analysis still holds them.
        const auto pins = job.pinned_sigs.find(ci.comm_id);
        for (auto& old : s.comms)
            if (old.comm_id == ci.comm_id && !old.recent.empty()) {
                const uint64_t first_new = ci.recent.empty() ? UINT64_MAX : ci.recent.front().seq;
                std::vector<SigInfo>& sigs = old.recent.mut();
                std::erase_if(sigs, [&](const SigInfo& g) { return g.seq >= first_new; });
                sigs.insert(sigs.end(), ci.recent.begin(), ci.recent.end());
                if (sigs.size() > disk::kRecentSigs) {
                    const auto cut = sigs.end() - disk::kRecentSigs;
                    const auto kept = std::remove_if(sigs.begin(), cut, [&](const SigInfo& g) {
                        return pins == job.pinned_sigs.end() || !pins->second.count(g.seq);
                    });
                    sigs.erase(kept, cut);
                }
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
    job.bytes = job.bytes - std::min(job.bytes, r.est_bytes) + b;
    r.est_bytes = b;
    st_state_bytes = state_bytes;
}

bool LiveServer::Impl::within_budget(Job& job, size_t rank) {
    RankState& r = job.ranks[rank];
    if (r.est_bytes <= opt.max_rank_bytes && job.bytes <= opt.max_job_bytes) return true;
    const bool rank_over = r.est_bytes > opt.max_rank_bytes;
    const std::string why =
        rank_over ? fmt::format("its state ({} bytes) is over a rank's budget of {} bytes (--max-rank-bytes)",
                                r.est_bytes, opt.max_rank_bytes)
                  : fmt::format("its job's state ({} bytes) is over a job's budget of {} bytes (--max-job-bytes)",
                                job.bytes, opt.max_job_bytes);
    // What it sent is dropped; its Hello stays (a rank known, without communicators), as a rank that never sent any.
    FileSnapshot& s = own_snapshot(job, rank);
    s.comms.clear();
    s.comms.shrink_to_fit();
    s.p2p.clear();
    s.p2p.shrink_to_fit();
    s.p2p_read = false;
    job.dirty = true;
    ++job.facts_gen;
    account_rank(job, rank);
    ++st_claims;
    auto it = r.conn_id ? conns.find(r.conn_id) : conns.end();
    log_limited("rank budget",
                fmt::format("job {} {}{}: {}: its communicators dropped, its connection refused", clean(job.id), r.key,
                            it == conns.end() ? "" : " from " + it->second->peer, why));
    if (it == conns.end()) return false;
    return refuse(*it->second, rank_over ? "refused: the rank's state is over its budget"
                                         : "refused: the job's state is over its budget");
}

// Protocol 1.6: what the rank's file says beyond its comm slots, as `analyze` reads it there: how the process ended
// (its exit code or signal, sent once more as it ends) and, while an op waits, its point-to-point counts per peer.
bool LiveServer::Impl::on_state(Conn& c, wire::State& m, uint64_t now) {
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
    s.header.end_thread = m.live.end_thread;
    s.header.abort_thread = m.live.abort_thread;
    s.header.abort_comm_id = m.live.abort_comm_id;
    s.header.abort_mono_ns = m.live.abort_mono_ns ? time_base::shift(m.live.abort_mono_ns, d) : 0;
    s.header.absorbed_signal = m.live.absorbed_signal;
    s.header.absorbed_mono_ns = m.live.absorbed_mono_ns ? time_base::shift(m.live.absorbed_mono_ns, d) : 0;
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
    return within_budget(job, c.rank);
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
