#!/usr/bin/env python3
"""Judges the two-node runs (test/gpu/run_two_nodes.py, phase 7 of test/gpu/run.sh): one row per scenario, with the
three columns of issue 23's table.

    two_nodes_table.py ROOT [--scenarios "skip uneven ..."] [--rows-dir DIR] [--out FILE]

ROOT/<scenario>/result.json. For each scenario, the truth (EXPECT: the culprit's global rank and the verdict kind the
scenario makes; a rank that exits: DEAD, with its exit code or signal in the verdict's words; validation and
init_hang: the verdict, then the job goes on) against:
  nodes    each node's shims: for every rank of the node that reported, the lead of its first diagnosis (its
           .report.json event: the first verdict of a stall, mismatch or init-hang event; when the launcher ended the
           job before any timeout, its final verdict). A shim whose own lead is UNKNOWN ("not visible from here") is
           expected to quote the live collector's verdict, marked as the collector's (issue 23 item 3): a verdict or
           event that names the collector (a field such as source: "collector", or the word in its headline or
           type; "ncclwatch-collector analyze" advice is not a mark), in that event or a later one of the rank; or a
           line of its stderr that says a verdict kind and the collector. The node's word is then the collector's.
  live     the live collector (`serve`): the lead verdict (the first that is not a cascade or a consequence, as
           lib/report/headline.cpp's lead_verdict) of its first report that is not a suspicion, and of its last
           live-report.json (after the launcher's teardown); both must be the truth.
  analyze  `ncclwatch-collector analyze --json nodeA/ nodeB/` after the end: its lead (the verdict whose headline is
           the document's). For the scenarios that recover (the job then ends normally, and nothing is stalled at the
           end), the analysis of both folders taken during the hang (3 s after the first diagnosis) is judged, and the
           one after the end must name nothing else.
PASS when the live lead and analyze's are both the truth (kind and culprit, exactly: no extra culprit) and equal,
and every reporting rank of both nodes says it (its own lead or the collector's quote). Culprits are global ranks:
comm ranks are mapped through the comm tables of the rank files, the live report and the analysis.
Issue 42: a run FAILS, whatever its verdicts, where the shims' stderr (nodeA.log, nodeB.log), their report files
(node*/<job>/*.report.json), the live reports (live/<job>/live-report.*, live/history/, serve.log) or the analyses
(analyze.json, analyze-during.json) say "lower bounds" (any case): a count that is only a lower bound proves no
position (scenario_table.lower_bounds_said, one line for each where it was said; result.json's copies of them where
the files are gone).
Writes ROWS/70-two-nodes-NN-<scenario>.json (test/gpu/print_table.py's row format, with the columns in "nodes",
"live" and "analyze") and prints the issue's table.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_readers import (HANG_SCENARIOS, before_hang, comm_rank_map, culprits_global, event_time,  # noqa: E402
                         hang_start, is_diagnosis, is_final_verdict, is_recovery, is_suspicion, live_verdict_events,
                         load, norm_id, parse_time, story_names)
from scenario_table import lower_bounds_said  # noqa: E402

LAST, BEFORE_LAST, ALL = "last", "before_last", "all"  # ALL: every rank of the world is the culprit
# kind: the verdict; rank: the culprit's global rank; words: in the verdict's words (lib/engine/causal.cpp's end
# words); recovers: the job goes on and ends normally.
EXPECT = {
    "skip": dict(kind="NOT_JOINED", rank=LAST),
    "uneven": dict(kind="DEAD", rank=LAST, words="exit code 0"),
    "type_mismatch": dict(kind="MISMATCH", rank=LAST),
    "size_mismatch": dict(kind="MISMATCH", rank=LAST),
    "rank_dies": dict(kind="DEAD", rank=LAST, words="exit code 3"),
    "init_hang": dict(kind="INIT_HANG", rank=LAST, recovers=True, story={"init_waited"}),
    # Rank 0's validation is GPU work: once its CPU is back and has issued the op, its GPU may still be finishing the
    # last forward passes, and a report of that moment says GPU_NOT_REACHED r0, as the one-node table accepts.
    "validation": dict(kind="NOT_JOINED", also=("GPU_NOT_REACHED",), rank=0, recovers=True, recovered_event=True,
                       story={"recovered", "suspicion_cleared"}),
    "grad_accum": dict(kind="EXTRA_OP", rank=0),
    "rank_exit0": dict(kind="DEAD", rank=LAST, words="exit code 0"),
    "rank_segv": dict(kind="DEAD", rank=LAST, words="SIGSEGV"),
    "rank_killed": dict(kind="DEAD", rank=LAST, words=("is gone", "SIGKILL")),  # no exit code: it cannot say one
    "drift_skip": dict(kind="NOT_JOINED", rank=LAST),
    "drift_extra": dict(kind="EXTRA_OP", rank=LAST),
    "gpu_busy": dict(kind="GPU_NOT_REACHED", rank=LAST),
    "pipeline": dict(kind="NOT_JOINED", rank=BEFORE_LAST),
    "clean": dict(kind=None),
    # Issue 25: the hangs real jobs have, each as what it is.
    "order_deadlock": dict(kind="DEADLOCK", rank=LAST),
    "graph_skip": dict(kind="NOT_JOINED", rank=LAST),
    "algo_differs": dict(kind="SETTING_DIFFERS", rank=LAST),
    "leave_early": dict(kind="DEAD", rank=LAST, words="exit code 0"),
    # Every rank's destroy waits for its GPU, busy with a long kernel: where (the teardown) and why (the GPU) are both
    # the right answer, naming every rank.
    "teardown_hang": dict(kind="TEARDOWN_HANG", also=("GPU_NOT_REACHED",), rank=ALL),
    "oom": dict(kind="DEAD", rank=LAST, words="OutOfMemoryError"),
    "pipeline_wrong_peer": dict(kind="MISMATCH", rank=BEFORE_LAST, words="to rank 0"),
    "grid_stall": dict(kind="NOT_JOINED", rank=5),
    "grid_death": dict(kind="DEAD", rank=5, words="exit code 3"),
    "grid_clean": dict(kind=None),
    # Issue 41: point-to-point traffic. An MoE layer's stale split table (the last rank sends rank 0 twice the rows
    # rank 0 receives); ranks 0 and 1 both send first (a cycle of two sends, named both); the last rank's irecv left
    # out of a batch_isend_irecv (its missing Recv, said as either kind).
    "moe_stale_split": dict(kind="MISMATCH", rank=LAST, words="to rank 0"),
    "moe_clean": dict(kind=None),
    "send_cycle": dict(kind="DEADLOCK", rank=[0, 1]),
    "batch_ring_missing": dict(kind="NOT_JOINED", also=("MISMATCH",), rank=LAST),
    # Issue 41's pipelines (one stage per rank; stage world - 2 departs). Its send to (then its receive from) a rank it
    # never exchanged with: a send no receive matches, or NOT_JOINED where what waits is the new pair's connection.
    "pipeline_fresh_peer": dict(kind="MISMATCH", also=("NOT_JOINED",), rank=BEFORE_LAST),
    # 20 ms more GPU work before each forward send: STRAGGLER ("the slowest stage"), not a hang; the job ends normally
    # (exit0). A node's shims see only their node's stages (the rule needs every stage in sight): the live collector
    # and analyze judge it, and a node's straggler note, if any, must name the stage (no stall, no mismatch).
    "pipeline_slow": dict(kind="STRAGGLER", rank=BEFORE_LAST, exit0=True),
    # Every stage in step: nothing at all, not even a straggler (quiet: a STRAGGLER report is not set aside).
    "pipeline_clean": dict(kind=None, exit0=True, quiet=True),
    # Issue 42 (test/gpu/run_issue41.sh's list issue42, with gpu_busy and order_deadlock above): an MoE layer's last
    # rank in load_next_batch(), Python, before its dispatch all_to_all_single, while the others wait inside theirs.
    "moe_busy": dict(kind="NOT_JOINED", rank=LAST),
}
ORDER = list(EXPECT)
KINDS = ("NOT_JOINED", "GPU_NOT_REACHED", "STUCK_IN_NCCL", "MISMATCH", "DEAD", "ASYNC_ERROR", "UNKNOWN", "EXTRA_OP",
         "INIT_HANG", "STRAGGLER", "DEADLOCK", "SETTING_DIFFERS", "TEARDOWN_HANG")
KIND_LINE = re.compile(r"^\s*(?P<sus>SUSPECTED )?(?P<kind>" + "|".join(KINDS) + r")\b[^:]{0,60}:")
# "the collector", "the live collector's verdict", "collector:" -- not "ncclwatch-collector analyze" (advice).
COLLECTOR_MARK = re.compile(r"(?<![\w-])collector(?!\s+analyze)", re.I)
# The first rank a verdict line names: "rank 3 (host ...)", not "comm rank 1 (...)".
LINE_RANK = re.compile(r"(?<!comm )\brank (\d+) \(")
LINE_RANGE = re.compile(r"\branks (\d+)-(\d+) \(\d+ ranks on")
VAGUE = ("UNKNOWN", "none", None)  # a lead that names nobody: the shim's own view is then the collector's to give
SOURCE_KEYS = ("source", "from", "origin", "by", "verdict_source", "quoted_from", "said_by")
# Where a two-node run's evidence says something (scenario_table.lower_bounds_said): (what, the run folder's files
# (globs, ** any depth), result.json's keys that copy them); test/gpu/run_two_nodes.py's WORK (ROOT/<scenario>).
TWO_NODE_SAYERS = (
    ("the shims' stderr", ("nodeA.log", "nodeB.log"), ("lines0", "lines1")),
    ("a report file", ("nodeA/**/*.report.json", "nodeB/**/*.report.json"), ("events0", "events1")),
    ("a live report", ("live/**/live-report.json", "live/**/live-report.txt", "live/history/*.json", "serve.log"),
     ("live_history", "live", "serve_log_tail")),
    ("analyze", ("analyze.json", "analyze-during.json"), ("analyze", "analyze_during")),
)


def want_rank(exp, world):
    r = exp.get("rank")
    if r == LAST:
        return world - 1
    if r == BEFORE_LAST:
        return max(world - 2, 0)
    if r == ALL:
        return list(range(world))
    return r


class Said:
    """One verdict as a source said it: kind, global ranks, the ranks that could not be placed, its words, and
    whether it is the live collector's (quoted by a shim)."""

    def __init__(self, kind, ranks, unknown=(), text="", collector=False, where=""):
        self.kind, self.ranks, self.unknown = kind, sorted(set(ranks)), list(unknown)
        self.text, self.collector, self.where = text, collector, where

    def short(self):
        if self.kind is None:
            return "nothing"
        who = ",".join(map(str, self.ranks)) + ("," if self.ranks and self.unknown else "") + \
            ",".join("?" + u.replace("comm rank ", "c") for u in self.unknown)
        mark = " (collector's)" if self.collector else ""
        return f"{self.kind}{' r' + who if who else ''}{mark}"

    def matches(self, kind, rank, also=()):
        return (self.kind == kind or self.kind in also) and \
            self.ranks == (rank if isinstance(rank, list) else [rank]) and not self.unknown

    def same(self, other):
        return other is not None and self.kind == other.kind and self.ranks == other.ranks


