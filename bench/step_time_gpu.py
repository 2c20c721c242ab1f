#!/usr/bin/env python3
"""DDP and FSDP step time with and without the shim at 4 ranks on one GPU (issue 26); run by bench/step_time_gpu.sh,
which finds torch's NCCL and the shim (read its header for how to run it through the device tool).

    step_time_gpu.py --shim SO --deadline EPOCH [--nccl-lib DIR] [--ranks 4] [--work DIR] [--out-dir DIR]
    step_time_gpu.py --rank-wrapper SCRIPT ARGS...    what torchrun runs for DDP: one rank on device 0 as its own NCCL
                                                      host (examples/one_gpu.py, LOCAL_RANK=0), then SCRIPT unchanged
    step_time_gpu.py --fake-torchrun MODEL -- ARGS... NCW_STEP_FAKE=1: stands in for torchrun (no GPU, no torch)

Why two processes and not one: the shim is bound at load time. LD_PRELOAD puts libncclwatch.so ahead of libnccl.so.2,
so libtorch_cuda's calls to ncclAllReduce, ncclAllGather, ... resolve to the shim's definitions when the process
starts, and ProcessGroupNCCL has no second set of call sites that would go around it (bench/call_cost.cpp --ab can
alternate in one process only because it owns its call sites: it calls NCCL's own entry points and the linked ones,
the shim's, in turns). NCCLWATCH_ENABLE is read once at start-up as well. So each arm is its own torchrun launch, and
the arms alternate in pairs, ABBA (pair 1: none then shim, pair 2: shim then none, ...), DDP and FSDP pairs
interleaved, so that a drift of the machine falls on both arms alike; each pair gives one ratio, shim / none.

The models (each rank on device 0, NCCL_HOSTID=fakehost<RANK>, NCCL_SOCKET_IFNAME=lo, NCCL_NVLS_ENABLE=0: NCCL's socket
transport between the 4 ranks):
  ddp   examples/ddp_train.py --steps N --warmup W (its default MLP, hidden 1024, batch 64; + $NCW_STEP_DDP_ARGS),
        through --rank-wrapper (ddp_train.py has no --one-gpu: it takes its device from LOCAL_RANK, as
        test/gpu/wheel_check.sh's wrapper does). Timing: rank 0's "rank 0: N steps in S s (M ms/step), loss L", timed
        after the warm-up by the script (a CUDA synchronize at each end).
  fsdp  examples/fsdp_train.py --mode fsdp2 --one-gpu --pace-ms 0 --steps N --warmup W (3 blocks, dim 512;
        + $NCW_STEP_FSDP_ARGS). Timing: rank 0's truth file's train_s (NCW_TRUTH_DIR; the same elapsed time as its
        "training finished" line, which prints it to 0.1 s), timed after the warm-up; the log line if the file is
        missing.
Both arms have the same environment except LD_PRELOAD=<shim> and NCCLWATCH_DIR=<a fresh folder> (any NCCLWATCH_* and
LD_PRELOAD of the caller's are removed; NCCL_DEBUG=VERSION on both, to record the NCCL each run loaded).

Steps: the first pair of each model uses a guess (NCW_STEP_DDP_STEPS0 300, NCW_STEP_FSDP_STEPS0 60); later pairs take
the step time and start-up cost measured so far and aim at NCW_STEP_RUN_SEC (8) timed seconds a run, less when the
budget would not give every model NCW_STEP_MIN_PAIRS (3) pairs. Pairs go on while the next one is predicted to fit
before --deadline (the model with the fewest pairs first), at most NCW_STEP_MAX_PAIRS (12) per model.
A run fails on a non-zero exit, a missing timing line or, with the shim, no rank files written (the shim did not
record): it is listed in the runs table with its stderr's tail, and its pair gives no ratio. A model stops after a run
hits its timeout, or after two pairs in a row with a failure.
Verdict per model: "not resolved" when fewer than 3 pairs, when the ratios lie on both sides of 1, or when their
half-range exceeds the median's distance from 1 (the spread is larger than the effect); else "resolved".
Exit status: 0 at least one complete pair, 1 none, 2 a setup error (the wrong NCCL loaded, the shim not loaded).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)
RESERVE_S = 6.0  # kept for the tables at the end
ARMS = ("none", "shim")


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def env_float(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


MODELS = {
    "ddp": {
        "title": "DDP",
        "script": "examples/ddp_train.py",
        "wrapper": True,
        "fixed": [],
        "user": os.environ.get("NCW_STEP_DDP_ARGS", "").split(),
        "steps0": env_int("NCW_STEP_DDP_STEPS0", 300),
        "warmup0": 30,
    },
    "fsdp": {
        "title": "FSDP2",
        "script": "examples/fsdp_train.py",
        "wrapper": False,
        "fixed": ["--mode", "fsdp2", "--one-gpu", "--pace-ms", "0"],
        "user": os.environ.get("NCW_STEP_FSDP_ARGS", "").split(),
        "steps0": env_int("NCW_STEP_FSDP_STEPS0", 60),
        "warmup0": 10,
    },
}
DDP_RE = re.compile(r"rank 0: (\d+) steps in ([0-9.]+) s \(([0-9.]+) ms/step\), loss (\S+)")
FSDP_RE = re.compile(r"\[fsdp_train rank 0 [^\]]*\] training finished: (\d+) steps in ([0-9.]+) s, [0-9.]+ ms per "
                     r"step, loss (\S+)")
NCCL_VERSION_RE = re.compile(r"NCCL version (\S+)")


# ------------------------------------------------------------------------------------------------ what torchrun runs
def rank_wrapper(argv):
    """One DDP rank on device 0 as its own NCCL host (examples/one_gpu.py), then the example unchanged."""
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import one_gpu  # examples/one_gpu.py

    os.environ["LOCAL_RANK"] = str(one_gpu.setup(True))
    sys.argv = list(argv)
    import runpy

    runpy.run_path(argv[0], run_name="__main__")


def fake_torchrun(model, args):
    """NCW_STEP_FAKE=1: prints what the real job's ranks print, after sleeping the time the steps would take.
    NCW_STEP_FAKE_FAIL="MODEL:ARM:K[:exit|noline|hang],...": the K-th run of that model and arm fails so;
    NCW_STEP_FAKE_MS="ddp=1.6 fsdp=6": the step times; NCW_STEP_FAKE_START_SEC (0.3): a launch's start-up."""
    import random

    def opt(name, default):
        return int(args[args.index(name) + 1]) if name in args else default

    steps, warmup = opt("--steps", 200), opt("--warmup", 0)
    arm = "shim" if os.environ.get("LD_PRELOAD") else "none"
    base = {"ddp": 1.6, "fsdp": 6.0}
    for kv in os.environ.get("NCW_STEP_FAKE_MS", "").replace(",", " ").split():  # "ddp=5 fsdp=20"
        k, _, v = kv.partition("=")
        base[k] = float(v)
    base = base[model] * (1.004 if arm == "shim" else 1.0)
    ms = base * random.gauss(1.0, 0.04)
    mode = ""
    for spec in filter(None, os.environ.get("NCW_STEP_FAKE_FAIL", "").split(",")):
        f = spec.split(":")
        if ":".join(f[:3]) == os.environ.get("NCW_STEP_FAKE_RUN", ""):
            mode = f[3] if len(f) > 3 else "exit"
    speed = env_float("NCW_STEP_FAKE_SPEED", 1.0)
    print("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default", file=sys.stderr)
    for r in range(4):
        print(f"NCCL version 2.28.9+cuda13.0 (fake rank {r})")
    if mode == "hang":
        time.sleep(10000)
    time.sleep((env_float("NCW_STEP_FAKE_START_SEC", 0.3) + (steps + warmup) * ms / 1000.0) * speed)
    if arm == "shim" and os.environ.get("NCCLWATCH_DIR"):
        d = os.path.join(os.environ["NCCLWATCH_DIR"], "fakejob")
        os.makedirs(d, exist_ok=True)
        for r in range(4):
            open(os.path.join(d, f"rank{r}-fakehost{r}-{1000 + r}.ncw"), "w").close()
        open(os.path.join(d, "rankx-fakehost-999.ncw"), "w").close()  # as the launcher under LD_PRELOAD may
    if mode == "exit":
        print("Traceback (most recent call last):\n  File \"examples/x.py\", line 1, in <module>\n"
              "torch.distributed.DistBackendError: NCCL error in: fake, remote process exited or there was a network "
              "error", file=sys.stderr)
        print("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: examples failed", file=sys.stderr)
        sys.exit(1)
    if mode == "noline":
        return
    elapsed = steps * ms / 1000.0
    for r in range(4):
        if model == "ddp":
            print(f"rank {r}: {steps} steps in {elapsed:.3f} s ({ms:.3f} ms/step), loss 1.0123")
        else:
            print(f"[fsdp_train rank {r} 12:00:00] training finished: {steps} steps in {elapsed:.1f} s, {ms:.0f} ms "
                  f"per step, loss 0.9876")
            d = os.environ.get("NCW_TRUTH_DIR")
            if d:
                with open(os.path.join(d, f"truth-rank{r}.json"), "w") as f:
                    json.dump({"mode": "fsdp2", "world": 4, "steps": steps, "done": True, "train_s": elapsed}, f)


