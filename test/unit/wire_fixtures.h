// What the wire codec's tests share (test_wire*.cpp): sample messages and comparisons.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ncclwatch/format.h"
#include "read/wire.h"

namespace wire_fixtures {

using namespace ncw;
using namespace ncw::wire;

inline HeaderInfo sample_header() {
    HeaderInfo h;
    h.major = 1;
    h.minor = 1;
    h.header_size = 4096;
    h.comm_slot_size = 2048;
    h.max_comms = 64;
    h.record_size = 128;
    h.ring_capacity = 1 << 16;
    h.bt_depth = 8;
    h.comm_table_offset = 4096;
    h.ring_offset = 1 << 20;
    h.bt_offset = 1 << 24;
    h.file_size = 1ull << 30;
    h.actual_size = (1ull << 30) - 7;
    h.pid = 81234;
    h.global_rank = 317;
    h.local_rank = 5;
    h.world_size = 512;
    h.local_world_size = 8;
    h.host = "node39";
    h.job_id = "job-42";
    h.start_mono_ns = 123456789;
    h.start_real_ns = 1700000000000000000ull;
    h.boot_id_hash = 0xdeadbeefcafef00dull;
    h.nccl_version = 22809;
    h.cuda_driver_version = 12080;
    h.env = {"MASTER_ADDR=node0", "NCCL_DEBUG=INFO", "ncclwatch.lib=/usr/lib/libnccl.so.2"};
    h.heartbeat_mono_ns = 987654321;
    h.process_state = 1;
    h.num_comms = 2;
    h.write_ticket = 99999;
    h.dump_request = 3;
    h.dumps_written = 2;
    h.reports_written = 1;
    return h;
}

inline CommInfo sample_comm(uint32_t slot, size_t sigs) {
    CommInfo c;
    c.slot = slot;
    c.state = 2;
    c.stall_flags = 4;
    c.rank = 17;
    c.nranks = 512;
    c.cuda_dev = 5;
    c.blocking = 1;
    c.comm_id = 0x1234567890abcdefull + slot;
    c.parent_id = 0x42;
    c.split_color = -1;
    c.split_key = 9;
    c.comm_ptr = 0x7f0000001000ull;
    c.pci_bus_id = "0000:3b:00.0";
    c.gpu_uuid = "GPU-5d3f1a2b-0c4d-4e5f-8a9b-0c1d2e3f4a5b";
    c.name = "world";
    c.t_init_start_ns = 10;
    c.t_init_done_ns = 20;
    c.coll_issued = 9812;
    c.coll_returned = 9812;
    c.coll_reached = 9811;
    c.coll_completed = 9810;
    c.ops_issued = 9900;
    c.ops_completed = 9890;
    c.t_last_issue_ns = 30;
    c.t_last_progress_ns = 40;
    c.p2p_sends = 7;
    c.p2p_recvs = 8;
    c.async_error = -3;
    c.gpu_tracking = 1;
    c.stall_since_ns = 50;
    c.untracked_ops = 2;
    // 1.4: what the counts are worth, with proofs (the live collector judges from them as analyze does).
    c.gpu_source = uint32_t(disk::GpuSource::Events);
    c.progress_exact = 0;
    c.coll_unreached = 9812;
    c.coll_uncompleted = 9811;
    c.gpu_clock_uncertainty_ns = 1500;
    c.completion_gap_p99_ns = 2'000'000;
    for (size_t i = 0; i < sigs; ++i) {
        SigInfo s;
        s.seq = 1000 + i;
        s.count = 1ull << 33;
        s.t_issue_ns = 60 + i;
        s.op = 3;
        s.dtype = 7;
        s.flags = 0x81;
        s.redop = 2;
        s.root = -1;
        s.tid = 4242;
        s.stream = 0xabc;
        s.origin = uint8_t(i % 2);  // 1.10: calls and CUDA graph replays
        c.recent.push_back(s);
    }
    return c;
}

inline bool same(const SigInfo& a, const SigInfo& b) {
    return a.seq == b.seq && a.count == b.count && a.t_issue_ns == b.t_issue_ns && a.op == b.op && a.dtype == b.dtype &&
           a.flags == b.flags && a.redop == b.redop && a.root == b.root && a.tid == b.tid && a.stream == b.stream &&
           a.origin == b.origin;
}

inline void check_same(const CommInfo& a, const CommInfo& b) {
    CHECK(a.slot == b.slot);
    CHECK(a.state == b.state);
    CHECK(a.stall_flags == b.stall_flags);
    CHECK(a.rank == b.rank);
    CHECK(a.nranks == b.nranks);
    CHECK(a.cuda_dev == b.cuda_dev);
    CHECK(a.blocking == b.blocking);
    CHECK(a.comm_id == b.comm_id);
    CHECK(a.parent_id == b.parent_id);
    CHECK(a.split_color == b.split_color);
    CHECK(a.split_key == b.split_key);
    CHECK(a.comm_ptr == b.comm_ptr);
    CHECK(a.pci_bus_id == b.pci_bus_id);
    CHECK(a.gpu_uuid == b.gpu_uuid);
    CHECK(a.name == b.name);
    CHECK(a.t_init_start_ns == b.t_init_start_ns);
    CHECK(a.t_init_done_ns == b.t_init_done_ns);
    CHECK(a.coll_issued == b.coll_issued);
    CHECK(a.coll_returned == b.coll_returned);
    CHECK(a.coll_reached == b.coll_reached);
    CHECK(a.coll_completed == b.coll_completed);
    CHECK(a.ops_issued == b.ops_issued);
    CHECK(a.ops_completed == b.ops_completed);
    CHECK(a.t_last_issue_ns == b.t_last_issue_ns);
    CHECK(a.t_last_progress_ns == b.t_last_progress_ns);
    CHECK(a.p2p_sends == b.p2p_sends);
    CHECK(a.p2p_recvs == b.p2p_recvs);
    CHECK(a.async_error == b.async_error);
    CHECK(a.gpu_tracking == b.gpu_tracking);
    CHECK(a.stall_since_ns == b.stall_since_ns);
    CHECK(a.untracked_ops == b.untracked_ops);
    CHECK(a.gpu_source == b.gpu_source);
    CHECK(a.progress_exact == b.progress_exact);
    CHECK(a.coll_unreached == b.coll_unreached);
    CHECK(a.coll_uncompleted == b.coll_uncompleted);
    CHECK(a.gpu_clock_uncertainty_ns == b.gpu_clock_uncertainty_ns);
    CHECK(a.completion_gap_p99_ns == b.completion_gap_p99_ns);
    REQUIRE(a.recent.size() == b.recent.size());
    for (size_t i = 0; i < a.recent.size(); ++i) CHECK(same(a.recent[i], b.recent[i]));
    REQUIRE(a.gpu_spans.size() == b.gpu_spans.size());
    for (size_t i = 0; i < a.gpu_spans.size(); ++i) {
        CHECK(a.gpu_spans[i].seq == b.gpu_spans[i].seq);
        CHECK(a.gpu_spans[i].gpu_ns == b.gpu_spans[i].gpu_ns);
        CHECK(a.gpu_spans[i].t_end_ns == b.gpu_spans[i].t_end_ns);
    }
}

inline Hello sample_hello() {
    Hello m;
    m.token = "s3cret";
    m.header = sample_header();
    m.file = "/tmp/ncclwatch/job-42/node39.81234.ncw";
    return m;
}

inline Digest sample_digest() {
    Digest m;
    m.sent_mono_ns = 555;
    m.process_state = 1;
    m.comms = {sample_comm(0, 3), sample_comm(1, 0)};
    // 1.1: in-collective GPU times on the first.
    for (uint64_t s = 1000; s < 1003; ++s) m.comms[0].gpu_spans.push_back({s, 21'000'000 + s, 5'000'000'000 + s});
    return m;
}

// Splits one encoded frame into header + payload, checking the header.
inline FrameHeader split(const std::vector<uint8_t>& frame, std::vector<uint8_t>& payload) {
    FrameHeader h;
    std::string err;
    REQUIRE(decode_header(frame.data(), frame.size(), h, &err));
    REQUIRE(frame.size() == kHeaderBytes + h.length);
    payload.assign(frame.begin() + kHeaderBytes, frame.end());
    return h;
}

inline void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// The payload of a Digest with one comm block of `c`, carrying one GPU span.
inline std::vector<uint8_t> one_comm_payload(CommInfo c) {
    Digest d;
    c.gpu_spans = {{1, 2, 3}};
    d.comms = {c};
    std::vector<uint8_t> frame, payload;
    encode(d, frame);
    split(frame, payload);
    return payload;
}

// A Digest payload of one comm block as an older sender wrote it: its last `bytes` dropped, from the payload and from
// the block's length (the fields that minor appended at the block's end).
inline void drop_first_comm_tail(std::vector<uint8_t>& payload, size_t bytes) {
    payload.resize(payload.size() - bytes);
    const size_t block_at = 8 + 4 + 4;  // sent_mono_ns, process_state, comm count
    uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len |= uint32_t(payload[block_at + size_t(i)]) << (8 * i);
    put_u32(payload, block_at, len - uint32_t(bytes));
}

// Every strict prefix of `payload` fails to decode, with a message.
template <class Msg>
inline void every_truncation_fails(const std::vector<uint8_t>& payload) {
    for (size_t n = 0; n < payload.size(); ++n) {
        // A copy of exactly n bytes, so a read past the end shows up under ASan.
        std::vector<uint8_t> cut(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(n));
        Msg m;
        std::string err;
        INFO("prefix of " << n << " bytes");
        CHECK_FALSE(decode(cut.data(), cut.size(), m, &err));
        CHECK_FALSE(err.empty());
    }
}

}  // namespace wire_fixtures
