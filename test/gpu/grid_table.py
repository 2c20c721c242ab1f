#!/usr/bin/env python3
"""Judges the 2 x 4 grid runs of examples/grid_2x4.py (8 ranks, kept by test/gpu/run_scenario.py), one row per check.

    grid_table.py ROOT [--rows-dir DIR]

Reads ROOT/grid_stall/shim/result.json, ROOT/grid_death/shim/result.json and ROOT/grid_clean/shim/result.json (a
missing one gets a failing row saying so). Communicators are named by the set of global ranks in them, read from
analyze's comms[] (comm_id -> ranks[].global_rank; the live report's own comms[] too): TP[0-3], TP[4-7], DP[0,4],
DP[1,5], DP[2,6], DP[3,7], the world (all eight). The shims' events and the live report name culprits by comm rank;
they are mapped to global ranks through that table. The rows state the right answer, whatever today's build says.
The grid's rule for a list of verdicts (grid_readers.grid_verdict_faults): no STUCK_IN_NCCL and no verdict that
blames the transport; on TP[4-7] NOT_JOINED naming exactly rank 5, marked initiating; on DP[0,4], DP[2,6],
DP[3,7] and TP[0-3] a cascade caused by TP[4-7]; on DP[1,5] NOT_JOINED r5 or a cascade of TP[4-7]; nothing on any
other communicator. A view of the whole job (the live report, analyze) also leads with TP[4-7]'s initiating
NOT_JOINED r5, has a cascade on each of DP[0,4], DP[2,6], DP[3,7], and a verdict on DP[1,5]. Roles are the
verdict's role field, or its headline's words.
  grid stall, live           every event of every rank obeys the rule (stall reports and early suspicions alike);
                             the first diagnosis event (stall, mismatch or init_hang, by time) leads with the
                             initiating NOT_JOINED r5 on TP[4-7];
  grid stall, live report    the embedded live collector's live-report.json obeys the rule, whole (no live report:
                             FAIL);
  grid stall, after the end  analyze's verdicts obey the rule, whole;
  grid stall, ground truth   per rank and group, the rank file's comm (dump --json: coll_issued, coll_reached,
                             coll_completed, gpu_source, progress_exact, coll_unreached, coll_uncompleted) against
                             the rank's own truth: issued = the ops it issued; completed = its all-completed prefix
                             (Work.is_completed()); reached = the first op of its stream order not completed, if
                             issued (grid_readers.stream_order_reached: TP #1, DP #1, TP #2, ... on each rank's
                             GPU). With progress_exact (the profiler's exact counts) reached must equal the truth;
                             otherwise it is a lower bound and must not pass it; completed equals the truth either
                             way (the stall is seconds old: a fallback must have caught up); a seq the file claims
                             proven not reached (not completed) must be past the truth; completed <= reached <=
                             issued; all 16 pairs; the truth is each rank's last snapshot before the job ended;
  grid stall, audit          the analysis' environment audit: no duplicate_gpu finding, exactly one nccl_hostid;
  grid death                 DEAD naming rank 5 and saying "exit code 3" leads live (the last diagnosis event of the
                             shims, or the live report) and after the end (analyze's verdicts[0]);
  grid clean                 exit code 0, no report event (no suspicion either), analyze without verdicts and with
                             exit code 0, no live report.
Each check is wrapped: a missing key or an unexpected shape makes a failing row with the reason, never a traceback.
Writes DIR/40-grid-*.json (rows for test/gpu/print_table.py) and prints the rows.
"""
import argparse
import json
import os
import re
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from grid_readers import (  # noqa: E402 (the readers, in a file of their own)
    CULPRIT, EXIT_TEXT, TP47, DP04, DP26, DP37, RUNS, JudgeError, need, norm_id, desc, named,
    is_lead_notjoined, text_of, comms_of, events_of, event_vs, offline_summary, parse_time, stall_start,
    is_diagnosis, role_of, caused_by, group_of, grid_verdict_faults, stream_order_reached, rank_file_comms)
from job_readers import all_verdicts, live_verdict_events  # noqa: E402