# ------------------------------------------------------------------------------------------------ processes
def descendants(pid):
    """Every live descendant of pid (from /proc), deepest last."""
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                s = f.read()
            ppid = int(s[s.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(stat.split("/")[2]))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def end_tree(proc):
    """Ends a launch we started, by pid: torchrun first (SIGTERM: it ends its workers), then SIGKILL to what is left
    of it and of the descendants seen before. Says how it ended."""
    pids = descendants(proc.pid)
    for sig, wait in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 3.0)):
        for p in [proc.pid] + (pids if sig == signal.SIGKILL else []):
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
        alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
        if sig == signal.SIGTERM and proc.poll() is not None and not alive:
            return "ended by SIGTERM"
    return "ended by SIGTERM, then SIGKILL" + (f" ({len(alive)} processes still there)" if alive else "")


class Stop(Exception):
    """SIGTERM or SIGINT (the shell's guard timeout): end the launch in flight, write the tables."""


def on_signal(signum, _frame):
    raise Stop(f"signal {signum}")


# ------------------------------------------------------------------------------------------------ one run
def tail(path, lines=20, chars=2500):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    keep = [x for x in text.splitlines() if x.strip()][-lines:]
    return "\n".join(keep)[-chars:]


ERROR_RE = re.compile(r"(Error|Exception|error:|Killed|Segmentation fault|Aborted|Traceback)")
NOISE_RE = re.compile(r"ChildFailedError|To enable traceback|errors\.html|^\s*File \"")


