#!/usr/bin/env python3
"""Judges early suspicion (issue 13 item 5): the hang scenarios at the default NCCLWATCH_TIMEOUT_SEC=60, each job
ended at its first suspicion or 20 s after its hang began, and the clean runs of the phase.

    suspect_table.py SUSPECT_ROOT --clean-root ROOT [--rows-dir DIR] [--within 10]

SUSPECT_ROOT/<scenario>/shim/result.json (test/gpu/run_scenario.py --timeout 60 --end-after-suspect 1
--cap-after-hang 20), one row per scenario of skip, uneven, type_mismatch, init_hang, grad_accum, validation:
  the hang's start is the scripts' own truth (examples/hang_scenarios.py's phase times, read by
  job_readers.hang_start); the first suspicion is the earliest report event that is one (job_readers.is_suspicion:
  the event JSON is the record; the shim's stderr line is shown beside it), or a diagnosis before it (a MISMATCH is
  confirmed as the op is issued, before any threshold). Right: that first word within --within s of
  the hang's start, none before it (0.5 s of slack: the truth is stamped within a step of the op); validation (a
  real wait of 15 s): suspected, then a "recovered" event after the suspicion, exit code 0.
  Shown, not judged: the suspicion's verdicts and the rank files' completion-gap baseline (completion_gap_p99_ns,
  format 1.4), which sets the threshold max(20 x p99, 5 s): on a GPU shared by many ranks the baseline grows.
One row for the clean runs: ROOT/<job>/shim/result.json for clean, grid_clean, fsdp2_clean, fsdp_tp_clean and
straggler (healthy jobs): no suspicion event and no suspicion line on stderr in any of them (a job not run is named;
the row fails only when none ran).
Writes DIR/46-suspect-<scenario>.json and DIR/46-suspect-clean.json; prints the rows.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_readers import (  # noqa: E402
    HANG_SCENARIOS, comm_rank_map, culprits_global, event_time, events_of, hang_start, is_diagnosis, is_recovery,
    is_suspicion, load)

CLEAN_JOBS = ("clean", "grid_clean", "fsdp2_clean", "fsdp_tp_clean", "straggler")
SLACK = 0.5
LABEL = "1 GPU, 4 ranks, timeout 60 s"


def baseline(res):
    """'p99 gap a..b ms' over the rank files' comms that have completions, or ''."""
    vals = []
    for d in (res.get("rank_files") or {}).values() if isinstance(res.get("rank_files"), dict) else ():
        for c in (d or {}).get("comms") or [] if isinstance(d, dict) else ():
            x = c.get("completion_gap_p99_ns") if isinstance(c, dict) else None
            if isinstance(x, int) and x > 0:
                vals.append(x / 1e6)
    if not vals:
        return ""
    return f"baseline p99 gap {min(vals):.0f}-{max(vals):.0f} ms (threshold {max(20 * max(vals) / 1e3, 5.0):.1f} s)"


def describe(e, cmap):
    parts = []
    for v in e.get("verdicts") or []:
        if isinstance(v, dict):
            g, unk = culprits_global(v, cmap, e.get("comm_id"))
            who = ",".join(map(str, g)) + "".join(f",?{u}" for u in unk)
            parts.append(f"{v.get('kind')} r{who.lstrip(',')}" if who else str(v.get("kind")))
    return f"rank {e.get('global_rank')}'s {e.get('type')}" + (f": {'; '.join(parts)}" if parts else "")


def judge(scn, res, within):
    why = []
    out = {"got": "", "rank": "-", "secs": "", "after_kill": ""}
    truth = res.get("truth") if isinstance(res.get("truth"), dict) else {}
    n = res.get("nproc") if isinstance(res.get("nproc"), int) else 4
    t0 = hang_start(scn, truth, n, final=True)
    if res.get("timeout_s") != 60:
        why.append(f"ran with NCCLWATCH_TIMEOUT_SEC={res.get('timeout_s')!r}, want the default 60")
    events = events_of(res)
    # The first word of the hang: a suspicion, or a diagnosis that came before any threshold (a MISMATCH is named
    # when the mismatched op is issued: a confirmed verdict is more than a suspicion, and the same event's
    # suspicion after it would be a second lead).
    sus = sorted([e for e in events if is_suspicion(e) or is_diagnosis(e)], key=lambda e: event_time(e) or 0)
    cmap = comm_rank_map(res)
    logs = [x for x in res.get("log_suspicions") or [] if isinstance(x, list) and x and isinstance(x[0], (int, float))]
    said = f"; stderr: first line {logs[0][0] - t0:+.1f} s" if logs and t0 is not None else \
        ("; stderr: no suspicion line" if not logs else "")
    base = baseline(res)
    out["after_kill"] = f"job {res.get('ended_by')}, exit {res.get('exit_code')}" + (f"; {base}" if base else "")
    if t0 is None:
        why.append("the scripts' truth does not say when the hang began (job_readers.hang_start)")
    if not sus:
        out["got"] = "no suspicion event" + said
        why.append(f"no suspicion within the job ({res.get('ended_by')})")
        return out, why
    first = sus[0]
    t1 = event_time(first)
    n_sus = sum(1 for e in sus if is_suspicion(e))
    out["got"] = describe(first, cmap) + f"; {n_sus} suspicion event(s)" + said
    named = set()
    for v in first.get("verdicts") or []:
        named.update(culprits_global(v, cmap, first.get("comm_id"))[0])
    out["rank"] = ",".join(map(str, sorted(named))) or "-"
    if t0 is not None and t1 is not None:
        secs = t1 - t0
        out["secs"] = f"{secs:.1f}"
        if secs < -SLACK:
            why.append(f"suspected {-secs:.1f} s before the hang began: a false suspicion")
        elif secs > within:
            why.append(f"suspected {secs:.1f} s after the hang began, want within {within:g} s")
    elif t1 is None:
        why.append(f"the first suspicion has no readable time ({first.get('time')!r})")
    if scn == "validation":
        rec = [e for e in events if is_recovery(e) and (event_time(e) or 0) >= (t1 or 0)]
        out["got"] += "; then recovered" if rec else "; no recovery"
        if not rec:
            why.append("no 'recovered' event after the suspicion (the validation is a real wait that ends)")
        if res.get("exit_code") != 0:
            why.append(f"job exit code {res.get('exit_code')!r}, want 0 (the job goes on)")
    return out, why


