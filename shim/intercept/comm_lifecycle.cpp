#include "shim/intercept/comm_lifecycle.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "ncclwatch/hash.h"
#include "shim/base/clock.h"
#include "shim/base/cuda_driver.h"
#include "shim/base/log.h"
#include "shim/base/resolver.h"
#include "shim/complete/completion_tracker.h"
#include "shim/record/call_scope.h"

namespace ncw {

namespace {

void fill_device(Runtime& rt, CommRuntime& cr) {
    int dev = -1;
    if (NCW_CALL_REAL(ncclCommCuDevice, cr.comm, &dev) != ncclSuccess || dev < 0) return;
    cr.cuda_dev = dev;
    if (disk::CommSlot* s = cr.slot.load()) {
        s->cuda_dev = dev;
        const CudaDriver& cu = cuda_driver();
        CUdevice d;
        if (cu.ok && cu.cuDeviceGet(&d, dev) == CUDA_SUCCESS) {
            cu.cuDeviceGetPCIBusId(s->pci_bus_id, sizeof(s->pci_bus_id), d);
            CUuuid uuid{};
            if (cu.cuDeviceGetUuid && cu.cuDeviceGetUuid(&uuid, d) == CUDA_SUCCESS)
                memcpy(s->gpu_uuid, uuid.bytes, sizeof(s->gpu_uuid));
        }
    }
    if (rt.tracker) {
        cr.pool.store(rt.tracker->pool_for_device(dev), std::memory_order_release);
        if (disk::CommSlot* s = cr.slot.load()) {
            const bool events = cr.pool.load() != nullptr;
            s->gpu_tracking.store(events ? 1 : 0);
            // Sampled events: reached / completed are lower bounds, and the poller writes what pending events prove
            // (coll_unreached, coll_uncompleted). NCCL's profiler events, once they flow, say otherwise
            // (profiler_plugin.cpp).
            if (events) {
                s->gpu_source.store(uint32_t(disk::GpuSource::Events));
                s->progress_exact.store(0);
            }
        }
    }
}

void alloc_peers(CommRuntime& cr, int nranks) {
    // p2p sequence numbers per peer; a peer beyond the table shares a counter (modulo), which only blurs p2p
    // matching for communicators of more than 64k ranks.
    uint32_t n = nranks > 0 ? uint32_t(nranks) : 1024;
    if (n > 65536) n = 65536;
    if (cr.peer_capacity < n) {
        // A reused runtime (comm_pool.h) keeps its counters where they are long enough (only the hot path of its
        // communicator ever used them); else they are made anew, the runtime consistent if an allocation throws.
        delete[] cr.send_seq;
        delete[] cr.recv_seq;
        cr.send_seq = cr.recv_seq = nullptr;
        cr.peer_capacity = 0;
        cr.send_seq = new std::atomic<uint64_t>[n]();
        cr.recv_seq = new std::atomic<uint64_t>[n]();
        cr.peer_capacity = n;
    } else {
        for (uint32_t i = 0; i < n; ++i) {
            cr.send_seq[i].store(0, std::memory_order_relaxed);
            cr.recv_seq[i].store(0, std::memory_order_relaxed);
        }
    }
    cr.peer_slots = n;
}

}  // namespace

namespace {

// A field of the caller's ncclConfig_t, only if the struct is initialised (magic) and as large as that field needs:
// a program built against an older nccl.h passes a smaller struct.
template <typename T>
bool config_field(const ncclConfig_t* c, const T ncclConfig_t::*field, T& out) {
    if (!c || c->magic != 0xcafebeef) return false;
    size_t end = size_t(reinterpret_cast<const char*>(&(c->*field)) - reinterpret_cast<const char*>(c)) + sizeof(T);
    if (c->size < end) return false;
    out = c->*field;
    return true;
}

}  // namespace

CommRuntime* begin_comm(Runtime& rt, const CommInitInfo& info) {
    CommRuntime* cr = rt.comm_pool.take(rt.slots);  // a destroyed communicator's, made new, where one is free
    cr->comm_id = info.comm_id;
    cr->rank = info.rank;
    cr->nranks = info.nranks;
    int blocking = -1;
    const char* name = nullptr;
    config_field(info.config, &ncclConfig_t::blocking, blocking);
    config_field(info.config, &ncclConfig_t::commName, name);
    cr->nonblocking = blocking == 0;
    alloc_peers(*cr, info.nranks);
    uint64_t now = now_mono_ns();
    uint16_t idx = 0xffff;
    disk::CommSlot* s = rt.slots.acquire(cr, idx);
    const bool in_file = s != nullptr;
    if (!in_file) {
        // Every slot is held by a live communicator: this one is watched in memory by our watchdog (same progress
        // block, same checks); readers of the file see its ring records only. The block is the runtime's own, kept
        // across its lives: a reused one's is rewritten under its generation, as a file slot is.
        if (cr->own_slot)
            SlotTable::rewrite(*cr->own_slot);
        else
            cr->own_slot = new disk::CommSlot();
        s = cr->own_slot;
        NCW_LOG_ONCE(warn,
                     "more than {} live communicators: communicator {:016x} and later ones beyond the rank file's comm "
                     "table are watched by this process and recorded in the ring only",
                     rt.file.hdr->max_comms, info.comm_id);
    }
    s->rank = info.rank;
    s->nranks = info.nranks;
    s->cuda_dev = -1;
    s->blocking = blocking == 0 || blocking == 1 ? blocking : -1;
    s->comm_id = info.comm_id;
    s->parent_id = info.parent_id;
    s->split_color = info.color;
    s->split_key = info.key;
    if (name) snprintf(s->name, sizeof(s->name), "%s", name);
    s->t_init_start_ns = now;
    s->state.store(uint32_t(disk::CommState::Initializing), std::memory_order_release);
    SlotTable::publish(*s);
    cr->slot.store(s);
    cr->slot_index = idx;
    // The live digests carry it from here on, its init included (self_reader.cpp).
    if (!in_file && !rt.slots.add_unslotted(cr))
        NCW_LOG_ONCE(warn,
                     "more than {} live communicators without a comm slot: later ones are not in the live digests",
                     SlotTable::kMaxUnslotted);
    record_event(rt.file, cr, cr->comm_id, info.event, -1, info.rank, now);
    return cr;
}

void finish_comm(Runtime& rt, CommRuntime* cr, ncclComm_t comm, ncclResult_t result) {
    if (!cr) return;
    uint64_t now = now_mono_ns();
    bool ok = (result == ncclSuccess || result == ncclInProgress) && comm;
    if (cr->slot) {
        cr->slot.load()->t_init_done_ns = now;
        cr->slot.load()->comm_ptr = reinterpret_cast<uint64_t>(comm);
    }
    if (!ok) {
        if (cr->slot) cr->slot.load()->state.store(uint32_t(disk::CommState::InitFailed), std::memory_order_release);
        rt.slots.release(*cr);  // never registered: nothing of ours writes to it again
        rt.comm_pool.retire(*cr, rt.slots);
        return;
    }
    cr->comm = comm;
    // A nonblocking init, or one inside ncclGroupStart/End, is not done yet (NCCL fills in rank, size and device
    // at the group's end): asked again on this thread at the outermost ncclGroupEnd or when
    // ncclCommGetAsyncError reports success. Never from our threads, which would race the host's destroy.
    if (result == ncclInProgress || thread_state().group_depth > 0) {
        cr->identity_pending.store(true, std::memory_order_release);
        rt.pending_identities.fetch_add(1, std::memory_order_relaxed);
    } else {
        refresh_comm_identity(rt, *cr);
    }
    rt.comms.insert(comm, cr);
    if (cr->slot) cr->slot.load()->state.store(uint32_t(disk::CommState::Active), std::memory_order_release);
}

void refresh_comm_identity(Runtime& rt, CommRuntime& cr) {
    int rank = -1, count = 0;
    if (NCW_CALL_REAL(ncclCommUserRank, cr.comm, &rank) != ncclSuccess ||
        NCW_CALL_REAL(ncclCommCount, cr.comm, &count) != ncclSuccess) {
        if (!cr.identity_pending.exchange(true, std::memory_order_acq_rel))
            rt.pending_identities.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    cr.rank = rank;
    cr.nranks = count;
    if (cr.slot) {
        cr.slot.load()->rank = rank;
        cr.slot.load()->nranks = count;
    }
    if (cr.cuda_dev < 0) fill_device(rt, cr);
    if (cr.identity_pending.exchange(false, std::memory_order_acq_rel))
        rt.pending_identities.fetch_sub(1, std::memory_order_relaxed);
}

void refresh_pending_identities(Runtime& rt) {
    if (rt.pending_identities.load(std::memory_order_relaxed) <= 0) return;
    // Another thread may destroy one of these meanwhile: its runtime is not reused before this walk ends.
    CommPool::HostWalk walk(rt.comm_pool);
    rt.comms.for_each([&](CommRuntime& cr) {
        if (cr.identity_pending.load(std::memory_order_acquire)) refresh_comm_identity(rt, cr);
    });
}

CommRuntime* adopt_unknown_comm(Runtime& rt, ncclComm_t comm) {
    static std::atomic<bool> registry_full{false};
    if (registry_full.load(std::memory_order_relaxed)) return nullptr;  // then ops on unknown comms pass through
    static std::mutex& mu = *new std::mutex;  // the slow path, once per communicator; leaked: used at exit too
    std::lock_guard<std::mutex> lock(mu);
    if (CommRuntime* cr = rt.comms.find(comm)) return cr;
    try {
        NCW_LOG_ONCE(warn,
                     "an operation on a communicator created before ncclwatch saw it: its identity is local to this "
                     "process and cannot be matched with other ranks");
        CommInitInfo info;
        uint64_t key[2] = {reinterpret_cast<uint64_t>(comm), uint64_t(getpid())};
        info.comm_id = fnv1a64(key, sizeof(key));
        CommRuntime* cr = begin_comm(rt, info);
        finish_comm(rt, cr, comm, ncclSuccess);
        if (rt.comms.find(comm) != cr) {
            registry_full.store(true);
            NCW_LOG_ONCE(error, "more than {} live communicators: operations on later ones pass through unrecorded",
                         CommRegistry::kCapacity);
            return nullptr;
        }
        return cr;
    } catch (...) {
        NCW_LOG_ONCE(error, "could not start recording a communicator (out of memory?): its calls pass through");
        return nullptr;
    }
}

}  // namespace ncw
