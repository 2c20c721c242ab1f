// The live digest client's outgoing frames (see digest_frame.h).
#include "shim/live/digest_frame.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ncw::live_client {

namespace {

// A communicator's signatures in a Digest: the newest kMaxDigestSigs, and before them those newer than `sent` (the
// newest the collector has), at most kMaxDigestEarlierSigs.
void keep_signatures(CommInfo& c, uint64_t sent) {
    const size_t n = c.recent.size();
    size_t keep = std::min<size_t>(n, wire::kMaxDigestSigs);
    while (keep < n && keep < wire::kMaxDigestSigs + wire::kMaxDigestEarlierSigs && c.recent[n - keep - 1].seq > sent)
        ++keep;
    if (keep < n) {
        auto& recent = c.recent.mut();
        recent.erase(recent.begin(), recent.end() - keep);
    }
}

wire::Digest make_digest(const HeaderInfo& h, std::vector<CommInfo> comms, uint64_t now_mono_ns, uint64_t py_sent_seq,
                         LastDigest* last) {
    wire::Digest d;
    d.sent_mono_ns = now_mono_ns;
    d.process_state = h.process_state;
    // The file's slots first, then the communicators without one (1.3: past kMaxComms, budgeted by the encoder).
    if (comms.size() > wire::kMaxComms + wire::kMaxExtraComms) comms.resize(wire::kMaxComms + wire::kMaxExtraComms);
    if (last) last->sig_pending.clear();
    for (CommInfo& c : comms) {
        uint64_t sent = UINT64_MAX;  // without a connection's record: the newest alone
        if (last) {
            const auto it = last->sig_seq.find(c.comm_id);
            sent = it == last->sig_seq.end() ? 0 : it->second;
        }
        keep_signatures(c, sent);
        if (last && !c.recent.empty()) last->sig_pending[c.comm_id] = c.recent.back().seq;
    }
    d.comms = std::move(comms);
    // Once per capture: the collector keeps them (a digest goes out on every change, a capture is rare).
    if (h.py_stacks_seq && h.py_stacks_seq % 2 == 0 && h.py_stacks_seq != py_sent_seq)
        d.py_stacks = wire::py_stacks_block(h);
    return d;
}

}  // namespace

wire::Digest make_digest(const HeaderInfo& h, std::vector<CommInfo> comms, uint64_t now_mono_ns, uint64_t py_sent_seq) {
    return make_digest(h, std::move(comms), now_mono_ns, py_sent_seq, nullptr);
}

wire::Digest make_digest(const HeaderInfo& h, std::vector<CommInfo> comms, uint64_t now_mono_ns, LastDigest& last) {
    wire::Digest d = make_digest(h, std::move(comms), now_mono_ns, last.py_seq, &last);
    last.py_pending = d.py_stacks ? d.py_stacks->seq : 0;
    return d;
}

bool digest_changed(const std::vector<uint8_t>& prev, const std::vector<uint8_t>& next) {
    // Header (16 bytes) + sent_mono_ns (8): the rest is the content.
    constexpr size_t skip = wire::kHeaderBytes + 8;
    if (prev.size() != next.size() || prev.size() < skip) return true;
    return memcmp(prev.data() + skip, next.data() + skip, prev.size() - skip) != 0;
}

bool SendSlot::offer(std::vector<uint8_t>&& frame) {
    if (busy()) return false;
    buf_ = std::move(frame);
    sent_ = 0;
    return true;
}

bool SendSlot::flush(int fd, std::string* err) {
    while (sent_ < buf_.size()) {
        // MSG_NOSIGNAL: a collector that went away gives EPIPE here, never a SIGPIPE for the host program.
        const ssize_t n = ::send(fd, buf_.data() + sent_, buf_.size() - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent_ += size_t(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        if (err) *err = n < 0 ? strerror(errno) : "send returned 0";
        return false;
    }
    clear();
    return true;
}

}  // namespace ncw::live_client
