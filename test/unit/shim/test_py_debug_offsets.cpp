// CPython 3.13 and 3.14's stacks from their debug offsets (shim/watch/py_debug_offsets.h), walked over synthetic
// memory laid out from our declarations of _Py_DebugOffsets: the text faulthandler writes (and read/py_stacks parses),
// frames of no code skipped, stale pointers and endless chains cut with a reason, tables of unknown versions refused,
// and co_linetable decoded as CPython decodes it (real tables of 3.11, 3.13 and 3.14).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "read/py_stacks.h"
#include "shim/watch/py_debug_offsets.h"

namespace {

using namespace ncw::pydbg;

// A function (a loop, an if, a try, multi-line expressions) compiled by CPython 3.11.2 (Debian 12), 3.13.5 (built from
// its source) and 3.14.10 (Debian's): its co_linetable, and the line of every code unit as co_positions() gives it
// (-1: none).
// The function, at line 3 of its file:
//     def sample(xs):
//         total = 0
//         for x in xs:
//             if x > 2:
//                 total += (x *
//                           2)
//             else:
//                 try:
//                     total -= int(
//                         x)
//                 except ValueError:
//                     pass
//         return total
// CPython 3.11.2: 122 bytes, first line 3, codes [0, 1, 2, 3, 11, 12, 14, 15]
const uint8_t k311Table[] = {
    0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xd8, 0x0d, 0x0f, 0xf0, 0x00, 0x09, 0x05, 0x15, 0xf0, 0x00, 0x09,
    0x05, 0x15, 0x88, 0x01, 0xd8, 0x0b, 0x0c, 0x88, 0x71, 0x8a, 0x35, 0x88, 0x35, 0xd8, 0x0c, 0x11, 0x90, 0x61,
    0xd8, 0x16, 0x17, 0xf1, 0x03, 0x01, 0x17, 0x18, 0xf1, 0x00, 0x01, 0x0d, 0x19, 0x88, 0x45, 0x88, 0x45, 0xf0,
    0x06, 0x04, 0x0d, 0x15, 0xd8, 0x10, 0x15, 0x9d, 0x13, 0xd8, 0x14, 0x15, 0xf1, 0x03, 0x01, 0x1a, 0x17, 0xf4,
    0x00, 0x01, 0x1a, 0x17, 0xf1, 0x00, 0x01, 0x11, 0x17, 0x90, 0x05, 0x90, 0x05, 0xf8, 0xe5, 0x13, 0x1d, 0xf0,
    0x00, 0x01, 0x0d, 0x15, 0xf0, 0x00, 0x01, 0x0d, 0x15, 0xf0, 0x00, 0x01, 0x0d, 0x15, 0xd8, 0x10, 0x14, 0x90,
    0x04, 0xf0, 0x03, 0x01, 0x0d, 0x15, 0xf8, 0xf8, 0xf8, 0xe0, 0x0b, 0x10, 0x80, 0x4c};
const int k311Lines[] = {3,  4,  4,  5,  5,  5,  5,  6,  6,  6,  6,  6,  6,  7,  7,  8,  7,  7,  7,  7,
                         7,  7,  10, 11, 11, 11, 11, 11, 11, 11, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11,
                         11, 11, -1, 13, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 13, -1, -1, -1, 15, 15};
// CPython 3.13.5: 94 bytes, first line 3, codes [0, 1, 2, 3, 11, 14, 15]
const uint8_t k313Table[] = {
    0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xdb, 0x0d, 0x0f, 0x88, 0x01, 0xd8, 0x0b, 0x0c, 0x88, 0x71, 0x8b, 0x35,
    0xd8, 0x0c, 0x11, 0xd8, 0x16, 0x17, 0xf1, 0x03, 0x01, 0x17, 0x18, 0xf1, 0x00, 0x01, 0x0d, 0x19, 0x8a, 0x45, 0xf0,
    0x06, 0x04, 0x0d, 0x15, 0xd8, 0x10, 0x15, 0x9c, 0x13, 0xd8, 0x14, 0x15, 0xf3, 0x03, 0x01, 0x1a, 0x17, 0xf1, 0x00,
    0x01, 0x11, 0x17, 0x92, 0x05, 0xf1, 0x0d, 0x00, 0x0e, 0x10, 0xf0, 0x14, 0x00, 0x0c, 0x11, 0x80, 0x4c, 0xf8, 0xf4,
    0x05, 0x00, 0x14, 0x1e, 0xf3, 0x00, 0x01, 0x0d, 0x15, 0xda, 0x10, 0x14, 0xf0, 0x03, 0x01, 0x0d, 0x15, 0xfa};
const int k313Lines[] = {3,  4,  4,  5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  6,  7,  8,  7,  7,  7,  7, 7,
                         7,  7,  10, 11, 11, 11, 11, 11, 11, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 5, 5,
                         15, 15, -1, 13, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 13, -1, -1, -1};
// CPython 3.14.10: 94 bytes, first line 3, codes [0, 1, 2, 3, 11, 14, 15]
const uint8_t k314Table[] = {
    0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xdb, 0x0d, 0x0f, 0x88, 0x01, 0xd8, 0x0b, 0x0c, 0x88, 0x71, 0x8c, 0x35,
    0xd8, 0x0c, 0x11, 0xd8, 0x16, 0x17, 0xf5, 0x03, 0x01, 0x17, 0x18, 0xf5, 0x00, 0x01, 0x0d, 0x19, 0x8a, 0x45, 0xf0,
    0x06, 0x04, 0x0d, 0x15, 0xd8, 0x10, 0x15, 0x9c, 0x13, 0xd8, 0x14, 0x15, 0xf3, 0x03, 0x01, 0x1a, 0x17, 0xf5, 0x00,
    0x01, 0x11, 0x17, 0x92, 0x05, 0xf1, 0x0d, 0x00, 0x0e, 0x10, 0xf0, 0x14, 0x00, 0x0c, 0x11, 0x80, 0x4c, 0xf8, 0xf4,
    0x05, 0x00, 0x14, 0x1e, 0xf4, 0x00, 0x01, 0x0d, 0x15, 0xda, 0x10, 0x14, 0xf0, 0x03, 0x01, 0x0d, 0x15, 0xfa};
const int k314Lines[] = {3,  4,  4,  5,  5,  5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  7,  7,
                         7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  10, 11, 11, 11, 11, 11,
                         11, 12, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 5,  5,  15, 15,
                         -1, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 13, -1, -1, -1};

// Memory made of regions; a read outside them fails, as process_vm_readv's EFAULT.
struct FakeMemory final : MemoryReader {
    std::map<uint64_t, std::vector<uint8_t>> regions;
    int reads = 0;
    bool read(uint64_t addr, void* dst, size_t n) override {
        ++reads;
        auto it = regions.upper_bound(addr);
        if (it == regions.begin()) return false;
        --it;
        if (addr + n > it->first + it->second.size()) return false;
        memcpy(dst, it->second.data() + (addr - it->first), n);
        return true;
    }
};

struct StringSink final : TextSink {
    std::string text;
    void put(const char* s, size_t n) override { text.append(s, n); }
};

constexpr uint64_t kRuntime = 0x500000;
constexpr uint64_t kHeap = 0x10000000;
constexpr uint64_t kCodeType = 0x7000, kUnicodeType = 0x7100, kBytesType = 0x7200;
constexpr uint64_t kUnmapped = 0xdead0000;

// A process image: _PyRuntime's table of one version and a heap the objects are laid in, at the table's offsets.
struct Image {
    FakeMemory mem;
    int minor;
    // The offsets the table gives (3.14: as 3.14.10 publishes them; 3.13: other values, so that nothing is assumed).
    uint64_t interp_size, interp_id, interp_next, interp_threads;
    uint64_t ts_size, ts_next, ts_frame, ts_ident, ts_tid;
    uint64_t fr_size, fr_previous, fr_executable, fr_instr, fr_owner;
    uint64_t co_size, co_filename, co_name, co_linetable, co_firstlineno, co_adaptive;
    uint64_t ascii_size, u_state, u_length, var_size, b_size, b_sval;
    std::vector<uint8_t>& heap;
    uint64_t top = kHeap;

