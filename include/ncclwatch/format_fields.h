// The lists of the rank-file format, one per concept, as X-macros (the Darshan way): every place that names the
// fields one by one (the reader's structs and its copy out of the mapping, the live protocol's codec, the JSON, the
// verdict engine's input, the time base) expands one of these lists instead of writing it again. format.h holds the
// on-disk structures themselves (their layout is the format) and checks at compile time that the lists cover them.
//
// Field lists: X(TYPE, NAME, INIT, SHOW) and for communicators X(TYPE, NAME, INIT, SHOW, ENGINE)
//   TYPE   the value as a reader holds it: u8 u16 u32 u64 i32 i64, or str (a fixed char field, read up to its NUL);
//          also the live protocol's encoding of it (lib/read/wire_fields.cpp)
//   NAME   the member, the same in the disk structure and in the reader's struct (and the wire's error messages)
//   INIT   the reader's value before anything was read
//   SHOW   what the value is, which decides how it renders and whether the time base moves it:
//          num (a count or text, as is), hidden (layout the renderings leave out), id (0x%016x), id0 (id, or null
//          when 0), ptr (an address, 0x%x), mono (a CLOCK_MONOTONIC instant, 0 = never: rebased, shown in ms),
//          op, dtype, redop (names), cstate / pstate / gsource (comm / process state, GPU source names), flag (a
//          boolean), rflags (RecordFlags names), rorigin (RecordOrigin name)
//   ENGINE the verdict::RankCommState member it feeds (read/rank_state.h), empty for none
//
// Order is the live protocol's field order: append only, like the format itself.
#pragma once
// clang-format off

// Operation kinds: X(NAME, VALUE). Values are part of the format: append only. NAME is also op_name().
#define NCW_OP_TYPES(X)                                                                                              \
    X(None, 0)                                                                                                       \
    X(AllReduce, 1)                                                                                                  \
    X(Broadcast, 2) /* ncclBcast is recorded as Broadcast: NCCL treats them as the same operation */                 \
    X(Reduce, 3)                                                                                                     \
    X(AllGather, 4)                                                                                                  \
    X(ReduceScatter, 5)                                                                                              \
    X(AlltoAll, 6)                                                                                                   \
    X(Gather, 7)                                                                                                     \
    X(Scatter, 8)                                                                                                    \
    X(Send, 9)                                                                                                       \
    X(Recv, 10)                                                                                                      \
    /* Lifecycle events: they take no sequence number and never take part in matching. */                            \
    X(CommInit, 32)                                                                                                  \
    X(CommSplit, 33)                                                                                                 \
    X(CommShrink, 34)                                                                                                \
    X(CommFinalize, 35)                                                                                              \
    X(CommDestroy, 36)                                                                                               \
    X(CommAbort, 37)                                                                                                 \
    X(CommRevoke, 38)                                                                                                \
    X(AsyncError, 39)                                                                                                \
    /* 1.14: NCCL 2.29's calls. A grown communicator's init (its ops then follow as any communicator's); a */       \
    /* communicator's resources released and taken back; one-sided calls into a peer's window, which no peer */     \
    /* pairs with an op of its own (ARG: the peer, or for a wait on several peers -1). */                            \
    X(CommGrow, 40)                                                                                                  \
    X(CommSuspend, 41)                                                                                               \
    X(CommResume, 42)                                                                                                \
    X(PutSignal, 43)                                                                                                 \
    X(Signal, 44)                                                                                                    \
    X(WaitSignal, 45)

// OpRecord::flags (and OpSignature::flags): X(NAME, BIT, SHORT_NAME)
#define NCW_RECORD_FLAGS(X)                                                                                          \
    X(kFlagInGroup, 0, "group")          /* issued between ncclGroupStart/End: launched at the outermost GroupEnd */ \
    X(kFlagCaptured, 1, "captured")      /* stream under CUDA graph capture: no event, completion not tracked */     \
    X(kFlagUntracked, 2, "untracked")    /* no GPU completion tracking (no CUDA, pool exhausted, disabled) */        \
    X(kFlagDeferred, 3, "deferred")      /* nonblocking communicator returned ncclInProgress: event recorded later */ \
    X(kFlagNonBlocking, 4, "nonblocking") /* communicator was created with config.blocking = 0 */                    \
    X(kFlagHasBacktrace, 5, "bt")                                                                                    \
    /* 1.2: the op carried no GPU events of its own (NCCLWATCH_GPU_SAMPLE=auto): its completion was inferred from */ \
    /* a later event on its stream, and whether its GPU reached it is not known while it is outstanding. */          \
    X(kFlagSampledOut, 6, "sampled_out")                                                                        \
    /* 1.4: t_reached_ns / t_done_ns are the GPU's own: the first channel's start and the last channel's stop */    \
    /* reported by NCCL's profiler interface (GPU globaltimer, converted to this file's clock). */                  \
    X(kFlagGpuTimed, 7, "gpu_timed")

