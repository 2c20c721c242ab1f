// What the rank-file reader's tests share (test_rank_file*.cpp): a builder of rank files with chosen contents.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "shim/record/rank_file_writer.h"
#include "read/rank_file.h"
#include "temp_dir.h"

namespace rank_file_fixtures {

namespace fs = std::filesystem;
using namespace ncw;
using disk::OpType;

// Lays out a rank file in memory, the way the shim does, with adjustable strides (a newer minor writes bigger
// structures) and a small ring.
struct FileBuilder {
    uint32_t ring_capacity, max_comms, bt_depth, slot_size, rec_size;
    uint64_t comm_off = 0, ring_off = 0, bt_off = 0, file_size = 0;
    std::vector<uint64_t> words;  // uint64_t storage keeps every structure 8-byte aligned

    explicit FileBuilder(uint32_t cap = 256, uint32_t comms = 4, uint32_t depth = 0,
                         uint32_t slot = sizeof(disk::CommSlot), uint32_t rec = sizeof(disk::OpRecord))
        : ring_capacity(cap), max_comms(comms), bt_depth(depth), slot_size(slot), rec_size(rec) {
        comm_off = disk::kHeaderBytes;
        ring_off = disk::align_up(comm_off + uint64_t(max_comms) * slot_size, 4096);
        bt_off = disk::align_up(ring_off + uint64_t(ring_capacity) * rec_size, 4096);
        file_size = disk::align_up(bt_off + uint64_t(ring_capacity) * bt_depth * 8, 4096);
        words.assign(file_size / 8, 0);
        // Bytes a newer minor appended: a reader must step over them, never interpret them.
        if (slot_size > sizeof(disk::CommSlot) || rec_size > sizeof(disk::OpRecord))
            std::memset(bytes() + comm_off, 0xAB, bt_off - comm_off);
        auto* h = new (bytes()) disk::FileHeader{};
        for (uint32_t i = 0; i < max_comms; ++i) new (bytes() + comm_off + uint64_t(i) * slot_size) disk::CommSlot{};
        for (uint32_t i = 0; i < ring_capacity; ++i) new (bytes() + ring_off + uint64_t(i) * rec_size) disk::OpRecord{};
        // The strides are this builder's own (a newer minor writes bigger structures) and there is no environment
        // region until add_env_region: a Layout of its own, not compute_layout's.
        disk::Layout l;
        l.ring_capacity = ring_capacity;
        l.max_comms = max_comms;
        l.bt_depth = bt_depth;
        l.comm_slot_size = slot_size;
        l.record_size = rec_size;
        l.comm_table_offset = comm_off;
        l.ring_offset = ring_off;
        l.bt_offset = bt_off;
        l.file_size = file_size;
        disk::init_header(*h, l);
        disk::seal_header(*h);
        h->pid = 4242;
        h->global_rank = 3;
        h->local_rank = 1;
        h->world_size = 8;
        h->local_world_size = 4;
        std::strcpy(h->host, "node-a");
        std::strcpy(h->job_id, "job-17");
        h->start_mono_ns = 1000'000000000ull;
        h->start_real_ns = 1700000000'000000000ull;
        h->boot_id_hash = 0x1234;
        h->nccl_version = 22809;
        h->cuda_driver_version = 12080;
        h->heartbeat_mono_ns = 1100'000000000ull;
        h->process_state = uint32_t(disk::ProcessState::Running);
    }

    unsigned char* bytes() { return reinterpret_cast<unsigned char*>(words.data()); }
    disk::FileHeader& hdr() { return *reinterpret_cast<disk::FileHeader*>(bytes()); }
    disk::CommSlot& slot(uint32_t i) {
        return *reinterpret_cast<disk::CommSlot*>(bytes() + comm_off + uint64_t(i) * slot_size);
    }
    disk::OpRecord& rec(uint64_t ticket) {
        return *reinterpret_cast<disk::OpRecord*>(bytes() + ring_off + (ticket % ring_capacity) * rec_size);
    }
    uint64_t* frames(uint64_t ticket) {
        return reinterpret_cast<uint64_t*>(bytes() + bt_off + (ticket % ring_capacity) * bt_depth * 8);
    }

    disk::CommSlot& add_comm(uint64_t comm_id, int rank, int nranks) {
        const uint32_t i = hdr().num_comms.load();
        disk::CommSlot& s = slot(i);
        s.state = uint32_t(disk::CommState::Active);
        s.rank = rank;
        s.nranks = nranks;
        s.cuda_dev = rank;
        s.blocking = 1;
        s.comm_id = comm_id;
        std::snprintf(s.pci_bus_id, sizeof s.pci_bus_id, "0000:%02x:00.0", rank + 0x10);
        std::snprintf(s.name, sizeof s.name, "comm-%llx", (unsigned long long)comm_id);
        s.gpu_tracking = 1;
        hdr().num_comms = i + 1;
        return s;
    }

