// The on-disk format of a rank file: the one definition that the shim (writer), a sibling rank's watchdog and the
// collector (readers) share. A rank file is a shared file mapping that the shim writes in place, so it is readable
// while the process runs, after it exits and after SIGKILL.
//
// Layout (all offsets are in the header, so a reader never assumes them):
//   [FileHeader, kHeaderBytes] [CommSlot x max_comms] [OpRecord x ring_capacity] [uint64 frames x ring_capacity x
//   bt_depth] [environment region, env_capacity bytes] (1.1+) [Python stacks region, py_stacks_capacity bytes] (1.5+)
//   [held Python stacks region, py_held_capacity bytes] (1.8+)
//
// Versioning: readers reject a newer major version; a newer minor version only appends fields at the end of a
// structure (the sizes in the header tell a reader how far to step) or adds record op kinds, which readers skip.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ncclwatch/format_fields.h"

namespace ncw::disk {

inline constexpr char kMagic[8] = {'N', 'C', 'W', 'A', 'T', 'C', 'H', '1'};
inline constexpr uint16_t kFormatMajor = 1;
// 1.1: the environment region; 1.2: kFlagSampledOut; 1.3: slot reuse; 1.4: GPU times from NCCL's profiler interface
// (kFlagGpuTimed, CommSlot::gpu_source and what follows it); 1.5: how the process ended (FileHeader::end_kind ...),
// failed calls (CommSlot::ops_failed ..., appended after the signature window: a 1.4 slot is shorter), the Python
// stacks region; 1.6: the GPU's UUID (CommSlot::gpu_uuid, in what were two reserved words); 1.7: the stall timeout
// and the poll period the writer ran with (FileHeader::timeout_ms, poll_ms, appended last); 1.8: the held Python
// stacks capture (FileHeader::py_held_*, appended last, and its region after the Python stacks region); 1.9: the
// process's last words (FileHeader::last_words*) and the teardown in progress (teardown_*), appended last; 1.10: a
// record's origin (OpRecord::origin and OpSignature::origin, in what were reserved bytes): a call, or a CUDA graph's
// replay of a captured op; 1.11: tickets handed out in chunks of kRingChunk to one writing thread at a time (a ticket
// may stay unwritten: readers count it so, RecordSet::unwritten), and the return time of a call whose completion is
// not followed by CUDA events is its issue time (one clock read per op); 1.12: who ended the process and who
// aborted a communicator first, by their threads' names (FileHeader::end_thread, abort_*, appended last); 1.13: the
// last SIGTERM or SIGINT the program's own handler took and went on after (FileHeader::absorbed_*, appended last);
// 1.14: NCCL 2.29's calls as records (OpType CommGrow .. WaitSignal); 1.15: the shortest timeout of torch's process
// groups and the lines the process printed on stderr (FileHeader::torch_timeout_ms, stderr_lines, appended last).
inline constexpr uint16_t kFormatMinor = 15;

inline constexpr uint32_t kHeaderBytes = 4096;
inline constexpr uint32_t kMaxComms = 64;
inline constexpr uint32_t kRecentSigs = 64;  // per-comm window of collective signatures, indexed by seq % kRecentSigs
inline constexpr uint32_t kDefaultRingCapacity = 16384;
inline constexpr uint32_t kMinRingCapacity = 256;
// Tickets go to a writing thread kRingChunk at a time (write_ticket moves by that much): one locked instruction per
// chunk, and the chunk's records written by that thread alone (shim/record/ring_publish.h).
inline constexpr uint32_t kRingChunk = 16;
static_assert(kMinRingCapacity % kRingChunk == 0);
inline constexpr uint32_t kMaxRingCapacity = 1u << 22;
inline constexpr uint32_t kMaxBacktraceDepth = 32;
inline constexpr uint32_t kEnvCapacity = 16384;
inline constexpr uint32_t kPyStacksCapacity = 65536;

// Operation kinds (format_fields.h: NCW_OP_TYPES).
enum class OpType : uint8_t {
#define NCW_OP_ENUM(name, value) name = value,
    NCW_OP_TYPES(NCW_OP_ENUM)
#undef NCW_OP_ENUM
};

inline constexpr bool is_collective(OpType t) { return t >= OpType::AllReduce && t <= OpType::Scatter; }
inline constexpr bool is_p2p(OpType t) { return t == OpType::Send || t == OpType::Recv; }
inline constexpr bool is_rooted(OpType t) {
    return t == OpType::Broadcast || t == OpType::Reduce || t == OpType::Gather || t == OpType::Scatter;
}
inline constexpr bool has_redop(OpType t) {
    return t == OpType::AllReduce || t == OpType::Reduce || t == OpType::ReduceScatter;
}

// OpRecord::flags (format_fields.h: NCW_RECORD_FLAGS).
enum RecordFlags : uint8_t {
#define NCW_FLAG_ENUM(name, bit, short_name) name = 1u << bit,
    NCW_RECORD_FLAGS(NCW_FLAG_ENUM)
#undef NCW_FLAG_ENUM
};
// Every flag this format defines; other bits come from a newer minor.
inline constexpr uint8_t kKnownRecordFlags = 0
#define NCW_FLAG_OR(name, bit, short_name) | (1u << bit)
    NCW_RECORD_FLAGS(NCW_FLAG_OR)
#undef NCW_FLAG_OR
    ;

// OpRecord::origin (format_fields.h: NCW_RECORD_ORIGINS).
enum class RecordOrigin : uint8_t {
#define NCW_ORIGIN_ENUM(name, value, show_name) name = value,
    NCW_RECORD_ORIGINS(NCW_ORIGIN_ENUM)
#undef NCW_ORIGIN_ENUM
};

// Process state in FileHeader::process_state (format_fields.h: NCW_PROCESS_STATES).
enum class ProcessState : uint32_t {
#define NCW_STATE_ENUM(name, value, show_name) name = value,
    NCW_PROCESS_STATES(NCW_STATE_ENUM)
};

// FileHeader::end_kind (format_fields.h: NCW_END_KINDS).
enum class EndKind : uint32_t {
#define NCW_END_ENUM(name, value, show_name) name = value,
    NCW_END_KINDS(NCW_END_ENUM)
#undef NCW_END_ENUM
};

// CommSlot::gpu_source (format_fields.h: NCW_GPU_SOURCES).
enum class GpuSource : uint32_t {
#define NCW_SOURCE_ENUM(name, value, show_name) name = value,
    NCW_GPU_SOURCES(NCW_SOURCE_ENUM)
#undef NCW_SOURCE_ENUM
};

// Communicator state in CommSlot::state (format_fields.h: NCW_COMM_STATES).
enum class CommState : uint32_t { NCW_COMM_STATES(NCW_STATE_ENUM) };
#undef NCW_STATE_ENUM

// FileHeader::py_stacks_reason and py_stacks_status (format_fields.h: NCW_PY_STACKS_REASONS, _STATUSES).
enum class PyStacksReason : uint32_t {
#define NCW_PY_ENUM(name, value, show_name) name = value,
    NCW_PY_STACKS_REASONS(NCW_PY_ENUM)
};
enum class PyStacksStatus : uint32_t { NCW_PY_STACKS_STATUSES(NCW_PY_ENUM) };
#undef NCW_PY_ENUM

// CommSlot::stall_flags
enum StallFlags : uint32_t { kStallActive = 1u << 0, kStallReported = 1u << 1, kMismatchReported = 1u << 2 };

struct FileHeader {
    char magic[8];
    uint16_t major;
    uint16_t minor;
    uint32_t header_size;     // kHeaderBytes
    uint32_t comm_slot_size;  // sizeof(CommSlot) as written
    uint32_t max_comms;
    uint32_t record_size;    // sizeof(OpRecord) as written
    uint32_t ring_capacity;  // power of two
    uint32_t bt_depth;       // frames per record in the backtrace region; 0 = no region
    uint32_t reserved0;
    uint64_t comm_table_offset;
    uint64_t ring_offset;
    uint64_t bt_offset;
    uint64_t file_size;

