#!/usr/bin/env python3
"""A stand-in job for test/gpu/selftest.sh: writes what a shim and a scenario script would, on a schedule, so that
test/gpu/run_scenario.py's live logic (the first diagnosis, --end-after-suspect, --cap-after-hang, --analyze-at-step)
can be checked without a GPU.

    fake_report_job.py [--suspect-at S] [--stall-at S] [--hang-at S] [--steps N] [--nranks N] [--sleep S]
                       [--phase-at S --phase NAME]

--suspect-at / --stall-at: S s after the start, a "suspected" / "stall" event in $NCCLWATCH_DIR/job/rank0.report.json
(the shim's report file, ncclwatch.report/1); --hang-at: S s after the start, every rank's truth gets t_loop_end (and
never t_done: examples/hang_scenarios.py's shape of a hang); --steps: every rank's truth "step" counts up to N, one a
0.1 s; --phase-at: S s after the start, every rank's truth says "phase": NAME, and the job waits (10 s at most) for
$NCW_TRUTH_DIR/go-NAME (run_scenario.py --dump-at-phase), then writes "go_seen" and "phase": "after"; then it sleeps
until --sleep s have passed (the harness ends it first when it should).
"""
import argparse
import json
import os
import time


def stamp(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d} +0000"


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--suspect-at", type=float, default=-1)
    p.add_argument("--stall-at", type=float, default=-1)
    p.add_argument("--hang-at", type=float, default=-1)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--sleep", type=float, default=30)
    p.add_argument("--phase-at", type=float, default=-1)
    p.add_argument("--phase", default="mid")
    a = p.parse_args()
    t0 = time.time()
    job = os.path.join(os.environ["NCCLWATCH_DIR"], "job")
    os.makedirs(job, exist_ok=True)
    truth_dir = os.environ["NCW_TRUTH_DIR"]
    report = os.path.join(job, "rank0-fake.report.json")
    events, step, hung = [], 0, False
    todo = sorted((t, kind) for t, kind in ((a.suspect_at, "suspected"), (a.stall_at, "stall")) if t >= 0)
    while time.time() - t0 < a.sleep:
        now = time.time() - t0
        while todo and now >= todo[0][0]:
            kind = todo.pop(0)[1]
            events.append({"type": kind, "comm_id": "0xab", "time": stamp(time.time()),
                           "verdicts": [{"kind": "NOT_JOINED", "comm_id": "0xab", "culprits": [1]}]})
            write(report, {"schema": "ncclwatch.report/1", "process": {"global_rank": 0}, "events": events})
        if a.hang_at >= 0 and now >= a.hang_at and not hung:
            hung = True
            for r in range(a.nranks):
                write(os.path.join(truth_dir, f"truth-rank{r}.json"), {"rank": r, "t_loop_end": time.time()})
        if a.phase_at >= 0 and now >= a.phase_at:
            a.phase_at = -1
            for r in range(a.nranks):
                write(os.path.join(truth_dir, f"truth-rank{r}.json"), {"rank": r, "phase": a.phase})
            go, t_wait = os.path.join(truth_dir, f"go-{a.phase}"), time.time()
            while not os.path.exists(go) and time.time() - t_wait < 10:
                time.sleep(0.05)
            for r in range(a.nranks):
                write(os.path.join(truth_dir, f"truth-rank{r}.json"),
                      {"rank": r, "phase": "after", "go_seen": os.path.exists(go)})
        if step < a.steps:
            step += 1
            for r in range(a.nranks):
                write(os.path.join(truth_dir, f"truth-rank{r}.json"), {"rank": r, "step": step})
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
