// The live protocol's Python stacks block (1.4, read/wire.h PyStacksBlock): a block (u32 length) of seq, capture
// time, reason, status and the text (u32 length + bytes, at most kMaxDigestPyStacks), so a newer minor can append
// fields to it. The text is cut where it is made (py_stacks_block), at the end of a line: a frame is never split.
#include <algorithm>
#include <string_view>

#include "read/wire_io.h"

namespace ncw::wire {

PyStacksBlock py_stacks_block(const HeaderInfo& h) {
    PyStacksBlock b;
    b.seq = h.py_stacks_seq;
    b.mono_ns = h.py_stacks_mono_ns;
    b.reason = h.py_stacks_reason;
    b.status = h.py_stacks_status;
    std::string_view text = h.py_stacks_text;
    if (text.size() > kMaxDigestPyStacks) {
        // The shim writes the threads that issued NCCL calls first: what fits is what a report names.
        const size_t nl = text.rfind('\n', kMaxDigestPyStacks - 1);
        text = text.substr(0, nl == std::string_view::npos ? 0 : nl + 1);
    }
    b.text.assign(text);
    return b;
}

void put_py_stacks(Writer& w, const PyStacksBlock& in) {
    const size_t at = w.begin_block();
    w.u64(in.seq);
    w.u64(in.mono_ns);
    w.u32(in.reason);
    w.u32(in.status);
    w.str(in.text, kMaxDigestPyStacks);
    w.end_block(at);
}

void get_py_stacks(Reader& outer, PyStacksBlock& out) {
    Reader r = outer.block("python stacks");
    if (!outer.ok()) return;
    out.seq = r.u64("seq");
    out.mono_ns = r.u64("mono_ns");
    out.reason = r.u32("reason");
    out.status = r.u32("status");
    out.text = r.str("text", kMaxDigestPyStacks);
    outer.absorb(r);
}

}  // namespace ncw::wire
