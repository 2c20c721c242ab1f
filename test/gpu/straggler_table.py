#!/usr/bin/env python3
"""Judges the straggler scenario (examples/straggler.py: one rank 20 ms late before each step's all_reduce, 80 steps,
4 ranks on one GPU) and the absence of false stragglers in every other job of the phase, one row each.

    straggler_table.py ROOT [--also DIR ...] [--rows-dir DIR] [--within-steps 50]

ROOT/straggler/shim/result.json (test/gpu/run_scenario.py, with --analyze-at-step 50 and the script's
--hold-at-step 50: analyze ran over the live folder while every rank paused after exactly 50 steps):
  straggler   a STRAGGLER verdict names the late rank (truth late_rank) within --within-steps steps: a shim's event
              or the embedded live report stamped before the late rank began step 50 (its truth t_step), or the
              analysis of the live folder taken in the pause after step 50 (analyze_at_step: it began after every
              rank's t_hold and ended before any rank's t_resume); and no STRAGGLER anywhere (events, live reports,
              that analysis, analyze after the end) names another rank; no stall, mismatch, init_hang or suspicion
              (a straggler is not a hang); exit code 0, every rank done.
  no false    every other result.json under ROOT/* and the --also folders (the field scenarios, the grid, two nodes,
              FSDP, the suspicion wave; any variant with a shim) holds no STRAGGLER verdict at all.
Writes DIR/47-straggler.json and DIR/47-no-false-straggler.json (for test/gpu/print_table.py); prints the rows.
"""
import argparse
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_readers import (  # noqa: E402
    all_verdicts, comm_rank_map, culprits_global, events_of, is_diagnosis, is_suspicion, load)

KIND = "STRAGGLER"
LABEL = "1 GPU, 4 ranks"


def normalised(res):
    """run_two_nodes.py keeps events0/events1 and one 'live' document: seen as events and live_reports."""
    if "events" in res or not any(k in res for k in ("events0", "events1", "live")):
        return res
    out = dict(res)
    out["events"] = [e for k in ("events0", "events1") for e in res.get(k) or [] if isinstance(e, dict)]
    out["live_reports"] = [{"report": res["live"]}] if isinstance(res.get("live"), dict) else []
    return out


def stragglers(res):
    """[(source, time, global ranks named, verdict)] of every STRAGGLER verdict of a job."""
    cmap = comm_rank_map(res)
    out = []
    for src, t, v, e in all_verdicts(res):
        if str(v.get("kind", "")).upper() == KIND:
            g, unk = culprits_global(v, cmap, (e or {}).get("comm_id"))
            out.append((src, t, g + [f"?{u}" for u in unk], v))
    return out


def fmt(src, t, ranks, t_ref=None):
    when = f" at {t - t_ref:+.1f} s" if t is not None and t_ref is not None else ""
    return f"{src}: {KIND} r{','.join(map(str, ranks)) or '?'}{when}"


def judge_straggler(res, within):
    why = []
    out = {"got": "", "rank": "-", "secs": ""}
    truth = res.get("truth") if isinstance(res.get("truth"), dict) else {}
    n = res.get("nproc") if isinstance(res.get("nproc"), int) else 4
    ts = [truth.get(str(r)) if isinstance(truth.get(str(r)), dict) else {} for r in range(n)]
    late = next((t.get("late_rank") for t in ts if isinstance(t.get("late_rank"), int)), None)
    if late is None:
        why.append("no rank's truth names the late rank (late_rank)")
        late = n - 1
    steps = ts[late].get("t_step") if isinstance(ts[late].get("t_step"), list) else []
    deadline = steps[within] if len(steps) > within else None
    if deadline is None:
        why.append(f"the late rank's truth has {len(steps)} step times, fewer than {within + 1}")
    if res.get("exit_code") != 0:
        why.append(f"job exit code {res.get('exit_code')!r} ({res.get('ended_by')}), want 0")
    not_done = [r for r in range(n) if ts[r].get("done") is not True]
    if not_done:
        why.append(f"rank(s) {','.join(map(str, not_done))} did not finish (truth done)")
    bad_events = [e for e in events_of(res) if is_diagnosis(e) or is_suspicion(e)]
    if bad_events:
        why.append(f"{len(bad_events)} stall/mismatch/suspicion event(s) in a healthy job: " +
                   ", ".join(sorted({str(e.get("type")) for e in bad_events})))
    found = stragglers(res)
    t0 = steps[0] if steps else None
    wrong = [f for f in found if f[2] != [late]]
    if wrong:
        why.append("STRAGGLER naming others than the late rank: " + "; ".join(fmt(s, t, g, t0) for s, t, g, _ in
                                                                            wrong[:4]))
    snap = res.get("analyze_at_step") if isinstance(res.get("analyze_at_step"), dict) else None
    holds = [t.get("t_hold") for t in ts]
    resumes = [t.get("t_resume") for t in ts]
    t_snap = snap.get("t") if snap else None
    t_snap_end = snap.get("t_done", t_snap) if snap else None
    in_pause = (isinstance(t_snap, (int, float)) and isinstance(t_snap_end, (int, float)) and
                all(isinstance(x, (int, float)) for x in holds + resumes) and
                max(holds) <= t_snap and t_snap_end <= min(resumes))
    timely = []
    for s, t, g, _ in found:
        if g != [late]:
            continue
        if s in ("event", "live") and t is not None and deadline is not None and t <= deadline:
            timely.append((s, t, g))
        elif s == "analyze@step" and in_pause and snap.get("step") == within:
            timely.append((s, t, g))
    sources = sorted({s for s, _, g, _ in found if g == [late]})
    out["got"] = (f"late rank {late}: " + ("; ".join(fmt(s, t, g, t0) for s, t, g in timely[:3]) + " (in time)"
                                           if timely else "no STRAGGLER naming it within the steps") +
                  f"; named by: {', '.join(sources) or 'nothing'}" +
                  ("" if snap else "; no analysis taken at the step") +
                  (f"; the analysis at step {snap.get('step')} was not taken in the pause" if snap and not in_pause
                   else ""))
    if timely:
        out["rank"] = str(late)
        first = min((t for s, t, g in timely if t is not None), default=None)
        if first is not None and t0 is not None:
            out["secs"] = f"{first - t0:.1f}"
    else:
        why.append(f"no STRAGGLER naming rank {late} within {within} steps (a shim's event or the live report before "
                   f"step {within}, or the analysis of the folder in the pause after step {within})")
    an = res.get("analyze")
    after = [fmt(s, t, g) for s, t, g, _ in found if s == "analyze"]
    out["after_kill"] = (f"analyze exit {res.get('analyze_exit')}: " + ("; ".join(after) or "no STRAGGLER")
                         if isinstance(an, dict) else "analyze gave no JSON")
    return out, why


