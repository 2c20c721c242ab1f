#!/usr/bin/env python3
"""Judges the two-GPU scenarios from what test/gpu/run_scenario.py kept, one table row per scenario.

    scenario_table.py ROOT [--nproc 2] [--rows-dir DIR] [--one-gpu]

ROOT/<scenario>/shim/result.json and ROOT/<scenario>/fr/result.json (either may be missing). For each scenario:
  got        the first diagnosis the shim reported while the job ran (the earliest stall, mismatch or init_hang event
             of any rank's .report.json), its kind and named (comm) ranks;
  secs       from the stall's start to that report: the start is when the reporting rank began to wait in its op
             (its issue time, or its GPU's completion of the op before, whichever came later: a stall), the issue time of the mismatched op on the last rank to issue it (mismatch), or the start
             of communicator init (init_hang), all read from the rank files; the report time is the event's time;
  after kill `ncclwatch-collector analyze` over the folder once every process is gone;
  FR said    PyTorch's Flight Recorder run: its watchdog's words, torchfrtrace's verdict and the ranks it names;
  RAS said   the NCCL RAS status queried during the hang.
Writes one JSON row per scenario to --rows-dir (for test/gpu/print_table.py) and prints the rows.
Issue 42: a run FAILS, whatever its verdicts, where the shims' stderr (job.log), their report files
(ncw/<job>/*.report.json), the live reports (ncw/<job>/live-report.*) or the analysis (analyze*.json) say "lower
bounds" (any case): a count that is only a lower bound proves no position (lower_bounds_said, one line for each where
it was said; result.json's copies of them where the files are gone).
--one-gpu: the ranks shared one GPU (examples/one_gpu.py); the rows are labelled so, and two answers are stated as
they should be (EXPECT_ONE_GPU): a dying rank is DEAD, named live (the final verdict when the launcher tears the job
down) and after the end, and the lead verdict after the end names the culprit, never a survivor.
"""
import argparse
import datetime
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_readers import is_diagnosis, live_verdict_events, story_names  # noqa: E402 (an early suspicion is not the diagnosis)
from job_readers import all_verdicts, before_hang, comm_rank_map, culprits_global, is_suspicion  # noqa: E402

