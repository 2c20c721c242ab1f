// Writes the seed corpora for the fuzz targets: valid frames of every type (test/fuzz/fuzz_wire.cpp) and a small,
// valid rank file with two communicators, records and backtraces (fuzz_rank_file.cpp); with HTTP_DIR, the requests a
// scraper sends and a few it should not (fuzz_http.cpp).
//   make_seeds WIRE_DIR RANK_FILE_DIR [HTTP_DIR]
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "ncclwatch/format.h"
#include "read/wire.h"

namespace {

using namespace ncw;

bool write(const std::string& path, const std::vector<uint8_t>& bytes, uint8_t prefix) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f) return false;
    fputc(prefix, f);
    fwrite(bytes.data(), 1, bytes.size(), f);
    return fclose(f) == 0;
}

CommInfo comm(uint64_t id, int rank, int nranks, uint64_t seq) {
    CommInfo c;
    c.state = uint32_t(disk::CommState::Active);
    c.rank = rank;
    c.nranks = nranks;
    c.comm_id = id;
    c.name = "world";
    c.pci_bus_id = "0000:17:00.0";
    c.coll_issued = seq;
    c.coll_reached = seq;
    c.coll_completed = seq - 1;
    c.t_last_issue_ns = 5'000'000'000ull;
    c.t_last_progress_ns = 4'000'000'000ull;
    for (uint64_t s = seq - 2; s <= seq; ++s) {
        SigInfo g;
        g.seq = s;
        g.count = 1 << 20;
        g.op = uint8_t(disk::OpType::AllReduce);
        g.dtype = 7;
        c.recent.push_back(g);
    }
    return c;
}

std::vector<uint8_t> rank_file() {
    const uint32_t cap = 256, max_comms = 2, depth = 4;  // the smallest ring a reader accepts
    const auto l = disk::compute_layout(cap, max_comms, depth);
    std::vector<uint64_t> words(l.file_size / 8, 0);
    auto* b = reinterpret_cast<unsigned char*>(words.data());
    auto* h = new (b) disk::FileHeader{};
    disk::init_header(*h, l);
    disk::seal_header(*h);
    h->pid = 4242;
    h->global_rank = 1;
    h->world_size = 2;
    std::strcpy(h->host, "node-a");
    std::strcpy(h->job_id, "job-seed");
    h->start_mono_ns = 1'000'000'000ull;
    h->heartbeat_mono_ns = 2'000'000'000ull;
    h->process_state = uint32_t(disk::ProcessState::Running);
    for (uint32_t i = 0; i < max_comms; ++i) {
        auto* s = new (b + l.comm_table_offset + uint64_t(i) * sizeof(disk::CommSlot)) disk::CommSlot{};
        s->state = uint32_t(disk::CommState::Active);
        s->rank = 1;
        s->nranks = 2;
        s->comm_id = 0x1000 + i;
        s->coll_issued = 3;
        s->coll_completed = 2;
    }
    h->num_comms = max_comms;
    const uint64_t tickets = 260;  // wraps the ring
    for (uint64_t t = 0; t < tickets; ++t) {
        auto* r = new (b + l.ring_offset + (t % cap) * sizeof(disk::OpRecord)) disk::OpRecord{};
        r->comm_id = 0x1000 + (t & 1);
        r->seq = t / 2 + 1;
        r->op = uint8_t(disk::OpType::AllReduce);
        r->count = 1024;
        r->t_issue_ns = 1'500'000'000ull + t;
        r->result = 0;
        r->comm_slot = uint16_t(t & 1);
        r->stamp = 2 * t + 2;
        auto* fr = reinterpret_cast<uint64_t*>(b + l.bt_offset + (t % cap) * depth * 8);
        for (uint32_t d = 0; d < depth; ++d) fr[d] = 0x400000 + t * 16 + d;
    }
    h->write_ticket = tickets;
    return std::vector<uint8_t>(b, b + l.file_size);
}