def error_lines(path, most=8):
    """The distinct lines of a failed launch's stderr that name an error (a worker's exception, NCCL's error), in
    order, at most `most` (the last ones): what torchrun's closing summary hides."""
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for x in lines:
        x = x.strip()
        if x and ERROR_RE.search(x) and not NOISE_RE.search(x) and x not in out:
            out.append(x[:300])
    return out[-most:]


def base_env():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("NCCLWATCH_") or k in ("LD_PRELOAD", "NCCL_PROFILER_PLUGIN") or k.startswith("NCW_STEP_"):
            env.pop(k)
    env.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                "PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "VERSION"})
    return env


def run_one(a, rec, timeout):
    """Runs one launch as rec says (model, arm, steps, warmup); fills rec with what came of it."""
    m = MODELS[rec["model"]]
    d = os.path.join(a.work, f"run{rec['i']:02d}-{rec['model']}-p{rec['pair']}-{rec['arm']}")
    os.makedirs(d, exist_ok=True)
    script_args = m["fixed"] + m["user"] + ["--steps", str(rec["steps"]), "--warmup", str(rec["warmup"])]
    script = os.path.join(REPO, m["script"])
    if a.fake:
        cmd = [sys.executable, HERE, "--fake-torchrun", rec["model"], "--"] + script_args
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.ranks)]
        cmd += ([HERE, "--rank-wrapper", script] if m["wrapper"] else [script]) + script_args
    env = base_env()
    ncw = os.path.join(d, "ncw")
    if rec["arm"] == "shim":
        env["LD_PRELOAD"] = a.shim
        env["NCCLWATCH_DIR"] = ncw
    if rec["model"] == "fsdp":
        env["NCW_TRUTH_DIR"] = os.path.join(d, "truth")
        os.makedirs(env["NCW_TRUTH_DIR"], exist_ok=True)
    if a.fake:
        env["NCW_STEP_FAKE_RUN"] = f"{rec['model']}:{rec['arm']}:{rec['arm_k']}"
        for k in ("NCW_STEP_FAKE_FAIL", "NCW_STEP_FAKE_SPEED", "NCW_STEP_FAKE_MS", "NCW_STEP_FAKE_START_SEC"):
            if k in os.environ:
                env[k] = os.environ[k]
    rec["cmd"] = " ".join(cmd)
    rec["timeout_s"] = round(timeout, 1)
    out_p, err_p = os.path.join(d, "stdout.txt"), os.path.join(d, "stderr.txt")
    t0 = time.time()
    rec["start_s"] = round(t0 - a.t_start, 1)
    timed_out, how = False, ""
    with open(out_p, "w") as fo, open(err_p, "w") as fe:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, cwd=REPO)
        try:
            proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            how = end_tree(proc)
        except Stop:
            end_tree(proc)
            raise
    rec["wall_s"] = round(time.time() - t0, 2)
    rec["rc"] = 124 if timed_out else proc.returncode
    rec["timed_out"] = timed_out
    with open(out_p, errors="replace") as f:
        out = f.read()
    versions = sorted(set(NCCL_VERSION_RE.findall(out + open(err_p, errors="replace").read())))
    rec["nccl_version"] = ", ".join(versions)
    ms = loss = None
    src = ""
    if rec["model"] == "ddp":
        mm = DDP_RE.search(out)
        if mm:
            steps, secs, loss = int(mm.group(1)), float(mm.group(2)), mm.group(4)
            ms = secs / steps * 1000.0 if steps else None
            src = "log"
    else:
        mm = FSDP_RE.search(out)
        if mm:
            loss = mm.group(3)
        try:
            with open(os.path.join(d, "truth", "truth-rank0.json")) as f:
                t = json.load(f)
            if t.get("done") and t.get("steps"):
                ms, src = float(t["train_s"]) / int(t["steps"]) * 1000.0, "truth"
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if ms is None and mm and int(mm.group(1)):
            ms, src = float(mm.group(2)) / int(mm.group(1)) * 1000.0, "log (0.1 s)"
    rec["ms_per_step"] = round(ms, 5) if ms is not None else None
    rec["timing_from"] = src
    rec["loss"] = loss
    rank_files = glob.glob(os.path.join(ncw, "*", "rank[0-9]*.ncw")) if rec["arm"] == "shim" else []
    rec["rank_files"] = len(rank_files) if rec["arm"] == "shim" else None
    why = []
    if timed_out:
        why.append(f"timed out after {timeout:.0f} s ({how})")
    elif rec["rc"] != 0:
        why.append(f"exit {rec['rc']}")
    if ms is None:
        why.append("no timing line")
    if rec["arm"] == "shim" and not timed_out and rec["rc"] == 0 and len(rank_files) != a.ranks:
        why.append(f"the shim wrote {len(rank_files)} rank files, want {a.ranks}"
                   + (" (did it load?)" if not rank_files else ""))
    rec["ok"] = not why
    rec["why"] = "; ".join(why)
    rec["stderr_tail"] = "" if rec["ok"] else tail(err_p, 25, 4000)
    rec["stdout_tail"] = "" if rec["ok"] else tail(out_p, 6, 1500)
    rec["error_lines"] = [] if rec["ok"] else error_lines(err_p)
    shutil.rmtree(ncw, ignore_errors=True)  # 2.4 MiB a rank file; their count is kept
    return rec


