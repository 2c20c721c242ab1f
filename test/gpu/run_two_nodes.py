#!/usr/bin/env python3
"""Two "nodes" on one machine: two torchrun agents (--nnodes 2 --node_rank 0|1, one static rendezvous on localhost),
each with its own NCCLWATCH_DIR so that its shims see only their own node's files, and every rank streaming to one
live collector (`ncclwatch-collector serve`, its own --out folder). Runs one scenario and keeps the raw facts in
WORK/result.json; test/gpu/two_nodes_table.py judges them (phase 7 of test/gpu/run.sh).

    run_two_nodes.py --work DIR --shim SO --collector EXE [--scenario skip] [--nproc-per-node 4] [--timeout 10]
                     [--one-gpu] [--port 29700] [--max-sec 120] [--end-after-report S] [--script-args ARGS]
                     [--rows ROWS]

--scenario: any scenario of examples/hang_scenarios.py (its arguments as test/gpu/run_scenario.py gives them, with
  the validation busy for timeout + 10 s and init_hang late by timeout + 8 s), or grid_stall / grid_death /
  grid_clean (examples/grid_2x4.py: tensor parallelism inside a node, data parallelism across; 4 ranks a node).
  The job is ended as a scheduler ends a hung one (SIGTERM to each agent, SIGKILL 10 s later) END_AFTER[scenario]
  seconds after the first diagnosis (a shim's stall / mismatch / init hang event, or the live collector's first
  report that is not a suspicion); the scenarios that recover or end by themselves run to their end (--max-sec caps).
  Three seconds after the first diagnosis, `analyze --json nodeA/ nodeB/` runs once while the job still runs
  ("analyze_during": what the files said during the hang, for the scenarios that recover). Every version of the
  collector's live-report.json is kept (live/history/NNN.json), with when it was seen. After the end, the collector is
  given the time to speak (its --dead-after) if it has not, then ended; `analyze --json nodeA/ nodeB/` and
  `dump --json` of every rank file (header and comm table) follow.
--rows ROWS (phase 5's run, the skip scenario): judges at once and writes ROWS/50-two-nodes-{live,offline,local}.json
  as before (the live collector first and last, analyze of both folders, each node's own verdict).
--cmd CMD (tests only): one shell command instead of the two agents, with NCW_NODE_DIR_A, NCW_NODE_DIR_B,
  NCW_NODE_SIZE and NCCLWATCH_COLLECTOR in its environment (the command sets each rank's NCCLWATCH_DIR).
"""
import argparse
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BOOT = os.path.join(REPO, "python", "ncclwatch", "_boot")  # the last-words hook `ncclwatch run` puts on PYTHONPATH
sys.path.insert(0, HERE)
from run_scenario import end_job, kill_tagged, read_truth, report_events, run_tool, scenario_args  # noqa: E402
from job_readers import before_hang, is_diagnosis, is_suspicion  # noqa: E402

GRID = {"grid_stall": "stall", "grid_death": "death", "grid_clean": "clean"}
# Seconds after the first diagnosis to end the job; None: it ends by itself (within --max-sec). A dying rank: the
# launcher of its node ends that node at once; the other node may hang (or end on NCCL's remote error).
END_AFTER = {"skip": 8, "uneven": 8, "type_mismatch": 14, "size_mismatch": 14, "rank_dies": 12, "rank_exit0": 12,
             "rank_segv": 12, "rank_killed": 12, "drift_skip": 8, "drift_extra": 8, "init_hang": None,
             "validation": None, "grad_accum": 8, "gpu_busy": 8, "pipeline": 8, "clean": None, "grid_stall": 8,
             "grid_death": 12, "grid_clean": None,
             # Issue 41 (a MISMATCH may come before the stall: time for the stall's report too).
             "moe_stale_split": 14, "moe_clean": None, "send_cycle": 8, "batch_ring_missing": 8,
             # A send to the wrong peer (one never exchanged with, for the fresh one): MISMATCH, time for the stall's
             # report too; a slow stage is a straggler, not a hang (the job runs to its end), as the clean pipeline.
             "pipeline_wrong_peer": 14, "pipeline_fresh_peer": 14, "pipeline_slow": None, "pipeline_clean": None}