NOTHING = Said(None, [])


def verdict_text(v):
    if not isinstance(v, dict):
        return ""
    return " ".join(str(x) for x in [v.get("headline"), v.get("summary")] + list(v.get("evidence") or []) if x)


def said_of(v, cmap, comm_id=None, collector=False, where=""):
    if not isinstance(v, dict):
        return None
    g, unk = culprits_global(v, cmap, comm_id)
    if unk and v.get("kind") == "INIT_HANG":
        # A communicator still in init has no comm table row to map through, and a rank that never entered it no
        # rank file row: at the job's first init (the world's) the comm ranks are the global ranks.
        placed = [int(u.split()[-1]) for u in unk if re.fullmatch(r"comm rank \d+", u)]
        g, unk = sorted(set(g) | set(placed)), [u for u in unk if not re.fullmatch(r"comm rank \d+", u)]
    return Said(v.get("kind"), g, unk, verdict_text(v), collector, where)


def lead_of(vs, headline=None):
    """The lead verdict of a list (analyze's or the live report's), as lib/report/headline.cpp's lead_verdict: the
    verdict whose headline is the document's when one is given, else the first that is neither a cascade nor a
    consequence; suspicions are not verdicts here."""
    vs = [v for v in vs or [] if isinstance(v, dict) and v.get("suspected") is not True and
          not is_suspicion({"verdicts": [v]})]
    if headline:
        h = re.sub(r"^job .*?: ", "", headline)
        for v in vs:
            if v.get("headline") and (v["headline"] == headline or v["headline"] == h):
                return v
    for v in vs:
        if v.get("role") != "cascade" and not v.get("consequence"):
            return v
    for v in vs:
        if not v.get("consequence"):
            return v
    return vs[0] if vs else None


