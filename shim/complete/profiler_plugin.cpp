#include "shim/complete/profiler_plugin.h"

#include <strings.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>

#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/record/call_scope.h"
#include "shim/record/profiler_link.h"
#include "shim/record/recorder.h"
#include "shim/record/runtime.h"

namespace ncw {

namespace {

ProfilerSetup g_setup;

bool is_ours(const char* plugin) {
    // STATIC_PLUGIN: NCCL searches the loaded objects, where our tables come first (preloaded). A path to our own
    // library (a launcher that set it for a child of ours) is ours too.
    return strcasecmp(plugin, "STATIC_PLUGIN") == 0 || strstr(plugin, "ncclwatch") != nullptr;
}

ProfilerMode mode_from_env() {
    const char* v = getenv("NCCLWATCH_PROFILER");
    if (!v) return ProfilerMode::Auto;
    if (strcmp(v, "off") == 0) return ProfilerMode::Off;
    if (strcmp(v, "empty") == 0) return ProfilerMode::Empty;
    return ProfilerMode::Auto;  // a bad value is named once the Config is parsed
}

// Before main and before any thread of the host: the one safe moment for setenv.
__attribute__((constructor)) void point_nccl_at_us() {
    const char* enable = getenv("NCCLWATCH_ENABLE");
    if (enable && strcmp(enable, "0") == 0) return;
    g_setup.mode = mode_from_env();
    if (g_setup.mode == ProfilerMode::Off) return;
    const char* plugin = getenv("NCCL_PROFILER_PLUGIN");
    if (!plugin) {
        g_setup.we_set_env = setenv("NCCL_PROFILER_PLUGIN", "STATIC_PLUGIN", 0) == 0;
    } else if (!is_ours(plugin)) {
        g_setup.user_plugin = plugin;  // the environment's own storage: it lives as long as the process
    }
}

// Our per-communicator context as NCCL holds it. `link` is nullptr when we do not follow this communicator.
struct Ctx {
    ProfilerLink* link = nullptr;
    bool empty = false;  // NCCLWATCH_PROFILER=empty: every callback returns at once (to measure NCCL's own cost)
};
Ctx g_empty_ctx{nullptr, true};

// Coll, P2p and KernelCh; NCCL then also sends the Group, GroupApi, CollApi and P2pApi events (v5+), which tie each
// Coll and P2p to its op and its kernel launch. (P2p events are used from v5 on; before, they name no op.)
constexpr int kWantedEvents = int(prof::kColl | prof::kP2p | prof::kKernelCh);

// How far a KernelCh start may seem to precede its op's issue before it is taken for another work's stamp: the GPU's
// globaltimer and our clock drift apart slowly over a long job, and the bounds on their offset are kept for its life.
constexpr int64_t kDesyncSlackNs = 20000000;

// NCCL's function names (ncclFuncToString) as our op kinds; 0: not an op we follow (a Coll names a collective, a P2p
// a Send or Recv).
uint32_t kind_of(const char* func) {
    if (!func) return 0;
    static const struct {
        const char* name;
        disk::OpType op;
    } names[] = {{"AllReduce", disk::OpType::AllReduce},
                 {"Broadcast", disk::OpType::Broadcast},
                 {"Reduce", disk::OpType::Reduce},
                 {"AllGather", disk::OpType::AllGather},
                 {"ReduceScatter", disk::OpType::ReduceScatter},
                 {"AlltoAll", disk::OpType::AlltoAll},
                 {"Gather", disk::OpType::Gather},
                 {"Scatter", disk::OpType::Scatter},
                 {"Send", disk::OpType::Send},
                 {"Recv", disk::OpType::Recv}};
    for (const auto& n : names)
        if (strcmp(func, n.name) == 0) return uint32_t(n.op);
    return 0;
}

// A communicator whose init did not run on a thread of ours in a blocking init (a grouped or nonblocking init, or
// ncclCommInitAll) is linked at its first collective: NCCL's Coll start for it runs inside our wrapper's call.
void link(ProfilerLink* pl, CommRuntime* cr) {
    ProfilerLink* none = nullptr;
    if (!cr || !cr->prof.compare_exchange_strong(none, pl, std::memory_order_acq_rel)) return;
    pl->cr = cr;
}
bool fits(const ProfilerLink* pl, const CommRuntime* cr) {
    return cr && !cr->prof.load(std::memory_order_relaxed) &&
           (pl->nranks <= 0 || (cr->nranks == pl->nranks && cr->rank == pl->rank));
}
void link_lazily(ProfilerLink* pl) {
    ThreadState& ts = thread_state();
    if (fits(pl, ts.current_op)) return link(pl, ts.current_op);
    for (int i = 0; ts.group_ops && i < ts.group_n; ++i)
        if (fits(pl, ts.group_ops[i].ref.cr)) return link(pl, ts.group_ops[i].ref.cr);
}

// Links of finalized communicators, kept for later ones: a link is about 180 KB, and a job that builds and drops
// groups (per-stage groups, elastic restarts, a comm per eval) would otherwise keep one for every communicator it
// ever made. Past kRetired waiting links, a finalized one simply stays allocated.
constexpr int kRetired = 64;
std::atomic<ProfilerLink*> g_retired[kRetired];

void retire_link(ProfilerLink* pl) {
    Runtime* rt = runtime();
    pl->retired_at_pass = rt ? rt->watchdog_pass.n.load(std::memory_order_acquire) : 0;
    for (auto& slot : g_retired) {
        ProfilerLink* none = nullptr;
        if (slot.compare_exchange_strong(none, pl, std::memory_order_acq_rel)) return;
    }
}

// Finalized communicators' contexts, reused once kCtxLater later ones were finalized: NCCL makes no call with a
// context after its finalize, and one that ever came late would find no link for as long as that takes, rather than
// another communicator's. (Each stayed allocated for good before: 32 bytes of heap per communicator ever made, issue
// 45.) Past kCtxKept waiting, a finalized one simply stays allocated; never waited for: a try_lock that fails (two
// teardowns at once) costs one reuse, and a child forked while a parent's thread held it takes none.
constexpr size_t kCtxLater = 1024;
constexpr size_t kCtxKept = 2 * kCtxLater;
struct CtxFifo {
    std::mutex mu;
    Ctx* ring[kCtxKept] = {};
    size_t head = 0;  // the oldest
    size_t n = 0;
};
CtxFifo& ctx_fifo() {
    static CtxFifo& f = *new CtxFifo;  // never destroyed: NCCL may finalize during exit
    return f;
}

void retire_ctx(Ctx* c) {
    CtxFifo& f = ctx_fifo();
    std::unique_lock<std::mutex> lock(f.mu, std::try_to_lock);
    if (!lock.owns_lock() || f.n == kCtxKept) return;
    f.ring[(f.head + f.n++) % kCtxKept] = c;
}

Ctx* reuse_ctx() {
    CtxFifo& f = ctx_fifo();
    std::unique_lock<std::mutex> lock(f.mu, std::try_to_lock);
    if (!lock.owns_lock() || f.n <= kCtxLater) return nullptr;
    Ctx* c = f.ring[f.head];
    f.head = (f.head + 1) % kCtxKept;
    --f.n;
    *c = Ctx{};
    return c;
}

// A retired link no thread of ours can still be reading, made new; nullptr when there is none. After NCCL's
// finalize, NCCL calls nothing more for it and its communicator no longer points at it; only a watchdog pass that
// began before the retirement (profiler_publish) may still hold it, so such a link waits for that pass to end.
ProfilerLink* reuse_link() {
    Runtime* rt = runtime();
    const uint64_t now = rt ? rt->watchdog_pass.n.load(std::memory_order_acquire) : 0;
    for (auto& slot : g_retired) {
        ProfilerLink* pl = slot.load(std::memory_order_acquire);
        if (!pl || ((pl->retired_at_pass & 1) && now == pl->retired_at_pass)) continue;
        if (!slot.compare_exchange_strong(pl, nullptr, std::memory_order_acq_rel)) continue;
        pl->~ProfilerLink();
        return new (pl) ProfilerLink;
    }
    return nullptr;
}

prof::Result make_ctx(void** ctx, int* mask, uint64_t hash, int nranks, int rank, int version) {
    *ctx = nullptr;
    Runtime* rt = runtime();
    if (g_setup.mode == ProfilerMode::Empty) {
        *mask = kWantedEvents;
        *ctx = &g_empty_ctx;
        return 0;
    }
    if (!rt || g_setup.mode == ProfilerMode::Off || profiler_regression(rt->nccl_version)) {
        *mask = 0;
        return 0;
    }
    // Once per communicator, on NCCL's init path: not the hot path, so allocation is allowed. The Ctx (16 bytes) is
    // never freed, in case NCCL ever calls with it after its finalize, and reused long after (retire_ctx); the link is
    // reused (retire_link).
    Ctx* c = reuse_ctx();
    if (!c) c = new (std::nothrow) Ctx;
    ProfilerLink* pl = c ? reuse_link() : nullptr;
    if (c && !pl) pl = new (std::nothrow) ProfilerLink;
    if (!pl) {
        delete c;
        NCW_LOG_ONCE(warn, "out of memory for NCCL's profiler events: GPU progress comes from CUDA events");
        *mask = 0;
        return 0;
    }
    pl->version = version;
    pl->comm_hash = hash;
    pl->nranks = nranks;
    pl->rank = rank;
    for (auto& op : pl->ops) op.link = pl;
    c->link = pl;
    CommRuntime* init_cr = thread_state().initializing;
    if (init_cr && (nranks <= 0 || (init_cr->nranks == nranks && init_cr->rank == rank))) link(pl, init_cr);
    *mask = kWantedEvents;  // process-wide: NCCL keeps the last init's mask
    *ctx = c;
    return 0;
}

// Our clock for a GPU globaltimer stamp (v4+); v3 stamps are our clock already.
uint64_t to_mono(const ProfilerLink& pl, uint64_t gpu) {
    if (pl.version < 4) return gpu;
    const int64_t off = pl.offset_hi.load(std::memory_order_relaxed);
    return off == INT64_MAX ? 0 : uint64_t(int64_t(gpu) + off);
}

// What a Coll (or, v5+, P2p) start says of its op, whichever descriptor version carried it.
struct CollStart {
    uint32_t kind = 0;      // our op kind (kind_of); 0: not a collective we follow
    bool p2p = false;       // a P2p: a send or receive
    uint64_t nccl_seq = 0;  // NCCL's per-kind sequence number
    size_t count = 0;
    uint8_t nchannels = 0;
    const char* algo = nullptr;
    void* parent = nullptr;        // v5+: our CollApi handle (v3/v4: NCCL's Group)
    void* parent_group = nullptr;  // v5+: our Group (plan) handle
};

// The expectation a Coll start names, copied while its tag holds (the issuing thread rewrites an entry only kExpect
// ops later); false: none (a Coll of an op we never saw, or one long overwritten).
bool find_expect(ProfilerLink& pl, const CollStart& cs, ProfExpect*& out, ProfExpect& copy) {
    uint64_t tag;
    ProfExpect* e;
    if (pl.by_identity()) {
        const auto h = reinterpret_cast<uintptr_t>(cs.parent);
        if ((h & kHandleTagMask) != kHandleApi) return false;
        tag = uint64_t(h >> 2);
        e = &pl.expect[ProfilerLink::expect_index(tag)];
    } else {
        tag = ProfilerLink::tag_of(cs.kind, cs.nccl_seq);
        e = &pl.expect[ProfilerLink::expect_index(cs.kind, cs.nccl_seq)];
    }
    if (e->tag.load(std::memory_order_acquire) != tag) return false;
    copy.ticket = e->ticket;
    copy.coll_seq = e->coll_seq;
    copy.count = e->count;
    copy.t_issue_ns = e->t_issue_ns;
    copy.captured = e->captured;
    copy.tag.store(tag, std::memory_order_relaxed);
    if (e->tag.load(std::memory_order_acquire) != tag) return false;
    // v3/v4 pair by NCCL's numbering, checked by the count (in elements: right for the kinds whose counts NCCL
    // does not turn into bytes); v5+ by identity.
    if (!pl.by_identity() && copy.count != cs.count) return false;
    out = e;
    return true;
}

void start_coll(Ctx* c, void** handle, const CollStart& cs) {
    *handle = nullptr;
    ProfilerLink* pl = c ? c->link : nullptr;
    if (!pl || !cs.kind || pl->desynced.load(std::memory_order_relaxed)) return;
    if (!pl->cr) link_lazily(pl);
    ProfExpect* e = nullptr;
    ProfExpect copy;
    if (!find_expect(*pl, cs, e, copy)) return pl->dropped.fetch_add(1, std::memory_order_relaxed), void();
    ProfOp* op = nullptr;
    for (int tries = 0; tries < 4 && !op; ++tries) {
        ProfOp& cand = pl->ops[pl->next_op.fetch_add(1, std::memory_order_relaxed) & (ProfilerLink::kOps - 1)];
        uint32_t free_ = 0;
        if (cand.busy.compare_exchange_strong(free_, 1, std::memory_order_acquire)) op = &cand;
    }
    if (!op) {
        pl->dropped.fetch_add(1, std::memory_order_relaxed);
        if (e->state.load(std::memory_order_relaxed) == ProfExpect::kOffered)
            pl->dropped_owned.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    // A Coll of a captured op is one of its graph's replays: observed only (never the completion of an eager op).
    uint32_t st = ProfExpect::kOffered;
    op->owned = !copy.captured && e->state.compare_exchange_strong(st, ProfExpect::kTaken, std::memory_order_acq_rel);
    op->p2p = cs.p2p;
    op->ring = cs.p2p || (cs.algo && strcmp(cs.algo, "RING") == 0);
    op->nchannels = cs.nchannels;
    const auto plan = reinterpret_cast<uintptr_t>(cs.parent_group);
    op->plan = pl->by_identity() && (plan & kHandleTagMask) == kHandlePlan ? uint64_t(plan >> 2) : 0;
    op->ticket = copy.ticket;
    op->coll_seq = copy.coll_seq;
    op->op_index = pl->by_identity() ? copy.tag.load(std::memory_order_relaxed) : 0;
    op->t_issue_ns = copy.t_issue_ns;
    if (op->op_index) atomic_max(pl->taken_op, op->op_index);  // launched: the ops before it were launched too
    op->started.store(0, std::memory_order_relaxed);
    op->stopped.store(0, std::memory_order_relaxed);
    op->gpu_start.store(~0ull, std::memory_order_relaxed);
    op->gpu_stop.store(0, std::memory_order_relaxed);
    op->finished.store(0, std::memory_order_relaxed);
    op->votes.store(0, std::memory_order_relaxed);
    op->t_last_event_ns.store(now_mono_ns(), std::memory_order_release);
    *handle = op;
}

// v5+: NCCL's CollApi event, inside our wrapper's call on the caller's thread: the handle names the op this thread is
// calling (ThreadState::api_expect), and comes back as its Coll's parent.
void start_coll_api(Ctx* c, void** handle, bool graph_captured) {
    *handle = nullptr;
    ProfilerLink* pl = c ? c->link : nullptr;
    if (!pl || !pl->by_identity()) return;
    if (!pl->cr) link_lazily(pl);
    ThreadState& ts = thread_state();
    ProfExpect* e = ts.api_expect;
    if (!e || !ts.current_op || ts.current_op->prof.load(std::memory_order_acquire) != pl ||
        e->api.load(std::memory_order_relaxed))
        return;
    e->captured = graph_captured;
    e->api.store(1, std::memory_order_release);
    *handle = api_handle(e->tag.load(std::memory_order_relaxed));
}

// v5+: NCCL's Group event, one per kernel launch of the communicator: numbered in launch order.
void start_plan(Ctx* c, void** handle) {
    *handle = nullptr;
    ProfilerLink* pl = c ? c->link : nullptr;
    if (!pl || !pl->by_identity()) return;
    *handle = plan_handle(pl->plans.fetch_add(1, std::memory_order_relaxed) + 1);
}

ProfOp* channel_op(void* handle) {
    const auto v = reinterpret_cast<uintptr_t>(handle);
    return (v & kHandleTagMask) == kHandleChannel ? reinterpret_cast<ProfOp*>(v & ~kHandleTagMask) : nullptr;
}

// The group an op was issued in (its record's group_id; 0: none), cut to kGroupBits: what ProfilerLink::completed_op
// carries beside the op index of the newest completed op.
constexpr int kGroupBits = 24;
constexpr uint64_t kGroupUnknown = (1u << kGroupBits) - 1;
uint64_t group_of(uint64_t ticket) {
    Runtime* rt = runtime();
    if (!rt) return 0;
    const disk::OpRecord& rec = rt->file.ring[ticket & rt->file.ring_mask];
    if (rec.stamp.load(std::memory_order_acquire) != 2 * ticket + 2) return kGroupUnknown;  // overwritten
    if (rec.group_id == 0) return 0;
    const uint64_t g = rec.group_id & kGroupUnknown;
    return g == 0 || g == kGroupUnknown ? kGroupUnknown - 1 : g;  // a group stays a group, never "none"
}

void finish_op(ProfOp& op, uint64_t end_mono);

// A ProfOp is free again once its end is written and its last channel stopped (NCCL may still send a channel event
// for an op a later kernel proved done: the slot must not be another op's by then). CollNet says 0 channels: its ops
// are never freed, and their slots are taken back with the link.
void release_vote(ProfOp& op) {
    if (op.votes.fetch_add(1, std::memory_order_acq_rel) == 1) op.busy.store(0, std::memory_order_release);
}

// A kernel of a later launch started: every op of the earlier launches of this communicator has completed (NCCL
// serialises a communicator's kernels on its device stream), whatever their algorithm. Their end is at most that
// start. Only the ops taken since the oldest one still in flight are looked at (ProfOps are taken in cursor order).
void finish_earlier_plans(ProfilerLink& pl, uint64_t plan, uint64_t gpu_start) {
    const uint64_t end = to_mono(pl, gpu_start);
    const uint64_t hi = pl.next_op.load(std::memory_order_acquire);
    uint64_t lo = pl.scan_from.load(std::memory_order_relaxed);
    if (hi - lo > ProfilerLink::kOps) lo = hi - ProfilerLink::kOps;
    uint64_t floor = lo;
    bool all_done_so_far = true;
    for (uint64_t i = lo; i < hi; ++i) {
        ProfOp& op = pl.ops[i & (ProfilerLink::kOps - 1)];
        if (op.busy.load(std::memory_order_acquire) && !op.finished.load(std::memory_order_relaxed) && op.plan &&
            op.plan < plan)
            finish_op(op, end);
        if (all_done_so_far &&
            (!op.busy.load(std::memory_order_acquire) || op.finished.load(std::memory_order_relaxed)))
            floor = i + 1;
        else
            all_done_so_far = false;
    }
    pl.scan_from.store(floor, std::memory_order_relaxed);
}

// A KernelCh event (NCCL's proxy thread): one channel of `parent` started on the GPU at `gpu` (globaltimer; our
// clock for v3).
void start_channel(void** handle, void* parent, uint64_t gpu) {
    *handle = nullptr;
    auto* op = static_cast<ProfOp*>(parent);
    if (!op || (reinterpret_cast<uintptr_t>(parent) & kHandleTagMask) || !op->busy.load(std::memory_order_acquire))
        return;
    ProfilerLink& pl = *op->link;
    if (pl.desynced.load(std::memory_order_relaxed)) return;
    const uint64_t now = now_mono_ns();
    if (pl.version >= 4) {
        atomic_min(pl.offset_hi, int64_t(now) - int64_t(gpu));
        if (op->t_issue_ns) atomic_max(pl.offset_lo, int64_t(op->t_issue_ns) - int64_t(gpu));
        // A start the GPU stamped before the op was issued, beyond what the clocks' bounds allow, is another work's
        // stamp: NCCL's per-channel work counters are out of step with its kernels (a graph replay after eager ops
        // can do that). From then on this communicator's kernel events prove nothing.
        if (pl.offset_lo.load(std::memory_order_relaxed) >
            pl.offset_hi.load(std::memory_order_relaxed) + kDesyncSlackNs) {
            pl.desynced.store(true, std::memory_order_relaxed);
            return;
        }
    }
    atomic_min(op->gpu_start, gpu);
    op->t_last_event_ns.store(now, std::memory_order_relaxed);
    if (op->started.fetch_add(1, std::memory_order_acq_rel) == 0 && op->owned) {
        atomic_max(pl.reached, op->coll_seq);
        uint64_t seen = pl.started_plan.load(std::memory_order_relaxed);
        while (op->plan > seen && !pl.started_plan.compare_exchange_weak(seen, op->plan, std::memory_order_acq_rel)) {
        }
        if (op->plan > seen) finish_earlier_plans(pl, op->plan, gpu);
    }
    if (!pl.kernel_events.load(std::memory_order_relaxed)) pl.kernel_events.store(true, std::memory_order_release);
    if (op->p2p && !pl.p2p_kernel_events.load(std::memory_order_relaxed))
        pl.p2p_kernel_events.store(true, std::memory_order_release);
    *handle = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(op) | kHandleChannel);
}

// The op completed: its record gets the GPU's start and end, its communicator the progress. `end_mono` 0: its end is
// its own last channel stop (then the record has its in-collective GPU time: gpu_timed); else a bound on our clock (a
// later kernel's start, a catch-up event's completion).
void finish_op(ProfOp& op, uint64_t end_mono) {
    uint32_t not_yet = 0;
    if (!op.finished.compare_exchange_strong(not_yet, 1, std::memory_order_acq_rel)) return;
    ProfilerLink& pl = *op.link;
    Runtime* rt = runtime();
    const disk::CommSlot* slot = pl.cr ? pl.cr->slot.load(std::memory_order_acquire) : nullptr;
    if (op.owned && rt && !(slot && comm_broken(*slot))) {  // an abort's kernel ends prove nothing (comm_broken)
        const uint64_t now = now_mono_ns();
        const uint64_t start = to_mono(pl, op.gpu_start.load(std::memory_order_relaxed));
        const uint64_t stop = end_mono ? end_mono : to_mono(pl, op.gpu_stop.load(std::memory_order_relaxed));
        disk::OpRecord& rec = rt->file.ring[op.ticket & rt->file.ring_mask];
        if (rec.stamp.load(std::memory_order_acquire) == 2 * op.ticket + 2) {
            rec.t_reached_ns.store(start ? start : stop ? stop : now, std::memory_order_relaxed);
            rec.t_done_ns.store(stop ? stop : now, std::memory_order_relaxed);
            // The op's own GPU time, ended at its last channel stop (the straggler rules': a collective's time
            // inside it, a receive's wait for its send).
            if (!end_mono) __atomic_fetch_or(&rec.flags, uint8_t(disk::kFlagGpuTimed), __ATOMIC_RELAXED);
        }
        if (!op.started.load(std::memory_order_relaxed)) atomic_max(pl.reached, op.coll_seq);
        atomic_max(pl.completed, op.coll_seq);
        if (op.op_index) atomic_max(pl.completed_op, op.op_index << kGroupBits | group_of(op.ticket));
        pl.ops_done.fetch_add(1, std::memory_order_relaxed);
        atomic_max(pl.t_progress_ns, now);
    }
    release_vote(op);
}

void stop_channel(ProfOp& op) {
    op.t_last_event_ns.store(now_mono_ns(), std::memory_order_relaxed);
    const uint32_t stopped = op.stopped.fetch_add(1, std::memory_order_acq_rel) + 1;
    // Every channel NCCL scheduled the op on has a KernelCh event (nchannels, exact but for CollNet, which says 0).
    // Only a ring's last stop is the op's end; another algorithm's waits for a later kernel or the stream's catch-up.
    if (op.ring && op.nchannels && stopped >= op.nchannels && stopped == op.started.load(std::memory_order_acquire) &&
        !op.link->desynced.load(std::memory_order_relaxed))
        finish_op(op, 0);
    if (stopped == op.nchannels) release_vote(op);
}

// An op NCCL's CollApi or P2pApi named whose Coll or P2p never came, proven complete by `end_mono` (a later op of
// the communicator completed: NCCL runs them in order; the stream's catch-up event; a host synchronisation): its record
// gets that bound as its end (no GPU time of its own), the communicator the progress. Taken from NCCL's events first
// (kOffered -> kWithdrawn), so that a Coll that comes after all only observes it.
void complete_unseen(ProfilerLink& pl, ProfExpect& e, uint64_t tag, uint64_t end_mono) {
    uint32_t st = ProfExpect::kOffered;
    if (!e.state.compare_exchange_strong(st, ProfExpect::kWithdrawn, std::memory_order_acq_rel)) return;
    const uint64_t ticket = e.ticket, coll_seq = e.coll_seq;
    if (e.tag.load(std::memory_order_acquire) != tag) return;  // rewritten meanwhile (sweep_unseen's margin)
    Runtime* rt = runtime();
    const disk::CommSlot* slot = pl.cr ? pl.cr->slot.load(std::memory_order_acquire) : nullptr;
    if (!rt || (slot && comm_broken(*slot))) return;
    disk::OpRecord& rec = rt->file.ring[ticket & rt->file.ring_mask];
    if (rec.stamp.load(std::memory_order_acquire) == 2 * ticket + 2) {
        if (!rec.t_reached_ns.load(std::memory_order_relaxed))
            rec.t_reached_ns.store(end_mono, std::memory_order_relaxed);
        rec.t_done_ns.store(end_mono, std::memory_order_relaxed);
    }
    atomic_max(pl.reached, coll_seq);
    atomic_max(pl.completed, coll_seq);
    atomic_max(pl.completed_op, tag << kGroupBits | group_of(ticket));
    pl.ops_done.fetch_add(1, std::memory_order_relaxed);
    pl.unseen.fetch_add(1, std::memory_order_relaxed);
    atomic_max(pl.t_progress_ns, now_mono_ns());
}

// How long after its call NCCL's Coll or P2p for an op may still come (it comes within the call, or at the launch of
// its group): an op without one past that is unseen. A collective whose call has not returned by then is too (it may
// have been launched, or not: nothing tells); a send or receive still inside its call is not (NCCL connects a new
// peer inside it, before any launch: a pipeline's send to a stage that never posts its receive waits there).
constexpr uint64_t kUnseenAfterNs = 100000000;

// Whether the call of the op recorded at `ticket` returned (its record says so; an overwritten record: yes).
bool returned(uint64_t ticket) {
    Runtime* rt = runtime();
    if (!rt) return false;
    const disk::OpRecord& rec = rt->file.ring[ticket & rt->file.ring_mask];
    if (rec.stamp.load(std::memory_order_acquire) != 2 * ticket + 2) return true;
    return rec.result.load(std::memory_order_acquire) != -1;
}

// Completes the unseen ops (complete_unseen) that something proves: collectives up to `coll_seq` and any op up to
// `op_index` (the stream's catch-up event, a host synchronisation), or, with `later` (ProfilerLink::completed_op: the
// newest completed op and its group), an op of an earlier launch: NCCL runs a communicator's kernels in order, but one
// launch runs a group's ops together, so an op of the same group proves nothing. Returns how many unseen ops stay
// open: a later op was launched, or their call returned, over kUnseenAfterNs ago (NCCL will send nothing for them;
// whether the GPU reached them is not known). v5+ only (an expectation named by its CollApi). An entry is rewritten
// kExpect ops after its op: only entries within kExpect / 2 of the newest op are looked at.
uint64_t sweep_unseen(ProfilerLink& pl, uint64_t coll_seq, uint64_t op_index, uint64_t later, uint64_t end_mono) {
    if (!pl.by_identity() || !pl.cr) return 0;
    const disk::CommSlot* slot = pl.cr->slot.load(std::memory_order_acquire);
    const uint64_t newest = (slot ? slot->ops_issued : pl.cr->op_index).load(std::memory_order_acquire);
    const uint64_t taken = pl.taken_op.load(std::memory_order_acquire);
    const uint64_t later_op = later >> kGroupBits, later_group = later & kGroupUnknown;
    const uint64_t now = now_mono_ns();
    uint64_t open = 0;
    for (ProfExpect& e : pl.expect) {
        const uint64_t tag = e.tag.load(std::memory_order_acquire);
        if (!tag || tag + ProfilerLink::kExpect / 2 < newest || !e.api.load(std::memory_order_acquire) || e.captured ||
            e.state.load(std::memory_order_acquire) != ProfExpect::kOffered)
            continue;
        bool proven = (e.coll_seq && e.coll_seq <= coll_seq) || tag <= op_index;
        if (!proven && later_op > tag && later_group != kGroupUnknown) {
            const uint64_t g = group_of(e.ticket);
            proven = g != kGroupUnknown && (g == 0 || g != later_group);
        }
        if (proven)
            complete_unseen(pl, e, tag, end_mono);
        else if (e.t_issue_ns + kUnseenAfterNs < now && (tag < taken || e.coll_seq || returned(e.ticket)))
            ++open;
    }
    return open;
}

// v5 and later: the API events, the Group events of a launch and P2p events tied to their op (v6 is v5's layout in
// the members we read; v7 has its own).
template <class Descr>
constexpr bool kHasApiEvents = std::is_same_v<Descr, prof::DescrV5> || std::is_same_v<Descr, prof::DescrV7>;

template <class Descr>
prof::Result start_any(void* ctx, void** handle, Descr* d, bool has_timer) {
    *handle = nullptr;
    auto* c = static_cast<Ctx*>(ctx);
    if (!c || c->empty || !d) return 0;
    if (d->type == prof::kColl) {
        CollStart cs;
        cs.kind = kind_of(d->coll.func);
        cs.nccl_seq = d->coll.seq;
        cs.count = d->coll.count;
        cs.nchannels = d->coll.nchannels;
        cs.algo = d->coll.algo;
        cs.parent = d->parent;
        if constexpr (kHasApiEvents<Descr>) cs.parent_group = d->coll.parent_group;
        start_coll(c, handle, cs);
    } else if (d->type == prof::kKernelCh) {
        uint64_t gpu = now_mono_ns();
        if constexpr (!std::is_same_v<Descr, prof::DescrV3>) {
            if (has_timer) gpu = d->kernel_ch.gpu_timer;
        }
        start_channel(handle, d->parent, gpu);
    } else if constexpr (kHasApiEvents<Descr>) {
        if (d->type == prof::kCollApi) start_coll_api(c, handle, d->coll_api.graph_captured);
        if (d->type == prof::kP2pApi) start_coll_api(c, handle, d->p2p_api.graph_captured);
        if (d->type == prof::kGroup) start_plan(c, handle);
        if (d->type == prof::kP2p) {
            // Tied to its op by identity only (its parent is our P2pApi handle): NCCL numbers no P2p.
            CollStart cs;
            cs.p2p = true;
            cs.kind = kind_of(d->p2p.func);
            cs.count = d->p2p.count;
            cs.nchannels = d->p2p.nchannels;
            cs.parent = d->parent;
            cs.parent_group = d->p2p.parent_group;
            start_coll(c, handle, cs);
        }
    }
    return 0;
}

}  // namespace

const ProfilerSetup& profiler_setup() { return g_setup; }

const char* profiler_regression(int nccl_version) {
#define NCW_REGRESSION_MATCH(first, last, why) \
    if (nccl_version >= (first) && nccl_version <= (last)) return why;
    NCW_PROFILER_REGRESSIONS(NCW_REGRESSION_MATCH)
#undef NCW_REGRESSION_MATCH
    return nullptr;
}

void profiler_log_setup(const Runtime& rt) {
    // Said once per node (its first local rank; every rank where the launcher says none), or at debug level where it
    // only repeats the user's own setting: a healthy job prints nothing it need not.
    const bool node_voice = rt.id.local_rank <= 0;
    if (g_setup.mode == ProfilerMode::Off) {
        log().debug("{}", rt.cfg.gpu_events
                              ? "NCCLWATCH_PROFILER=off: GPU progress comes from CUDA events"
                              : "NCCLWATCH_PROFILER=off and NCCLWATCH_GPU_EVENTS=0: no GPU progress is tracked "
                                "(completion means the call returned)");
    } else if (g_setup.user_plugin) {
        if (node_voice)
            log().warn(
                "NCCL_PROFILER_PLUGIN={} is set: ncclwatch keeps that plugin, and GPU progress comes from CUDA "
                "events (sampled: lower bounds) instead of NCCL's profiler events",
                g_setup.user_plugin);
    } else if (const char* why = profiler_regression(rt.nccl_version); why && g_setup.mode == ProfilerMode::Auto) {
        // At debug level: it changes nothing the user does (a healthy job prints nothing), and every rank says it.
        log().debug(
            "NCCL {}: {}; ncclwatch asks it for no profiler events, and GPU progress comes from CUDA events "
            "(sampled: lower bounds)",
            rt.nccl_version, why);
    } else if (g_setup.mode == ProfilerMode::Empty) {
        if (node_voice)
            log().warn("NCCLWATCH_PROFILER=empty: NCCL's profiler events are on but ignored (a cost measurement only)");
    }
}

void profiler_publish_one(CommRuntime& cr) {
    ProfilerLink* pl = cr.prof.load(std::memory_order_acquire);
    disk::CommSlot* s = cr.slot.load(std::memory_order_acquire);
    if (!pl || !s || !pl->kernel_events.load(std::memory_order_acquire)) return;
    // Unseen ops a later op's completion proves done (NCCL runs a communicator's ops in order); the rest that a later
    // launch shows unseen keep the counts lower bounds until something proves them.
    const uint64_t unseen_open =
        sweep_unseen(*pl, 0, 0, pl->completed_op.load(std::memory_order_acquire), now_mono_ns());
    pl->unseen_open.store(unseen_open, std::memory_order_relaxed);
    if (pl->unseen.load(std::memory_order_relaxed) && !pl->unseen_logged.exchange(true, std::memory_order_relaxed))
        log().debug(  // a healthy job prints nothing: NCCL's symmetric kernels do this all along
            "communicator {:016x}: NCCL's profiler gave no events for an op it was called for; that op alone is "
            "completed by what proves it (a later op's completion, its stream's catch-up event, a host "
            "synchronisation), and the counts stay exact",
            cr.comm_id);
    const uint64_t done = pl->ops_done.load(std::memory_order_relaxed);
    atomic_max(s->coll_reached, pl->reached.load(std::memory_order_relaxed));
    atomic_max(s->coll_completed, pl->completed.load(std::memory_order_relaxed));
    uint64_t published = pl->published_ops.load(std::memory_order_relaxed);
    if (done > published && pl->published_ops.compare_exchange_strong(published, done, std::memory_order_relaxed)) {
        s->ops_completed.fetch_add(done - published, std::memory_order_relaxed);
        atomic_max(s->t_last_progress_ns, pl->t_progress_ns.load(std::memory_order_relaxed));
    }
    s->gpu_source.store(uint32_t(disk::GpuSource::Profiler), std::memory_order_relaxed);
    s->gpu_tracking.store(1, std::memory_order_relaxed);
    // Exact while every collective since the first offered one went through NCCL's events, and the ones before it
    // (CUDA events, before NCCL's kernel events were known to flow) are complete. v5+: an offered op is NCCL's once
    // its CollApi named it, and only one whose Coll we could not follow (no free ProfOp) leaves its GPU start unknown;
    // v3/v4: an offered op NCCL's Coll start did not take within the call stays offered, and its wrapper takes it
    // back (`withdrawn`). Coll events of ops issued before the communicator was linked were never offered, so they
    // do not count against it. Kernel events out of step with the kernels prove nothing (`desynced`).
    const uint64_t first = pl->first_offered.load(std::memory_order_relaxed);
    const uint64_t lost = pl->by_identity() ? pl->dropped_owned.load(std::memory_order_relaxed)
                                            : pl->withdrawn.load(std::memory_order_relaxed);
    const bool desynced = pl->desynced.load(std::memory_order_relaxed);
    // A broken communicator's counts stop where the break found them: lower bounds from then on.
    // Collectives: exact from the first offered one on, once those before it are complete (none offered: exact
    // when every one issued is complete). Sends and receives: exact once followed (offered) and none took CUDA events
    // since the kernel events flowed; the ones before are CUDA events, proven once a later one completes.
    const uint64_t coll_done = s->coll_completed.load(std::memory_order_relaxed);
    const bool colls_exact =
        first ? coll_done + 1 >= first : coll_done >= s->coll_issued.load(std::memory_order_relaxed);
    const bool p2p_unfollowed = pl->p2p_unfollowed.load(std::memory_order_relaxed);
    const bool p2p_offered = pl->p2p_offered.load(std::memory_order_relaxed);
    const bool p2p_exact = !p2p_unfollowed && (p2p_offered || !pl->p2p_early.load(std::memory_order_relaxed));
    const bool exact = (first || p2p_offered) && lost == 0 && !desynced && !comm_broken(*s) && colls_exact &&
                       p2p_exact && unseen_open == 0;
    // At debug level, as the next: notes of what this NCCL's events cannot give, in jobs that may be healthy (a
    // healthy job prints nothing); a verdict built on such counts says "lower bounds" itself.
    if (p2p_unfollowed && !desynced && !pl->p2p_logged.exchange(true, std::memory_order_relaxed))
        log().debug(
            "communicator {:016x}: sends and receives take CUDA events here ({}): from then on its counts are lower "
            "bounds",
            cr.comm_id,
            pl->by_identity() ? "nonblocking or captured, or NCCL's P2pApi event did not name one"
                              : "NCCL's profiler before 2.28 names no send or receive");
    if (lost && !pl->by_identity() && !pl->withdrawal_logged.exchange(true, std::memory_order_relaxed))
        log().debug(
            "communicator {:016x}: a collective offered to NCCL's profiler events got none within its call "
            "(NCCL launched it later, or its sequence numbers differ from ours): from then on its counts are "
            "lower bounds (CUDA events)",
            cr.comm_id);
    if (lost && pl->by_identity() && !pl->withdrawal_logged.exchange(true, std::memory_order_relaxed))
        log().info(
            "communicator {:016x}: more collectives in flight than ncclwatch follows ({}): from then on its GPU "
            "starts are lower bounds",
            cr.comm_id, ProfilerLink::kOps);
    // Neither changes what the user does (the counts stay exact): the debug log's.
    if (desynced && pl->replayed.load(std::memory_order_relaxed) &&
        !pl->desync_logged.exchange(true, std::memory_order_relaxed))
        log().debug(
            "communicator {:016x}: a CUDA graph replays its captured ops (each replay is recorded as those ops): "
            "NCCL's kernel events cannot be tied to its ops from then on, so every op of it carries CUDA events of "
            "its own",
            cr.comm_id);
    if (desynced && !pl->desync_logged.exchange(true, std::memory_order_relaxed))
        log().debug(
            "communicator {:016x}: NCCL's kernel events are out of step with its kernels (a stamp older than its "
            "op; a CUDA graph replayed after eager collectives, or an all-to-all's local copies, can do that): from "
            "then on every op of it carries CUDA events of its own",
            cr.comm_id);
    s->progress_exact.store(exact ? 1 : 0, std::memory_order_relaxed);
    const int64_t hi = pl->offset_hi.load(std::memory_order_relaxed),
                  lo = pl->offset_lo.load(std::memory_order_relaxed);
    if (pl->version >= 4 && hi != INT64_MAX && lo != INT64_MIN && hi >= lo)
        s->gpu_clock_uncertainty_ns.store(uint64_t(hi - lo), std::memory_order_relaxed);
}

void profiler_covered(CommRuntime& cr, uint64_t coll_seq) {
    ProfilerLink* pl = cr.prof.load(std::memory_order_acquire);
    if (!pl) return;
    const uint64_t now = now_mono_ns();
    const uint64_t hi = pl->next_op.load(std::memory_order_acquire);
    uint64_t lo = pl->scan_from.load(std::memory_order_relaxed);
    if (hi - lo > ProfilerLink::kOps) lo = hi - ProfilerLink::kOps;
    for (uint64_t i = lo; i < hi; ++i) {
        ProfOp& op = pl->ops[i & (ProfilerLink::kOps - 1)];
        if (op.busy.load(std::memory_order_acquire) && !op.finished.load(std::memory_order_relaxed) && op.owned &&
            !op.p2p && op.coll_seq <= coll_seq)
            finish_op(op, now);
    }
    sweep_unseen(*pl, coll_seq, 0, 0, now);
}

void profiler_proven(CommRuntime& cr, uint64_t coll_seq, uint64_t op_index, uint64_t end_mono) {
    ProfilerLink* pl = cr.prof.load(std::memory_order_acquire);
    if (!pl) return;
    const uint64_t hi = pl->next_op.load(std::memory_order_acquire);
    uint64_t lo = pl->scan_from.load(std::memory_order_relaxed);
    if (hi - lo > ProfilerLink::kOps) lo = hi - ProfilerLink::kOps;
    for (uint64_t i = lo; i < hi; ++i) {
        ProfOp& op = pl->ops[i & (ProfilerLink::kOps - 1)];
        if (!op.busy.load(std::memory_order_acquire) || op.finished.load(std::memory_order_relaxed) || !op.owned)
            continue;
        if ((!op.p2p && op.coll_seq && op.coll_seq <= coll_seq) || (op.op_index && op.op_index <= op_index))
            finish_op(op, end_mono);
    }
    sweep_unseen(*pl, coll_seq, op_index, 0, end_mono);
}

void profiler_publish(Runtime& rt) {
    rt.comms.for_each([](CommRuntime& cr) { profiler_publish_one(cr); });
}

namespace prof_cb {

prof::Result init_v3(void** ctx, int* mask) { return make_ctx(ctx, mask, 0, 0, -1, 3); }
prof::Result init_v4(void** ctx, int* mask, const char*, uint64_t hash, int, int nranks, int rank, prof::Logger) {
    return make_ctx(ctx, mask, hash, nranks, rank, 4);
}
prof::Result init_v5(void** ctx, uint64_t hash, int* mask, const char*, int, int nranks, int rank, prof::Logger) {
    return make_ctx(ctx, mask, hash, nranks, rank, 5);
}
prof::Result start_v3(void* ctx, void** handle, prof::DescrV3* d) { return start_any(ctx, handle, d, false); }
prof::Result start_v4(void* ctx, void** handle, prof::DescrV4* d) { return start_any(ctx, handle, d, true); }
prof::Result start_v5(void* ctx, void** handle, prof::DescrV5* d) { return start_any(ctx, handle, d, true); }
prof::Result init_v7(void** ctx, uint64_t hash, int* mask, const char*, int, int nranks, int rank, prof::Logger) {
    return make_ctx(ctx, mask, hash, nranks, rank, 7);
}
prof::Result start_v7(void* ctx, void** handle, prof::DescrV7* d) { return start_any(ctx, handle, d, true); }

prof::Result stop(void* handle) {
    if (ProfOp* op = channel_op(handle)) stop_channel(*op);
    return 0;  // a Coll event's stop only means "enqueued"
}

prof::Result record_v3(void* handle, int state, prof::StateArgsV3*) {
    if (ProfOp* op = channel_op(handle); op && state == prof::kKernelChStop) atomic_max(op->gpu_stop, now_mono_ns());
    return 0;
}
prof::Result record_v4(void* handle, int state, prof::StateArgsV4* args) {
    if (ProfOp* op = channel_op(handle); op && state == prof::kKernelChStop && args)
        atomic_max(op->gpu_stop, args->kernel_ch.gpu_timer);
    return 0;
}

prof::Result finalize(void* ctx) {
    auto* c = static_cast<Ctx*>(ctx);
    ProfilerLink* pl = c ? c->link : nullptr;
    if (!pl) return 0;
    // The last of its progress, then the communicator lets go of it (its teardown's publish finds none) and so does
    // the Ctx; the link waits for reuse by a later communicator.
    if (pl->cr) {
        // Inside the ncclCommFinalize or ncclCommDestroy of its communicator (not an abort): NCCL completed its work
        // before it lets the profiler go, so every op of it is complete, the last ones NCCL sent no event for too.
        if (thread_state().settling == pl->cr) profiler_proven(*pl->cr, ~0ull, ~0ull, now_mono_ns());
        profiler_publish_one(*pl->cr);
        ProfilerLink* mine = pl;
        pl->cr->prof.compare_exchange_strong(mine, nullptr, std::memory_order_acq_rel);
    }
    c->link = nullptr;
    retire_link(pl);
    retire_ctx(c);
    return 0;
}

}  // namespace prof_cb

}  // namespace ncw
