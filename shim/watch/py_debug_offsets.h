// CPython 3.13 and 3.14's Python stacks, read from the layout those versions publish for debuggers: the
// _Py_DebugOffsets table at the start of the exported _PyRuntime (cookie "xdebugpy", PY_VERSION_HEX, then the offsets
// of the fields a debugger follows). Neither exports faulthandler's _Py_DumpTracebackThreads, so the walker writes the
// text that routine would (lib/read/py_stacks parses it unchanged). It takes no GIL and calls nothing of CPython:
// every byte comes through a MemoryReader that cannot fault (the shim's reads its own memory with process_vm_readv),
// every pointer is checked, every loop is bounded; the threads run meanwhile, so a stale pointer ends a stack, never
// the process. Our own declarations of CPython's ABI below, from its headers of 3.13.5 and 3.14.10.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ncw::pydbg {

// Where the walker reads: false where [addr, addr + n) cannot be read whole. Never faults.
struct MemoryReader {
    virtual bool read(uint64_t addr, void* dst, size_t n) = 0;

protected:
    ~MemoryReader() = default;
};

// Where the text goes (the shim: its memfd).
struct TextSink {
    virtual void put(const char* s, size_t n) = 0;

protected:
    ~TextSink() = default;
};

// This process's memory: process_vm_readv on our own pid, where a bad address is EFAULT, not SIGSEGV; where a seccomp
// filter refuses that call, a pipe, whose write() of a bad address is EFAULT too. One user at a time.
class SelfMemory final : public MemoryReader {
public:
    SelfMemory() = default;
    SelfMemory(const SelfMemory&) = delete;
    SelfMemory& operator=(const SelfMemory&) = delete;
    ~SelfMemory();
    bool read(uint64_t addr, void* dst, size_t n) override;

private:
    bool through_pipe(uint64_t addr, void* dst, size_t n);
    bool use_pipe_ = false;
    int pipe_[2] = {-1, -1};
};

// _Py_DebugOffsets of 3.13 (Include/internal/pycore_runtime.h): every member a uint64_t offset into the structure it
// names ("size" is that structure's sizeof), in CPython's order.
struct DebugOffsets313 {
    char cookie[8];    // "xdebugpy"
    uint64_t version;  // PY_VERSION_HEX of the interpreter
    uint64_t free_threaded;
    struct {
        uint64_t size, finalizing, interpreters_head;
    } runtime_state;
    struct {
        uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil, gil_runtime_state,
            gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder;
    } interpreter_state;
    struct {
        uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
    } thread_state;
    struct {
        uint64_t size, previous, executable, instr_ptr, localsplus, owner;
    } interpreter_frame;
    struct {
        uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
            co_code_adaptive;
    } code_object;
    struct {
        uint64_t size, ob_type;
    } pyobject;
    struct {
        uint64_t size, tp_name, tp_repr, tp_flags;
    } type_object;
    struct {
        uint64_t size, ob_item, ob_size;
    } tuple_object;
    struct {
        uint64_t size, ob_item, ob_size;
    } list_object;
    struct {
        uint64_t size, ma_keys, ma_values;
    } dict_object;
    struct {
        uint64_t size, ob_fval;
    } float_object;
    struct {
        uint64_t size, lv_tag, ob_digit;
    } long_object;
    struct {
        uint64_t size, ob_size, ob_sval;
    } bytes_object;
    struct {
        uint64_t size, state, length, asciiobject_size;
    } unicode_object;
    struct {
        uint64_t size, collecting;
    } gc;
};

// 3.14's (Include/internal/pycore_debug_offsets.h): the interpreter gains threads_main and two generations, the frame
// its stack pointer and thread-local bytecode index, the code object co_tlbc; a set object comes in after the list;
// the generator, list node and remote-debugger blocks follow the end.
struct DebugOffsets314 {
    char cookie[8];
    uint64_t version;
    uint64_t free_threaded;
    struct {
        uint64_t size, finalizing, interpreters_head;
    } runtime_state;
    struct {
        uint64_t size, id, next, threads_head, threads_main, gc, imports_modules, sysdict, builtins, ceval_gil,
            gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder,
            code_object_generation, tlbc_generation;
    } interpreter_state;
    struct {
        uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
    } thread_state;
    struct {
        uint64_t size, previous, executable, instr_ptr, localsplus, owner, stackpointer, tlbc_index;
    } interpreter_frame;
    struct {
        uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
            co_code_adaptive, co_tlbc;
    } code_object;
    struct {
        uint64_t size, ob_type;
    } pyobject;
    struct {
        uint64_t size, tp_name, tp_repr, tp_flags;
    } type_object;
    struct {
        uint64_t size, ob_item, ob_size;
    } tuple_object;
    struct {
        uint64_t size, ob_item, ob_size;
    } list_object;
    struct {
        uint64_t size, used, table, mask;
    } set_object;
    struct {
        uint64_t size, ma_keys, ma_values;
    } dict_object;
    struct {
        uint64_t size, ob_fval;
    } float_object;
    struct {
        uint64_t size, lv_tag, ob_digit;
    } long_object;
    struct {
        uint64_t size, ob_size, ob_sval;
    } bytes_object;
    struct {
        uint64_t size, state, length, asciiobject_size;
    } unicode_object;
    struct {
        uint64_t size, collecting;
    } gc;
    struct {
        uint64_t size, gi_name, gi_iframe, gi_frame_state;
    } gen_object;
    struct {
        uint64_t next, prev;
    } llist_node;
    struct {
        uint64_t eval_breaker, remote_debugger_support, remote_debugging_enabled, debugger_pending_call,
            debugger_script_path, debugger_script_path_size;
    } debugger_support;
};