DEAD_AFTER_S = 10.0  # serve's --dead-after default: how long a gone rank may take to be DEAD in its report
# The shim's stderr lines, in the full form the runner asks for (NCCLWATCH_LOG_FORMAT=full):
# "[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: ..."
KEEP = re.compile(r"NOT_JOINED|GPU_NOT_REACHED|STUCK_IN_NCCL|MISMATCH|DEAD|ASYNC_ERROR|UNKNOWN|EXTRA_OP|INIT_HANG|"
                  r"STALL|RECOVERED|collector", re.I)
NCW_LINE = re.compile(r"^\[ncclwatch rank (?P<rank>\S+) pid (?P<pid>\d+) (?P<time>\S+)\] (?P<level>\w+): (?P<msg>.*)$")


def job_args(scenario, timeout, one_gpu, give_up):
    """(script path, its arguments) for a scenario."""
    if scenario in GRID:
        script = os.path.join(REPO, "examples", "grid_2x4.py")
        args = ["--scenario", GRID[scenario]]
    else:
        script = os.path.join(REPO, "examples", "hang_scenarios.py")
        args = scenario_args(scenario, timeout)
        if scenario == "validation":  # busy for 20 s at the default timeout of 10 s, then back
            i = args.index("--busy-sec")
            args[i + 1] = str(timeout + 10)
        if scenario == "rank_dies":
            args += ["--exit-code", "3"]
        if scenario in ("clean", "moe_clean", "pipeline_slow", "pipeline_clean"):
            args += ["--duration-sec", "20"]
    args += ["--give-up-sec", str(give_up)]
    if one_gpu:
        args += ["--one-gpu"]
    return script, args


