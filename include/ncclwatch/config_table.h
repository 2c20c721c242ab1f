// Every NCCLWATCH_* environment variable, in one table: name, kind, type, default, accepted values, description.
// The shim generates ncw::Config from it and parses it (shim/base/config.h, shim/base/config.cpp);
// `ncclwatch-collector env` prints it. Adding a variable is one line here.
//
// X(FIELD, NAME, KIND, TYPE, DEFAULT, ACCEPTED, DESCRIPTION)
//   KIND: Bool, Int, Double, String, Enum. For Int/Double, ACCEPTED is "min..max". For Enum, "a|b|c".
//   TYPE: the ncw::Config member's type. An Enum of an enum TYPE lists its values in ACCEPTED's order.
//   DEFAULT: the value Config starts with, as the variable would spell it (checked at compile time), except for the
//     fields of NCW_CONFIG_DERIVED, where it says how parse_config derives the value.
#pragma once
// clang-format off

#define NCW_CONFIG_TABLE(X)                                                                                          \
    X(enable, "NCCLWATCH_ENABLE", Bool, bool, "1", "0|1",                                                            \
      "0 makes the shim a pure pass-through: no thread, no file, no record")                                         \
    X(dir, "NCCLWATCH_DIR", String, std::string, "${TMPDIR:-/tmp}/ncclwatch", "a writable folder",                   \
      "Root folder for rank files and reports; each job gets its own subfolder")                                     \
    X(job_id, "NCCLWATCH_JOB_ID", String, std::string, "(from the launcher)", "letters, digits, '.', '_', '-'",      \
      "Job folder name; default derived from SLURM/torchrun/OpenMPI variables so ranks of one job share it")         \
    X(timeout_sec, "NCCLWATCH_TIMEOUT_SEC", Double, double, "60", "0.1..86400",                                      \
      "Seconds without completion progress, with an operation outstanding, before a stall is reported")              \
    X(poll_ms, "NCCLWATCH_POLL_MS", Int, int, "100", "10..5000",                                                     \
      "Watchdog poll period; the verdict lands within one poll (plus the sibling read) of the timeout")              \
    X(action, "NCCLWATCH_ACTION", Enum, Action, "report", "report|abort|kill",                                       \
      "After a stall report: nothing more; abort: the stuck ops fail so the framework raises (ncclCommRevoke, "      \
      "or ncclCommAbort before NCCL 2.28.7); kill: SIGABRT this process")                                            \
    X(ring_size, "NCCLWATCH_RING_SIZE", Int, int, "16384", "256..4194304",                                           \
      "Records in the per-process ring (rounded up to a power of two); 128 bytes each")                              \
    X(gpu_events, "NCCLWATCH_GPU_EVENTS", Bool, bool, "1", "0|1",                                                    \
      "Track GPU completion with pooled CUDA events (needs libcuda.so.1); 0 = an op completes when its call returns") \
    X(gpu_reached, "NCCLWATCH_GPU_REACHED", Bool, bool, "1", "0|1",                                                  \
      "Also record an event before each op to tell 'GPU busy with earlier work' from 'stuck in NCCL'")               \
    X(gpu_sample, "NCCLWATCH_GPU_SAMPLE", Enum, GpuSample, "auto", "auto|all",                                       \
      "Which ops carry their own GPU events. auto: the first op on a stream after a pause of 1 ms or more, or once " \
      "the previous sampled op completed; the others complete by stream order (no cost on small-message latency). "  \
      "all: every op (each reached/completed exactly; about 1 us more per op at 8 bytes)")                           \
    X(profiler, "NCCLWATCH_PROFILER", Enum, ProfilerMode, "auto", "auto|off|empty",                                  \
      "GPU start and end of every collective (NCCL 2.26+) and every send and receive (2.28+) from NCCL's profiler "   \
      "interface: the shim is also NCCL's "                                                                          \
      "profiler plugin, pointed at through NCCL_PROFILER_PLUGIN=STATIC_PLUGIN when that is unset (a plugin set by "  \
      "the user is kept; CUDA events then; and on NCCL 2.31, whose profiler costs up to 10 % with kernel events "    \
      "on, CUDA events too). off: CUDA events only. empty: NCCL's events on, ours ignored (a cost measurement)")      \
    X(backtrace, "NCCLWATCH_BACKTRACE", Bool, bool, "0", "0|1",                                                      \
      "Record the native call stack of each call (libunwind opened at run time), symbolised at dump time")           \
    X(backtrace_depth, "NCCLWATCH_BACKTRACE_DEPTH", Int, int, "16", "1..32",                                         \
      "Frames kept per call with NCCLWATCH_BACKTRACE=1")                                                             \
    X(dump_at_exit, "NCCLWATCH_DUMP_AT_EXIT", Bool, bool, "0", "0|1", "Write a dump when the process exits normally") \
    X(py_stacks, "NCCLWATCH_PY_STACKS", Bool, bool, "1", "0|1",                                                      \
      "In a CPython process, every Python thread's stack (CPython's faulthandler dump, from the shim's own thread, "  \
      "never the GIL) into the rank file and the dump at each stall, dump request and final verdict; the reports "   \
      "name the culprit's frame. CPython 3.8-3.12 and 3.15+; 3.13 and 3.14 read from their debug offsets instead")   \
    X(mismatch_check, "NCCLWATCH_MISMATCH_CHECK", Bool, bool, "1", "0|1",                                            \
      "Compare recent operation signatures with sibling ranks continuously and report a MISMATCH at once")           \
    X(suspect, "NCCLWATCH_SUSPECT", Bool, bool, "1", "0|1",                                                          \
      "Report a stall as suspected before the timeout, once it passes max(20 x the communicator's p99 gap between "  \
      "completions, 5 s): a line, a report event, the live collector's ncclwatch_comm_suspected. 0: no baseline "    \
      "kept, nothing suspected")                                                                                     \
    X(nccl_library, "NCCLWATCH_NCCL_LIBRARY", String, std::string, "", "a path to libnccl.so.2",                     \
      "Last resort for finding the real NCCL when neither RTLD_NEXT nor an already loaded libnccl.so.2 has it")      \
    X(log_level, "NCCLWATCH_LOG_LEVEL", Enum, std::string, "info", "trace|debug|info|warn|error|off",                \
      "Verbosity of the shim's own messages on stderr. info: one report per node and event (the verdict, then at "   \
      "most 8 lines of evidence; the rest in the report file), one dump line per node, the other ranks quiet where "  \
      "they share the reporter's stderr; debug: every rank's lines in full")                                         \
    X(log_format, "NCCLWATCH_LOG_FORMAT", Enum, LogFormat, "short", "short|full",                                    \
      "Prefix of the shim's stderr lines. short: the global rank, '[ncclwatch r3] ' (the time and pid are in the "   \
      "report and dump files); full: '[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: '")            \
    X(collector, "NCCLWATCH_COLLECTOR", String, std::string, "", "'' (off), HOST:PORT, [IPv6]:PORT or auto",         \
      "Live collector each rank streams digests to over TCP; auto: global rank 0 runs it on MASTER_ADDR "            \
      "(on 127.0.0.1 only without NCCLWATCH_TOKEN)")                                                                 \
    X(collector_port, "NCCLWATCH_COLLECTOR_PORT", Int, int, "MASTER_PORT+1, or 29610", "1..65535",                   \
      "Port of the live collector with NCCLWATCH_COLLECTOR=auto")                                                    \
    X(metrics_port, "NCCLWATCH_METRICS_PORT", Int, int, "the collector's port + 1", "1..65535",                     \
      "Port of /metrics on the live collector that NCCLWATCH_COLLECTOR=auto runs in global rank 0")                 \
    X(token, "NCCLWATCH_TOKEN", String, std::string, "", "any string",                                               \
      "Shared secret a rank proves to the live collector (HMAC over a nonce; never sent, never printed)")           \
    X(digest_ms, "NCCLWATCH_DIGEST_MS", Int, int, "200", "10..10000",                                                \
      "Least interval between two live digests of one rank (sent only when something changed)")                      \
    X(dead_after_sec, "NCCLWATCH_DEAD_AFTER_SEC", Double, double, "10", "1..3600",                                   \
      "Live collector: seconds after a rank's connection is lost before it is reported DEAD")

// Fields whose default parse_config derives (Config starts them empty or 0): the folder from TMPDIR, the job id from
// the launcher's variables, the collector port from MASTER_PORT; the metrics port (0) is the collector's port + 1 where
// the embedded collector starts (shim/live/collector_endpoint.cpp).
#define NCW_CONFIG_DERIVED(X) X(dir) X(job_id) X(collector_port) X(metrics_port)
// clang-format on
