"""The GPU positions the shim records against each rank's own ground truth, per (rank, communicator), in a torch job
with tiny collectives on two new_group groups (issue 23, item 1): no count may be a lower bound, and "completed" must
be exactly what the rank's own work handles say.

    LD_PRELOAD=libncclwatch.so NCCLWATCH_TIMEOUT_SEC=10 torchrun --standalone --nproc_per_node=4 \
        examples/positions_check.py --one-gpu --give-up-sec 40

(It hangs at --skip-step on purpose: --give-up-sec ends it; --skip-step -1 runs --steps and ends normally. The GPU
harness runs it under test/gpu/run_scenario.py and judges it with test/gpu/positions_table.py: phase 7 of run.sh.)

Groups, created by every rank in this order (init_process_group(device_id=...): eager init, and each new_group an
ncclCommSplit of the world at once): the world, A = new_group(all ranks), B = new_group(all ranks). Their rank-file
communicators are thus the world's (no parent) and its two splits, in creation order.

Each step: an all_reduce of 8 elements on A, then .item() of it (the CPU waits for the op); the same on B; every
--barrier-every steps a dist.barrier() (the world); then an all_reduce of --big elements on the world (work.wait():
the stream waits, the CPU goes on). Every collective is issued with async_op=True and its Work handle kept.

At --mid-step, after that step's collectives: torch.cuda.synchronize() (every op of this rank is complete), a 1 s
pause, then the truth with phase "mid". With $NCW_TRUTH_DIR set, the rank then waits (15 s at most) for
$NCW_TRUTH_DIR/go-mid: test/gpu/run_scenario.py --dump-at-phase mid dumps every rank file meanwhile.
At --skip-step the --skipper rank (default: the last) skips its all_reduce on B: the others wait in it for good (B's
op #skip-step + 1), the skipper goes on to the world's all_reduce and the next step's op on A and waits there. The
job hangs until the harness ends it (or --give-up-sec).

Ground truth: with $NCW_TRUTH_DIR, a daemon thread polls Work.is_completed() of every handle not yet completed every
0.25 s (ProcessGroupNCCL's isCompleted queries the op's end event without blocking) and rewrites
$NCW_TRUTH_DIR/truth-rank<R>.json atomically:
  {"rank", "pid", "time", "step", "phase", "order": ["world", "A", "B"], "world_size",
   "groups": {"world": {"ranks": [...], "issued": N, "completed": <handles completed>, "completed_prefix": N,
                        "ops": ["allreduce_big", "barrier", ...]}, "A": {...}, "B": {...}},
   "mid": <the groups at the mid-run snapshot>, "skipped": {"group": "B", "op": <its 1-based number>} (the skipper)}
"""
import argparse
import os
import threading
import time

import one_gpu  # examples/one_gpu.py, beside this script
import scenario_support
import torch
import torch.distributed as dist

ORDER = ["world", "A", "B"]