    explicit Image(int minor_version, uint64_t version = 0) : minor(minor_version), heap(mem.regions[kHeap]) {
        heap.resize(1 << 20);
        if (minor == 14) {
            interp_size = 225864, interp_id = 7280, interp_next = 7272, interp_threads = 7344;
            ts_size = 832, ts_next = 8, ts_frame = 72, ts_ident = 152, ts_tid = 160;
            fr_size = 88, fr_previous = 8, fr_executable = 0, fr_instr = 56, fr_owner = 74;
            co_size = 216, co_filename = 112, co_name = 120, co_linetable = 136, co_firstlineno = 68, co_adaptive = 208;
            ascii_size = 40, u_state = 32, u_length = 16, var_size = 16, b_size = 16, b_sval = 32;
        } else {
            interp_size = 4000, interp_id = 40, interp_next = 8, interp_threads = 104;
            ts_size = 300, ts_next = 16, ts_frame = 56, ts_ident = 136, ts_tid = 144;
            fr_size = 80, fr_previous = 16, fr_executable = 8, fr_instr = 48, fr_owner = 70;
            co_size = 200, co_filename = 104, co_name = 112, co_linetable = 128, co_firstlineno = 60, co_adaptive = 192;
            ascii_size = 40, u_state = 32, u_length = 16, var_size = 16, b_size = 16, b_sval = 32;
        }
        if (!version) version = minor == 14 ? 0x030e0af0 : 0x030d05f0;
        std::vector<uint8_t>& rt = mem.regions[kRuntime];
        rt.resize(8192);
        auto fill = [&](auto& d) {
            memcpy(d.cookie, "xdebugpy", 8);
            d.version = version;
            d.runtime_state = {8000, 16, 3000};
            d.interpreter_state.size = interp_size, d.interpreter_state.id = interp_id;
            d.interpreter_state.next = interp_next, d.interpreter_state.threads_head = interp_threads;
            d.thread_state.size = ts_size, d.thread_state.next = ts_next, d.thread_state.current_frame = ts_frame;
            d.thread_state.thread_id = ts_ident, d.thread_state.native_thread_id = ts_tid;
            d.interpreter_frame.size = fr_size, d.interpreter_frame.previous = fr_previous;
            d.interpreter_frame.executable = fr_executable, d.interpreter_frame.instr_ptr = fr_instr;
            d.interpreter_frame.owner = fr_owner;
            d.code_object.size = co_size, d.code_object.filename = co_filename, d.code_object.name = co_name;
            d.code_object.linetable = co_linetable, d.code_object.firstlineno = co_firstlineno;
            d.code_object.co_code_adaptive = co_adaptive;
            d.pyobject = {16, 8};
            d.tuple_object = {40, 32, var_size};
            d.bytes_object = {40, b_size, b_sval};
            d.unicode_object = {64, u_state, u_length, ascii_size};
        };
        if (minor == 14) {
            DebugOffsets314 d{};
            fill(d);
            memcpy(rt.data(), &d, sizeof d);
        } else {
            DebugOffsets313 d{};
            fill(d);
            memcpy(rt.data(), &d, sizeof d);
        }
    }

