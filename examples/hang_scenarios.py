"""Field hang scenarios, one per --scenario, for torchrun with two or more GPUs, or with several ranks on one GPU.

    LD_PRELOAD=libncclwatch.so NCCLWATCH_TIMEOUT_SEC=10 torchrun --standalone --nproc_per_node=2 \
        examples/hang_scenarios.py --scenario skip
    ... torchrun --standalone --nproc_per_node=4 examples/hang_scenarios.py --scenario skip --one-gpu

--one-gpu puts every rank on device 0, each as its own NCCL host (examples/one_gpu.py).

Every scenario trains a small DDP model in a paced loop (--pace-ms of "data loading" per step, so that the ranks'
issue times are regular, as in a real job), and one rank departs from it:

skip:          the last rank skips one step (`if bad_batch: continue` before forward/backward) and trains on; at the
               end the others wait in an all_reduce it never issues, while it stays alive (--linger-sec).
uneven:        uneven data without drop_last: the last rank has --short-by fewer batches, leaves the epoch early and
               exits with code 0 while the others wait.
type_mismatch: at --at-step every rank all-reduces a statistics tensor, but the last rank broadcasts it instead.
size_mismatch: at --at-step the last rank all-reduces half the statistics tensor. NCCL completes this silently on
               two GPUs (and corrupts the result).
rank_dies:     the last rank calls os._exit(--exit-code, default 1) at --at-step, as after an out-of-memory error.
rank_exit0:    the same, with os._exit(0): a rank that leaves "successfully" in the middle of the job.
rank_segv:     the last rank crashes with a real SIGSEGV at --at-step (a read of address 0, as a bad extension would).
rank_killed:   the last rank is killed with SIGKILL at --at-step (as the kernel's OOM killer would): nothing of it runs.
drift_skip:    no model: a loop of same-shaped all_reduces of the statistics tensor with a broadcast every 10 steps
               (test/e2e/drift.sh on GPUs); the last rank skips the all_reduce of --at-step. NCCL pairs the ops by
               their order, so the ranks drift by one op and disagree only at the next broadcast. With
               --bcast-every 0 every op has one shape: nothing disagrees, and the others wait at the end in the
               all_reduce the last rank never issues.
drift_extra:   the same loop; the last rank adds one all_reduce at --at-step.
init_hang:     the last rank calls init_process_group --delay-sec late (past the watchdog timeout), then all train.
validation:    rank 0 runs "validation" (GPU work outside NCCL) for --busy-sec at --at-step while the others wait in
               the next all_reduce; then the job goes on and ends normally.
grad_accum:    gradient accumulation (--accum micro-steps, DDP no_sync); rank 0 syncs gradients on one extra
               micro-step at --at-step (one extra all_reduce, same signature); at the end rank 0 waits in an
               all_reduce the others never issue, and they stay alive (--linger-sec). The culprit is rank 0.
gpu_busy:      the last rank's GPU runs one long kernel (torch.cuda._sleep, --gpu-busy-sec, 60 s at about 2 GHz)
               enqueued before its step --at-step: its CPU issues the step's all_reduce and goes on, but its GPU
               does not reach it; the others wait in it (GPU_NOT_REACHED, the last rank).
pipeline:      no DDP: a pipeline of one stage per rank (send/recv of activations forward, of gradients backward);
               stage --pipeline-stage (default: world - 2) sits in stage_busy(), a Python function, for --stall-sec
               (60 s) at step --at-step before its send to the next stage; the stages after it wait in their recv,
               those before it in the recv of its gradient (NOT_JOINED, that stage's rank).
order_deadlock: every --metric-every steps each rank all-reduces a metric over group A, reads it (.item()), then
               over group B (two groups of every rank, as a data-parallel and a context-parallel group of one
               world); at --at-step the last rank does B first. A deadlock across communicators: the others wait in
               A for it, it waits in B for them.
graph_skip:    no model: each step replays a CUDA graph that holds one all_reduce of the statistics tensor (captured
               once, after a warm-up); the last rank skips the replay of --at-step. NCCL pairs the ops one off; the eager all_reduce after the loop
               hangs on the others, and the last rank stays alive outside NCCL (--linger-sec).
algo_differs:  the last rank runs with NCCL_ALGO=allreduce:tree, the others with allreduce:ring (set before init, as
               a node's own environment would): the ranks disagree on the algorithm of the first all_reduce.
leave_early:   the last rank runs out of data --short-by steps early, calls destroy_process_group() and exits 0 while
               the others go on into an all_reduce it never issues.
teardown_hang: nothing wrong in training; after its last step every rank's GPU is busy (--gpu-busy-sec) before one
               more all_reduce, and destroy_process_group() waits for it: the job hangs in its teardown.
oom:           the last rank asks for 32 TiB at --at-step and dies of the uncaught torch.OutOfMemoryError (exit 1).
pipeline_wrong_peer: the pipeline; at --at-step stage --pipeline-stage sends its activations to rank 0 instead of
               the next stage: the next stage waits in its recv from it, and the send waits for a recv never posted.
               (Before its loop the pipeline exchanges once with each neighbour only: at 4 ranks or more, stage
               world - 2 and rank 0 have never exchanged; at 3 ranks rank 0 is stage 1's neighbour.)
pipeline_fresh_peer: the pipeline; at --at-step stage --pipeline-stage sends its activations to, and then receives its
               gradient from, the lowest rank it has never exchanged with (no send or receive between the two before:
               not a neighbour; rank 0 for stage world - 2 at 4 ranks or more; fewer ranks: refused). NCCL connects a
               pair at its first send or receive, and that peer never takes part: the stage waits in its send (MISMATCH,
               a send no receive matches, or NOT_JOINED; the stage's rank); the stages after it wait in their recv.
pipeline_slow: the pipeline for --duration-sec (30 s), nothing hangs: stage --pipeline-stage runs --slow-ms (20 ms) more
               GPU work (one torch.cuda._sleep kernel, sized by a measured clock) after its forward and before each
               forward send, every step: the stages after it wait for it inside their receives, and so do the
               gradients of those before it (STRAGGLER, the stage's rank: "the slowest stage", not a hang).
pipeline_clean: the same pipeline for --duration-sec, every stage in step: nothing to report.
               Both run until rank 0's clock says --duration-sec: its "last step" flag travels down the stages in one
               more column of the activations, and every stage synchronises its GPU at the end of each step (as a
               loop that logs its loss does), so all stop after the same step without any collective.
clean:         nothing wrong; trains for --duration-sec.

Issue 41, point-to-point traffic (no DDP; each a paced loop ending every step with a small all_reduce on the world and
a loss read with .item(); before the loop, one step of the same traffic outside it, so that NCCL's connections are
made before the scenario's fault):
moe_stale_split: a mixture-of-experts layer: each step every rank sends rows (--moe-hidden float32, 4 KB) to every
               rank's experts with dist.all_to_all_single and uneven split sizes, all drawn from one seeded generator
               per step (every rank draws the same table, so what rank i sends rank j is what rank j expects from rank
               i); rank 0 holds a popular expert (--moe-hot-rows more rows from every rank, 64 MiB by default). At
               --at-step the last rank routes with a stale table: it sends rank 0 twice the rows rank 0 expects (its
               input built to that table, so torch accepts it): its send to rank 0 is never received whole (MISMATCH,
               the last rank).
moe_clean:     the same layer, nothing wrong, for --duration-sec.
moe_busy:      (issue 42) the layer as MoE training code writes it, the same split tables: dispatch (all_to_all_single
               of the tokens with their input and output split sizes), the local expert, combine (the expert's output
               back, the splits swapped); then the gradients' all_reduce and the loss's .item(). Each step's batch comes
               from load_next_batch(), a Python function (--pace-ms); at --at-step the last rank's takes --stall-sec
               (60 s) before its dispatch, while the others wait inside theirs (NOT_JOINED, the last rank).
send_cycle:    ranks 0 and 1 swap a --p2p-mib tensor every step with dist.send / dist.recv (rank 0 sends first, rank 1
               receives first; the others only all-reduce); at --at-step both send first: each waits for the other to
               receive (DEADLOCK, ranks 0 and 1). With this script's eager init (init_process_group(device_id=...))
               torch 2.5 and later issues them on the world's communicator; with --lazy-init, on a 2-rank communicator
               of the pair's own, made at their first send or recv.
batch_ring_missing: each step every rank exchanges a --p2p-mib tensor with its ring neighbours in one
               dist.batch_isend_irecv (isend to rank + 1, irecv from rank - 1) and waits on the works; at --at-step the
               last rank leaves its irecv out: rank world - 2's send to it is never received (the last rank's missing
               Recv: NOT_JOINED or MISMATCH, the last rank).

For PyTorch's Flight Recorder runs, --pg-timeout-sec passes the same timeout to init_process_group, and --fr-dump-at-end
writes each rank's Flight Recorder buffer at a normal exit (a job that never times out has no dump otherwise).
--give-up-sec ends a rank that is still alive that long after init (os._exit(7)): a guard, the harness normally ends
the job first.
Ground truth for the harness (when $NCW_TRUTH_DIR is set): each rank rewrites $NCW_TRUTH_DIR/truth-rank<R>.json with
time.time() at t_init_start (before init_process_group), t_loop_start, t_depart (the departing rank at its departure;
every rank just before the mismatched op), t_loop_end (out of the loop, before the final synchronize) and t_done
(past it); test/gpu/job_readers.py's hang_start() reads when each scenario's hang began from them.
"""
import argparse
import contextlib
import ctypes
import datetime
import os
import signal
import sys
import time

