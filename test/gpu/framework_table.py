#!/usr/bin/env python3
"""Judges the FSDP2 runs of examples/fsdp_train.py (4 ranks on one GPU) from what test/gpu/run_scenario.py kept.

    framework_table.py ROOT [--rows-dir DIR]

ROOT/<case>/shim/result.json for each case (a missing one is a FAIL row saying so):
  fsdp2_clean    --mode fsdp2 at 4 ranks, nothing wrong: exit code 0, every rank finished training (its log line and
                 its truth file), no report event at all (no stall, no early suspicion, no straggler), and
                 `analyze` after the end exits 0 with no verdict.
  fsdp_tp_clean  --mode fsdp_tp (a dp 2 x tp 2 mesh), nothing wrong: the same.
  fsdp2_eval     --mode fsdp2 --eval-rank 0 --eval-at-sec 10 --eval-sec 15, NCCLWATCH_TIMEOUT_SEC=10: rank 0 runs 15 s
                 of GPU work outside NCCL while the others wait in the next step's collective. Right: exit code 0 and
                 every rank finished; the first stall reported after the evaluation began names global rank 0
                 (NOT_JOINED or GPU_NOT_REACHED) and comes timeout - 1 s to timeout + 5 s after rank 0's eval_start
                 (its truth file, against the event's time); no stall of the evaluation names any other rank; every
                 rank that reported a stall reports 'recovered' after it; no stall or early suspicion before
                 eval_start or after eval_end (a false one), no mismatch or init_hang report at all; 4 ranks, and
                 the evaluation lasted 15 s (eval_end - eval_start >= 14.5 s).
Live verdicts name comm ranks; they are turned into global ranks through the rank files' comm tables (a culprit
object's own global_rank is taken as it is). Any missing key or unexpected shape gives a FAIL row with the reason.
Writes DIR/45-<case>.json per case (for test/gpu/print_table.py) and prints the rows; exits 1 if any row failed.
"""
import argparse
import datetime
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_readers import is_diagnosis, is_suspicion  # noqa: E402

try:  # the two-GPU table's helpers, beside this script
    from scenario_table import parse_time, short_ras
except Exception:  # noqa: BLE001 - a broken neighbour must not cost these rows
    short_ras = None

    def parse_time(s):
        """The report's wall time, RFC 3339 ('2026-11-30T05:51:02.123+00:00'; before: '2026-11-30 05:51:02.123 +0000'), as seconds since the epoch."""
        try:
            return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f%z" if "T" in s else "%Y-%m-%d %H:%M:%S.%f %z").timestamp()
        except (TypeError, ValueError):
            return None

LABEL = "1 GPU, 4 ranks"
NPROC = 4
EVAL_SEC = 15.0
STALL_KINDS = ("NOT_JOINED", "GPU_NOT_REACHED")
CULPRIT = 0  # the evaluating rank
DEFAULT_TIMEOUT = 10.0
CASES = [
    ("fsdp2_clean", "FSDP2 (fully_shard per block), clean", "clean"),
    ("fsdp_tp_clean", "FSDP2 + TP (dp 2 x tp 2 mesh), clean", "clean"),
    ("fsdp2_eval", "FSDP2, rank 0 evaluates 15 s outside NCCL", "eval"),
]
FINISHED = re.compile(r"\[fsdp_train rank (\d+) [^\]]*\] training finished")


def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def load(path):
    """(result, None) or (None, why)."""
    if not os.path.exists(path):
        return None, f"no result: {path} is missing"
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"unreadable result {path}: {e}"
    if not isinstance(res, dict):
        return None, f"result {path} is a {type(res).__name__}, not an object"
    return res, None


def get_events(res, why):
    """The report events as dicts with their parsed time ('t'); None (and a reason) if their shape is wrong."""
    ev = res.get("events")
    if not isinstance(ev, list):
        why.append(f"result has no 'events' list (got {type(ev).__name__})")
        return None
    out = []
    for i, e in enumerate(ev):
        if not isinstance(e, dict):
            why.append(f"event {i} is a {type(e).__name__}, not an object")
            return None
        out.append(dict(e, t=parse_time(e.get("time"))))
    return out