    uint64_t alloc(size_t n) {
        const uint64_t at = top;
        top += (n + 15) & ~size_t(15);
        REQUIRE(top - kHeap <= heap.size());
        return at;
    }
    template <class T>
    void put(uint64_t addr, T v) {
        memcpy(heap.data() + (addr - kHeap), &v, sizeof v);
    }

    // A compact str as CPython makes it: ASCII (kind 1, the characters after PyASCIIObject), else Latin-1 (kind 1) or
    // UCS-2 (kind 2), after PyCompactUnicodeObject.
    uint64_t str(const std::u16string& s) {
        char16_t max = 0;
        for (char16_t c : s) max = std::max(max, c);
        const bool ascii = max < 128;
        const uint32_t kind = max < 256 ? 1 : 2;
        const uint64_t data = ascii_size + (ascii ? 0 : 16);
        const uint64_t o = alloc(data + s.size() * kind + kind);
        put(o + 8, kUnicodeType);
        put(o + u_length, uint64_t(s.size()));
        put(o + u_state, uint32_t(kind << 2 | 1u << 5 | (ascii ? 1u : 0u) << 6));
        for (size_t i = 0; i < s.size(); ++i) {
            if (kind == 1)
                put(o + data + i, uint8_t(s[i]));
            else
                put(o + data + 2 * i, uint16_t(s[i]));
        }
        return o;
    }