import one_gpu  # examples/one_gpu.py, beside this script
import scenario_support
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

SCENARIOS = ["skip", "uneven", "type_mismatch", "size_mismatch", "rank_dies", "init_hang", "validation", "grad_accum",
             "clean", "rank_exit0", "rank_segv", "rank_killed", "drift_skip", "drift_extra", "gpu_busy", "pipeline",
             "order_deadlock", "graph_skip", "algo_differs", "leave_early", "teardown_hang", "oom",
             "pipeline_wrong_peer", "moe_stale_split", "moe_clean", "send_cycle", "batch_ring_missing",
             "pipeline_fresh_peer", "pipeline_slow", "pipeline_clean", "moe_busy"]
DYING = ("rank_dies", "rank_exit0", "rank_segv", "rank_killed")  # the last rank ends itself at --at-step
DRIFTS = ("drift_skip", "drift_extra")
# issue 41's run_p2p() scenarios, and issue 42's moe_busy
P2P = ("moe_stale_split", "moe_clean", "send_cycle", "batch_ring_missing", "moe_busy")
# run_pipeline()'s scenarios
PIPELINES = ("pipeline", "pipeline_wrong_peer", "pipeline_fresh_peer", "pipeline_slow", "pipeline_clean")
TIMED_PIPELINES = ("pipeline_slow", "pipeline_clean")  # until --duration-sec, each step synchronised
GPU_HZ = 2.0e9  # torch.cuda._sleep counts GPU clock cycles: about 2 GHz (examples/ddp_train.py)


