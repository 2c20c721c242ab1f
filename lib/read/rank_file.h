// Reading rank files (include/ncclwatch/format.h): the shim's watchdog reads its siblings' files while they run, the
// collector reads them after the fact. The file is opened read-only and validated once; every snapshot copies what it
// needs with pread into our own buffers, following the writer's seqlock/stamp protocols, so a reader never sees a torn
// value and never writes to the file. Never mapped: another process may shrink the file at any moment, and a shared
// mapping past the new end raises SIGBUS in the reader (the training process, for the watchdog); a short pread is only
// an error (read_error()).
//
// Nothing here throws or aborts: errors come back as strings. The shim calls this from its watchdog thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ncclwatch/hash.h"  // ncw::fnv1a64: one definition for the shim and the readers
#include "read/py_stacks.h"
#include "read/rank_state.h"  // verdict::RankCommState, what to_rank_comm_state builds; verdict::OpSig
#include "read/reader_fields.h"

namespace ncw {

namespace disk {
struct CommSlot;  // ncclwatch/format.h
}

// fnv1a64 of /proc/sys/kernel/random/boot_id without surrounding whitespace (the 36-character UUID); 0 if
// unreadable. This is the value the shim stores in FileHeader::boot_id_hash. Read once, then cached.
uint64_t this_boot_id_hash() noexcept;

// gethostname(), "" on failure.
std::string this_hostname();

// ---- Snapshots: plain copies of what the file says ----

// The file header (format_fields.h: NCW_HEADER_*_FIELDS).
struct HeaderInfo {
    // Layout, as the header declares it.
    NCW_HEADER_LAYOUT_FIELDS(NCW_READER_MEMBER)
    uint64_t actual_size = 0;  // bytes on disk when opened (file_size: what the writer sized the file to)

    // Who wrote it.
    NCW_HEADER_WRITER_FIELDS(NCW_READER_MEMBER)
    // "NAME=value" entries the shim recorded (format 1.1+): the launcher's and NCCL/torch variables, and facts the
    // shim probed, named "ncclwatch.*" (see env_audit.h). Empty for 1.0 files.
    std::vector<std::string> env;

    // Live state at the time of the snapshot (num_comms as written: it may exceed what the file holds).
    NCW_HEADER_LIVE_FIELDS(NCW_READER_MEMBER)

    // Format 1.5: the Python stacks (read/py_stacks.h) as one consistent capture: its fields, the text and the text
    // parsed (nullptr: none captured, or not readable consistently). Not in the live protocol.
    NCW_HEADER_PY_STACKS_FIELDS(NCW_READER_MEMBER)
    std::string py_stacks_text;
    std::shared_ptr<const py::Stacks> py_stacks;
    // Format 1.8: the held capture (format.h: the first taken for a stall), loaded as the one above.
    NCW_HEADER_PY_HELD_FIELDS(NCW_READER_MEMBER)
    std::string py_held_text;
    std::shared_ptr<const py::Stacks> py_held;

    // Format 1.9: the process's last words (format.h: an uncaught Python exception), "" when none. Sent live.
    NCW_HEADER_LAST_WORDS_FIELDS(NCW_READER_MEMBER)
    // Format 1.9: the communicator teardown in progress (format.h), teardown_since_ns 0 when none. Sent live.
    NCW_HEADER_TEARDOWN_FIELDS(NCW_READER_MEMBER)
    // Format 1.12: who ended the process and who aborted a communicator first (format.h), "" and 0 when none. Sent
    // live (protocol 1.14).
    NCW_HEADER_END_CAUSE_FIELDS(NCW_READER_MEMBER)
    // Format 1.13: the last SIGTERM / SIGINT the program's own handler took (format.h), 0 when none. Sent live
    // (protocol 1.15).
    NCW_HEADER_ABSORBED_FIELDS(NCW_READER_MEMBER)
    // Format 1.15: the shortest timeout of the writer's torch process groups and the lines it printed on stderr
    // (format.h), 0 when not known. Not in the live protocol.
    NCW_HEADER_NOTES_FIELDS(NCW_READER_MEMBER)