    uint64_t bytes(const uint8_t* b, size_t n) {
        const uint64_t o = alloc(b_sval + n + 1);
        put(o + 8, kBytesType);
        put(o + b_size, uint64_t(n));
        memcpy(heap.data() + (o + b_sval - kHeap), b, n);
        return o;
    }

    // A code object whose table gives line `first + k` to code unit k (k < units), one no-columns entry a unit.
    uint64_t code(const std::u16string& file, const std::u16string& name, int first, int units = 8,
                  const uint8_t* table = nullptr, size_t table_size = 0) {
        std::vector<uint8_t> t;
        if (!table) {
            for (int k = 0; k < units; ++k) t.push_back(0x80 | 13 << 3), t.push_back(k ? 2 : 0);  // +1 a unit
            table = t.data(), table_size = t.size();
        }
        const uint64_t lt = bytes(table, table_size);
        const uint64_t f = str(file), n = str(name);
        const uint64_t o = alloc(co_size + 2 * size_t(units));
        put(o + 8, kCodeType);
        put(o + var_size, uint64_t(units));
        put(o + co_filename, f);
        put(o + co_name, n);
        put(o + co_linetable, lt);
        put(o + co_firstlineno, int32_t(first));
        return o;
    }

    // A frame at code unit `unit` of `code`, owned by `owner` (0: the thread's).
    uint64_t frame(uint64_t previous, uint64_t code, int unit, uint8_t owner = 0, uint64_t tag = 0) {
        const uint64_t o = alloc(fr_size);
        put(o + fr_previous, previous);
        put(o + fr_executable, code | tag);
        put(o + fr_instr, code ? code + co_adaptive + 2 * uint64_t(unit) : 0);
        put(o + fr_owner, owner);
        return o;
    }

    uint64_t thread(uint64_t next, uint64_t top_frame, uint64_t ident) {
        const uint64_t o = alloc(ts_size);
        put(o + ts_next, next);
        put(o + ts_frame, top_frame);
        put(o + ts_ident, ident);
        return o;
    }

    // The interpreters (newest first, as the runtime lists them); the main one is id 0.
    uint64_t interp(uint64_t next, int64_t id, uint64_t threads) {
        const uint64_t o = alloc(interp_size);
        put(o + interp_next, next);
        put(o + interp_id, id);
        put(o + interp_threads, threads);
        return o;
    }
    void interpreters(uint64_t head) { memcpy(mem.regions[kRuntime].data() + 3000, &head, 8); }