// OpRecord::origin (1.10), what issued the record: X(NAME, VALUE, SHOW_NAME)
#define NCW_RECORD_ORIGINS(X)                                                                                        \
    X(Call, 0, "call")     /* the application's call into NCCL */                                                    \
    X(Replay, 1, "replay") /* a launch of a CUDA graph that holds this captured op: NCCL runs it again, and the */   \
                           /* peers pair each run with an op of their own, so it takes a sequence number */

// CommSlot::state: X(NAME, VALUE, SHOW_NAME)
#define NCW_COMM_STATES(X)                                                                                           \
    X(Free, 0, "free")                                                                                               \
    X(Initializing, 1, "initializing")                                                                               \
    X(Active, 2, "active")                                                                                           \
    X(Finalized, 3, "finalized")                                                                                     \
    X(Destroyed, 4, "destroyed")                                                                                     \
    X(Aborted, 5, "aborted")                                                                                         \
    X(Revoked, 6, "revoked")                                                                                         \
    X(InitFailed, 7, "init-failed")

// CommSlot::gpu_source (1.4), where reached / completed come from: X(NAME, VALUE, SHOW_NAME)
//   None: the call's return (no GPU tracking); Events: CUDA events, sampled (NCCLWATCH_GPU_SAMPLE), lower bounds;
//   Profiler: NCCL's profiler interface, the GPU start and end of every op (exact while progress_exact is set).
#define NCW_GPU_SOURCES(X)                                                                                           \
    X(None, 0, "none")                                                                                               \
    X(Events, 1, "cuda-events")                                                                                      \
    X(Profiler, 2, "nccl-profiler")

// FileHeader::process_state: X(NAME, VALUE, SHOW_NAME)
#define NCW_PROCESS_STATES(X)                                                                                        \
    X(Running, 1, "running")                                                                                         \
    X(ExitedClean, 2, "exited cleanly")                                                                              \
    X(Forked, 3, "forked child")

// FileHeader::end_kind (1.5), how the process ended: X(NAME, VALUE, SHOW_NAME). end_status is the exit code (Exit)
// or the signal number (FatalSignal, Terminated).
#define NCW_END_KINDS(X)                                                                                             \
    X(None, 0, "none")                     /* still running, or ended without a trace (SIGKILL, power) */             \
    X(Exit, 1, "exit")                     /* exit, return from main, _exit, _Exit (Python's os._exit) */             \
    X(FatalSignal, 2, "fatal signal")      /* SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT */                             \
    X(Terminated, 3, "terminated by signal") /* SIGTERM, SIGINT (a launcher's teardown, Ctrl-C) */

// FileHeader::py_stacks_reason (1.5), why the Python stacks were captured: X(NAME, VALUE, SHOW_NAME)
#define NCW_PY_STACKS_REASONS(X)                                                                                     \
    X(None, 0, "none")                                                                                               \
    X(Stall, 1, "stall")                    /* this process's watchdog found a stall (before wording the report) */  \
    X(DumpRequest, 2, "dump request")       /* a sibling rank or the live collector asked for a dump */              \
    X(Sigusr1, 3, "SIGUSR1")                                                                                         \
    X(FinalVerdict, 4, "final verdict")     /* the process is ending (SIGTERM, fatal signal): its last stacks */     \
    X(Exit, 5, "exit")                      /* the dump at a normal exit (NCCLWATCH_DUMP_AT_EXIT) */                 \
    X(Suspected, 6, "suspected")            /* early suspicion of a stall */                                         \
    X(InitHang, 7, "init hang")

// FileHeader::py_stacks_status (1.5), what the region holds: X(NAME, VALUE, SHOW_NAME)
//   NotPython: no CPython in the process (Py_IsInitialized absent, or not 1); Unavailable: a CPython that exports
//   no lock-free dump and whose debug offsets the shim does not know (3.13 and 3.14's it reads), the region's text
//   says which version; Failed: the dump returned an error.
#define NCW_PY_STACKS_STATUSES(X)                                                                                    \
    X(None, 0, "not captured")                                                                                       \
    X(Captured, 1, "captured")                                                                                       \
    X(NotPython, 2, "not python")                                                                                    \
    X(Unavailable, 3, "unavailable on this CPython")                                                                 \
    X(Disabled, 4, "disabled")                                                                                       \
    X(Failed, 5, "failed")