    static void add_sig(disk::CommSlot& s, uint64_t seq, OpType op = OpType::AllReduce, uint64_t count = 1024) {
        auto& e = s.recent[seq % disk::kRecentSigs];
        e.count = count;
        e.t_issue_ns = 1000'000000000ull + seq * 1000;
        e.op = uint8_t(op);
        e.dtype = 7;
        e.redop = 0;
        e.root = -1;
        e.tid = 77;
        e.stream = 0x5000;
        e.seq = seq;
    }

    disk::OpRecord& add_record(uint64_t comm_id, uint64_t seq, OpType op = OpType::AllReduce) {
        const uint64_t t = hdr().write_ticket.load();
        disk::OpRecord& r = rec(t);
        r.comm_id = comm_id;
        r.seq = seq;
        r.op_index = seq;
        r.count = 100 + t;
        r.sendbuf = 0x7000 + t;
        r.recvbuf = 0x8000 + t;
        r.stream = 0x5000;
        r.t_issue_ns = 1000'000000000ull + t * 1000;
        r.t_return_ns = r.t_issue_ns + 10;
        r.t_reached_ns = r.t_issue_ns + 20;
        r.t_done_ns = r.t_issue_ns + 30;
        r.tid = 77;
        r.group_id = 0;
        r.op = uint8_t(op);
        r.dtype = 7;
        r.flags = 0;
        r.peer_or_root = -1;
        r.redop = 0;
        r.result = 0;
        r.comm_slot = 0;
        r.stamp = 2 * t + 2;
        hdr().write_ticket = t + 1;
        return r;
    }

    // A header, two comms with signatures #1..#5 and #1..#3, and n records.
    void standard(uint64_t n_records = 10) {
        auto& a = add_comm(0xAAAA, 0, 2);
        for (uint64_t s = 1; s <= 5; ++s) add_sig(a, s);
        a.coll_issued = 5;
        a.coll_returned = 5;
        a.coll_reached = 5;
        a.coll_completed = 4;
        a.ops_issued = 5;
        a.ops_completed = 4;
        a.t_last_issue_ns = 1090'000000000ull;
        a.t_last_progress_ns = 1089'000000000ull;
        auto& b = add_comm(0xBBBB, 1, 4);
        b.parent_id = 0xAAAA;
        for (uint64_t s = 1; s <= 3; ++s) add_sig(b, s, OpType::Broadcast, 8);
        b.coll_issued = 3;
        b.coll_completed = 3;
        for (uint64_t i = 0; i < n_records; ++i) add_record(i % 2 ? 0xBBBB : 0xAAAA, i / 2 + 1);
    }

    // Appends a format 1.1 environment region of `capacity` bytes holding `entries`, of which `published` bytes are
    // announced (SIZE_MAX: all of them).
    uint64_t add_env_region(const std::vector<std::string>& entries, size_t published = SIZE_MAX,
                            uint32_t capacity = disk::kEnvCapacity) {
        const uint64_t env_off = file_size;
        file_size = disk::align_up(env_off + capacity, 4096);
        words.resize(file_size / 8, 0);
        uint64_t used = 0;
        for (const auto& e : entries) {
            std::memcpy(bytes() + env_off + used, e.c_str(), e.size() + 1);
            used += e.size() + 1;
        }
        hdr().minor = 1;
        hdr().env_offset = env_off;
        hdr().env_capacity = capacity;
        hdr().env_bytes = published == SIZE_MAX ? used : published;
        hdr().file_size = file_size;
        return env_off;
    }

    void write(const std::string& path, size_t len = SIZE_MAX) const {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(words.data()), std::streamsize(std::min<size_t>(len, file_size)));
    }
};

inline bool has_warning(const RankFile& f, const std::string& needle) {
    for (const auto& w : f.warnings())
        if (w.find(needle) != std::string::npos) return true;
    return false;
}

// Reads everything a caller could ask for; the point is that none of it crashes.
inline size_t read_everything(RankFile& f) {
    size_t n = 0;
    const HeaderInfo h = f.header();
    const auto comms = f.comms();
    const RecordSet rs = f.records();
    for (const auto& r : rs.records) n += f.backtrace(r.ticket).size();
    n += comms.size() + rs.records.size() + h.host.size();
    for (const auto& c : comms) (void)to_rank_comm_state(h, c, f.path(), live_context(h.heartbeat_mono_ns));
    return n;
}

}  // namespace rank_file_fixtures