LAST = "last"  # the last rank (nproc - 1)
BEFORE_LAST = "before_last"  # nproc - 2 (the pipeline's stalling stage)
# kinds: what the shim must report while the job runs; rank: the rank it must name; offline: what analyze must still
# say after the kill (None: no requirement); exit0: the job must end normally; recovered: a "recovered" event; story:
# what analyze must tell after the end, once it is over (its story's kinds, naming the rank).
EXPECT = {
    "skip": dict(kinds={"NOT_JOINED"}, rank=LAST, offline={"NOT_JOINED", "DEAD"}),
    "uneven": dict(kinds={"DEAD", "NOT_JOINED"}, rank=LAST, offline={"DEAD", "NOT_JOINED"}),
    "type_mismatch": dict(kinds={"MISMATCH"}, rank=LAST, offline={"MISMATCH"}),
    "size_mismatch": dict(kinds={"MISMATCH"}, rank=LAST, offline={"MISMATCH"}),
    # torchrun ends the job within a second of the death, before any timeout: only the files can tell.
    "rank_dies": dict(kinds=None, rank=LAST, offline={"DEAD", "NOT_JOINED"}),
    "init_hang": dict(kinds={"INIT_HANG"}, rank=LAST, exit0=True, story={"init_waited"}),
    "validation": dict(kinds={"NOT_JOINED", "GPU_NOT_REACHED"}, rank=0, exit0=True, recovered=True,
                       story={"recovered", "suspicion_cleared"}),
    "grad_accum": dict(kinds={"EXTRA_OP"}, rank=0, offline={"EXTRA_OP"}),
    "clean": dict(kinds=set(), rank=None, exit0=True, offline=set()),
    # How the culprit ended, in the verdict's words (lib/engine/causal.cpp end_words), live at the launcher's SIGTERM
    # and after the end.
    "rank_exit0": dict(kinds={"DEAD"}, rank=LAST, offline={"DEAD"}, exit_text="exited (exit code 0)"),
    "rank_segv": dict(kinds={"DEAD"}, rank=LAST, offline={"DEAD"}, exit_text="crashed with SIGSEGV"),
    "rank_killed": dict(kinds={"DEAD"}, rank=LAST, offline={"DEAD"}, exit_text="is gone"),
    # The drift named where it began (lib/engine/verdict_drift.cpp's words), live and after the end.
    "drift_skip": dict(kinds={"NOT_JOINED"}, rank=LAST, offline={"NOT_JOINED"}, exit_text="paired silently"),
    "drift_extra": dict(kinds={"EXTRA_OP"}, rank=LAST, offline={"EXTRA_OP"}, exit_text="paired silently"),
    # Issue 25: the hangs real jobs have, each as what it is.
    "order_deadlock": dict(kinds={"DEADLOCK"}, rank=LAST, offline={"DEADLOCK"}),
    "graph_skip": dict(kinds={"NOT_JOINED"}, rank=LAST, offline={"NOT_JOINED"}),
    "algo_differs": dict(kinds={"SETTING_DIFFERS"}, rank=LAST, offline={"SETTING_DIFFERS"}),
    "leave_early": dict(kinds={"DEAD"}, rank=LAST, offline={"DEAD"}, exit_text="exited (exit code 0)"),
    # Every rank's destroy waits for its GPU, busy with a long kernel before the last all_reduce: where (the teardown)
    # and why (the GPU) are both the right answer.
    "teardown_hang": dict(kinds={"TEARDOWN_HANG", "GPU_NOT_REACHED"}, rank=0),
    "oom": dict(kinds={"DEAD"}, rank=LAST, offline={"DEAD"}, exit_text="OutOfMemoryError"),
    # A send to a peer that never posts its receive: the pair differs (MISMATCH), named with its peer.
    "pipeline_wrong_peer": dict(kinds={"MISMATCH"}, rank=BEFORE_LAST, offline={"MISMATCH"}, exit_text="to rank 0"),
    # Issue 41: point-to-point traffic as pipelines and mixture-of-experts layers make it. An MoE layer's stale split
    # table: the last rank sends rank 0 twice the rows rank 0 receives from it (all_to_all_single: a group of sends
    # and receives).
    "moe_stale_split": dict(kinds={"MISMATCH"}, rank=LAST, offline={"MISMATCH"}, exit_text="to rank 0"),
    "moe_clean": dict(kinds=set(), rank=None, exit0=True, offline=set()),
    # Ranks 0 and 1 both send first (dist.send / dist.recv): each waits for the other's receive. Both are named.
    "send_cycle": dict(kinds={"DEADLOCK"}, rank=[0, 1], offline={"DEADLOCK"}),
    # The last rank leaves its irecv out of a batch_isend_irecv: its missing Recv, said as either kind.
    "batch_ring_missing": dict(kinds={"NOT_JOINED", "MISMATCH"}, rank=LAST, offline={"NOT_JOINED", "MISMATCH"}),
    # Issue 41's pipelines (one stage per rank; stage nproc - 2 departs). A stage away in Python before its send: the
    # stages after it wait in their receives from it, those before it in the receive of its gradient.
    "pipeline": dict(kinds={"NOT_JOINED"}, rank=BEFORE_LAST, offline={"NOT_JOINED"}),
    # Its send to (then its receive from) a rank it never exchanged with: a send no receive matches, or NOT_JOINED
    # where what waits is the new pair's connection (with torch's lazy init, a 2-rank communicator of its own).
    "pipeline_fresh_peer": dict(kinds={"MISMATCH", "NOT_JOINED"}, rank=BEFORE_LAST,
                                offline={"MISMATCH", "NOT_JOINED"}),
    # 20 ms more GPU work before each forward send: a STRAGGLER ("the slowest stage"), not a hang. Judged on the
    # shims' straggler events (no stall or mismatch may come), no STRAGGLER naming another rank anywhere (events, the
    # embedded live collector), analyze after the end, and a normal end.
    "pipeline_slow": dict(kinds={"STRAGGLER"}, rank=BEFORE_LAST, exit0=True, offline={"STRAGGLER"}, straggler=True),
    # Every stage in step: nothing at all, not even a straggler or a suspicion (quiet).
    "pipeline_clean": dict(kinds=set(), rank=None, exit0=True, offline=set(), quiet=True),
    # Issue 42 (test/gpu/run_issue41.sh's list issue42, with order_deadlock above): the last rank's GPU in one long
    # kernel before its step's all_reduce, its CPU past it (as two_nodes_table.py); an MoE layer's last rank in
    # load_next_batch(), Python, before its dispatch all_to_all_single, while the others wait inside theirs.
    "gpu_busy": dict(kinds={"GPU_NOT_REACHED"}, rank=LAST, offline={"GPU_NOT_REACHED"}),
    "moe_busy": dict(kinds={"NOT_JOINED"}, rank=LAST, offline={"NOT_JOINED"}),
}
# The right answers where the two-GPU rows were written before they could be had (kept there, so that the recorded
# two-GPU runs stay comparable): the harness's 4-rank run states them.
EXPECT_ONE_GPU = {
    "rank_dies": dict(kinds={"DEAD"}, rank=LAST, offline={"DEAD"}, exit_text="exit code 3"),
}
ORDER = ["skip", "uneven", "type_mismatch", "size_mismatch", "rank_dies", "init_hang", "validation", "grad_accum",
         "clean", "rank_exit0", "rank_segv", "rank_killed", "drift_skip", "drift_extra", "order_deadlock", "graph_skip",
         "algo_differs", "leave_early", "teardown_hang", "oom", "pipeline_wrong_peer", "moe_stale_split", "moe_clean",
         "send_cycle", "batch_ring_missing", "pipeline", "pipeline_fresh_peer", "pipeline_slow", "pipeline_clean",
         "gpu_busy", "moe_busy"]