    // Who wrote this file.
    int64_t pid;
    int32_t global_rank;  // from the launcher's environment; -1 if unknown
    int32_t local_rank;
    int32_t world_size;
    int32_t local_world_size;
    char host[64];
    char job_id[128];
    uint64_t start_mono_ns;  // CLOCK_MONOTONIC at creation; every timestamp in the file is CLOCK_MONOTONIC
    uint64_t start_real_ns;  // CLOCK_REALTIME at the same moment, to turn timestamps into wall-clock time
    uint64_t boot_id_hash;   // same value for every process on one boot of one host: monotonic clocks compare
    int32_t nccl_version;    // NCCL_VERSION_CODE of the running library, 0 until known
    int32_t cuda_driver_version;

    // Live state.
    std::atomic<uint64_t> heartbeat_mono_ns;  // the watchdog writes it every poll: a stale one means a dead process
    std::atomic<uint32_t> process_state;      // ProcessState
    std::atomic<uint32_t> num_comms;          // comm slots ever used (1.3+: a destroyed comm's slot may be reused)
    std::atomic<uint64_t>
        write_ticket;  // tickets handed out (1.11: by chunks); record i lives in slot i % ring_capacity
    std::atomic<uint64_t> dump_request;  // a sibling increments it to ask this process for a dump
    std::atomic<uint64_t> dumps_written;
    std::atomic<uint64_t> reports_written;

