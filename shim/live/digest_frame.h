// The live digest client's outgoing frames: the Digest of a snapshot, whether it changed since the last one sent, and
// the one slot a frame waits in until a non-blocking socket takes it all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "read/rank_file.h"
#include "read/wire.h"

namespace ncw::live_client {

// The Digest of a snapshot: every communicator (the file's slots, then those without one) with its most recent
// kMaxDigestSigs signatures, and (protocol 1.4) the Python stacks when their capture is not the one sent last on this
// connection (py_sent_seq, its py_stacks_seq; 0 on a new connection).
wire::Digest make_digest(const HeaderInfo& h, std::vector<CommInfo> comms, uint64_t now_mono_ns,
                         uint64_t py_sent_seq = 0);

// The last Digest sent on a connection (cleared on a new one): its frame, which the next is compared with, the capture
// of the Python stacks sent so far, and per communicator the newest signature sent.
struct LastDigest {
    std::vector<uint8_t> frame;
    uint64_t py_seq = 0;      // py_stacks_seq of the stacks the collector has from this connection
    uint64_t py_pending = 0;  // ... of those in the digest made last (make_digest below), until it is taken
    std::unordered_map<uint64_t, uint64_t> sig_seq, sig_pending;  // comm id -> newest signature's seq: sent, made
    bool empty() const { return frame.empty(); }
    void clear() { *this = LastDigest{}; }
    // That digest was sent.
    void take(std::vector<uint8_t>&& f) {
        frame = std::move(f);
        if (py_pending) py_seq = py_pending;
        sig_seq = sig_pending;  // the communicators of that digest alone: the record ends with them
    }
};
// make_digest for the next Digest after `last`: besides each communicator's newest kMaxDigestSigs signatures, the
// earlier ones not sent yet on this connection (protocol 1.12, at most kMaxDigestEarlierSigs), so that the collector
// sees every op of a communicator that issues up to 64 per digest period.
wire::Digest make_digest(const HeaderInfo& h, std::vector<CommInfo> comms, uint64_t now_mono_ns, LastDigest& last);

// Whether two encoded Digest frames differ in anything but their send time (the first 8 payload bytes).
bool digest_changed(const std::vector<uint8_t>& prev_frame, const std::vector<uint8_t>& next_frame);

// Outgoing bytes of one connection: at most one frame pending. offer() refuses a new frame while an older one is not
// fully written, so the caller keeps only "something changed" and rebuilds the newest digest later.
class SendSlot {
public:
    bool busy() const { return sent_ < buf_.size(); }
    // Takes `frame` when idle (true); false when a frame is still pending.
    bool offer(std::vector<uint8_t>&& frame);
    // Writes what it can to a non-blocking socket. false on a dead connection (*err says why).
    bool flush(int fd, std::string* err);
    void clear() {
        buf_.clear();
        sent_ = 0;
    }

private:
    std::vector<uint8_t> buf_;
    size_t sent_ = 0;
};

}  // namespace ncw::live_client
