#!/usr/bin/env python3
"""Checks of the one-GPU part (run on the device machine by test/gpu/run.sh), one table row each.

    check_one_gpu.py ddp      NCW_DIR LOG COLLECTOR ROWS_DIR   ddp_train.py under the shim: every all_reduce and
                                                              broadcast issued, GPU-reached, GPU-completed; no report
    check_one_gpu.py stall    NCW_DIR LOG COLLECTOR ROWS_DIR   stalled stream: GPU_NOT_REACHED for rank 0, recovered
    check_one_gpu.py features NCW_DIR LOG COLLECTOR ROWS_DIR   new_group split, second group, autograd and main
                                                              thread, async wait, CUDA graph: right records, no stall
Each prints its findings and writes ROWS_DIR/10-<name>.json.
"""
import collections
import datetime
import glob
import json
import os
import re
import subprocess
import sys


def load_dumps(ncw_dir, collector):
    dumps = {}
    for f in sorted(glob.glob(os.path.join(ncw_dir, "*", "*.ncw"))):
        r = subprocess.run([collector, "dump", "--json", f], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        try:
            dumps[f] = json.loads(r.stdout)
        except ValueError:
            print(f"cannot decode {f}: {r.stderr[-300:]}")
    return dumps


def reports(ncw_dir):
    out = []
    for f in sorted(glob.glob(os.path.join(ncw_dir, "*", "*.report.json"))):
        with open(f) as fh:
            d = json.load(fh)
        for e in d.get("events", []):
            out.append((f, d.get("process", {}).get("global_rank"), e))
    return out


def analyze_exit(ncw_dir, collector):
    r = subprocess.run([collector, "analyze", ncw_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=60)
    return r.returncode, r.stdout


def op_counts(d):
    """Per op name: issued, reached, completed, captured."""
    c = collections.defaultdict(lambda: [0, 0, 0, 0])
    for r in d["records"]["items"]:
        k = c[r["op"]]
        k[0] += 1
        k[1] += r.get("reached_ms") is not None
        k[2] += r.get("done_ms") is not None
        k[3] += "captured" in (r.get("flags") or "")
    return c


def write_row(rows_dir, name, row):
    os.makedirs(rows_dir, exist_ok=True)
    with open(os.path.join(rows_dir, f"10-{name}.json"), "w") as f:
        json.dump(row, f, indent=1)
    print(f"{row['case']}: {'PASS' if row['pass'] else 'FAIL'}: {row['got']}")
    for w in row.get("why", []):
        print(f"    why: {w}")


def comm_summary(d):
    out = []
    for c in d.get("comms", []):
        out.append(f"comm {c['comm_id']} rank {c['rank']}/{c['nranks']} parent {c.get('parent_id')} issued "
                   f"{c['coll_issued']} reached {c['coll_reached']} completed {c['coll_completed']} "
                   f"state {c['state']} untracked {c.get('untracked_ops')}")
    return out


def check_ddp(ncw_dir, log, collector, rows_dir):
    why = []
    dumps = load_dumps(ncw_dir, collector)
    if not dumps:
        why.append("no rank file")
    got = []
    for f, d in dumps.items():
        for op, (n, reached, done, captured) in sorted(op_counts(d).items()):
            if op in ("AllReduce", "Broadcast", "AllGather"):
                got.append(f"{op} {n}/{reached}/{done}" + (f" ({captured} captured)" if captured else ""))
                # Captured ops get no events (completed at return): they may lack a GPU-reached time.
                if done != n or reached + captured < n:
                    why.append(f"{op}: {n} issued, {reached} reached, {done} completed, {captured} captured")
        for line in comm_summary(d):
            print("  " + line)
        if len(d.get("comms", [])) < 2:
            why.append("fewer than 2 communicators (world and the new_group split)")
    ev = reports(ncw_dir)
    if ev:
        why.append(f"{len(ev)} report event(s): {[e['type'] for _, _, e in ev]}")
    rc, _ = analyze_exit(ncw_dir, collector)
    if rc != 0:
        why.append(f"collector analyze exit {rc}")
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    m = re.search(r"graph replayed 10 times, t\[0\]=(\d+) \(want (\d+)\)", text)
    if not m or m.group(1) != m.group(2):
        why.append("CUDA graph replay value wrong or missing")
    if "CUDA Graph is empty" in text:
        why.append("'CUDA Graph is empty' warning")
    if "steps in" not in text:
        why.append("training did not finish")
    write_row(rows_dir, "ddp", {"case": "1 GPU: ddp_train.py --subgroup --graph under the shim",
                                "expected": "every op issued=reached=completed, no report",
                                "got": "issued/reached/completed: " + ", ".join(got) + (f"; {len(ev)} reports"),
                                "rank": "", "secs": "", "after_kill": "", "fr": "", "ras": "",
                                "pass": not why, "why": why})


def parse_time(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f%z" if "T" in s else "%Y-%m-%d %H:%M:%S.%f %z").timestamp()
    except (TypeError, ValueError):
        return None


def check_stall(ncw_dir, log, collector, rows_dir):
    why = []
    ev = reports(ncw_dir)
    stalls = [(f, r, e) for f, r, e in ev if e["type"] == "stall"]
    rec = [e for _, _, e in ev if e["type"] == "recovered"]
    got = "no report"
    secs = ""
    if stalls:
        f, r, e = stalls[0]
        vs = [(v["kind"], v["culprits"], v["seq"]) for v in e.get("verdicts", [])]
        got = "; ".join(f"{k} r{','.join(map(str, c))} #{s}" for k, c, s in vs) or "stall without verdict"
        if not any(k == "GPU_NOT_REACHED" and 0 in c for k, c, _ in vs):
            why.append(f"verdicts {vs}, want GPU_NOT_REACHED naming rank 0")
        secs = f"{e.get('stalled_for_s', 0):.1f}"
        # The stall's start from the file: the issue time of the op waited in.
        dumps = load_dumps(ncw_dir, collector)
        d = dumps.get(f[: -len(".report.json")] + ".ncw")
        if d:
            for rec_ in d["records"]["items"]:
                if rec_["comm_id"] == e.get("comm_id") and rec_["seq"] == e.get("waiting_in_seq"):
                    t0 = d["header"]["start_real_ns"] / 1e9 + rec_["issue_ms"] / 1e3
                    t1 = parse_time(e.get("time"))
                    if t1:
                        secs = f"{t1 - t0:.1f}"
    else:
        why.append("no stall report")
    if rec:
        got += f"; recovered after {rec[0].get('stalled_for_s', 0):.1f} s"
    else:
        why.append("no 'recovered' event")
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    how = "host-flag kernel" if "spinning on a host flag" in text else ("torch.cuda._sleep" if "_sleep" in text
                                                                         else "?")
    if "CHECK stalled_stream_completed: ok" not in text:
        why.append("the all_reduce after the stall did not complete with the right value")
    write_row(rows_dir, "stall", {"case": f"1 GPU: stalled stream ({how}), timeout 3 s",
                                  "expected": "GPU_NOT_REACHED r0, then recovered", "got": got, "rank": "0" if
                                  stalls else "", "secs": secs, "after_kill": "", "fr": "", "ras": "",
                                  "pass": not why, "why": why})


def check_features(ncw_dir, log, collector, rows_dir):
    why = []
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    checks = re.findall(r"CHECK (\w+): (ok|FAIL)(.*)", text)
    for name, res, detail in checks:
        if res != "ok":
            why.append(f"{name}: {detail.strip()}")
    want = {"ddp_and_main_thread", "split_and_second_group", "async_wait", "cuda_graph_replay"}
    missing = want - {c[0] for c in checks}
    if missing:
        why.append(f"checks not reached: {sorted(missing)}")
    if "CUDA Graph is empty" in text:
        why.append("'CUDA Graph is empty' warning")
    dumps = load_dumps(ncw_dir, collector)
    got = []
    ngpu = 1
    for f, d in dumps.items():
        comms = d.get("comms", [])
        ngpu = comms[0]["nranks"] if comms else 1
        split = [c for c in comms if c.get("parent_id")]
        got.append(f"{len(comms)} comms ({len(split)} split)")
        for line in comm_summary(d):
            print("  " + line)
        for c in comms:
            if c["coll_issued"] != c["coll_completed"]:
                why.append(f"comm {c['comm_id']}: issued {c['coll_issued']}, completed {c['coll_completed']}")
        if len(comms) < 3:
            why.append(f"{len(comms)} communicators, want 3 or more (default, split, second group)")
        if not split:
            why.append("no communicator with a parent (new_group should split)")
        world = comms[0]["comm_id"] if comms else None
        tids = {r["tid"] for r in d["records"]["items"] if r["op"] == "AllReduce" and r["comm_id"] == world}
        got.append(f"{len(tids)} threads issuing AllReduce on the default comm")
        if len(tids) < 2:
            why.append("all AllReduces of the default comm come from one thread (want autograd + main)")
        cap = [r for r in d["records"]["items"] if "captured" in (r.get("flags") or "")]
        got.append(f"{len(cap)} captured ops")
        if not cap:
            why.append("no op flagged as captured in the CUDA graph")
        ops = collections.Counter(r["op"] for r in d["records"]["items"])
        got.append(", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
        break  # rank 0 is enough
    ev = reports(ncw_dir)
    if ev:
        why.append(f"{len(ev)} report event(s): {[e['type'] for _, _, e in ev]} (false stall?)")
    rc, _ = analyze_exit(ncw_dir, collector)
    if rc != 0:
        why.append(f"collector analyze exit {rc}")
    write_row(rows_dir, "features", {"case": f"{ngpu} GPU{'s' if ngpu > 1 else ''}: new_group split, 2nd group, "
                                             "autograd+main thread, async wait(), CUDA graph",
                                     "expected": "all CHECKs ok, records right, no report",
                                     "got": "; ".join(got) + f"; checks {sum(c[1] == 'ok' for c in checks)}/"
                                                             f"{len(checks)} ok",
                                     "rank": "", "secs": "", "after_kill": "", "fr": "", "ras": "",
                                     "pass": not why, "why": why})


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    what, ncw_dir, log, collector, rows_dir = sys.argv[1:]
    try:
        {"ddp": check_ddp, "stall": check_stall, "features": check_features}[what](ncw_dir, log, collector,
                                                                                    rows_dir)
    except Exception as e:  # a checker crash is a failed row, never a lost table
        write_row(rows_dir, what, {"case": f"1 GPU: {what}", "expected": "", "got": f"checker error: {e!r}",
                                   "rank": "", "secs": "", "after_kill": "", "fr": "", "ras": "", "pass": False,
                                   "why": [repr(e)]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