DIAGNOSES = ("stall", "mismatch", "drift", "init_hang")
LOWER_BOUNDS = re.compile(r"lower bounds", re.I)
# Where a run's evidence says something (lower_bounds_said): (what, the run folder's files (globs, ** any depth),
# result.json's keys that copy them). One node: test/gpu/run_scenario.py's DIR (ROOT/<scenario>/shim).
ONE_NODE_SAYERS = (
    ("the shims' stderr", ("job.log",), ("job_log_tail", "job_log_key_lines", "log_suspicions", "log_stragglers")),
    ("a report file", ("ncw/**/*.report.json",), ("events",)),
    ("a live report", ("ncw/**/live-report.json", "ncw/**/live-report.txt"), ("live_reports",)),
    ("analyze", ("analyze.json", "analyze-at-step*.json"), ("analyze", "analyze_at_step")),
)


def parse_time(s):
    """The report's wall time, RFC 3339 ('2026-11-30T05:51:02.123+00:00'; before: '2026-11-30 05:51:02.123 +0000'), as seconds since the epoch."""
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f%z" if "T" in s else "%Y-%m-%d %H:%M:%S.%f %z").timestamp()
    except (TypeError, ValueError):
        return None


def event_verdicts(e):
    """(kind, culprits) pairs of one report event."""
    if e.get("type") == "init_hang":
        return [("INIT_HANG", sorted(e.get("not_seen") or []))]
    return [(v.get("kind"), sorted(v.get("culprits") or [])) for v in e.get("verdicts") or []]


def rank_file_of(report_path, rank_files):
    base = report_path[: -len(".report.json")] if report_path.endswith(".report.json") else report_path
    return rank_files.get(base + ".ncw")


def real_time(dump, ms):
    h = (dump or {}).get("header") or {}
    if ms is None or not h.get("start_real_ns"):
        return None
    return h["start_real_ns"] / 1e9 + ms / 1e3


def issue_time(dump, comm_id, seq, field="issue_ms"):
    for r in (dump or {}).get("records") or []:
        if r.get("comm_id") == comm_id and r.get("seq") == seq and r.get("op") not in (None, "Send", "Recv"):
            return real_time(dump, r.get(field))
    return None


def wait_start(dump, comm_id, seq):
    """When a rank began to wait in collective `seq`: once it had issued it and its GPU had finished `seq` - 1 (the
    op before it on the communicator). A host that runs ahead issues `seq` long before its GPU gets there: on one GPU
    shared by four ranks and a validation, seven seconds before."""
    t = issue_time(dump, comm_id, seq)
    prev_done = issue_time(dump, comm_id, seq - 1, "done_ms") if seq and seq > 1 else None
    return max(x for x in (t, prev_done) if x is not None) if t is not None or prev_done is not None else None


