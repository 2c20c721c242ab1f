"""The PyTorch features the shim must record correctly, for torchrun on one or more GPUs.

    LD_PRELOAD=libncclwatch.so torchrun --standalone --nproc_per_node=1 examples/gpu_features.py --part all

--part features: in one job, on the default group and two more communicators:
  - dist.new_group over every rank (PyTorch splits the default communicator: ncclCommSplit), and a second process
    group with its own options (a high-priority stream: a communicator of its own);
  - DDP all_reduces from the autograd thread and a loss all_reduce from the main thread, on the default group;
  - async ops with wait(): all_reduce, all_gather_into_tensor, reduce_scatter_tensor and, with two or more ranks, a
    send/recv ring (batch_isend_irecv);
  - a CUDA graph: warm-up on a side stream, then capture of real work (an add, an out-of-place all_gather and an
    in-place all_reduce) and 10 replays, checked against the value expected.
--part stall: rank 0 enqueues a kernel that spins on a host flag (pinned memory) before an all_reduce, keeps it
  spinning for --stall-sec, then releases the flag: the all_reduce is issued but not reached by the GPU meanwhile
  (GPU_NOT_REACHED, then recovered). The kernel is compiled with CuPy (NVRTC); without CuPy, torch.cuda._sleep
  (a time-based spin) stands in.
Prints one "CHECK name: ok|FAIL detail" line per check.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

SPIN_SRC = r"""
extern "C" __global__ void spin_on_flag(const volatile int* flag, long long max_cycles) {
    long long start = clock64();
    while (*flag == 0) {
        if (max_cycles > 0 && clock64() - start > max_cycles) break;  // never spin for ever
    }
}
"""


def check(name, ok, detail=""):
    print(f"CHECK {name}: {'ok' if ok else 'FAIL'}{' ' + detail if detail else ''}", flush=True)
    return ok


def features(rank, world, local_rank):
    # Communicators: default, a split (new_group over every rank) and a second group with its own options.
    split = dist.new_group(list(range(world)))
    try:
        opts = dist.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = True
        second = dist.new_group(list(range(world)), pg_options=opts)
    except Exception as e:  # an API change must not hide the other checks
        print(f"second group with options failed ({e!r}); a plain new_group instead", flush=True)
        second = dist.new_group(list(range(world)))

    # DDP: the gradient all_reduce runs on the autograd thread; the loss all_reduce on the main thread.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)).cuda()
    ddp = DDP(model, device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(32, 256, device="cuda")
    y = torch.randn(32, 1, device="cuda")
    for _ in range(20):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        ls = loss.detach().clone()
        dist.all_reduce(ls)  # main thread, default group
    torch.cuda.synchronize()
    check("ddp_and_main_thread", torch.isfinite(ls).item(), f"loss sum {ls.item():.4f}")

    # Collectives on the split and the second group.
    t = torch.ones(1024, device="cuda")
    dist.all_reduce(t, group=split)
    dist.all_reduce(t, group=second)
    torch.cuda.synchronize()
    check("split_and_second_group", t[0].item() == world * world, f"t[0]={t[0].item():.0f}, want {world * world}")

    # Async ops with wait().
    a = torch.full((4096,), float(rank + 1), device="cuda")
    gathered = torch.empty(4096 * world, device="cuda")
    rs_in = torch.ones(4096 * world, device="cuda")
    rs_out = torch.empty(4096, device="cuda")
    works = [dist.all_reduce(a, async_op=True),
             dist.all_gather_into_tensor(gathered, torch.ones(4096, device="cuda"), async_op=True),
             dist.reduce_scatter_tensor(rs_out, rs_in, async_op=True)]
    if world > 1:
        send = torch.full((1024,), float(rank), device="cuda")
        recv = torch.empty(1024, device="cuda")
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        works += dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    torch.cuda.synchronize()
    want = world * (world + 1) / 2
    ok = a[0].item() == want and gathered.sum().item() == 4096 * world and rs_out[0].item() == world
    if world > 1:
        ok = ok and recv[0].item() == (rank - 1) % world
    check("async_wait", ok, f"all_reduce {a[0].item():.0f} (want {want:.0f}), reduce_scatter {rs_out[0].item():.0f}")

    # CUDA graph: warm up on a side stream (PyTorch's CUDA graph recipe), then capture real work. An in-place
    # all_reduce on one rank is a no-op for NCCL, so an add and an out-of-place all_gather are captured with it:
    # the graph is never empty.
    g_in = torch.ones(1024, device="cuda")
    g_out = torch.empty(1024 * world, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            g_in.add_(1)
            dist.all_gather_into_tensor(g_out, g_in)
            dist.all_reduce(g_in)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_in.add_(1)
        dist.all_gather_into_tensor(g_out, g_in)
        dist.all_reduce(g_in)
    g_in.fill_(1.0)
    torch.cuda.synchronize()
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    want = 1.0
    for _ in range(10):
        want = (want + 1) * world
    check("cuda_graph_replay", abs(g_in[0].item() - want) <= 1e-3 * want,
          f"after 10 replays {g_in[0].item():.0f}, want {want:.0f}")
    return split, second


def spin_kernel():
    try:
        import cupy
        mod = cupy.RawModule(code=SPIN_SRC)
        return cupy, mod.get_function("spin_on_flag")
    except Exception as e:
        print(f"CuPy spin kernel unavailable ({e!r}); torch.cuda._sleep stands in", flush=True)
        return None, None


def stall(rank, stall_sec):
    t = torch.ones(1024, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    cupy, kern = spin_kernel() if rank == 0 else (None, None)
    flag = torch.zeros(1, dtype=torch.int32).pin_memory()
    if rank == 0:
        stream = torch.cuda.current_stream()
        if kern is not None:
            with cupy.cuda.ExternalStream(stream.cuda_stream):
                # Bounded at ~3x the stall at 2 GHz, in case the release never arrives.
                kern((1,), (1,), (flag.data_ptr(), cupy.int64(int(stall_sec * 3 * 2e9))))
            how = "a kernel spinning on a host flag"
        else:
            torch.cuda._sleep(int(stall_sec * 2e9))
            how = "torch.cuda._sleep"
        print(f"rank 0: {how} enqueued before an all_reduce; releasing it in {stall_sec:.0f} s", flush=True)
    t0 = time.time()
    dist.all_reduce(t)  # issued now, reached by the GPU only once the spin ends
    if rank == 0:
        time.sleep(stall_sec)
        flag[0] = 1  # pinned host memory: the spinning kernel reads it
        print(f"rank 0: flag released after {time.time() - t0:.1f} s", flush=True)
    torch.cuda.synchronize()
    world = dist.get_world_size()
    check("stalled_stream_completed", t[0].item() == world * world, f"t[0]={t[0].item():.0f} "
          f"after {time.time() - t0:.1f} s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--part", choices=["features", "stall", "all"], default="all")
    p.add_argument("--stall-sec", type=float, default=8.0)
    args = p.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.part in ("features", "all"):
        features(rank, world, local_rank)
    if args.part in ("stall", "all"):
        stall(rank, args.stall_sec)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
