#!/usr/bin/env python3
"""Issue 41's runs (test/gpu/run_issue41.sh; issue 42's too: gpu_busy, order_deadlock, moe_busy) in one compact
summary: for each run, the first verdict line of each source and whether any of them says "lower bounds".

    issue41_summary.py WORK --runs "one:moe_stale_split two:send_cycle ..." --json FILE --txt FILE

WORK/one/<scenario>/shim/ is test/gpu/run_scenario.py's folder (4 ranks on one GPU, the embedded live collector),
WORK/two/<scenario>/ run_two_nodes.py's (two "nodes" of 2 ranks, `serve` as the live collector); WORK/status/
<mode>-<scenario>.txt, when there, says why a run did not start. For each run:
  shims     the first verdict line the ranks' shims wrote on stderr (job.log; nodeA.log and nodeB.log), by its time:
            "KIND: headline", its culprits (the ranks the line names), the rank that wrote it, and seconds from the
            scenario's departure (the earliest t_depart of the ranks' truth); the first suspicion apart;
  reports   the first diagnosis among the shims' .report.json events (its lead verdict);
  live      the live collector's first verdict that is not a suspicion: one node, the embedded collector's news on
            rank 0's stderr ("live collector: job ...: KIND: ..."), and the lead of its last live-report.json; two
            nodes, the lead of the first live-report.json version with one (run_two_nodes.py keeps every version) and
            of the last;
  analyze   `ncclwatch-collector analyze --json` after the end: its headline and lead verdict, and every verdict;
  lower_bounds  whether the shims' stderr, their report events, the live reports or the analysis say "lower bounds"
            (with the first such line).
Each verdict is compared with the scenario's truth (TRUTH): "exact" (the kind, and exactly its culprits), "names"
(the kind, its culprits and more), "no". Never fails on an odd shape: what cannot be read is said so.
"""
import argparse
import datetime
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from job_readers import live_verdict_events  # noqa: E402
from two_nodes_table import KIND_LINE, full_cmap, lead_of, line_said, said_of  # noqa: E402

LAST = "last"
STAGE = "stage"  # the pipeline's departing stage: its truth's "stage" (--pipeline-stage), world - 2 by default
# kinds, culprits (global ranks; LAST: world - 1, STAGE: the stage), and in words.
TRUTH = {
    "moe_stale_split": ({"MISMATCH"}, [LAST], "MISMATCH r{last} (its send to rank 0 is twice what rank 0 receives)"),
    "moe_clean": (set(), [], "nothing"),
    "send_cycle": ({"DEADLOCK"}, [0, 1], "DEADLOCK r0,1 (both send first)"),
    "batch_ring_missing": ({"NOT_JOINED", "MISMATCH"}, [LAST],
                           "NOT_JOINED or MISMATCH r{last} (its Recv from rank {before} left out)"),
    # The pipelines (examples/hang_scenarios.py run_pipeline: one stage per rank, activations forward by send/recv,
    # gradients back).
    "pipeline": ({"NOT_JOINED"}, [STAGE], "NOT_JOINED r{stage} (stage {stage} away in Python before its send)"),
    "pipeline_wrong_peer": ({"MISMATCH"}, [STAGE],
                            "MISMATCH r{stage} (its send to rank 0 instead of rank {next}: a send no receive matches)"),
    "pipeline_fresh_peer": ({"MISMATCH", "NOT_JOINED"}, [STAGE],
                            "MISMATCH or NOT_JOINED r{stage} (its send to rank {fresh}, never exchanged with before: a "
                            "send no receive matches, or the new pair's connection waits)"),
    "pipeline_slow": ({"STRAGGLER"}, [STAGE],
                      "STRAGGLER r{stage} (the slowest stage: {slow_ms} ms more GPU work before each forward send; not "
                      "a hang, no stall or mismatch)"),
    "pipeline_clean": (set(), [], "nothing (not even a straggler)"),
    # Issue 42 (test/gpu/run_issue41.sh's list issue42). The last rank's GPU in one long kernel before its step's
    # all_reduce; a deadlock across two communicators of every rank (the last rank does group B's metric first):
    # DEADLOCK naming the last rank, as the tables want it (scenario_table.py accepts it named among others: "names"
    # here; two_nodes_table.py only it alone: "exact"); the MoE layer's last rank in load_next_batch(), Python, before
    # its dispatch.
    "gpu_busy": ({"GPU_NOT_REACHED"}, [LAST], "GPU_NOT_REACHED r{last} (its GPU in one long kernel before the step's "
                 "all_reduce, its CPU past it)"),
    "order_deadlock": ({"DEADLOCK"}, [LAST], "DEADLOCK r{last} (it all-reduces over group B first, the others over "
                       "group A)"),
    "moe_busy": ({"NOT_JOINED"}, [LAST], "NOT_JOINED r{last} (in load_next_batch(), Python, before its dispatch "
                 "all_to_all_single)"),
}
# "[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: ..." anywhere in a line (a launcher may prefix it).
NCW = re.compile(r"\[ncclwatch rank (?P<rank>\S+) pid (?P<pid>\d+) (?P<time>\S+)\] (?P<level>\w+): (?P<msg>.*)$")
LIVE_NEWS = re.compile(r"^live collector: job (?P<rest>.*)$")
LOWER = re.compile(r"lower bounds", re.I)