def stall_start(e, res):
    """Wall time the diagnosed problem began, from the rank files; None if they do not say."""
    files = res.get("rank_files") or {}
    comm = e.get("comm_id")
    if e.get("type") == "stall":
        t = wait_start(rank_file_of(e.get("file", ""), files), comm, e.get("waiting_in_seq"))
        if t is None and parse_time(e.get("time")) is not None and e.get("stalled_for_s") is not None:
            t = parse_time(e["time"]) - e["stalled_for_s"]  # the shim's own count, when the record was overwritten
        return t
    if e.get("type") == "mismatch":
        seqs = [v.get("seq") for v in e.get("verdicts") or []]
        times = [issue_time(d, comm, s) for d in files.values() for s in seqs]
        times = [t for t in times if t is not None]
        return max(times) if times else None  # visible once the last rank issued it
    if e.get("type") == "init_hang":
        dump = rank_file_of(e.get("file", ""), files)
        for c in (dump or {}).get("comms") or []:
            if c.get("comm_id") == comm:
                return real_time(dump, c.get("init_start_ms"))
        if parse_time(e.get("time")) is not None and e.get("waited_s") is not None:
            return parse_time(e["time"]) - e["waited_s"]
    return None


def said_at(text, m, width=160):
    """The words around match m of text, on one line."""
    a = max(text.rfind("\n", 0, m.start()) + 1, m.start() - width)
    b = text.find("\n", m.end())
    b = min(b if b >= 0 else len(text), m.end() + width)
    return ("..." if a > 0 and text[a - 1] != "\n" else "") + " ".join(text[a:b].split())