def check_stall_live(row, res):
    cm = comms_of(res)
    tp47 = cm.id_of(TP47)
    events = events_of(res)
    diag = [e for e in events if is_diagnosis(e)]
    row["after_kill"] = offline_summary(res, cm)
    if tp47 is None:
        row["why"].append("no communicator of ranks 4-7 in the comm table (analyze comms): TP[4-7] unknown")
    # Every event that carries verdicts (stall reports and early suspicions alike: one verdict engine) obeys the
    # grid's rule; STUCK_IN_NCCL anywhere is a fault of its own.
    faults = []
    for i, e in enumerate(events):
        for f in grid_verdict_faults(event_vs(e, i), cm, whole=False):
            faults.append(f"rank {e.get('global_rank')}'s {e.get('type')}: {f}")
    all_stuck = [f for f in faults if "STUCK_IN_NCCL" in f]
    if faults:
        row["why"].append(f"{len(faults)} fault(s) in the events: " + "; ".join(faults[:5]) +
                          (f"; +{len(faults) - 5} more" if len(faults) > 5 else ""))
    if not diag:
        row["got"] = f"no diagnosis event ({len(events)} event(s))"
        row["rank"] = "-"
        row["why"].append("no stall report while the job ran")
        return
    first = diag[0]
    vs = event_vs(first, events.index(first))
    initiating = [e for e in diag for v in event_vs(e, events.index(e))
                  if is_lead_notjoined(v, cm, tp47)[0] and role_of(v) == "initiating"]
    row["got"] = (f"rank {first.get('global_rank')}'s {first.get('type')} on {cm.name(first.get('comm_id'))}: " +
                  ("; ".join(desc(v, cm) for v in vs) or "no verdict") +
                  f"; {len(diag)} diagnosis event(s) from {len({e.get('file') for e in diag})} rank file(s), "
                  f"{len(initiating)} with the initiating NOT_JOINED r5 on TP[4-7]" +
                  (f"; {len(all_stuck)} STUCK_IN_NCCL" if all_stuck else "; no STUCK_IN_NCCL"))
    row["rank"] = ",".join(map(str, sorted({g for v in vs for g in named(v, cm)}))) or "-"
    try:
        t0 = stall_start(first, res) if stall_start else None
    except Exception:  # noqa: BLE001 -- the seconds are a measurement, not the verdict
        t0 = None
    t1 = parse_time(first.get("time"))
    if t0 is not None and t1 is not None:
        row["secs"] = f"{t1 - t0:.1f}"
    if not vs or not (is_lead_notjoined(vs[0], cm, tp47)[0] and role_of(vs[0]) == "initiating"):
        row["why"].append("the first diagnosis event does not lead with NOT_JOINED rank 5 on TP[4-7], initiating: " +
                          ("; ".join(desc(v, cm) for v in vs) or "it has no verdict"))
    if not initiating:
        row["why"].append("no event holds the initiating NOT_JOINED r5 on TP[4-7]")
    if not row["why"]:
        row["pass"] = True


def check_stall_live_report(row, res):
    lrs = res.get("live_reports")
    if lrs is None:
        raise JudgeError("result has no 'live_reports'")
    if not isinstance(lrs, list):
        raise JudgeError(f"live_reports is {type(lrs).__name__}, not a list")
    cm = comms_of(res)
    row["after_kill"] = offline_summary(res, cm)
    good = [lr for lr in lrs if isinstance(lr, dict) and isinstance(lr.get("report"), dict)]
    bad = [lr for lr in lrs if lr not in good]
    if bad:
        row["why"].append("unreadable live report(s): " +
                          "; ".join(f"{(lr or {}).get('file')}: {(lr or {}).get('error')}" for lr in bad
                                    if isinstance(lr, dict))[:200])
    if not good:
        row["got"] = "no live report"
        row["rank"] = "-"
        row["why"].append("the embedded live collector wrote no live-report.json")
        return
    rep = good[0]["report"]
    vs = need(rep, "verdicts", list, "live report")
    row["got"] = ("live report" + (f" (1 of {len(good)})" if len(good) > 1 else "") + f" of {rep.get('time')}: " +
                  ("; ".join(desc(v, cm) for v in vs[:4]) or "no verdict") +
                  (f"; +{len(vs) - 4} more" if len(vs) > 4 else ""))
    row["rank"] = (",".join(map(str, named(vs[0], cm))) or "-") if vs else "-"
    for f in grid_verdict_faults(vs, cm, whole=True):
        row["why"].append(f"live report: {f}")
    for lr in good[1:]:
        for f in grid_verdict_faults(need(lr["report"], "verdicts", list, "live report"), cm, whole=True):
            row["why"].append(f"{lr.get('file')}: {f}")
    if not row["why"]:
        row["pass"] = True