def end_all(procs, log):
    """As a scheduler ends a job of several nodes: SIGTERM to every agent at once (each ends its workers), SIGKILL to
    the process groups of those still there 10 s later."""
    alive = [pr for pr in procs if pr.poll() is None]
    for pr in alive:
        log(f"ending the job: SIGTERM to torchrun (pid {pr.pid})")
        try:
            pr.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    for pr in alive:
        try:
            pr.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            log(f"torchrun (pid {pr.pid}) still there after 10 s: SIGKILL to its process group")
    for pr in procs:
        try:
            os.killpg(pr.pid, signal.SIGKILL)  # stragglers (workers torchrun did not reap)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            pr.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def node_lines(path, limit=1000):
    """The shim's report lines of a node's log (those that name a verdict kind, a stall, a recovery or the
    collector): [{rank, pid, time, level, msg}], the first `limit`."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for ln in f:
                m = NCW_LINE.match(ln.rstrip("\n"))
                if m and KEEP.search(m.group("msg")) and len(out) < limit:
                    out.append({k: m.group(k) for k in ("rank", "pid", "time", "level", "msg")})
    except OSError:
        pass
    return out


class LiveWatch:
    """Keeps every version of the collector's live-report.json (they are overwritten), with when each was seen."""

    def __init__(self, live_dir):
        self.live_dir = live_dir
        self.hist_dir = os.path.join(live_dir, "history")
        self.seen = {}  # path -> last text
        self.history = []  # [{"t_seen", "path", "kept", "report"}]

    def poll(self):
        for f in sorted(glob.glob(os.path.join(self.live_dir, "*", "live-report.json"))):
            try:
                with open(f) as fh:
                    text = fh.read()
                doc = json.loads(text)
            except (OSError, ValueError):
                continue  # being written: next poll
            if self.seen.get(f) == text:
                continue
            self.seen[f] = text
            os.makedirs(self.hist_dir, exist_ok=True)
            kept = os.path.join(self.hist_dir, f"{len(self.history):03d}.json")
            with open(kept, "w") as out:
                out.write(text)
            self.history.append({"t_seen": time.time(), "path": f, "kept": kept, "report": doc})

    def first_diagnosis(self, skip=lambda verdicts: False):
        """The first version with a verdict that is not a suspicion (nor, skip(verdicts), before the hang), or None."""
        for h in self.history:
            vs = h["report"].get("verdicts") if isinstance(h["report"], dict) else None
            if skip(vs):
                continue
            # A straggler is "not a hang" (a shared GPU's time slices make one): it does not end the job.
            if any(isinstance(v, dict) and not is_suspicion({"verdicts": [v]}) and v.get("suspected") is not True
                   and v.get("kind") != "STRAGGLER" for v in vs or []):
                return h
        return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--shim", required=True)
    p.add_argument("--collector", required=True)
    p.add_argument("--rows", default="", help="phase 5: judge the skip scenario at once, three rows (see above)")
    p.add_argument("--scenario", default="skip")
    p.add_argument("--script-args", default="", help="more arguments for the script, one shell-quoted string")
    p.add_argument("--nproc-per-node", type=int, default=4)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--one-gpu", action="store_true")
    p.add_argument("--port", type=int, default=29700, help="the rendezvous; the collector listens on port + 1")
    p.add_argument("--max-sec", type=float, default=120)
    p.add_argument("--end-after-report", type=float, default=None,
                   help="seconds after the first diagnosis to end the job (-1: let it end by itself); default by "
                        "scenario")
    p.add_argument("--dead-after", type=float, default=DEAD_AFTER_S, help="serve --dead-after")
    p.add_argument("--cmd", default="", help="tests only: one shell command instead of the two agents")
    a = p.parse_args()

    work = os.path.abspath(a.work)
    subprocess.run(["rm", "-rf", work])
    os.makedirs(work)
    n = a.nproc_per_node
    truth_dir = os.path.join(work, "truth")
    os.makedirs(truth_dir)
    notes = []

    def log(msg):
        line = f"[run_two_nodes {a.scenario} {time.strftime('%H:%M:%S')}] {msg}"
        notes.append(line)
        print(line, flush=True)

    end_after = END_AFTER.get(a.scenario, 8)
    if a.end_after_report is not None:
        end_after = None if a.end_after_report < 0 else a.end_after_report
    live_dir = os.path.join(work, "live")
    coll_addr = f"127.0.0.1:{a.port + 1}"
    serve_log = open(os.path.join(work, "serve.log"), "w")
    serve = subprocess.Popen([a.collector, "serve", "--listen", coll_addr, "--timeout", str(a.timeout),
                              "--dead-after", str(a.dead_after), "--out", live_dir],
                             stdout=serve_log, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(0.3)  # listening before the first rank connects (a rank retries, but its Hello would come late)
    dirs = [os.path.join(work, "nodeA"), os.path.join(work, "nodeB")]
    base_env = dict(os.environ, LD_PRELOAD=a.shim, NCCLWATCH_TIMEOUT_SEC=str(a.timeout), NCCLWATCH_COLLECTOR=coll_addr,
                    NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                    PYTHONUNBUFFERED="1", NCW_RUN_TAG=work, NCW_TRUTH_DIR=truth_dir,
                    # node_lines reads every rank's lines with their pid and time (NCW_LINE): the full prefix, and
                    # every rank's lines (by default one rank per node says a report, with the short prefix).
                    NCCLWATCH_LOG_FORMAT=os.environ.get("NCCLWATCH_LOG_FORMAT", "full"),
                    NCCLWATCH_LOG_LEVEL=os.environ.get("NCCLWATCH_LOG_LEVEL", "debug"),
                    # As `ncclwatch run` does: the last-words hook first on PYTHONPATH.
                    PYTHONPATH=os.pathsep.join(x for x in (BOOT, os.environ.get("PYTHONPATH", "")) if x))
    script, args = job_args(a.scenario, a.timeout, a.one_gpu, a.max_sec + 30)
    args += shlex.split(a.script_args)
    nodes = []  # [(process, folder, log file)]
    t_launch = time.time()
    if a.cmd:
        env = dict(base_env, NCW_NODE_DIR_A=dirs[0], NCW_NODE_DIR_B=dirs[1], NCW_NODE_SIZE=str(n))
        log(f"test command: {a.cmd}")
        out = open(os.path.join(work, "nodeA.log"), "w")
        nodes.append((subprocess.Popen(["bash", "-c", a.cmd], env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, cwd=REPO), dirs[0], out))
        open(os.path.join(work, "nodeB.log"), "w").close()  # one log: the test command's ranks tag their lines
    else:
        for node in (0, 1):
            env = dict(base_env, NCCLWATCH_DIR=dirs[node])
            cmd = ["torchrun", "--nnodes", "2", "--node_rank", str(node), f"--nproc_per_node={n}", "--master_addr",
                   "127.0.0.1", "--master_port", str(a.port), script] + args
            log(f"node {node}: start: " + " ".join(cmd))
            out = open(os.path.join(work, f"node{'AB'[node]}.log"), "w")
            nodes.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                           cwd=REPO), dirs[node], out))
    live = LiveWatch(live_dir)
    first = None  # (harness time, what)
    during = None
    ended_by = "itself"
    while True:
        t = time.time()
        live.poll()
        if all(pr.poll() is not None for pr, _, _ in nodes):
            break
        if first is None:
            # A slow communicator init under load (twenty ranks starting on one GPU) is not the hang under test:
            # it does not end the job (it is kept, and judged, all the same).
            # Nor is a stall before the scenario's hang (a pipeline's start on a shared GPU: job_readers.before_hang).
            truth_now = read_truth(truth_dir)

            def early(vs):
                # The collector's report of a slow init is not the hang under test either.
                slow_init = a.scenario != "init_hang" and any(
                    isinstance(v, dict) and v.get("kind") == "INIT_HANG" for v in vs or [])
                return slow_init or before_hang(a.scenario, vs, truth_now)
            evs = [e for d in dirs for e in report_events(d) if is_diagnosis(e) and
                   (e.get("type") != "init_hang" or a.scenario == "init_hang") and not early(e.get("verdicts"))]
            lf = live.first_diagnosis(early)
            if evs or lf:
                first = (t, "a shim's " + evs[0].get("type", "?") if evs else "the live collector's report")
                log(f"first diagnosis after {t - t_launch:.1f} s: {first[1]}")
        if first is not None and during is None and t > first[0] + 3:
            rc_d, out_d, err_d = run_tool([a.collector, "analyze", "--json"] + dirs,
                                          os.path.join(work, "analyze-during.json"))
            try:
                doc = json.loads(out_d)
            except ValueError:
                doc = None
            during = {"t": t, "t_done": time.time(), "exit": rc_d, "analyze": doc,
                      "error": None if doc is not None else (err_d or out_d)[-500:]}
            log(f"analyze of both folders during the job: exit {rc_d}")
        if first is not None and end_after is not None and t > first[0] + end_after:
            ended_by = "harness after the first diagnosis (a scheduler ending a hung job)"
            break
        if t - t_launch > a.max_sec:
            ended_by = f"harness at the {a.max_sec:.0f} s cap"
            break
        time.sleep(0.2)
    end_all([pr for pr, _, _ in nodes], log)
    t_end = time.time()
    for _, _, out in nodes:
        out.close()
    kill_tagged(work, log)
    codes = [pr.returncode for pr, _, _ in nodes]
    log(f"job ended ({ended_by}), agents' exit codes {codes}, after {t_end - t_launch:.1f} s")
    # The collector may still be about to speak: a gone rank is DEAD after its --dead-after.
    wait_until = time.time() + (2 if live.first_diagnosis() else a.dead_after + 3)
    while time.time() < wait_until:
        live.poll()
        time.sleep(0.2)
    live.poll()
    end_job(serve, log)
    serve_log.close()

    res = {"scenario": a.scenario, "nproc_per_node": n, "world": 2 * n, "timeout_s": a.timeout, "one_gpu": a.one_gpu,
           "script": os.path.relpath(script, REPO), "args": args, "t_launch": t_launch, "t_end": t_end,
           "exit_codes": codes, "ended_by": ended_by, "notes": notes, "node_dirs": dirs,
           "first_diagnosis_seen": first[0] if first else None, "truth": read_truth(truth_dir),
           "culprit": 2 * n - 1}
    for node in (0, 1):
        res[f"events{node}"] = report_events(dirs[node])
        res[f"lines{node}"] = node_lines(os.path.join(work, f"node{'AB'[node]}.log"))
    res["live_history"] = [{"t_seen": h["t_seen"], "kept": h["kept"], "report": h["report"]} for h in live.history]
    res["live"] = live.history[-1]["report"] if live.history else None
    try:
        with open(os.path.join(work, "serve.log"), errors="replace") as f:
            res["serve_log_tail"] = f.read()[-8000:]
    except OSError:
        res["serve_log_tail"] = ""
    res["analyze_during"] = during
    rc_an, out, err = run_tool([a.collector, "analyze", "--json"] + dirs, os.path.join(work, "analyze.json"))
    res["analyze_exit"] = rc_an
    try:
        res["analyze"] = json.loads(out)
    except ValueError:
        res["analyze"] = None
        res["analyze_error"] = (err or out)[-2000:]
    files = {}
    for node, d in enumerate(dirs):
        for f in sorted(glob.glob(os.path.join(d, "*", "*.ncw"))):
            _, out_f, err_f = run_tool([a.collector, "dump", "--json", f], f + ".decoded.json")
            try:
                doc = json.loads(out_f)
                files[f] = {"node": node, "header": doc.get("header"), "comms": doc.get("comms")}
            except ValueError:
                files[f] = {"node": node, "error": (err_f or out_f)[-500:]}
    res["rank_files"] = files
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    log(f"result written to {work}/result.json")
    if a.rows:
        legacy_rows(a.rows, work, res, n, a.one_gpu)
    return 0


