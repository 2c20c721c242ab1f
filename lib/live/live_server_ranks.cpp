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
        // The key holds the peer's address too: a flood that claims (job, rank) first from elsewhere cannot hide the
        // real rank's line.
        if (!m.mac.empty() && jit != jobs.end() && !jit->second->ranks.empty()) {
            const std::string key = fmt::format("{}\n{}\n{}", hi.job_id, hi.global_rank, c.ip);
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
        } else if (const int n = wrong_token_job(hi, now); n >= 2) {
            // A job every rank of which has the wrong token has no rank here to be "known" by: several of its ranks
            // retrying tell it from a flood of one-off claims. Named once a minute per job.
            if (wrong_token_named.allow("job\n" + hi.job_id, now))
                log(
                    fmt::format("wrong token (its proof does not match) from {} ranks of job {}, of which no rank has "
                                "the right one (the latest from {}, rank {} pid {} host {}): is NCCLWATCH_TOKEN the "
                                "same there?",
                                n, report::clean(hi.job_id), c.peer, hi.global_rank, hi.pid, report::clean(hi.host)));
            else
                ++st_suppressed;
        } else {
            log_peer(c, "wrong token", "wrong token (its proof does not match)");
        }
        return refuse(c, "token refused");
    }
    c.proven = true;  // the token holder signed this Hello
    return admit(c, *hello, now);
}

int LiveServer::Impl::wrong_token_job(const HeaderInfo& hi, uint64_t now) {
    constexpr uint64_t kWindowNs = 60'000'000'000ull;
    constexpr size_t kMaxJobs = 1024, kMaxRanks = 16;
    auto it = wrong_token_jobs.find(hi.job_id);
    if (it != wrong_token_jobs.end() && now - it->second.since_ns > kWindowNs) {
        wrong_token_jobs.erase(it);
        it = wrong_token_jobs.end();
    }
    if (it == wrong_token_jobs.end()) {
        // Bounded whatever a flood claims: a full table forgets what is older than the window, then the one-off
        // claims (a flood's), keeping the jobs several ranks of which came.
        if (wrong_token_jobs.size() >= kMaxJobs)
            std::erase_if(wrong_token_jobs, [&](const auto& e) { return now - e.second.since_ns > kWindowNs; });
        if (wrong_token_jobs.size() >= kMaxJobs)
            std::erase_if(wrong_token_jobs, [](const auto& e) { return e.second.ranks.size() < 2; });
        if (wrong_token_jobs.size() >= kMaxJobs) return 0;
        it = wrong_token_jobs.emplace(hi.job_id, WrongTokenJob{now, {}}).first;
    }
    if (it->second.ranks.size() < kMaxRanks) it->second.ranks.insert(hi.global_rank);
    return int(it->second.ranks.size());
}

bool LiveServer::Impl::uid_allowed(uint32_t uid) const {
    return !opt.own_uid_only || uid == own_uid ||
           std::find(opt.allowed_uids.begin(), opt.allowed_uids.end(), uid) != opt.allowed_uids.end();
}

std::string LiveServer::Impl::uid_refused(uint32_t uid) const {
    if (opt.allow_option.empty()) return fmt::format("runs as uid {}, not as the job's user (uid {})", uid, own_uid);
    return fmt::format(
        "runs as uid {}, neither the collector's user (uid {}) nor one it allows: to take that user's ranks, start "
        "the collector with {} {} (or set NCCLWATCH_TOKEN here and on the ranks)",
        uid, own_uid, opt.allow_option, uid);
}

bool LiveServer::Impl::refuse_claim(Conn& c, const HeaderInfo& hi, const std::string& why, bool retry,
                                    const char* cause) {
    ++st_claims;
    log_limited(cause   ? cause
                : retry ? "identity unproven"
                        : "identity refused",
                fmt::format("refused Hello from {} (job {} rank {} pid {}): {}", c.peer, report::clean(hi.job_id),
                            hi.global_rank, hi.pid, why));
    return refuse(c, (retry ? "identity not proven yet: " : "identity refused: ") + why, retry);
}