def check_stall_offline(row, res):
    an = res.get("analyze")
    if not isinstance(an, dict):
        raise JudgeError("analyze gave no JSON: " + str(res.get("analyze_error", ""))[:160])
    vs = need(an, "verdicts", list, "analyze")
    need(an, "comms", list, "analyze")
    cm = comms_of(res, with_live=False)
    row["after_kill"] = offline_summary(res, cm)
    if cm.id_of(TP47) is None:
        row["why"].append("analyze has no communicator of ranks 4-7 (TP[4-7])")
    row["got"] = "; ".join(desc(v, cm) for v in vs[:6]) or "no verdict"
    if len(vs) > 6:
        row["got"] += f"; +{len(vs) - 6} more"
    row["rank"] = (",".join(map(str, named(vs[0], cm))) or "-") if vs else "-"
    cascades = sum(1 for v in vs if isinstance(v, dict) and group_of(cm, v.get("comm_id")) in (DP04, DP26, DP37)
                   and role_of(v) == "cascade" and group_of(cm, caused_by(v)) == TP47)
    row["why"].extend(grid_verdict_faults(vs, cm, whole=True))
    row["got"] += f" ({cascades} DP cascade(s) caused by TP[4-7])"
    if cm.notes:
        row["got"] += "; " + "; ".join(cm.notes)
    if not row["why"]:
        row["pass"] = True


WHERE_RE = re.compile(r"slow_eval \(grid_2x4\.py:\d+\)")


def check_stall_where(row, res):
    """Where the culprit is (issue 14): the NOT_JOINED r5 on TP[4-7] names rank 5's innermost frame in the user's
    code, slow_eval with its file and line, in a shim's stall event and in analyze after the end."""
    cm = comms_of(res)
    tp47 = cm.id_of(TP47)
    if tp47 is None:
        raise JudgeError("no communicator of ranks 4-7 (TP[4-7]) in the result")
    found = {}
    for source, _, v, _ in all_verdicts(res):
        if source in ("event", "analyze") and is_lead_notjoined(v, cm, tp47)[0]:
            m = WHERE_RE.search(text_of(v))
            found.setdefault(source, m.group(0) if m else None)
            if m:
                found[source] = m.group(0)
    row["rank"] = str(CULPRIT)
    row["got"] = "; ".join(f"{k}: {found[k] or 'no frame named'}" for k in sorted(found)) or "no NOT_JOINED r5 on TP[4-7]"
    for source in ("event", "analyze"):
        if source not in found:
            row["why"].append(f"no NOT_JOINED r5 on TP[4-7] from {'a shim' if source == 'event' else 'analyze'}")
        elif not found[source]:
            row["why"].append(f"the {'shim' if source == 'event' else 'analyze'} verdict does not name slow_eval "
                              "(grid_2x4.py:LINE)")
    if not row["why"]:
        row["pass"] = True


