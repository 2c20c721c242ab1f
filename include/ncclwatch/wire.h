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
// Payloads reuse the reader's structs (collector/rank_file.h) so the live collector runs the same analysis as the
// offline one: Hello carries a HeaderInfo, Digest carries CommInfos.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rank_file.h"  // HeaderInfo, CommInfo, SigInfo

namespace ncw::wire {

inline constexpr uint32_t kMagic = 0x4C57434Eu;  // "NCWL" as little-endian bytes
inline constexpr uint16_t kMajor = 1;
inline constexpr uint16_t kMinor = 0;
inline constexpr uint32_t kHeaderBytes = 16;
inline constexpr uint32_t kMaxPayload = 1u << 20;  // a frame above this closes the connection
inline constexpr uint32_t kMaxString = 4096;
inline constexpr uint32_t kMaxEnv = 1024;         // environment entries in a Hello
inline constexpr uint32_t kMaxComms = 64;         // = disk::kMaxComms
inline constexpr uint32_t kMaxDigestSigs = 16;    // most recent signatures per communicator in a Digest

enum class FrameType : uint16_t {
    // rank -> collector
    Hello = 1,      // first frame on a connection: who this is (+ token)
    Digest = 2,     // progress of every communicator; sent when it changed
    KeepAlive = 3,  // nothing changed; proves the process is alive and carries its clock
    Bye = 4,        // the process is exiting cleanly (atexit)
    // collector -> rank
    HelloAck = 16,     // accepted
    Reject = 17,       // refused (bad token, newer major, ...): reason string; the rank stops reconnecting
    DumpRequest = 18,  // write a dump now (bumps FileHeader::dump_request in the rank's own file)
};

struct FrameHeader {
    uint32_t magic = kMagic;
    uint16_t major = kMajor;
    uint16_t minor = kMinor;
    uint16_t type = 0;  // FrameType
    uint16_t flags = 0;
    uint32_t length = 0;  // payload bytes
};

struct Hello {
    std::string token;  // NCCLWATCH_TOKEN of the rank ("" when unset)
    HeaderInfo header;  // identity fields (pid, ranks, host, job, clocks, boot, versions, env)
    std::string file;   // the rank file's path on its host
};

struct Digest {
    uint64_t sent_mono_ns = 0;  // the rank's CLOCK_MONOTONIC when sent (clock offset estimation)
    uint32_t process_state = 0;  // disk::ProcessState
    std::vector<CommInfo> comms;  // each with at most kMaxDigestSigs entries in `recent`
};

struct KeepAlive {
    uint64_t sent_mono_ns = 0;
};

struct Reject {
    std::string reason;
};

struct DumpRequest {
    uint64_t request_id = 0;
    std::string reason;  // the verdict line, for the rank's log
};

// ---- Encoding: appends one whole frame (header + payload) to `out` ----
void encode(const Hello& m, std::vector<uint8_t>& out);
void encode(const Digest& m, std::vector<uint8_t>& out);
void encode(const KeepAlive& m, std::vector<uint8_t>& out);
void encode_bye(std::vector<uint8_t>& out);
void encode_hello_ack(std::vector<uint8_t>& out);
void encode(const Reject& m, std::vector<uint8_t>& out);
void encode(const DumpRequest& m, std::vector<uint8_t>& out);

// ---- Decoding ----
// Validates a header (magic, major, length <= kMaxPayload). false with *err when invalid.
bool decode_header(const uint8_t* p, size_t n, FrameHeader& h, std::string* err) noexcept;
// Payload decoders: false with *err on any malformed field (never reads past `n`, never allocates more than the
// limits above allow).
bool decode(const uint8_t* p, size_t n, Hello& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, Digest& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, KeepAlive& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, Reject& m, std::string* err) noexcept;
bool decode(const uint8_t* p, size_t n, DumpRequest& m, std::string* err) noexcept;

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