    // Format 1.1: the environment region. NUL-terminated "NAME=value" entries: the launcher's variables, NCCL_*,
    // TORCH_NCCL_*, TORCH_DISTRIBUTED_*, NCCLWATCH_* (secrets redacted), then facts the shim probed, named
    // "ncclwatch.*". One writer appends whole entries and then publishes env_bytes (release); bytes below env_bytes
    // never change, so a reader that loads env_bytes (acquire) may copy that many bytes. A 1.0 file has zeros here
    // (the header page is zero-filled), which reads as "no region".
    uint64_t env_offset;
    uint32_t env_capacity;
    uint32_t reserved1;
    std::atomic<uint64_t> env_bytes;

    // Format 1.5 (zero before): how the process ended, written once by the exit or signal path that saw it first
    // (end_kind last, release: a reader that sees it nonzero sees the other two).
    std::atomic<uint32_t> end_kind;     // EndKind
    std::atomic<int32_t> end_status;    // exit code, or signal number
    std::atomic<uint64_t> end_mono_ns;  // when

    // Format 1.5: the Python stacks region (zero before, or with capacity 0: none). The shim's own thread writes
    // every Python thread's stack into it with CPython's faulthandler routine: text as faulthandler prints it
    // ("Thread 0x... (most recent call first):", '  File "x.py", line 14 in f'), after one line per thread that
    // issued NCCL calls: "# ncclwatch nccl-thread 0x<pthread_t> tid <tid>". Seqlock: py_stacks_seq is odd while the
    // text and the fields after it change, even once they are published; a reader that sees the same even value
    // before and after its copy read one capture. Status and reason say what the text is (format_fields.h).
    uint64_t py_stacks_offset;
    uint32_t py_stacks_capacity;
    std::atomic<uint32_t> py_stacks_len;
    std::atomic<uint64_t> py_stacks_seq;
    std::atomic<uint64_t> py_stacks_mono_ns;
    std::atomic<uint32_t> py_stacks_reason;  // PyStacksReason
    std::atomic<uint32_t> py_stacks_status;  // PyStacksStatus

    // Format 1.5, appended last (zero: none, or a writer before it): communicators given no comm slot because every
    // slot was held by a live one (SlotTable::acquire); each counted once, at its init.
    std::atomic<uint64_t> comms_unslotted;

    // Format 1.7, appended last (zero: a writer before it), written once at creation for whoever judges the file later:
    // the stall timeout this process ran with (NCCLWATCH_TIMEOUT_SEC) and its watchdog's poll period, which sets how
    // old a heartbeat may grow (NCCLWATCH_POLL_MS), in milliseconds.
    uint32_t timeout_ms;
    uint32_t poll_ms;