    // Communicators the writer watched without a comm slot (format_fields.h NCW_HEADER_TAIL_FIELDS). Not in the live
    // protocol: a live digest carries those communicators themselves.
    NCW_HEADER_TAIL_FIELDS(NCW_READER_MEMBER)

    // The live collector's own (never in a file or on the wire): the rank's process in the collector's pid namespace,
    // as its connection's socket proves it (live/peer_proof.h). Liveness probes it, not `pid`, which is what the rank
    // says (a label: in a container, its pid there; in a pid namespace it made, any number it chose). 0: nothing
    // proven (a file, or a rank proven by a token): `pid` is probed; -1: in a pid namespace the collector cannot see
    // into (a relay's in another): not probed.
    int64_t proven_pid = 0;
};

// One entry of CommSlot::recent that passed the seqlock check.
using SigInfo = verdict::OpSig;

// One comm slot (format_fields.h: NCW_COMM_FIELDS).
struct CommInfo {
    uint32_t slot = 0;  // index in the comm table
    NCW_COMM_FIELDS(NCW_READER_MEMBER)

    CowVector<SigInfo> recent;  // ordered by seq; shared by its copies (read/cow_vector.h)
    // Format 1.4: the newest in-collective GPU times, ordered by seq; only where asked for (read/gpu_spans.h) or
    // carried by a live digest.
    std::vector<verdict::GpuSpan> gpu_spans;
};

// CommInfo::slot of a communicator that had no comm slot (OpRecord::comm_slot's "none"): watched in its writer's
// memory.
inline constexpr uint32_t kNoCommSlot = 0xffff;

// Communicators held in this process's own memory rather than in a file's comm table (the shim's communicators
// without a slot, shim/record/comm_slots.h): each slot copied three times with atomic loads and checked as comms()
// checks the file's table (generation, signature seqs before and after). slot is kNoCommSlot in each.
std::vector<CommInfo> read_memory_slots(const std::vector<const disk::CommSlot*>& slots) noexcept;

// One ring record (format_fields.h: NCW_RECORD_FIELDS); op is always one this reader knows.
struct Record {
    uint64_t ticket = 0;
    NCW_RECORD_FIELDS(NCW_READER_MEMBER)
    uint16_t comm_nranks = 0;  // 1.3 (0 before: unknown)
    int32_t comm_rank = -1;    // 1.3 (-1 when comm_nranks is 0)
};

struct RecordSet {
    std::vector<Record> records;  // valid records, ordered by ticket
    uint64_t write_ticket = 0;    // as read at the start of the snapshot
    uint64_t first_ticket = 0;    // the oldest ticket the ring could still hold
    uint64_t dropped = 0;         // overwritten before they could be read (ring wrapped)
    uint64_t unwritten = 0;       // handed out and not written (yet): the rest of a thread's chunk (format.h)
    uint64_t torn = 0;            // being written during the read, or stamp inconsistent
    uint64_t unknown_op = 0;      // op types this reader does not know (written by a newer minor): skipped
    uint64_t cut = 0;             // slots beyond the end of a truncated file
};

// A call that returned an error (neither success nor ncclInProgress; -1: not returned yet): failed, not completed.
inline bool record_failed(const Record& r) noexcept { return r.result != -1 && r.result != 0 && r.result != 7; }

// Op types this reader understands (collectives, p2p, lifecycle events).
bool known_op(uint8_t op) noexcept;

// ---- The reader ----

class RankFile {
public:
    RankFile() = default;
    ~RankFile();
    RankFile(RankFile&& o) noexcept;
    RankFile& operator=(RankFile&& o) noexcept;
    RankFile(const RankFile&) = delete;
    RankFile& operator=(const RankFile&) = delete;