# ------------------------------------------------------------------------------------------------ the plan
class ModelState:
    def __init__(self, name):
        self.name = name
        self.pairs = []  # [{"pair": k, "runs": [rec, rec]}]
        self.stopped = ""
        self.fail_streak = 0

    def ok_runs(self):
        return [r for p in self.pairs for r in p["runs"] if r["ok"]]

    def ms(self):
        runs = self.ok_runs()
        return statistics.median(r["ms_per_step"] for r in runs) if runs else None

    def overhead(self):
        """Seconds a launch costs besides its steps (start-up, init, teardown), from the runs that worked."""
        runs = self.ok_runs()
        if not runs:
            return None
        return statistics.median(max(0.0, r["wall_s"] - (r["steps"] + r["warmup"]) * r["ms_per_step"] / 1000.0)
                                 for r in runs)


def plan_pair(a, st, states, now):
    """(steps, warmup, predicted seconds of the pair or None, per-run timeout) for st's next pair, or None if it
    does not fit before the deadline."""
    left = a.deadline - now - RESERVE_S
    m = MODELS[st.name]
    ms, over = st.ms(), st.overhead()
    if ms is None:  # nothing measured yet: the guess, and a timeout that keeps room for the others
        if left < 2 * a.first_run_s:
            return None
        per_run = min(a.run_timeout, max(a.first_run_s, (left - a.first_run_s) / 2))
        return m["steps0"], m["warmup0"], None, per_run
    deficit = sum(max(0, a.min_pairs - len(s.pairs)) for s in states.values() if not s.stopped and s is not st)
    need = max(1, a.min_pairs - len(st.pairs)) + deficit
    warmup = int(min(100, max(10, round(1000.0 / ms))))  # about one second of warm-up
    budget_timed = left / need / 2 - over - warmup * ms / 1000.0  # the pairs still owed share what is left
    fit_timed = (left - 4) / 2.4 - over - warmup * ms / 1000.0  # this pair with a margin: runs spread by some %
    timed = min(a.run_s, max(a.min_run_s, budget_timed), fit_timed)
    if timed < a.min_run_s:
        return None
    steps = max(20, int(round(timed * 1000.0 / ms)))
    run_pred = over + (steps + warmup) * ms / 1000.0
    per_run = min(left - run_pred, max(3 * run_pred, run_pred + 30))  # the second run keeps its prediction
    return steps, warmup, 2 * run_pred, per_run


