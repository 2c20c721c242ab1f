// Writes the rank files of a hung job, straight from the format (include/ncclwatch/format.h), for timing
// `ncclwatch-collector analyze` on big jobs without running one:
//   gen_rank_files DIR NRANKS [RING_CAPACITY] [RANKS_PER_HOST]
// Every rank has one world communicator and a full ring of AllReduces; every rank but one (NRANKS*5/8, or the last)
// waits in the last one; that rank never issued it (NOT_JOINED). Files are DIR/nodeH/rankR.ncw.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "ncclwatch/format.h"

namespace disk = ncw::disk;

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: gen_rank_files DIR NRANKS [RING_CAPACITY] [RANKS_PER_HOST]\n");
        return 2;
    }
    const std::string dir = argv[1];
    const int nranks = atoi(argv[2]);
    const uint32_t ring = argc > 3 ? uint32_t(atoi(argv[3])) : disk::kDefaultRingCapacity;
    const int per_host = argc > 4 ? atoi(argv[4]) : 8;
    if (nranks < 2 || !disk::is_pow2(ring) || per_host < 1) {
        fprintf(stderr, "gen_rank_files: NRANKS >= 2, RING_CAPACITY a power of two, RANKS_PER_HOST >= 1\n");
        return 2;
    }
    const int laggard = nranks * 5 / 8;
    const disk::Layout L = disk::compute_layout(ring, disk::kMaxComms, 0);
    const uint64_t seqs = ring;  // the last collective: every rank but the laggard issued it
    const uint64_t start_mono = 1000000000000ull, start_real = 1795000000000000000ull;
    const uint64_t step_ns = 1000000;                            // one collective per millisecond
    const uint64_t now = start_mono + (seqs + 30000) * step_ns;  // 30 s after the last issue

    std::vector<unsigned char> buf(L.file_size);
    mkdir(dir.c_str(), 0755);
    for (int r = 0; r < nranks; ++r) {
        std::fill(buf.begin(), buf.end(), 0);
        auto* h = new (buf.data()) disk::FileHeader{};
        disk::init_header(*h, L);
        disk::seal_header(*h);
        h->pid = 100000 + r;
        h->global_rank = r;
        h->local_rank = r % per_host;
        h->world_size = nranks;
        h->local_world_size = per_host;
        const int host = r / per_host;
        snprintf(h->host, sizeof h->host, "node%d", host);
        snprintf(h->job_id, sizeof h->job_id, "bench-%d", nranks);
        h->start_mono_ns = start_mono;
        h->start_real_ns = start_real;
        h->boot_id_hash = 0x1000 + uint64_t(host);
        h->nccl_version = 22809;
        h->heartbeat_mono_ns = now;
        h->process_state = uint32_t(disk::ProcessState::Running);
        h->num_comms = 1;
        const bool lag = r == laggard;
        const uint64_t issued = lag ? seqs - 1 : seqs;
        h->write_ticket = issued;

        auto* c = new (buf.data() + L.comm_table_offset) disk::CommSlot{};
        c->state = uint32_t(disk::CommState::Active);
        c->rank = r;
        c->nranks = nranks;
        c->cuda_dev = r % per_host;
        c->blocking = 1;
        c->comm_id = 0xc0ffee0000000001ull;
        snprintf(c->pci_bus_id, sizeof c->pci_bus_id, "0000:%02x:00.0", 0x10 + r % per_host);
        c->t_init_start_ns = start_mono;
        c->t_init_done_ns = start_mono + step_ns / 2;
        c->coll_issued = issued;
        c->coll_returned = issued;
        c->coll_reached = issued;
        c->coll_completed = seqs - 1;
        c->ops_issued = issued;
        c->ops_completed = seqs - 1;
        c->t_last_issue_ns = start_mono + issued * step_ns;
        c->t_last_progress_ns = start_mono + (seqs - 1) * step_ns + step_ns / 2;
        c->gpu_tracking = 1;
        c->stall_since_ns = lag ? 0 : start_mono + seqs * step_ns;

        auto* recs = reinterpret_cast<disk::OpRecord*>(buf.data() + L.ring_offset);
        for (uint64_t s = 1; s <= issued; ++s) {
            const uint64_t ticket = s - 1;
            const uint64_t t = start_mono + s * step_ns;
            if (s + disk::kRecentSigs > issued) {
                auto& sig = c->recent[s % disk::kRecentSigs];
                sig.count = 1 << 20;
                sig.t_issue_ns = t;
                sig.op = uint8_t(disk::OpType::AllReduce);
                sig.dtype = 7;
                sig.root = -1;
                sig.tid = 1;
                sig.stream = 0x7f00;
                sig.seq = s;
            }
            if (ticket + ring < issued) continue;  // overwritten
            auto* rec = new (&recs[ticket % ring]) disk::OpRecord{};
            rec->comm_id = c->comm_id;
            rec->seq = s;
            rec->op_index = s;
            rec->count = 1 << 20;
            rec->stream = 0x7f00;
            rec->t_issue_ns = t;
            rec->t_return_ns = t + 10000;
            rec->t_reached_ns = t + 20000;
            rec->t_done_ns = s < seqs ? t + step_ns / 2 : 0;
            rec->tid = 1;
            rec->op = uint8_t(disk::OpType::AllReduce);
            rec->dtype = 7;
            rec->peer_or_root = -1;
            rec->result = 0;
            rec->stamp = 2 * ticket + 2;
        }

        const std::string hdir = dir + "/node" + std::to_string(host);
        mkdir(hdir.c_str(), 0755);
        const std::string path = hdir + "/rank" + std::to_string(r) + ".ncw";
        const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, buf.data(), buf.size()) != ssize_t(buf.size()) || close(fd) != 0) {
            perror(path.c_str());
            return 1;
        }
    }
    printf("%d rank files of %u records in %s (laggard: rank %d)\n", nranks, ring, dir.c_str(), laggard);
    return 0;
}