    // Opens `path` read-only and validates the header. false: nothing usable, error() says why. true: snapshots work;
    // warnings() may still report damage (a truncated file reads as far as it goes).
    bool open(const std::string& path) noexcept;
    // The same over a mapping someone else owns and keeps alive (the shim's own anonymous-memory fallback, which has
    // no path): validated the same way, never unmapped here. `label` stands in for the path in messages.
    bool open_memory(const void* base, size_t size, const std::string& label) noexcept;
    void close() noexcept;

    bool is_open() const noexcept { return open_; }
    const std::string& path() const noexcept { return path_; }
    const std::string& error() const noexcept { return error_; }
    const std::vector<std::string>& warnings() const noexcept { return warnings_; }
    bool truncated() const noexcept { return truncated_; }
    // Why a snapshot since open() could not be trusted: the file shrank under a read or changed size since it was
    // opened. Sticky: every later snapshot comes back empty; reopen to read the file as it is now. "" = none.
    const std::string& read_error() const noexcept { return read_error_; }
    // false (and read_error() set) when the file's size is no longer the size it was validated at, or it was
    // replaced or deleted since (its path now names another file, or none).
    bool check_size() const noexcept;

    // Asks the kernel to start reading what the next snapshot reads (posix_fadvise WILLNEED): the comm slots in use,
    // the environment and Python stacks as published, and the newest ring_records ring slots. On a cold page cache
    // their reads then go out together, and the snapshot waits once instead of once per region. Reads nothing
    // itself but the header (already cached by open); a no-op for open_memory.
    void prefetch(uint64_t ring_records) const noexcept;

    // Snapshots. Each re-reads the file, so a running writer's progress shows up; an unopened file gives empty
    // results.
    HeaderInfo header() const noexcept;
    std::vector<CommInfo> comms() const noexcept;                 // slots in use that lie inside the file
    RecordSet records(uint64_t since_ticket = 0) const noexcept;  // tickets >= since_ticket
    uint64_t write_ticket() const noexcept;                       // the tickets handed out so far (0: unreadable)
    // The frames recorded for `ticket` (trailing zeros trimmed); empty when there is no backtrace region, the slot
    // has been reused since, or it lies past the end of the file.
    std::vector<uint64_t> backtrace(uint64_t ticket) const noexcept;

private:
    bool validate() noexcept;
    void validate_env_region(const void* header, uint16_t minor, uint64_t regions_end, uint64_t file_size) noexcept;
    // An optional region (the Python stacks, the held capture): its offset and capacity where it lies in the file
    // after `regions_end`; damaged, 0 and 0 with a warning naming `what`.
    std::pair<uint64_t, uint32_t> validate_optional_region(uint64_t off, uint32_t cap, uint64_t regions_end,
                                                           uint64_t file_size, const char* what) noexcept;
    void load_py_stacks(HeaderInfo& out) const;  // both captures; may throw bad_alloc; header() catches
    template <class Decode>
    void load_capture(size_t from, size_t to, size_t seq_at, uint64_t offset, uint32_t capacity, Decode decode,
                      std::string& text_out, std::shared_ptr<const py::Stacks>& stacks_out) const;
    std::vector<std::string> env_entries(uint64_t published) const;  // may throw bad_alloc; header() catches
    bool fail(std::string msg) noexcept;
    // Copies n bytes at `off` into dst (pread, or our own memory for open_memory). false: the file ends before
    // off + n (it shrank since open) or the read failed; read_error() says which, and stays set.
    bool fetch(uint64_t off, void* dst, size_t n) const noexcept;
    // The ring slots of tickets [start, start + count) into buf (count * record_size_ bytes, slot of ticket t at
    // (t - start) * record_size_), the ones inside the file only.
    bool fetch_ring(uint64_t start, uint64_t count, unsigned char* buf) const noexcept;
    bool slot_in_file(uint64_t ticket) const noexcept;