def load(path):
    try:
        with open(path) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def iso_time(s):
    try:
        return datetime.datetime.fromisoformat(s).timestamp()
    except (TypeError, ValueError):
        return None


def cut(s, n=300):
    s = " ".join(str(s or "").split())
    return s if len(s) <= n else s[: n - 3] + "..."


def truth_of(scenario, world, truth=None):
    """(kinds, global ranks, words) of a scenario's truth; the pipeline's stage and peers from the ranks' own truth
    (run_pipeline writes them at its loop's start) where it has them."""
    kinds, ranks, words = TRUTH.get(scenario, (None, None, "(no truth for this scenario)"))
    last = world - 1
    mine = [t for t in (truth or {}).values() if isinstance(t, dict)]

    def said(key, default):
        return next((t[key] for t in mine if isinstance(t.get(key), (int, float)) and not isinstance(t[key], bool)),
                    default)
    stage = said("stage", max(world - 2, 0))
    ranks = None if ranks is None else [last if r == LAST else stage if r == STAGE else r for r in ranks]
    return kinds, ranks, words.format(last=last, before=max(last - 1, 0), stage=stage, next=stage + 1,
                                      fresh=said("fresh_peer", "?"), slow_ms=f"{said('slow_ms', 20):g}")


def compare(kind, culprits, truth):
    """'exact', 'names' or 'no' against the truth (kinds, ranks); None when there is no truth."""
    kinds, ranks = truth
    if kinds is None:
        return None
    if not kinds:
        return "exact" if kind is None else "no"
    if kind not in kinds:
        return "no"
    got = set(culprits or [])
    return "exact" if got == set(ranks) else "names" if got >= set(ranks) else "no"


def said_entry(s, headline, truth, **more):
    """A verdict as the summary keeps it (s: two_nodes_table.Said, or None)."""
    if s is None or s.kind is None:
        return None
    e = {"kind": s.kind, "culprits": s.ranks, "unplaced": s.unknown, "line": cut(headline, 400),
         "match": compare(s.kind, s.ranks, truth)}
    e.update({k: v for k, v in more.items() if v is not None})
    return e


def ncw_lines(texts):
    """[(time, source, index, rank, level, msg)] of the shim's lines in the logs, by time (then file order)."""
    out = []
    for name, text in texts:
        for i, ln in enumerate(text.splitlines()):
            m = NCW.search(ln)
            if m:
                out.append((iso_time(m.group("time")), name, i, m.group("rank"), m.group("level"), m.group("msg")))
    out.sort(key=lambda x: (x[0] if x[0] is not None else float("inf"), x[1], x[2]))
    return out


def stderr_firsts(lines, truth, t0):
    """The shims' own first verdict line and first suspicion; the embedded collector's first verdict news line. A
    STRAGGLER line ("not a hang") is a verdict where the truth is a straggler or nothing; in a hang it is kept apart
    (first_straggler), and the hang's own first line is the first."""
    own = sus = live = live_sus = strag = None
    strag_apart = bool(truth[0]) and "STRAGGLER" not in truth[0]
    n_own = n_live = 0
    for t, src, _, rank, level, msg in lines:
        news = LIVE_NEWS.match(msg)
        text = msg
        if news:
            _, _, text = news.group("rest").partition(": ")
        m = KIND_LINE.match(text)
        if not m:
            continue
        s = line_said(text, "stderr", bool(news))
        if s is None and m.group("sus"):  # a suspicion: line_said leaves it out
            s = line_said(text[len("SUSPECTED "):].lstrip() if text.lstrip().startswith("SUSPECTED ") else text,
                          "stderr", bool(news))
        secs = round(t - t0, 1) if t is not None and t0 is not None else None
        e = said_entry(s, text, truth, rank=rank, level=level, source=src, secs_after_depart=secs)
        if e is None:
            continue
        if strag_apart and e.get("kind") == "STRAGGLER":
            strag = strag or dict(e, live=bool(news))
            continue
        if news:
            n_live += 1
            if m.group("sus"):
                live_sus = live_sus or e
            else:
                live = live or e
        else:
            n_own += 1
            if m.group("sus"):
                sus = sus or e
            else:
                own = own or e
    return {"first": own, "first_suspicion": sus, "first_straggler": strag, "verdict_lines": n_own}, \
        {"first_news": live, "first_suspicion_news": live_sus, "news_lines": n_live}