def full_cmap(res):
    """{(comm id, comm rank): global rank} from the rank files, the analyses and every live report."""
    m = comm_rank_map(res)
    docs = [h.get("report") for h in res.get("live_history") or [] if isinstance(h, dict)] + [res.get("live")]
    during = res.get("analyze_during")
    if isinstance(during, dict):
        m2 = comm_rank_map({"analyze": during.get("analyze")})
        for k, v in m2.items():
            m.setdefault(k, v)
    for d in docs:
        for c in (d or {}).get("comms") or [] if isinstance(d, dict) else ():
            if not isinstance(c, dict):
                continue
            for r in c.get("ranks") or []:
                if isinstance(r, dict) and isinstance(r.get("comm_rank"), int) and \
                        isinstance(r.get("global_rank"), int) and r["global_rank"] >= 0:
                    m.setdefault((norm_id(c.get("comm_id")), r["comm_rank"]), r["global_rank"])
    return m


# ----------------------------------------------------------------------------------------------- each node's shims
def collector_marked(v, e=None):
    """A verdict (in event e) that a shim quotes from the live collector."""
    for d in (v, e):
        if not isinstance(d, dict):
            continue
        for k in SOURCE_KEYS:
            if isinstance(d.get(k), str) and "collector" in d[k].lower():
                return True
        for k, x in d.items():
            # An event's collector_verdict is the quote itself (event_said reads it), not a mark on its own verdicts.
            if d is e and k == "collector_verdict":
                continue
            if "collector" in k.lower() and x not in (None, False, "", [], {}):
                return True
    if isinstance(e, dict) and "collector" in str(e.get("type", "")).lower():
        return True
    return isinstance(v, dict) and any(COLLECTOR_MARK.search(str(v.get(k) or "")) for k in ("headline", "summary"))