    // Format 1.8, appended last (zero: none, or a writer before it): the held capture. The Python stacks region above
    // holds the newest capture, which the next one replaces (the exit's, a later stall's); this one keeps the first
    // capture taken for a stall (PyStacksReason Stall, DumpRequest, Suspected, InitHang) for the rest of the process,
    // so that after the end a report still shows where a rank was during the job's first stall, once it has moved
    // on. Its own region, seqlock and fields, as py_stacks_* say.
    uint64_t py_held_offset;
    uint32_t py_held_capacity;
    std::atomic<uint32_t> py_held_len;
    std::atomic<uint64_t> py_held_seq;
    std::atomic<uint64_t> py_held_mono_ns;
    std::atomic<uint32_t> py_held_reason;  // PyStacksReason
    std::atomic<uint32_t> py_held_status;  // PyStacksStatus

    // Format 1.9, appended last (zero: none, or a writer before it): the process's last words, what a Python rank
    // died of: an uncaught exception's type, message and the user's line ("torch.OutOfMemoryError: CUDA out of
    // memory. Tried to allocate 32.00 TiB (train.py:88)"), noted once through ncclwatch_note_exception (the launcher's
    // Python hook). The text is written first, NUL-terminated; last_words_mono_ns, nonzero, publishes it (release).
    std::atomic<uint64_t> last_words_mono_ns;
    uint32_t last_words_main;  // 1: raised in the main thread, so the interpreter is exiting
    uint32_t reserved2;
    char last_words[1024];
    // Format 1.9: the communicator teardown in progress (ncclCommDestroy, ncclCommFinalize or ncclCommAbort): the
    // communicator and the call are written as it begins, then its start time (release); the time goes back to 0 as
    // it returns. A teardown that hangs is seen from outside (the comm slot keeps its state until the call returns).
    std::atomic<uint64_t> teardown_comm_id;
    std::atomic<uint32_t> teardown_op;  // OpType: CommDestroy, CommFinalize or CommAbort
    uint32_t reserved3;
    std::atomic<uint64_t> teardown_since_ns;  // 0: none in progress

    // Format 1.12, appended last (zero: none, or a writer before it): the thread that took the end path (a fatal
    // signal's, the exit's), and the first ncclCommAbort's thread, communicator and start, by the kernel's names of
    // the threads (PR_GET_NAME, 15 characters). torch's NCCL watchdog ("pt_nccl_watchdg") raises SIGABRT when a
    // collective outlives the process group's timeout, or aborts the communicators first: how the job ended is told
    // by who ended it. end_thread is written before end_kind, which publishes it; the abort's fields before
    // abort_mono_ns (release).
    std::atomic<uint64_t> abort_mono_ns;  // 0: no abort
    uint64_t abort_comm_id;
    char abort_thread[16];
    char end_thread[16];

    // Format 1.13, appended last (zero: none, or a writer before it): the last SIGTERM or SIGINT that the program's
    // own handler took, the process going on (a checkpoint on preemption, a flag the loop reads). It stays: the end
    // recorded is how the process really ended (an exit 0 later, an exit with a code in response), and this says what
    // it had taken before. absorbed_signal is written before absorbed_mono_ns, which publishes it.
    std::atomic<uint64_t> absorbed_mono_ns;  // 0: none (the time of the last one, kAbsorbedWindowNs below)
    std::atomic<int32_t> absorbed_signal;
    uint32_t reserved4;