def truth_pairs(res, cm):
    """[(rank, group name, truth {issued, reached, completed}, the rank file's comm JSON or None, why-not)]."""
    truth = need(res, "truth", dict, "result")
    files = rank_file_comms(res)
    out = []
    for r in range(8):
        t = truth.get(str(r))
        if not isinstance(t, dict) or not isinstance(t.get("groups"), dict):
            out.append((r, "-", None, None, "no truth" + (f" ({t.get('error')})" if isinstance(t, dict) and
                                                          t.get("error") else "")))
            continue
        gs = t["groups"]
        try:
            reached = stream_order_reached(gs)
        except (KeyError, TypeError, ValueError) as e:
            out.append((r, "-", None, None, f"unreadable truth ({e!r})"))
            continue
        for g in ("tp", "dp"):
            tg = gs.get(g)
            if not isinstance(tg, dict) or not isinstance(tg.get("ranks"), list):
                out.append((r, g, None, None, "not in its truth"))
                continue
            tv = {"issued": int(tg["issued"]), "reached": reached[g], "completed": int(tg["completed_prefix"])}
            rs = frozenset(tg["ranks"])
            mine = [c for c in files.get(r, []) if cm.ranks.get(norm_id(c.get("comm_id"))) == rs]
            if not mine:
                out.append((r, g, tv, None, f"no communicator of ranks {sorted(rs)} in rank {r}'s rank file"))
                continue
            c = max(mine, key=lambda c: c.get("coll_issued") if isinstance(c.get("coll_issued"), int) else -1)
            out.append((r, g, tv, c, ""))
    return out


def judge_pair(tv, c):
    """(kind of claim, [faults]) of one rank file's comm against the truth. An exact claim (progress_exact) must
    equal the truth; a lower bound must not pass it; a 'proven not reached/completed' seq must be past it. Completed
    must equal the truth whatever the source: the stall has been frozen for seconds when the files are read, every
    op of the prefix long done (this row asked that of the sampled events before, and they met it), so a lower bound
    short of it is a fallback that did not catch up."""
    keys = ("coll_issued", "coll_reached", "coll_completed")
    iss, rea, com = (c.get(k) for k in keys)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (iss, rea, com)):
        return "unreadable", [f"counts unreadable ({iss}, {rea}, {com})"]
    src = c.get("gpu_source") if isinstance(c.get("gpu_source"), str) else "absent (format < 1.4)"
    exact = c.get("progress_exact") is True or c.get("progress_exact") == 1
    why = []
    if iss != tv["issued"]:
        why.append(f"issued {iss} (truth {tv['issued']})")
    if not com <= rea <= iss:
        why.append(f"reached {rea} outside [completed {com}, issued {iss}]")
    if exact:
        if rea != tv["reached"]:
            why.append(f"reached {rea} (truth {tv['reached']}, claimed exact)")
        if com != tv["completed"]:
            why.append(f"completed {com} (truth {tv['completed']}, claimed exact)")
    else:
        if rea > tv["reached"]:
            why.append(f"reached {rea} above the truth {tv['reached']} (a lower bound must not pass it)")
        if com != tv["completed"]:
            why.append(f"completed {com} (truth {tv['completed']}; " +
                       ("a lower bound must not pass it)" if com > tv["completed"] else
                        "a lower bound that did not catch up in a frozen stall)"))
    for k, tk, what in (("coll_unreached", "reached", "not reached"), ("coll_uncompleted", "completed",
                                                                         "not completed")):
        x = c.get(k)
        if isinstance(x, int) and not isinstance(x, bool) and x and x <= tv[tk]:
            why.append(f"{k} {x}: claims #{x} proven {what}, but the truth has {tv[tk]}")
    return f"{src}{' exact' if exact else ' lower bound'}", why


