// The Python stacks of a rank file (format 1.5, include/ncclwatch/format.h): faulthandler's text parsed into threads
// and frames, the thread that issued NCCL calls, and the frame a report names (the innermost one in the user's code).
// Pure functions over the text: the reader parses, the reports word.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ncw::py {

struct Frame {
    std::string file;  // as faulthandler printed it (absolute, or "<frozen ...>", "<string>")
    int line = 0;      // 0: unknown ("???")
    std::string func;
};

struct Thread {
    uint64_t ident = 0;         // the pthread_t faulthandler prints ("Thread 0x...")
    bool current = false;       // "Current thread": the thread that captured (never ours: we pass no current one)
    std::vector<Frame> frames;  // innermost first (faulthandler: "most recent call first")
    bool truncated = false;     // faulthandler's "..." (more frames than it prints) or the region's end
};

// A thread that issued NCCL calls, as the shim noted it: its pthread_t and its kernel tid (the records' tid).
struct NcclThread {
    uint64_t ident = 0;
    uint32_t tid = 0;
};

struct Stacks {
    std::vector<Thread> threads;  // in the order printed (CPython: newest thread first, the main thread last)
    std::vector<NcclThread> nccl_threads;
    std::vector<std::string> notes;  // lines that are neither (faulthandler's messages, "<no Python frame>")
};

// Parses faulthandler's dump (and the shim's "# ncclwatch nccl-thread" lines). Never throws on odd text: what does
// not parse is kept as a note. May throw bad_alloc.
Stacks parse(std::string_view text);

// A frame of a library rather than the user's code: the standard library, site-packages / dist-packages (torch and
// the rest), frozen modules and "<...>" pseudo-files.
bool is_library_file(std::string_view file);

// The thread that matters for NCCL: the one whose kernel tid is `tid` (the rank's newest op, 0 = not known), else a
// thread the shim saw issue NCCL calls, else the last printed (CPython's main thread); one with Python frames before
// one without. nullptr when there are none.
const Thread* nccl_thread(const Stacks& s, uint32_t tid = 0);

// Where a thread is, in the user's code: the innermost frame outside the libraries (the innermost of all where every
// frame is a library's), the function it calls there (the frame inside it, "" when it is the innermost), and its
// caller.
struct Where {
    bool known = false;
    Frame at;
    std::string callee;
    bool has_caller = false;
    Frame caller;
};
Where where(const Thread& t);

// "grid.py:14" (the file's last component).
std::string location(const Frame& f);
// "slow_eval (grid.py:14)"
std::string frame_words(const Frame& f);
// "slow_eval (grid.py:14), called from <module> (grid.py:19)"
std::string where_words(const Where& w);
// "all_reduce at grid.py:20": what a waiting rank waits in (the callee where there is one)
std::string wait_words(const Where& w);

// One capture of a process's Python stacks, as a reader keeps it: the held one of format 1.8 (rank_state.h).
struct Capture {
    std::shared_ptr<const Stacks> stacks;  // nullptr: none (or not stacks: status says)
    uint32_t status = 0;                   // disk::PyStacksStatus
    uint32_t reason = 0;                   // disk::PyStacksReason
    uint64_t mono_ns = 0;                  // when, on the writer's clock
};

}  // namespace ncw::py
