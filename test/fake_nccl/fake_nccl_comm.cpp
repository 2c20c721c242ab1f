#include "fake_nccl_comm.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "fake_nccl_profiler.h"
#include "fake_nccl_wait.h"

namespace ncw::fake {

using namespace detail;

namespace {

std::mutex g_last_error_mutex;
char g_last_error[1024] = "";

struct GroupState {
    int depth = 0;
    std::vector<Op> ops;
    ncclResult_t error = ncclSuccess;  // first enqueue error inside the group, returned by the outermost end
};
thread_local GroupState t_group;

// Every Comm ever created: they are never freed (see destroy_comm), and this keeps them reachable for LeakSanitizer.
// Deliberately never destroyed itself.
std::mutex g_comms_mutex;
std::vector<Comm*>* g_comms = new std::vector<Comm*>;

// With the fake libcuda in the process (test/fake_cuda), posting an operation also enqueues one item, its "kernel",
// on its stream: for an operation in a group, at the outermost ncclGroupEnd, where NCCL launches the group. Its
// fakecuda_enqueue is looked up when a communicator is created.
using EnqueueFn = void (*)(void*);
std::atomic<EnqueueFn> g_fake_cuda_enqueue{nullptr};
// An op issued into a graph capture is a node of the graph instead (run at each launch of it, as NCCL's kernel).
using CaptureNodeFn = int (*)(void*, int (*)(void*), void*);
std::atomic<CaptureNodeFn> g_fake_cuda_capture_node{nullptr};

void find_fake_cuda() {
    if (g_fake_cuda_enqueue.load(std::memory_order_relaxed) != nullptr) return;
    g_fake_cuda_capture_node.store(reinterpret_cast<CaptureNodeFn>(dlsym(RTLD_DEFAULT, "fakecuda_capture_node")),
                                   std::memory_order_relaxed);
    g_fake_cuda_enqueue.store(reinterpret_cast<EnqueueFn>(dlsym(RTLD_DEFAULT, "fakecuda_enqueue")),
                              std::memory_order_relaxed);
}

}  // namespace

namespace detail {

void post(Op& op) {
    Comm* c = op.comm;
    Segment* s = c->seg;
    switch (op.kind) {
        case OpKind::Collective:
            op.target = ++c->coll_seq;
            s->ranks[c->rank].arrived.store(op.target, std::memory_order_release);
            profiler_op_posted(op);
            break;
        case OpKind::Send:
        case OpKind::Recv: {
            // One writer per counter (this rank): its size is stored before the count that publishes it.
            const bool send = op.kind == OpKind::Send;
            PairCounters& pair = send ? s->pairs[c->rank][op.peer] : s->pairs[op.peer][c->rank];
            auto& posted = send ? pair.sends : pair.recvs;
            op.target = posted.load(std::memory_order_relaxed) + 1;
            (send ? pair.send_bytes : pair.recv_bytes)[op.target % 2].store(op.bytes, std::memory_order_relaxed);
            posted.store(op.target, std::memory_order_release);
            profiler_op_posted(op);
            break;
        }
        case OpKind::Join:
            op.target = 1;  // attaching already published joined = 1
            return;
    }
    if (EnqueueFn enqueue = g_fake_cuda_enqueue.load(std::memory_order_relaxed)) enqueue(op.stream);
}

ncclResult_t wait_op(const Op& op, Clock::time_point deadline) {
    Comm* c = op.comm;
    Segment* s = c->seg;
    std::string what = op.name;
    switch (op.kind) {
        case OpKind::Collective: {
            what += " #" + std::to_string(op.target);
            auto counter = [s](int i) { return s->ranks[i].arrived.load(std::memory_order_acquire); };
            auto done = [&] {
                for (int i = 0; i < c->nranks; ++i)
                    if (counter(i) < op.target) return false;
                // Every rank is in it; ranks that run different algorithms wait for each other forever.
                for (int i = 1; i < c->nranks; ++i)
                    if (s->ranks[i].algo.load(std::memory_order_acquire) !=
                        s->ranks[0].algo.load(std::memory_order_acquire))
                        return false;
                return true;
            };
            return wait_until(c, what.c_str(), deadline, done,
                              [&] { return lagging_ranks(all_ranks(c), op.target, counter); });
        }
        case OpKind::Send:
        case OpKind::Recv: {
            bool send = op.kind == OpKind::Send;
            what += " #" + std::to_string(op.target) + (send ? " to rank " : " from rank ") + std::to_string(op.peer);
            auto& pair = send ? s->pairs[c->rank][op.peer] : s->pairs[op.peer][c->rank];
            auto& other = send ? pair.recvs : pair.sends;
            auto& other_bytes = (send ? pair.recv_bytes : pair.send_bytes)[op.target % 2];
            // Its match posted, and at least as large: a receive takes what the send moves and no more.
            auto matched = [&] {
                return other.load(std::memory_order_acquire) >= op.target &&
                       other_bytes.load(std::memory_order_relaxed) >= op.bytes;
            };
            return wait_until(c, what.c_str(), deadline, matched, [&] {
                if (other.load() >= op.target)
                    return "rank " + std::to_string(op.peer) + "'s " + (send ? "receive #" : "send #") +
                           std::to_string(op.target) + " of " + std::to_string(other_bytes.load()) + " bytes, not " +
                           std::to_string(op.bytes);
                return "rank " + std::to_string(op.peer) + " to post " + (send ? "receive #" : "send #") +
                       std::to_string(op.target) + " (posted " + std::to_string(other.load()) + ")";
            });
        }
        case OpKind::Join: {
            auto counter = [s](int i) -> uint64_t { return s->ranks[i].joined.load(std::memory_order_acquire); };
            auto done = [&] {
                for (int i = 0; i < c->nranks; ++i)
                    if (counter(i) == 0) return false;
                return true;
            };
            ncclResult_t r = wait_until(c, what.c_str(), deadline, done,
                                        [&] { return lagging_ranks(all_ranks(c), 1, counter) + " to join"; });
            // Every rank has mapped the segment (they set `joined` after mmap) and nobody opens it by name again,
            // so the name can go now: a job killed from here on (launcher included) leaves nothing in /dev/shm.
            if (r == ncclSuccess) unlink_segment(c->shm_name);
            return r;
        }
    }
    return ncclInternalError;
}

}  // namespace detail

namespace {

// Simulates the GPU time of a completed operation (FAKE_NCCL_OP_DELAY_US).
void op_delay() {
    if (long us = settings().op_delay_us; us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// Drops this rank from the segment's attach count; the last one out unlinks the segment (when the join never
// completed: otherwise the name is gone already).
void leave(Comm* c) {
    c->seg->ranks[c->rank].left.store(1, std::memory_order_release);
    if (!c->counted) return;
    c->counted = false;
    if (c->seg->attached.fetch_sub(1, std::memory_order_acq_rel) == 1) unlink_segment(c->shm_name);
}

}  // namespace

const Settings& settings() {
    static const Settings s = [] {
        Settings v;
        if (const char* e = std::getenv("FAKE_NCCL_TIMEOUT_SEC"); e != nullptr && *e != '\0') {
            double t = std::strtod(e, nullptr);
            if (t > 0) v.timeout_sec = t;
        }
        if (const char* e = std::getenv("FAKE_NCCL_OP_DELAY_US"); e != nullptr && *e != '\0') {
            v.op_delay_us = std::max(0L, std::strtol(e, nullptr, 10));
        }
        return v;
    }();
    return s;
}

ncclResult_t report(ncclResult_t result, const std::string& message) {
    {
        std::lock_guard<std::mutex> lock(g_last_error_mutex);
        std::snprintf(g_last_error, sizeof g_last_error, "%s", message.c_str());
    }
    std::fprintf(stderr, "fake-nccl: %s\n", message.c_str());
    return result;
}

const char* last_error() { return g_last_error; }

void debug(const char* fmt, ...) {
    static const bool on = [] {
        const char* v = std::getenv("FAKE_NCCL_TRACE");
        return v != nullptr && *v != '\0';
    }();
    if (!on) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "fake-nccl: %s\n", line);
}

Comm* from_handle(ncclComm_t handle, const char* fn) {
    auto* c = reinterpret_cast<Comm*>(handle);
    if (c == nullptr) {
        report(ncclInvalidArgument, std::string(fn) + ": comm is NULL");
        return nullptr;
    }
    if (c->magic == kDeadCommMagic) {
        report(ncclInvalidArgument, std::string(fn) + ": use of a destroyed communicator " + comm_label(c));
        return nullptr;
    }
    if (c->magic != kCommMagic) {
        report(ncclInvalidArgument, std::string(fn) + ": not a communicator");
        return nullptr;
    }
    return c;
}

ncclResult_t new_unique_id(ncclUniqueId* id) {
    size_t got = 0;
    while (got < sizeof id->internal) {
        ssize_t n = getrandom(id->internal + got, sizeof id->internal - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return report(ncclSystemError, std::string("getrandom: ") + std::strerror(errno));
        got += static_cast<size_t>(n);
    }
    return ncclSuccess;
}

ncclResult_t create_comm(const ncclUniqueId& id, int nranks, int rank, int device, bool nonblocking, Comm** out) {
    find_fake_cuda();
    std::string name = segment_name(id);
    std::string error;
    Segment* seg = open_segment(name, nranks, settings().timeout_sec, error);
    if (seg == nullptr) return report(ncclSystemError, "CommInit rank " + std::to_string(rank) + ": " + error);
    if (seg->ranks[rank].joined.exchange(1, std::memory_order_acq_rel) != 0) {
        unmap_segment(seg);
        return report(ncclInvalidUsage, "CommInit: rank " + std::to_string(rank) + " joined " + name + " twice");
    }
    seg->attached.fetch_add(1, std::memory_order_acq_rel);
    seg->ranks[rank].left.store(0, std::memory_order_relaxed);
    seg->ranks[rank].pid.store(getpid(), std::memory_order_release);
    uint64_t algo = 0;
    if (const char* a = std::getenv("NCCL_ALGO"); a != nullptr && *a != '\0') {
        algo = 1469598103934665603ull;
        for (; *a; ++a) algo = (algo ^ uint8_t(*a)) * 1099511628211ull;
    }
    seg->ranks[rank].algo.store(algo, std::memory_order_release);
    auto* c = new Comm;
    c->seg = seg;
    c->shm_name = std::move(name);
    c->id = id;
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    c->nonblocking = nonblocking;
    c->counted = true;
    profiler_init_comm(c);
    {
        std::lock_guard<std::mutex> lock(g_comms_mutex);
        g_comms->push_back(c);
    }
    *out = c;
    return ncclSuccess;
}

ncclResult_t init_rank(const ncclUniqueId& id, int nranks, int rank, bool nonblocking, ncclComm_t* out) {
    Comm* c = nullptr;
    // As if the framework called cudaSetDevice(LOCAL_RANK), the usual one-GPU-per-rank layout.
    const char* local_rank = std::getenv("LOCAL_RANK");
    const int device = local_rank != nullptr && *local_rank != '\0' ? std::atoi(local_rank) : rank;
    ncclResult_t r = create_comm(id, nranks, rank, device, nonblocking, &c);
    if (r != ncclSuccess) return group_error(r);
    *out = to_handle(c);
    return submit(Op{OpKind::Join, c, "CommInitRank", -1, 0});
}

ncclResult_t init_all(ncclComm_t* comms, int ndev, const int* devlist) {
    ncclUniqueId id;
    if (ncclResult_t r = new_unique_id(&id); r != ncclSuccess) return r;
    for (int i = 0; i < ndev; ++i) {
        Comm* c = nullptr;
        ncclResult_t r = create_comm(id, ndev, i, devlist != nullptr ? devlist[i] : i, false, &c);
        if (r != ncclSuccess) {
            for (int j = 0; j < i; ++j) destroy_comm(reinterpret_cast<Comm*>(comms[j]));
            return r;
        }
        comms[i] = to_handle(c);
    }
    // Every rank attached above, so the join is already complete (and the name no longer needed, see wait_op).
    unlink_segment(reinterpret_cast<Comm*>(comms[0])->shm_name);
    return ncclSuccess;
}

namespace {

// A node of a captured graph: the op, run anew at each launch (it waits for its peers then, as a launched kernel).
int run_captured(void* arg) {
    Op op = *static_cast<const Op*>(arg);
    post(op);
    ncclResult_t r = wait_op(op, deadline_from_now());
    if (r == ncclSuccess) profiler_op_done(op);
    return r == ncclSuccess ? 0 : 1;
}

// With the fake libcuda, a collective, send or receive issued into a graph capture runs nothing now: it becomes a
// node of the graph (counted captured by the fake, as a kernel enqueued into a capture). Never freed: the graph may
// be launched until the process ends.
bool capture(const Op& op) {
    CaptureNodeFn node = g_fake_cuda_capture_node.load(std::memory_order_relaxed);
    if (node == nullptr || op.kind == OpKind::Join) return false;
    auto* copy = new Op(op);
    if (node(op.stream, run_captured, copy) == 0) {
        delete copy;
        return false;
    }
    if (EnqueueFn enqueue = g_fake_cuda_enqueue.load(std::memory_order_relaxed)) enqueue(op.stream);
    return true;
}

}  // namespace

ncclResult_t submit(Op op) {
    Comm* c = op.comm;
    if (c->revoked.load()) {
        return group_error(report(ncclInvalidUsage, comm_label(c) + ": " + op.name + " on a revoked communicator"));
    }
    if (c->aborted.load() || c->async_error.load() != ncclSuccess) {
        return group_error(
            report(ncclSystemError, comm_label(c) + ": " + op.name + " on a communicator in error state"));
    }
    if (t_group.depth > 0) {
        t_group.ops.push_back(op);
        return ncclSuccess;
    }
    if (capture(op)) return ncclSuccess;
    post(op);
    ncclResult_t r = wait_op(op, deadline_from_now());
    if (r == ncclSuccess && op.kind != OpKind::Join) op_delay();
    // The simulated GPU time is the kernel's: its channels stop after it, as on a GPU.
    if (r == ncclSuccess) profiler_op_done(op);
    return r;
}

ncclResult_t group_start() {
    ++t_group.depth;
    return ncclSuccess;
}

ncclResult_t group_end() {
    if (t_group.depth == 0) return report(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--t_group.depth > 0) return ncclSuccess;
    std::vector<Op> ops;
    ops.swap(t_group.ops);
    ncclResult_t error = t_group.error;
    t_group.error = ncclSuccess;
    if (error != ncclSuccess) return error;  // nothing of a broken group is posted: its peers will block, as with NCCL

    // Post everything first, across all communicators, so that one thread can drive several ranks (ncclCommInitAll
    // with nccl-tests -g) and a send/recv ring inside one group cannot deadlock.
    for (Op& op : ops) post(op);
    Clock::time_point deadline = deadline_from_now();
    ncclResult_t result = ncclSuccess;
    bool any_work = false;
    std::vector<bool> ok(ops.size(), false);
    for (size_t i = 0; i < ops.size(); ++i) {
        ncclResult_t r = wait_op(ops[i], deadline);
        if (r != ncclSuccess && result == ncclSuccess) result = r;
        ok[i] = r == ncclSuccess;
        any_work |= ops[i].kind != OpKind::Join;
    }
    if (result == ncclSuccess && any_work) op_delay();  // one delay per group: its operations run as one launch
    for (size_t i = 0; i < ops.size(); ++i)
        if (ok[i]) profiler_op_done(ops[i]);  // after the simulated GPU time, as in submit()
    return result;
}

ncclResult_t group_simulate_end() {
    if (t_group.depth == 0) return report(ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
    if (--t_group.depth == 0) {
        t_group.ops.clear();
        t_group.error = ncclSuccess;
    }
    return ncclSuccess;
}

ncclResult_t group_error(ncclResult_t r) {
    if (r != ncclSuccess && t_group.depth > 0 && t_group.error == ncclSuccess) t_group.error = r;
    return r;
}

void check_peers(Comm* c) {
    if (c->aborted.load() || c->async_error.load() != ncclSuccess || c->seg == nullptr) return;
    for (int i = 0; i < c->nranks; ++i) {
        const RankSlot& peer = c->seg->ranks[i];
        const pid_t pid = peer.pid.load(std::memory_order_acquire);
        if (i == c->rank || pid <= 0 || pid == getpid() || peer.left.load(std::memory_order_acquire) != 0) continue;
        if (kill(pid, 0) == 0 || errno != ESRCH) continue;
        int fine = ncclSuccess;
        if (c->async_error.compare_exchange_strong(fine, ncclRemoteError))
            report(ncclRemoteError, comm_label(c) + ": rank " + std::to_string(i) + " (pid " + std::to_string(pid) +
                                        ") is gone without leaving the communicator: remote error");
        return;
    }
}

ncclResult_t abort_comm(Comm* c) {
    if (c->aborted.exchange(true)) return ncclSuccess;
    c->async_error.store(ncclSystemError);
    c->seg->aborted.store(1, std::memory_order_release);
    leave(c);
    // The mapping and the object stay: another thread may still be inside an operation on this communicator.
    return ncclSuccess;
}

ncclResult_t revoke_comm(Comm* c) {
    c->revoked.store(true, std::memory_order_release);
    return ncclSuccess;
}

ncclResult_t destroy_comm(Comm* c) {
    // FAKE_NCCL_DESTROY_HOLD_MS (on FAKE_NCCL_DESTROY_HOLD_RANK's process, every one when unset): a teardown that
    // hangs that long inside NCCL, as one waiting for its threads or a peer.
    if (const char* ms = std::getenv("FAKE_NCCL_DESTROY_HOLD_MS"); ms != nullptr && *ms != '\0') {
        const char* who = std::getenv("FAKE_NCCL_DESTROY_HOLD_RANK");
        if (who == nullptr || *who == '\0' || std::atoi(who) == c->rank)
            std::this_thread::sleep_for(std::chrono::milliseconds(std::max(0L, std::strtol(ms, nullptr, 10))));
    }
    profiler_finalize_comm(c);
    leave(c);
    if (!c->aborted.load()) {
        unmap_segment(c->seg);
        c->seg = nullptr;
    }
    // Never freed: a later use of the handle then reports "destroyed communicator" instead of reading freed memory.
    c->magic = kDeadCommMagic;
    return ncclSuccess;
}

}  // namespace ncw::fake