# ------------------------------------------------------------------------------------- phase 5's three rows (skip)
def verdicts_of(doc):
    return [v for v in (doc or {}).get("verdicts") or []]


def culprits(v):
    """The culprits' ranks: objects (analyze: global rank, or the comm rank of one not visible) or comm ranks (the
    shims' events and the live report; in this job the world communicator's, which are the global ranks)."""
    out = []
    for c in v.get("culprits") or []:
        if isinstance(c, dict):
            c = c.get("global_rank") if c.get("global_rank") is not None else c.get("comm_rank")
        if isinstance(c, int):
            out.append(c)
    return sorted(out)


def fmt(vs):
    return "; ".join(f"{v.get('kind')} r{','.join(map(str, culprits(v)))}" for v in vs) or "none"


def first_live_verdict(serve_log):
    """The lead verdict line of the first report the collector printed ("KIND: summary"), or ""."""
    try:
        lines = open(serve_log, errors="replace").read().splitlines()
    except OSError:
        return ""
    for i, ln in enumerate(lines):
        if ln.startswith("ncclwatch live report"):
            for nxt in lines[i + 1:i + 4]:
                if nxt[:1].isupper() and ":" in nxt:
                    return nxt
    return ""


def row(rows, name, case, expected, got, ok, why):
    r = {"case": case, "expected": expected, "got": got, "rank": "", "secs": "", "after_kill": "", "fr": "",
         "ras": "", "pass": ok, "why": why}
    os.makedirs(rows, exist_ok=True)
    with open(os.path.join(rows, f"50-two-nodes-{name}.json"), "w") as f:
        json.dump(r, f, indent=1)
    print(f"{case}: {'PASS' if ok else 'FAIL'}: {got}")
    for w in why:
        print(f"    why: {w}")


