// The verdict kinds, listed once. Everything that names or ranks a kind is generated from this list: the enum
// verdict::Kind, kind_name, kind_meaning and verdict_importance (lib/engine/verdict.h); the analysis schema's "kind"
// enum (docs/schemas/analysis.schema.json) is checked against it by test/golden/check_schema.py --kinds (meson
// test 'schema_kinds'). A new kind is one line here, one headline case (lib/report/headline.cpp) and the schema.
//
// X(enum name, JSON and text name, importance: 0 = reported first, one-line meaning)
#pragma once

#define NCW_VERDICT_KINDS(X)                                                                                \
    X(NotJoined, "NOT_JOINED", 4, "rank(s) never issued the sequence number the others wait in")            \
    X(GpuNotReached, "GPU_NOT_REACHED", 9,                                                                  \
      "all issued it, but some rank's GPU has provably not reached it (busy with earlier work)")            \
    X(StuckInNccl, "STUCK_IN_NCCL", 10, "every rank proven inside it, none completed it")                   \
    X(Mismatch, "MISMATCH", 5, "ranks disagree on op/dtype/count/root/redop at one sequence number")        \
    X(Dead, "DEAD", 1, "a rank's process is gone while others wait for it")                                 \
    X(AsyncError, "ASYNC_ERROR", 8, "NCCL reported an error on a rank")                                     \
    X(Unknown, "UNKNOWN", 12,                                                                               \
      "a stall whose culprit is not visible from here (ranks missing) or not proven (lower bounds)")        \
    X(ExtraOp, "EXTRA_OP", 3,                                                                               \
      "a rank issued an operation no other rank issued: it is ahead, the others are not behind")            \
    X(InitHang, "INIT_HANG", 6,                                                                             \
      "communicator init entered by some ranks and not finished (or never entered by others)")              \
    X(Straggler, "STRAGGLER", 13, "not a hang: a rank consistently last to arrive at collectives")          \
    X(Deadlock, "DEADLOCK", 2,                                                                              \
      "stalls on several communicators wait on each other in a cycle: ranks issued their ops in different " \
      "orders")                                                                                             \
    X(SettingDiffers, "SETTING_DIFFERS", 7,                                                                 \
      "a stall in a job whose ranks disagree on a setting NCCL needs every rank to agree on")               \
    X(TeardownHang, "TEARDOWN_HANG", 11,                                                                    \
      "a rank has been inside communicator destroy, finalize or abort longer than the timeout")             \
    X(Failed, "FAILED", 0,                                                                                  \
      "the job failed: torch's NCCL watchdog ended ranks whose collective outlived the process group's "    \
      "timeout")
