// The live protocol's payloads and codec (lib/read/wire.cpp) over the frame format of include/ncclwatch/wire.h.
// Payloads reuse the reader's structs (read/rank_file.h) so the live collector runs the same analysis as the offline
// one: Hello carries a HeaderInfo, Digest carries CommInfos.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ncclwatch/wire.h"
#include "read/rank_file.h"  // HeaderInfo, CommInfo, SigInfo
#include "read/snapshot.h"   // FileSnapshot::P2pTable

namespace ncw::wire {

struct Hello {
    std::string token;  // 1.1 and older: NCCLWATCH_TOKEN in clear; 1.2 sends "" and answers a Challenge
    HeaderInfo header;  // identity fields (pid, ranks, host, job, clocks, boot, versions, env)
    std::string file;   // the rank file's path on its host
    // 1.15: the rank had a connection to a collector at this address before this one: a collector that meets its job
    // for the first time so was restarted (or moved), and waits for the job's other ranks to come back before naming
    // anyone (live_server_reports.cpp resume_wait).
    bool resumed = false;
};
inline constexpr uint32_t kHelloResumed = 1;  // Hello::resumed, in the flags at the end of its header block

// 1.4: the rank's Python stacks (read/py_stacks.h) as its rank file holds them, in the first Digest after a capture
// (a new py_stacks_seq) or on a new connection; the collector keeps them until the next. The text is faulthandler's
// (the threads that issued NCCL calls first), at most kMaxDigestPyStacks bytes, cut at the end of a line.
struct PyStacksBlock {
    uint64_t seq = 0;      // FileHeader::py_stacks_seq of the capture (even)
    uint64_t mono_ns = 0;  // when it was captured, on the rank's CLOCK_MONOTONIC
    uint32_t reason = 0;   // disk::PyStacksReason
    uint32_t status = 0;   // disk::PyStacksStatus
    std::string text;
};

struct Digest {
    uint64_t sent_mono_ns = 0;    // the rank's CLOCK_MONOTONIC when sent (clock offset estimation)
    uint32_t process_state = 0;   // disk::ProcessState
    std::vector<CommInfo> comms;  // each with at most kMaxDigestSigs entries in `recent`, kMaxDigestSpans in gpu_spans
    std::optional<PyStacksBlock> py_stacks;  // 1.4
};

// The block of a capture: its fields and text, the text cut to kMaxDigestPyStacks at the end of a line.
PyStacksBlock py_stacks_block(const HeaderInfo& h);

// 1.6: what a rank file says beyond its comm slots, so that the collector judges a rank as `analyze` judges its file:
// the header's live state (`live`: its NCW_HEADER_LIVE_FIELDS, among them how the process ended) and, when read
// (`p2p_read`: while an op waits), the point-to-point counts per peer from the ring (at most kMaxStateP2pComms
// communicators of at most kMaxStatePeers peers, those with an op pending first). Times on the rank's clock.
struct State {
    uint64_t sent_mono_ns = 0;
    HeaderInfo live;
    bool p2p_read = false;
    bool p2p_wrapped = false;
    std::vector<FileSnapshot::P2pTable> p2p;
    uint64_t p2p_read_mono_ns = 0;  // 1.11: when `p2p` was read (0: not said; before 1.11, the sending's time)
};

struct KeepAlive {
    uint64_t sent_mono_ns = 0;
};

struct Reject {
    std::string reason;
    bool retry = false;  // 1.2: refused for now (the rank is already connected): encoded as kFlagRetry in the
                         // frame header's flags (the payload decoder leaves it false; read FrameHeader::flags)
};

struct Challenge {
    std::string nonce;  // kChallengeBytes
};

struct Proof {
    std::string mac;  // HMAC-SHA256, 32 bytes; "" = the rank has no token
};

inline constexpr size_t kChallengeBytes = 32;

// 1.16: what a relay found at one of its ranks' sockets (live/peer_proof.h), before the channel's first Relay frame:
// the collector takes it as the proof of that rank's identity from a relay it trusts.
struct RelayPeer {
    enum Result : uint32_t { Proven = 0, Refused = 1, Unproven = 2 };  // the relay's verdict on the Hello's pid
    uint32_t channel = 0;
    uint32_t result = Unproven;
    uint32_t flags = 0;   // kPeer*
    int64_t pid = 0;      // the process that holds the rank's socket, in the relay's pid namespace; 0: not found
    uint64_t pid_ns = 0;  // that namespace (the inode of the relay's /proc/self/ns/pid); 0: unknown
    uint32_t uid = 0;     // the socket's owner (kPeerUidKnown)
    uint32_t gid = 0;     // pid's effective gid (kPeerGidKnown)
    std::string why;      // Refused / Unproven: one line
};
inline constexpr uint32_t kPeerUidKnown = 1, kPeerGidKnown = 2;
inline constexpr uint32_t kPeerByUid = 4;  // proven by the socket's uid alone (PidProof::by_uid)

struct DumpRequest {
    uint64_t request_id = 0;
    std::string reason;  // the verdict line, for the rank's log
};

// ---- Encoding: appends one whole frame (header + payload) to `out` ----
void encode(const Hello& m, std::vector<uint8_t>& out);
// A Digest: returns the comms it holds (1.3: past kMaxComms, as many as fit in kMaxPayload, at most kMaxExtraComms).
size_t encode(const Digest& m, std::vector<uint8_t>& out);
void encode(const State& m, std::vector<uint8_t>& out);
void encode(const KeepAlive& m, std::vector<uint8_t>& out);
void encode_bye(std::vector<uint8_t>& out);
void encode_hello_ack(std::vector<uint8_t>& out);
void encode(const Reject& m, std::vector<uint8_t>& out);
void encode(const DumpRequest& m, std::vector<uint8_t>& out);
void encode(const Challenge& m, std::vector<uint8_t>& out);
void encode(const Proof& m, std::vector<uint8_t>& out);
// 1.7: one whole frame (`frame`, `n` bytes, header included) of channel `channel`, wrapped for a relay's connection;
// and the news that a channel's connection closed (or is to close).
void encode_relay(uint32_t channel, const uint8_t* frame, size_t n, std::vector<uint8_t>& out);
void encode_relay_close(uint32_t channel, std::vector<uint8_t>& out);
void encode(const RelayPeer& m, std::vector<uint8_t>& out);  // 1.16

// ---- Decoding ----
// Validates a header (magic, major, length <= kMaxPayload). false with *err when invalid.
bool decode_header(const uint8_t* p, size_t n, FrameHeader& h, std::string* err) noexcept;
// Payload decoders: false with *err on any malformed field (never reads past `n`, never allocates more than the
// limits above allow).
bool decode(const uint8_t* p, size_t n, Hello& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, Digest& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, State& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, KeepAlive& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, Reject& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, DumpRequest& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, Challenge& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, Proof& m, std::string* err) noexcept;
// 1.7: a Relay payload: its channel and the wrapped frame's header, checked as a frame header is (and never a Relay
// frame itself), its length exactly what follows; the wrapped payload is p + kRelayPrefixBytes + kHeaderBytes.
bool decode_relay(const uint8_t* p, size_t n, uint32_t& channel, FrameHeader& inner, std::string* err) noexcept;
bool decode_relay_close(const uint8_t* p, size_t n, uint32_t& channel, std::string* err) noexcept;
// 1.16: a result past Unproven is refused; fields past the block's known ones (a newer minor's) are skipped.
bool decode(const uint8_t* p, size_t n, RelayPeer& m, std::string* err) noexcept;

// Reassembles frames from a byte stream (a socket read into feed()).
class FrameReader {
public:
    enum class Status { NeedMore, Frame, Error };
    void feed(const uint8_t* p, size_t n);
    // Frame: `h` and `payload` hold the next frame. Error: the stream is unusable (*err says why); close it.
    Status next(FrameHeader& h, std::vector<uint8_t>& payload, std::string* err);
    size_t buffered() const noexcept { return buf_.size() - pos_; }

private:
    std::vector<uint8_t> buf_;
    size_t pos_ = 0;
};

}  // namespace ncw::wire
