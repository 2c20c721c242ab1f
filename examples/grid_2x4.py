"""A Megatron-style 2 x 4 grid of eight ranks, for torchrun, with one rank that stalls, one that dies, or none.

    LD_PRELOAD=libncclwatch.so NCCLWATCH_TIMEOUT_SEC=10 torchrun --standalone --nproc_per_node=8 \
        examples/grid_2x4.py --one-gpu --scenario stall|death|clean

Tensor-parallel groups [0-3] and [4-7] (--tp 4 consecutive ranks), data-parallel groups [0,4] [1,5] [2,6] [3,7] (the
ranks with the same tensor-parallel index), all made with dist.new_group by every rank in the same order (with
init_process_group(device_id=...) each new_group is an ncclCommSplit of the world, which every rank must call).

Each of --steps steps (default 20): --pace-ms of "data loading" (sleep), a small matmul, then one all_reduce on the
rank's tensor-parallel group and one on its data-parallel group, both async_op=True and each followed by work.wait().
In ProcessGroupNCCL an async collective runs on the group's own NCCL stream after that stream waited for the current
stream, and work.wait() (no timeout, TORCH_NCCL_BLOCKING_WAIT unset) only makes the current stream wait for the NCCL
stream: the CPU never blocks and runs ahead, as real frameworks do, while the GPU executes step k's TP op, then its DP
op, then step k+1's matmul, in that order (the tensor reduced is the matmul's output, reduced by TP then by DP).
Step k is op #k+1 on each of the rank's two groups.

stall: rank --culprit (5) calls slow_eval() (a Python function that sleeps --stall-sec, 60 s) before its collectives
       of step --at-step (10): it issues neither TP[4-7] #11 nor DP[1,5] #11 for 60 s, then goes on. Meanwhile
       ranks 4, 6, 7 wait in TP[4-7] #11 (the initiating stall: rank 5 never issued it); their CPUs issue DP #11 and
       every later op, but their GPUs never reach DP #11 (stream-ordered behind TP #11), so ranks 0, 2, 3 wait in
       DP[0,4], DP[2,6], DP[3,7] #11 for a peer that issued it and is held up in TP[4-7] (cascades); rank 1 waits in
       DP[1,5] #11, which rank 5 never issued either; and ranks 0-3 have issued TP[0-3] #12.. that their GPUs cannot
       reach (queued behind their stalled DP op: a cascade, not STUCK_IN_NCCL).
death: rank --culprit calls os._exit(--exit-code, 3) at step --at-step, before its collectives.
clean: nothing goes wrong; every rank ends normally with exit code 0.
After the loop: torch.cuda.synchronize() (a rank waiting for a peer hangs here), destroy_process_group, exit 0.

Ground truth: when $NCW_TRUTH_DIR is set, each rank keeps its work handles per group in issue order, and a daemon
thread polls Work.is_completed() of those not yet completed every 0.25 s (ProcessGroupNCCL's WorkNCCL::isCompleted
queries the op's end CUDA event, which does not block; it also counts an op that ended with an NCCL error as
completed) and atomically rewrites $NCW_TRUTH_DIR/truth-rank<R>.json:
  {"rank": R, "pid": ..., "time": <epoch s>, "step": ..., "phase": "...",
   "groups": {"tp": {"ranks": [...], "issued": N, "completed": <handles completed>,
                     "completed_prefix": <length of the all-completed prefix>}, "dp": {...}}}
The thread only polls (no CUDA work, no collectives); the main thread writes a snapshot at each phase change too.
--give-up-sec ends the rank that long after it started (os._exit(7)): a guard, the harness normally ends the job first.
"""
import argparse
import os
import threading
import time

import one_gpu  # examples/one_gpu.py, beside this script
import scenario_support
import torch
import torch.distributed as dist

SCENARIOS = ["stall", "death", "clean"]