def line_said(msg, where, collector):
    """A verdict line ("KIND: ... rank 3 (host ...") as Said, or None."""
    m = KIND_LINE.match(msg)
    if not m or m.group("sus"):
        return None
    # The culprits are named before the verdict's first ';': "rank 0 (host ...) and rank 1 (host ...)", or a range
    # "ranks 0-3 (4 ranks on 1 host)".
    head = msg.split(";")[0]
    ranks = [int(x) for x in LINE_RANK.findall(head)]
    for a, b in LINE_RANGE.findall(head):
        ranks += list(range(int(a), int(b) + 1))
    if not ranks:
        r = LINE_RANK.search(msg)
        if not r and m.group("kind") == "INIT_HANG":
            # A rank never seen has no global rank to name: at the job's first init (the world's) its comm rank is it.
            r = re.search(r"\bcomm rank (\d+) \(", msg)
        ranks = [int(r.group(1))] if r else []
    return Said(m.group("kind"), ranks, [] if ranks else ["no rank in the line"], msg.strip(), collector, where)


def event_said(e, cmap, world):
    """[(Said, verdict)] of one report event, in its order (an init hang without a verdict: its not_seen ranks),
    then the live collector's verdict the event quotes (its collector_verdict line), if any."""
    out = []
    for v in e.get("verdicts") or []:
        s = said_of(v, cmap, e.get("comm_id"), collector_marked(v, e), e.get("type", ""))
        if s:
            out.append((s, v))
    if not out and e.get("type") == "init_hang":
        ns = [r for r in e.get("not_seen") or [] if isinstance(r, int)]
        s = said_of({"kind": "INIT_HANG", "culprits": ns, "comm_id": e.get("comm_id")}, cmap)
        out.append((Said("INIT_HANG", s.ranks, s.unknown, "not seen in init", False, "init_hang"), None))
    cv = e.get("collector_verdict") or (e.get("line") if e.get("type") == "collector_verdict" else None)
    if isinstance(cv, str) and cv:
        q = line_said(cv, e.get("type", ""), True)
        if q:
            out.append((q, None))
    return out


def stderr_said(lines, rank):
    """(the rank's first verdict line on stderr, its first line that quotes the collector) as Said, or None."""
    own = quote = None
    for ln in lines or []:
        if not isinstance(ln, dict) or str(ln.get("rank")) != str(rank):
            continue
        msg = str(ln.get("msg") or "")
        s = line_said(msg, "stderr", bool(COLLECTOR_MARK.search(msg)))
        if s is None:
            continue
        if own is None:
            own = s
        if quote is None and s.collector:
            quote = s
    return own, quote