// FileHeader, part 1: the layout, as the header declares it. (A reader also notes actual_size, the bytes on disk,
// which the live protocol sends right after this part.)
#define NCW_HEADER_LAYOUT_FIELDS(X)                                                                                  \
    X(u16, major, 0, hidden)                                                                                         \
    X(u16, minor, 0, hidden)                                                                                         \
    X(u32, header_size, 0, num)                                                                                      \
    X(u32, comm_slot_size, 0, num)                                                                                   \
    X(u32, max_comms, 0, num)                                                                                        \
    X(u32, record_size, 0, num)                                                                                      \
    X(u32, ring_capacity, 0, num)                                                                                    \
    X(u32, bt_depth, 0, num)                                                                                         \
    X(u64, comm_table_offset, 0, hidden)                                                                             \
    X(u64, ring_offset, 0, hidden)                                                                                   \
    X(u64, bt_offset, 0, hidden)                                                                                     \
    X(u64, file_size, 0, num)

// FileHeader, part 2: who wrote the file. X(TYPE, NAME, INIT, SHOW, ENGINE)
#define NCW_HEADER_WRITER_FIELDS(X)                                                                                  \
    X(i64, pid, 0, num, pid)                                                                                         \
    X(i32, global_rank, -1, num, global_rank)                                                                        \
    X(i32, local_rank, -1, num, local_rank)                                                                          \
    X(i32, world_size, -1, num, world_size)                                                                          \
    X(i32, local_world_size, -1, num, local_world_size)                                                              \
    X(str, host, {}, num, host)                                                                                      \
    X(str, job_id, {}, num, )                                                                                        \
    X(u64, start_mono_ns, 0, num, )                                                                                  \
    X(u64, start_real_ns, 0, num, )                                                                                  \
    X(u64, boot_id_hash, 0, id, )                                                                                    \
    X(i32, nccl_version, 0, num, )                                                                                   \
    X(i32, cuda_driver_version, 0, num, )

// FileHeader, part 3: live state.
#define NCW_HEADER_LIVE_FIELDS(X)                                                                                    \
    X(u64, heartbeat_mono_ns, 0, num)                                                                                \
    X(u32, process_state, 0, pstate)                                                                                 \
    X(u32, num_comms, 0, num)                                                                                        \
    X(u64, write_ticket, 0, num)                                                                                     \
    X(u64, dump_request, 0, num)                                                                                     \
    X(u64, dumps_written, 0, num)                                                                                    \
    X(u64, reports_written, 0, num)                                                                              \
    /* 1.5 (zero before: not recorded): how the process ended (EndKind), its exit code or signal, and when. */     \
    X(u32, end_kind, 0, ekind)                                                                                   \
    X(i32, end_status, 0, num)                                                                                   \
    X(u64, end_mono_ns, 0, mono)

// FileHeader, part 4 (1.5, zero before): the Python stacks region, a seqlock-published text (format.h).
#define NCW_HEADER_PY_STACKS_FIELDS(X)                                                                               \
    X(u64, py_stacks_offset, 0, hidden)                                                                              \
    X(u32, py_stacks_capacity, 0, num)                                                                               \
    X(u32, py_stacks_len, 0, num)                                                                                    \
    X(u64, py_stacks_seq, 0, num)        /* odd while the text is rewritten */                                       \
    X(u64, py_stacks_mono_ns, 0, num)    /* when it was captured (CLOCK_MONOTONIC of the writer) */                  \
    X(u32, py_stacks_reason, 0, pyreason)                                                                            \
    X(u32, py_stacks_status, 0, pystatus)

// FileHeader, part 5, appended last (zero: none, or a writer before it). 1.5: communicators that found no free comm
// slot (more than max_comms alive at once), watched in the writer's memory only; their progress is in the ring alone.
// 1.7: the stall timeout and the watchdog's poll period the writer ran with, in ms (a reader fills them from an older
// file's environment region).
#define NCW_HEADER_TAIL_FIELDS(X)                                                                                    \
    X(u64, comms_unslotted, 0, num)                                                                                  \
    X(u32, timeout_ms, 0, num)                                                                                       \
    X(u32, poll_ms, 0, num)

// FileHeader, part 6 (1.8, zero before): the held Python stacks capture (format.h), published as part 4's. Not in the
// live protocol.
#define NCW_HEADER_PY_HELD_FIELDS(X)                                                                                 \
    X(u64, py_held_offset, 0, hidden)                                                                                \
    X(u32, py_held_capacity, 0, num)                                                                                 \
    X(u32, py_held_len, 0, num)                                                                                      \
    X(u64, py_held_seq, 0, num)                                                                                      \
    X(u64, py_held_mono_ns, 0, num)                                                                                  \
    X(u32, py_held_reason, 0, pyreason)                                                                              \
    X(u32, py_held_status, 0, pystatus)

