// The live protocol's nested records (read/wire_io.h), generated from the lists of include/ncclwatch/format_fields.h:
// a HeaderInfo in a Hello, a CommInfo per communicator in a Digest, a SigInfo per signature (and, 1.1, the comm's
// newest in-collective GPU times after its signatures). Each is a block (u32
// length, then the fields in list order), so a newer minor appends fields and an older decoder skips them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ncclwatch/format_fields.h"
#include "read/redact.h"
#include "read/wire_io.h"

// X(TYPE, NAME, ...) -> w.TYPE(in.NAME) / out.NAME = r.TYPE("NAME"); `w`, `r`, `in`, `out` in scope.
#define NCW_PUT_FIELD(type, name, ...) w.type(in.name);
#define NCW_GET_FIELD(type, name, ...) out.name = r.type(#name);

namespace ncw::wire {

void put_header(Writer& w, const HeaderInfo& in, size_t env_budget, uint32_t hello_flags) {
    const size_t at = w.begin_block();
    NCW_HEADER_LAYOUT_FIELDS(NCW_PUT_FIELD)
    w.u64(in.actual_size);
    NCW_HEADER_WRITER_FIELDS(NCW_PUT_FIELD)
    NCW_HEADER_LIVE_FIELDS(NCW_PUT_FIELD)
    // The environment last: it is the one part that can be big, so it is cut to what fits the payload limit.
    size_t n = 0, bytes = 0;
    while (n < in.env.size() && n < kMaxEnv && bytes + encoded_size(in.env[n]) <= env_budget)
        bytes += encoded_size(in.env[n++]);
    w.u32(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) w.str(in.env[i]);
    // Protocol 1.6: the format's tail fields (the timeout and poll period it runs with), where a 1.5 decoder stops.
    NCW_HEADER_TAIL_FIELDS(NCW_PUT_FIELD)
    // Protocol 1.15: the Hello's flags (kHelloResumed), inside the block so that a cut payload is still refused.
    w.u32(hello_flags);
    w.end_block(at);
}

void put_live(Writer& w, const HeaderInfo& in) {
    const size_t at = w.begin_block();
    NCW_HEADER_LIVE_FIELDS(NCW_PUT_FIELD)
    // Protocol 1.9: the last words (an uncaught exception) and the teardown in progress, where an older decoder stops.
    NCW_HEADER_LAST_WORDS_FIELDS(NCW_PUT_FIELD)
    NCW_HEADER_TEARDOWN_FIELDS(NCW_PUT_FIELD)
    // Protocol 1.14: who ended the process and who aborted a communicator first.
    NCW_HEADER_END_CAUSE_FIELDS(NCW_PUT_FIELD)
    // Protocol 1.15: the last termination signal the program's own handler took.
    NCW_HEADER_ABSORBED_FIELDS(NCW_PUT_FIELD)
    w.end_block(at);
}

void get_live(Reader& outer, HeaderInfo& out) {
    Reader r = outer.block("live header");
    if (!outer.ok()) return;
    NCW_HEADER_LIVE_FIELDS(NCW_GET_FIELD)
    if (!r.at_end()) {  // protocol 1.9
        NCW_HEADER_LAST_WORDS_FIELDS(NCW_GET_FIELD)
        out.last_words = redact::value(out.last_words);  // a sender that did not redact them
        NCW_HEADER_TEARDOWN_FIELDS(NCW_GET_FIELD)
        if (!r.at_end()) {  // protocol 1.14
            NCW_HEADER_END_CAUSE_FIELDS(NCW_GET_FIELD)
            if (!r.at_end()) {  // protocol 1.15
                NCW_HEADER_ABSORBED_FIELDS(NCW_GET_FIELD)
            }
        }
    }
    outer.absorb(r);
}

void put_sig(Writer& w, const SigInfo& in) {
    const size_t at = w.begin_block();
    NCW_SIG_FIELDS(NCW_PUT_FIELD)
    w.end_block(at);
}

void put_comm(Writer& w, const CommInfo& in, bool with_earlier) {
    const size_t at = w.begin_block();
    w.u32(in.slot);
    NCW_COMM_FIELDS_1_5(NCW_PUT_FIELD)
    // The most recent signatures (recent is ordered by seq).
    const size_t n = std::min<size_t>(in.recent.size(), kMaxDigestSigs);
    w.u32(static_cast<uint32_t>(n));
    for (size_t i = in.recent.size() - n; i < in.recent.size(); ++i) put_sig(w, in.recent[i]);
    // 1.1: the most recent in-collective GPU times (gpu_spans is ordered by seq), each a block of its own.
    const size_t m = std::min<size_t>(in.gpu_spans.size(), kMaxDigestSpans);
    w.u32(static_cast<uint32_t>(m));
    for (size_t i = in.gpu_spans.size() - m; i < in.gpu_spans.size(); ++i) {
        const size_t b = w.begin_block();
        w.u64(in.gpu_spans[i].seq);
        w.u64(in.gpu_spans[i].gpu_ns);
        w.u64(in.gpu_spans[i].t_end_ns);
        w.end_block(b);
    }
    // Protocol 1.5: the comm fields of format 1.6 on, where a 1.4 decoder stops.
    NCW_COMM_FIELDS_1_6(NCW_PUT_FIELD)
    // Protocol 1.12: the signatures before the newest kMaxDigestSigs (the sender keeps only those not sent yet), the
    // latest kMaxDigestEarlierSigs of them.
    const size_t earlier = with_earlier ? std::min<size_t>(in.recent.size() - n, kMaxDigestEarlierSigs) : 0;
    w.u32(static_cast<uint32_t>(earlier));
    for (size_t i = in.recent.size() - n - earlier; i < in.recent.size() - n; ++i) put_sig(w, in.recent[i]);
    w.end_block(at);
}

void get_header(Reader& outer, HeaderInfo& out, uint32_t* hello_flags) {
    Reader r = outer.block("header");
    if (!outer.ok()) return;
    NCW_HEADER_LAYOUT_FIELDS(NCW_GET_FIELD)
    out.actual_size = r.u64("actual_size");
    NCW_HEADER_WRITER_FIELDS(NCW_GET_FIELD)
    NCW_HEADER_LIVE_FIELDS(NCW_GET_FIELD)
    const uint32_t n = r.count("env count", kMaxEnv, kMinString);
    out.env.clear();
    out.env.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); ++i) out.env.push_back(redact::env_entry(r.str("env entry")));
    if (!r.at_end()) {  // protocol 1.6
        NCW_HEADER_TAIL_FIELDS(NCW_GET_FIELD)
        if (!r.at_end()) {  // protocol 1.15
            const uint32_t flags = r.u32("hello flags");
            if (hello_flags) *hello_flags = flags;
        }
    }
    outer.absorb(r);
}