def node_view(res, node, cmap, world, skip_init=False):
    """{rank: {"own": Said, "quote": Said or None, "said": Said (what the rank's lead says), "t": time}} of the
    ranks of one node that reported a diagnosis (or, with none, a final verdict), and the node's recovered events.
    skip_init: an init hang (a slow init under load, in a scenario that is not about init) is not the lead; nor is a
    diagnosis of an op before the scenario's hang (job_readers.before_hang)."""
    events = sorted((e for e in res.get(f"events{node}") or [] if isinstance(e, dict) and
                     not (skip_init and e.get("type") == "init_hang") and
                     not (is_diagnosis(e) and before_hang(res.get("scenario"), e.get("verdicts"), res.get("truth")))),
                    key=lambda e: event_time(e) or 0)
    lines = res.get(f"lines{node}") or []
    firsts = {}
    # A rank with no diagnosis of its own (a node whose ranks are not held up) may still say the collector's verdict
    # as it comes (local rank 0).
    for e in live_verdict_events(events) or [e for e in events if e.get("type") == "collector_verdict"]:
        firsts.setdefault(e.get("global_rank"), e)
    out = {}
    for rank, e in firsts.items():
        said = event_said(e, cmap, world)
        own_said = [x for x, v in said if v is not None or not x.collector] or [x for x, _ in said]
        own = own_said[0] if own_said else Said("none", [], [], "", False, e.get("type", ""))

        def quoted(s):
            return s.collector and s.kind not in VAGUE

        quote = next((s for s, _ in said if quoted(s)), None)
        if quote is None:  # a later event of the rank: the collector's verdict came after its own report
            t0 = event_time(e) or 0
            for e2 in events:
                if e2 is e or e2.get("global_rank") != rank or (event_time(e2) or 0) < t0:
                    continue
                quote = next((s for s, _ in event_said(e2, cmap, world) if quoted(s)), None)
                if quote:
                    break
        err_own, err_quote = stderr_said(lines, rank)
        if quote is None and err_quote is not None and err_quote.kind not in VAGUE:
            quote = err_quote
        # A report that leads with the collector's verdict (its node sees only part of the communicator) says that
        # verdict; its own view follows as this node's.
        led = bool(e.get("collector_verdict"))
        lead = quote if (own.kind in VAGUE or led) and quote is not None else own
        out[rank] = {"own": own, "quote": quote, "said": lead, "t": event_time(e), "stderr": err_own}
    recovered = [e for e in events if is_recovery(e)]
    return out, recovered


def is_straggler_event(e):
    """A shim's straggler note ("not a hang"): its type, or a STRAGGLER verdict in an event that is no diagnosis."""
    return isinstance(e, dict) and not is_diagnosis(e) and (e.get("type") == "straggler" or any(
        isinstance(v, dict) and v.get("kind") == "STRAGGLER" for v in e.get("verdicts") or []))


def straggler_view(res, node, cmap):
    """({rank: Said} of each rank's first straggler note on one node, [the node's reports of a hang: its stall,
    mismatch and init-hang events, final verdicts, and verdicts of the collector's it quoted])."""
    events = sorted((e for e in res.get(f"events{node}") or [] if isinstance(e, dict)),
                    key=lambda e: event_time(e) or 0)
    out = {}
    for e in events:
        if is_straggler_event(e) and e.get("global_rank") not in out:
            v = next((v for v in e.get("verdicts") or [] if isinstance(v, dict) and v.get("kind") == "STRAGGLER"),
                     None)
            out[e.get("global_rank")] = said_of(v, cmap, e.get("comm_id"), False, e.get("type", "")) or \
                Said("STRAGGLER", [], ["no verdict"], "", False, e.get("type", ""))
    return out, [e for e in events if is_diagnosis(e) or is_final_verdict(e) or e.get("type") == "collector_verdict"]


def node_words(view):
    """'r0: UNKNOWN -> NOT_JOINED r3 (collector's); r1: ...' in rank order."""
    parts = []
    for rank in sorted(view, key=lambda r: (r is None, r)):
        v = view[rank]
        own, said = v["own"], v["said"]
        s = own.short() if said is own else f"{own.short()} -> {said.short()}"
        parts.append(f"r{rank}: {s}")
    return "; ".join(parts) or "nothing"