// FileHeader, part 7 (1.9, zero before): the process's last words (format.h), published by their time; the time first,
// so that a reader that sees it reads the text after it. In the live protocol, after part 3 (wire_fields.cpp).
#define NCW_HEADER_LAST_WORDS_FIELDS(X)                                                                              \
    X(u64, last_words_mono_ns, 0, num)                                                                               \
    X(u32, last_words_main, 0, flag)                                                                                 \
    X(str, last_words, {}, num)

// FileHeader, part 8 (1.9, zero before): the communicator teardown in progress (format.h); its start time first (0:
// none), read before what it publishes. In the live protocol after part 7.
#define NCW_HEADER_TEARDOWN_FIELDS(X)                                                                                \
    X(u64, teardown_since_ns, 0, num)                                                                                \
    X(u64, teardown_comm_id, 0, id)                                                                                  \
    X(u32, teardown_op, 0, num)

// FileHeader, part 9 (1.12, zero before): who ended the process and who aborted a communicator first (format.h); the
// abort's start first (0: none), read before what it publishes. In the live protocol after part 8 (1.14).
#define NCW_HEADER_END_CAUSE_FIELDS(X)                                                                               \
    X(u64, abort_mono_ns, 0, mono)                                                                                   \
    X(u64, abort_comm_id, 0, id)                                                                                     \
    X(str, abort_thread, {}, num)                                                                                    \
    X(str, end_thread, {}, num)

// FileHeader, part 10 (1.13, zero before): the last termination signal the program's own handler took and went on
// after (format.h); its time first (0: none), read before what it publishes. In the live protocol after part 9 (1.15).
#define NCW_HEADER_ABSORBED_FIELDS(X)                                                                                \
    X(u64, absorbed_mono_ns, 0, mono)                                                                                \
    X(i32, absorbed_signal, 0, num)

// FileHeader, part 11 (1.15, zero before): what the writer notes for the node's other ranks: the shortest timeout of
// its torch process groups, the lines it printed on stderr (format.h). Not in the live protocol.
#define NCW_HEADER_NOTES_FIELDS(X)                                                                                   \
    X(u32, torch_timeout_ms, 0, num)                                                                                 \
    X(u32, stderr_lines, 0, num)

// CommSlot, every field but its seqlock and the signature window: the fields up to 1.5, then those of 1.6 on. The
// live protocol writes the second list after the signatures and GPU spans of a comm block (wire_fields.cpp), where
// an older decoder stops reading; every other use expands NCW_COMM_FIELDS, both lists.
#define NCW_COMM_FIELDS(X) NCW_COMM_FIELDS_1_5(X) NCW_COMM_FIELDS_1_6(X)
#define NCW_COMM_FIELDS_1_5(X)                                                                                       \
    X(u32, state, 0, cstate, comm_state)                                                                             \
    X(u32, stall_flags, 0, num, )                                                                                    \
    X(i32, rank, -1, num, comm_rank)                                                                                 \
    X(i32, nranks, 0, num, nranks_declared)                                                                          \
    X(i32, cuda_dev, -1, num, cuda_dev)                                                                              \
    X(i32, blocking, -1, num, blocking)                                                                              \
    X(u64, comm_id, 0, id, )                                                                                         \
    X(u64, parent_id, 0, id0, )                                                                                      \
    X(i32, split_color, 0, num, )                                                                                    \
    X(i32, split_key, 0, num, )                                                                                      \
    X(u64, comm_ptr, 0, ptr, )                                                                                       \
    X(str, pci_bus_id, {}, num, pci_bus_id)                                                                          \
    X(str, name, {}, num, )                                                                                          \
    X(u64, t_init_start_ns, 0, mono, t_init_start_ns)                                                                \
    X(u64, t_init_done_ns, 0, mono, t_init_done_ns)                                                                  \
    X(u64, coll_issued, 0, num, issued)                                                                              \
    X(u64, coll_returned, 0, num, returned)                                                                          \
    X(u64, coll_reached, 0, num, reached)                                                                            \
    X(u64, coll_completed, 0, num, completed)                                                                        \
    X(u64, ops_issued, 0, num, )                                                                                     \
    X(u64, ops_completed, 0, num, )                                                                                  \
    X(u64, t_last_issue_ns, 0, mono, t_last_issue_ns)                                                                \
    X(u64, t_last_progress_ns, 0, mono, t_last_progress_ns)                                                          \
    X(u64, p2p_sends, 0, num, )                                                                                      \
    X(u64, p2p_recvs, 0, num, )                                                                                      \
    X(i32, async_error, 0, num, async_error)                                                                         \
    X(u32, gpu_tracking, 0, flag, gpu_tracking)                                                                      \
    X(u64, stall_since_ns, 0, mono, stall_since_ns)                                                                  \
    X(u64, untracked_ops, 0, num, )                                                                                  \
    /* 1.4 (zero before): what reached / completed are worth. */                                                     \
    X(u32, gpu_source, 0, gsource, gpu_source)                                                                       \
    X(u32, progress_exact, 0, flag, progress_exact) /* 1: reached / completed are exact, not lower bounds */         \
    X(u64, coll_unreached, 0, num, unreached) /* lowest seq proven not reached by the GPU; 0: none proven */         \
    X(u64, coll_uncompleted, 0, num, uncompleted) /* lowest seq proven not completed by the GPU; 0: none proven */   \
    X(u64, gpu_clock_uncertainty_ns, 0, num, ) /* how far GPU times may be off once converted to our clock */        \
    X(u64, completion_gap_p99_ns, 0, num, completion_gap_p99_ns) /* running baseline of gaps between completions */ \
    /* 1.5 (zero before): calls that returned an error (neither success nor in-progress), never counted completed */ \
    X(u64, ops_failed, 0, num, ops_failed)                                                                       \
    X(u64, first_failed_seq, 0, num, first_failed_seq) /* collective seq of the first failed call (0: a p2p op) */ \
    X(i32, first_failed_result, 0, num, first_failed_result) /* its ncclResult_t */                              \
    X(u64, t_first_failed_ns, 0, mono, t_first_failed_ns) /* when it returned */