def log(rank, msg):
    print(f"[positions rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Truth:
    """Each group's work handles in issue order and how many report is_completed(), written to $NCW_TRUTH_DIR."""

    def __init__(self, rank, world, groups, dev):
        self.rank, self.world, self.dev = rank, world, dev
        self.groups = groups  # name -> global ranks
        self.handles = {g: [] for g in groups}
        self.kinds = {g: [] for g in groups}
        self.done = {g: [] for g in groups}
        self.phase, self.step = "init", -1
        self.extra = {}
        self.path = scenario_support.truth_path(rank) or ""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None
        self.poll_error = None

    def add(self, group, kind, work):
        self.kinds[group].append(kind)
        self.handles[group].append(work)

    def _poll(self):
        for g, hs in self.handles.items():
            flags = self.done[g]
            n = len(hs)  # list.append in the main thread is atomic; the length read once
            while len(flags) < n:
                flags.append(False)
            for i in range(n):
                if not flags[i]:
                    flags[i] = bool(hs[i].is_completed())

    def counts(self):
        out = {}
        for g, ranks in self.groups.items():
            flags = self.done[g]
            prefix = 0
            while prefix < len(flags) and flags[prefix]:
                prefix += 1
            out[g] = {"ranks": ranks, "issued": len(self.handles[g]), "completed": sum(flags),
                      "completed_prefix": prefix, "ops": list(self.kinds[g])}
        return out

    def snapshot(self, poll=True):
        """Polls the handles and writes the truth; returns the counts."""
        with self.lock:
            try:
                if poll:
                    self._poll()
            except Exception as e:  # never let the ground truth break the job; say why once
                if self.poll_error is None:
                    self.poll_error = repr(e)
                    log(self.rank, f"truth: is_completed() failed: {e!r}")
            c = self.counts()
            if not self.path:
                return c
            out = {"rank": self.rank, "pid": os.getpid(), "time": time.time(), "step": self.step,
                   "phase": self.phase, "order": ORDER, "world_size": self.world, "groups": c, **self.extra}
            if self.poll_error:
                out["poll_error"] = self.poll_error
            if err := scenario_support.write_truth(self.path, out):
                log(self.rank, f"truth: cannot write {self.path}: {err}")
            return c

    def start(self):
        if not self.path:
            return

        def loop():
            try:
                torch.cuda.set_device(self.dev)  # this thread's event queries on the rank's device
            except Exception as e:
                log(self.rank, f"truth: set_device({self.dev}) failed in the poller: {e!r}")
            while not self.stop.wait(0.25):
                self.snapshot()

        self.thread = threading.Thread(target=loop, name="positions-truth", daemon=True)
        self.thread.start()

    def finish(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        self.snapshot()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60, help="steps when nothing hangs (--skip-step -1)")
    p.add_argument("--mid-step", type=int, default=15)
    p.add_argument("--skip-step", type=int, default=30, help="-1: no rank skips (the job ends normally)")
    p.add_argument("--skipper", type=int, default=-1, help="the rank that skips (-1: the last)")
    p.add_argument("--barrier-every", type=int, default=4)
    p.add_argument("--big", type=int, default=1 << 20, help="elements of the world's all_reduce")
    p.add_argument("--pace-ms", type=float, default=20.0)
    p.add_argument("--give-up-sec", type=float, default=0, help="0: never")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0, each its own NCCL host")
    args = p.parse_args()

    dev = one_gpu.setup(args.one_gpu)
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    skipper = args.skipper if args.skipper >= 0 else world - 1
    scenario_support.give_up_after(args.give_up_sec, lambda: log(rank, "giving up"))
    torch.cuda.set_device(dev)
    t0 = time.time()
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    everyone = list(range(world))
    group_a = dist.new_group(ranks=everyone)
    group_b = dist.new_group(ranks=everyone)
    pg = {"world": None, "A": group_a, "B": group_b}
    log(rank, f"world {world}, groups A and B ready after {time.time() - t0:.1f} s (created in the order {ORDER})")

    truth = Truth(rank, world, {g: everyone for g in ORDER}, dev)
    truth.phase = "steps"
    truth.snapshot()
    truth.start()
    small = {g: torch.ones(8, device="cuda") for g in ("A", "B")}
    big = torch.ones(args.big, device="cuda")
    pace = args.pace_ms / 1000.0
    last = args.steps if args.skip_step < 0 else args.skip_step + 10 ** 6  # a hung job never gets there
    step = 0
    while step < last:
        time.sleep(pace)
        truth.step = step
        for g in ("A", "B"):
            if g == "B" and step == args.skip_step and rank == skipper:
                truth.extra["skipped"] = {"group": "B", "op": len(truth.handles["B"]) + 1, "step": step}
                log(rank, f"skipping the all_reduce on B at step {step} (B's op #{len(truth.handles['B']) + 1})")
                truth.snapshot()
                continue
            small[g].fill_(1.0)
            w = dist.all_reduce(small[g], group=pg[g], async_op=True)
            truth.add(g, "allreduce_8", w)
            w.wait()  # the current stream waits for the op
            small[g][0].item()  # the CPU waits for the stream
        if step % args.barrier_every == 0:
            w = dist.barrier(async_op=True)
            truth.add("world", "barrier", w)
            w.wait()
        w = dist.all_reduce(big, async_op=True)
        truth.add("world", "allreduce_big", w)
        w.wait()
        if step == args.mid_step:
            torch.cuda.synchronize()
            time.sleep(1.0)  # the shim's completion tracking has caught up with the GPU by now
            truth.extra["mid"] = truth.snapshot()  # every handle polled, then written with the phase
            truth.phase = "mid"
            truth.snapshot()
            log(rank, f"mid-run at step {step}: " + ", ".join(
                f"{g} {c['completed']}/{c['issued']}" for g, c in truth.extra["mid"].items()))
            go = os.path.join(os.environ["NCW_TRUTH_DIR"], "go-mid") if truth.path else ""
            t_wait = time.time()
            while go and not os.path.exists(go) and time.time() - t_wait < 15:
                time.sleep(0.1)
            truth.phase = "steps"
            truth.snapshot()
        step += 1
    torch.cuda.synchronize()
    truth.phase = "synchronized"
    truth.finish()
    log(rank, f"done {step} steps: " + ", ".join(f"{g} {c['completed']}/{c['issued']}"
                                                 for g, c in truth.counts().items()))
    dist.destroy_process_group()
    truth.phase = "done"
    truth.snapshot(poll=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
