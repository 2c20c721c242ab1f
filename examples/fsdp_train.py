"""A small FSDP2 training job for torchrun, plain (--mode fsdp2) or with tensor parallelism (--mode fsdp_tp).

    LD_PRELOAD=libncclwatch.so NCCLWATCH_TIMEOUT_SEC=10 torchrun --standalone --nproc_per_node=4 \
        examples/fsdp_train.py --one-gpu --mode fsdp2 [--eval-rank 0 --eval-at-sec 10 --eval-sec 15]

The model is --depth residual MLP blocks (Linear dim -> mult*dim, ReLU, Linear mult*dim -> dim) with no parameters of
its own, trained on synthetic data in a paced loop (--pace-ms of "data loading" per step) with AdamW.

fsdp2:   every block and the root wrapped with FSDP2 fully_shard over a 1-D mesh of all ranks (the default process
         group): an all-gather per block in forward and backward, a reduce-scatter per block in backward.
fsdp_tp: a 2-D mesh (dp = world / tp, tp = --tp) from init_device_mesh; each block's in_proj ColwiseParallel and
         out_proj RowwiseParallel on mesh["tp"] (parallelize_module), then fully_shard of every block and the root on
         mesh["dp"]: PyTorch's FSDP2 + TP recipe. The ranks of one tp group train on the same batch.

The ranks stop after the same step: --steps N, or (the default, --steps 0) once --train-sec have passed, agreed every
--agree-every steps by an all_reduce(MAX) of "my time is up" on the default group.
--eval-rank R --eval-at-sec T --eval-sec S: rank R, at the first step boundary T s after the loop began, runs
"evaluation" for S s (forward passes of a separate unsharded model under no_grad: GPU work outside NCCL) while the
others go on into the next step's collectives and wait for it; then it trains on and the job ends normally.
Each rank writes $NCW_TRUTH_DIR/truth-rank<R>.json (when set): rank R {"eval_start", "eval_end"} (time.time() at the
evaluation's entry and exit), every rank {"steps", "done": true} at the end.
--give-up-sec ends a rank still alive that long after it started (os._exit(7)): a guard, the harness ends the job
first. --one-gpu puts every rank on device 0, each as its own NCCL host (examples/one_gpu.py).
"""
import argparse
import os
import time

import one_gpu  # examples/one_gpu.py, beside this script
import scenario_support
import torch
import torch.distributed as dist
import torch.nn as nn

MODES = ["fsdp2", "fsdp_tp"]