// fuzz_http's input: a cap byte (0: the collector's 8 KiB), a byte that cuts the rest into reads, the request.
bool http_seeds(const std::string& dir) {
    struct Seed {
        const char* name;
        uint8_t cap, cut;
        std::string text;
    };
    const Seed seeds[] = {
        {"prometheus", 0, 0,
         "GET /metrics HTTP/1.1\r\nHost: node0:9400\r\nUser-Agent: Prometheus/2.45.0\r\nAccept: "
         "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\nX-Prometheus-Scrape-Timeout-"
         "Seconds: 10\r\n\r\n"},
        {"curl_cut", 0, 5,
         "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"},
        {"query", 0, 1, "GET /metrics?name[]=up HTTP/1.0\r\n\r\n"},
        {"lf_only", 0, 2, "GET /metrics HTTP/1.0\n\n"},
        {"http09", 0, 0, "GET /metrics\r\n\r\n"},
        {"not_found", 0, 3, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
        {"post", 0, 0, "POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd"},
        {"partial", 0, 0, "GET /metr"},
        {"too_large", 4, 7, "GET /metrics HTTP/1.1\r\nX-Long: " + std::string(40, 'a') + "\r\n\r\n"},
        {"wire_on_http", 0, 0, std::string("NCWL\x01\x02\x00\x00\n\n", 10)},
    };
    bool ok = true;
    for (const auto& s : seeds) {
        std::vector<uint8_t> bytes{s.cut};
        bytes.insert(bytes.end(), s.text.begin(), s.text.end());
        ok = write(dir + "/" + s.name, bytes, s.cap) && ok;
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: make_seeds WIRE_DIR RANK_FILE_DIR [HTTP_DIR]\n");
        return 2;
    }
    const std::string wd = argv[1], rd = argv[2];
    wire::Hello hello;
    hello.token = "secret";
    hello.header.pid = 4242;
    hello.header.global_rank = 1;
    hello.header.world_size = 2;
    hello.header.host = "node-a";
    hello.header.job_id = "job-seed";
    hello.header.env = {"NCCL_DEBUG=INFO", "MASTER_ADDR=node0"};
    hello.file = "/tmp/ncclwatch/job-seed/rank1.ncw";
    wire::Digest digest;
    digest.sent_mono_ns = 5'000'000'000ull;
    digest.process_state = 1;
    digest.comms = {comm(0x1000, 1, 2, 7), comm(0x2000, 0, 1, 3)};

    bool ok = true;
    std::vector<uint8_t> f, all;
    auto put = [&](const char* name) {
        ok = write(wd + "/" + name, f, 0) && ok;
        all.insert(all.end(), f.begin(), f.end());
        f.clear();
    };
    wire::encode(hello, f);
    put("hello");
    wire::encode(digest, f);
    put("digest");
    // 1.4: a digest that carries the rank's Python stacks (faulthandler's text, the NCCL thread noted first).
    digest.py_stacks = wire::PyStacksBlock{8, 4'000'000'000ull, 1, 1,
                                           "# ncclwatch nccl-thread 0x7f0000001000 tid 4242\n"
                                           "Thread 0x00007f0000001000 (most recent call first):\n"
                                           "  File \"/job/train.py\", line 14 in slow_eval\n"
                                           "  File \"/job/train.py\", line 19 in <module>\n"};
    wire::encode(digest, f);
    put("digest_py_stacks");
    wire::encode(wire::KeepAlive{6'000'000'000ull}, f);
    put("keepalive");
    wire::encode_bye(f);
    put("bye");
    wire::encode_hello_ack(f);
    put("hello_ack");
    wire::encode(wire::Reject{"token refused"}, f);
    put("reject");
    wire::encode(wire::DumpRequest{7, "NOT_JOINED: rank 1"}, f);
    put("dump_request");
    // 1.7: a relay's frames: a rank's KeepAlive under channel 3, and that channel closing.
    {
        std::vector<uint8_t> inner;
        wire::encode(wire::KeepAlive{6'000'000'000ull}, inner);
        wire::encode_relay(3, inner.data(), inner.size(), f);
        put("relay");
        wire::encode_relay_close(3, f);
        put("relay_close");
    }
    ok = write(wd + "/stream", all, 3) && ok;  // every frame in one stream, cut into 4 reads

    const auto rf = rank_file();
    FILE* out = fopen((rd + "/seed.ncw").c_str(), "wb");
    ok = out && fwrite(rf.data(), 1, rf.size(), out) == rf.size() && fclose(out) == 0 && ok;
    if (argc == 4) ok = http_seeds(argv[3]) && ok;
    if (!ok) perror("make_seeds");
    return ok ? 0 : 1;
}