void get_sig(Reader& outer, SigInfo& out) {
    Reader r = outer.block("signature");
    if (!outer.ok()) return;
    NCW_SIG_FIELDS_1_9(NCW_GET_FIELD)
    if (!r.at_end()) {  // protocol 1.10
        NCW_SIG_FIELDS_1_10(NCW_GET_FIELD)
    }
    outer.absorb(r);
}

void get_comm(Reader& outer, CommInfo& out) {
    Reader r = outer.block("comm");
    if (!outer.ok()) return;
    out.slot = r.u32("slot");
    NCW_COMM_FIELDS_1_5(NCW_GET_FIELD)
    const uint32_t n = r.count("signature count", kMaxDigestSigs, kMinBlock);
    auto& recent = out.recent.mut();
    recent.assign(n, SigInfo{});
    for (uint32_t i = 0; i < n && r.ok(); ++i) get_sig(r, recent[i]);
    // 1.1 (a 1.0 block ends here: no spans).
    out.gpu_spans.clear();
    if (!r.at_end()) {
        const uint32_t m = r.count("gpu span count", kMaxDigestSpans, kMinBlock);
        out.gpu_spans.assign(m, verdict::GpuSpan{});
        for (uint32_t i = 0; i < m && r.ok(); ++i) {
            Reader b = r.block("gpu span");
            if (!r.ok()) break;
            out.gpu_spans[i].seq = b.u64("seq");
            out.gpu_spans[i].gpu_ns = b.u64("gpu_ns");
            out.gpu_spans[i].t_end_ns = b.u64("t_end_ns");
            r.absorb(b);
        }
    }
    // Protocol 1.5 (a 1.4 block ends here: the format-1.6 comm fields keep their initial values).
    if (!r.at_end()) {
        NCW_COMM_FIELDS_1_6(NCW_GET_FIELD)
    }
    // Protocol 1.12: earlier signatures. Ordered by seq with the newest and one per seq whatever the sender wrote, as
    // the collector's merge and the analysis read them.
    if (!r.at_end() && r.ok()) {
        const uint32_t m = r.count("earlier signature count", kMaxDigestEarlierSigs, kMinBlock);
        if (m && r.ok()) {
            std::vector<SigInfo> all(m, SigInfo{});
            for (uint32_t i = 0; i < m && r.ok(); ++i) get_sig(r, all[i]);
            all.insert(all.end(), recent.begin(), recent.end());
            std::stable_sort(all.begin(), all.end(), [](const SigInfo& a, const SigInfo& b) { return a.seq < b.seq; });
            all.erase(
                std::unique(all.begin(), all.end(), [](const SigInfo& a, const SigInfo& b) { return a.seq == b.seq; }),
                all.end());
            recent = std::move(all);
        }
    }
    outer.absorb(r);
}

}  // namespace ncw::wire