def judge_clean(root):
    why, ran, missing, found = [], [], [], []
    for job in CLEAN_JOBS:
        res, err = load(os.path.join(root, job, "shim", "result.json"))
        if res is None:
            missing.append(job)
            continue
        ran.append(job)
        sus = [e for e in events_of(res) if is_suspicion(e)]
        logs = res.get("log_suspicions") or []
        if sus or logs:
            found.append(f"{job}: {len(sus)} suspicion event(s), {len(logs)} stderr line(s)" +
                         (f" ({describe(sus[0], comm_rank_map(res))})" if sus else ""))
    got = f"{len(ran)} clean job(s) ({', '.join(ran) or 'none'}): " + ("; ".join(found) or "no suspicion")
    if missing:
        got += f"; not run: {', '.join(missing)}"
    if not ran:
        why.append("no clean job ran")
    why.extend(found)
    return {"got": got, "rank": "-", "secs": "", "after_kill": ""}, why


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--clean-root", default="")
    p.add_argument("--rows-dir", default="")
    p.add_argument("--within", type=float, default=10.0)
    a = p.parse_args()
    rows = []
    for i, scn in enumerate(HANG_SCENARIOS):
        path = os.path.join(a.root, scn, "shim", "result.json")
        if not os.path.isdir(os.path.dirname(path)):
            continue
        res, err = load(path)
        if res is None:
            js, why = {"got": "did not run", "rank": "", "secs": "", "after_kill": ""}, [err]
        else:
            try:
                js, why = judge(scn, res, a.within)
            except Exception as e:  # noqa: BLE001 -- a shape the judge did not foresee: a failing row
                js, why = {"got": "judge error", "rank": "", "secs": "", "after_kill": ""}, [
                    f"{type(e).__name__}: {e}"]
        expected = f"suspected within {a.within:g} s of the hang's start (the scripts' truth), none before"
        if scn == "validation":
            expected += "; then recovered, exit 0"
        rows.append((f"46-suspect-{i}-{scn}", dict(js, case=f"{LABEL}: early suspicion: {scn}", expected=expected,
                                                    fr="not run (shim only)", ras="not queried", pass_=not why,
                                                    why=why, exit_code=(res or {}).get("exit_code"),
                                                    ended_by=(res or {}).get("ended_by"))))
    if not rows:
        rows.append(("46-suspect-missing", {"case": f"{LABEL}: early suspicion", "expected": "the wave's results",
                                            "got": "did not run", "rank": "", "secs": "", "after_kill": "",
                                            "fr": "", "ras": "", "pass_": False,
                                            "why": [f"no scenario folder under {a.root}"]}))
    if a.clean_root:
        js, why = judge_clean(a.clean_root)
        rows.append(("46-suspect-clean", dict(js, case="1 GPU: no suspicion in the clean runs",
                                              expected="no suspicion event or line in clean, grid_clean, FSDP2, "
                                              "FSDP+TP, straggler", fr="", ras="", pass_=not why, why=why)))
    for tag, r in rows:
        r["pass"] = r.pop("pass_")
        if a.rows_dir:
            os.makedirs(a.rows_dir, exist_ok=True)
            with open(os.path.join(a.rows_dir, f"{tag}.json"), "w") as f:
                json.dump(r, f, indent=1)
        print(f"{r['case']}: {'PASS' if r['pass'] else 'FAIL'}: got {r['got']} (rank {r['rank']}, {r['secs']} s); "
              f"{r['after_kill']}")
        for w in r["why"]:
            print(f"    why: {w}")
    return 0 if all(r["pass"] for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