    struct Walked {
        bool ok = false;
        std::string text, why;
        WalkResult r;
    };
    Walked walk_all(uint64_t interp_hint = 0) {
        Layout l;
        char why[200] = {};
        Walked w;
        if (!read_layout(mem, kRuntime, l, why, sizeof why)) {
            w.why = why;
            return w;
        }
        StringSink s;
        w.ok = walk(mem, l, kRuntime, interp_hint, Types{kCodeType, kUnicodeType}, s, w.r, why, sizeof why);
        w.text = s.text;
        w.why = why;
        return w;
    }
};

// A job's rank as py_stall.py is: the main thread in slow_eval under train, called from <module>, with an entry frame
// of the C stack between (a call back into Python from C); a loader thread, newer, waiting; a thread with no frame.
std::string expected_rank_text() {
    return "Thread 0x00007f00000000c3 (most recent call first):\n"
           "  <no Python frame>\n"
           "\n"
           "Thread 0x00007f00000000b2 (most recent call first):\n"
           "  File \"/usr/lib/python3.1x/threading.py\", line 359 in wait\n"
           "  File \"/job/loader.py\", line 42 in loader\n"
           "\n"
           "Thread 0x00007f00000000a1 (most recent call first):\n"
           "  File \"/usr/lib/python3.1x/threading.py\", line 362 in wait\n"
           "  File \"/job/train.py\", line 118 in slow_eval\n"
           "  File \"/job/train.py\", line 131 in train\n"
           "  File \"/job/train.py\", line 140 in <module>\n";
}

void lay_out_rank(Image& im, uint8_t entry_owner, uint64_t tag) {
    const uint64_t wait = im.code(u"/usr/lib/python3.1x/threading.py", u"wait", 355);
    const uint64_t slow = im.code(u"/job/train.py", u"slow_eval", 114);
    const uint64_t train = im.code(u"/job/train.py", u"train", 128);
    const uint64_t mod = im.code(u"/job/train.py", u"<module>", 1, 200);
    const uint64_t loader = im.code(u"/job/loader.py", u"loader", 40);
    uint64_t f = im.frame(0, mod, 139, 0, tag);
    f = im.frame(f, im.code(u"<frozen runpy>", u"entry", 1), 0, entry_owner, tag);  // skipped
    f = im.frame(f, train, 3, 0, tag);
    f = im.frame(f, slow, 4, 0, tag);
    f = im.frame(f, wait, 7, 0, tag);
    const uint64_t main_thread = im.thread(0, f, 0x7f00000000a1);
    uint64_t g = im.frame(0, loader, 2, 0, tag);
    g = im.frame(g, wait, 4, 0, tag);
    const uint64_t loader_thread = im.thread(main_thread, g, 0x7f00000000b2);
    const uint64_t idle = im.thread(loader_thread, 0, 0x7f00000000c3);
    // The list is newest first: a subinterpreter (id 1, a thread of its own) before the main one (id 0).
    const uint64_t main_interp = im.interp(0, 0, idle);
    const uint64_t other = im.thread(0, im.frame(0, loader, 0, 0, tag), 0x7f00000000d4);
    im.interpreters(im.interp(main_interp, 1, other));
}

}  // namespace

TEST_CASE("py_debug_offsets: 3.13 and 3.14 stacks in faulthandler's text, as read/py_stacks parses them") {
    for (int minor : {13, 14}) {
        CAPTURE(minor);
        Image im(minor);
        // 3.13's entry frames are FRAME_OWNED_BY_CSTACK (3); 3.14's by the interpreter (3) or the C stack (4), and its
        // f_executable is a tagged _PyStackRef.
        lay_out_rank(im, minor == 13 ? kOwnedByCStack313 : kOwnedByCStack314, minor == 14 ? 1 : 0);
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.text == expected_rank_text());
        CHECK(w.r.threads == 3);
        CHECK(w.r.frames == 6);
        CHECK(w.r.cut_stacks == 0);

        const ncw::py::Stacks s = ncw::py::parse(w.text);
        REQUIRE(s.threads.size() == 3);
        CHECK(s.notes == std::vector<std::string>{"<no Python frame>"});  // as the parser keeps faulthandler's
        const ncw::py::Thread* t = ncw::py::nccl_thread(s);  // no NCCL thread noted: the main one, printed last
        REQUIRE(t);
        CHECK(t->ident == 0x7f00000000a1);
        CHECK(ncw::py::where_words(ncw::py::where(*t)) == "slow_eval (train.py:118), called from train (train.py:131)");
    }
}

TEST_CASE("py_debug_offsets: 3.14's interpreter-owned frames are skipped; a given interpreter is walked") {
    Image im(14);
    lay_out_rank(im, kOwnedByInterpreter314, 3);
    const auto w = im.walk_all();
    REQUIRE(w.ok);
    CHECK(w.text == expected_rank_text());
    // The interpreter PyInterpreterState_Main() names, given: the same threads.
    uint64_t main_interp = 0;
    im.mem.read(kRuntime + 3000, &main_interp, 8);
    im.mem.read(main_interp + im.interp_next, &main_interp, 8);
    CHECK(im.walk_all(main_interp).text == expected_rank_text());
}