bool LiveServer::Impl::prove_hello(Conn& c, wire::Hello& m, uint64_t now) {
    if (!opt.prove_peers) return true;
    const HeaderInfo& hi = m.header;
    if (c.via) {
        if (!prove_relayed(c, m)) return false;
    } else {
        if (!c.loopback) return true;  // --insecure: nothing to prove a remote peer by
        // Its user first (the socket's owner, the kernel's word): a user the collector does not take is refused
        // for that, with the option that would take it, whatever its pid.
        PeerSocket ps;
        std::string why;
        if (!find_peer_socket(c.fd, ps, &why))
            return refuse_claim(c, hi, fmt::format("cannot find the peer's socket to prove pid {} ({})", hi.pid, why),
                                true);
        c.uid_known = true;
        c.peer_uid = ps.uid;
        if (!uid_allowed(ps.uid)) return refuse_claim(c, hi, uid_refused(ps.uid), false, "user not taken");
        const PidProof p = prove_pid_of_socket(ps, hi.pid, scan_budget, now, "/proc", c.opened_ns);
        if (p.result != PidProof::Result::Proven)
            return refuse_claim(c, hi, p.why, p.result == PidProof::Result::Unproven);
        if (p.by_uid)
            log_limited("proven by uid",
                        fmt::format("took Hello from {} (job {} rank {} pid {}) on its socket's user, uid {}, alone: "
                                    "this collector (uid {}) may not read that user's descriptors to prove the pid",
                                    c.peer, report::clean(hi.job_id), hi.global_rank, hi.pid, ps.uid, own_uid));
        // The process proven is the rank from here on (its liveness); the claimed pid is its label.
        m.header.proven_pid = p.peer_pid;
    }
    note_proven_pid(c, m.header);
    // Where the job's folder is known (the collector inside rank 0: its NCCLWATCH_DIR), the rank made a file there.
    if (!opt.ranks_dir.empty() && !hi.job_id.empty() && hi.job_id.find('/') == std::string::npos && hi.job_id != "." &&
        hi.job_id != "..") {
        const std::string why =
            check_rank_file(opt.ranks_dir + "/" + hi.job_id, hi.pid, hi.global_rank, hi.job_id, c.peer_uid, true);
        if (!why.empty()) return refuse_claim(c, hi, why, false);
    }
    // One process is one rank (issue 45): the shim says Hello once a process, so a process whose connection speaks
    // for another (job, rank) claims what no rank does (one pid took 5,000 ranks). The same rank again is admit's
    // to judge (a reconnection). Only a pid proven in our namespace counts (a relay's of another is -1).
    const int64_t pid = m.header.proven_pid > 0 ? m.header.proven_pid : 0;
    if (auto held = pid ? pid_conns.find(pid) : pid_conns.end(); held != pid_conns.end() && held->second != c.id) {
        auto o = conns.find(held->second);
        const Conn* other = o == conns.end() ? nullptr : o->second.get();
        if (other && other->job && (other->job->id != hi.job_id || other->job->ranks[other->rank].key != rank_key(hi)))
            return refuse_claim(
                c, hi,
                fmt::format("one process is one rank: pid {} already speaks for job {} {} on the "
                            "connection from {}",
                            pid, report::clean(other->job->id), other->job->ranks[other->rank].key, other->peer),
                false);
    }
    // Proven by itself (its socket's process): a relayed rank is taken on its relay's word, second-hand, and one that
    // proved itself wins room over it (admission.h).
    c.proven = !c.via;
    c.proven_pid = pid;
    return true;
}

void LiveServer::Impl::note_proven_pid(const Conn& c, const HeaderInfo& h) {
    if (h.proven_pid == 0 || h.proven_pid == h.pid) return;
    log_limited(
        "pid namespace",
        h.proven_pid < 0
            ? fmt::format("job {} rank {} from {}: pid {} as it says, in a pid namespace of its relay's that is "
                          "not the collector's: its process is not probed here",
                          report::clean(h.job_id), h.global_rank, c.peer, h.pid)
            : fmt::format("job {} rank {} from {}: pid {} as it says (its own pid namespace's), pid {} here: "
                          "that process's life is the rank's",
                          report::clean(h.job_id), h.global_rank, c.peer, h.pid, h.proven_pid));
}