def legacy_rows(rows, work, res, n, one_gpu):
    culprit = 2 * n - 1
    label = f"2 nodes x {n} ranks{' on 1 GPU' if one_gpu else ''}: rank {culprit} (node 1) skips"
    # live: the collector's first report (its log keeps every report; live-report.* holds the last) and its last,
    # written once the job was ended: the launcher's teardown must not change who the culprit is.
    lv = verdicts_of(res["live"])
    first_live = first_live_verdict(os.path.join(work, "serve.log"))
    why = []
    if not first_live:
        why.append("the collector printed no report")
    elif not (first_live.startswith("NOT_JOINED:") and f"rank {culprit} " in first_live):
        why.append(f"the collector's first report leads with '{first_live[:160]}', want NOT_JOINED r{culprit}")
    if not lv:
        why.append("no live report" if res["live"] is None else f"live report without verdicts: {str(res['live'])[:200]}")
    elif not (lv[0].get("kind") == "NOT_JOINED" and culprit in culprits(lv[0])):
        why.append(f"the last live report (after the teardown) leads with {fmt(lv[:1])}, want NOT_JOINED r{culprit}")
    row(rows, "live", f"{label}: live collector (serve, node 0)", f"NOT_JOINED r{culprit}, first and last report",
        f"first: {first_live.split(':')[0] if first_live else 'none'}; last: {fmt(lv[:3])}", not why, why)
    # offline
    ov = verdicts_of(res["analyze"])
    why = []
    if res["analyze"] is None:
        why.append("analyze failed: " + res.get("analyze_error", "")[:200])
    elif not (ov and ov[0].get("kind") in ("NOT_JOINED", "DEAD") and culprit in culprits(ov[0])):
        why.append(f"analyze nodeA/ nodeB/ leads with {fmt(ov[:1])}, want NOT_JOINED (or DEAD) r{culprit}")
    row(rows, "offline", f"{label}: analyze nodeA/ nodeB/ after the end", f"NOT_JOINED r{culprit}", fmt(ov[:3]),
        not why, why)
    # local: node 1 names it; node 0 blames none of its own and says the culprit is not on its node
    why = []
    diag = [e for e in res["events1"] if e.get("type") == "stall"]
    b_lead = (diag[0].get("verdicts") or [{}])[:1] if diag else []
    if not b_lead or not (b_lead[0].get("kind") == "NOT_JOINED" and culprit in culprits(b_lead[0])):
        why.append(f"node 1's first stall report leads with {fmt(b_lead)}, want NOT_JOINED r{culprit}")
    own = set(range(n))
    a_stalls = [e for e in res["events0"] if e.get("type") == "stall"]
    a_got = [v for e in a_stalls for v in (e.get("verdicts") or [])[:1]]
    blamed = sorted({r for v in a_got for r in culprits(v) if r in own})
    if blamed:
        why.append(f"node 0's reports blame its own rank(s) {blamed}")
    text_a = open(os.path.join(work, "nodeA.log"), errors="replace").read()
    says_elsewhere = any(v.get("kind") == "UNKNOWN" and culprit in culprits(v) for v in a_got) or \
        "another node" in text_a or any("not visible" in json.dumps(v) for v in a_got)
    if not a_stalls:
        why.append("node 0's shims reported nothing")
    elif not says_elsewhere:
        why.append(f"node 0's reports ({fmt(a_got)}) do not say that the culprit is not on node 0")
    row(rows, "local", f"{label}: each node's own verdict",
        f"node 1: NOT_JOINED r{culprit}; node 0: not on this node", f"node 1: {fmt(b_lead)}; node 0: {fmt(a_got[:2])}",
        not why, why)


if __name__ == "__main__":
    sys.exit(main())