# ------------------------------------------------------------------------------------------------- the judgement
def truth_start(scenario, truth, world):
    if scenario in HANG_SCENARIOS:
        return hang_start(scenario, truth, world)
    ts = [t.get("t_depart") for t in (truth or {}).values() if isinstance(t, dict) and
          isinstance(t.get("t_depart"), (int, float))]
    return min(ts) if ts else None


def judge(scenario, res):
    """The row of one scenario's result.json (res: dict, or None when it did not run)."""
    exp = EXPECT.get(scenario, dict(kind=None))
    world = (res or {}).get("world") or 4
    npn = (res or {}).get("nproc_per_node") or world // 2
    label = f"2 nodes x {npn} ranks{' on 1 GPU' if (res or {}).get('one_gpu', True) else ''}: {scenario}"
    kind = exp.get("kind")
    rank = want_rank(exp, world) if kind else None
    expected = f"{kind} r{rank}" if kind else "nothing"
    words = (exp["words"],) if isinstance(exp.get("words"), str) else tuple(exp.get("words") or ())
    if words:
        expected += " " + " or ".join(f'"{w}"' for w in words)
    if exp.get("recovers"):
        expected += ", then the job goes on"
    elif kind == "STRAGGLER":
        expected += " (not a hang), the job ends normally"
    elif exp.get("quiet"):
        expected = "nothing at all (no straggler), the job ends normally"
    row = {"case": label, "scenario": scenario, "expected": expected, "got": "", "rank": "", "secs": "",
           "after_kill": "", "fr": "", "ras": "", "pass": False, "why": [], "nodes": {}, "live": "", "analyze": ""}
    why = row["why"]
    if not isinstance(res, dict):
        row["got"] = "no result.json (the runner failed or did not run)"
        why.append(row["got"])
        return row
    cmap = full_cmap(res)
    want = Said(kind, rank if isinstance(rank, list) else [rank]) if kind else NOTHING

    def right(s, what):
        """Says whether s is the truth; notes why not."""
        if kind is None:
            if s is not None and s.kind is not None:
                why.append(f"{what}: {s.short()}, want nothing")
                return False
            return True
        if s is None or s.kind is None:
            why.append(f"{what}: nothing, want {expected}")
            return False
        if not s.matches(kind, rank, exp.get("also", ())):
            why.append(f"{what}: {s.short()}, want {kind} r{rank}")
            return False
        if words and not any(w in s.text for w in words) and s.where != "stderr":
            why.append(f"{what}: {s.short()} does not say " + " or ".join(f"'{w}'" for w in words))
            return False
        return True

    # (b) the live collector: its first report that is not a suspicion, and its last.
    hist = [h for h in res.get("live_history") or [] if isinstance(h, dict) and isinstance(h.get("report"), dict)]
    skip_init = kind != "INIT_HANG"
    slow_init = [x for x in (
        [e for n in (0, 1) for e in res.get(f"events{n}") or [] if isinstance(e, dict) and e.get("type") == "init_hang"]
        + [h for h in hist if (lead_of(h["report"].get("verdicts")) or {}).get("kind") == "INIT_HANG"])] \
        if skip_init else []
    if slow_init:
        row["notes"] = [f"{len(slow_init)} init-hang report(s) in a scenario not about init (a slow init under "
                        "load?): not taken for the lead"]
    early = [h for h in hist if before_hang(scenario, h["report"].get("verdicts"), res.get("truth"))]
    if early:
        row.setdefault("notes", []).append(
            f"{len(early)} live report(s) of an op before the scenario's hang (its start on the shared GPU): not "
            "taken for the lead")
    # A straggler report is "not a hang": not the lead of a hang scenario's first report (noted; a clean run's last
    # report still judges it).
    strag = [h for h in hist if (lead_of(h["report"].get("verdicts")) or {}).get("kind") == "STRAGGLER"] \
        if kind != "STRAGGLER" and not exp.get("quiet") else []
    if strag:
        row.setdefault("notes", []).append(f"{len(strag)} live report(s) led by a STRAGGLER: not taken for the lead")
    first_h = next((h for h in hist if lead_of(h["report"].get("verdicts")) and h not in early and h not in strag
                    and not (skip_init and lead_of(h["report"].get("verdicts")).get("kind") == "INIT_HANG")), None)
    live_first = said_of(lead_of(first_h["report"].get("verdicts")), cmap) if first_h else NOTHING
    last_doc = res.get("live") if isinstance(res.get("live"), dict) else (hist[-1]["report"] if hist else None)
    live_last = said_of(lead_of((last_doc or {}).get("verdicts")), cmap) if last_doc else NOTHING
    live_last = live_last or NOTHING
    live_first = live_first or NOTHING
    ok_live = right(live_first, "live collector, first report")
    if kind == "STRAGGLER" and live_last.kind is None:
        # The job ended normally: a last report that names nothing is not wrong about a straggler.
        row.setdefault("notes", []).append("the last live report, after the job's end, names nothing")
    elif kind is not None or live_last.kind is not None:
        ok_live = right(live_last, "live collector, last report (after the teardown)") and ok_live
    row["live"] = live_first.short() + ("" if live_last.same(live_first) else f"; last: {live_last.short()}")
    row["rank"] = ",".join(map(str, live_first.ranks)) or "-"
    t0 = truth_start(scenario, res.get("truth"), world)
    if first_h and t0 is not None:
        row["secs"] = f"{first_h['t_seen'] - t0:.1f}"

    # (c) analyze of both folders after the end (during the hang for the scenarios that recover).
    an = res.get("analyze") if isinstance(res.get("analyze"), dict) else None
    after = said_of(lead_of(an.get("verdicts"), an.get("headline")), cmap) if an else None
    after = after or NOTHING
    during_doc = (res.get("analyze_during") or {}).get("analyze") if isinstance(res.get("analyze_during"), dict) \
        else None
    during = said_of(lead_of(during_doc.get("verdicts"), during_doc.get("headline")), cmap) \
        if isinstance(during_doc, dict) else None
    if an is None:
        why.append("analyze after the end failed: " + str(res.get("analyze_error", ""))[:160])
        ok_an, judged = False, None
    elif exp.get("recovers"):
        judged = during or NOTHING
        ok_an = right(judged, "analyze of both folders during the hang")
        if after.kind is not None and not after.same(want):
            why.append(f"analyze after the end: {after.short()}, want nothing (the job went on) or {expected}")
            ok_an = False
        row["analyze"] = f"during the hang: {judged.short()}; after the end: {after.short()}"
        # After the end, what happened is told (issue 24): the story names the culprit.
        if exp.get("story"):
            told, words = story_names(an, exp["story"], rank)
            row["analyze"] += f"; story: {words}"
            if not told:
                why.append(f"analyze after the end: story {words}, want {'/'.join(sorted(exp['story']))} r{rank}")
                ok_an = False
    else:
        judged = after
        ok_an = right(after, "analyze nodeA/ nodeB/ after the end")
        row["analyze"] = after.short()
    row["after_kill"] = row["analyze"]
    equal = judged is not None and live_first.same(judged)
    if not equal:
        why.append(f"the live collector ({live_first.short()}) and analyze ({judged.short() if judged else '-'}) "
                   "differ")

    # (a) each node's shims.
    ok_nodes = True
    recovered = []
    words = {}
    for node in (0, 1):
        name = "AB"[node]
        if kind == "STRAGGLER" or exp.get("quiet"):
            # Not a hang: each rank's straggler note, if any (a node's shims need every stage in sight to judge one),
            # must name the truth (a clean job: none at all), and no stall or mismatch may come.
            sview, sdiag = straggler_view(res, node, cmap)
            ranked = sorted(sview.items(), key=lambda kv: (kv[0] is None, kv[0]))
            words[name] = "; ".join(f"r{r}: {v.short()}" for r, v in ranked) or "nothing"
            row["nodes"][name] = {str(r): {"own": v.short(), "says": v.short(), "collector_quoted": False,
                                           "stderr_lead": v.text[:200]} for r, v in ranked}
            for r, v in ranked:
                if kind is None or not v.matches(kind, rank):
                    ok_nodes = False
                    why.append(f"node {name}, rank {r}: {v.short()}, want " +
                               (f"{kind} r{rank} or no note" if kind else "nothing"))
            if sdiag:
                ok_nodes = False
                e = sdiag[0]
                why.append(f"node {name}: {len(sdiag)} report(s) of a hang in a job that does not hang (rank "
                           f"{e.get('global_rank')}'s {e.get('type')} first)")
            continue
        view, rec = node_view(res, node, cmap, world, skip_init)
        recovered += rec
        words[name] = node_words(view)
        row["nodes"][name] = {str(r): {"own": v["own"].short(), "says": v["said"].short(),
                                       "collector_quoted": bool(v["quote"]),
                                       "stderr_lead": v["stderr"].text[:200] if v["stderr"] else ""}
                              for r, v in view.items()}
        if kind is None:
            bad = [f"r{r}: {v['said'].short()}" for r, v in view.items()]
            if bad:
                ok_nodes = False
                why.append(f"node {name}: {'; '.join(bad)}, want nothing")
            continue
        if not view:
            ok_nodes = False
            why.append(f"node {name}: no rank reported")
            continue
        for r, v in sorted(view.items(), key=lambda kv: (kv[0] is None, kv[0])):
            s = v["said"]
            if not s.matches(kind, rank, exp.get("also", ())):
                ok_nodes = False
                hint = " (UNKNOWN, and no verdict of the collector's quoted)" if s.kind == "UNKNOWN" else ""
                why.append(f"node {name}, rank {r}: leads with {s.short()}{hint}, want {kind} r{rank}")
    if exp.get("exit0"):
        codes = res.get("exit_codes") or []
        if any(c != 0 for c in codes) or not codes:
            why.append(f"agents' exit codes {codes}, want 0 (not a hang: the job ends normally)")
            ok_nodes = False
    if exp.get("recovers"):
        codes = res.get("exit_codes") or []
        if any(c != 0 for c in codes):
            why.append(f"agents' exit codes {codes}, want 0 (the job goes on)")
            ok_nodes = False
        if exp.get("recovered_event") and not recovered:
            why.append("no shim reported 'recovered'")
            ok_nodes = False
    row["got"] = f"live: {row['live']}; node A: {words['A']}; node B: {words['B']}"
    row["pass"] = bool(ok_live and ok_an and equal and ok_nodes)
    row["exit_codes"] = res.get("exit_codes")
    row["ended_by"] = res.get("ended_by")
    return row


