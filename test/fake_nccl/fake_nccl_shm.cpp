#include "fake_nccl_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace ncw::fake {

namespace {

std::string errno_text(const char* what, const std::string& name) {
    return std::string(what) + "(" + name + "): " + std::strerror(errno);
}

// Waits for a concurrent creator: `ready` is polled with a short sleep (only the first ncclCommInit* of a job can
// race with the creator, so this is not on any hot path).
template <typename Ready>
bool wait_for(double timeout_sec, Ready ready) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_sec);
    while (!ready()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

}  // namespace

uint64_t hash_id(const ncclUniqueId& id) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : id.internal) {
        h ^= static_cast<uint8_t>(c);
        h *= 0x100000001b3ull;
    }
    return h;
}

std::string segment_name(const ncclUniqueId& id) {
    std::string name = "/fakenccl-";
    if (const char* tag = std::getenv("FAKE_NCCL_SHM_TAG"); tag != nullptr && *tag != '\0') {
        for (const char* p = tag; *p != '\0' && p - tag < 32; ++p) {
            char c = *p;
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
            name += ok ? c : '_';
        }
        name += '-';
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_id(id)));
    return name + hex;
}

Segment* open_segment(const std::string& name, int nranks, double timeout_sec, std::string& error) {
    constexpr size_t kBytes = sizeof(Segment);
    for (int attempt = 0; attempt < 100; ++attempt) {
        int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            // We are the creator: ftruncate zero-fills, so every counter starts at 0.
            if (ftruncate(fd, kBytes) != 0) {
                error = errno_text("ftruncate", name);
                close(fd);
                shm_unlink(name.c_str());
                return nullptr;
            }
            void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED) {
                error = errno_text("mmap", name);
                shm_unlink(name.c_str());
                return nullptr;
            }
            auto* seg = static_cast<Segment*>(p);
            seg->nranks = nranks;
            seg->magic.store(kSegmentMagic, std::memory_order_release);
            return seg;
        }
        if (errno != EEXIST) {
            error = errno_text("shm_open(create)", name);
            return nullptr;
        }
        fd = shm_open(name.c_str(), O_RDWR, 0);
        if (fd < 0) {
            if (errno == ENOENT) continue;  // the segment was unlinked between our two opens: try to create it again
            error = errno_text("shm_open", name);
            return nullptr;
        }
        // The creator may not have sized it yet: mapping a too-short file would SIGBUS on access.
        bool sized = wait_for(timeout_sec, [&] {
            struct stat st {};
            return fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= kBytes;
        });
        if (!sized) {
            error = "timed out waiting for the creator of " + name + " to size it";
            close(fd);
            return nullptr;
        }
        void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            error = errno_text("mmap", name);
            return nullptr;
        }
        auto* seg = static_cast<Segment*>(p);
        if (!wait_for(timeout_sec, [&] { return seg->magic.load(std::memory_order_acquire) == kSegmentMagic; })) {
            error = "timed out waiting for the creator of " + name + " to initialise it";
            munmap(p, kBytes);
            return nullptr;
        }
        if (seg->nranks != nranks) {
            error = "communicator size mismatch on " + name + ": segment has " + std::to_string(seg->nranks) +
                    " ranks, caller says " + std::to_string(nranks);
            munmap(p, kBytes);
            return nullptr;
        }
        return seg;
    }
    error = "could not open " + name + " (kept being unlinked)";
    return nullptr;
}

void unmap_segment(Segment* seg) {
    if (seg != nullptr) munmap(seg, sizeof(Segment));
}

void unlink_segment(const std::string& name) { shm_unlink(name.c_str()); }

}  // namespace ncw::fake
