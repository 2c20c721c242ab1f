// The live protocol between a rank's shim (client) and ncclwatch-collector serve (or the in-shim collector of
// NCCLWATCH_COLLECTOR=auto): length-prefixed binary frames over one TCP connection per rank.
//
// Every frame: a 16-byte FrameHeader, then `length` payload bytes. All integers little-endian, strings as u32 length
// + bytes (no NUL). The receiver validates the magic, version, type and length before reading the payload, and every
// field while decoding; anything malformed closes that one connection (the decoder never trusts a length).
//
// Versioning as in format.h: a receiver rejects a newer major; a newer minor only appends fields at the end of a
// payload (decoders ignore trailing bytes they do not know) or adds frame types (skipped).
//
// This header is the frame format alone (limits, frame types, the frame header), like format.h for rank files. The
// payloads reuse the reader's structs, so they and the codec live with the reader (lib/read/wire.h): the live
// collector runs the same analysis as the offline one, Hello carries a HeaderInfo, Digest carries CommInfos.
#pragma once

#include <cstdint>

namespace ncw::wire {

inline constexpr uint32_t kMagic = 0x4C57434Eu;  // "NCWL" as little-endian bytes
inline constexpr uint16_t kMajor = 1;
// 1.1: a Digest's comm block ends with its newest in-collective GPU times.
// 1.2: the token is proven, never sent (Challenge / Proof, lib/live/live_auth.h); a Reject may say "retry later".
// 1.3: a Digest may append, after its kMaxComms comm blocks, the blocks of communicators past them (the shim's
//      communicators without a comm slot, watched in its memory): older collectors ignore the trailing bytes.
// 1.4: a Digest may end with the rank's Python stacks, in the first Digest after each capture (after the
//      1.3 count of comms past kMaxComms, 0 if none).
// 1.5: a comm block ends with the comm fields of format 1.6 on (the GPU's UUID), after its GPU spans.
// 1.6: a Hello's header block ends with the format's tail fields (the timeout and poll period the rank runs with); a
//      State frame after each Digest, and one more as the process ends, carries the header's live state (how the
//      process ended: exit code or signal) and, while an op waits, the point-to-point counts per peer from the ring:
//      what `analyze` reads of a rank file beyond its comm slots.
// 1.7: a relay (`ncclwatch-collector relay`, one per node) carries its node's ranks on one connection: each rank's
//      frames go wrapped in Relay frames under a channel number, so the collector needs one descriptor per node, not
//      per rank. A rank's own frames do not change.
// 1.8: a State's peer block ends with the highest send and receive the rank's GPU started (an older decoder stops
//      before them).
// 1.9: a State's live header block ends with the process's last words (format 1.9: an uncaught exception) and the
//      communicator teardown in progress.
// 1.10: a signature's block ends with its origin (format 1.10: a call, or a CUDA graph's replay).
// 1.11: a State ends with when its point-to-point counts were read from the ring (a rank sends the counts it read up
//      to a second before): the counts are as new as that, not as the State's sending.
// 1.12: a comm block ends with the signatures issued since the rank's last Digest before its newest kMaxDigestSigs
//      (at most kMaxDigestEarlierSigs more): at 200 ms a Digest, the newest alone left out every op of a communicator
//      issuing more than 80 a second, and with them its mismatches. An older decoder stops before them.
// 1.13: a State's peer block ends with the median GPU time inside the newest timed sends to and receives from that
//      peer (and how many), then the newest sends and receives with that peer (seq, count, dtype, stream,
//      group, issue time, what is known of each: read/rank_state.h P2pOp), so that the collector pairs the n-th send
//      of A to B with the n-th receive of B from A by size, and sees what a pending one is queued behind. An older
//      decoder stops before them.
// 1.14: a State's live header block ends with who ended the process and who aborted a communicator first (format
//      1.12: the threads' names), where an older decoder stops.
// 1.15: then the last termination signal the program's own handler took (format 1.13), where an older decoder stops;
//      a Hello's header block ends with its flags: whether the rank had a connection to a collector before.
// 1.16: a relay proves each of its ranks as the collector proves a direct one (lib/live/peer_proof.h) and forwards what
//      it found before the channel's first Relay frame, in a RelayPeer frame: the process that holds the rank's
//      socket (its pid in the relay's pid namespace, and that namespace), its uid and gid, and the relay's verdict on
//      the Hello's pid; fields a newer minor adds go at the end of its block. A relay first sends a RelayClose of
//      channel 0 (no rank's), which a 1.16 collector answers in kind and an older one ignores: a relay sends
//      RelayPeer frames only to a collector that answered.
inline constexpr uint16_t kMinor = 16;
inline constexpr uint16_t kMinorTokenProof = 2;   // the first minor that proves the token
inline constexpr uint16_t kMinorRelayProof = 16;  // the first minor whose relays prove their ranks (RelayPeer)
inline constexpr uint32_t kHeaderBytes = 16;
inline constexpr uint32_t kMaxPayload = 1u << 20;  // a frame above this closes the connection
inline constexpr uint32_t kMaxString = 4096;
inline constexpr uint32_t kMaxEnv = 1024;              // environment entries in a Hello
inline constexpr uint32_t kMaxComms = 64;              // = disk::kMaxComms
inline constexpr uint32_t kMaxExtraComms = 4032;       // 1.3: comm blocks past kMaxComms (payload-bounded too)
inline constexpr uint32_t kMaxDigestSigs = 16;         // most recent signatures per communicator in a Digest
inline constexpr uint32_t kMaxDigestEarlierSigs = 48;  // 1.12: and earlier ones it has not sent (with the newest: 64)
inline constexpr uint32_t kMaxDigestSpans = 32;        // 1.1: most recent in-collective GPU times per communicator
inline constexpr uint32_t kMaxDigestPyStacks = 8192;   // 1.4: bytes of Python stacks text in a Digest
inline constexpr uint32_t kMaxStateP2pComms = 64;      // 1.6: communicators with point-to-point counts in a State
inline constexpr uint32_t kMaxStatePeers = 512;        // 1.6: peers per communicator in a State (waiting ones first)
// 1.13: a State's op windows stop once the frame is this long (the counts of every peer still follow).
inline constexpr uint32_t kMaxStateP2pOpBytes = 512u << 10;
inline constexpr uint32_t kP2pOpBytes = 8 * 4 + 4 + 3;  // one op of a peer block's window
inline constexpr uint32_t kRelayPrefixBytes = 4;        // 1.7: a Relay payload's channel, before the wrapped frame
// 1.7: a Relay frame holds one whole frame of at most kMaxPayload, so its own payload may be this long.
inline constexpr uint32_t kMaxRelayPayload = kRelayPrefixBytes + kHeaderBytes + kMaxPayload;

enum class FrameType : uint16_t {
    // rank -> collector
    Hello = 1,      // first frame on a connection: who this is (1.1 and older: + the token in clear)
    Digest = 2,     // progress of every communicator; sent when it changed
    KeepAlive = 3,  // nothing changed; proves the process is alive and carries its clock
    Bye = 4,        // the process is exiting cleanly (atexit)
    Proof = 5,      // 1.2: the answer to a Challenge, HMAC-SHA256 of the token over the nonce and the Hello
    State = 6,      // 1.6: the header's live state and the point-to-point counts; after a Digest, and at the end
    // relay <-> collector, both ways on a relay's connection (1.7)
    Relay = 7,       // u32 channel, then one whole frame (header and payload) from or for that channel's rank
    RelayClose = 8,  // u32 channel: that rank's connection closed (from the relay), or is to be closed (to it);
                     // 1.16: channel 0, the relay asking which protocol the collector speaks, and its answer
    RelayPeer = 9,   // 1.16, from the relay: u32 channel, then a block: who holds that rank's socket (read/wire.h)
    // collector -> rank
    HelloAck = 16,     // accepted
    Reject = 17,       // refused (bad token, newer major, ...): reason string; the rank stops reconnecting
    DumpRequest = 18,  // write a dump now (bumps FileHeader::dump_request in the rank's own file)
    Challenge = 19,    // 1.2: a fresh nonce, in reply to a Hello when the collector requires a token
};

inline constexpr uint16_t kFlagRetry = 1;  // 1.2, on a Reject: refused for now; reconnect with backoff

struct FrameHeader {
    uint32_t magic = kMagic;
    uint16_t major = kMajor;
    uint16_t minor = kMinor;
    uint16_t type = 0;  // FrameType
    uint16_t flags = 0;
    uint32_t length = 0;  // payload bytes
};

}  // namespace ncw::wire