def lower_bounds_said(folder, res, sayers, pattern=LOWER_BOUNDS):
    """Issue 42: where a run says "lower bounds" (pattern, any case): one line for each of sayers ((what, globs under
    folder, result.json keys)) that says it, with the first place (file:line, the words) and how many files say it.
    The files first; result.json's copies only where no file of that kind is left. [] when nothing says it."""
    out = []
    for what, globs, keys in sayers:
        paths = sorted({p for g in globs for p in glob.glob(os.path.join(folder, g), recursive=True)
                        if os.path.isfile(p)})
        hits = []
        for path in paths:
            try:
                with open(path, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            m = pattern.search(text)
            if m:
                hits.append(f"{os.path.relpath(path, folder)}:{text.count(chr(10), 0, m.start()) + 1}: "
                            f"{said_at(text, m)}")
        if not paths:
            for k in keys:
                v = (res or {}).get(k) if isinstance(res, dict) else None
                text = v if isinstance(v, str) else json.dumps(v) if v is not None else ""
                m = pattern.search(text)
                if m:
                    hits.append(f"result.json's {k}: {said_at(text, m)}")
        if hits:
            where = "files" if paths else "of result.json's copies"
            more = f" ({len(hits)} {where}; the first)" if len(hits) > 1 else ""
            out.append(f"'{pattern.pattern}' said by {what}{more}: {hits[0]}")
    return out


def names(ranks, want):
    """Whether `ranks` (a verdict's culprits) name `want`: one rank, or every rank of a list (a deadlock's two)."""
    return set(want) <= set(ranks) if isinstance(want, list) else want in ranks


def rank_words(want):
    return ",".join(map(str, want)) if isinstance(want, list) else str(want)


def fmt_verdicts(vs):
    return "; ".join(f"{k} r{','.join(map(str, c))}" if c else str(k) for k, c in vs) or "none"


def is_straggler(v):
    return isinstance(v, dict) and str(v.get("kind", "")).upper() == "STRAGGLER"


def is_straggler_event(e):
    """A shim's straggler note ("not a hang"): its type, or a STRAGGLER verdict in an event that is no diagnosis."""
    return isinstance(e, dict) and not is_diagnosis(e) and (
        e.get("type") == "straggler" or any(is_straggler(v) for v in e.get("verdicts") or []))


def global_verdicts(e, cmap):
    """(kind, global ranks) pairs of one report event: its comm ranks mapped through the rank files' comm tables
    (the comm ranks themselves where a culprit cannot be placed)."""
    out = []
    for v in e.get("verdicts") or []:
        if not isinstance(v, dict):
            continue
        g, unk = culprits_global(v, cmap, e.get("comm_id"))
        out.append((v.get("kind"), g if not unk else sorted(c for c in v.get("culprits") or [] if isinstance(c, int))))
    return out


def stragglers_said(res, cmap):
    """[(where, global ranks)] of every STRAGGLER verdict a job said while it ran: the shims' events and the
    embedded live collector's reports."""
    out = []
    for src, _, v, e in all_verdicts(res):
        if src in ("event", "live") and is_straggler(v):
            g, unk = culprits_global(v, cmap, (e or {}).get("comm_id"))
            out.append((src, g + [f"?{u}" for u in unk]))
    return out


def judge_straggler(res, exp, want_rank, events, out):
    """pipeline_slow: the shims' first straggler event names the slow stage, no STRAGGLER names another rank, and
    no stall or mismatch was reported (a straggler is not a hang). Returns ok; fills out's got, rank, secs, why."""
    ok = True
    cmap = comm_rank_map(res)
    strag = [e for e in events if is_straggler_event(e)]
    if strag:
        first = strag[0]
        vs = global_verdicts(first, cmap)
        out["got"] = fmt_verdicts(vs) + f" (rank {first.get('global_rank')}'s {first.get('type')})"
        named = sorted({r for _, c in vs for r in c})
        out["rank"] = ",".join(map(str, named)) if named else "-"
        # From the slow stage's first slow step (its truth's t_depart), else the loop's start.
        truth = res.get("truth") if isinstance(res.get("truth"), dict) else {}
        starts = [t.get("t_depart") for t in truth.values() if isinstance(t, dict) and
                  isinstance(t.get("t_depart"), (int, float))] or \
            [t.get("t_loop_start") for t in truth.values() if isinstance(t, dict) and
             isinstance(t.get("t_loop_start"), (int, float))]
        t1 = parse_time(first.get("time"))
        if starts and t1 is not None:
            out["secs"] = f"{t1 - min(starts):.1f}"
            out["secs_value"] = t1 - min(starts)
        if not any(k in exp["kinds"] and names(c, want_rank) for k, c in vs):
            ok = False
            out["why"].append(f"first straggler report {fmt_verdicts(vs)}, want STRAGGLER naming rank "
                              f"{rank_words(want_rank)}")
    else:
        out["got"] = "no straggler report"
        out["rank"] = "-"
        ok = False
        out["why"].append(f"no STRAGGLER while the job ran, want one naming rank {rank_words(want_rank)}")
    wrong = [(src, g) for src, g in stragglers_said(res, cmap) if g != [want_rank]]
    if wrong:
        ok = False
        out["why"].append("STRAGGLER naming others than the slow stage: " +
                          "; ".join(f"{src}: r{','.join(map(str, g)) or '?'}" for src, g in wrong[:4]))
    diag = [e for e in events if is_diagnosis(e)]
    if diag:
        ok = False
        out["why"].append(f"{len(diag)} stall/mismatch report(s) in a job that does not hang: "
                          f"{fmt_verdicts(global_verdicts(diag[0], cmap))} (rank {diag[0].get('global_rank')}'s "
                          f"{diag[0].get('type')})")
    later = [e for e in events if not strag or e is not strag[0]]
    if later:
        out["got"] += "; then " + ", ".join(sorted({str(e.get("type")) for e in later}))
    return ok


def judge_shim(scn, res, exp, want_rank):
    out = {"got": "did not run", "rank": "", "secs": "", "after_kill": "", "ok": False, "why": []}
    if not res:
        out["why"].append("no shim result")
        return out
    events = sorted(res.get("events") or [], key=lambda e: parse_time(e.get("time")) or 0)
    diag = live_verdict_events(events)
    early = []
    if scn == "pipeline":
        # A stall at the pipeline's start on a shared GPU, before its stage departed, is not the hang under test
        # (job_readers.before_hang, as the two-node judge): noted, and not taken for the first report.
        early = [e for e in diag if is_diagnosis(e) and before_hang(scn, e.get("verdicts"), res.get("truth"))]
        diag = live_verdict_events([e for e in events if e not in early])
    ok = True
    if exp.get("straggler"):
        ok = judge_straggler(res, exp, want_rank, events, out)
        diag = []
    elif diag:
        first = diag[0]
        vs = event_verdicts(first)
        out["got"] = fmt_verdicts(vs) + f" (rank {first.get('global_rank')}'s {first.get('type')})"
        named = sorted({r for _, c in vs for r in c})
        out["rank"] = ",".join(map(str, named)) if named else "-"
        t0, t1 = stall_start(first, res), parse_time(first.get("time"))
        if t0 is not None and t1 is not None:
            out["secs"] = f"{t1 - t0:.1f}"
            out["secs_value"] = t1 - t0
        if exp["kinds"] is not None:
            if not any(k in exp["kinds"] and names(c, want_rank) for k, c in vs):
                ok = False
                out["why"].append(f"first report {fmt_verdicts(vs)}, want {'/'.join(sorted(exp['kinds']))} "
                                  f"naming rank {rank_words(want_rank)}")
            limit = res.get("timeout_s", 10) + 5 if first.get("type") != "mismatch" else 5
            if out.get("secs_value") is not None and out["secs_value"] > limit:
                ok = False
                out["why"].append(f"report {out['secs']} s after the start, more than {limit:.0f} s")
    else:
        out["got"] = "no report"
        out["rank"] = "-"
        if exp["kinds"]:
            ok = False
            out["why"].append("no report while the job ran")
        if exp["kinds"] is None:
            out["got"] = "no report (job ended before the timeout)"
    later = [e for e in events if e not in diag and e not in early]
    if later and not exp.get("straggler"):
        out["got"] += "; then " + ", ".join(sorted({str(e.get("type")) for e in later}))
    if early:
        out["got"] += f"; {len(early)} earlier report(s) of the pipeline's start, before the stage departed: not taken"
    if exp.get("quiet"):
        # Nothing at all while the job ran: no straggler note, no suspicion, no STRAGGLER in the live reports.
        noisy = [e for e in events if is_straggler_event(e) or is_suspicion(e)]
        said = stragglers_said(res, comm_rank_map(res))
        if noisy or said:
            ok = False
            bits = [f"STRAGGLER r{','.join(map(str, g)) or '?'} ({src})" for src, g in said[:3]]
            if noisy:
                bits.insert(0, f"{len(noisy)} straggler/suspicion event(s): "
                               f"{', '.join(sorted({str(e.get('type')) for e in noisy}))}")
            out["why"].append("a job with nothing wrong reported " + "; ".join(bits))
    if exp.get("recovered") and not any(e.get("type") == "recovered" for e in events):
        ok = False
        out["why"].append("no 'recovered' event")
    if exp.get("exit0") and res.get("exit_code") != 0:
        ok = False
        out["why"].append(f"job exit code {res.get('exit_code')}, want 0 (the job must go on)")

    an = res.get("analyze") or {}
    # analysis/2 names culprits as objects (comm and global rank, host, GPU, pid); analysis/1 as comm ranks.
    def rank_of(c):
        return c.get("global_rank", c.get("comm_rank")) if isinstance(c, dict) else c
    off = [(v.get("kind"), sorted(rank_of(c) for c in v.get("culprits") or [])) for v in an.get("verdicts") or []]
    reports = len({e.get("file") for e in events})
    out["after_kill"] = f"{fmt_verdicts(off)}; {reports} report file(s)"
    if exp.get("lead") and exp.get("offline") and off and not names(off[0][1], want_rank):
        ok = False
        out["why"].append(f"after the end analyze leads with {fmt_verdicts(off[:1])}, which does not name the "
                          f"culprit, rank {rank_words(want_rank)}")
    if exp.get("exit_text"):
        said = json.dumps([v for v in an.get("verdicts") or [] if v.get("kind") in (exp.get("offline") or ())])
        said_live = json.dumps([v for e in events for v in e.get("verdicts") or []])
        if exp["exit_text"] not in said:
            ok = False
            out["why"].append(f"after the end the verdict does not say '{exp['exit_text']}'")
        if exp["kinds"] and diag and exp["exit_text"] not in said_live:
            ok = False
            out["why"].append(f"the live verdict does not say '{exp['exit_text']}'")
    if exp.get("offline") is not None:
        if exp["offline"]:
            if not any(k in exp["offline"] and names(c, want_rank) for k, c in off):
                ok = False
                out["why"].append(f"after the kill analyze says {fmt_verdicts(off)}, want "
                                  f"{'/'.join(sorted(exp['offline']))} naming rank {rank_words(want_rank)}")
        elif off:
            ok = False
            out["why"].append(f"after the end analyze says {fmt_verdicts(off)}, want nothing")
    if exp.get("story") and res.get("exit_code") == 0:
        told, words = story_names(an, exp["story"], want_rank)
        out["after_kill"] += f"; story: {words}"
        if not told:
            ok = False
            out["why"].append(f"after the end analyze's story says {words}, want {'/'.join(sorted(exp['story']))} "
                              f"naming rank {want_rank}, its first line the headline")
    if res.get("analyze") is None:
        out["after_kill"] = "analyze failed: " + str(res.get("analyze_error", ""))[:120]
    out["ok"] = ok
    out["exit_code"] = res.get("exit_code")
    out["ended_by"] = res.get("ended_by")
    return out


def short_ras(res):
    ras = (res or {}).get("ras")
    if not ras:
        return "not queried"
    text = ras.get("output") or ""
    if ras.get("rc") not in (0, None) and "Errors" not in text and "Warnings" not in text:
        return f"no answer (rc {ras.get('rc')}): " + " ".join(text.split())[-120:]
    lines = text.splitlines()
    keep = []
    section = None
    for ln in lines:
        s = ln.strip()
        if s in ("Errors", "Warnings"):
            section = s
            continue
        if section and s and not set(s) <= {"=", "-"}:
            keep.append(s)
    said = " | ".join(keep) if keep else "no errors or warnings"
    return f"{said[:300]} ({ras.get('seconds', 0):.1f} s)"


def ras_named(res):
    text = ((res or {}).get("ras") or {}).get("output") or ""
    return sorted({int(m) for m in re.findall(r"Rank (\d+) (?:has|--|reported)", text)})


def judge_fr(res):
    if not res:
        return "did not run", None
    bits = []
    key = res.get("job_log_key_lines") or []
    wd = [ln for ln in key if "Watchdog caught" in ln or "timed out" in ln]
    if wd:
        m = re.search(r"SeqNum=(\d+), OpType=(\w+)", wd[0])
        bits.append("watchdog timeout" + (f" in {m.group(2)} #{m.group(1)}" if m else ""))
    # TORCH_NCCL_DESYNC_DEBUG: "[1] finished collective #N, but didn't join collective #N+1", "ranks [1] are the
    # lagging ranks", "[0] joined but didn't finish collective #N".
    desync = [" ".join(ln.split()) for ln in key if re.search(r"didn't join|lagging ranks|joined but didn't", ln)]
    desync_named = sorted({int(x) for ln in desync
                           for m in re.finditer(r"\[([0-9, ]+)\] (?:finished collective #\d+, but didn't join|"
                                                r"are the lagging)", ln)
                           for x in m.group(1).replace(" ", "").split(",") if x})
    if desync:
        bits.append("desync report: " + "; ".join(d[-110:] for d in dict.fromkeys(desync))[:260])
    files = res.get("fr_files") or []
    ranks = sorted({int(m.group(1)) for f in files for m in [re.search(r"(\d+)$", f["path"])] if m})
    bits.append(f"dumps from rank(s) {','.join(map(str, ranks))}" if files else "no dump")
    named = None
    for o in res.get("frtrace") or []:
        txt = o.get("output") or ""
        m = re.search(r"[Mm]issing ranks(?: are|:)\s*\{([0-9, ]+)\}", txt)
        c = re.findall(r"[Cc]ulprit rank[s]?\W+(\d+)", txt)
        if m:
            named = sorted(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
        elif c:
            named = sorted({int(x) for x in c})
        lines = [" ".join(ln.split()) for ln in txt.splitlines()
                 if re.search(r"mismatch|Not all ranks|missing ranks|[Cc]ulprit|[Ee]rror|No .*found", ln)]
        if o.get("rc") == 0 or lines:
            bits.append("torchfrtrace: " + ("; ".join(lines[:3])[:240] if lines else "no problem found"))
            break
    else:
        if files:
            bits.append("torchfrtrace failed")
    bits.append(f"job exit {res.get('exit_code')} ({res.get('ended_by')})")
    if named is None and desync_named:
        named = desync_named
    return "; ".join(bits), named


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rows-dir", default="")
    p.add_argument("--one-gpu", action="store_true", help="the ranks shared one GPU: its labels and EXPECT_ONE_GPU")
    a = p.parse_args()
    label = f"1 GPU, {a.nproc} ranks" if a.one_gpu else f"{a.nproc} GPUs"
    row_prefix = "21" if a.one_gpu else "20"
    rows = []
    for scn in ORDER:
        d = os.path.join(a.root, scn)
        if not os.path.isdir(d):
            continue
        res = {}
        for v in ("shim", "fr"):
            try:
                with open(os.path.join(d, v, "result.json")) as f:
                    res[v] = json.load(f)
            except (OSError, ValueError):
                res[v] = None
        exp = dict(EXPECT[scn])
        if a.one_gpu:
            exp.update(EXPECT_ONE_GPU.get(scn, {}))
            exp["lead"] = True
        want = exp["rank"] if isinstance(exp["rank"], list) else \
            {LAST: a.nproc - 1, BEFORE_LAST: a.nproc - 2}.get(exp["rank"], exp["rank"])
        js = judge_shim(scn, res["shim"], exp, want)
        # Issue 42: a run that says "lower bounds" anywhere fails (the folder's files; result.json's copies).
        lower = lower_bounds_said(os.path.join(d, "shim"), res["shim"], ONE_NODE_SAYERS) \
            if res["shim"] is not None or os.path.isdir(os.path.join(d, "shim")) else []
        if lower:
            js["ok"] = False
            js["why"].extend(lower)
        fr_said, fr_named = judge_fr(res["fr"])
        if fr_named is not None:
            fr_said += f" [names rank(s) {','.join(map(str, fr_named))}: " \
                       f"{'right' if names(fr_named, want) else 'not the culprit'}]"
        ras = short_ras(res["shim"])
        rn = ras_named(res["shim"])
        if rn:
            ras += f" [names rank(s) {','.join(map(str, rn))}]"
        if exp["kinds"]:
            expected = f"{'/'.join(sorted(exp['kinds']))} r{rank_words(want)}"
        elif exp["kinds"] is None:
            expected = f"(killed at once) files: {'/'.join(sorted(exp['offline']))} r{rank_words(want)}"
        else:
            expected = "no report"
        if exp.get("straggler"):
            expected += " (not a hang)"
        elif exp.get("quiet"):
            expected = "nothing at all (no straggler, no suspicion)"
        if exp.get("recovered"):
            expected += ", recovered, job goes on"
        elif exp.get("exit0"):
            expected += ", job goes on"
        row = {"case": f"{label}: {scn}", "expected": expected, "got": js["got"], "rank": js["rank"],
               "secs": js["secs"], "after_kill": js["after_kill"], "fr": fr_said, "ras": ras,
               "pass": js["ok"], "why": js["why"], "exit_code": js.get("exit_code"), "ended_by": js.get("ended_by"),
               "lower_bounds": lower}
        rows.append(row)
        if a.rows_dir:
            os.makedirs(a.rows_dir, exist_ok=True)
            with open(os.path.join(a.rows_dir, f"{row_prefix}-{ORDER.index(scn):02d}-{scn}.json"), "w") as f:
                json.dump(row, f, indent=1)
    for r in rows:
        print(f"{r['case']}: {'PASS' if r['pass'] else 'FAIL'}: got {r['got']} (rank {r['rank']}, {r['secs']} s); "
              f"after kill {r['after_kill']}; exit {r['exit_code']} ({r['ended_by']})")
        for w in r["why"]:
            print(f"    why: {w}")
        print(f"    FR:  {r['fr']}")
        print(f"    RAS: {r['ras']}")
    return 0 if rows and all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
