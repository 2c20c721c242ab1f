"""A small real DDP training job for torchrun: an MLP on synthetic data.

    LD_PRELOAD=/path/libncclwatch.so torchrun --standalone --nproc_per_node=1 examples/ddp_train.py --steps 200

Options for the GPU checks: --gpu-busy-ms N makes rank 0's GPU spin N ms before one step's backward (its
all_reduce is then issued but not reached: GPU_NOT_REACHED, then recovered); --graph captures an all_reduce in a
CUDA graph and replays it.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=0,
                   help="steps run before the timed ones (first-step setup: cuBLAS, NCCL, the allocator)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--gpu-busy-ms", type=int, default=0)
    p.add_argument("--busy-step", type=int, default=20)
    p.add_argument("--graph", action="store_true")
    p.add_argument("--subgroup", action="store_true", help="also all_reduce on a new_group (a split communicator)")
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    model = nn.Sequential(nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                          nn.ReLU(), nn.Linear(args.hidden, 1)).cuda()
    ddp = DDP(model, device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    sub = dist.new_group(list(range(world))) if args.subgroup else None

    x = torch.randn(args.batch, args.hidden, device="cuda")
    y = torch.randn(args.batch, 1, device="cuda")
    torch.cuda.synchronize()
    t0 = time.time()
    for step in range(-args.warmup, args.steps):
        if step == 0 and args.warmup:
            torch.cuda.synchronize()
            t0 = time.time()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        if args.gpu_busy_ms and step == args.busy_step and rank == 0:
            # About 2 GHz: spins the GPU so that the next all_reduce waits behind it on the stream.
            torch.cuda._sleep(int(args.gpu_busy_ms * 2.0e6))
        loss.backward()
        opt.step()
        if sub is not None:
            t = torch.ones(16, device="cuda")
            dist.all_reduce(t, group=sub)
    torch.cuda.synchronize()
    elapsed = time.time() - t0

    if args.graph:
        # PyTorch's CUDA graph recipe: warm up on a side stream, then capture. An in-place all_reduce on a 1-rank
        # communicator is a no-op for NCCL (the graph would be empty), so an add is captured with it.
        t = torch.ones(1024, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                t.add_(1)
                dist.all_reduce(t)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            t.add_(1)
            dist.all_reduce(t)
        t.fill_(1.0)
        for _ in range(10):
            g.replay()
        torch.cuda.synchronize()
        want = 1.0
        for _ in range(10):
            want = (want + 1) * world
        print(f"rank {rank}: graph replayed 10 times, t[0]={t[0].item():.0f} (want {want:.0f})", flush=True)

    print(f"rank {rank}: {args.steps} steps in {elapsed:.3f} s ({elapsed / args.steps * 1e3:.3f} ms/step), "
          f"loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