// _PyInterpreterFrame.owner: the frames that run no code of their own (the C stack's entry frame; 3.14's
// interpreter-owned one), which faulthandler skips. 3.14 put FRAME_OWNED_BY_INTERPRETER before CSTACK.
constexpr uint8_t kOwnedByCStack313 = 3;
constexpr uint8_t kOwnedByInterpreter314 = 3;
constexpr uint8_t kOwnedByCStack314 = 4;

// faulthandler's bounds (Python/traceback.c), so the text reads as its own.
constexpr int kMaxThreads = 100;
constexpr int kMaxFrames = 100;
constexpr int kMaxStringChars = 500;

// What the walker follows, for either version: resolved from the table, each offset checked to lie within the size
// the table gives for its structure.
struct Layout {
    int minor = 0;         // 13 or 14; 0: none followed
    uint64_t version = 0;  // the table's PY_VERSION_HEX, set where a table was found (known or not)
    bool free_threaded = false;
    uint64_t interpreters_head = 0;
    uint64_t interp_id = 0, interp_next = 0, interp_threads_head = 0;
    uint64_t tstate_next = 0, tstate_current_frame = 0, tstate_thread_id = 0, tstate_native_thread_id = 0;
    uint64_t frame_size = 0, frame_previous = 0, frame_executable = 0, frame_instr_ptr = 0, frame_owner = 0;
    uint64_t code_size = 0, code_filename = 0, code_name = 0, code_linetable = 0, code_firstlineno = 0,
             code_adaptive = 0;
    uint64_t ob_type = 0, var_ob_size = 0;  // PyObject.ob_type; PyVarObject.ob_size (the tuple's, the same for all)
    uint64_t bytes_ob_size = 0, bytes_ob_sval = 0;
    uint64_t unicode_state = 0, unicode_length = 0, unicode_ascii_size = 0;
};

// Reads and checks the table at `runtime` (the address of _PyRuntime). false: `why` says why not (no table, a
// version this walker does not know, offsets that do not fit their structures), and `out.version` is the table's
// version where there was one.
bool read_layout(MemoryReader& mem, uint64_t runtime, Layout& out, char* why, size_t why_size);

// The process's addresses the walker checks objects against (0: not checked): PyCode_Type and PyUnicode_Type, so that
// a stale pointer to something else is not printed as a frame.
struct Types {
    uint64_t code = 0;
    uint64_t unicode = 0;
};

struct WalkResult {
    int threads = 0;     // printed
    int frames = 0;      // printed, over all threads
    int cut_stacks = 0;  // stacks ended early at memory that could not be read or was not what it should be
};

// Writes every thread's stack of the interpreter at `interp` (0: the main one, id 0, found from the runtime's list) in
// faulthandler's text: "Thread 0x<pthread_t> (most recent call first):\n  File \"f.py\", line N in func\n", a blank
// line between threads, newest thread first, "  <no Python frame>" for a thread without one, "  ..." where a stack
// was cut (faulthandler's bound, or unreadable memory). No thread is "Current": the caller is none of them. false:
// nothing could be walked (`why` says why); the text may then hold a part.
bool walk(MemoryReader& mem, const Layout& layout, uint64_t runtime, uint64_t interp, const Types& types, TextSink& out,
          WalkResult& result, char* why, size_t why_size);

// The line of the code unit at `byte_offset` (instr_ptr minus the code's first unit, in bytes) from a code object's
// co_linetable (Objects/locations.md), starting at co_firstlineno: -1 where the table has none (faulthandler's "???").
// `read(i, byte)` gives byte i of the n-byte table; false ends it. A template so the walker streams the
// table from the process's memory and the test decodes bytes in hand.
template <class ReadByte>
int line_of(ReadByte&& read, uint64_t n, int firstlineno, uint64_t byte_offset) {
    // Each entry: a first byte 1CCCCLLL (code C, L+1 code units of 2 bytes), then bytes with the top bit clear.
    uint64_t pos = 0, end = 0;
    int line = firstlineno;
    uint8_t b = 0;
    auto varint = [&](uint64_t& at, uint64_t& v) {
        // 6 bits a byte, little end first; bit 6 says another follows.
        v = 0;
        for (int shift = 0; shift < 64; shift += 6) {
            uint8_t c = 0;
            if (at >= n || !read(at++, c)) return false;
            v |= uint64_t(c & 63) << shift;
            if (!(c & 64)) return true;
        }
        return false;
    };
    for (uint64_t entries = 0; pos < n && entries < n; ++entries) {
        if (!read(pos, b) || !(b & 0x80)) return -1;
        const int code = (b >> 3) & 15;
        const uint64_t start = end;
        end += (uint64_t(b & 7) + 1) * 2;
        uint64_t at = pos + 1;
        if (code == 13 || code == 14) {  // no columns / long form: a signed varint line delta
            uint64_t v = 0;
            if (!varint(at, v)) return -1;
            line += (v & 1) ? -int(v >> 1) : int(v >> 1);
        } else if (code >= 10 && code <= 12) {  // one-line forms: the delta is the code's
            line += code - 10;
        }  // 0-9: the short forms, same line; 15: no location
        if (byte_offset >= start && byte_offset < end) return code == 15 ? -1 : line;
        // The next entry: the next byte with its top bit set.
        for (pos = pos + 1; pos < n; ++pos) {
            uint8_t c = 0;
            if (!read(pos, c)) return -1;
            if (c & 0x80) break;
        }
    }
    return -1;
}

}  // namespace ncw::pydbg