def check_stall_truth(row, res):
    an = res.get("analyze")
    cm = comms_of(res, with_live=False)
    if not isinstance(an, dict) and not cm.ranks:
        raise JudgeError("neither analyze's comm table nor the rank files name the grid's communicators")
    t_end = res.get("t_end")
    truth = need(res, "truth", dict, "result")
    bad, kinds, short, pairs = [], {}, 0, 0
    for r, g, tv, c, why_not in truth_pairs(res, cm):
        if why_not:
            bad.append(f"r{r} {g}: {why_not}")
            continue
        pairs += 1
        kind, why = judge_pair(tv, c)
        kinds[kind] = kinds.get(kind, 0) + 1
        bad.extend(f"r{r} {g}: {w}" for w in why)
        if "lower bound" in kind:
            short = max(short, tv["reached"] - c["coll_reached"])
    phases = {}
    ages = []
    for r in range(8):
        t = truth.get(str(r))
        if isinstance(t, dict):
            phases.setdefault(str(t.get("phase")), []).append(r)
            if isinstance(t.get("time"), (int, float)) and isinstance(t_end, (int, float)):
                ages.append(t_end - t["time"])
    ph = ", ".join(f"{p}: r{','.join(map(str, rs))}" for p, rs in sorted(phases.items()))
    age = f"; last snapshots {min(ages):.1f}-{max(ages):.1f} s before the job ended" if ages else ""
    row["got"] = (f"{pairs} (rank, group) pairs of the rank files compared, {len(bad)} fault(s); " +
                  ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) +
                  (f"; reached (a lower bound) short of the truth by up to {short}" if short else "") +
                  (": " + "; ".join(bad[:10]) + (f"; +{len(bad) - 10} more" if len(bad) > 10 else "") if bad else "") +
                  f" [truth phases {ph or 'none'}{age}]")
    row["rank"] = "-"
    row["after_kill"] = offline_summary(res, cm)
    if pairs < 16:
        row["why"].append(f"{pairs} of 16 (rank, group) pairs compared")
    if bad:
        row["why"].append(f"{len(bad)} disagreement(s) with the ranks' own counts: " + "; ".join(bad[:6]))
    if not row["why"]:
        row["pass"] = True


def check_stall_audit(row, res):
    an = res.get("analyze")
    if not isinstance(an, dict):
        raise JudgeError("analyze gave no JSON: " + str(res.get("analyze_error", ""))[:160])
    jobs = need(an, "jobs", list, "analyze")
    findings = []
    for i, j in enumerate(jobs):
        for k, f in enumerate(need(j, "audit", list, f"analyze.jobs[{i}]")):
            need(f, "topic", str, f"analyze.jobs[{i}].audit[{k}]")
            findings.append(f)
    dup = [f for f in findings if f["topic"] == "duplicate_gpu"]
    host = [f for f in findings if f["topic"] == "nccl_hostid"]
    topics = ", ".join(f"{f['topic']} ({f.get('severity')})" for f in findings) or "none"
    row["got"] = f"{len(findings)} finding(s) in {len(jobs)} job(s): {topics}"
    if host:
        row["got"] += f"; nccl_hostid says: {str(host[0].get('summary'))[:120]}"
    row["rank"] = "-"
    row["after_kill"] = offline_summary(res, comms_of(res, with_live=False))
    if dup:
        row["why"].append(f"{len(dup)} duplicate_gpu finding(s): " + "; ".join(str(f.get("summary"))[:100]
                                                                            for f in dup[:2]))
    if len(host) != 1:
        row["why"].append(f"{len(host)} nccl_hostid finding(s), want exactly one")
    if not row["why"]:
        row["pass"] = True