    std::string path_;
    std::string error_;
    std::vector<std::string> warnings_;
    mutable std::string read_error_;
    int fd_ = -1;                         // open(): the file, read with pread
    const unsigned char* mem_ = nullptr;  // open_memory(): a mapping someone else owns
    bool open_ = false;
    size_t size_ = 0;  // at open; every read stays below it
    bool truncated_ = false;
    // Validated layout, fixed at open.
    uint64_t comm_table_offset_ = 0;
    uint64_t ring_offset_ = 0;
    uint64_t bt_offset_ = 0;
    uint32_t comm_slot_size_ = 0;
    uint32_t record_size_ = 0;
    uint32_t max_comms_ = 0;
    uint32_t ring_capacity_ = 0;
    uint32_t bt_depth_ = 0;
    uint32_t usable_comms_ = 0;  // slots wholly inside the file
    uint64_t env_offset_ = 0;    // format 1.1 environment region; 0 = none (1.0 file, or a damaged region ignored)
    uint32_t env_capacity_ = 0;
    uint64_t py_stacks_offset_ = 0;  // format 1.5 Python stacks region; 0 = none (older file, or damaged: ignored)
    uint32_t py_stacks_capacity_ = 0;
    uint64_t py_held_offset_ = 0;  // format 1.8 held capture; 0 = none (older file, or damaged: ignored)
    uint32_t py_held_capacity_ = 0;
};

// Asks the process that writes `path` for a dump: increments FileHeader::dump_request (the one field a reader may
// write) with pread and pwrite, never through a mapping, so a file that shrinks meanwhile cannot fault us. false with
// *error on failure.
bool request_dump(const std::string& path, std::string* error = nullptr) noexcept;

// ---- Liveness and the verdict engine's input ----

struct LivenessContext {
    // true: reading live files (the shim, a live collector): same host and boot -> kill(pid, 0) is checked, and the
    // heartbeat age is computed only for files of this boot. false: offline analysis: no kill(); the caller has put
    // every timestamp on one clock (job_view rebases them), so ages always apply.
    bool live = true;
    uint64_t now_mono_ns = 0;  // "now" on this boot's CLOCK_MONOTONIC (live) or on the common clock (offline)
    double stale_after_s = 5.0;
    std::string host;           // this host, for the kill() check
    uint64_t boot_id_hash = 0;  // this boot
    // Offline too: a file written on this host and boot whose pid is gone is a process gone, at once (host and
    // boot set; without them, heartbeats alone say).
    bool probe_pids_offline = false;
};

// A context for reading live files on this machine: gethostname() and this boot's id.
LivenessContext live_context(uint64_t now_mono_ns, double stale_after_s = 5.0);

// One comm slot of one file, as the verdict engine wants it. alive = not exited cleanly, heartbeat younger than
// stale_after_s (when the age can be computed; a heartbeat of 0 means the watchdog never ran: no age check) and, live
// on this host and boot, kill(pid, 0) finds the process.
verdict::RankCommState to_rank_comm_state(const HeaderInfo& h, const CommInfo& c, const std::string& file,
                                          const LivenessContext& ctx) noexcept;
// The same into a default-made state where it is kept (a rank state is large: 131,072 are not built by moves).
void to_rank_comm_state(const HeaderInfo& h, const CommInfo& c, const std::string& file, const LivenessContext& ctx,
                        verdict::RankCommState& out) noexcept;

// ---- Finding files ----

// The rank files (regular files named *.ncw) in `dir`, sorted; recursive descends into subfolders. Problems (no such
// folder, permission denied) and the *.ncw entries skipped (a FIFO, a device, a folder, a dangling link) go to
// *errors when given. Nothing is opened here: a FIFO cannot block the caller.
std::vector<std::string> list_rank_files(const std::string& dir, bool recursive = false,
                                         std::vector<std::string>* errors = nullptr) noexcept;

}  // namespace ncw