def log(rank, msg):
    print(f"[grid rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Truth:
    """This rank's own record of what it issued and what completed, per group, written to $NCW_TRUTH_DIR."""

    def __init__(self, rank, groups, dev):
        self.rank = rank
        self.dev = dev
        self.groups = groups  # name -> global ranks of this rank's group
        self.handles = {name: [] for name in groups}  # name -> work handles in issue order
        self.done = {name: [] for name in groups}  # name -> completed flags, parallel to handles (True stays True)
        self.phase = "init"
        self.step = -1
        self.path = scenario_support.truth_path(rank) or ""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None
        self.poll_error = None

    def add(self, name, work):
        self.handles[name].append(work)

    def set_phase(self, phase, step=None):
        self.phase = phase
        if step is not None:
            self.step = step
        self.snapshot()

    def _poll(self):
        for name, hs in self.handles.items():
            flags = self.done[name]
            n = len(hs)  # list.append in the main thread is atomic; read the length once
            while len(flags) < n:
                flags.append(False)
            for i in range(n):
                if not flags[i]:
                    flags[i] = bool(hs[i].is_completed())

    def snapshot(self, poll=True):
        if not self.path:
            return
        with self.lock:
            try:
                if poll:
                    self._poll()
            except Exception as e:  # never let the ground truth break the job; say why once
                if self.poll_error is None:
                    self.poll_error = repr(e)
                    log(self.rank, f"truth: is_completed() failed: {e!r}")
            out = {"rank": self.rank, "pid": os.getpid(), "time": time.time(), "step": self.step,
                   "phase": self.phase, "groups": {}}
            if self.poll_error:
                out["poll_error"] = self.poll_error
            for name, ranks in self.groups.items():
                flags = self.done[name]
                issued = len(self.handles[name])
                prefix = 0
                while prefix < len(flags) and flags[prefix]:
                    prefix += 1
                out["groups"][name] = {"ranks": ranks, "issued": issued, "completed": sum(flags),
                                       "completed_prefix": prefix}
            if err := scenario_support.write_truth(self.path, out):
                log(self.rank, f"truth: cannot write {self.path}: {err}")

    def start(self):
        if not self.path:
            return

        def loop():
            try:
                torch.cuda.set_device(self.dev)  # this thread's event queries on the rank's device, no new context
            except Exception as e:
                log(self.rank, f"truth: set_device({self.dev}) failed in the poller: {e!r}")
            while not self.stop.wait(0.25):
                self.snapshot()

        self.thread = threading.Thread(target=loop, name="grid-truth", daemon=True)
        self.thread.start()

    def finish(self):
        """Stops the poller (before the communicators go away) and writes the last snapshot."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.snapshot()


def slow_eval(rank, seconds):
    """Stands for an evaluation or checkpoint that only this rank runs: its CPU is away from the training loop."""
    log(rank, f"slow_eval(): away for {seconds:g} s before issuing this step's collectives")
    time.sleep(seconds)
    log(rank, "slow_eval() done; back to the training loop")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=SCENARIOS, default="clean")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--at-step", type=int, default=10)
    p.add_argument("--culprit", type=int, default=5)
    p.add_argument("--stall-sec", type=float, default=60.0, help="stall: how long slow_eval() sleeps")
    p.add_argument("--exit-code", type=int, default=3, help="death: the dying rank's exit code")
    p.add_argument("--tp", type=int, default=4, help="tensor-parallel group size (consecutive ranks)")
    p.add_argument("--pace-ms", type=float, default=25.0, help="data loading time per step")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--give-up-sec", type=float, default=0, help="0: never")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0, each its own NCCL host")
    args = p.parse_args()

    dev = one_gpu.setup(args.one_gpu)  # before any NCCL call: the device index (LOCAL_RANK, or 0 with --one-gpu)
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    s = args.scenario
    scenario_support.give_up_after(args.give_up_sec, lambda: log(rank, "giving up"))
    tp = args.tp
    if tp < 1 or world % tp or not 0 <= args.culprit < world:
        log(rank, f"world {world} is not a grid of tensor-parallel groups of {tp} with rank {args.culprit} in it")
        return 2
    dp = world // tp
    torch.cuda.set_device(dev)

    t_init = time.time()
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    # Every rank makes every group, in the same order (each is an ncclCommSplit of the world).
    tp_groups = [list(range(k * tp, (k + 1) * tp)) for k in range(dp)]
    dp_groups = [list(range(i, world, tp)) for i in range(tp)]
    mine = {}
    for ranks in tp_groups:
        g = dist.new_group(ranks=ranks)
        if rank in ranks:
            mine["tp"] = (g, ranks)
    for ranks in dp_groups:
        g = dist.new_group(ranks=ranks)
        if rank in ranks:
            mine["dp"] = (g, ranks)
    tp_group, tp_ranks = mine["tp"]
    dp_group, dp_ranks = mine["dp"]
    log(rank, f"{s}: world {world} and groups ready after {time.time() - t_init:.1f} s: TP {tp_ranks}, DP {dp_ranks} "
              f"(device {dev}, pid {os.getpid()})")

    truth = Truth(rank, {"tp": tp_ranks, "dp": dp_ranks}, dev)
    truth.set_phase("steps", 0)
    truth.start()

    torch.manual_seed(rank)
    h = args.hidden
    w = torch.randn(h, h, device="cuda") / h ** 0.5
    x = torch.randn(64, h, device="cuda")
    pace = args.pace_ms / 1000.0
    t0 = time.time()
    for step in range(args.steps):
        time.sleep(pace)  # data loading
        if step == args.at_step and rank == args.culprit:
            if s == "stall":
                truth.set_phase("slow_eval", step)
                slow_eval(rank, args.stall_sec)
                truth.set_phase("steps", step)
            elif s == "death":
                truth.set_phase("dying", step)
                log(rank, f"dying at step {step} before its collectives (os._exit({args.exit_code}))")
                os._exit(args.exit_code)
        y = torch.tanh(x @ w)
        work = dist.all_reduce(y, group=tp_group, async_op=True)
        truth.add("tp", work)
        work.wait()  # the current stream waits for the NCCL stream; the CPU goes on
        work = dist.all_reduce(y, group=dp_group, async_op=True)
        truth.add("dp", work)
        work.wait()
        x = y / world
        truth.step = step
        if step % 5 == 0 or abs(step - args.at_step) <= 1 or step == args.steps - 1:
            log(rank, f"step {step}: issued TP all_reduce #{step + 1} on {tp_ranks} and DP all_reduce "
                      f"#{step + 1} on {dp_ranks} ({time.time() - t0:.2f} s)")

    truth.set_phase("synchronize", args.steps - 1)
    log(rank, f"all {args.steps} steps issued after {time.time() - t0:.1f} s; torch.cuda.synchronize() "
              f"(a rank waiting for a peer hangs here)")
    torch.cuda.synchronize()
    log(rank, f"synchronized after {time.time() - t0:.1f} s, x[0,0] {x[0, 0].item():.4f}")
    truth.phase = "synchronized"
    truth.finish()  # the poller stops before the communicators are destroyed
    dist.destroy_process_group()
    truth.phase = "done"
    truth.snapshot(poll=False)  # no event query once the communicators are gone
    log(rank, "exit 0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