def lead_entry(doc, cmap, truth):
    """The lead verdict of a live report or an analysis."""
    if not isinstance(doc, dict):
        return None
    v = lead_of(doc.get("verdicts"), doc.get("headline"))
    if not v:
        return None
    return said_entry(said_of(v, cmap), v.get("headline") or v.get("summary"), truth, time=doc.get("time"))


def lower_bounds(sources):
    """{source: bool}, 'any', and the first line or snippet that says it."""
    out = {"any": False, "example": None}
    for name, text in sources:
        hit = LOWER.search(text or "")
        out[name] = bool(hit)
        if hit:
            out["any"] = True
            if out["example"] is None:
                a = text.rfind("\n", 0, hit.start()) + 1
                b = text.find("\n", hit.end())
                b = b if b >= 0 else len(text)
                start = a if hit.start() - a < 220 else hit.start() - 200
                out["example"] = f"{name}: " + ("..." if start > a else "") + cut(text[start:min(b, hit.end() + 200)])
    return out


def first_report_event(events, cmap, truth, t0):
    evs = sorted((e for e in events if isinstance(e, dict)), key=lambda e: iso_time(e.get("time")) or 0)
    # A diagnosis of a hang first; where none came, a straggler note (a slow stage's truth, or a clean job's error).
    diag = live_verdict_events(evs) or [e for e in evs if e.get("type") == "straggler"]
    if not diag:
        return None
    e = diag[0]
    vs = [v for v in e.get("verdicts") or [] if isinstance(v, dict)]
    if not vs:
        return {"type": e.get("type"), "rank": e.get("global_rank"), "kind": None}
    t = iso_time(e.get("time"))
    return said_entry(said_of(vs[0], cmap, e.get("comm_id")), vs[0].get("headline"), truth, type=e.get("type"),
                      rank=e.get("global_rank"), secs_after_depart=round(t - t0, 1) if t and t0 else None)


def summarize(work, mode, scenario):
    run = {"mode": mode, "scenario": scenario}
    status = read(os.path.join(work, "status", f"{mode}-{scenario}.txt")).strip()
    folder = os.path.join(work, "one", scenario, "shim") if mode == "one" else os.path.join(work, mode, scenario)
    res = load(os.path.join(folder, "result.json"))
    if res is None:
        run["ran"] = False
        run["why"] = status or f"no {folder}/result.json (the runner failed: see its log)"
        run["runner_log_tail"] = cut(read(os.path.join(work, "logs", f"{mode}-{scenario}.log"))[-1500:], 1500)
        return run
    run["ran"] = True
    world = res.get("nproc") if mode == "one" else res.get("world")
    world = world if isinstance(world, int) and world > 0 else 4
    tr = res.get("truth") if isinstance(res.get("truth"), dict) else {}
    kinds, ranks, words = truth_of(scenario, world, tr)
    truth = (kinds, ranks)
    run["truth"] = words
    run["world"] = world
    run["ended_by"] = res.get("ended_by")
    run["exit"] = res.get("exit_code") if mode == "one" else res.get("exit_codes")
    if isinstance(res.get("t_end"), (int, float)) and isinstance(res.get("t_launch"), (int, float)):
        run["job_s"] = round(res["t_end"] - res["t_launch"], 1)
    departs = [t.get("t_depart") for t in tr.values() if isinstance(t, dict) and
               isinstance(t.get("t_depart"), (int, float))]
    t0 = min(departs) if departs else None
    run["departed"] = {r: t.get("step") for r, t in tr.items() if isinstance(t, dict) and "t_depart" in t}
    run["loop_started"] = sorted(r for r, t in tr.items() if isinstance(t, dict) and "t_loop_start" in t)
    run["done"] = sorted(r for r, t in tr.items() if isinstance(t, dict) and "t_done" in t)
    cmap = full_cmap(res)

    if mode == "one":
        texts = [("job.log", read(os.path.join(folder, "job.log")))]
        events = res.get("events") or []
        live_docs = [lr.get("report") for lr in res.get("live_reports") or [] if isinstance(lr, dict)]
    else:
        texts = [("nodeA.log", read(os.path.join(folder, "nodeA.log"))),
                 ("nodeB.log", read(os.path.join(folder, "nodeB.log")))]
        events = (res.get("events0") or []) + (res.get("events1") or [])
        live_docs = [h.get("report") for h in res.get("live_history") or [] if isinstance(h, dict)]
        if isinstance(res.get("live"), dict):
            live_docs.append(res["live"])
    live_docs = [d for d in live_docs if isinstance(d, dict)]
    shims, news = stderr_firsts(ncw_lines(texts), truth, t0)
    run["shims"] = shims
    run["reports"] = first_report_event(events, cmap, truth, t0)
    live = dict(news)
    first_doc = next((d for d in live_docs if lead_entry(d, cmap, truth)), None)
    live["first_report"] = lead_entry(first_doc, cmap, truth) if mode == "two" else None
    live["last_report"] = lead_entry(live_docs[-1], cmap, truth) if live_docs else None
    live["reports_seen"] = len(live_docs)
    if mode == "two":
        live["first"] = live["first_report"]
    else:
        live["first"] = live["first_news"] or live["last_report"]
    run["live"] = live
    an = res.get("analyze") if isinstance(res.get("analyze"), dict) else None
    if an is None:
        run["analyze"] = {"error": cut(res.get("analyze_error") or "no analysis", 400)}
    else:
        allv = []
        for v in an.get("verdicts") or []:
            s = said_of(v, cmap) if isinstance(v, dict) else None
            if s:
                allv.append(s.short())
        run["analyze"] = {"headline": cut(an.get("headline"), 400), "lead": lead_entry(an, cmap, truth),
                          "verdicts": allv, "suspected": len(an.get("suspected") or [])}
    run["lower_bounds"] = lower_bounds(
        [("stderr", "\n".join(t for _, t in texts)), ("reports", json.dumps(events)),
         ("live", json.dumps(live_docs)), ("analyze", json.dumps(an) if an else "")])
    return run


