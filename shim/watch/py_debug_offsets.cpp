// CPython 3.13 and 3.14's stacks from their debug offsets (see py_debug_offsets.h).
#include "shim/watch/py_debug_offsets.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ncw::pydbg {

// ---- SelfMemory ----

SelfMemory::~SelfMemory() {
    for (int& fd : pipe_) {
        if (fd >= 0) close(fd);
        fd = -1;
    }
}

bool SelfMemory::read(uint64_t addr, void* dst, size_t n) {
    if (n == 0) return true;
    if (addr == 0 || addr + n < addr) return false;
    if (!use_pipe_) {
        // Our pid each time: after a fork the child's own, never the parent's.
        iovec local{dst, n};
        iovec remote{reinterpret_cast<void*>(uintptr_t(addr)), n};
        const ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
        if (got == ssize_t(n)) return true;
        if (got >= 0 || errno == EFAULT || errno == ESRCH) return false;
        // ENOSYS, EPERM: a filter refuses the call; the pipe from here on.
        use_pipe_ = true;
    }
    return through_pipe(addr, dst, n);
}

bool SelfMemory::through_pipe(uint64_t addr, void* dst, size_t n) {
    if (pipe_[0] < 0 && pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    auto* out = static_cast<char*>(dst);
    auto drain = [&] {
        char sink[512];
        while (::read(pipe_[0], sink, sizeof sink) > 0) {
        }
    };
    while (n) {
        // PIPE_BUF bytes at most a write: whole or not at all, and the pipe (64 KiB) never fills.
        const size_t k = std::min<size_t>(n, 4096);
        const ssize_t w = write(pipe_[1], reinterpret_cast<const void*>(uintptr_t(addr)), k);
        if (w != ssize_t(k)) {
            if (w > 0) drain();
            return false;
        }
        size_t got = 0;
        while (got < k) {
            const ssize_t r = ::read(pipe_[0], out + got, k - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                drain();
                return false;
            }
            got += size_t(r);
        }
        out += k;
        addr += k;
        n -= k;
    }
    return true;
}

namespace {

// ---- the table ----

bool fail(char* why, size_t why_size, const char* fmt, unsigned long long a = 0, unsigned long long b = 0,
          unsigned long long c = 0) {
    if (why && why_size) snprintf(why, why_size, fmt, a, b, c);
    return false;
}

// An offset of a field of `width` bytes inside a structure of `size` bytes (a table that says otherwise is not one we
// follow: a frame or code object read whole is bounded by its size).
bool fits(uint64_t off, uint64_t size, uint64_t width = 8) { return size <= (1u << 24) && off + width <= size; }

template <class T>
bool fill(const T& d, Layout& l) {
    l.free_threaded = d.free_threaded != 0;
    l.interpreters_head = d.runtime_state.interpreters_head;
    l.interp_id = d.interpreter_state.id;
    l.interp_next = d.interpreter_state.next;
    l.interp_threads_head = d.interpreter_state.threads_head;
    l.tstate_next = d.thread_state.next;
    l.tstate_current_frame = d.thread_state.current_frame;
    l.tstate_thread_id = d.thread_state.thread_id;
    l.tstate_native_thread_id = d.thread_state.native_thread_id;
    l.frame_size = d.interpreter_frame.size;
    l.frame_previous = d.interpreter_frame.previous;
    l.frame_executable = d.interpreter_frame.executable;
    l.frame_instr_ptr = d.interpreter_frame.instr_ptr;
    l.frame_owner = d.interpreter_frame.owner;
    l.code_size = d.code_object.size;
    l.code_filename = d.code_object.filename;
    l.code_name = d.code_object.name;
    l.code_linetable = d.code_object.linetable;
    l.code_firstlineno = d.code_object.firstlineno;
    l.code_adaptive = d.code_object.co_code_adaptive;
    l.ob_type = d.pyobject.ob_type;
    l.var_ob_size = d.tuple_object.ob_size;
    l.bytes_ob_size = d.bytes_object.ob_size;
    l.bytes_ob_sval = d.bytes_object.ob_sval;
    l.unicode_state = d.unicode_object.state;
    l.unicode_length = d.unicode_object.length;
    l.unicode_ascii_size = d.unicode_object.asciiobject_size;
    const auto& i = d.interpreter_state;
    const auto& t = d.thread_state;
    const auto& f = d.interpreter_frame;
    const auto& c = d.code_object;
    const uint64_t usize = d.unicode_object.size;
    return d.runtime_state.size <= (1u << 20) && l.interpreters_head + 8 <= d.runtime_state.size &&
           fits(i.id, i.size) && fits(i.next, i.size) && fits(i.threads_head, i.size) && fits(t.next, t.size) &&
           fits(t.current_frame, t.size) && fits(t.thread_id, t.size) && fits(f.previous, f.size) &&
           fits(f.executable, f.size) && fits(f.instr_ptr, f.size) && fits(f.owner, f.size, 1) && f.size <= 1024 &&
           fits(c.filename, c.size) && fits(c.name, c.size) && fits(c.linetable, c.size) &&
           fits(c.firstlineno, c.size, 4) && c.co_code_adaptive <= c.size && c.size <= 4096 &&
           fits(d.pyobject.ob_type, c.size) && fits(d.tuple_object.ob_size, c.size) &&
           fits(d.bytes_object.ob_size, d.bytes_object.size) && d.bytes_object.ob_sval <= d.bytes_object.size &&
           fits(d.unicode_object.state, usize, 4) && fits(d.unicode_object.length, usize) &&
           fits(d.unicode_object.state, d.unicode_object.asciiobject_size, 4) &&
           fits(d.unicode_object.length, d.unicode_object.asciiobject_size) && d.unicode_object.asciiobject_size <= 256;
}

}  // namespace

bool read_layout(MemoryReader& mem, uint64_t runtime, Layout& out, char* why, size_t why_size) {
    out = Layout{};
    struct {
        char cookie[8];
        uint64_t version;
    } head{};
    if (!runtime || !mem.read(runtime, &head, sizeof head))
        return fail(why, why_size, "_PyRuntime at 0x%llx cannot be read", runtime);
    if (memcmp(head.cookie, "xdebugpy", 8) != 0)
        return fail(why, why_size, "no debug offsets at _PyRuntime (CPython before 3.13)");
    out.version = head.version;  // a table, known or not
    const unsigned major = unsigned(head.version >> 24) & 0xff, minor = unsigned(head.version >> 16) & 0xff;
    const unsigned micro = unsigned(head.version >> 8) & 0xff, level = unsigned(head.version >> 4) & 0xf;
    if (major != 3 || (minor != 13 && minor != 14))
        return fail(why, why_size, "CPython %llu.%llu's debug offsets version 0x%08llx not known (3.13 and 3.14 are)",
                    major, minor, head.version);
    // The tables of the alphas and betas changed from one to the next; from the release candidates on they hold.
    if (micro == 0 && level < 0xc)
        return fail(why, why_size, "CPython 3.%llu pre-release's debug offsets version 0x%08llx not known", minor,
                    head.version);
    out.minor = int(minor);
    bool ok = false;
    if (minor == 13) {
        DebugOffsets313 d{};
        ok = mem.read(runtime, &d, sizeof d) && fill(d, out);
    } else {
        DebugOffsets314 d{};
        ok = mem.read(runtime, &d, sizeof d) && fill(d, out);
    }
    if (!ok) {
        const unsigned long long v = out.version;
        out = Layout{};
        out.version = v;
        return fail(why, why_size, "CPython 3.%llu's debug offsets (version 0x%08llx) do not fit their structures",
                    minor, v);
    }
    return true;
}

namespace {

// ---- the walk ----

// The text, in blocks, so that the memfd sees one write a few lines.
class Out {
public:
    explicit Out(TextSink& s) : sink_(s) {}
    ~Out() { flush(); }
    void put(const char* s, size_t n) {
        while (n) {
            if (used_ == sizeof buf_) flush();
            const size_t k = std::min(n, sizeof buf_ - used_);
            memcpy(buf_ + used_, s, k);
            used_ += k;
            s += k;
            n -= k;
        }
    }
    void put(const char* s) { put(s, strlen(s)); }
    void putf(const char* fmt, unsigned long long v) {
        char b[96];
        const int n = snprintf(b, sizeof b, fmt, v);
        if (n > 0) put(b, std::min(size_t(n), sizeof b - 1));
    }
    void flush() {
        if (used_) sink_.put(buf_, used_);
        used_ = 0;
    }

private:
    TextSink& sink_;
    char buf_[4096];
    size_t used_ = 0;
};

// Where an object, a frame or a thread state may be: a user-space address, 8-aligned.
bool plausible(uint64_t p) { return p >= 4096 && p < (uint64_t(1) << 56) && (p & 7) == 0; }

class Walker {
public:
    Walker(MemoryReader& mem, const Layout& l, const Types& types, Out& out, WalkResult& r)
        : mem_(mem), l_(l), types_(types), out_(out), r_(r) {}

    bool u64(uint64_t addr, uint64_t& v) { return mem_.read(addr, &v, sizeof v); }

    // Follows the main interpreter's threads, newest first (the list's order).
    bool threads(uint64_t interp, char* why, size_t why_size) {
        uint64_t t = 0;
        if (!plausible(interp) || !u64(interp + l_.interp_threads_head, t))
            return fail(why, why_size, "the interpreter state at 0x%llx cannot be read", interp);
        if (!t) return fail(why, why_size, "the interpreter has no thread state");
        for (int n = 0; t; ++n) {
            if (n) out_.put("\n");
            if (n >= kMaxThreads) {
                out_.put("...\n");
                break;
            }
            uint64_t ident = 0;
            if (!plausible(t) || !u64(t + l_.tstate_thread_id, ident)) {
                // A thread state freed under us: the list ends here, said as faulthandler says a cut.
                out_.put("...\n");
                ++r_.cut_stacks;
                break;
            }
            out_.putf("Thread 0x%016llx (most recent call first):\n", ident);
            ++r_.threads;
            stack(t);
            if (!u64(t + l_.tstate_next, t)) {
                ++r_.cut_stacks;
                break;
            }
        }
        return true;
    }

private:
    bool skipped_owner(uint8_t owner) const {
        return l_.minor == 13 ? owner == kOwnedByCStack313
                              : owner == kOwnedByInterpreter314 || owner == kOwnedByCStack314;
    }

    void cut() {
        out_.put("  ...\n");
        ++r_.cut_stacks;
    }

    void stack(uint64_t tstate) {
        uint64_t frame = 0;
        if (!u64(tstate + l_.tstate_current_frame, frame)) return cut();
        if (!frame) {
            out_.put("  <no Python frame>\n");
            return;
        }
        // The frame's fixed part, read whole (the table's size for it is checked to be small).
        uint8_t f[1024];
        const size_t fsize = size_t(l_.frame_size);
        int printed = 0;
        for (int steps = 0; frame; ++steps) {
            if (printed >= kMaxFrames) {
                out_.put("  ...\n");  // faulthandler's bound: no cut of ours
                return;
            }
            if (steps >= 4 * kMaxFrames || !plausible(frame) || !mem_.read(frame, f, fsize)) return cut();
            uint64_t previous = 0, executable = 0, instr = 0;
            memcpy(&previous, f + l_.frame_previous, 8);
            memcpy(&executable, f + l_.frame_executable, 8);
            memcpy(&instr, f + l_.frame_instr_ptr, 8);
            const uint8_t owner = f[l_.frame_owner];
            // 3.14's f_executable is a _PyStackRef: its low bits are tags.
            if (l_.minor >= 14) executable &= ~uint64_t(3);
            if (!skipped_owner(owner)) {
                const int k = frame_line(executable, instr);
                if (k < 0) return cut();
                printed += k;
            }
            frame = previous;
        }
    }

    // One frame's line; 0: not a code object (a frame of no code of its own: skipped); -1: unreadable.
    int frame_line(uint64_t code, uint64_t instr) {
        uint8_t c[4096];
        const size_t csize = size_t(l_.code_size);
        if (!plausible(code) || !mem_.read(code, c, csize)) return -1;
        uint64_t type = 0, filename = 0, name = 0, linetable = 0, units = 0;
        int32_t firstlineno = 0;
        memcpy(&type, c + l_.ob_type, 8);
        if (types_.code && type != types_.code) return 0;
        memcpy(&filename, c + l_.code_filename, 8);
        memcpy(&name, c + l_.code_name, 8);
        memcpy(&linetable, c + l_.code_linetable, 8);
        memcpy(&firstlineno, c + l_.code_firstlineno, 4);
        memcpy(&units, c + l_.var_ob_size, 8);
        out_.put("  File ");
        if (string_readable(filename)) {
            out_.put("\"");
            string(filename);
            out_.put("\"");
        } else {
            out_.put("???");
        }
        out_.put(", line ");
        const int line = line_at(code, units, linetable, firstlineno, instr);
        if (line >= 0)
            out_.putf("%llu", (unsigned long long)line);
        else
            out_.put("???");
        out_.put(" in ");
        if (string_readable(name))
            string(name);
        else
            out_.put("???");
        out_.put("\n");
        ++r_.frames;
        return 1;
    }

    // The line of the unit instr_ptr points at, as PyUnstable_InterpreterFrame_GetLine: -1 where not known (an
    // instruction pointer outside the code's own bytes: 3.14's free-threaded thread-local copies among them).
    int line_at(uint64_t code, uint64_t units, uint64_t linetable, int firstlineno, uint64_t instr) {
        const uint64_t first = code + l_.code_adaptive;
        if (units > (uint64_t(1) << 24) || instr < first || instr >= first + 2 * units) return -1;
        uint64_t n = 0;
        uint8_t h[256];
        const size_t hsize = size_t(std::max(l_.bytes_ob_size, l_.ob_type) + 8);
        if (!plausible(linetable) || hsize > sizeof h || !mem_.read(linetable, h, hsize)) return -1;
        memcpy(&n, h + l_.bytes_ob_size, 8);
        if (n > (uint64_t(1) << 20)) return -1;
        // The table streamed in blocks from its bytes object's storage.
        const uint64_t at = linetable + l_.bytes_ob_sval;
        uint8_t block[256];
        uint64_t block_at = ~uint64_t(0);
        auto byte = [&](uint64_t i, uint8_t& b) {
            if (i < block_at || i >= block_at + sizeof block) {
                const uint64_t start = i & ~uint64_t(sizeof block - 1);
                if (!mem_.read(at + start, block, size_t(std::min<uint64_t>(sizeof block, n - start)))) return false;
                block_at = start;
            }
            b = block[i - block_at];
            return true;
        };
        return line_of(byte, n, firstlineno, instr - first);
    }

    bool string_readable(uint64_t s) {
        uint64_t type = 0;
        if (!plausible(s) || !u64(s + l_.ob_type, type)) return false;
        return !types_.unicode || type == types_.unicode;
    }

    // A str as _Py_DumpASCII writes it: printable ASCII as is, the rest escaped, 500 characters at most, then "...".
    void string(uint64_t s) {
        uint8_t h[256];
        const size_t hsize = size_t(l_.unicode_ascii_size);
        if (hsize < 8 || !mem_.read(s, h, hsize)) return;
        uint32_t state = 0;
        uint64_t length = 0;
        memcpy(&state, h + l_.unicode_state, 4);
        memcpy(&length, h + l_.unicode_length, 8);
        // The state's bit-fields: interned (2 bits; 3.14 free-threaded: a byte of its own), then kind, compact, ascii.
        const int shift = l_.free_threaded && l_.minor >= 14 ? 8 : 2;
        const unsigned kind = (state >> shift) & 7, compact = (state >> (shift + 3)) & 1,
                       ascii = (state >> (shift + 4)) & 1;
        if (!compact || (kind != 1 && kind != 2 && kind != 4) || length > (uint64_t(1) << 40)) return;
        // Compact: the characters follow the structure (PyASCIIObject; PyCompactUnicodeObject is 16 bytes more).
        const uint64_t data = s + hsize + (ascii ? 0 : 16);
        const bool truncated = length > uint64_t(kMaxStringChars);
        const size_t count = size_t(std::min<uint64_t>(length, kMaxStringChars));
        uint8_t chars[kMaxStringChars * 4];
        if (!mem_.read(data, chars, count * kind)) return;
        char esc[12];
        for (size_t i = 0; i < count; ++i) {
            uint32_t ch = 0;
            if (kind == 1) {
                ch = chars[i];
            } else if (kind == 2) {
                uint16_t v;
                memcpy(&v, chars + 2 * i, 2);
                ch = v;
            } else {
                memcpy(&ch, chars + 4 * i, 4);
            }
            if (ch >= ' ' && ch <= 126) {
                const char c = char(ch);
                out_.put(&c, 1);
            } else {
                const int n = ch <= 0xff     ? snprintf(esc, sizeof esc, "\\x%02x", ch)
                              : ch <= 0xffff ? snprintf(esc, sizeof esc, "\\u%04x", ch)
                                             : snprintf(esc, sizeof esc, "\\U%08x", ch);
                if (n > 0) out_.put(esc, size_t(n));
            }
        }
        if (truncated) out_.put("...");
    }

    MemoryReader& mem_;
    const Layout& l_;
    const Types& types_;
    Out& out_;
    WalkResult& r_;
};

}  // namespace

bool walk(MemoryReader& mem, const Layout& layout, uint64_t runtime, uint64_t interp, const Types& types,
          TextSink& sink, WalkResult& result, char* why, size_t why_size) {
    result = WalkResult{};
    if (layout.minor != 13 && layout.minor != 14) return fail(why, why_size, "no debug offsets read");
    if (!interp) {
        // The main interpreter: id 0, the first made, so the last of the list (newest first).
        uint64_t i = 0;
        if (!mem.read(runtime + layout.interpreters_head, &i, 8))
            return fail(why, why_size, "the runtime's interpreter list at 0x%llx cannot be read", runtime);
        for (int n = 0; i && n < 64; ++n) {
            int64_t id = -1;
            if (!plausible(i) || !mem.read(i + layout.interp_id, &id, 8))
                return fail(why, why_size, "an interpreter state at 0x%llx cannot be read", i);
            interp = i;
            if (id == 0) break;
            if (!mem.read(i + layout.interp_next, &i, 8))
                return fail(why, why_size, "an interpreter state at 0x%llx cannot be read", i);
        }
        if (!interp) return fail(why, why_size, "the runtime has no interpreter");
    }
    Out out(sink);
    Walker w(mem, layout, types, out, result);
    return w.threads(interp, why, why_size);
}

}  // namespace ncw::pydbg
