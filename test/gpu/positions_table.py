#!/usr/bin/env python3
"""Judges examples/positions_check.py's run (test/gpu/run_scenario.py with --dump-at-phase mid and
--dump-after-report): the GPU positions of every (rank, communicator) in the rank files against the ranks' own
ground truth, at two moments, and the job's log. Three rows (issue 23, item 1):

    positions_table.py WORK [--rows-dir DIR]

  mid    at --mid-step every rank synchronized its device (every op complete), and the rank files were dumped while
         the ranks waited: per (rank, communicator) the rank file's coll_completed must equal the handles that
         report is_completed() (all of them), coll_issued the handles issued, with progress_exact true and
         gpu_source "nccl-profiler" (no count a lower bound);
  hang   the same in the hang (the rank files dumped --dump-after-report s after the first report, between two reads
         of the truth), where the skipper never issued B's op #n: no other rank may count B #n completed;
  log    no rank's stderr says "lower bounds" or "got none within its call".
The communicators are matched to torch's groups by creation order (the script's "order": the world, then A, then B,
each created eagerly: init_process_group(device_id=...)), the rank file's comm table sorted by init_start_ms (then
slot), among the communicators of the groups' size; the issued counts then confirm the match (a mismatch is named).
WORK holds result.json and job.log. Rows: ROWS/71-positions-{mid,hang,log}.json.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_readers import is_diagnosis, load  # noqa: E402

BAD_WORDS = ("lower bounds", "got none within its call")
LABEL = "positions, torch, {n} ranks on 1 GPU"


def order_of(truth):
    for t in (truth or {}).values():
        if isinstance(t, dict) and isinstance(t.get("order"), list):
            return t["order"]
    return ["world", "A", "B"]


def match_comms(comms, order, size):
    """{group name: comm} by creation order among the comms of the groups' size; and a note when the table holds
    other communicators or fewer than the groups."""
    cs = [c for c in comms or [] if isinstance(c, dict) and c.get("nranks") == size and
          c.get("state") not in ("free", "init-failed")]
    cs.sort(key=lambda c: (c.get("init_start_ms") if isinstance(c.get("init_start_ms"), (int, float)) else 1e18,
                           c.get("slot", 0)))
    note = ""
    if len(cs) != len(order):
        note = f"{len(cs)} communicators of {size} ranks in the comm table, {len(order)} groups"
    return dict(zip(order, cs)), note


def check_moment(files, truth, order, moment, skipped=None):
    """[(rank, group, problem)] and the number of (rank, group) pairs checked. moment "mid": each rank's truth "mid"
    (its snapshot at the synchronized step); else its current groups."""
    problems, checked = [], 0
    for path, d in sorted((files or {}).items()):
        if not isinstance(d, dict) or d.get("error") or not isinstance(d.get("header"), dict):
            problems.append((None, None, f"{os.path.basename(path)}: unreadable ({str((d or {}).get('error'))[:80]})"))
            continue
        g = d["header"].get("global_rank")
        t = (truth or {}).get(str(g))
        if not isinstance(t, dict):
            problems.append((g, None, "no truth for this rank"))
            continue
        groups = t.get("mid") if moment == "mid" else t.get("groups")
        if not isinstance(groups, dict):
            problems.append((g, None, f"no {'mid-run ' if moment == 'mid' else ''}truth"))
            continue
        size = len(next(iter(groups.values())).get("ranks") or []) if groups else 0
        m, note = match_comms(d.get("comms"), order, size)
        if note:
            problems.append((g, None, note))
        for name in order:
            c, tg = m.get(name), groups.get(name)
            if c is None or not isinstance(tg, dict):
                problems.append((g, name, "no communicator" if c is None else "no truth"))
                continue
            checked += 1
            iss, rea, com = c.get("coll_issued"), c.get("coll_reached"), c.get("coll_completed")
            if c.get("gpu_source") != "nccl-profiler":
                problems.append((g, name, f"gpu_source {c.get('gpu_source')!r}, want 'nccl-profiler'"))
            if c.get("progress_exact") is not True:
                problems.append((g, name, f"a lower bound (progress_exact {c.get('progress_exact')})"))
            if iss != tg.get("issued"):
                problems.append((g, name, f"issued {iss}, the rank issued {tg.get('issued')} (match or hidden ops?)"))
            if com != tg.get("completed"):
                problems.append((g, name, f"completed {com}, is_completed() says {tg.get('completed')}"))
            if isinstance(rea, int) and isinstance(com, int) and isinstance(iss, int) and not com <= rea <= iss:
                problems.append((g, name, f"reached {rea} outside completed {com}..issued {iss}"))
            if skipped and name == skipped.get("group") and g != skipped.get("rank") and isinstance(com, int) and \
                    com >= skipped.get("op", 1 << 60):
                problems.append((g, name, f"counts {name} #{skipped['op']} completed, which rank {skipped['rank']} "
                                          "never issued"))
    return problems, checked


def fmt_problems(problems, limit=6):
    words = [f"r{g} {n}: {p}" if n else (f"r{g}: {p}" if g is not None else p) for g, n, p in problems]
    return "; ".join(words[:limit]) + (f"; and {len(words) - limit} more" if len(words) > limit else "")


def truth_changed(dumps):
    """The groups of ranks whose truth changed while the files were dumped (the comparison may then be racy)."""
    b, a = dumps.get("truth_before") or {}, dumps.get("truth_after") or {}
    return sorted(r for r in a if isinstance(a.get(r), dict) and isinstance(b.get(r), dict) and
                  a[r].get("groups") != b[r].get("groups"))


def judge(work):
    res, err = load(os.path.join(work, "result.json"))
    n = (res or {}).get("nproc") or 4
    label = LABEL.format(n=n)
    rows = {}
    if res is None:
        for k in ("mid", "hang", "log"):
            rows[k] = {"case": f"{label}: {k}", "expected": "", "got": err, "pass": False, "why": [err]}
        return rows
    truth = res.get("truth") or {}
    order = order_of(truth)
    skipped = None
    for r, t in truth.items():
        if isinstance(t, dict) and isinstance(t.get("skipped"), dict):
            skipped = dict(t["skipped"], rank=int(r) if str(r).isdigit() else r)
    expected = "every (rank, communicator): exact (nccl-profiler, progress_exact), issued and completed = the rank's " \
               "work handles (is_completed())"
    for key, moment, dumps in (("mid", "mid", res.get("dumps_at_phase")), ("hang", "hang",
                                                                           res.get("dumps_after_report"))):
        case = f"{label}: {'mid-run, every op complete' if key == 'mid' else 'in the hang'}"
        if key == "hang" and skipped:
            case += f" (rank {skipped['rank']} skipped {skipped['group']} #{skipped['op']})"
        row = {"case": case, "expected": expected, "got": "", "rank": "", "secs": "", "after_kill": "", "fr": "",
               "ras": "", "pass": False, "why": []}
        if not isinstance(dumps, dict) or not dumps.get("files"):
            row["got"] = "no dumps" + (" (the ranks never all reached the mid-run step?)" if key == "mid" else
                                       " (no report while the job ran?)")
            row["why"].append(row["got"])
        else:
            t_use = dumps.get("truth_after") or dumps.get("truth_before") or {}
            problems, checked = check_moment(dumps["files"], t_use, order, moment,
                                             skipped if key == "hang" else None)
            changed = truth_changed(dumps) if key == "hang" else []
            row["got"] = (f"{checked} (rank, communicator) pairs: " +
                          ("all exact and equal to the truth" if not problems else fmt_problems(problems)))
            if changed:
                row["got"] += f"; the truth of rank(s) {','.join(changed)} changed during the dumps"
            row["pass"] = not problems and checked == n * len(order)
            row["why"] = [fmt_problems([p], 1) for p in problems[:20]]
            if checked != n * len(order):
                row["why"].append(f"{checked} pairs checked, want {n * len(order)}")
        if key == "hang":
            diag = [e for e in res.get("events") or [] if is_diagnosis(e)]
            if diag:
                v = (diag[0].get("verdicts") or [{}])[0]
                row["after_kill"] = f"first report: {v.get('kind')} r{','.join(map(str, v.get('culprits') or []))}"
        rows[key] = row
    # The log: no lower bound, no op without its profiler events.
    try:
        with open(os.path.join(work, "job.log"), errors="replace") as f:
            lines = f.read().splitlines()
        hits = {w: [ln for ln in lines if w in ln] for w in BAD_WORDS}
        got = ", ".join(f"{len(h)} '{w}'" for w, h in hits.items())
        first = next((h[0] for h in hits.values() if h), "")
        rows["log"] = {"case": f"{label}: the ranks' stderr", "expected": "no 'lower bounds', no 'got none within "
                       "its call'", "got": got + (f": {first.strip()[:200]}" if first else ""), "rank": "",
                       "secs": "", "after_kill": "", "fr": "", "ras": "", "pass": not first,
                       "why": [first.strip()[:300]] if first else []}
    except OSError as e:
        rows["log"] = {"case": f"{label}: the ranks' stderr", "expected": "", "got": f"no job.log ({e})",
                       "pass": False, "why": [str(e)]}
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("work", help="run_scenario.py's --work of the positions run")
    p.add_argument("--rows-dir", default="")
    a = p.parse_args()
    rows = judge(a.work)
    for k, r in rows.items():
        print(f"{r['case']}: {'PASS' if r['pass'] else 'FAIL'}: {r['got']}")
        for w in r.get("why") or []:
            print(f"    why: {w}")
        if a.rows_dir:
            os.makedirs(a.rows_dir, exist_ok=True)
            with open(os.path.join(a.rows_dir, f"71-positions-{k}.json"), "w") as f:
                json.dump(r, f, indent=1)
    return 0 if all(r["pass"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
