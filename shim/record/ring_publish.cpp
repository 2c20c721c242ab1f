#include "shim/record/ring_publish.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace ncw {
namespace {

// Everything of a record but its stamp, in 8-byte words.
constexpr size_t kBodyWords = (sizeof(disk::OpRecord) - sizeof(uint64_t)) / 8;
static_assert(offsetof(disk::OpRecord, stamp) == 0 && sizeof(disk::OpRecord) % 8 == 0);

enum Copy : uint32_t {
    kPublished = 0,
    kOvertaken = 1,  // found before anything was stored: the stamp is no longer ours, or the next lap was handed out
    kFailed = 2,     // the stamp changed while we copied: our stores may be in someone else's record
};

// What one copy needs; the restartable sequence reads it at these offsets.
struct CopyArgs {
    std::atomic<uint64_t>* stamp;
    const std::atomic<uint64_t>* head;  // FileHeader::write_ticket
    uint64_t writing;                   // 2*ticket+1
    uint64_t done;                      // 2*ticket+2
    uint64_t last_head;                 // ticket + capacity: a larger head has handed out the slot's next lap
    void* dst;
    const void* src;
    uint64_t words;
    void* frames_dst;
    const void* frames_src;
    uint64_t frames_words;
};
static_assert(offsetof(CopyArgs, head) == 8 && offsetof(CopyArgs, writing) == 16 && offsetof(CopyArgs, done) == 24 &&
              offsetof(CopyArgs, last_head) == 32 && offsetof(CopyArgs, dst) == 40 && offsetof(CopyArgs, src) == 48 &&
              offsetof(CopyArgs, words) == 56 && offsetof(CopyArgs, frames_dst) == 64 &&
              offsetof(CopyArgs, frames_src) == 72 && offsetof(CopyArgs, frames_words) == 80);

// glibc (2.35+) registers every thread it starts for restartable sequences and says where each thread's area lies
// (__rseq_offset from the thread pointer; __rseq_size 0 when it did not register). Looked up by name, not linked, so
// that the shim still loads with an older C library. Set once when the library is loaded, before any record.
std::atomic<bool> g_rseq_on{false};
constexpr bool kRestartableEnabled = false;
ptrdiff_t g_rseq_offset = 0;  // before g_rseq_on

[[gnu::constructor]] void find_rseq() {
#if defined(__x86_64__) && defined(__GLIBC__)
    const auto* size = static_cast<const unsigned*>(dlsym(RTLD_DEFAULT, "__rseq_size"));
    const auto* offset = static_cast<const ptrdiff_t*>(dlsym(RTLD_DEFAULT, "__rseq_offset"));
    if (size && offset && *size >= 20) {  // 20: the kernel's original struct rseq
        g_rseq_offset = *offset;
        g_rseq_on.store(true, std::memory_order_release);
    }
#endif
}

Copy copy_plain(const CopyArgs& a) {
    if (a.stamp->load(std::memory_order_relaxed) != a.writing || a.head->load(std::memory_order_relaxed) > a.last_head)
        return kOvertaken;
    std::memcpy(a.dst, a.src, a.words * 8);
    if (a.frames_words) std::memcpy(a.frames_dst, a.frames_src, a.frames_words * 8);
    uint64_t expected = a.writing;
    return a.stamp->compare_exchange_strong(expected, a.done, std::memory_order_release, std::memory_order_relaxed)
               ? kPublished
               : kFailed;
}

#if defined(__x86_64__)
static_assert(kBodyWords == 15, "the restartable copy below moves 15 words");

// The check, the claim, the copy and the publication as one restartable sequence (the kernel's rseq): if the thread
// is preempted, migrated or signalled before the publishing cmpxchg (the sequence's last instruction), it resumes at
// the abort handler, which starts again from the check. So the claim can be a plain store: nothing runs between the
// check and the store but on this CPU. Another CPU's writer of the same slot would need the slot's next lap handed
// out while this CPU runs a few dozen instructions; if even that happens (a virtual CPU stopped by its host, which
// the guest kernel does not see), the publishing cmpxchg finds the stamp changed. The descriptor (__rseq_cs) and
// the handler behind glibc's x86 signature (RSEQ_SIG 0x53053053, __rseq_failure) follow the kernel's ABI and
// librseq's layout; `cs` is the thread's struct rseq::rseq_cs (offset 8), which the kernel clears when it aborts,
// hence the re-arming at 0, and which is cleared again on the way out.
Copy copy_restartable(const CopyArgs& a, uint64_t* cs) {
    uint32_t res;
    asm volatile(
        ".pushsection __rseq_cs, \"aw\"\n\t"
        ".balign 32\n\t"
        "3:\n\t"
        ".long 0, 0\n\t"
        ".quad 1f, (2f - 1f), 4f\n\t"
        ".popsection\n\t"
        ".pushsection __rseq_failure, \"ax\"\n\t"
        ".byte 0x0f, 0xb9, 0x3d\n\t"
        ".long 0x53053053\n\t"
        "4:\n\t"
        "jmp 0f\n\t"
        ".popsection\n\t"
        "0:\n\t"
        "leaq 3b(%%rip), %%rax\n\t"
        "movq %%rax, (%[cs])\n\t"
        "1:\n\t"
        "movq 0(%[a]), %%rdx\n\t"  // the stamp not past ours (an older lap's, or our own claim before a restart)?
        "movq 16(%[a]), %%rax\n\t"
        "cmpq %%rax, (%%rdx)\n\t"
        "ja 5f\n\t"
        "movq 8(%[a]), %%rsi\n\t"  // the slot's next lap not handed out?
        "movq (%%rsi), %%rsi\n\t"
        "cmpq 32(%[a]), %%rsi\n\t"
        "ja 5f\n\t"
        "movq %%rax, (%%rdx)\n\t"   // claimed: 2*ticket+1
        "movq 48(%[a]), %%rsi\n\t"  // the record, 15 words
        "movq 40(%[a]), %%rdi\n\t"
        ".irp w, 0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112\n\t"
        "movq \\w(%%rsi), %%rcx\n\t"
        "movq %%rcx, \\w(%%rdi)\n\t"
        ".endr\n\t"
        "movq 80(%[a]), %%rcx\n\t"  // its call stack, if any
        "testq %%rcx, %%rcx\n\t"
        "jz 7f\n\t"
        "movq 72(%[a]), %%rsi\n\t"
        "movq 64(%[a]), %%rdi\n\t"
        "rep movsq\n\t"
        "7:\n\t"
        "movq 24(%[a]), %%rcx\n\t"  // published: rax (2*ticket+1) -> 2*ticket+2
        "lock cmpxchgq %%rcx, (%%rdx)\n\t"
        "2:\n\t"
        "movl $0, %[res]\n\t"
        "je 6f\n\t"
        "movl $2, %[res]\n\t"
        "jmp 6f\n\t"
        "5:\n\t"
        "movl $1, %[res]\n\t"
        "6:\n\t"
        "movq $0, (%[cs])\n\t"  // disarmed: the descriptor may not outlive the library
        : [res] "=&r"(res)
        : [a] "r"(&a), [cs] "r"(cs)
        : "rax", "rcx", "rdx", "rsi", "rdi", "memory", "cc");
    return Copy(res);
}

// The calling thread's struct rseq::rseq_cs when glibc registered it with the kernel (its cpu_id is set), else null.
uint64_t* rseq_cs_of_this_thread() {
    // Off until the restartable sequence has been run on the GPU machine under torch: code of ours inside the host's
    // rseq registration must be proven there first. The CAS path below is the one in use.
    if (!kRestartableEnabled || !g_rseq_on.load(std::memory_order_acquire)) return nullptr;
    char* tp;  // the thread pointer
    asm("movq %%fs:0, %0" : "=r"(tp));
    char* area = tp + g_rseq_offset;
    int32_t cpu_id;
    std::memcpy(&cpu_id, area + 4, sizeof cpu_id);
    return cpu_id >= 0 ? reinterpret_cast<uint64_t*>(area + 8) : nullptr;
}
#else
Copy copy_restartable(const CopyArgs&, uint64_t*) { return kOvertaken; }  // never called: no sequence here
uint64_t* rseq_cs_of_this_thread() { return nullptr; }
#endif

// Claims the slot: its stamp only moves forward. False: a newer lap holds it or has been handed it.
bool claim(const CopyArgs& a) {
    if (a.head->load(std::memory_order_relaxed) > a.last_head) return false;
    uint64_t cur = a.stamp->load(std::memory_order_relaxed);
    do {
        if (cur >= a.writing) return false;
    } while (!a.stamp->compare_exchange_weak(cur, a.writing, std::memory_order_relaxed, std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_release);  // the claim before the record's stores
    return true;
}

// After a failed publication: whatever record the slot holds now may hold some of our stores.
void mark_unwritten(std::atomic<uint64_t>& stamp) {
    uint64_t cur = stamp.load(std::memory_order_relaxed);
    while (cur != 0 && !stamp.compare_exchange_weak(cur, 0, std::memory_order_release, std::memory_order_relaxed)) {
    }
}

}  // namespace

bool publish_record(const RankFileWriter& f, uint64_t ticket, const disk::OpRecord& staged, const uint64_t* frames,
                    uint32_t nframes) {
    const uint64_t idx = ticket & f.ring_mask;
    disk::OpRecord* rec = &f.ring[idx];
    const CopyArgs a{&rec->stamp,
                     &f.hdr->write_ticket,
                     2 * ticket + 1,
                     2 * ticket + 2,
                     ticket + uint64_t(f.ring_mask) + 1,
                     reinterpret_cast<unsigned char*>(rec) + sizeof(uint64_t),
                     reinterpret_cast<const unsigned char*>(&staged) + sizeof(uint64_t),
                     kBodyWords,
                     nframes ? f.frames + idx * f.bt_depth : nullptr,
                     frames,
                     nframes};
    uint64_t* const cs = rseq_cs_of_this_thread();
    // Tried again only after a failed publication: ours was overtaken (the check then fails) or another writer's
    // failure marked our slot unwritten while we copied (then our record is written again).
    for (int attempt = 0; attempt < 3; ++attempt) {
        const Copy c = cs ? copy_restartable(a, cs) : claim(a) ? copy_plain(a) : kOvertaken;
        if (c == kPublished) return true;
        if (c == kOvertaken) return false;
        mark_unwritten(*a.stamp);
    }
    return false;
}

bool ring_publish_restartable() noexcept { return g_rseq_on.load(std::memory_order_acquire); }

}  // namespace ncw