def comm_rank_map(res):
    """{(comm_id, comm rank): global rank} from each rank file's header and comm table."""
    m = {}
    files = res.get("rank_files")
    if not isinstance(files, dict):
        return m
    for d in files.values():
        if not isinstance(d, dict):
            continue
        h = d.get("header") if isinstance(d.get("header"), dict) else {}
        g = h.get("global_rank")
        if not is_int(g) or g < 0 or not isinstance(d.get("comms"), list):
            continue
        for c in d["comms"]:
            if isinstance(c, dict) and is_int(c.get("rank")):
                m[(c.get("comm_id"), c["rank"])] = g
    return m


def verdicts(e):
    vs = e.get("verdicts")
    return [v for v in vs if isinstance(v, dict)] if isinstance(vs, list) else []


def culprits_global(v, e, cmap):
    """(global ranks the verdict names, culprits that could not be placed)."""
    named, unknown = set(), []
    comm = v.get("comm_id") or e.get("comm_id")
    cs = v.get("culprits")
    if not isinstance(cs, list):
        return [], [f"culprits is {cs!r}"]
    for c in cs:
        cr = None
        if isinstance(c, dict):
            g = c.get("global_rank")
            if is_int(g) and g >= 0:
                named.add(g)
                continue
            cr = c.get("comm_rank")
        elif is_int(c):
            cr = c
        g = cmap.get((comm, cr)) if is_int(cr) else None
        if g is None:
            unknown.append(f"comm rank {cr} of {comm}" if is_int(cr) else repr(c))
        else:
            named.add(g)
    return sorted(named), unknown


def fmt_event(e, cmap, t_ref=None):
    parts = []
    for v in verdicts(e):
        g, unk = culprits_global(v, e, cmap)
        who = ",".join(map(str, g)) + ("," if g and unk else "") + ",".join(f"?{u}" for u in unk)
        parts.append(f"{v.get('kind')} r{who}" if who else str(v.get("kind")))
    when = f" at {e['t'] - t_ref:+.1f} s" if t_ref is not None and e.get("t") is not None else ""
    return f"{'; '.join(parts) or 'no verdict'} (rank {e.get('global_rank')}'s {e.get('type')}{when})"


def check_exit(res, why):
    if res.get("nproc") != NPROC:
        why.append(f"ran at {res.get('nproc')!r} ranks, want {NPROC}")
    if res.get("exit_code") != 0:
        why.append(f"job exit code {res.get('exit_code')!r} ({res.get('ended_by')}), want 0")


def check_finished(res, why):
    """Every rank finished training: its 'training finished' log line and its truth file's done."""
    n = res.get("nproc")
    if not is_int(n) or n < 1:
        why.append(f"result has no usable 'nproc' ({n!r})")
        return
    tail = res.get("job_log_tail")
    if not isinstance(tail, str):
        why.append("result has no 'job_log_tail' text")
        logged = set()
    else:
        logged = {int(m.group(1)) for m in FINISHED.finditer(tail)}
    truth = res.get("truth") if isinstance(res.get("truth"), dict) else {}
    done = {r for r in range(n) if isinstance(truth.get(str(r)), dict) and truth[str(r)].get("done") is True}
    if isinstance(tail, str) and set(range(n)) - logged:
        why.append(f"no 'training finished' line in the log from rank(s) "
                   f"{','.join(map(str, sorted(set(range(n)) - logged)))}")
    if set(range(n)) - done:
        why.append(f"no truth file with done=true from rank(s) {','.join(map(str, sorted(set(range(n)) - done)))}")


def analyze_said(res, cmap, why, want_none):
    """after_kill text; with want_none, `analyze` must have exited 0 with no verdict."""
    an = res.get("analyze")
    rc = res.get("analyze_exit")
    if not isinstance(an, dict):
        if want_none:
            why.append(f"analyze gave no JSON (exit {rc!r}): {str(res.get('analyze_error', ''))[:160]}")
        return f"analyze failed (exit {rc!r})"
    vs = an.get("verdicts")
    if not isinstance(vs, list):
        if want_none:
            why.append("analyze output has no 'verdicts' list")
        return f"analyze exit {rc!r}, no verdicts list"
    said = []
    for v in vs:
        if not isinstance(v, dict):
            said.append(repr(v)[:40])
            continue
        g, unk = culprits_global(v, {}, cmap)
        who = ",".join(map(str, g)) + "".join(f",?{u}" for u in unk)
        said.append(f"{v.get('kind')} r{who.lstrip(',')}" if who else str(v.get("kind")))
    if want_none:
        if rc != 0:
            why.append(f"analyze exit code {rc!r}, want 0")
        if vs:
            why.append(f"after the end analyze says {'; '.join(said)}, want no verdict")
    return f"analyze exit {rc!r}: {'; '.join(said) or 'no verdict'}"


