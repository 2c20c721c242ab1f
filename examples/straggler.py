"""One rank arrives late at every step's collective: a straggler, not a hang (issue 13 item 4).

    LD_PRELOAD=libncclwatch.so torchrun --standalone --nproc_per_node=4 examples/straggler.py --one-gpu \
        [--late-rank 3] [--late-ms 20] [--steps 80]

Each of --steps steps: --pace-ms of "data loading" (sleep) on every rank, then rank --late-rank sleeps --late-ms more
(its input pipeline is slower), then a small matmul and one all_reduce of its output on the default group, then
torch.cuda.synchronize() (the loop reads its result every step, as a training loop reading its loss does): so every
rank's GPU enters step k's all_reduce within a millisecond of its CPU issuing it, and the others' GPUs wait --late-ms
inside it for the late rank's. The job ends normally with exit code 0.
--hold-at-step N --hold-sec S: every rank pauses S s once N steps are done (nothing outstanding: no stall), so that
the harness can analyze the folder knowing it holds exactly N steps (test/gpu/run_scenario.py --analyze-at-step N).

Ground truth (when $NCW_TRUTH_DIR is set; test/gpu/straggler_table.py reads it): each rank rewrites
$NCW_TRUTH_DIR/truth-rank<R>.json after every step:
  {"rank": R, "late_rank": L, "late_ms": M, "step": <steps done>, "t_step": [time.time() at the start of each step],
   "t_hold": .., "t_resume": .. (the pause), "done": true at the end}
--give-up-sec ends a rank still alive that long after it started (os._exit(7)): a guard, the harness ends the job
first. --one-gpu puts every rank on device 0, each as its own NCCL host (examples/one_gpu.py).
(A minimal version written with the harness; the straggler work may replace it, keeping these options and the truth.)
"""
import argparse
import os
import time

import one_gpu  # examples/one_gpu.py, beside this script
import scenario_support
import torch
import torch.distributed as dist


def log(rank, msg):
    print(f"[straggler rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--late-rank", type=int, default=-1, help="the late rank; -1: the last")
    p.add_argument("--late-ms", type=float, default=20.0, help="how late it is before each step's all_reduce")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--pace-ms", type=float, default=5.0, help="data loading time per step, every rank")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--hold-at-step", type=int, default=0, help="pause once this many steps are done; 0: never")
    p.add_argument("--hold-sec", type=float, default=3.0)
    p.add_argument("--give-up-sec", type=float, default=0, help="0: never")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0, each its own NCCL host")
    args = p.parse_args()

    dev = one_gpu.setup(args.one_gpu)
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    late = args.late_rank if args.late_rank >= 0 else world - 1
    scenario_support.give_up_after(args.give_up_sec, lambda: log(rank, "giving up"))
    torch.cuda.set_device(dev)
    t_init = time.time()
    dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    log(rank, f"process group ready after {time.time() - t_init:.1f} s (world {world}); rank {late} is "
              f"{args.late_ms:g} ms late before each all_reduce")
    path = scenario_support.truth_path(rank)
    truth = {"rank": rank, "late_rank": late, "late_ms": args.late_ms, "step": 0, "t_step": []}

    torch.manual_seed(rank)
    h = args.hidden
    w = torch.randn(h, h, device="cuda") / h ** 0.5
    x = torch.randn(64, h, device="cuda")
    dist.all_reduce(x)  # warm-up: the connections are made before the first timed step
    torch.cuda.synchronize()
    t0 = time.time()
    for step in range(args.steps):
        truth["t_step"].append(time.time())
        time.sleep(args.pace_ms / 1000.0)
        if rank == late:
            time.sleep(args.late_ms / 1000.0)
        y = torch.tanh(x @ w)
        dist.all_reduce(y)
        torch.cuda.synchronize()
        x = y / world
        truth["step"] = step + 1
        hold = args.hold_at_step and step + 1 == args.hold_at_step
        if hold:
            truth["t_hold"] = time.time()
        if path and (err := scenario_support.write_truth(path, truth)):
            log(rank, f"truth: cannot write {path}: {err}")
            path = None
        if hold:
            log(rank, f"holding {args.hold_sec:g} s after step {step + 1}")
            time.sleep(args.hold_sec)
            truth["t_resume"] = time.time()
        if step % 20 == 0:
            log(rank, f"step {step}: {time.time() - t0:.2f} s")
    elapsed = time.time() - t0
    truth["done"] = True
    truth["t_end"] = time.time()
    if path:
        scenario_support.write_truth(path, truth)
    log(rank, f"{args.steps} steps in {elapsed:.1f} s ({elapsed / args.steps * 1000:.1f} ms per step)")
    dist.destroy_process_group()
    log(rank, "exit 0")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
