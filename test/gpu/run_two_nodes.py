#!/usr/bin/env python3
"""Two "nodes" on one machine: two torchrun agents (--nnodes 2 --node_rank 0|1, one static rendezvous on localhost),
each with its own NCCLWATCH_DIR so that its shims see only their own node's files, and the live collector
(`ncclwatch-collector serve`) on "node 0". A rank of node 1 (the last, global rank 2N-1) skips one all_reduce
(examples/hang_scenarios.py --scenario skip). Then, with every process gone, judges three things and writes one row
each (ROWS/50-two-nodes-*.json):
  live     the live collector's report names the culprit (NOT_JOINED);
  offline  `ncclwatch-collector analyze --json nodeA/ nodeB/` names it;
  local    each node's own shims: node 1's name it; node 0's blame none of their own ranks and say that the culprit
           is not on their node (it is not visible from there).

    run_two_nodes.py --work DIR --shim SO --collector EXE --rows ROWS [--nproc-per-node 4] [--timeout 10]
                     [--one-gpu] [--port 29700] [--max-sec 120]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from run_scenario import end_job, report_events, run_tool  # noqa: E402 (as the single-job runs do)
from job_readers import is_diagnosis, is_suspicion  # noqa: E402


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


def live_is_suspicion(path):
    """A live-report.json that only holds a suspicion (unreadable: not one)."""
    try:
        with open(path) as f:
            return is_suspicion(json.load(f))
    except (OSError, ValueError):
        return False


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--shim", required=True)
    p.add_argument("--collector", required=True)
    p.add_argument("--rows", required=True)
    p.add_argument("--nproc-per-node", type=int, default=4)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--one-gpu", action="store_true")
    p.add_argument("--port", type=int, default=29700, help="the rendezvous; the collector listens on port + 1")
    p.add_argument("--max-sec", type=float, default=120)
    a = p.parse_args()

    work = os.path.abspath(a.work)
    subprocess.run(["rm", "-rf", work])
    os.makedirs(work)
    n = a.nproc_per_node
    culprit = 2 * n - 1
    notes = []

    def log(msg):
        line = f"[run_two_nodes {time.strftime('%H:%M:%S')}] {msg}"
        notes.append(line)
        print(line, flush=True)

    live_dir = os.path.join(work, "live")
    coll_addr = f"127.0.0.1:{a.port + 1}"
    serve_log = open(os.path.join(work, "serve.log"), "w")
    serve = subprocess.Popen([a.collector, "serve", "--listen", coll_addr, "--timeout", str(a.timeout), "--out",
                              live_dir], stdout=serve_log, stderr=subprocess.STDOUT, start_new_session=True)
    nodes = {}
    t_launch = time.time()
    for node in (0, 1):
        d = os.path.join(work, f"node{'AB'[node]}")
        env = dict(os.environ, LD_PRELOAD=a.shim, NCCLWATCH_DIR=d, NCCLWATCH_TIMEOUT_SEC=str(a.timeout),
                   NCCLWATCH_COLLECTOR=coll_addr, NCCL_NVLS_ENABLE="0", PYTHONUNBUFFERED="1", NCW_RUN_TAG=work)
        cmd = ["torchrun", "--nnodes", "2", "--node_rank", str(node), f"--nproc_per_node={n}", "--master_addr",
               "127.0.0.1", "--master_port", str(a.port), os.path.join(REPO, "examples", "hang_scenarios.py"),
               "--scenario", "skip", "--give-up-sec", str(a.max_sec + 30)] + (["--one-gpu"] if a.one_gpu else [])
        log(f"node {node}: " + " ".join(cmd))
        out = open(os.path.join(work, f"node{'AB'[node]}.log"), "w")
        nodes[node] = (subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                        cwd=REPO), d, out)
    first = None
    while time.time() - t_launch < a.max_sec:
        if all(pr.poll() is not None for pr, _, _ in nodes.values()):
            break
        live = glob.glob(os.path.join(live_dir, "*", "live-report.json"))
        # An early suspicion is not the report the job is ended on (the verdicts come at the timeout).
        evs = [e for e in report_events(nodes[0][1]) + report_events(nodes[1][1]) if is_diagnosis(e)]
        live = [f for f in live if not live_is_suspicion(f)]
        if first is None and (evs or live):
            first = time.time()
            log(f"first report after {first - t_launch:.1f} s")
        # Both nodes' shims and the collector have had the time to speak (the timeout passes on every rank at
        # about the same moment): end the job as a scheduler would.
        if first is not None and time.time() > first + 8:
            break
        time.sleep(0.2)
    for pr, _, _ in nodes.values():
        end_job(pr, log)  # SIGTERM to the agent, which ends its workers; SIGKILL to its group 10 s later
    end_job(serve, log)
    for _, _, out in nodes.values():
        out.close()
    serve_log.close()

    res = {"notes": notes, "culprit": culprit}
    for node in (0, 1):
        res[f"events{node}"] = report_events(nodes[node][1])
    live = sorted(glob.glob(os.path.join(live_dir, "*", "live-report.json")))
    try:
        res["live"] = json.load(open(live[0])) if live else None
    except (OSError, ValueError) as e:
        res["live"] = {"error": str(e)}
    _, out, err = run_tool([a.collector, "analyze", "--json", nodes[0][1], nodes[1][1]],
                           os.path.join(work, "analyze.json"))
    try:
        res["analyze"] = json.loads(out)
    except ValueError:
        res["analyze"] = None
        res["analyze_error"] = (err or out)[-2000:]
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)

    label = f"2 nodes x {n} ranks{' on 1 GPU' if a.one_gpu else ''}: rank {culprit} (node 1) skips"
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
    row(a.rows, "live", f"{label}: live collector (serve, node 0)", f"NOT_JOINED r{culprit}, first and last report",
        f"first: {first_live.split(':')[0] if first_live else 'none'}; last: {fmt(lv[:3])}", not why, why)
    # offline
    ov = verdicts_of(res["analyze"])
    why = []
    if res["analyze"] is None:
        why.append("analyze failed: " + res.get("analyze_error", "")[:200])
    elif not (ov and ov[0].get("kind") in ("NOT_JOINED", "DEAD") and culprit in culprits(ov[0])):
        why.append(f"analyze nodeA/ nodeB/ leads with {fmt(ov[:1])}, want NOT_JOINED (or DEAD) r{culprit}")
    row(a.rows, "offline", f"{label}: analyze nodeA/ nodeB/ after the end", f"NOT_JOINED r{culprit}", fmt(ov[:3]),
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
    row(a.rows, "local", f"{label}: each node's own verdict",
        f"node 1: NOT_JOINED r{culprit}; node 0: not on this node", f"node 1: {fmt(b_lead)}; node 0: {fmt(a_got[:2])}",
        not why, why)
    return 0


if __name__ == "__main__":
    sys.exit(main())