    // Format 1.15, appended last (zero: not known, or a writer before it): the shortest timeout this process's torch
    // process groups were made with (`timeout=` of init_process_group and new_group, or torch's default where none
    // was given), in ms, noted by the launcher's Python hook through ncclwatch_note_torch_timeout. torch's NCCL
    // watchdog ends a process whose collective outlives its group's timeout.
    std::atomic<uint32_t> torch_timeout_ms;
    // Format 1.15: the lines this process printed on stderr at the default level. The ranks of a node that share one
    // stderr share one budget of lines for a job's story (report/stderr_budget.h): each adds the others' to its own.
    std::atomic<uint32_t> stderr_lines;
};
static_assert(sizeof(FileHeader) <= kHeaderBytes, "FileHeader must fit in its page");
// How long a SIGTERM / SIGINT the program's own handler took keeps its end recorded (the shim undoes it after, the
// process having outlived it), and how soon after it an exit with a code counts as the answer to it (the engine).
inline constexpr uint64_t kAbsorbedWindowNs = 5'000'000'000ull;

// One collective signature, for cross-rank matching without reading the ring. Seqlock: `seq` is set to 0 before the
// fields change and to the sequence number after, so a reader that sees the same nonzero seq before and after its
// copy has a consistent entry.
struct OpSignature {
    std::atomic<uint64_t> seq;
    uint64_t count;
    uint64_t t_issue_ns;
    uint8_t op;  // OpType
    uint8_t dtype;
    uint8_t flags;
    uint8_t origin;  // RecordOrigin (1.10; zero before: a call)
    int32_t redop;   // ncclRedOp_t (may be a dynamic PreMulSum op)
    int32_t root;    // -1 for unrooted ops
    uint32_t tid;
    uint64_t stream;
};
static_assert(sizeof(OpSignature) == 48);

// Per communicator: identity and the progress block. Progress counters are collective sequence numbers (1-based;
// 0 = none yet) except ops_* which count every operation (collectives and p2p) on the communicator.
struct CommSlot {
    std::atomic<uint32_t> state;  // CommState
    std::atomic<uint32_t> stall_flags;
    int32_t rank;  // rank in this communicator, -1 until known
    int32_t nranks;
    int32_t cuda_dev;
    int32_t blocking;    // 1 blocking, 0 nonblocking, -1 default
    uint64_t comm_id;    // agreed by every rank: hash of the ncclUniqueId or of (parent id, split counter, color)
    uint64_t parent_id;  // 0 for a root communicator
    int32_t split_color;
    int32_t split_key;
    uint64_t comm_ptr;  // the ncclComm_t in this process, for matching a stack or a debugger session
    char pci_bus_id[32];
    char name[64];  // ncclConfig_t::commName if given
    uint64_t t_init_start_ns;
    uint64_t t_init_done_ns;

