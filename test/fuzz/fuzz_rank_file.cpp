// libFuzzer target: the rank-file reader (lib/read/rank_file.h) on arbitrary file contents: open + header, comm
// slots, records and backtraces. Truncated, corrupt or hostile files must give an error or partial data, never a
// crash or an out-of-bounds read.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "read/rank_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // An in-memory file, so no disk is touched; RankFile maps it through its /proc path.
    static const int fd = memfd_create("fuzz.ncw", 0);
    if (fd < 0) return 0;
    if (ftruncate(fd, 0) != 0) return 0;
    size_t done = 0;
    while (done < size) {
        const ssize_t w = pwrite(fd, data + done, size - done, off_t(done));
        if (w <= 0) return 0;
        done += size_t(w);
    }
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);

    ncw::RankFile f;
    if (!f.open(path)) return 0;
    const ncw::HeaderInfo h = f.header();
    const auto comms = f.comms();
    const ncw::RecordSet rs = f.records();
    size_t frames = 0;
    for (const auto& r : rs.records) frames += f.backtrace(r.ticket).size();
    f.backtrace(h.write_ticket);
    f.backtrace(~0ull);
    // Touch the results so nothing is optimised away.
    volatile size_t sink = comms.size() + rs.records.size() + frames + h.env.size();
    (void)sink;
    return 0;
}
