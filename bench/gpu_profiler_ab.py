#!/usr/bin/env python3
"""The profiler path, the event fallback and neither, side by side, in one device call (issue 13, "Measure"); run by
bench/gpu_profiler_ab.sh (which sets the library path) and by test/gpu/run.sh's phase 6.

    gpu_profiler_ab.py --shim SO --call-cost EXE --collector EXE [--budget-sec 75] [--rounds 3] [--gpus 1]
                       [--work DIR] [--out TABLE.md] [--rows DIR]
    gpu_profiler_ab.py --parse WORK_DIR ...   (tables again from the raw outputs a run left; no GPU)
    gpu_profiler_ab.py ... --cpu-only          (only the CPU per call, pinned, with its in-process A/B: many rounds)

Modes (one process environment each; NCCL_PROFILER_PLUGIN is never set by us):
  none      no shim
  profiler  the shim, default: NCCL_PROFILER_PLUGIN unset, so the shim points NCCL at itself (STATIC_PLUGIN)
  empty     the shim with NCCLWATCH_PROFILER=empty: NCCL's profiler active, our callbacks return at once
  events    the shim with NCCLWATCH_PROFILER=off: the CUDA-event fallback
  neither   the shim with NCCLWATCH_PROFILER=off NCCLWATCH_GPU_EVENTS=0: no GPU tracking at all
Per mode and round (the modes' order rotates every round; rounds until --rounds or the budget):
  cpu    `call_cost --cuda --ab-cpu`: CPU per intercepted call, and the same in one process against NCCL's own
         entry points (a process lands in one of two speed modes ~150 ns apart: the in-process figure is immune), 8 B all_reduce on a 1-rank communicator (NCCL runs one-rank
         collectives as a copy: no profiler events there, so this is the wrappers and NCCL's API-level profiler hooks)
  pair   two processes on device 0, each its own NCCL host (NCCL_HOSTID, NCCL_SOCKET_IFNAME=lo: the socket transport,
         where the profiler's Coll and KernelCh events do fire): `call_cost --cuda --nranks 2 --ab` (the in-process
         A/B at 8 B: blocks alternate between NCCL's own entry points and the linked ones, the shim's; its "own" arm
         still runs NCCL's profiler and our callbacks, so across modes it shows what they cost), then `--sweep` 1 MB ..
         128 MB (bus bandwidth through the shim). NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT says which profiler plugin
         NCCL loaded; `ncclwatch-collector dump --json` of a rank file says the comm's gpu_source.
  group2 (--gpus 2) `call_cost --cuda --group 2 --ab`: all_reduce_perf -g 2's loop over NVLink, the +0.44 us method.
Derived: NCCL's profiler activation with our callbacks empty = empty - neither (NCCL's own arm, and the CPU per
call); our callbacks = profiler - empty; the profiler path's whole cost = profiler - none.
Goals (rows for test/gpu/print_table.py): A/B at 8 B of the profiler path <= +0.15 us; CPU per call <= +100 ns over
none; bus bandwidth from 1 MB within the spread of the runs without the shim (at least 3 %).
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

MODES = [
    ("none", None, "no shim"),
    ("profiler", {}, "shim, NCCL's profiler -> our plugin"),
    ("empty", {"NCCLWATCH_PROFILER": "empty"}, "shim, profiler on, our callbacks empty"),
    ("events", {"NCCLWATCH_PROFILER": "off"}, "shim, CUDA-event fallback"),
    ("neither", {"NCCLWATCH_PROFILER": "off", "NCCLWATCH_GPU_EVENTS": "0"}, "shim, no GPU tracking"),
]
SWEEP = (1 << 20, 128 << 20)
PIN = ["taskset", "-c", "3"] if shutil.which("taskset") else []
AB_RE = re.compile(r"^ab nccl \d+ (?:GPU|fake)(?P<what>[^,]*), (?P<who>[^:]+): NCCL's own (?P<own>[-0-9.]+) us/iter \(launch "
                   r"(?P<own_l>[-0-9.]+)\), linked (?P<lnk>[-0-9.]+) us/iter \(launch (?P<lnk_l>[-0-9.]+)\); added: "
                   r"median (?P<add>[-0-9.]+) us, p10 (?P<p10>[-0-9.]+), p90 (?P<p90>[-0-9.]+).*?(?:launch added: "
                   r"median (?P<add_l>[-0-9.]+) us)?$", re.M)
ABCPU_RE = re.compile(r"^abcpu nccl \d+ GPU, [^:]+: NCCL's own (?P<own>[0-9.]+) ns/call, linked (?P<lnk>[0-9.]+) "
                      r"ns/call; added: median (?P<add>[-0-9.]+) ns", re.M)
CPU_RE = re.compile(r"^nccl \d+ GPU: median (?P<ns>[0-9.]+) ns/call", re.M)
SWEEP_RE = re.compile(r"^sweep ranks (\d+) bytes (\d+) us ([0-9.]+) busbw ([0-9.]+)$", re.M)


def env_for(mode, shim, work):
    env = dict(os.environ)
    env.pop("NCCL_PROFILER_PLUGIN", None)
    for k in ("NCCLWATCH_PROFILER", "NCCLWATCH_GPU_EVENTS", "LD_PRELOAD"):
        env.pop(k, None)
    extra = {m: e for m, e, _ in MODES}[mode]
    if extra is not None:
        env.update(extra)
        env["LD_PRELOAD"] = shim
        env["NCCLWATCH_DIR"] = os.path.join(work, "ncw")
    env["NCCL_NVLS_ENABLE"] = "0"
    return env


def run(cmd, env, out, timeout):
    try:
        with open(out, "w") as f:
            return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return 124
    except OSError as e:
        with open(out, "a") as f:
            f.write(f"failed to start: {e}\n")
        return 127


def run_pair(exe, mode, shim, work, timeout):
    """Two ranks on device 0; returns their exit codes. rank<R>.out holds each rank's stdout and stderr."""
    idf = os.path.join(work, "nccl-id")
    if os.path.exists(idf):
        os.remove(idf)
    procs = []
    for r in (0, 1):
        env = env_for(mode, shim, work)
        env.update({"NCCL_HOSTID": f"abhost{r}", "NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "INFO",
                    "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": os.path.join(work, f"nccl-debug.{r}.%p")})
        cmd = [exe, "--cuda", "--nranks", "2", "--rank", str(r), "--id-file", idf, "--device", "0", "--ab",
               "--rounds", "10", "--iters", "20", "--sweep", f"{SWEEP[0]}:{SWEEP[1]}", "--sweep-iters", "5"]
        f = open(os.path.join(work, f"rank{r}.out"), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True), f))
    rcs = []
    t_end = time.time() + timeout
    for p, f in procs:
        try:
            rcs.append(p.wait(timeout=max(1.0, t_end - time.time())))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            rcs.append(124)
        f.close()
    return rcs


