// The command line of the fake training framework (fw_run). A rank option of -1 means "no rank".
#pragma once

#include <cstddef>
#include <string>

namespace ncw::fw {

enum class MismatchKind { None, Count, Dtype, Op, Root };
enum class Teardown { Destroy, Finalize, Abort, None };
// How --torch-sync waits for a step's collectives (the CUDA runtime's calls, as torch makes them).
enum class SyncHow { Stream, Event, Query, Device, Unrelated };

struct Options {
    int steps = 20;
    size_t count = 1048576;
    int bcast_every = 0;  // broadcast from root 0 on the steps where step % K == 0; 0: never

    int skip_rank = -1, skip_step = -1;
    int mismatch_rank = -1, mismatch_step = -1;
    MismatchKind mismatch_kind = MismatchKind::None;
    int extra_rank = -1, extra_step = -1;
    // A second communicator of every rank (B, split off the world with one color); each step all-reduces on the
    // world (A) then on B; rank swap_rank does B first at swap_step (a deadlock across communicators).
    int swap_rank = -1, swap_step = -1;
    int wrong_peer_rank = -1, wrong_peer_step = -1;  // --pipeline: it sends its forward to rank 0, not rank + 1
    int a2a_stale_rank = -1, a2a_stale_step = -1;    // --a2a: it sends rank 0 twice the rows rank 0 expects
    int swap_deadlock_step = -1;                     // --swap-pair: at that step both ranks send first, then receive
    int ring_skip_recv_rank = -1, ring_skip_recv_step = -1;  // --ring: it leaves out its irecv from rank - 1
    int exit_rank = -1, exit_step = -1, exit_code = 1;
    std::string exit_how = "exit";  // how --exit-rank ends: exit, _exit (os._exit), segv (a crash), abort
    std::string own_handlers;       // install SIGSEGV and SIGTERM handlers before init that note the signal here
    int die_rank = -1, die_step = -1;
    int no_init_rank = -1;  // this rank never calls NCCL: it sleeps --hold-ms and exits 0 (an init that others wait in)
    int sleep_rank = -1, sleep_step = -1, sleep_ms = 0;
    int pause_step = -1, pause_ms = 0;          // every rank, with nothing outstanding
    int late_rank = -1, late_ms = 0;            // a straggler: late_rank sleeps late_ms before every step's collectives
    int step_ms = 0;                            // every rank sleeps step_ms before every step's collectives (compute)
    int init_late_rank = -1, init_late_ms = 0;  // init_late_rank sleeps init_late_ms before its communicator init

    bool split = false;
    int grid = 0;  // tensor-parallel group size: TP groups (color rank / grid) and DP groups (color rank % grid)
    bool group = false;
    // One pipeline stage per rank instead of the all_reduce: each step, activations forward (recv from rank - 1, send
    // to rank + 1), gradients back; --sleep-rank then sleeps between its forward recv and its send (a stage away in
    // its own code before sending).
    bool pipeline = false;
    // An MoE layer before the step's all_reduce: a group of sends and receives to and from every other rank, rows
    // of uneven split sizes that every rank derives alike from (step, sender, receiver), as all_to_all_single.
    bool a2a = false;
    // Ranks 0 and 1 swap a tensor every step before the all_reduce, each send and receive on its own (as dist.send,
    // dist.recv): rank 0 sends first, rank 1 receives first.
    bool swap_pair = false;
    // Before the all_reduce, every rank exchanges with its ring neighbours in one group (batch_isend_irecv: a send to
    // rank + 1 and a receive from rank - 1), the all_reduce outside it.
    bool ring = false;
    bool bcast_legacy = false;
    // Every collective through its Config form (ncclAllReduceConfig, NCCL 2.31), looked up at run time as a framework
    // built against 2.31 does, each with its own userProfilerTag (ncclBcast has none: it stays plain).
    bool config_calls = false;
    // Each step also puts a signal to rank + 1 and waits for rank - 1's (ncclPutSignal, ncclWaitSignal: NCCL 2.29),
    // on an NCCL that has them.
    bool one_sided = false;
    bool never_nccl = false;
    bool nonblocking = false;
    bool absorb_term = false;  // a SIGTERM handler that notes the signal and goes on (a checkpoint on preemption)
    int hold_ms = 0;
    int async_watchdog_ms = 0;  // > 0: PyTorch's watchdog, polling ncclCommGetAsyncError (abort on an error)
    int torch_timeout_ms = 0;   // > 0: PyTorch's watchdog timing out a collective (the process group's timeout=)
    int torch_dump_ms = 0;      // with it: how long that watchdog waits (for the Flight Recorder's dump) before SIGABRT
    std::string wait_gone;      // after --hold-ms, wait (up to 120 s) until this file does not exist
    Teardown teardown = Teardown::Destroy;
    int coll_per_step = 1;  // the step's main all_reduce (and the one on the split comm) this many times
    // Many communicators (groups of Megatron, FSDP, elastic restarts), split off the world one after another, each
    // with one all_reduce; the last of them carries the steps' main collective.
    int churn_comms = 0;   // that many in all, each destroyed after its all_reduce (the last one at the teardown)
    int alive_comms = 0;   // that many, all alive until the teardown
    int steps_comm = 0;    // with either: the steps run on this one (1-based; 0: the last)
    int memory_every = 0;  // > 0: the process's resident memory after every this many churned (issue 45)

    // With the fake libcuda (test/fake_cuda).
    bool fake_cuda = false;
    int cuda_hold_step = -1;  // before this step's collectives: hold the GPU (FAKE_CUDA_HOLD_FILE) behind "compute"
    int capture_step = -1;    // steps [capture_step, capture_step + capture_count) run under graph capture
    int capture_count = 1;
    int capture_ms = 0;        // the capture lasts at least this long
    int graph_step = -1;       // the main all_reduce is captured into a CUDA graph at this step, launched from then on
    int graph_skip_rank = -1;  // ...which this rank does not launch at graph_skip_step
    int graph_skip_step = -1;
    // After each step's collectives, wait for them as torch does (the fake libcudart.so.13, through the preloaded
    // shim): stream: cudaEventRecord on each collective's stream, cudaStreamWaitEvent of a "compute" stream on it,
    // cudaStreamSynchronize of the compute stream (what .item() does); event: cudaEventRecord, cudaEventSynchronize
    // (work.wait() of a blocking work); query: cudaEventRecord, then cudaEventQuery until done (torch's watchdog);
    // device: cudaDeviceSynchronize (torch.cuda.synchronize()); unrelated: cudaStreamSynchronize of the compute stream
    // alone, which waited on nothing (an .item() of a tensor that does not depend on the collective: it proves
    // nothing of NCCL's ops).
    bool torch_sync = false;
    SyncHow sync_how = SyncHow::Stream;
};

// Parses argv[1..]. Returns false and sets `error` on an unknown option or a bad value.
bool parse_options(int argc, char** argv, Options& options, std::string& error);

// One line per option, for --help and usage errors.
const char* usage_text();

}  // namespace ncw::fw