def judge_clean(res):
    why = []
    out = {"got": "", "rank": "-", "secs": "", "after_kill": ""}
    check_exit(res, why)
    check_finished(res, why)
    cmap = comm_rank_map(res)
    events = get_events(res, why)
    if events is None:
        out["got"] = "no readable events"
    elif events:
        out["got"] = "; ".join(fmt_event(e, cmap) for e in events[:4]) + (" ..." if len(events) > 4 else "")
        types = ", ".join(sorted({str(e.get("type")) for e in events}))
        why.append(f"{len(events)} report event(s) in a clean run ({types}), want none")
    else:
        out["got"] = "no report"
    out["after_kill"] = analyze_said(res, cmap, why, want_none=True)
    return out, why


def judge_eval(res):
    why = []
    out = {"got": "", "rank": "", "secs": "", "after_kill": ""}
    check_exit(res, why)
    check_finished(res, why)
    cmap = comm_rank_map(res)
    out["after_kill"] = analyze_said(res, cmap, [], want_none=False)
    timeout = res.get("timeout_s") if is_num(res.get("timeout_s")) else DEFAULT_TIMEOUT
    truth = res.get("truth") if isinstance(res.get("truth"), dict) else {}
    t0 = truth.get(str(CULPRIT)) if isinstance(truth.get(str(CULPRIT)), dict) else {}
    start, end = t0.get("eval_start"), t0.get("eval_end")
    events = get_events(res, why)
    if not is_num(start) or not is_num(end):
        why.append(f"rank {CULPRIT}'s truth file has no eval_start/eval_end (truth: {json.dumps(truth)[:160]})")
        out["got"] = "no evaluation times"
        return out, why
    if events is None:
        out["got"] = "no readable events"
        return out, why
    untimed = [e for e in events if e["t"] is None]
    if untimed:
        why.append(f"{len(untimed)} event(s) without a readable time, e.g. {untimed[0].get('time')!r}")
    events = sorted((e for e in events if e["t"] is not None), key=lambda e: e["t"])
    if end - start < EVAL_SEC - 0.5:
        why.append(f"the evaluation lasted {end - start:.1f} s, want {EVAL_SEC:.0f} s")
    for e in events:
        if e.get("type") in ("mismatch", "init_hang") and is_diagnosis(e):
            why.append(f"false report: {fmt_event(e, cmap, start)}")
        elif is_suspicion(e) and not start <= e["t"] <= end + 1.0:
            why.append(f"false suspicion {'before' if e['t'] < start else 'after'} the evaluation: "
                       f"{fmt_event(e, cmap, start)}")
    stalls = [e for e in events if e.get("type") == "stall" and is_diagnosis(e)]
    for e in stalls:
        if e["t"] < start:
            why.append(f"false stall before the evaluation began: {fmt_event(e, cmap, start)}")
        elif e["t"] > end + 1.0:
            why.append(f"stall reported {e['t'] - end:.1f} s after the evaluation ended: {fmt_event(e, cmap, start)}")
    during = [e for e in stalls if e["t"] >= start]
    if not during:
        out["got"] = "no stall report during the evaluation"
        out["rank"] = "-"
        why.append("no stall report after the evaluation began")
        return out, why
    first = during[0]
    secs = first["t"] - start
    out["secs"] = f"{secs:.1f}"
    out["secs_value"] = secs
    named, right = set(), False
    for v in verdicts(first):
        g, unk = culprits_global(v, first, cmap)
        named.update(g)
        right = right or (v.get("kind") in STALL_KINDS and CULPRIT in g)
    out["rank"] = ",".join(map(str, sorted(named))) or "-"
    out["got"] = fmt_event(first, cmap, start)
    if not right:
        why.append(f"first stall of the evaluation says {fmt_event(first, cmap, start)}, want "
                   f"{'/'.join(STALL_KINDS)} naming global rank {CULPRIT}")
    if not timeout - 1 <= secs <= timeout + 5:
        why.append(f"first stall reported {secs:.1f} s after eval_start, want {timeout - 1:.0f} to "
                   f"{timeout + 5:.0f} s (NCCLWATCH_TIMEOUT_SEC={timeout:g})")
    for e in during[1:]:
        if e["t"] > end + 1.0:
            continue  # counted above as a false stall
        for v in verdicts(e):
            g, unk = culprits_global(v, e, cmap)
            if set(g) - {CULPRIT} or unk:
                why.append(f"a stall of the evaluation names others than rank {CULPRIT}: {fmt_event(e, cmap, start)}")
                break
    for v in verdicts(first):
        g, unk = culprits_global(v, first, cmap)
        if set(g) - {CULPRIT} or unk:
            why.append(f"the first stall also names {','.join(map(str, sorted(set(g) - {CULPRIT})))}"
                       f"{' ' + ', '.join(unk) if unk else ''} ({v.get('kind')}), want only rank {CULPRIT}")
    # Every rank that reported a stall of the evaluation reports its recovery afterwards, in its own report file.
    files = {}
    for e in during:
        files.setdefault(e.get("file"), e)
    recovered_by = []
    for f, s in files.items():
        later = [e for e in events if e.get("file") == f and e["t"] >= s["t"] and e.get("type") in
                 ("recovered", "ended_by_error")]
        if later and later[0].get("type") == "recovered":
            recovered_by.append(str(s.get("global_rank")))
        elif later:
            why.append(f"rank {s.get('global_rank')}'s stall ended by an error ({later[0].get('type')}), want "
                       f"'recovered'")
        else:
            why.append(f"no 'recovered' event from rank {s.get('global_rank')} after its stall")
    others = len(during) - 1
    out["got"] += (f"; {others} more stall report(s)" if others else "") + \
        (f"; recovered on rank(s) {','.join(sorted(recovered_by))}" if recovered_by else "; no recovery")
    return out, why


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--rows-dir", default="")
    a = p.parse_args()
    rows = []
    for name, title, kind in CASES:
        path = os.path.join(a.root, name, "shim", "result.json")
        res, err = load(path)
        if kind == "clean":
            expected = f"{NPROC} ranks: no report (no stall, suspicion or straggler), analyze: no verdict, exit 0"
        else:
            expected = (f"{NPROC} ranks, {EVAL_SEC:.0f} s eval: {'/'.join(STALL_KINDS)} r{CULPRIT} "
                        f"{DEFAULT_TIMEOUT - 1:.0f}-{DEFAULT_TIMEOUT + 5:.0f} s after eval start, recovered, no false "
                        "stall or suspicion, exit 0")
        if res is None:
            js, why = {"got": "did not run", "rank": "", "secs": "", "after_kill": ""}, [err]
        else:
            try:
                js, why = (judge_clean if kind == "clean" else judge_eval)(res)
            except Exception as e:  # noqa: BLE001 - a shape the judge did not foresee: a FAIL row, not a traceback
                js, why = {"got": "judge error", "rank": "", "secs": "", "after_kill": ""}, [
                    f"unexpected result shape: {type(e).__name__}: {e}"]
        ras = "not queried"
        if res is not None and short_ras is not None:
            try:
                ras = short_ras(res)
            except Exception as e:  # noqa: BLE001
                ras = f"unreadable ({type(e).__name__})"
        row = {"case": f"{LABEL}: {title}", "expected": expected, "got": js["got"], "rank": js["rank"],
               "secs": js["secs"], "after_kill": js["after_kill"], "fr": "not run (shim only)", "ras": ras,
               "pass": not why, "why": why,
               "exit_code": res.get("exit_code") if res else None, "ended_by": res.get("ended_by") if res else None}
        rows.append(row)
        if a.rows_dir:
            os.makedirs(a.rows_dir, exist_ok=True)
            with open(os.path.join(a.rows_dir, f"45-{name}.json"), "w") as f:
                json.dump(row, f, indent=1)
    for r in rows:
        print(f"{r['case']}: {'PASS' if r['pass'] else 'FAIL'}: got {r['got']} (rank {r['rank']}, {r['secs']} s); "
              f"after the end {r['after_kill']}; exit {r['exit_code']} ({r['ended_by']})")
        for w in r["why"]:
            print(f"    why: {w}")
    return 0 if rows and all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