def measure(a):
    states = {name: ModelState(name) for name in a.models}
    runs = []
    arm_count = {}
    order = list(a.models)
    try:
        while True:
            now = time.time()
            cands = sorted((s for s in states.values() if not s.stopped and len(s.pairs) < a.max_pairs),
                           key=lambda s: (len(s.pairs), order.index(s.name)))
            chosen = None
            for st in cands:
                plan = plan_pair(a, st, states, now)
                if plan:
                    chosen = (st, plan)
                    break
            if not chosen:
                break
            st, (steps, warmup, pred, per_run) = chosen
            k = len(st.pairs) + 1
            arms = ARMS if k % 2 == 1 else ARMS[::-1]  # ABBA
            pair = {"pair": k, "runs": []}
            st.pairs.append(pair)
            print(f"[{now - a.t_start:5.0f} s] {MODELS[st.name]['title']} pair {k} ({arms[0]}, {arms[1]}): {steps} "
                  f"steps after {warmup} of warm-up"
                  + (f", predicted {pred:.0f} s" if pred else ", first: a guess")
                  + f", timeout {per_run:.0f} s a run", flush=True)
            for arm in arms:
                arm_count[(st.name, arm)] = arm_count.get((st.name, arm), 0) + 1
                left = a.deadline - time.time() - RESERVE_S
                rec = {"i": len(runs) + 1, "model": st.name, "pair": k, "arm": arm, "arm_k": arm_count[(st.name, arm)],
                       "steps": steps, "warmup": warmup}
                runs.append(rec)
                pair["runs"].append(rec)
                run_one(a, rec, min(per_run, max(5.0, left)))
                print(f"        {arm:4s}: " + (f"{rec['ms_per_step']:.4f} ms/step" if rec["ok"] else
                                                f"FAILED ({rec['why']})") + f", {rec['wall_s']:.1f} s wall", flush=True)
            failed = [r for r in pair["runs"] if not r["ok"]]
            st.fail_streak = st.fail_streak + 1 if failed else 0
            if any(r["timed_out"] for r in failed):
                st.stopped = "stopped: a run timed out"
            elif st.fail_streak >= 2:
                st.stopped = "stopped: two pairs in a row with a failed run"
    except Stop as e:
        print(f"stopped by {e}: the tables follow with the runs so far", flush=True)
        for s in states.values():
            s.stopped = s.stopped or f"stopped by {e}"
        if runs and "ok" not in runs[-1]:
            for k, v in {"wall_s": 0, "rc": None, "ms_per_step": None, "timed_out": False, "stderr_tail": ""}.items():
                runs[-1].setdefault(k, v)
            runs[-1].update({"ok": False, "why": f"ended by {e}"})
    return states, runs


# ------------------------------------------------------------------------------------------------ the tables
def verdict(ratios, min_pairs):
    n = len(ratios)
    if not n:
        return "no pair measured"
    med, lo, hi = statistics.median(ratios), min(ratios), max(ratios)
    effect, half = med - 1.0, (hi - lo) / 2.0
    if n < min_pairs:
        return f"not resolved: {n} pair{'s' if n > 1 else ''}, fewer than {min_pairs}"
    if lo <= 1.0 <= hi:
        return (f"not resolved: the ratios lie on both sides of 1 (half-range ±{half * 100:.2f} %, median effect "
                f"{effect * 100:+.2f} %)")
    if half > abs(effect):
        return (f"not resolved: the ratios spread ±{half * 100:.2f} %, more than the median effect "
                f"{effect * 100:+.2f} %")
    return (f"resolved: the shim {'slower' if effect > 0 else 'faster'} by {abs(effect) * 100:.2f} % (every pair on "
            f"that side, spread ±{half * 100:.2f} %)")