TEST_CASE("py_debug_offsets: names escaped as _Py_DumpASCII escapes them; a non-code executable skipped") {
    Image im(13);
    const uint64_t c = im.code(u"/job/tr\u00e4in.py", u"m\u00e9thode", 10);
    const uint64_t cjk = im.code(u"/job/x.py", u"f\u4e2d", 20);
    uint64_t f = im.frame(0, c, 2);
    const uint64_t not_code = im.str(u"not a code object");
    f = im.frame(f, not_code, 0);  // a str where a code object should be: no frame of code, skipped
    f = im.frame(f, cjk, 1);
    im.interpreters(im.interp(0, 0, im.thread(0, f, 0x1234)));
    const auto w = im.walk_all();
    REQUIRE(w.ok);
    CHECK(w.text ==
          "Thread 0x0000000000001234 (most recent call first):\n"
          "  File \"/job/x.py\", line 21 in f\\u4e2d\n"
          "  File \"/job/tr\\xe4in.py\", line 12 in m\\xe9thode\n");
}

TEST_CASE("py_debug_offsets: a stale pointer ends the stack with a cut, never the walk") {
    SECTION("a frame's previous points nowhere") {
        Image im(14);
        const uint64_t c = im.code(u"/job/a.py", u"inner", 5);
        const uint64_t f = im.frame(im.frame(kUnmapped, c, 1), c, 2);
        im.interpreters(im.interp(0, 0, im.thread(0, f, 0xa)));
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.text ==
              "Thread 0x000000000000000a (most recent call first):\n"
              "  File \"/job/a.py\", line 7 in inner\n"
              "  File \"/job/a.py\", line 6 in inner\n"
              "  ...\n");
        CHECK(w.r.cut_stacks == 1);
        CHECK(ncw::py::parse(w.text).threads.at(0).truncated);
    }
    SECTION("a code object that cannot be read, a name that is not a str, an instruction pointer outside the code") {
        Image im(13);
        const uint64_t c = im.code(u"/job/a.py", u"inner", 5);
        im.put(c + im.co_name, uint64_t(kUnmapped));
        const uint64_t f1 = im.frame(0, c, 1);
        im.put(f1 + im.fr_instr, uint64_t(kHeap + 8));   // before the code's first unit: line unknown
        const uint64_t f2 = im.frame(f1, kUnmapped, 0);  // executable unreadable: the stack ends here
        const uint64_t other = im.thread(0, f1, 0xb);
        im.interpreters(im.interp(0, 0, im.thread(other, f2, 0xa)));
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.text ==
              "Thread 0x000000000000000a (most recent call first):\n"
              "  ...\n"
              "\n"
              "Thread 0x000000000000000b (most recent call first):\n"
              "  File \"/job/a.py\", line ??? in ???\n");
        CHECK(w.r.cut_stacks == 1);
    }
    SECTION("the thread list's next points nowhere") {
        Image im(14);
        const uint64_t c = im.code(u"/job/a.py", u"f", 5);
        im.interpreters(im.interp(0, 0, im.thread(kUnmapped, im.frame(0, c, 0), 0xa)));
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.text ==
              "Thread 0x000000000000000a (most recent call first):\n"
              "  File \"/job/a.py\", line 5 in f\n"
              "\n"
              "...\n");
        CHECK(w.r.cut_stacks == 1);
    }
    SECTION("the interpreter cannot be read: no text, a reason") {
        Image im(14);
        im.interpreters(kUnmapped);
        const auto w = im.walk_all();
        CHECK_FALSE(w.ok);
        CHECK(w.why == "an interpreter state at 0xdead0000 cannot be read");
        CHECK(w.text.empty());
    }
    SECTION("no interpreter, no thread") {
        Image im(13);
        CHECK(im.walk_all().why == "the runtime has no interpreter");
        im.interpreters(im.interp(0, 0, 0));
        CHECK(im.walk_all().why == "the interpreter has no thread state");
    }
}

