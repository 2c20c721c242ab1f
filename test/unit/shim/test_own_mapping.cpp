// The rank file's own mapping survives a cut file: the pages past the new end become memory of ours on the first
// access that faults, what was written there since is kept, and the offset of the cut is known.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shim/record/own_mapping.h"

namespace {

struct sigaction g_prev;

// What watch/process_end.cpp's handler does first for SIGBUS.
void on_bus(int sig, siginfo_t* info, void*) {
    if (ncw::own_mapping_rescue(info->si_addr)) return;
    sigaction(sig, &g_prev, nullptr);
    raise(sig);
}

}  // namespace

TEST_CASE("own mapping: a cut file's pages become memory of ours, kept across later faults") {
    char path[] = "/tmp/ncw_own_mapping_XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const size_t page = size_t(sysconf(_SC_PAGESIZE)), size = 16 * page;
    REQUIRE(ftruncate(fd, off_t(size)) == 0);
    auto* base = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(base != MAP_FAILED);
    std::memset(base, 0x11, size);
    ncw::own_mapping_set(base, size);
    CHECK(ncw::own_mapping_cut_at() == 0);
    CHECK_FALSE(ncw::own_mapping_rescue(base + size));  // not ours
    CHECK_FALSE(ncw::own_mapping_rescue(base - 1));

    struct sigaction sa {};
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGBUS, &sa, &g_prev) == 0);

    // Cut to 4 pages: a write to page 10 faults, pages 10..15 become ours; page 12 written then keeps its byte.
    REQUIRE(ftruncate(fd, off_t(4 * page)) == 0);
    base[10 * page] = 0x22;
    base[12 * page] = 0x33;
    CHECK(ncw::own_mapping_cut_at() == 10 * page);
    // A later fault lower down (page 5) replaces only pages 5..9: page 12's byte stays.
    base[5 * page + 7] = 0x44;
    CHECK(ncw::own_mapping_cut_at() == 5 * page);
    CHECK(base[12 * page] == 0x33);
    CHECK(base[10 * page] == 0x22);
    CHECK(base[5 * page + 7] == 0x44);
    CHECK(base[6 * page] == 0);     // what the cut took reads as zero
    CHECK(base[3 * page] == 0x11);  // the file's pages that remain are the file's
    CHECK(base[4 * page - 1] == 0x11);

    sigaction(SIGBUS, &g_prev, nullptr);
    munmap(base, size);
    close(fd);
    unlink(path);
}