def summarize(st, min_pairs):
    complete = [p for p in st.pairs if len(p["runs"]) == 2 and all(r["ok"] for r in p["runs"])]
    by_arm = {arm: [r["ms_per_step"] for p in complete for r in p["runs"] if r["arm"] == arm] for arm in ARMS}
    ratios = []
    same_loss = 0
    for p in complete:
        r = {x["arm"]: x for x in p["runs"]}
        ratios.append(r["shim"]["ms_per_step"] / r["none"]["ms_per_step"])
        same_loss += r["shim"]["loss"] == r["none"]["loss"]
    s = {"model": st.name, "pairs": len(complete), "pairs_tried": len(st.pairs),
         "none_median_ms": statistics.median(by_arm["none"]) if complete else None,
         "shim_median_ms": statistics.median(by_arm["shim"]) if complete else None,
         "ratios": [round(x, 5) for x in ratios],
         "median_ratio": statistics.median(ratios) if ratios else None,
         "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
         "same_loss_pairs": same_loss, "verdict": verdict(ratios, min_pairs), "stopped": st.stopped}
    return s


def cell(x):
    return str(x).replace("|", "\\|").replace("\n", " ⏎ ")


def describe(name):
    m = MODELS[name]
    args = " ".join(m["fixed"] + m["user"])
    how = "through bench/step_time_gpu.py --rank-wrapper (one_gpu.setup, LOCAL_RANK=0)" if m["wrapper"] else ""
    return f"{m['title']}: `{m['script']}{' ' + args if args else ''}` {how}".strip()