TEST_CASE("py_debug_offsets: every chain is bounded (faulthandler's 100 frames and threads; cycles)") {
    SECTION("a frame that is its own caller: 100 frames, then a cut") {
        Image im(14);
        const uint64_t c = im.code(u"/job/loop.py", u"again", 1);
        const uint64_t f = im.frame(0, c, 0);
        im.put(f + im.fr_previous, f);
        im.interpreters(im.interp(0, 0, im.thread(0, f, 0xa)));
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.r.frames == kMaxFrames);
        CHECK(w.text.substr(w.text.size() - 6) == "  ...\n");
        const auto s = ncw::py::parse(w.text);
        CHECK(s.threads.at(0).frames.size() == size_t(kMaxFrames));
        CHECK(s.threads.at(0).truncated);
    }
    SECTION("a cycle of frames of no code: cut, not looped") {
        Image im(13);
        const uint64_t c = im.code(u"/job/loop.py", u"entry", 1);
        const uint64_t f = im.frame(0, c, 0, kOwnedByCStack313);
        im.put(f + im.fr_previous, f);
        im.interpreters(im.interp(0, 0, im.thread(0, f, 0xa)));
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.text == "Thread 0x000000000000000a (most recent call first):\n  ...\n");
        CHECK(w.r.cut_stacks == 1);
        CHECK(im.mem.reads < 2000);
    }
    SECTION("a thread that is its own next: 100 threads, then faulthandler's ...") {
        Image im(14);
        const uint64_t t = im.thread(0, 0, 0xa);
        im.put(t + im.ts_next, t);
        im.interpreters(im.interp(0, 0, t));
        const auto w = im.walk_all();
        REQUIRE(w.ok);
        CHECK(w.r.threads == kMaxThreads);
        CHECK(w.text.substr(w.text.size() - 5) == "\n...\n");
    }
    SECTION("an interpreter list that never reaches id 0: the last of 64 is taken") {
        Image im(14);
        const uint64_t i = im.interp(0, 7, im.thread(0, 0, 0xa));
        im.put(i + im.interp_next, i);
        im.interpreters(i);
        CHECK(im.walk_all().ok);
    }
}

TEST_CASE("py_debug_offsets: tables of other versions, or not tables, are refused with their reason") {
    auto why = [](Image& im) {
        Layout l;
        char w[200] = {};
        CHECK_FALSE(read_layout(im.mem, kRuntime, l, w, sizeof w));
        CHECK(l.minor == 0);
        return std::string(w);
    };
    SECTION("no cookie: a CPython before 3.13") {
        Image im(13);
        memcpy(im.mem.regions[kRuntime].data(), "notdebug", 8);
        CHECK(why(im) == "no debug offsets at _PyRuntime (CPython before 3.13)");
    }
    SECTION("3.15, 3.12, 4.0") {
        Image a(14, 0x030f00a2), b(13, 0x030c05f0), c(14, 0x040000f0);
        CHECK(why(a) == "CPython 3.15's debug offsets version 0x030f00a2 not known (3.13 and 3.14 are)");
        CHECK(why(b) == "CPython 3.12's debug offsets version 0x030c05f0 not known (3.13 and 3.14 are)");
        CHECK(why(c) == "CPython 4.0's debug offsets version 0x040000f0 not known (3.13 and 3.14 are)");
        Layout l;
        char w[200];
        read_layout(a.mem, kRuntime, l, w, sizeof w);
        CHECK(l.version == 0x030f00a2);  // the caller says which version it met
    }
    SECTION("an alpha or beta of 3.13 or 3.14; their release candidates and releases are known") {
        Image a(14, 0x030e00b3), rc(14, 0x030e00c1), patch(13, 0x030d0cf0);
        CHECK(why(a) == "CPython 3.14 pre-release's debug offsets version 0x030e00b3 not known");
        Layout l;
        char w[200];
        CHECK(read_layout(rc.mem, kRuntime, l, w, sizeof w));
        CHECK(l.minor == 14);
        CHECK(read_layout(patch.mem, kRuntime, l, w, sizeof w));
        CHECK(l.minor == 13);
    }
    SECTION("offsets outside their structures") {
        Image im(14);
        DebugOffsets314 d;
        memcpy(&d, im.mem.regions[kRuntime].data(), sizeof d);
        d.interpreter_frame.owner = d.interpreter_frame.size;
        memcpy(im.mem.regions[kRuntime].data(), &d, sizeof d);
        CHECK(why(im) == "CPython 3.14's debug offsets (version 0x030e0af0) do not fit their structures");
    }
    SECTION("_PyRuntime unreadable") {
        Image im(13);
        im.mem.regions.erase(kRuntime);
        CHECK(why(im) == "_PyRuntime at 0x500000 cannot be read");
    }
}