def log(rank, msg):
    print(f"[fsdp_train rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def write_truth(rank, truth):
    """This rank's ground truth for the harness, written whole."""
    path = scenario_support.truth_path(rank)
    if path and (err := scenario_support.write_truth(path, truth)):
        log(rank, f"could not write {path}: {err}")


class Block(nn.Module):
    def __init__(self, dim, mult):
        super().__init__()
        self.in_proj = nn.Linear(dim, mult * dim)
        self.out_proj = nn.Linear(mult * dim, dim)

    def forward(self, x):
        return x + self.out_proj(torch.relu(self.in_proj(x)))


class Net(nn.Module):
    """Blocks only, no parameters of the root's own (as PyTorch's own FSDP2 + TP test model, MLPStack)."""

    def __init__(self, dim, mult, depth):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, mult) for _ in range(depth)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def evaluate(rank, seconds, dim):
    """GPU work outside NCCL for `seconds`: forward passes of a separate, unsharded model, synchronised now and then."""
    n = scenario_support.busy_gpu(seconds, dim)
    log(rank, f"evaluation done: {n} forward passes in {seconds:.0f} s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=MODES, default="fsdp2")
    p.add_argument("--steps", type=int, default=0, help="steps to train; 0: for --train-sec (agreed by all ranks)")
    p.add_argument("--train-sec", type=float, default=30.0, help="with --steps 0: how long to train")
    p.add_argument("--agree-every", type=int, default=10, help="with --steps 0: steps between the agreements")
    p.add_argument("--warmup", type=int, default=0,
                   help="steps run before the timed ones, not counted (FSDP's lazy init, cuBLAS, NCCL's connections)")
    p.add_argument("--pace-ms", type=float, default=20.0, help="data loading time per step")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--mult", type=int, default=2, help="hidden width of a block: mult * dim")
    p.add_argument("--depth", type=int, default=3, help="blocks (FSDP units)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--tp", type=int, default=2, help="fsdp_tp: tensor-parallel degree (the mesh is world/tp x tp)")
    p.add_argument("--eval-rank", type=int, default=-1, help="the rank that evaluates; -1: none")
    p.add_argument("--eval-at-sec", type=float, default=10.0, help="seconds into the loop to evaluate at")
    p.add_argument("--eval-sec", type=float, default=15.0, help="how long the evaluation lasts")
    p.add_argument("--give-up-sec", type=float, default=0, help="0: never")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0, each its own NCCL host")
    args = p.parse_args()

    dev = one_gpu.setup(args.one_gpu)  # the device index: LOCAL_RANK, or 0 with --one-gpu
    rank = int(os.environ.get("RANK", 0))
    scenario_support.give_up_after(args.give_up_sec, lambda: log(rank, "giving up"))
    # The device first, and CUDA initialised: DeviceMesh sets the device from LOCAL_RANK itself when CUDA is not yet
    # initialised, which with --one-gpu would name a device that does not exist.
    torch.cuda.set_device(dev)
    torch.cuda.init()
    device = torch.device("cuda", dev)
    t_init = time.time()
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    log(rank, f"{args.mode}: process group ready after {time.time() - t_init:.1f} s (world {world}, device "
              f"cuda:{torch.cuda.current_device()} of {torch.cuda.device_count()})")

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)  # the same initial weights on every rank
    model = Net(args.dim, args.mult, args.depth).to(device)
    if args.mode == "fsdp2":
        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("dp",))
        dp_mesh = mesh
        data_rank = rank
    else:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        if world % args.tp != 0:
            raise SystemExit(f"world size {world} is not a multiple of --tp {args.tp}")
        mesh = init_device_mesh("cuda", (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_mesh = mesh["dp"]
        plan = {}
        for i in range(args.depth):
            plan[f"blocks.{i}.in_proj"] = ColwiseParallel()
            plan[f"blocks.{i}.out_proj"] = RowwiseParallel()
        parallelize_module(model, mesh["tp"], plan)
        data_rank = dp_mesh.get_local_rank()  # the ranks of one tp group must see the same batch
    for b in model.blocks:
        fully_shard(b, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    log(rank, f"{args.mode}: mesh {mesh}, {args.depth} blocks sharded over {dp_mesh.size()} ranks, data rank "
              f"{data_rank}")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    g = torch.Generator().manual_seed(1000 + data_rank)
    x = torch.randn(args.batch, args.dim, generator=g).to(device)
    y = torch.randn(args.batch, args.dim, generator=g).to(device)
    pace = args.pace_ms / 1000.0
    truth = {"mode": args.mode, "world": world}
    evaluated = False
    loss_val = float("nan")

    for _ in range(args.warmup):  # as ddp_train.py's --warmup: the timing below starts after these
        time.sleep(pace)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    t0 = time.time()
    step = 0
    while True:
        if args.steps > 0:
            if step >= args.steps:
                break
        elif step % args.agree_every == 0:
            up = torch.tensor([1.0 if time.time() - t0 >= args.train_sec else 0.0], device=device)
            dist.all_reduce(up, op=dist.ReduceOp.MAX)
            if up.item() > 0:
                break
        if rank == args.eval_rank and not evaluated and time.time() - t0 >= args.eval_at_sec:
            evaluated = True
            truth["eval_start"] = time.time()
            log(rank, f"evaluation on rank {rank} only, {args.eval_sec:.0f} s, before step {step} "
                      f"({truth['eval_start'] - t0:.1f} s into the loop)")
            evaluate(rank, args.eval_sec, args.dim)
            truth["eval_end"] = time.time()
            truth["eval_step"] = step
            write_truth(rank, truth)
        time.sleep(pace)  # data loading
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 10 == 0:
            # Logging reads the loss every 10 steps, as training loops do: in between the host runs ahead of the
            # GPU, enqueueing collectives before the earlier ones have run.
            loss_val = loss.item()
        if step % 100 == 0:
            log(rank, f"step {step}, loss {loss_val:.4f}, {(time.time() - t0) / step * 1000:.0f} ms per step")

    torch.cuda.synchronize()
    elapsed = time.time() - t0
    truth.update({"steps": step, "done": True, "train_s": elapsed})
    write_truth(rank, truth)
    log(rank, f"training finished: {step} steps in {elapsed:.1f} s, {elapsed / max(step, 1) * 1000:.0f} ms per step, "
              f"loss {loss_val:.4f}")
    dist.destroy_process_group()
    log(rank, "exit 0")


if __name__ == "__main__":
    main()
