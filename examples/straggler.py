"""The straggler scenario: one rank is late before every step's collective. For torchrun with two or more GPUs, or
with several ranks on one GPU.

    LD_PRELOAD=libncclwatch.so torchrun --standalone --nproc_per_node=2 examples/straggler.py
    ... torchrun --standalone --nproc_per_node=4 examples/straggler.py --one-gpu [--late-rank 1 --late-ms 20]

--one-gpu puts every rank on device 0, each as its own NCCL host (examples/one_gpu.py).

After a warm-up all_reduce (the connections are made before the first step), every step (--steps, 80): --pace-ms (5)
of "data loading", a small forward pass on the GPU (a few products of a --hidden square matrix), then an all_reduce
of a small tensor (--count float32 elements); rank --late-rank (default: the last rank) sleeps --late-ms (20) more
before its all_reduce, every step. Every --sync-every steps (1) a rank reads the reduced value back (as a loop that
logs its loss does), so each rank starts the next step once the all_reduce ended; with 0 the CPUs run ahead of the
GPUs (the late rank's GPU then arrives even later, by the others' pace too).
Inside each all_reduce the other ranks' GPUs wait for the late one: NCCL's profiler shows it as the rank with the
shortest time inside the collective, and ncclwatch names it STRAGGLER (the shim's report, the live collector,
analyze), with its lateness and the share of the step it costs the others. --late-ms 0: a clean run.

--hold-at-step N: after N steps every rank waits for its GPU and pauses --hold-sec (3) outside NCCL, then goes on
(the GPU harness analyzes the live folder in that pause: what was known after N steps).
Ground truth for the harness (test/gpu/straggler_table.py), when $NCW_TRUTH_DIR is set (examples/scenario_support.py):
each rank rewrites truth-rank<R>.json after every step: {"rank", "late_rank", "late_ms", "world", "step" (steps done),
"t_step" (time.time() at the start of each step), "t_hold" and "t_resume" (the pause), "done" and "t_end" at the
normal end}.
--give-up-sec ends a rank still alive that long after init (os._exit(7)): a guard, the harness ends the job first.
Prints one line per rank when the process group is ready, one at the pause and one at the end.
"""
import argparse
import datetime
import os
import time

import one_gpu  # examples/one_gpu.py, beside this script
import scenario_support
import torch
import torch.distributed as dist


def log(rank, msg):
    print(f"[straggler rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Truth:
    """This rank's ground truth for the harness, rewritten whole; a write that fails is said once, then none is tried."""

    def __init__(self, who, **fields):  # `who`: the rank (fields may hold a "rank" of their own)
        self.rank, self.path, self.d = who, scenario_support.truth_path(who), dict(fields)

    def write(self):
        if self.path and (err := scenario_support.write_truth(self.path, self.d)):
            log(self.rank, f"truth: cannot write {self.path}: {err}")
            self.path = None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--late-rank", type=int, default=-1, help="the rank that is late (-1: the last)")
    p.add_argument("--late-ms", type=float, default=20.0, help="how late, before each step's all_reduce")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--pace-ms", type=float, default=5.0, help="data loading time per step, on every rank")
    p.add_argument("--hidden", type=int, default=512, help="the forward pass's matrix size")
    p.add_argument("--count", type=int, default=1024, help="elements of the all_reduce")
    p.add_argument("--sync-every", type=int, default=1, help="read the reduced value every N steps (0: never)")
    p.add_argument("--hold-at-step", type=int, default=0, help="pause after this many steps (0: never)")
    p.add_argument("--hold-sec", type=float, default=3.0)
    p.add_argument("--pg-timeout-sec", type=float, default=0, help="init_process_group(timeout=...); 0: default")
    p.add_argument("--give-up-sec", type=float, default=0, help="0: never")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0, each its own NCCL host")
    args = p.parse_args()

    dev = one_gpu.setup(args.one_gpu)  # the device index: LOCAL_RANK, or 0 with --one-gpu
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    late_rank = args.late_rank if args.late_rank >= 0 else world - 1
    torch.cuda.set_device(dev)
    kwargs = {}
    if args.pg_timeout_sec > 0:
        kwargs["timeout"] = datetime.timedelta(seconds=args.pg_timeout_sec)
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev), **kwargs)
    log(rank, f"process group ready (world {world}); rank {late_rank} is {args.late_ms:g} ms late at every step")
    scenario_support.give_up_after(args.give_up_sec, lambda: log(rank, "giving up"))

    torch.manual_seed(rank)
    h = args.hidden
    w = torch.randn(h, h, device="cuda") / h ** 0.5
    x = torch.randn(64, h, device="cuda")
    buf = torch.zeros(args.count, device="cuda")
    truth = Truth(rank, rank=rank, late_rank=late_rank, late_ms=args.late_ms, world=world, step=0, t_step=[])
    late = args.late_ms / 1000.0 if rank == late_rank else 0.0
    pace = args.pace_ms / 1000.0
    dist.all_reduce(buf)  # warm-up: the connections are made before the first step
    torch.cuda.synchronize()
    t0 = time.time()
    total = 0.0
    for step in range(args.steps):
        truth.d["t_step"].append(time.time())
        time.sleep(pace)  # data loading
        y = x
        for _ in range(4):
            y = torch.tanh(y @ w)
        buf.fill_(0)
        buf[:1] = y.mean()
        if late:
            time.sleep(late)  # the straggler: late before its collective, every step
        dist.all_reduce(buf)
        if args.sync_every and (step + 1) % args.sync_every == 0:
            total += buf[0].item()  # waits for this rank's GPU: the all_reduce has ended
        truth.d["step"] = step + 1
        hold = args.hold_at_step and step + 1 == args.hold_at_step
        if hold:
            torch.cuda.synchronize()  # nothing outstanding in the pause: no stall
            truth.d["t_hold"] = time.time()
        truth.write()
        if hold:
            log(rank, f"pausing {args.hold_sec:g} s after step {step + 1}")
            time.sleep(args.hold_sec)
            truth.d["t_resume"] = time.time()

    torch.cuda.synchronize()
    elapsed = time.time() - t0
    truth.d.update({"done": True, "t_end": time.time(), "train_s": elapsed})
    truth.write()
    log(rank, f"done {args.steps} steps in {elapsed:.1f} s ({elapsed / max(1, args.steps) * 1e3:.1f} ms per step)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