def short(e):
    if not e:
        return "none"
    who = ",".join(map(str, e.get("culprits") or [])) or "-"
    m = e.get("match")
    tag = f" [{m}]" if m else ""
    at = []
    if e.get("rank") is not None:
        at.append(f"rank {e['rank']}")
    if e.get("secs_after_depart") is not None:
        at.append(f"{e['secs_after_depart']:+.1f} s")
    where = f" ({', '.join(at)})" if at else ""
    return f"{e.get('kind')} r{who}{tag}{where}: {cut(e.get('line'), 260)}"


def text_of(runs):
    out = []
    for r in runs:
        head = f"== {r['mode']} {r['scenario']}"
        if not r.get("ran"):
            out.append(f"{head}: NOT RUN: {r.get('why')}")
            if r.get("runner_log_tail"):
                out.append(f"   runner: {cut(r['runner_log_tail'], 400)}")
            continue
        out.append(f"{head} (world {r['world']}; truth: {r['truth']}): {r.get('ended_by')}, exit {r.get('exit')}, "
                   f"{r.get('job_s')} s; departed {r.get('departed') or '-'}")
        sh = r["shims"]
        out.append(f"   shims:   {short(sh['first'])}")
        if sh.get("first_suspicion"):
            out.append(f"   (suspicion first: {short(sh['first_suspicion'])})")
        if sh.get("first_straggler"):
            out.append(f"   (a STRAGGLER line too: {short(sh['first_straggler'])})")
        out.append(f"   reports: {short(r.get('reports'))}")
        lv = r["live"]
        out.append(f"   live:    {short(lv.get('first'))}")
        if lv.get("last_report") and (lv.get("last_report") or {}).get("line") != (lv.get("first") or {}).get("line"):
            out.append(f"   live, last report: {short(lv['last_report'])}")
        an = r["analyze"]
        if "error" in an:
            out.append(f"   analyze: FAILED: {an['error']}")
        else:
            out.append(f"   analyze: {short(an.get('lead'))}")
            if an.get("verdicts"):
                out.append(f"            all: {'; '.join(an['verdicts'])[:300]}")
        lb = r["lower_bounds"]
        said = [k for k in ("stderr", "reports", "live", "analyze") if lb.get(k)]
        out.append(f"   lower bounds: {'yes (' + ', '.join(said) + '): ' + str(lb.get('example')) if said else 'no'}")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("work")
    p.add_argument("--runs", required=True, help="'MODE:SCENARIO ...', MODE one or two")
    p.add_argument("--json", default="")
    p.add_argument("--txt", default="")
    a = p.parse_args()
    runs = []
    for item in a.runs.split():
        mode, _, scn = item.partition(":")
        try:
            runs.append(summarize(a.work, mode, scn))
        except Exception as e:  # noqa: BLE001 (one odd run must not lose the others' summary)
            runs.append({"mode": mode, "scenario": scn, "ran": False, "why": f"summary failed: {e!r}"})
    doc = {"schema": "ncclwatch.issue41/1", "runs": runs}
    text = text_of(runs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    if a.txt:
        with open(a.txt, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