def run_pair_cpu(exe, mode, shim, work, timeout):
    """Two ranks on device 0 (sockets), each timing its linked all_reduce in batches of 50 (synchronised after each:
    an op takes milliseconds there); pair_cpu<R>.out. Unpinned: each rank needs its proxy thread."""
    idf = os.path.join(work, "nccl-id-cpu")
    procs = []
    for r in (0, 1):
        env = env_for(mode, shim, work)
        env.update({"NCCL_HOSTID": f"abhost{r}", "NCCL_SOCKET_IFNAME": "lo"})
        cmd = [exe, "--cuda", "--nranks", "2", "--rank", str(r), "--id-file", idf, "--device", "0",
               "--warm-blocks", "2", "--batches", "25", "--calls", "50"]
        f = open(os.path.join(work, f"pair_cpu{r}.out"), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True), f))
    t_end = time.time() + timeout
    for p, f in procs:
        try:
            p.wait(timeout=max(1.0, t_end - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
        f.close()


def gpu_source(collector, work):
    """gpu_source (and exactness) of the 2-rank communicators in the rank files the pair left."""
    seen = set()
    for f in sorted(glob.glob(os.path.join(work, "ncw", "*", "*.ncw"))):  # the 1-rank CPU runs are there too
        try:
            out = subprocess.run([collector, "dump", "--json", f], capture_output=True, text=True, timeout=30).stdout
            for c in json.loads(out).get("comms") or []:
                if c.get("nranks") == 2:
                    seen.add(f"{c.get('gpu_source', 'absent')}{' exact' if c.get('progress_exact') else ''}")
        except (OSError, ValueError, subprocess.TimeoutExpired):
            seen.add("unreadable")
    return ", ".join(sorted(seen)) or "-"


def nccl_plugin(work):
    """What NCCL said about its profiler plugin at init (rank 0's debug file)."""
    said = []
    for f in sorted(glob.glob(os.path.join(work, "nccl-debug.0.*"))):
        for ln in open(f, errors="replace"):
            m = re.search(r"(PROFILER/Plugin: .*|Profiler init failed.*|profiler plugin .*)$", ln.strip())
            if m:
                said.append(m.group(1)[:90])
    if not said:
        return "none loaded" if glob.glob(os.path.join(work, "nccl-debug.0.*")) else "-"
    loaded = [s for s in said if "Loaded" in s or "Successfully" in s or "failed" in s]
    return (loaded or said)[0]


def parse_dir(d):
    """One mode-round's numbers from the raw outputs in its folder."""
    rec = {}
    try:
        text = open(os.path.join(d, "cpu.out"), errors="replace").read()
    except OSError:
        text = ""
    m = CPU_RE.search(text)
    rec["cpu_ns"] = float(m.group("ns")) if m else None
    m = ABCPU_RE.search(text)
    rec["cpu_in_ns"] = float(m.group("add")) if m else None
    try:
        m = CPU_RE.search(open(os.path.join(d, "cpu_unpinned.out"), errors="replace").read())
        rec["cpu_free_ns"] = float(m.group("ns")) if m else None
    except OSError:
        rec["cpu_free_ns"] = None
    try:
        text = open(os.path.join(d, "rank0.out"), errors="replace").read()
    except OSError:
        text = ""
    m = next((x for x in AB_RE.finditer(text) if "ranks 2" in x.group("what")), None)
    if m:
        rec.update({k: float(m.group(k)) for k in ("own", "own_l", "lnk", "lnk_l", "add", "p10", "p90")})
        rec["add_l"] = float(m.group("add_l")) if m.group("add_l") else None
        rec["aa"] = "A/A" in m.group("who")
    rec["bw"] = {int(b): float(g) for n, b, _, g in SWEEP_RE.findall(text) if n == "2"}
    try:
        g2 = AB_RE.search(open(os.path.join(d, "group2.out"), errors="replace").read())
        rec["g2_add"] = float(g2.group("add")) if g2 else None
    except OSError:
        rec["g2_add"] = None
    pair = []
    for r in (0, 1):
        try:
            m = CPU_RE.search(open(os.path.join(d, f"pair_cpu{r}.out"), errors="replace").read())
            if m:
                pair.append(float(m.group("ns")))
        except OSError:
            pass
    rec["pair_cpu_ns"] = sum(pair) / 2 if len(pair) == 2 else None
    for k in ("plugin", "source"):
        try:
            rec[k] = open(os.path.join(d, k + ".txt")).read().strip()
        except OSError:
            rec[k] = "-"
    return rec


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return (min(xs), max(xs)) if xs else None


def f(x, nd=2, sign=False):
    if x is None:
        return "-"
    return f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}"


def summarize(recs):
    """recs: {mode: [record per round]} -> (markdown table, rows for print_table)."""
    by = {m: recs.get(m) or [] for m, _, _ in MODES}

    def col(m, k):
        return [r.get(k) for r in by[m]]

    def paired(m, k, base="none"):  # per round, mode minus base (the same round: the same machine state)
        return [a - b for a, b in zip(col(m, k), col(base, k)) if a is not None and b is not None]

    sizes = sorted({b for m in by for r in by[m] for b in r.get("bw", {})})
    g2 = any(r.get("g2_add") is not None for m in by for r in by[m])
    head = ["mode", "what", "NCCL's profiler plugin (init log)", "gpu_source (2-rank comm)", "CPU ns/call (1 rank)",
            "vs none", "added in-process (1 rank)", "8 B A/B added, in-process (2 ranks)", "launch added", "NCCL's own arm us/iter (2 ranks)",
            "vs none"] + [f"busbw {b >> 20} MB" for b in sizes] + (["8 B A/B added, group of 2 GPUs"] if g2 else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, _, what in MODES:
        if not by[m]:
            continue
        ab = spread(col(m, "add"))
        cells = [m, what, by[m][0].get("plugin", "-"), by[m][0].get("source", "-"), f(med(col(m, "cpu_ns")), 1),
                 f(med(paired(m, "cpu_ns")), 1, True) if m != "none" else "",
                 f(med(col(m, "cpu_in_ns")), 1, True) + (f" ({len([x for x in col(m, 'cpu_in_ns') if x is not None])})"),
                 f(med(col(m, "add")), 3, True) + (f" ({ab[0]:+.3f}..{ab[1]:+.3f})" if ab and len(by[m]) > 1 else ""),
                 f(med(col(m, "add_l")), 3, True), f(med(col(m, "own")), 2),
                 f(med(paired(m, "own")), 3, True) if m != "none" else ""]
        for b in sizes:
            cells.append(f(med([r.get("bw", {}).get(b) for r in by[m]]), 2))
        if g2:
            cells.append(f(med(col(m, "g2_add")), 3, True))
        lines.append("| " + " | ".join(cells) + " |")
    n = max((len(v) for v in by.values()), default=0)
    lines.append("")
    lines.append(f"{n} round(s); medians over the rounds, 'vs none' paired by round. A/B: the linked arm (the shim's "
                 "entry points) minus NCCL's own, in one process; NCCL's own arm still runs NCCL's profiler and our "
                 "callbacks, so its change across modes is their cost.")
    derived = []
    for label, a, b in (("NCCL's profiler activation, our callbacks empty (empty - neither)", "empty", "neither"),
                        ("our callbacks themselves (profiler - empty)", "profiler", "empty"),
                        ("the profiler path in all (profiler - none)", "profiler", "none"),
                        ("the event fallback in all (events - none)", "events", "none")):
        own, lnk, cpu = paired(a, "own", b), paired(a, "lnk", b), paired(a, "cpu_ns", b)
        if own or cpu:
            derived.append(f"- {label}: 8 B us/iter, NCCL's own arm {f(med(own), 3, True)}, through the shim "
                           f"{f(med(lnk), 3, True)}; CPU per call (1 rank) {f(med(cpu), 1, True)} ns")
    lines += [""] + derived
    if any(r.get("pair_cpu_ns") is not None for m in by for r in by[m]):
        lines += ["", "CPU per call on a 2-rank communicator (two processes on device 0 over sockets, where NCCL's profiler "
                  "events flow; each process alone, so the process modes are in it): " + "; ".join(
                      f"{m} {f(med(col(m, 'pair_cpu_ns')), 1)} ns"
                      + (f" ({f(med(paired(m, 'pair_cpu_ns')), 1, True)} vs none, paired by round)" if m != "none" else "")
                      for m, _, _ in MODES if any(x is not None for x in col(m, "pair_cpu_ns")))]
    table = "\n".join(lines)

    rows = []
    p_ab = med(col("profiler", "add"))
    rows.append(("52-profiler-ab", {
        "case": "cost: 8 B all_reduce, profiler path, in-process A/B (2 ranks on one GPU)",
        "expected": "<= +0.15 us (median over rounds)",
        "got": (f"{f(p_ab, 3, True)} us; events {f(med(col('events', 'add')), 3, True)}, neither "
                f"{f(med(col('neither', 'add')), 3, True)}, A/A (none) {f(med(col('none', 'add')), 3, True)}"
                if p_ab is not None else "no numbers (call_cost_gpu without --nranks? rebuild it)"),
        "pass": p_ab is not None and p_ab <= 0.15}))
    cpu = paired("profiler", "cpu_ns")
    rows.append(("52-profiler-cpu", {
        "case": "cost: CPU per intercepted call, profiler path (8 B all_reduce, 1 rank)",
        "expected": "<= +100 ns over no shim",
        "got": (f"{f(med(cpu), 1, True)} ns ({len(cpu)} pair(s) {min(cpu):+.0f}..{max(cpu):+.0f}); events "
                f"{f(med(paired('events', 'cpu_ns')), 1, True)}, neither {f(med(paired('neither', 'cpu_ns')), 1, True)}"
                if cpu else "no numbers"),
        "pass": (None if cpu and med(cpu) > 100 and min(cpu) <= 100 else bool(cpu) and med(cpu) <= 100)}))
    for m, goal in (("neither", 60), ("profiler", 150)):
        inproc = [x for x in col(m, "cpu_in_ns") if x is not None]
        vs_none = paired(m, "cpu_ns")
        rows.append((f"26-{m}-cpu", {
            "case": f"cost: CPU per intercepted call, {m} (8 B all_reduce, 1 rank, pinned)",
            "expected": f"<= +{goal} ns (median of >= 5 rounds, in-process A/B against NCCL's own entry points)",
            "got": (f"{f(med(inproc), 1, True)} ns in-process ({len(inproc)} rounds {min(inproc):+.0f}..{max(inproc):+.0f}); "
                    f"{f(med(vs_none), 1, True)} ns vs the no-shim process ({len(vs_none)} pairs)" if inproc else "no numbers"),
            "pass": len(inproc) >= 5 and med(inproc) <= goal}))
    free = {m: [r.get("cpu_free_ns") for r in by[m] if r.get("cpu_free_ns") is not None] for m, _, _ in MODES}
    if any(free.values()):
        rows.append(("52-profiler-cpu-unpinned", {
            "case": "cost: CPU per intercepted call, unpinned (each process as the scheduler placed it)",
            "expected": "measured",
            "got": "; ".join(f"{m} " + "/".join(f"{x:.0f}" for x in v) + " ns" for m, v in free.items() if v),
            "pass": None}))
    bw_why, worst, verdict = [], 0.0, True
    for b in sizes:
        base = [r.get("bw", {}).get(b) for r in by["none"]]
        prof = med([r.get("bw", {}).get(b) for r in by["profiler"]])
        mb = med(base)
        if prof is None or not mb:
            verdict = False
            bw_why.append(f"{b >> 20} MB: no numbers")
            continue
        noise = max((max(base) - min(base)) / mb if len([x for x in base if x]) > 1 else 0.0, 0.03)
        dev = prof / mb - 1
        worst = dev if abs(dev) > abs(worst) else worst
        if abs(dev) > 3 * noise:
            verdict = False
            bw_why.append(f"{b >> 20} MB: {dev:+.1%} against a spread of {noise:.1%}")
        elif abs(dev) > noise and verdict:
            verdict = None
    rows.append(("52-profiler-busbw", {
        "case": "cost: bus bandwidth 1..128 MB, profiler path vs none (2 ranks on one GPU, sockets)",
        "expected": "within the spread of the runs without the shim (at least 3 %)",
        "got": (f"worst {worst:+.1%} over {len(sizes)} sizes" if sizes else "no numbers"),
        "pass": verdict if sizes else False, "why": bw_why}))
    rows.append(("52-profiler-table", {
        "case": "cost: NCCL's profiler activation and our callbacks (derived, see the table)",
        "expected": "measured", "got": "; ".join(d[2:] for d in derived[:2]) or "no numbers", "pass": None}))
    return table, rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shim", default="")
    p.add_argument("--call-cost", default="")
    p.add_argument("--collector", default="")
    p.add_argument("--budget-sec", type=float, default=75)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--work", default="/tmp/ncw-profiler-ab")
    p.add_argument("--out", default="")
    p.add_argument("--rows", default="")
    p.add_argument("--parse", default="", help="a work folder a run left: the table again, no GPU")
    p.add_argument("--cpu-only", action="store_true", help="only the CPU per call and its in-process A/B")
    p.add_argument("--cpu-rounds", type=int, default=40, help="pairs of batches in each process's in-process A/B")
    p.add_argument("--pair-cpu", action="store_true",
                   help="with --cpu-only: also the CPU per call on a 2-rank communicator, where NCCL's profiler "
                        "events flow (one process per rank, no A/B: the shim's whole default path against none)")
    a = p.parse_args()
    t0 = time.time()
    work = a.parse or a.work
    if not a.parse:
        os.makedirs(work, exist_ok=True)
        for rnd in range(a.rounds):
            t_round = time.time()
            order = MODES[rnd % len(MODES):] + MODES[:rnd % len(MODES)]
            for m, _, _ in order:
                if time.time() - t0 > a.budget_sec + 10:  # a round that ran long: stop here, tabulate what ran
                    print(f"stopping in round {rnd + 1} at {time.time() - t0:.0f} s (budget {a.budget_sec:.0f} s)")
                    break
                d = os.path.join(work, f"r{rnd}-{m}")
                os.makedirs(d, exist_ok=True)
                # Pinned to one core: unpinned, the per-call figure fell into two clusters a factor of three apart
                # (+64..+116 ns and +240..+290 ns over none) whatever the mode, by where the process ran.
                run(PIN + [a.call_cost, "--cuda", "--ab-cpu", "--rounds", str(a.cpu_rounds)], env_for(m, a.shim, d),
                    os.path.join(d, "cpu.out"), 30)
                if a.cpu_only:
                    if a.pair_cpu and m in ("none", "profiler", "neither"):
                        run_pair_cpu(a.call_cost, m, a.shim, d, 60)
                    continue
                run([a.call_cost, "--cuda"], env_for(m, a.shim, d), os.path.join(d, "cpu_unpinned.out"), 30)
                rcs = run_pair(a.call_cost, m, a.shim, d, 60)
                if rcs != [0, 0]:  # where it stopped: each rank's last lines (init, the A/B, the sweep)
                    for r in (0, 1):
                        try:
                            tail = open(os.path.join(d, f"rank{r}.out"), errors="replace").read().splitlines()[-4:]
                        except OSError:
                            tail = ["(no output file)"]
                        print(f"round {rnd + 1} {m}: pair rank {r} exit {rcs[r]}: " + " | ".join(tail), flush=True)
                with open(os.path.join(d, "plugin.txt"), "w") as fh:
                    fh.write(nccl_plugin(d) + ("" if rcs == [0, 0] else f" (exit {rcs})"))
                with open(os.path.join(d, "source.txt"), "w") as fh:
                    fh.write(gpu_source(a.collector, d) if m != "none" and a.collector else "-")
                if a.gpus >= 2:
                    run([a.call_cost, "--cuda", "--group", "2", "--ab", "--rounds", "60", "--iters", "1000"],
                        env_for(m, a.shim, d), os.path.join(d, "group2.out"), 40)
            took = time.time() - t_round
            print(f"round {rnd + 1}: {took:.0f} s", flush=True)
            if time.time() - t0 + took > a.budget_sec:
                break
    recs = {}
    for d in sorted(glob.glob(os.path.join(work, "r*-*"))):
        m = os.path.basename(d).split("-", 1)[1]
        recs.setdefault(m, []).append(parse_dir(d))
    table, rows = summarize(recs)
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(table + "\n")
    for tag, r in rows:
        r.setdefault("why", [])
        r.setdefault("rank", "-")
        res = "info" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        print(f"{r['case']}: {res}: {r['got']}")
        if a.rows:
            os.makedirs(a.rows, exist_ok=True)
            with open(os.path.join(a.rows, f"{tag}.json"), "w") as fh:
                json.dump(r, fh, indent=1)
    print(f"profiler A/B: {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