def check_death(row, res):
    cm = comms_of(res)
    events = events_of(res)
    diag = live_verdict_events(events)  # torchrun ends the job at the death: the survivors' final verdicts

    def judge(v, where):
        if not isinstance(v, dict):
            return False, f"{where}: none"
        said = EXIT_TEXT in text_of(v)
        ok = v.get("kind") == "DEAD" and cm.culprits(v) == [CULPRIT] and said
        return ok, f"{where}: {desc(v, cm)} (exit code {'named' if said else 'not named'})"

    live = []
    if diag:
        last = diag[-1]
        vs = event_vs(last, events.index(last))
        live.append(judge(vs[0] if vs else None, f"last diagnosis event (rank {last.get('global_rank')}'s "
                                                 f"{last.get('type')})"))
    else:
        live.append((False, f"shim events: no diagnosis event ({len(events)} event(s): "
                            f"{', '.join(sorted({str(e.get('type')) for e in events})) or 'none'})"))
    lrs = [lr for lr in res.get("live_reports") or [] if isinstance(lr, dict) and isinstance(lr.get("report"), dict)]
    if lrs:
        vs = lrs[0]["report"].get("verdicts") or []
        live.append(judge(vs[0] if isinstance(vs, list) and vs else None, "live report lead"))
    else:
        live.append((False, "live report: none"))
    an = res.get("analyze")
    if isinstance(an, dict) and isinstance(an.get("verdicts"), list):
        off = judge(an["verdicts"][0] if an["verdicts"] else None, "verdicts[0]")
    else:
        off = (False, "analyze gave no verdict list")
    row["got"] = "; ".join(s for _, s in live)
    row["after_kill"] = off[1] + f" (analyze exit {res.get('analyze_exit')})"
    names = set()
    for e in diag[-1:]:
        for v in event_vs(e, events.index(e))[:1]:
            names.update(named(v, cm))
    if isinstance(an, dict) and isinstance(an.get("verdicts"), list) and an["verdicts"]:
        names.update(named(an["verdicts"][0], cm))
    row["rank"] = ",".join(map(str, sorted(names))) or "-"
    row["got"] += f"; job exit {res.get('exit_code')} ({res.get('ended_by')})"
    if not any(ok for ok, _ in live):
        row["why"].append(f"live: no lead DEAD r{CULPRIT} saying '{EXIT_TEXT}' ({'; '.join(s for _, s in live)})")
    if not off[0]:
        row["why"].append(f"after the end: want a lead DEAD r{CULPRIT} saying '{EXIT_TEXT}' ({off[1]})")
    if not row["why"]:
        row["pass"] = True


def check_clean(row, res):
    events = events_of(res)
    an = res.get("analyze")
    lrs = res.get("live_reports")
    if lrs is not None and not isinstance(lrs, list):
        raise JudgeError(f"live_reports is {type(lrs).__name__}, not a list")
    vs = an.get("verdicts") if isinstance(an, dict) else None
    cm = comms_of(res)
    row["got"] = (f"exit {res.get('exit_code')} ({res.get('ended_by')}); {len(events)} report event(s)" +
                  (f" ({', '.join(sorted({str(e.get('type')) for e in events}))})" if events else "") +
                  f"; {len(lrs or [])} live report(s)")
    row["after_kill"] = offline_summary(res, cm)
    row["rank"] = "-"
    if res.get("exit_code") != 0:
        row["why"].append(f"job exit code {res.get('exit_code')}, want 0")
    if events:
        row["why"].append(f"{len(events)} report event(s), want none")
    if not isinstance(an, dict):
        row["why"].append("analyze gave no JSON: " + str(res.get("analyze_error", ""))[:120])
    elif not isinstance(vs, list):
        row["why"].append("analyze JSON has no verdict list")
    elif vs:
        row["why"].append(f"analyze says {'; '.join(desc(v, cm) for v in vs[:3])}, want no verdict")
    if res.get("analyze_exit") != 0:
        row["why"].append(f"analyze exit {res.get('analyze_exit')}, want 0")
    if lrs:
        row["why"].append(f"{len(lrs)} live report(s), want none")
    if not row["why"]:
        row["pass"] = True


CHECKS = [  # (file tag, run, case suffix, expected, check)
    ("1-stall-live", "grid_stall", "stall in slow_eval, live",
     "first report leads NOT_JOINED r5 on TP[4-7] initiating; every event: DP[0,4]/[2,6]/[3,7], TP[0-3] cascades of "
     "TP[4-7], DP[1,5] NOT_JOINED r5 or cascade, no STUCK_IN_NCCL, no transport blamed", check_stall_live),
    ("2-stall-live-report", "grid_stall", "stall, embedded live collector",
     "leads NOT_JOINED r5 on TP[4-7] initiating; each DP[0,4]/[2,6]/[3,7] a cascade of it, TP[0-3] cascade if any; "
     "DP[1,5] NOT_JOINED r5 or cascade; no STUCK_IN_NCCL, no transport blamed", check_stall_live_report),
    ("3-stall-offline", "grid_stall", "stall, after the end",
     "leads NOT_JOINED r5 on TP[4-7] initiating; each DP[0,4]/[2,6]/[3,7] a cascade of it, TP[0-3] cascade if any; "
     "DP[1,5] NOT_JOINED r5 or cascade; no STUCK_IN_NCCL, no transport blamed", check_stall_offline),
    ("4-stall-truth", "grid_stall", "stall, against each rank's ground truth",
     "16 (rank, group) pairs of the rank files: issued, completed = truth; reached = truth when progress_exact "
     "(nccl-profiler), else a lower bound (<= truth); proven-unreached/uncompleted past the truth",
     check_stall_truth),
    ("8-stall-where", "grid_stall", "stall, where the culprit is",
     "the NOT_JOINED r5 on TP[4-7] names 'slow_eval (grid_2x4.py:LINE)', in a shim's event and after the end",
     check_stall_where),
    ("5-stall-audit", "grid_stall", "stall, environment audit",
     "no duplicate_gpu; exactly one nccl_hostid finding", check_stall_audit),
    ("6-death", "grid_death", "rank 5 dies (os._exit(3))",
     f"DEAD r5 '{EXIT_TEXT}' leads live (shim events or live report) and after the end", check_death),
    ("7-clean", "grid_clean", "clean",
     "exit 0; no report event (no suspicion); analyze: no verdict, exit 0; no live report", check_clean),
]