namespace {

int line_in(const uint8_t* t, size_t n, int first, uint64_t byte_offset) {
    return line_of([&](uint64_t i, uint8_t& b) { return i < n ? (b = t[i], true) : false; }, n, first, byte_offset);
}

template <size_t N, size_t M>
void check_every_unit(const uint8_t (&table)[N], const int (&lines)[M], int first) {
    for (size_t unit = 0; unit < M; ++unit) {
        CAPTURE(unit);
        CHECK(line_in(table, N, first, 2 * unit) == lines[unit]);
        CHECK(line_in(table, N, first, 2 * unit + 1) == lines[unit]);
    }
    CHECK(line_in(table, N, first, 2 * M) == -1);  // past the table
}

}  // namespace

TEST_CASE("py_debug_offsets: co_linetable decoded as CPython decodes it (real tables)") {
    check_every_unit(k311Table, k311Lines, 3);
    check_every_unit(k313Table, k313Lines, 3);
    check_every_unit(k314Table, k314Lines, 3);
}

TEST_CASE("py_debug_offsets: co_linetable's forms, constructed per Objects/locations.md") {
    const uint8_t t[] = {
        0x80 | 0 << 3 | 1,  0x00,                    // short form 0, 2 units: line 50 (the first)
        0x80 | 11 << 3 | 0, 0x01, 0x02,              // one-line form, +1: line 51, 1 unit
        0x80 | 12 << 3 | 2, 0x01, 0x02,              // +2: line 53, 3 units
        0x80 | 13 << 3 | 0, 0x47, 0x01,              // no columns, svarint 0x47 | 1 << 6 = 71 (-35): line 18
        0x80 | 14 << 3 | 1, 0x08, 0x00, 0x01, 0x02,  // long form, +4: line 22, 2 units
        0x80 | 15 << 3 | 0,                          // no location: none, 1 unit (the line stays 22)
        0x80 | 10 << 3 | 0, 0x00, 0x00,              // +0: line 22
    };
    const int want[] = {50, 50, 51, 53, 53, 53, 18, 22, 22, -1, 22};
    for (size_t unit = 0; unit < std::size(want); ++unit) {
        CAPTURE(unit);
        CHECK(line_in(t, sizeof t, 50, 2 * unit) == want[unit]);
    }
    // A table cut in its varint, or not starting at an entry: no line, no overrun.
    CHECK(line_in(t, 10, 50, 2 * 6) == -1);
    CHECK(line_in(t + 1, sizeof t - 1, 50, 0) == -1);
}

TEST_CASE("py_debug_offsets: SelfMemory reads this process and refuses what is not mapped") {
    SelfMemory m;
    const uint64_t v = 0x1122334455667788ull;
    uint64_t got = 0;
    CHECK(m.read(uint64_t(uintptr_t(&v)), &got, 8));
    CHECK(got == v);
    CHECK_FALSE(m.read(8, &got, 8));
    CHECK_FALSE(m.read(kUnmapped, &got, 8));
    std::vector<char> big(100000, 'x');
    std::vector<char> copy(big.size());
    CHECK(m.read(uint64_t(uintptr_t(big.data())), copy.data(), copy.size()));
    CHECK(copy == big);
}
