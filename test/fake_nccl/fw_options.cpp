#include "fw_options.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace ncw::fw {

namespace {

bool to_long(const std::string& text, long min, long& out) {
    errno = 0;
    char* end = nullptr;
    long v = std::strtol(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0' || v < min) return false;
    out = v;
    return true;
}

}  // namespace

const char* usage_text() {
    return "options (all optional):\n"
           "  --steps N               training steps (default 20); each is one float32 sum all_reduce on the world\n"
           "  --count C               elements per all_reduce (default 1048576)\n"
           "  --bcast-every K         broadcast from root 0 on steps where step % K == 0 (default 0: never)\n"
           "  --bcast-legacy          use ncclBcast instead of ncclBroadcast\n"
           "  --skip-rank R --skip-step S           rank R does not issue its all_reduce of step S\n"
           "  --mismatch-rank R --mismatch-step S --mismatch-kind count|dtype|op|root\n"
           "                          count: half the count; dtype: float16; op: broadcast instead of all_reduce;\n"
           "                          root: step S is a broadcast step for all and rank R uses root 1 (not 0)\n"
           "  --extra-rank R --extra-step S         rank R issues one extra all_reduce at step S\n"
           "  --swap-rank R --swap-step S           a second communicator of every rank (B, split off the world);\n"
           "                          each step all-reduces on the world, then on B; rank R does B first at step S\n"
           "                          (a deadlock across communicators)\n"
           "  --wrong-peer-rank R --wrong-peer-step S   (--pipeline) rank R sends step S's activations to rank 0\n"
           "                          instead of rank R + 1\n"
           "  --exit-rank R --exit-step S [--exit-code X]   rank R calls exit(X) (default 1) before step S\n"
           "  --exit-how exit|_exit|segv|abort      how --exit-rank ends: exit(X), _exit(X) (Python's os._exit), a\n"
           "                          SIGSEGV (a null write), abort()\n"
           "  --own-handlers PREFIX   before init, install the program's own SIGSEGV and SIGTERM handlers: each\n"
           "                          appends the signal's name to PREFIX.<rank>, then the process dies of it\n"
           "  --die-rank R --die-step S             rank R SIGKILLs itself before step S\n"
           "  --no-init-rank R        rank R makes no NCCL call: it sleeps --hold-ms and exits 0\n"
           "  --sleep-rank R --sleep-step S --sleep-ms M    rank R sleeps M ms before step S's collectives\n"
           "  --pause-step S --pause-ms M           every rank sleeps M ms before step S (nothing outstanding)\n"
           "  --late-rank R --late-ms M   rank R sleeps M ms before every step's collectives (a straggler)\n"
           "  --step-ms M             every rank sleeps M ms before every step's collectives (its compute: a pace)\n"
           "  --init-late-rank R --init-late-ms M   rank R sleeps M ms before its communicator init (its shim starts\n"
           "                          after the others')\n"
           "  --split                 also ncclCommSplit(color = rank % 2); one all_reduce on it every step\n"
           "  --grid T                Megatron layout: split the world into tensor-parallel groups of T ranks (color\n"
           "                          rank / T) and data-parallel groups (color rank % T); each step is one\n"
           "                          all_reduce on the TP group (the one --skip/--mismatch/--extra act on), then\n"
           "                          one on the DP group\n"
           "  --group                 each step's all_reduce(s) and a ring send/recv in one group\n"
           "  --pipeline              each step is a pipeline stage instead of the all_reduce: recv from rank - 1,\n"
           "                          send to rank + 1, then the gradients back (recv from rank + 1, send to rank - "
           "1);\n"
           "                          --sleep-rank sleeps between its forward recv and its send, --late-rank\n"
           "                          there every step\n"
           "  --a2a                   before the step's all_reduce, an all-to-all in one group: sends and receives\n"
           "                          of uneven rows (256 float32 each) to and from every other rank\n"
           "  --a2a-stale-rank R --a2a-stale-step S   rank R sends rank 0 twice the rows rank 0 expects at step S\n"
           "  --swap-pair             ranks 0 and 1 swap a tensor each step before the all_reduce (send and recv on\n"
           "                          their own: rank 0 sends first, rank 1 receives first)\n"
           "  --swap-deadlock-step S  at step S both send first\n"
           "  --ring                  before the step's all_reduce, one group of a send to rank + 1 and a receive\n"
           "                          from rank - 1 (batch_isend_irecv), the all_reduce outside it\n"
           "  --ring-skip-recv-rank R --ring-skip-recv-step S   rank R leaves its receive out of step S's group\n"
           "  --config-calls          issue every collective through its Config form (ncclAllReduceConfig, NCCL\n"
           "                          2.31), found with dlsym at run time, each with userProfilerTag = its number;\n"
           "                          none found: exit 2 (ncclBcast, with no Config form, stays plain)\n"
           "  --one-sided             each step, after its collectives: ncclPutSignal to rank + 1 into its window,\n"
           "                          ncclWaitSignal for rank - 1's (NCCL 2.29; skipped, said once, on an older one)\n"
           "  --nonblocking           init with config.blocking = 0; poll ncclCommGetAsyncError after each op\n"
           "  --async-watchdog-ms M   a thread polls ncclCommGetAsyncError on the world communicator every M ms, as\n"
           "                          PyTorch's watchdog; on an error it aborts the communicator (the blocked call\n"
           "                          then fails)\n"
           "  --torch-timeout-ms M    a thread named pt_nccl_watchdg times each collective as PyTorch's watchdog: one\n"
           "                          outstanding past M ms is logged as torch logs it, its communicators aborted\n"
           "                          with TORCH_NCCL_ASYNC_ERROR_HANDLING=1, and after --torch-dump-ms D (0) the\n"
           "                          thread raises SIGABRT (an exception out of the thread: std::terminate)\n"
           "  --hold-ms M             sleep M ms after the last step, before the teardown\n"
           "  --wait-gone PATH        then wait (at most 120 s) until the file PATH does not exist\n"
           "  --teardown destroy|finalize|abort|none   how the comms end (default destroy; finalize = finalize\n"
           "                          then destroy; none = exit without touching them)\n"
           "  --never-nccl            make no NCCL call at all\n"
           "  --coll-per-step N       issue the step's all_reduce (and the one on the split comm) N times (default 1)\n"
           "  --churn-comms N         split N communicators off the world one after another, one all_reduce on each;\n"
           "                          each is destroyed before the next, the last one carries the steps' all_reduce\n"
           "  --alive-comms N         the same, all N alive at once until the teardown\n"
           "  --steps-comm K          with either: the K-th of them (1-based) carries the steps' all_reduce instead\n"
           "  --memory-every K        with --churn-comms: after every K-th destroyed, print this process's peak and\n"
           "                          current resident memory (\"rank R churned=N vm_hwm_kb=H vm_rss_kb=S\")\n"
           "  --absorb-term           install a SIGTERM handler that notes the signal and goes on (before any NCCL\n"
           "                          call), as a training script that checkpoints on preemption\n"
           "  --fake-cuda             dlopen the fake libcuda.so.1 (RTLD_GLOBAL, before any NCCL call), give each\n"
           "                          communicator a stream of its own and print the fake's counters at the end:\n"
           "                          \"fake-cuda rank R: name=value ...\"\n"
           "  --cuda-hold-step S      (--fake-cuda) before step S's collectives, create the file FAKE_CUDA_HOLD_FILE\n"
           "                          names (which holds every stream until it is removed) and put one \"compute\"\n"
           "                          item on the main communicator's stream: the GPU is stuck before step S\n"
           "  --capture-step S [--capture-count M] [--capture-ms T]   (--fake-cuda) steps S .. S+M-1 (default M 1)\n"
           "                          are issued while the main communicator's stream is under graph capture, which\n"
           "                          ends T ms after the last of them\n"
           "  --graph-step S          (--fake-cuda) the main all_reduce is captured into a CUDA graph at step S (the\n"
           "                          fake libcudart.so.13), which is launched at step S and every later one instead;\n"
           "                          one eager all_reduce follows the last step\n"
           "  --graph-skip-rank R --graph-skip-step T   rank R does not launch it at step T\n"
           "  --torch-sync            (--fake-cuda) after each step's collectives, wait for them as torch does,\n"
           "                          through the CUDA runtime (the fake libcudart.so.13): see --sync-how\n"
           "  --sync-how stream|event|query|device|unrelated   (default stream) stream: cudaEventRecord(ev, the\n"
           "                          collective's stream), cudaStreamWaitEvent(compute stream, ev),\n"
           "                          cudaStreamSynchronize(compute stream), as .item(); event: cudaEventRecord,\n"
           "                          cudaEventSynchronize; query: cudaEventRecord, cudaEventQuery until done;\n"
           "                          device: cudaDeviceSynchronize; unrelated: cudaStreamSynchronize(compute stream)\n"
           "                          alone (it waited on nothing)\n";
}

bool parse_options(int argc, char** argv, Options& o, std::string& error) {
    struct IntOption {
        const char* name;
        int* target;
        long min;
    };
    const IntOption ints[] = {
        {"--steps", &o.steps, 0},
        {"--bcast-every", &o.bcast_every, 0},
        {"--skip-rank", &o.skip_rank, -1},
        {"--skip-step", &o.skip_step, -1},
        {"--mismatch-rank", &o.mismatch_rank, -1},
        {"--mismatch-step", &o.mismatch_step, -1},
        {"--extra-rank", &o.extra_rank, -1},
        {"--extra-step", &o.extra_step, -1},
        {"--swap-rank", &o.swap_rank, -1},
        {"--swap-step", &o.swap_step, -1},
        {"--wrong-peer-rank", &o.wrong_peer_rank, -1},
        {"--wrong-peer-step", &o.wrong_peer_step, -1},
        {"--a2a-stale-rank", &o.a2a_stale_rank, -1},
        {"--a2a-stale-step", &o.a2a_stale_step, -1},
        {"--swap-deadlock-step", &o.swap_deadlock_step, -1},
        {"--ring-skip-recv-rank", &o.ring_skip_recv_rank, -1},
        {"--ring-skip-recv-step", &o.ring_skip_recv_step, -1},
        {"--exit-rank", &o.exit_rank, -1},
        {"--exit-step", &o.exit_step, -1},
        {"--exit-code", &o.exit_code, 0},
        {"--die-rank", &o.die_rank, -1},
        {"--no-init-rank", &o.no_init_rank, -1},
        {"--die-step", &o.die_step, -1},
        {"--sleep-rank", &o.sleep_rank, -1},
        {"--sleep-step", &o.sleep_step, -1},
        {"--sleep-ms", &o.sleep_ms, 0},
        {"--pause-step", &o.pause_step, -1},
        {"--pause-ms", &o.pause_ms, 0},
        {"--late-rank", &o.late_rank, -1},
        {"--late-ms", &o.late_ms, 0},
        {"--step-ms", &o.step_ms, 0},
        {"--init-late-rank", &o.init_late_rank, -1},
        {"--init-late-ms", &o.init_late_ms, 0},
        {"--hold-ms", &o.hold_ms, 0},
        {"--async-watchdog-ms", &o.async_watchdog_ms, 0},
        {"--torch-timeout-ms", &o.torch_timeout_ms, 0},
        {"--torch-dump-ms", &o.torch_dump_ms, 0},
        {"--grid", &o.grid, 0},
        {"--coll-per-step", &o.coll_per_step, 1},
        {"--churn-comms", &o.churn_comms, 0},
        {"--alive-comms", &o.alive_comms, 0},
        {"--steps-comm", &o.steps_comm, 0},
        {"--memory-every", &o.memory_every, 0},
        {"--cuda-hold-step", &o.cuda_hold_step, -1},
        {"--capture-step", &o.capture_step, -1},
        {"--capture-count", &o.capture_count, 1},
        {"--capture-ms", &o.capture_ms, 0},
        {"--graph-step", &o.graph_step, -1},
        {"--graph-skip-rank", &o.graph_skip_rank, -1},
        {"--graph-skip-step", &o.graph_skip_step, -1},
    };
    const std::pair<const char*, bool*> flags[] = {
        {"--split", &o.split},
        {"--group", &o.group},
        {"--pipeline", &o.pipeline},
        {"--bcast-legacy", &o.bcast_legacy},
        {"--config-calls", &o.config_calls},
        {"--one-sided", &o.one_sided},
        {"--a2a", &o.a2a},
        {"--swap-pair", &o.swap_pair},
        {"--ring", &o.ring},
        {"--never-nccl", &o.never_nccl},
        {"--nonblocking", &o.nonblocking},
        {"--fake-cuda", &o.fake_cuda},
        {"--absorb-term", &o.absorb_term},
        {"--torch-sync", &o.torch_sync},
    };

    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool inline_value = false;
        if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg.resize(eq);
            inline_value = true;
        }
        bool matched = false;
        for (const auto& [name, target] : flags) {
            if (arg == name) {
                if (inline_value) {
                    error = arg + " takes no value";
                    return false;
                }
                *target = true;
                matched = true;
            }
        }
        if (matched) continue;