def load(root, run):
    path = os.path.join(root, run, "shim", "result.json")
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        return None, f"no {path} ({e.strerror})"
    except ValueError as e:
        return None, f"{path} is not JSON ({e})"
    if not isinstance(d, dict):
        return None, f"{path} holds {type(d).__name__}, not an object"
    return d, ""


def label_of(results):
    for r in results.values():
        if r:
            n = r.get("nproc", 8)
            return f"1 GPU, {n} ranks, 2x4 grid" if r.get("one_gpu") else f"{n} GPUs, 2x4 grid"
    return "2x4 grid"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--rows-dir", default="")
    a = p.parse_args()
    results, missing = {}, {}
    for run in RUNS:
        results[run], missing[run] = load(a.root, run)
    label = label_of(results)
    rows = []  # (file tag, row)
    said_missing = set()
    for tag, run, case, expected, check in CHECKS:
        res = results[run]
        if res is None:
            if run in said_missing:
                continue
            said_missing.add(run)
            rows.append((f"{tag.split('-')[0]}-{run.split('_')[1]}-missing",
                         {"case": f"{label}: {run.split('_')[1]}: no result", "expected": "the run's result.json",
                          "got": "did not run", "rank": "", "secs": "", "after_kill": "", "fr": "not run",
                          "ras": "not queried", "pass": False, "why": [missing[run]]}))
            continue
        row = {"case": f"{label}: {case}", "expected": expected, "got": "", "rank": "", "secs": "",
               "after_kill": "", "fr": "not run", "ras": "not queried", "pass": False, "why": [],
               "exit_code": res.get("exit_code"), "ended_by": res.get("ended_by")}
        try:
            check(row, res)
        except JudgeError as e:
            row["pass"] = False
            row["why"].append(f"cannot judge: {e}")
            row["got"] = row["got"] or "unreadable result"
        except Exception as e:  # noqa: BLE001 -- any shape the judge did not foresee is a failing row
            tb = traceback.extract_tb(e.__traceback__)
            at = f" (grid_table.py line {tb[-1].lineno})" if tb else ""
            row["pass"] = False
            row["why"].append(f"cannot judge: {type(e).__name__}: {e}{at}")
            row["got"] = row["got"] or "unreadable result"
        rows.append((tag, row))
    if a.rows_dir:
        os.makedirs(a.rows_dir, exist_ok=True)
        for tag, row in rows:
            with open(os.path.join(a.rows_dir, f"40-grid-{tag}.json"), "w") as f:
                json.dump(row, f, indent=1)
    for _, r in rows:
        res = "info" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        print(f"{r['case']}: {res}: got {r['got']} (rank {r['rank']}{', ' + r['secs'] + ' s' if r['secs'] else ''})"
              f"; after the end {r['after_kill']}")
        print(f"    expected: {r['expected']}")
        for w in r["why"]:
            print(f"    why: {w}")
    return 0 if rows and all(r["pass"] for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