// CommSlot, 1.6 on (zero before): the GPU's UUID, read as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" ("" unknown).
#define NCW_COMM_FIELDS_1_6(X)                                                                                       \
    X(str, gpu_uuid, {}, num, gpu_uuid)

// OpSignature (one entry of CommSlot::recent), without its reserved byte.
#define NCW_SIG_FIELDS(X) NCW_SIG_FIELDS_1_9(X) NCW_SIG_FIELDS_1_10(X)
#define NCW_SIG_FIELDS_1_9(X)                                                                                        \
    X(u64, seq, 0, num)                                                                                              \
    X(u64, count, 0, num)                                                                                            \
    X(u64, t_issue_ns, 0, mono)                                                                                      \
    X(u8, op, 0, op)                                                                                                 \
    X(u8, dtype, 0, dtype)                                                                                           \
    X(u8, flags, 0, num)                                                                                             \
    X(i32, redop, 0, num)                                                                                            \
    X(i32, root, -1, num)                                                                                            \
    X(u32, tid, 0, num)                                                                                              \
    X(u64, stream, 0, ptr)
// OpSignature, 1.10 on (zero before): the record's origin (NCW_RECORD_ORIGINS), in what was its reserved byte. The
// live protocol (1.10) appends it to a signature's block, where an older decoder stops.
#define NCW_SIG_FIELDS_1_10(X) X(u8, origin, 0, rorigin)

// OpRecord, without its stamp (the protocol, not data) and reserved words.
#define NCW_RECORD_FIELDS(X)                                                                                         \
    X(u64, comm_id, 0, id)                                                                                           \
    X(u64, seq, 0, num)                                                                                              \
    X(u64, op_index, 0, num)                                                                                         \
    X(u64, count, 0, num)                                                                                            \
    X(u64, sendbuf, 0, ptr)                                                                                          \
    X(u64, recvbuf, 0, ptr)                                                                                          \
    X(u64, stream, 0, ptr)                                                                                           \
    X(u64, t_issue_ns, 0, mono)                                                                                      \
    X(u64, t_return_ns, 0, mono)                                                                                     \
    X(u64, t_reached_ns, 0, mono)                                                                                    \
    X(u64, t_done_ns, 0, mono)                                                                                       \
    X(u32, tid, 0, num)                                                                                              \
    X(u32, group_id, 0, num)                                                                                         \
    X(u8, op, 0, op)                                                                                                 \
    X(u8, dtype, 0, dtype)                                                                                           \
    X(u8, flags, 0, rflags)                                                                                          \
    X(u8, origin, 0, rorigin)                                                                                        \
    X(i32, peer_or_root, -1, num)                                                                                    \
    X(i32, redop, 0, redop)                                                                                          \
    X(i32, result, -1, num)                                                                                          \
    X(u16, comm_slot, 0, num)

// clang-format on