bool LiveServer::Impl::prove_relayed(Conn& c, wire::Hello& m) {
    const HeaderInfo& hi = m.header;
    auto r = conns.find(c.via);
    if (r == conns.end()) return false;
    Conn& relay = *r->second;
    if (!relay.loopback) return true;  // --insecure: a remote peer proves nothing, as `serve --help` says
    // The relay itself, once found: its socket's user. Its proofs count only if it is a user the collector takes.
    if (!relay.relay_asked || !relay.uid_known) {
        relay.relay_asked = true;
        PeerSocket ps;
        std::string why;
        relay.uid_known = find_peer_socket(relay.fd, ps, &why);
        relay.peer_uid = ps.uid;
        log_limited("relay", fmt::format("relay from {}: {}", relay.peer,
                                         !relay.uid_known ? "its user is not known (" + why + "): its ranks are refused"
                                         : uid_allowed(ps.uid)
                                             ? fmt::format("runs as uid {}: the proofs of its ranks it forwards are "
                                                           "taken",
                                                           ps.uid)
                                             : fmt::format("runs as uid {}, a user the collector does not take: its "
                                                           "ranks are refused",
                                                           ps.uid)));
    }
    if (!relay.uid_known) return refuse_claim(c, hi, "the relay's user is not known, nor its ranks'", true);
    if (!uid_allowed(relay.peer_uid))
        return refuse_claim(c, hi, "its relay " + uid_refused(relay.peer_uid), false, "user not taken");
    // Its proof (protocol 1.16): what the relay found at the rank's socket, as the collector proves a direct rank.
    if (!c.relay_peer)
        return refuse_claim(c, hi,
                            relay.relay_minor < wire::kMinorRelayProof
                                ? fmt::format("its relay speaks protocol {}.{}, which proves no rank (1.{} does): "
                                              "upgrade the relay, or set NCCLWATCH_TOKEN here and on the ranks",
                                              wire::kMajor, relay.relay_minor, wire::kMinorRelayProof)
                                : std::string("its relay sent no proof of it"),
                            false);
    const wire::RelayPeer& p = *c.relay_peer;
    if (!(p.flags & wire::kPeerUidKnown))
        return refuse_claim(c, hi, "its relay could not find its socket's user (" + report::clean(p.why) + ")", true);
    // A relay of another user than the collector's speaks for its own user's ranks only: it could say anything.
    if (relay.peer_uid != own_uid && p.uid != relay.peer_uid)
        return refuse_claim(c, hi,
                            fmt::format("its relay runs as uid {} and speaks for that user's ranks only, not uid {}",
                                        relay.peer_uid, p.uid),
                            false);
    c.uid_known = true;
    c.peer_uid = p.uid;
    if (!uid_allowed(p.uid)) return refuse_claim(c, hi, uid_refused(p.uid), false, "user not taken");
    if (p.result != wire::RelayPeer::Proven)
        return refuse_claim(c, hi, "at its relay: " + report::clean(p.why), p.result == wire::RelayPeer::Unproven);
    // The relay's pids are ours where its pid namespace is ours; else the rank is not probed here.
    m.header.proven_pid = p.pid > 0 && p.pid_ns && p.pid_ns == own_pid_ns ? p.pid : -1;
    return true;
}

uint64_t job_signature(const HeaderInfo& h) {
    uint64_t sig = fnv1a64_value(h.world_size);
    bool named = false;
    for (const std::string& e : h.env)
        if (e.rfind("MASTER_ADDR=", 0) == 0 || e.rfind("MASTER_PORT=", 0) == 0) {
            sig = fnv1a64(e.data(), e.size(), sig);
            named = true;
        }
    return named ? (sig ? sig : 1) : 0;
}

std::string LiveServer::Impl::rank_key(const HeaderInfo& h) {
    return h.global_rank >= 0 ? fmt::format("rank {}", h.global_rank) : fmt::format("pid {}:{}", h.host, h.pid);
}

bool LiveServer::Impl::admit(Conn& c, wire::Hello& m, uint64_t now) {
    // Two jobs under one id (NCCLWATCH_JOB_ID given to both; ids that sanitise to one are kept apart by
    // files::job_component already): their rendezvous tells them apart, and the second is a job of its own, "ID~HASH",
    // never mixed into the first (its ranks refused as taken, its verdict late and judged on the first's environment).
    // A Hello that names no rendezvous proves no other job: it joins the id's job, where a taken rank is refused.
    const uint64_t signature = job_signature(m.header);
    if (auto same = jobs.find(m.header.job_id);
        signature && same != jobs.end() && same->second->signature && same->second->signature != signature) {
        const std::string apart = fmt::format("{}~{:08x}", m.header.job_id, uint32_t(signature));
        if (!jobs.count(apart))
            log_limited("job id twice", fmt::format("job {}: a second job under this id (another WORLD_SIZE or "
                                                    "MASTER_ADDR:MASTER_PORT), kept apart as job {}",
                                                    report::clean(m.header.job_id), report::clean(apart)));
        m.header.job_id = apart;
    }
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
        j->signature = signature;
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
    // One boot, but a monotonic clock that is not ours (a time namespace): its heartbeat, written within the last
    // poll, reads as long ago or ahead. Its offset is measured over the wire instead, and the rank named.
    if (r.clock.exact && hi.heartbeat_mono_ns) {
        const int64_t off = int64_t(now - hi.heartbeat_mono_ns);
        if (off > time_base::kShiftedNs || off < -time_base::kShiftedNs) {
            r.clock.exact = false;
            log_limited("clock shifted",
                        fmt::format("job {} {}: its monotonic clock runs {:.1f} s {} the collector's on the same boot "
                                    "(a time namespace?): its times are measured from its frames instead",
                                    report::clean(hi.job_id), key, std::abs(double(off)) / 1e9,
                                    off > 0 ? "behind" : "ahead of"));
        }
    }
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