def die(rank, how, exit_code):
    """Ends this process at once, as the scenario says (nothing after it runs)."""
    if how == "rank_segv":
        ctypes.string_at(0)  # a real fault, not a signal sent by kill
    elif how == "rank_killed":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0 if how == "rank_exit0" else exit_code)


def log(rank, msg):
    print(f"[scenario rank {rank} {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fr_dump_now(rank):
    """Writes this rank's Flight Recorder buffer where TORCH_FR_DUMP_TEMP_FILE says (prefix + rank)."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if not prefix:
        return
    try:
        data = torch._C._distributed_c10d._dump_nccl_trace()
        with open(f"{prefix}{rank}", "wb") as f:
            f.write(data)
        log(rank, f"Flight Recorder buffer written to {prefix}{rank} ({len(data)} bytes)")
    except Exception as e:  # a missing private API must not fail the scenario
        log(rank, f"could not write the Flight Recorder buffer: {e!r}")


class Truth:
    """This rank's phase times, rewritten whole at each (a handful of writes per run, none per step)."""

    def __init__(self, rank, scenario):
        self.path = scenario_support.truth_path(rank)
        self.d = {"rank": rank, "scenario": scenario}

    def mark(self, key, **more):
        if not self.path:
            return
        self.d[key] = time.time()
        self.d.update(more)
        if err := scenario_support.write_truth(self.path, self.d):
            log(self.d["rank"], f"truth: cannot write {self.path}: {err}")


def validate(rank, seconds, hidden):
    """GPU work outside NCCL for `seconds`: forward passes of a separate model, synchronised now and then."""
    n = scenario_support.busy_gpu(seconds, hidden)
    log(rank, f"validation done: {n} forward passes in {seconds:.0f} s")


def stage_busy(rank, seconds):
    """Stands for a stage's own work on the CPU (a data transform, a checkpoint, a debugger) before its send: this
    rank's CPU is away from the pipeline, and its next stage waits in the recv of what it has not sent."""
    log(rank, f"stage_busy(): away for {seconds:g} s before sending this step's activations")
    time.sleep(seconds)
    log(rank, "stage_busy() done; back to the pipeline")


def load_next_batch(rank, step, seconds, slow=False):
    """Stands for the data loader handing this rank its next batch: `seconds` on the CPU, in Python (the pace, every
    step). slow: a batch that takes long (a read stalled on a network file system, a loader worker respawned): this
    rank is away from the MoE layer, before its dispatch, and every other rank waits inside its own."""
    if slow:
        log(rank, f"step {step}: load_next_batch() waits {seconds:g} s for the batch, before this step's dispatch")
    time.sleep(seconds)
    if slow:
        log(rank, "load_next_batch() done; back to the MoE layer")


def time_is_up(t0, duration_sec):
    """Whether any rank's clock says `duration_sec` have passed since its `t0`, agreed by every rank (an all_reduce of
    "my time is up", max), so that all stop after the same step instead of each reading its own clock."""
    up = torch.tensor([1.0 if time.time() - t0 >= duration_sec else 0.0], device="cuda")
    dist.all_reduce(up, op=dist.ReduceOp.MAX)
    return up.item() > 0


def gpu_sleep(seconds, hz=GPU_HZ):
    """GPU work outside NCCL, enqueued without waiting for it: one kernel on the current stream that spins `seconds`
    (torch.cuda._sleep's cycles at `hz`). The CPU goes on at once."""
    torch.cuda._sleep(int(seconds * hz))


def gpu_clock_hz():
    """The clock torch.cuda._sleep counts, measured on this GPU (one 50 ms kernel timed by CUDA events, after one to
    raise the clocks); GPU_HZ where the measure is off by more than 2x."""
    cycles = int(0.05 * GPU_HZ)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    hz = cycles / (ms / 1000.0) if ms > 0 else GPU_HZ
    return hz if GPU_HZ / 2 <= hz <= GPU_HZ * 2 else GPU_HZ


def fresh_peer_of(stage, world):
    """The lowest rank that pipeline stage `stage` never exchanges with (not itself nor a neighbour), or None."""
    return next((r for r in range(world) if abs(r - stage) > 1), None)


def capture_allreduce_graph(stats):
    """A CUDA graph holding one all_reduce of `stats`, as torch.cuda.graph captures it: warmed up on a side stream
    first (NCCL's communicator must exist before a capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            dist.all_reduce(stats)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(stats)
    torch.cuda.synchronize()
    return g


def run_pipeline(args, rank, world, truth):
    """One pipeline stage per rank, one micro-batch a step: activations go forward (recv from rank - 1, send to
    rank + 1), gradients backward. pipeline_slow and pipeline_clean (TIMED_PIPELINES) run until rank 0's clock says
    --duration-sec: the activations carry one more column, rank 0's "last step" flag, and every stage synchronises
    its GPU at the end of each step and reads the flag there. Returns (steps run, the last loss as a tensor)."""
    h = args.hidden
    s = args.scenario
    stage = args.pipeline_stage if args.pipeline_stage >= 0 else max(world - 2, 0)
    timed = s in TIMED_PIPELINES
    fresh = None
    if s in ("pipeline_slow", "pipeline_fresh_peer") and not 0 <= stage < world - 1:
        raise SystemExit(f"{s}: stage {stage} has no next stage to send to (world {world})")
    if s == "pipeline_fresh_peer":
        fresh = fresh_peer_of(stage, world)
        if fresh is None:
            raise SystemExit(f"{s}: stage {stage} exchanges with every other rank of {world}: no fresh peer (4 ranks "
                             "or more, stage 2 or later)")
    torch.manual_seed(rank)
    net = nn.Sequential(nn.Linear(h, h), nn.Tanh()).cuda()
    x = torch.randn(64, h, device="cuda")
    pace = args.pace_ms / 1000.0
    loss = torch.zeros((), device="cuda")
    hz = GPU_HZ
    if s == "pipeline_slow" and rank == stage:
        hz = gpu_clock_hz()
        log(rank, f"the slow stage: {args.slow_ms:g} ms more GPU work before each forward send "
                  f"(torch.cuda._sleep at a measured {hz / 1e9:.2f} GHz)")
    # A local forward and backward first: torch's first backward imports sympy (seconds with many ranks on a machine),
    # which would stall the pipeline's first step before anything the scenario does.
    net(x.clone().requires_grad_(True)).sum().backward()
    net.zero_grad(set_to_none=True)
    # And one exchange with each neighbour, both ways: NCCL connects a pair at its first send or receive (over sockets,
    # with four ranks on one GPU, that took over 10 s: a real stall of the first step, before the scenario's fault).
    # Only neighbours: pipeline_fresh_peer's wrong peer is never one of them (nor is rank 0 for pipeline_wrong_peer's
    # stage world - 2 at 4 ranks or more).
    probe = torch.zeros(1, device="cuda")
    if rank > 0:
        dist.recv(probe, src=rank - 1)
    if rank < world - 1:
        dist.send(probe, dst=rank + 1)
        dist.recv(probe, src=rank + 1)
    if rank > 0:
        dist.send(probe, dst=rank - 1)
    torch.cuda.synchronize()
    more = {"stage": stage, "pre_connected": [r for r in (rank - 1, rank + 1) if 0 <= r < world]}
    if fresh is not None:
        more["fresh_peer"] = fresh
    if s == "pipeline_slow":
        more["slow_ms"] = args.slow_ms
    truth.mark("t_loop_start", **more)
    width = h + 1 if timed else h  # timed: the activations' last column is rank 0's "last step" flag
    t0 = time.time()
    step = 0
    while timed or step < args.steps:
        time.sleep(pace)  # data loading
        last = timed and rank == 0 and time.time() - t0 >= args.duration_sec
        inp = x
        buf = None
        if rank > 0:
            buf = torch.empty(64, width, device="cuda")
            dist.recv(buf, src=rank - 1)
            inp = buf[:, :h].contiguous() if timed else buf
        inp.requires_grad_(True)
        out = net(inp)
        if s == "pipeline" and rank == stage and step == args.at_step and rank < world - 1:
            truth.mark("t_depart", step=step)
            stage_busy(rank, args.stall_sec)
        if s == "pipeline_slow" and rank == stage:
            if step == 0:
                truth.mark("t_depart", step=step)  # slow from its first step on
            gpu_sleep(args.slow_ms / 1000.0, hz)  # the slow stage's extra compute, on its GPU, before its send
        fwd = out.detach()
        if timed and rank < world - 1:
            flag = torch.full((64, 1), 1.0 if last else 0.0, device="cuda") if rank == 0 else buf[:, h:]
            fwd = torch.cat([fwd, flag], 1)
        if s == "pipeline_wrong_peer" and rank == stage and step == args.at_step and rank < world - 1:
            truth.mark("t_depart", step=step)
            log(rank, f"sending step {step}'s activations to rank 0 instead of rank {rank + 1}")
            dist.send(out.detach().contiguous(), dst=0)  # the bug: a wrong peer index
        elif s == "pipeline_fresh_peer" and rank == stage and step == args.at_step:
            truth.mark("t_depart", step=step, peer=fresh)
            log(rank, f"sending step {step}'s activations to rank {fresh} instead of rank {rank + 1}, and receiving "
                      f"the gradient from it (it has never exchanged with rank {fresh})")
            dist.send(fwd.contiguous(), dst=fresh)  # the bug: a wrong peer index, a pair never connected
            grad = torch.empty_like(out)
            dist.recv(grad, src=fresh)  # the same wrong index for the gradient
            out.backward(grad)
        elif rank < world - 1:
            dist.send(fwd.contiguous(), dst=rank + 1)
            grad = torch.empty_like(out)
            dist.recv(grad, src=rank + 1)
            out.backward(grad)
        else:
            loss = out.pow(2).mean()
            loss.backward()
        if rank > 0:
            dist.send(inp.grad.contiguous(), dst=rank - 1)
        net.zero_grad(set_to_none=True)
        if args.pipeline_allreduce:
            # Every rank then all-reduces a metric: the last stage arrives last by the pipeline's own order.
            metric = loss.detach().reshape(1).clone()
            dist.all_reduce(metric)
        step += 1
        if timed:
            torch.cuda.synchronize()  # the step's end: this stage's sends and receives done
            if buf is not None:
                last = bool(buf[0, h].item())  # rank 0's flag, passed down the stages
            if last:
                break
    return step, loss.detach()


def moe_split_table(args, step, world):
    """The rows rank i sends rank j at `step` (table[i][j]). Every rank draws the same table from one generator seeded
    by the step, as if the routers' counts had been exchanged: what rank i sends rank j is what rank j expects from
    rank i. Rank 0's expert is popular: --moe-hot-rows more rows from every rank."""
    g = torch.Generator().manual_seed(args.moe_seed * 1_000_003 + step + 1)
    table = torch.randint(args.moe_rows_min, args.moe_rows_max + 1, (world, world), generator=g)
    table[:, 0] += args.moe_hot_rows
    return table.tolist()


def moe_layer(args, rank, world, step, expert, stale=False):
    """One MoE layer's dispatch: this rank's tokens to every rank's experts (dist.all_to_all_single with uneven
    splits), then the local expert on the tokens that came in. stale: this rank routes with a stale table, which
    sends rank 0 twice the rows rank 0 expects from it (the tokens are built to that table: torch checks only that
    the input splits add up to the input's rows). Returns the expert's output."""
    table = moe_split_table(args, step, world)
    input_split_sizes = list(table[rank])
    output_split_sizes = [table[src][rank] for src in range(world)]
    if stale:
        input_split_sizes[0] *= 2
    tokens = torch.randn(sum(input_split_sizes), args.moe_hidden, device="cuda")
    received = torch.empty(sum(output_split_sizes), args.moe_hidden, device="cuda")
    dist.all_to_all_single(received, tokens, output_split_sizes, input_split_sizes)
    return expert(received)


def moe_dispatch_combine(args, rank, world, step, expert):
    """One MoE layer as training code writes it (moe_busy): the router's rows for every rank (input_split_sizes) and
    the rows every rank sends here (output_split_sizes: the counts exchanged; here the same seeded table on every
    rank), the tokens dispatched with dist.all_to_all_single, the local expert on what came in, and its output
    combined back to where each row came from (the splits swapped). Returns the combined output, one row per token."""
    table = moe_split_table(args, step, world)
    input_split_sizes = list(table[rank])
    output_split_sizes = [table[src][rank] for src in range(world)]
    tokens = torch.randn(sum(input_split_sizes), args.moe_hidden, device="cuda")
    dispatched = torch.empty(sum(output_split_sizes), args.moe_hidden, device="cuda")
    dist.all_to_all_single(dispatched, tokens, output_split_sizes, input_split_sizes)  # dispatch
    expert_out = expert(dispatched)
    combined = torch.empty_like(tokens)
    dist.all_to_all_single(combined, expert_out, input_split_sizes, output_split_sizes)  # combine
    return combined


def run_p2p(args, rank, world, truth):
    """Issue 41's point-to-point scenarios (moe_stale_split, moe_clean, send_cycle, batch_ring_missing) and issue 42's
    moe_busy: one step of traffic, then a gradient-like all_reduce on the world and the loss read with .item(), in a
    paced loop. One step runs before the loop (NCCL connects a pair at its first send or receive: over sockets, with
    four ranks on one GPU, seconds). Returns (steps run, the last loss as a tensor)."""
    s = args.scenario
    odd = world - 1
    pace = args.pace_ms / 1000.0
    n = args.p2p_mib * (1 << 20) // 4  # float32 elements of a send_cycle / batch_ring_missing message
    torch.manual_seed(rank)
    expert = nn.Linear(args.moe_hidden, args.moe_hidden, bias=False).cuda() if s.startswith("moe") else None
    outgoing = torch.full((n,), float(rank), device="cuda") if not s.startswith("moe") else None
    incoming = torch.empty_like(outgoing) if outgoing is not None else None
    weights = torch.randn(1024, device="cuda")

    def traffic(step, bad):
        """This step's point-to-point part; returns the tensor the loss is read from."""
        if s == "moe_busy":
            return moe_dispatch_combine(args, rank, world, step, expert)
        if s.startswith("moe"):
            return moe_layer(args, rank, world, step, expert, stale=bad and rank == odd)
        if s == "send_cycle":
            if rank == 0 or (rank == 1 and bad):
                dist.send(outgoing, dst=1 - rank)  # the bug at the bad step: rank 1 sends first too
                dist.recv(incoming, src=1 - rank)
            elif rank == 1:
                dist.recv(incoming, src=0)
                dist.send(outgoing, dst=0)
            return incoming[:1024] if rank < 2 else weights
        # batch_ring_missing: a ring exchange, as ring attention or a halo exchange does it
        ops = [dist.P2POp(dist.isend, outgoing, (rank + 1) % world)]
        if not (bad and rank == odd):  # the bug at the bad step: the last rank leaves its irecv out
            ops.append(dist.P2POp(dist.irecv, incoming, (rank - 1) % world))
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return incoming[:1024]

    def step_end(out):
        """A gradient-like tensor averaged over the world (its all_reduce's wait orders the loss after it); the loss."""
        grad = out.mean(0) if out.dim() > 1 else out * 1e-3
        dist.all_reduce(grad)
        return out.pow(2).mean()

    if s in ("send_cycle", "batch_ring_missing") and world < 2:
        raise SystemExit(f"{s} needs two ranks or more")
    with torch.no_grad():
        step_end(traffic(-1, False)).item()  # connections made, before the loop and its truth
        torch.cuda.synchronize()
        truth.mark("t_loop_start")
        t0 = time.time()
        loss = torch.zeros((), device="cuda")
        step = 0
        while True:
            if s == "moe_clean":
                # Every rank stops after the same step (as clean): they agree every 10 steps.
                if step % 10 == 0 and time_is_up(t0, args.duration_sec):
                    break
            elif step >= args.steps:
                break
            bad = step == args.at_step and s != "moe_clean"
            if s == "moe_busy":
                # The batch: the last rank's of --at-step takes --stall-sec, in Python, before its dispatch.
                slow = bad and rank == odd
                if slow:
                    truth.mark("t_depart", step=step)
                load_next_batch(rank, step, args.stall_sec if slow else pace, slow)
            else:
                time.sleep(pace)  # data loading
            if bad and s != "moe_busy" and rank in ((0, 1) if s == "send_cycle" else (odd,)):
                truth.mark("t_depart", step=step)
                if s == "moe_stale_split":
                    rows = moe_split_table(args, step, world)[rank][0]
                    log(rank, f"step {step}: a stale split table: sending rank 0 {2 * rows} rows of "
                              f"{args.moe_hidden} floats where it expects {rows}")
                elif s == "send_cycle":
                    log(rank, f"step {step}: sending {args.p2p_mib} MiB to rank {1 - rank} first, then receiving")
                else:
                    log(rank, f"step {step}: batch_isend_irecv without the irecv from rank {(rank - 1) % world}")
            loss = step_end(traffic(step, bad))
            loss.item()  # the loss read every step: the CPU waits for this step's traffic and all_reduce
            step += 1
    return step, loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=SCENARIOS, default="clean")
    # 80 steps, the departure at 60: the signature window (64 ops) before the hang then holds only steady steps.
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--at-step", type=int, default=60)
    p.add_argument("--pace-ms", type=float, default=25.0, help="data loading time per step")
    p.add_argument("--bcast-every", type=int, default=10,
                   help="drift loops: a broadcast every K steps (0: never, every op one shape: the job hangs at the end)")
    # 256: the gradients fit in DDP's first bucket (1 MiB), so each step is exactly one all_reduce.
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--count", type=int, default=1 << 20, help="elements of the statistics tensor (mismatch)")
    p.add_argument("--short-by", type=int, default=3, help="uneven: batches fewer on the last rank")
    p.add_argument("--accum", type=int, default=4, help="grad_accum: micro-steps per optimizer step")
    p.add_argument("--linger-sec", type=float, default=600.0, help="the idle rank stays alive this long at the end")
    p.add_argument("--delay-sec", type=float, default=18.0, help="init_hang: how late the last rank initialises")
    p.add_argument("--busy-sec", type=float, default=16.0, help="validation: rank 0 busy outside NCCL this long")
    p.add_argument("--duration-sec", type=float, default=None,
                   help="clean, moe_clean: how long to train (120 s); pipeline_slow, pipeline_clean: 30 s")
    p.add_argument("--pg-timeout-sec", type=float, default=0, help="init_process_group(timeout=...); 0: default")
    p.add_argument("--fr-dump-at-end", action="store_true")
    p.add_argument("--give-up-sec", type=float, default=0, help="0: never")
    p.add_argument("--exit-code", type=int, default=1, help="rank_dies: the dying rank's exit code")
    p.add_argument("--gpu-busy-sec", type=float, default=60.0, help="gpu_busy: the long kernel's length")
    p.add_argument("--pipeline-stage", type=int, default=-1, help="pipeline: the stage that stalls (-1: world - 2)")
    p.add_argument("--stall-sec", type=float, default=60.0,
                   help="pipeline: how long stage_busy() takes; moe_busy: the last rank's load_next_batch()")
    p.add_argument("--slow-ms", type=float, default=20.0,
                   help="pipeline_slow: the slow stage's extra GPU work before each forward send")
    p.add_argument("--pipeline-allreduce", action="store_true",
                   help="pipeline: every rank all-reduces a metric after each step (--stall-sec 0: a clean job)")
    p.add_argument("--metric-every", type=int, default=5, help="order_deadlock: steps between the metrics")
    p.add_argument("--moe-hidden", type=int, default=1024, help="moe_*: floats a row (1024: 4 KB rows)")
    p.add_argument("--moe-rows-min", type=int, default=256, help="moe_*: the fewest rows a rank sends a rank a step")
    p.add_argument("--moe-rows-max", type=int, default=2048, help="moe_*: the most rows, before the popular expert's")
    # 16384 rows of 4 KB, 64 MiB: the stale table's surplus to rank 0 must outgrow what NCCL and, with several ranks on
    # one GPU, the sockets between them can hold (their kernel buffers, several MiB a connection).
    p.add_argument("--moe-hot-rows", type=int, default=16384, help="moe_*: rows more to rank 0's popular expert")
    p.add_argument("--moe-seed", type=int, default=0, help="moe_*: the split tables' seed")
    p.add_argument("--p2p-mib", type=int, default=64, help="send_cycle, batch_ring_missing: MiB a message")
    # torch (2.5 and later, pytorch#132900) gives an eagerly initialised group's unbatched send / recv its world
    # communicator (serialised with its collectives); a lazy one makes a 2-rank communicator per pair ("lo:hi", its own
    # ncclCommInitRank through the store) at its first send or recv.
    p.add_argument("--lazy-init", action="store_true", help="init_process_group without device_id (lazy init)")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0, each its own NCCL host")
    args = p.parse_args()
    if args.duration_sec is None:
        args.duration_sec = 30.0 if args.scenario in TIMED_PIPELINES else 120.0

    dev = one_gpu.setup(args.one_gpu)  # the device index: LOCAL_RANK, or 0 with --one-gpu
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    odd = world - 1  # the rank that departs from the loop (rank 0 for validation and grad_accum)
    torch.cuda.set_device(dev)
    s = args.scenario
    truth = Truth(rank, s)
    if s == "algo_differs":
        # Before the first NCCL call (NCCL and the shim read the environment then), as a node's own setting would.
        # For all_reduce only: DDP's first collectives (all_gather, broadcast) have no Tree algorithm, and NCCL would
        # refuse them (ncclInvalidUsage) instead of hanging.
        os.environ["NCCL_ALGO"] = "allreduce:tree" if rank == odd else "allreduce:ring"
        log(rank, f"NCCL_ALGO={os.environ['NCCL_ALGO']}")

    if s == "init_hang" and rank == odd:
        log(rank, f"sleeping {args.delay_sec:.0f} s before init_process_group")
        time.sleep(args.delay_sec)
    kwargs = {}
    if args.pg_timeout_sec > 0:
        kwargs["timeout"] = datetime.timedelta(seconds=args.pg_timeout_sec)
    t_init = time.time()
    truth.mark("t_init_start")
    if not args.lazy_init:
        kwargs["device_id"] = torch.device("cuda", dev)  # eager: the world's communicator made now
    dist.init_process_group("nccl", **kwargs)
    log(rank, f"{s}: process group ready after {time.time() - t_init:.1f} s (world {world})")
    scenario_support.give_up_after(args.give_up_sec, lambda: log(rank, "giving up"))

    if s in PIPELINES or s in P2P:
        steps_run, loss = (run_p2p if s in P2P else run_pipeline)(args, rank, world, truth)
        truth.mark("t_loop_end", step=steps_run)
        torch.cuda.synchronize()  # a stage waiting for a peer that never comes hangs here
        truth.mark("t_done")
        log(rank, f"done {steps_run} {'pipeline ' if s not in P2P else ''}steps, loss {loss.item():.4f}")
        dist.destroy_process_group()
        log(rank, "exit 0")
        return

    torch.manual_seed(0)
    h = args.hidden
    model = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1)).cuda()
    ddp = DDP(model, device_ids=[dev])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(64, h, device="cuda")
    y = torch.randn(64, 1, device="cuda")
    stats = torch.ones(args.count, device="cuda")
    pace = args.pace_ms / 1000.0

    def train_step(micro_pace=pace):
        time.sleep(micro_pace)  # data loading
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        return loss

    groups = []
    if s == "order_deadlock":
        groups = [dist.new_group(list(range(world))), dist.new_group(list(range(world)))]  # A, B: every rank
    graph = None
    if s == "graph_skip":
        graph = capture_allreduce_graph(stats)
    steps = args.steps
    if s in ("uneven", "leave_early") and rank == odd:
        steps = args.steps - args.short_by
    t0 = time.time()
    loss = torch.zeros(())  # the drift loops train nothing
    truth.mark("t_loop_start")
    step = 0
    while True:
        if s == "clean":
            # Every rank must stop after the same step, or the clean run itself hangs: the ranks agree every 50
            # steps (an all_reduce of "my time is up", max) instead of each reading its own clock.
            if step % 50 == 0 and time_is_up(t0, args.duration_sec):
                break
        elif step >= steps:
            break
        if graph is not None:  # graph_skip: no model, one replay a step
            time.sleep(pace)
            if rank == odd and step == args.at_step:
                log(rank, f"skipping the graph replay of step {step}")
                truth.mark("t_depart", step=step)
            else:
                graph.replay()
            step += 1
            continue
        if s in DRIFTS:
            time.sleep(pace)
            n = 1
            if rank == odd and step == args.at_step:
                n = 0 if s == "drift_skip" else 2
                log(rank, f"{'skipping' if n == 0 else 'adding'} one all_reduce at step {step}")
                truth.mark("t_depart", step=step)
            for _ in range(n):
                dist.all_reduce(stats)
            if args.bcast_every and step % args.bcast_every == 0:
                dist.broadcast(stats, src=0)
            step += 1
            continue
        if s in DYING and rank == odd and step == args.at_step:
            log(rank, f"dying at step {step} ({s}; rank_dies: os._exit({args.exit_code}))")
            truth.mark("t_depart", step=step)
            die(rank, s, args.exit_code)
        if s == "oom" and rank == odd and step == args.at_step:
            log(rank, "allocating 32 TiB (a real CUDA out-of-memory error, not caught)")
            truth.mark("t_depart", step=step)
            torch.empty(32 << 40, dtype=torch.uint8, device="cuda")
        if s == "skip" and rank == odd and step == args.at_step:
            log(rank, f"skipping step {step} (a bad batch: `continue` before forward/backward)")
            truth.mark("t_depart", step=step)
            time.sleep(pace)
            step += 1
            continue
        if s == "gpu_busy" and rank == odd and step == args.at_step:
            # About 2 GHz (as examples/ddp_train.py): the stream runs this before the step's forward, backward and
            # all_reduce; the CPU goes on issuing them.
            log(rank, f"a {args.gpu_busy_sec:.0f} s kernel on the GPU before step {step}")
            truth.mark("t_depart", step=step)
            gpu_sleep(args.gpu_busy_sec)
        if s == "validation" and rank == 0 and step == args.at_step:
            log(rank, f"validation on rank 0 only, {args.busy_sec:.0f} s, before step {step}")
            truth.mark("t_depart", step=step)
            validate(rank, args.busy_sec, h)
            truth.mark("t_back")
        if s == "grad_accum":
            for micro in range(args.accum):
                extra = rank == 0 and step == args.at_step and micro == 0
                if extra:
                    log(rank, f"syncing gradients on micro-step 0 of step {step} too (one extra all_reduce)")
                    truth.mark("t_depart", step=step)
                sync = micro == args.accum - 1 or extra
                with contextlib.nullcontext() if sync else ddp.no_sync():
                    loss = train_step(pace / args.accum)
        else:
            loss = train_step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s in ("type_mismatch", "size_mismatch") and step == args.at_step:
            truth.mark("t_depart", step=step)
        if s == "type_mismatch" and step == args.at_step:
            if rank == odd:
                log(rank, f"broadcast of the statistics at step {step} where the others all_reduce")
                dist.broadcast(stats, src=0)
            else:
                dist.all_reduce(stats)
        if s == "order_deadlock" and step % args.metric_every == 0:
            swapped = rank == odd and step == args.at_step
            if swapped:
                log(rank, f"step {step}: the metric over group B first, then group A")
                truth.mark("t_depart", step=step)
            for g in (groups[::-1] if swapped else groups):
                metric = loss.detach().reshape(1).clone()
                dist.all_reduce(metric, group=g)
                metric.item()  # a metric read at once: the CPU waits for this all_reduce
        if s == "size_mismatch" and step == args.at_step:
            if rank == odd:
                log(rank, f"all_reduce of {args.count // 2} elements at step {step} where the others use "
                          f"{args.count}")
                dist.all_reduce(stats[: args.count // 2])
            else:
                dist.all_reduce(stats)
        step += 1

    if s in ("uneven", "leave_early") and rank == odd:
        truth.mark("t_depart", step=step)  # it leaves the epoch early
    if s == "leave_early" and rank == odd:
        log(rank, "out of data: destroy_process_group() and exit 0 while the others go on")
        dist.destroy_process_group()
        log(rank, "exit 0")
        return
    if s == "graph_skip":
        dist.all_reduce(stats)  # eager, after the replays: one off on the skipping rank
    truth.mark("t_loop_end", step=step)
    torch.cuda.synchronize()  # a rank that waits for a peer that never comes hangs here
    truth.mark("t_done")
    elapsed = time.time() - t0
    log(rank, f"done {step} steps in {elapsed:.1f} s, loss {loss.item():.4f}, stats[0] {stats[0].item():.0f}")
    if (s in ("skip", "grad_accum") and rank == odd) or s in DRIFTS or s == "graph_skip":
        log(rank, f"staying alive {args.linger_sec:.0f} s outside NCCL")
        time.sleep(args.linger_sec)
    if args.fr_dump_at_end:
        fr_dump_now(rank)
    if s == "uneven" and rank == odd:
        log(rank, "left the epoch early; exiting with code 0 while the others wait")
        sys.exit(0)
    if s == "teardown_hang":
        log(rank, f"a {args.gpu_busy_sec:.0f} s kernel, one more all_reduce, then destroy_process_group()")
        truth.mark("t_depart", step=step)
        gpu_sleep(args.gpu_busy_sec)
        dist.all_reduce(stats)
    dist.destroy_process_group()
    log(rank, "exit 0")


if __name__ == "__main__":
    main()