        auto take_value = [&]() -> bool {
            if (inline_value) return true;
            if (i + 1 >= argc) {
                error = arg + " needs a value";
                return false;
            }
            value = argv[++i];
            return true;
        };
        for (const IntOption& opt : ints) {
            if (arg != opt.name) continue;
            long v = 0;
            if (!take_value()) return false;
            if (!to_long(value, opt.min, v) || v > 1000000000L) {
                error = "bad value for " + arg + ": '" + value + "'";
                return false;
            }
            *opt.target = static_cast<int>(v);
            matched = true;
        }
        if (matched) continue;

        if (arg == "--count") {
            long v = 0;
            if (!take_value()) return false;
            if (!to_long(value, 0, v)) {
                error = "bad value for --count: '" + value + "'";
                return false;
            }
            o.count = static_cast<size_t>(v);
        } else if (arg == "--exit-how") {
            if (!take_value()) return false;
            if (value != "exit" && value != "_exit" && value != "segv" && value != "abort") {
                error = "bad value for --exit-how: '" + value + "' (exit|_exit|segv|abort)";
                return false;
            }
            o.exit_how = value;
        } else if (arg == "--own-handlers") {
            if (!take_value()) return false;
            o.own_handlers = value;
        } else if (arg == "--wait-gone") {
            if (!take_value()) return false;
            o.wait_gone = value;
        } else if (arg == "--mismatch-kind") {
            if (!take_value()) return false;
            if (value == "count") {
                o.mismatch_kind = MismatchKind::Count;
            } else if (value == "dtype") {
                o.mismatch_kind = MismatchKind::Dtype;
            } else if (value == "op") {
                o.mismatch_kind = MismatchKind::Op;
            } else if (value == "root") {
                o.mismatch_kind = MismatchKind::Root;
            } else {
                error = "bad value for --mismatch-kind: '" + value + "' (count|dtype|op|root)";
                return false;
            }
        } else if (arg == "--sync-how") {
            if (!take_value()) return false;
            if (value == "stream") {
                o.sync_how = SyncHow::Stream;
            } else if (value == "event") {
                o.sync_how = SyncHow::Event;
            } else if (value == "query") {
                o.sync_how = SyncHow::Query;
            } else if (value == "device") {
                o.sync_how = SyncHow::Device;
            } else if (value == "unrelated") {
                o.sync_how = SyncHow::Unrelated;
            } else {
                error = "bad value for --sync-how: '" + value + "' (stream|event|query|device|unrelated)";
                return false;
            }
        } else if (arg == "--teardown") {
            if (!take_value()) return false;
            if (value == "destroy") {
                o.teardown = Teardown::Destroy;
            } else if (value == "finalize") {
                o.teardown = Teardown::Finalize;
            } else if (value == "abort") {
                o.teardown = Teardown::Abort;
            } else if (value == "none") {
                o.teardown = Teardown::None;
            } else {
                error = "bad value for --teardown: '" + value + "' (destroy|finalize|abort|none)";
                return false;
            }
        } else {
            error = "unknown option '" + std::string(argv[i]) + "'";
            return false;
        }
    }
    if (o.mismatch_rank >= 0 && o.mismatch_kind == MismatchKind::None) {
        error = "--mismatch-rank needs --mismatch-kind";
        return false;
    }
    if ((o.cuda_hold_step >= 0 || o.capture_step >= 0 || o.graph_step >= 0 || o.torch_sync) && !o.fake_cuda) {
        error = "--cuda-hold-step, --capture-step, --graph-step and --torch-sync need --fake-cuda";
        return false;
    }
    return true;
}

}  // namespace ncw::fw