def table(rows):
    head = "| scenario | the truth | each node's shims | live collector | `analyze nodeA/ nodeB/` | result |"
    out = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        def says(v):
            return v["says"] if v["own"] == v["says"] else f"{v['own']} -> {v['says']}"

        nodes = "; ".join(f"{n}: {', '.join(f'r{k} ' + says(v) for k, v in d.items()) or 'nothing'}"
                          for n, d in (r.get("nodes") or {}).items()) or r.get("got", "")
        res = "PASS" if r["pass"] else ("info" if r["pass"] is None else "FAIL")
        out.append(f"| {r['scenario']} | {r['expected']} | {nodes} | {r['live']} | {r['analyze']} | {res} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--scenarios", default="", help="the scenarios that should have run (default: every folder)")
    p.add_argument("--rows-dir", default="")
    p.add_argument("--out", default="", help="also write the table (Markdown) here")
    a = p.parse_args()
    names = a.scenarios.split() if a.scenarios else [d for d in os.listdir(a.root)
                                                      if os.path.isdir(os.path.join(a.root, d))]
    names = sorted(set(names), key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s))
    rows = []
    for s in names:
        path = os.path.join(a.root, s, "result.json")
        if not os.path.exists(path) and a.scenarios and not os.path.isdir(os.path.join(a.root, s)):
            continue  # not started (the harness wrote its NOT RUN row)
        res, err = load(path)
        row = judge(s, res)
        if err and res is None:
            row["why"][:1] = [err]
        # Issue 42: a run that says "lower bounds" anywhere fails (the folder's files; result.json's copies).
        folder = os.path.join(a.root, s)
        row["lower_bounds"] = lower_bounds_said(folder, res, TWO_NODE_SAYERS) \
            if res is not None or os.path.isdir(folder) else []
        if row["lower_bounds"]:
            row["pass"] = False
            row["why"].extend(row["lower_bounds"])
        rows.append(row)
        if a.rows_dir:
            os.makedirs(a.rows_dir, exist_ok=True)
            idx = ORDER.index(s) if s in ORDER else 99
            with open(os.path.join(a.rows_dir, f"70-two-nodes-{idx:02d}-{s}.json"), "w") as f:
                json.dump(row, f, indent=1)
    t = table(rows)
    print(t)
    for r in rows:
        for w in r["why"]:
            print(f"  {r['scenario']}: {w}")
        for w in r.get("notes") or []:
            print(f"  {r['scenario']} (note): {w}")
    npass = sum(1 for r in rows if r["pass"])
    print(f"two nodes: {npass} of {len(rows)} scenarios pass")
    if a.out:
        with open(a.out, "w") as f:
            f.write(t + "\n")
    return 0 if rows and npass == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