def render(a, meta, states, runs, summaries):
    L = [f"## Step time with and without the shim: {a.ranks} ranks on one GPU (issue 26)", ""]
    env = meta.get("env", {}).get("none", {})
    L.append(f"{meta['when']}; {'FAKE launcher (NCW_STEP_FAKE=1): no GPU, the numbers are made up; ' if a.fake else ''}"
             f"torch {env.get('torch', '?')} (CUDA {env.get('cuda', '?')}), NCCL {env.get('nccl', '?')} from "
             f"`{', '.join(env.get('libnccl', [])) or '?'}`, {env.get('gpu', '?')}; shim `{a.shim}` "
             f"({meta.get('shim_size', '?')} bytes, sha256 {meta.get('shim_sha256', '?')}); budget "
             f"{meta['budget_s']:.0f} s, used {meta['used_s']:.0f} s.")
    L.append("Each run is its own `python3 -m torch.distributed.run --standalone --nproc-per-node "
             f"{a.ranks}` launch (the shim binds at load time: no in-process A/B through torch); every rank on "
             "device 0, "
             "NCCL_HOSTID=fakehost<RANK>, NCCL_SOCKET_IFNAME=lo, NCCL_NVLS_ENABLE=0; with the shim: LD_PRELOAD and "
             "NCCLWATCH_DIR only. Arms alternated ABBA; ms/step of rank 0, timed by the script after its warm-up.")
    for name in a.models:
        L.append(f"- {describe(name)}")
    L += ["", "| model | pairs | none: median ms/step | shim: median ms/step | shim / none: median of pair ratios | "
              "ratios min..max | loss equal | verdict |", "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        title = MODELS[s["model"]]["title"]
        tried = f" (of {s['pairs_tried']})" if s["pairs_tried"] != s["pairs"] else ""
        if s["pairs"]:
            med = s["median_ratio"]
            L.append(f"| {title} | {s['pairs']}{tried} | {s['none_median_ms']:.4f} | {s['shim_median_ms']:.4f} | "
                     f"{med:.4f} ({(med - 1) * 100:+.2f} %) | {s['ratio_min']:.4f}..{s['ratio_max']:.4f} | "
                     f"{s['same_loss_pairs']} of {s['pairs']} pairs | {cell(s['verdict'])}"
                     f"{'; ' + cell(s['stopped']) if s['stopped'] else ''} |")
        else:
            L.append(f"| {title} | 0{tried} | - | - | - | - | - | {cell(s['verdict'])}"
                     f"{'; ' + cell(s['stopped']) if s['stopped'] else ''} |")
    L += ["", "Runs, in order:", "",
          "| # | start s | model | pair | arm | steps (+ warm-up) | exit | ms/step | wall s | NCCL | note |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        ms = f"{r['ms_per_step']:.4f}" if r.get("ok") else "FAILED"
        note = "" if r.get("ok") else r.get("why", "")
        if not r.get("ok") and (r.get("error_lines") or r.get("stderr_tail")):
            last = (r.get("error_lines") or r["stderr_tail"].splitlines())[-1][:200]
            note += f"; stderr: `{last}` (tail below)"
        elif r.get("ok") and r.get("timing_from", "").startswith("log ("):
            note = f"timing from the log line, {r['timing_from']}"
        if r.get("arm") == "shim" and r.get("rank_files") is not None and r.get("ok"):
            note = (note + "; " if note else "") + f"{r['rank_files']} rank files"
        L.append(f"| {r['i']} | {r.get('start_s', '')} | {MODELS[r['model']]['title']} | {r['pair']} | {r['arm']} | "
                 f"{r['steps']} (+{r['warmup']}) | {r.get('rc', '')} | {ms} | {r.get('wall_s') or 0:.1f} | "
                 f"{cell(r.get('nccl_version', ''))} | {cell(note)} |")
    failed = [r for r in runs if not r.get("ok")]
    if failed:
        L += ["", f"Failed runs ({len(failed)}): the lines of stderr that name an error, its tail, and stdout's tail"]
        for r in failed:
            L += ["", f"run {r['i']}, {MODELS[r['model']]['title']} pair {r['pair']} {r['arm']}: {r.get('why', '')}",
                  "```"]
            if r.get("error_lines"):
                L += ["-- error lines:"] + r["error_lines"] + ["-- stderr, the tail:"]
            L += [r.get("stderr_tail", "") or "(stderr empty)", "-- stdout, the tail:",
                  r.get("stdout_tail", "") or "(stdout empty)", "```"]
    L.append("")
    return "\n".join(L)


# ------------------------------------------------------------------------------------------------ set-up checks
CHECK = r"""
import json, os, torch
v = torch.cuda.nccl.version()
libs, shim = set(), set()
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) >= 6 and f[5].startswith("/"):
        base = os.path.basename(f[5])
        if base.startswith("libnccl.so"):
            libs.add(os.path.realpath(f[5]))
        if base.startswith("libncclwatch"):
            shim.add(os.path.realpath(f[5]))
n = torch.cuda.device_count()
print("NCW_CHECK " + json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
      "nccl": ".".join(map(str, v)) if isinstance(v, tuple) else str(v), "libnccl": sorted(libs), "shim": sorted(shim),
      "gpus": n, "gpu": torch.cuda.get_device_name(0) if n else "no GPU"}))
"""


def check_setup(a):
    """Which NCCL torch loads, and that the shim loads, in the environment of each arm. Returns (info, errors)."""
    info, errors = {}, []
    for arm in ARMS:
        env = base_env()
        if arm == "shim":
            env["LD_PRELOAD"] = a.shim
            env["NCCLWATCH_DIR"] = os.path.join(a.work, "check-ncw")
        try:
            p = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=90)
            line = [x for x in p.stdout.splitlines() if x.startswith("NCW_CHECK ")]
            if not line:
                errors.append(f"{arm}: the check printed nothing (exit {p.returncode}): "
                              f"{(p.stderr.strip().splitlines() or [''])[-1][:300]}")
                continue
            info[arm] = json.loads(line[0][len("NCW_CHECK "):])
        except (subprocess.TimeoutExpired, OSError, ValueError) as e:
            errors.append(f"{arm}: the check failed: {e}")
            continue
        got = info[arm]
        want_dir = os.path.realpath(a.nccl_lib) if a.nccl_lib else ""
        if not got["libnccl"]:
            errors.append(f"{arm}: no libnccl.so mapped after import torch")
        for lib in got["libnccl"]:
            if want_dir and os.path.dirname(lib) != want_dir:
                errors.append(f"{arm}: torch loaded {lib}, not the one in {want_dir} (the system NCCL?)")
        if arm == "shim" and not got["shim"]:
            errors.append("shim: libncclwatch.so is not mapped under LD_PRELOAD")
        if arm == "none" and got["shim"]:
            errors.append(f"none: the shim is mapped without LD_PRELOAD: {got['shim']}")
        print(f"check {arm}: torch {got['torch']}, NCCL {got['nccl']} from {', '.join(got['libnccl'])}; "
              f"{got['gpus']} GPU(s) ({got['gpu']})" + (f"; shim {', '.join(got['shim'])}" if arm == "shim" else ""),
              flush=True)
    if info.get("none", {}).get("gpus") == 0:
        errors.append("no GPU visible to torch")
    return info, errors


def main(argv):
    if len(argv) > 1 and argv[1] == "--rank-wrapper":
        return rank_wrapper(argv[2:])
    if len(argv) > 1 and argv[1] == "--fake-torchrun":
        rest = argv[3:]
        return fake_torchrun(argv[2], rest[1:] if rest[:1] == ["--"] else rest)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shim", required=True)
    p.add_argument("--deadline", type=float, required=True, help="epoch seconds by which the tables are written")
    p.add_argument("--budget-sec", type=float, default=0, help="for the header only: the whole script's budget")
    p.add_argument("--nccl-lib", default="", help="the folder torch's libnccl.so.2 must come from")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--models", default=os.environ.get("NCW_STEP_MODELS", "ddp fsdp"))
    p.add_argument("--work", default="")
    p.add_argument("--out-dir", default="")
    a = p.parse_args(argv[1:])
    a.t_start = time.time()
    a.fake = os.environ.get("NCW_STEP_FAKE", "0") not in ("", "0")
    a.models = [x for x in a.models.replace(",", " ").split() if x in MODELS] or list(MODELS)
    a.run_s = env_float("NCW_STEP_RUN_SEC", 8.0)
    a.min_run_s = min(a.run_s, env_float("NCW_STEP_MIN_RUN_SEC", 2.0))
    a.min_pairs = env_int("NCW_STEP_MIN_PAIRS", 3)
    a.max_pairs = env_int("NCW_STEP_MAX_PAIRS", 12)
    a.first_run_s = env_float("NCW_STEP_FIRST_RUN_SEC", 20.0)  # what a first (guessed) run is allowed to take
    a.run_timeout = env_float("NCW_STEP_RUN_TIMEOUT", 60.0)  # the timeout of a first run
    a.shim = os.path.abspath(a.shim)
    a.work = a.work or f"/tmp/ncw-step-time-{os.getpid()}"
    os.makedirs(a.work, exist_ok=True)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    meta = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "budget_s": a.budget_sec or (a.deadline - a.t_start),
            "ranks": a.ranks, "models": a.models, "fake": a.fake, "shim": a.shim,
            "knobs": {"run_s": a.run_s, "min_run_s": a.min_run_s, "min_pairs": a.min_pairs, "max_pairs": a.max_pairs,
                      "first_run_s": a.first_run_s, "run_timeout": a.run_timeout},
            "model_args": {n: MODELS[n]["fixed"] + MODELS[n]["user"] for n in a.models}}
    try:
        with open(a.shim, "rb") as f:
            data = f.read()
        meta["shim_size"], meta["shim_sha256"] = len(data), hashlib.sha256(data).hexdigest()[:16]
    except OSError as e:
        if not a.fake:
            print(f"step_time_gpu: cannot read the shim {a.shim}: {e}")
            return 2
    try:
        meta["commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        meta["commit"] = ""

    errors = []
    if a.fake:
        meta["env"] = {arm: {"torch": "fake", "cuda": "-", "nccl": "2.28.9 (fake)", "libnccl": ["(fake)"],
                             "gpu": "no GPU (fake)"} for arm in ARMS}
    else:
        try:
            meta["env"], errors = check_setup(a)
        except Stop as e:
            meta["env"], errors = {}, [f"stopped by {e}"]
    if errors:
        meta["setup_errors"] = errors
        states, runs = {n: ModelState(n) for n in a.models}, []
        for s in states.values():
            s.stopped = "not run: set-up check failed"
    else:
        states, runs = measure(a)
    meta["used_s"] = time.time() - a.t_start + (a.budget_sec - (a.deadline - a.t_start) if a.budget_sec else 0)
    summaries = [summarize(states[n], a.min_pairs) for n in a.models]
    md = render(a, meta, states, runs, summaries)
    if errors:
        md += "\nSET-UP CHECK FAILED (nothing measured):\n" + "\n".join(f"- {e}" for e in errors) + "\n"
    print()
    print(md, flush=True)
    if a.out_dir:
        os.makedirs(a.out_dir, exist_ok=True)
        with open(os.path.join(a.out_dir, "step_time.md"), "w") as f:
            f.write(md)
        with open(os.path.join(a.out_dir, "step_time_raw.json"), "w") as f:
            json.dump({"meta": meta, "summary": summaries, "runs": runs}, f, indent=1)
    if errors:
        return 2
    return 0 if any(s["pairs"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