    std::atomic<uint64_t> coll_issued;     // last collective sequence number whose call was entered
    std::atomic<uint64_t> coll_returned;   // ... whose call returned
    std::atomic<uint64_t> coll_reached;    // ... that the GPU reached (all earlier work on its stream done)
    std::atomic<uint64_t> coll_completed;  // ... that completed (on the GPU, or on return without CUDA)
    std::atomic<uint64_t> ops_issued;
    std::atomic<uint64_t> ops_completed;
    std::atomic<uint64_t> t_last_issue_ns;
    std::atomic<uint64_t> t_last_progress_ns;  // last time ops_completed advanced
    std::atomic<uint64_t> p2p_sends;
    std::atomic<uint64_t> p2p_recvs;
    std::atomic<int32_t> async_error;      // last ncclResult_t seen from ncclCommGetAsyncError (0 = fine)
    std::atomic<uint32_t> gpu_tracking;    // 1 if reached/completed come from GPU events
    std::atomic<uint64_t> stall_since_ns;  // monotonic time the current stall began; 0 = none
    std::atomic<uint64_t> untracked_ops;
    // Format 1.3: a seqlock over the whole slot for its reuse by a later communicator. Odd while the slot is being
    // rewritten; a reader that sees the same even value before and after its copy read one communicator only. Zero
    // (even) in files before 1.3, whose slots are never reused.
    std::atomic<uint64_t> generation;
    // Format 1.4 (zero before: gpu_source None, so a reader falls back to gpu_tracking).
    std::atomic<uint32_t> gpu_source;  // GpuSource
    std::atomic<uint32_t> progress_exact;
    std::atomic<uint64_t> coll_unreached;
    std::atomic<uint64_t> coll_uncompleted;
    std::atomic<uint64_t> gpu_clock_uncertainty_ns;
    std::atomic<uint64_t> completion_gap_p99_ns;
    // Format 1.6 (zero before, and until known): the GPU's UUID as cuDeviceGetUuid gives it, the 16 bytes that
    // nvidia-smi and dcgm-exporter write as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
    alignas(8) uint8_t gpu_uuid[16];
    OpSignature recent[kRecentSigs];
    // Format 1.5 (absent before: a 1.4 slot ends at kCommSlotBytes14, readers zero the rest): calls that returned an
    // error are failed, never completed. The first failure's fields are written before ops_failed is raised.
    std::atomic<uint64_t> ops_failed;
    std::atomic<uint64_t> first_failed_seq;  // collective seq of the first failed call (0: a p2p op, or none)
    std::atomic<uint64_t> t_first_failed_ns;
    std::atomic<int32_t> first_failed_result;  // its ncclResult_t
    uint32_t reserved_end;
};
// The size of a comm slot before 1.5.
inline constexpr uint32_t kCommSlotBytes14 = offsetof(CommSlot, ops_failed);

struct OpRecord {
    // 2*ticket+1 while written, 2*ticket+2 once the issue-time fields are complete. 0: no record (never written;
    // before 1.11 also a writer overtaken by a lap while it wrote). Written by one thread at a time: the owner of the
    // ticket's chunk (shim/record/ring_publish.h).
    std::atomic<uint64_t> stamp;
    uint64_t comm_id;
    uint64_t seq;       // collective sequence number, or p2p sequence number per (comm, peer, direction)
    uint64_t op_index;  // per communicator, over every operation
    uint64_t count;
    uint64_t sendbuf;
    uint64_t recvbuf;
    uint64_t stream;
    uint64_t t_issue_ns;
    std::atomic<uint64_t> t_return_ns;
    std::atomic<uint64_t> t_reached_ns;
    std::atomic<uint64_t> t_done_ns;
    uint32_t tid;
    uint32_t group_id;  // 0 = not in a group
    uint8_t op;         // OpType
    uint8_t dtype;
    uint8_t flags;         // RecordFlags
    uint8_t origin;        // RecordOrigin (1.10; zero before: a call)
    int32_t peer_or_root;  // root for rooted collectives, peer for p2p, -1 otherwise
    int32_t redop;
    std::atomic<int32_t> result;  // ncclResult_t; -1 until the call returned
    uint16_t comm_slot;           // 0xffff: the communicator had no slot (1.3: more alive than max_comms)
    // Format 1.3 (zero before): the writer's size of and rank in the communicator (0 / -1 until known; size 0
    // above 65535), so that a communicator without a slot can be read from the ring alone.
    uint16_t comm_nranks;
    int32_t comm_rank;
};
static_assert(sizeof(OpRecord) == 128);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics must be lock-free");

// The lists of format_fields.h cover every byte of the structures they describe, besides the members named here: a
// field added to a structure but not to its list (or the reverse) fails to compile.
#define NCW_HEADER_BYTES(type, name, ...) +sizeof(FileHeader::name)
#define NCW_COMM_BYTES(type, name, ...) +sizeof(CommSlot::name)
#define NCW_SIG_BYTES(type, name, ...) +sizeof(OpSignature::name)
#define NCW_RECORD_BYTES(type, name, ...) +sizeof(OpRecord::name)
static_assert(sizeof(FileHeader) ==
                  sizeof(FileHeader::magic) NCW_HEADER_LAYOUT_FIELDS(NCW_HEADER_BYTES) +
                      sizeof(FileHeader::reserved0) NCW_HEADER_WRITER_FIELDS(NCW_HEADER_BYTES)
                          NCW_HEADER_LIVE_FIELDS(NCW_HEADER_BYTES) +
                      sizeof(FileHeader::env_offset) + sizeof(FileHeader::env_capacity) +
                      sizeof(FileHeader::reserved1) +
                      sizeof(FileHeader::env_bytes) NCW_HEADER_PY_STACKS_FIELDS(NCW_HEADER_BYTES)
                          NCW_HEADER_TAIL_FIELDS(NCW_HEADER_BYTES) NCW_HEADER_PY_HELD_FIELDS(NCW_HEADER_BYTES)
                              NCW_HEADER_LAST_WORDS_FIELDS(NCW_HEADER_BYTES)
                                  NCW_HEADER_TEARDOWN_FIELDS(NCW_HEADER_BYTES)
                                      NCW_HEADER_END_CAUSE_FIELDS(NCW_HEADER_BYTES)
                                          NCW_HEADER_ABSORBED_FIELDS(NCW_HEADER_BYTES)
                                              NCW_HEADER_NOTES_FIELDS(NCW_HEADER_BYTES) +
                      sizeof(FileHeader::reserved2) + sizeof(FileHeader::reserved3) + sizeof(FileHeader::reserved4),
              "FileHeader and the NCW_HEADER_*_FIELDS lists disagree");
static_assert(sizeof(CommSlot) == 0 NCW_COMM_FIELDS(NCW_COMM_BYTES) + sizeof(CommSlot::generation) +
                                      sizeof(CommSlot::recent) + sizeof(CommSlot::reserved_end),
              "CommSlot and NCW_COMM_FIELDS disagree");
static_assert(sizeof(OpSignature) == 0 NCW_SIG_FIELDS(NCW_SIG_BYTES), "OpSignature and NCW_SIG_FIELDS disagree");
static_assert(sizeof(OpRecord) == sizeof(OpRecord::stamp) NCW_RECORD_FIELDS(NCW_RECORD_BYTES) +
                                      sizeof(OpRecord::comm_nranks) + sizeof(OpRecord::comm_rank),
              "OpRecord and NCW_RECORD_FIELDS disagree");
#undef NCW_HEADER_BYTES
#undef NCW_COMM_BYTES
#undef NCW_SIG_BYTES
#undef NCW_RECORD_BYTES

// Where the regions of a file lie, and the sizes they were computed from.
struct Layout {
    uint32_t ring_capacity = 0;
    uint32_t max_comms = 0;
    uint32_t bt_depth = 0;
    uint32_t comm_slot_size = sizeof(CommSlot);
    uint32_t record_size = sizeof(OpRecord);
    uint64_t comm_table_offset = 0;
    uint64_t ring_offset = 0;
    uint64_t bt_offset = 0;
    uint64_t env_offset = 0;  // 0 with env_capacity 0: no environment region
    uint32_t env_capacity = 0;
    uint64_t py_stacks_offset = 0;  // 0 with py_stacks_capacity 0: no Python stacks region
    uint32_t py_stacks_capacity = 0;
    uint64_t py_held_offset = 0;  // 0 with py_held_capacity 0: no held capture
    uint32_t py_held_capacity = 0;
    uint64_t file_size = 0;
};

inline constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline constexpr Layout compute_layout(uint32_t ring_capacity, uint32_t max_comms, uint32_t bt_depth) {
    Layout l{};
    l.ring_capacity = ring_capacity;
    l.max_comms = max_comms;
    l.bt_depth = bt_depth;
    l.comm_table_offset = kHeaderBytes;
    l.ring_offset = align_up(l.comm_table_offset + uint64_t(max_comms) * sizeof(CommSlot), 4096);
    l.bt_offset = align_up(l.ring_offset + uint64_t(ring_capacity) * sizeof(OpRecord), 4096);
    l.env_offset = align_up(l.bt_offset + uint64_t(ring_capacity) * bt_depth * sizeof(uint64_t), 4096);
    l.env_capacity = kEnvCapacity;
    l.py_stacks_offset = align_up(l.env_offset + l.env_capacity, 4096);
    l.py_stacks_capacity = kPyStacksCapacity;
    l.py_held_offset = align_up(l.py_stacks_offset + l.py_stacks_capacity, 4096);
    l.py_held_capacity = kPyStacksCapacity;
    l.file_size = align_up(l.py_held_offset + l.py_held_capacity, 4096);
    return l;
}

inline constexpr bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

inline const char* op_name(uint8_t op) {
    switch (OpType(op)) {
#define NCW_OP_CASE(name, value) \
    case OpType::name: return #name;
        NCW_OP_TYPES(NCW_OP_CASE)
#undef NCW_OP_CASE
    }
    return "Unknown";
}

// Names follow nccl.h's ncclDataType_t values.
inline const char* dtype_name(uint8_t dt) {
    static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",      "uint64",
                                        "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
    return dt < sizeof(names) / sizeof(names[0]) ? names[dt] : "unknown";
}

inline uint32_t dtype_size(uint8_t dt) {
    static const uint8_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return dt < sizeof(sizes) ? sizes[dt] : 0;
}

inline const char* redop_name(int32_t op) {
    static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
    return op >= 0 && op < 5 ? names[op] : "premulsum";
}

inline const char* comm_state_name(uint32_t s) {
    using State = CommState;  // NCW_STATE_CASE names the enum through this alias, here and below
    switch (State(s)) {
#define NCW_STATE_CASE(name, value, show_name) \
    case State::name: return show_name;
        NCW_COMM_STATES(NCW_STATE_CASE)
    }
    return "unknown";
}

inline const char* gpu_source_name(uint32_t s) {
    using State = GpuSource;
    switch (State(s)) { NCW_GPU_SOURCES(NCW_STATE_CASE) }
    return "unknown";
}

inline const char* py_stacks_reason_name(uint32_t s) {
    using State = PyStacksReason;
    switch (State(s)) { NCW_PY_STACKS_REASONS(NCW_STATE_CASE) }
    return "unknown";
}

inline const char* py_stacks_status_name(uint32_t s) {
    using State = PyStacksStatus;
    switch (State(s)) { NCW_PY_STACKS_STATUSES(NCW_STATE_CASE) }
    return "unknown";
}

inline const char* process_state_name(uint32_t s) {
    using State = ProcessState;
    switch (State(s)) { NCW_PROCESS_STATES(NCW_STATE_CASE) }
    return "unknown";
}

inline const char* end_kind_name(uint32_t s) {
    using State = EndKind;
    switch (State(s)) {
        NCW_END_KINDS(NCW_STATE_CASE)
#undef NCW_STATE_CASE
    }
    return "unknown";
}

inline const char* record_origin_name(uint8_t v) {
    switch (RecordOrigin(v)) {
#define NCW_ORIGIN_CASE(name, value, show_name) \
    case RecordOrigin::name: return show_name;
        NCW_RECORD_ORIGINS(NCW_ORIGIN_CASE)
#undef NCW_ORIGIN_CASE
    }
    return "unknown";
}

// The short name of one RecordFlags bit ("group", "bt", ...); nullptr for a bit this format does not define.
inline const char* flag_name(uint8_t bit_value) {
    switch (bit_value) {
#define NCW_FLAG_CASE(name, bit, short_name) \
    case uint8_t(1u << bit): return short_name;
        NCW_RECORD_FLAGS(NCW_FLAG_CASE)
#undef NCW_FLAG_CASE
    }
    return nullptr;
}

// Fills a new header's format and layout fields: everything but who wrote the file, its live state and the magic
// (seal_header). The writer, the benchmarks and the test fixtures all start a file here; a fixture that wants odd
// strides or no environment region passes a Layout of its own.
inline void init_header(FileHeader& h, const Layout& l) {
    h.major = kFormatMajor;
    h.minor = kFormatMinor;
    h.header_size = kHeaderBytes;
    h.comm_slot_size = l.comm_slot_size;
    h.max_comms = l.max_comms;
    h.record_size = l.record_size;
    h.ring_capacity = l.ring_capacity;
    h.bt_depth = l.bt_depth;
    h.comm_table_offset = l.comm_table_offset;
    h.ring_offset = l.ring_offset;
    h.bt_offset = l.bt_offset;
    h.env_offset = l.env_offset;
    h.env_capacity = l.env_capacity;
    h.env_bytes.store(0, std::memory_order_relaxed);
    h.py_stacks_offset = l.py_stacks_offset;
    h.py_stacks_capacity = l.py_stacks_capacity;
    h.py_stacks_len.store(0, std::memory_order_relaxed);
    h.py_stacks_seq.store(0, std::memory_order_relaxed);
    h.py_held_offset = l.py_held_offset;
    h.py_held_capacity = l.py_held_capacity;
    h.py_held_len.store(0, std::memory_order_relaxed);
    h.py_held_seq.store(0, std::memory_order_relaxed);
    h.file_size = l.file_size;
}

// Stores the magic, last: a sibling that reads the file while it is being created sees no valid header until every
// field before it is visible (release fence; readers load the magic with acquire).
inline void seal_header(FileHeader& h) {
    std::atomic_thread_fence(std::memory_order_release);
    memcpy(h.magic, kMagic, sizeof(h.magic));
}

}  // namespace ncw::disk
