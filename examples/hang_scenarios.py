"""Field hang scenarios, one per --scenario, for torchrun with two or more GPUs under the shim.

    LD_PRELOAD=libncclwatch.so NCCLWATCH_TIMEOUT_SEC=5 torchrun --standalone --nproc_per_node=2 \
        examples/hang_scenarios.py --scenario skip

skip:          the last rank skips one all_reduce (an `if ...: continue` before backward()) and then trains on;
               the hang shows at the end, where the others wait in an all_reduce it never issues.
size_mismatch: the last rank all-reduces half as many elements at one step. NCCL completes this silently
               (and corrupts the result); the shim reports MISMATCH while the job runs.
clean:         nothing wrong.
The script never hangs for good: after --give-up-sec the waiting ranks exit (os._exit), like a job killed by its
launcher.
"""
import argparse
import os
import threading
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=["skip", "size_mismatch", "clean"], default="clean")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--at-step", type=int, default=20)
    p.add_argument("--count", type=int, default=1 << 20)
    p.add_argument("--linger-sec", type=float, default=20.0, help="the odd rank stays alive this long at the end")
    p.add_argument("--give-up-sec", type=float, default=30.0)
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    odd = world - 1
    threading.Timer(args.give_up_sec, lambda: (print(f"rank {rank}: giving up", flush=True), os._exit(7))).start()

    t = torch.ones(args.count, device="cuda")
    for step in range(args.steps):
        if args.scenario == "skip" and rank == odd and step == args.at_step:
            continue
        if args.scenario == "size_mismatch" and rank == odd and step == args.at_step:
            dist.all_reduce(t[: args.count // 2])
        else:
            dist.all_reduce(t)
        t.fill_(1.0)
    torch.cuda.synchronize()
    print(f"rank {rank}: done {args.steps} steps", flush=True)
    if rank == odd:
        time.sleep(args.linger_sec)
    os._exit(0)


if __name__ == "__main__":
    main()