def scan_others(root, also):
    """{job label: [STRAGGLER descriptions]} over every result.json of the phase but the straggler's own."""
    seen, counted = {}, 0
    paths = sorted(glob.glob(os.path.join(root, "*", "*", "result.json")) + glob.glob(os.path.join(root, "*",
                                                                                                    "result.json")))
    for d in also:
        paths += sorted(glob.glob(os.path.join(d, "*", "*", "result.json")))
    for p in paths:
        rel = os.path.relpath(p, os.path.dirname(root))
        if os.path.join("straggler", "shim") in p or f"{os.sep}fr{os.sep}" in p:
            continue
        res, err = load(p)
        if res is None:
            seen[rel] = [f"unreadable ({err})"]
            continue
        counted += 1
        found = stragglers(normalised(res))
        if found:
            seen[rel] = [fmt(s, t, g) for s, t, g, _ in found]
    return counted, seen


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--also", action="append", default=[], help="another folder of jobs to scan for false stragglers")
    p.add_argument("--rows-dir", default="")
    p.add_argument("--within-steps", type=int, default=50)
    a = p.parse_args()
    rows = []
    res, err = load(os.path.join(a.root, "straggler", "shim", "result.json"))
    base = {"fr": "not run (shim only)", "ras": "not queried"}
    if res is None:
        js, why = {"got": "did not run", "rank": "", "secs": "", "after_kill": ""}, [err]
    else:
        try:
            js, why = judge_straggler(res, a.within_steps)
        except Exception as e:  # noqa: BLE001 -- a shape the judge did not foresee: a failing row, not a traceback
            js, why = {"got": "judge error", "rank": "", "secs": "", "after_kill": ""}, [f"{type(e).__name__}: {e}"]
    rows.append(("47-straggler", dict(base, case=f"{LABEL}: straggler (one rank 20 ms late before each all_reduce)",
                                      expected=f"STRAGGLER names the late rank within {a.within_steps} steps (live, "
                                      "or analyze at the step); no other STRAGGLER, no stall, exit 0",
                                      pass_=not why, why=why, exit_code=(res or {}).get("exit_code"),
                                      ended_by=(res or {}).get("ended_by"), **js)))
    try:
        counted, seen = scan_others(a.root, a.also)
        bad = {k: v for k, v in seen.items() if not v[0].startswith("unreadable")}
        why = [f"{k}: {'; '.join(v[:2])}" for k, v in bad.items()]
        if not counted:
            why.append("no other job's result found")
        got = (f"{counted} job(s) scanned, {len(bad)} with a STRAGGLER" +
               (f"; {len(seen) - len(bad)} unreadable" if len(seen) > len(bad) else ""))
    except Exception as e:  # noqa: BLE001
        got, why = "judge error", [f"{type(e).__name__}: {e}"]
    rows.append(("47-no-false-straggler", dict(base, case=f"{LABEL}: no false STRAGGLER in the phase's other jobs",
                                               expected="0 STRAGGLER verdicts (clean, validation, the field "
                                               "scenarios, grid, two nodes, FSDP, suspicion wave)",
                                               got=got, rank="-", secs="", after_kill="", pass_=not why, why=why)))
    for tag, r in rows:
        r["pass"] = r.pop("pass_")
        if a.rows_dir:
            os.makedirs(a.rows_dir, exist_ok=True)
            with open(os.path.join(a.rows_dir, f"{tag}.json"), "w") as f:
                json.dump(r, f, indent=1)
        print(f"{r['case']}: {'PASS' if r['pass'] else 'FAIL'}: got {r['got']} (rank {r['rank']}, {r['secs']} s); "
              f"after the end {r['after_kill']}")
        for w in r["why"]:
            print(f"    why: {w}")
    return 0 if all(r["pass"] for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
