"""The grid judge's readers (test/gpu/grid_table.py): the grid's communicators by their ranks, culprits mapped from
comm ranks to global ranks, and the verdicts of the shims' events, the live report and analyze, read defensively (a
missing key or an odd shape raises JudgeError with the reason, never a traceback)."""
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job_readers import blames_transport, caused_by, is_diagnosis, role_of  # noqa: E402,F401
try:  # the scenario table's readers of report times and stall starts, when it imports cleanly
    from scenario_table import parse_time, stall_start
except Exception:  # noqa: BLE001 -- a sibling being edited must not stop this table
    stall_start = None

    def parse_time(s):
        try:
            return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f%z" if "T" in s else "%Y-%m-%d %H:%M:%S.%f %z").timestamp()
        except (TypeError, ValueError):
            return None

CULPRIT = 5
EXIT_TEXT = "exit code 3"
WORLD = frozenset(range(8))
TP03, TP47 = frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})
DP04, DP15, DP26, DP37 = frozenset({0, 4}), frozenset({1, 5}), frozenset({2, 6}), frozenset({3, 7})
GROUPS = {TP03: "TP[0-3]", TP47: "TP[4-7]", DP04: "DP[0,4]", DP15: "DP[1,5]", DP26: "DP[2,6]", DP37: "DP[3,7]",
          WORLD: "world"}
DIAGNOSES = ("stall", "mismatch", "drift", "init_hang")  # event types; is_diagnosis() also leaves suspicions out
RUNS = ["grid_stall", "grid_death", "grid_clean"]


class JudgeError(Exception):
    """A shape the judge cannot read: the row fails with this reason."""


def need(d, key, kind, where):
    """d[key], which must be of `kind`; JudgeError otherwise."""
    if not isinstance(d, dict):
        raise JudgeError(f"{where} is {type(d).__name__}, not an object")
    if key not in d:
        raise JudgeError(f"{where} has no '{key}'")
    v = d[key]
    if not isinstance(v, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise JudgeError(f"{where}.{key} is {type(v).__name__}, not {names}")
    return v


def norm_id(x):
    return x.lower() if isinstance(x, str) else x


class Comms:
    """comm_id -> the global ranks in it, comm rank -> global rank, and analyze's per-rank row."""

    def __init__(self):
        self.ranks = {}  # comm id -> frozenset of global ranks
        self.c2g = {}  # comm id -> {comm rank: global rank}
        self.rows = {}  # comm id -> {global rank: analyze rank row}
        self.issued = {}  # comm id -> sum of issued over its rows (to choose among comms of one rank set)
        self.notes = []

    def add(self, comms, source, rows=False):
        if not isinstance(comms, list):
            raise JudgeError(f"{source}: comms is {type(comms).__name__}, not a list")
        for i, c in enumerate(comms):
            cid = norm_id(need(c, "comm_id", str, f"{source}.comms[{i}]"))
            rs = need(c, "ranks", list, f"{source}.comms[{i}]")
            c2g = self.c2g.setdefault(cid, {})
            gr = set(self.ranks.get(cid, ()))
            for j, r in enumerate(rs):
                g = need(r, "global_rank", int, f"{source}.comms[{i}].ranks[{j}]")
                if isinstance(r.get("comm_rank"), int):
                    c2g.setdefault(r["comm_rank"], g)
                gr.add(g)
                if rows:
                    self.rows.setdefault(cid, {})[g] = r
                    if isinstance(r.get("issued"), int):
                        self.issued[cid] = self.issued.get(cid, 0) + r["issued"]
            self.ranks[cid] = frozenset(gr)

    def add_rank_files(self, rank_files):
        """Comm rank -> global rank from the decoded rank files (header.global_rank, comms[].comm_id and rank), for
        comms the tables above did not have (analyze failed, say). Entries of another shape are skipped."""
        seen = {}
        for d in (rank_files or {}).values() if isinstance(rank_files, dict) else ():
            if not isinstance(d, dict) or not isinstance(d.get("header"), dict):
                continue
            g = d["header"].get("global_rank")
            if not isinstance(g, int) or g < 0:
                continue
            for c in d.get("comms") or []:
                if isinstance(c, dict) and isinstance(c.get("comm_id"), str) and isinstance(c.get("rank"), int):
                    seen.setdefault(norm_id(c["comm_id"]), {})[c["rank"]] = g
        for cid, c2g in seen.items():
            if cid in self.ranks:
                continue
            self.c2g[cid] = c2g
            self.ranks[cid] = frozenset(c2g.values())

    def name(self, cid):
        cid = norm_id(cid)
        if cid not in self.ranks:
            return f"comm {cid} (not in the comm table)"
        rs = self.ranks[cid]
        return GROUPS.get(rs, f"comm {cid} ranks {sorted(rs)}")

    def ids_of(self, rank_set):
        return [cid for cid, rs in self.ranks.items() if rs == rank_set]

    def id_of(self, rank_set):
        """The comm of these global ranks (the busiest when several have them); None when there is none."""
        ids = self.ids_of(rank_set)
        if not ids:
            return None
        if len(ids) > 1:
            note = f"{len(ids)} comms hold ranks {sorted(rank_set)}: the busiest taken"
            if note not in self.notes:
                self.notes.append(note)
        return max(ids, key=lambda c: self.issued.get(c, 0))

    def culprits(self, v):
        """Global ranks a verdict names: culprit objects carry global_rank; plain numbers are comm ranks."""
        out = []
        if not isinstance(v, dict):
            return out
        cid = norm_id(v.get("comm_id"))
        for c in v.get("culprits") or []:
            g = None
            if isinstance(c, dict):
                g = c.get("global_rank")
                if not isinstance(g, int) or g < 0:
                    g = self.c2g.get(cid, {}).get(c.get("comm_rank"))
            elif isinstance(c, int) and not isinstance(c, bool):
                g = self.c2g.get(cid, {}).get(c)
            out.append(g if isinstance(g, int) else f"?{c if not isinstance(c, dict) else c.get('comm_rank')}")
        return out


def desc(v, cm):
    if not isinstance(v, dict):
        return f"unreadable verdict {v!r:.60}"
    cs = cm.culprits(v)
    s = f"{v.get('kind')} r{','.join(map(str, cs))}" if cs else str(v.get("kind"))
    s += f" on {cm.name(v.get('comm_id'))}"
    role = role_of(v)
    if role != "none":
        s += f" [{role}" + (f" of {cm.name(caused_by(v))}" if caused_by(v) else "") + "]"
    return s


def named(v, cm):
    return sorted(g for g in cm.culprits(v) if isinstance(g, int))


def is_lead_notjoined(v, cm, tp47):
    """(ok, reasons) for NOT_JOINED naming exactly rank 5 on TP[4-7]."""
    why = []
    if not isinstance(v, dict):
        return False, ["the verdict is not an object"]
    if v.get("kind") != "NOT_JOINED":
        why.append(f"kind {v.get('kind')}, want NOT_JOINED")
    cs = cm.culprits(v)
    if cs != [CULPRIT]:
        why.append(f"culprits {cs or 'none'}, want [{CULPRIT}]")
    if tp47 is None or norm_id(v.get("comm_id")) != tp47:
        why.append(f"on {cm.name(v.get('comm_id'))}, want TP[4-7]")
    return not why, why


def text_of(v):
    if not isinstance(v, dict):
        return ""
    return json.dumps([v.get("headline"), v.get("summary"), v.get("evidence")])


def stuck(vs):
    return [v for v in vs if isinstance(v, dict) and v.get("kind") == "STUCK_IN_NCCL"]


def comms_of(res, with_live=True):
    cm = Comms()
    an = res.get("analyze")
    if isinstance(an, dict) and "comms" in an:
        cm.add(an["comms"], "analyze", rows=True)
    if with_live:
        for k, lr in enumerate(res.get("live_reports") or []):
            if isinstance(lr, dict) and isinstance(lr.get("report"), dict) and "comms" in lr["report"]:
                cm.add(lr["report"]["comms"], f"live_reports[{k}].report")
    cm.add_rank_files(res.get("rank_files"))
    return cm


def events_of(res):
    evs = need(res, "events", list, "result")
    for i, e in enumerate(evs):
        if not isinstance(e, dict):
            raise JudgeError(f"events[{i}] is {type(e).__name__}, not an object")
    return sorted(evs, key=lambda e: parse_time(e.get("time")) or 0)


def event_vs(e, i):
    vs = e.get("verdicts") or []
    if not isinstance(vs, list):
        raise JudgeError(f"events[{i}].verdicts is {type(vs).__name__}, not a list")
    return vs


def offline_summary(res, cm):
    an = res.get("analyze")
    if not isinstance(an, dict):
        return "analyze gave no JSON: " + str(res.get("analyze_error", ""))[:100]
    vs = an.get("verdicts")
    if not isinstance(vs, list):
        return "analyze: no verdict list"
    s = "; ".join(desc(v, cm) for v in vs[:4]) or "no verdict"
    return s + (f"; +{len(vs) - 4} more" if len(vs) > 4 else "") + f" (analyze exit {res.get('analyze_exit')})"


# ---------------------------------------------------------------------------------------------------- the checks


def group_of(cm, cid):
    """The grid group (its rank set) a communicator id belongs to, or None."""
    rs = cm.ranks.get(norm_id(cid))
    return rs if rs in GROUPS else None


def grid_verdict_faults(vs, cm, whole):
    """What is wrong with a list of the grid stall's verdicts, by the rule of the grid (each is a reason string):
      - no STUCK_IN_NCCL, no verdict that blames the transport;
      - on TP[4-7]: NOT_JOINED naming exactly rank 5, marked initiating;
      - on DP[0,4], DP[2,6], DP[3,7] and TP[0-3]: a cascade caused by TP[4-7];
      - on DP[1,5]: NOT_JOINED naming rank 5, or a cascade caused by TP[4-7];
      - on no other communicator (the world has no op outstanding).
    whole (a view of the whole job: the live report, analyze): also the lead verdict is TP[4-7]'s initiating
    NOT_JOINED r5, each of DP[0,4], DP[2,6], DP[3,7] has a cascade verdict, and DP[1,5] has a verdict."""
    why = []
    seen = {}
    for v in vs:
        if not isinstance(v, dict):
            why.append(f"unreadable verdict {v!r:.60}")
            continue
        g = group_of(cm, v.get("comm_id"))
        seen.setdefault(g, []).append(v)
        d = desc(v, cm)
        if v.get("kind") == "STUCK_IN_NCCL":
            why.append(f"STUCK_IN_NCCL: {d}")
        if blames_transport(v):
            why.append(f"blames the transport: {d}")
        cause = group_of(cm, caused_by(v)) if caused_by(v) else None
        is_cascade = role_of(v) == "cascade" and cause == TP47
        if g == TP47:
            ok, reasons = is_lead_notjoined(v, cm, cm.id_of(TP47))
            if not ok or role_of(v) != "initiating":
                why.append(f"TP[4-7]: {d}, want NOT_JOINED r5 marked initiating" +
                           (f" ({', '.join(reasons)})" if reasons else ""))
        elif g in (DP04, DP26, DP37, TP03):
            if not is_cascade:
                why.append(f"{GROUPS[g]}: {d}, want a cascade caused by TP[4-7]")
        elif g == DP15:
            if not (is_cascade or (v.get("kind") == "NOT_JOINED" and cm.culprits(v) == [CULPRIT])):
                why.append(f"DP[1,5]: {d}, want NOT_JOINED r5 or a cascade of TP[4-7]")
        else:
            why.append(f"a verdict on {cm.name(v.get('comm_id'))}, where nothing waits: {d}")
    if whole:
        v0 = next((v for v in vs if isinstance(v, dict)), None)
        if v0 is None:
            why.append("no verdict")
        elif not (group_of(cm, v0.get("comm_id")) == TP47 and is_lead_notjoined(v0, cm, cm.id_of(TP47))[0]
                  and role_of(v0) == "initiating"):
            why.append(f"the lead verdict is {desc(v0, cm)}, want NOT_JOINED r5 on TP[4-7], initiating")
        for g in (DP04, DP26, DP37):
            if not any(role_of(v) == "cascade" for v in seen.get(g, [])):
                why.append(f"{GROUPS[g]} has no cascade verdict (its rank waits there for a peer held up in TP[4-7])")
        if not seen.get(DP15):
            why.append("DP[1,5] has no verdict (rank 1 waits there for rank 5, which never issued it)")
    return why


def stream_order_reached(groups):
    """The ground truth of GPU-reached per group of one rank, from the grid's stream order: each rank's GPU runs TP
    #1, DP #1, TP #2, DP #2, ... (work.wait() chains the two NCCL streams through the current stream), so it is
    inside exactly the first op of that order that has not completed, if the rank issued it; everything before it
    was reached. groups: {"tp": {"issued", "completed_prefix"}, "dp": {...}} -> {"tp": reached, "dp": reached}.
    A rank's truth may carry "reached" itself (a later script): then that is taken."""
    out = {}
    order = ("tp", "dp")
    head = None  # (seq, index in the order) of the first op not completed
    for i, g in enumerate(order):
        tg = groups.get(g) or {}
        nxt = int(tg["completed_prefix"]) + 1
        if head is None or (nxt, i) < head:
            head = (nxt, i)
    for i, g in enumerate(order):
        tg = groups.get(g) or {}
        if "reached" in tg:
            out[g] = int(tg["reached"])
            continue
        prefix, issued = int(tg["completed_prefix"]), int(tg["issued"])
        out[g] = prefix + (1 if head == (prefix + 1, i) and issued > prefix else 0)
    return out


def rank_file_comms(res):
    """{global rank: [comm JSON of its rank file]} from the decoded rank files."""
    out = {}
    files = res.get("rank_files")
    if not isinstance(files, dict):
        raise JudgeError("result has no decoded rank files ('rank_files')")
    for path, d in files.items():
        if not isinstance(d, dict) or not isinstance(d.get("header"), dict):
            continue
        g = d["header"].get("global_rank")
        if isinstance(g, int) and g >= 0:
            out.setdefault(g, []).extend(c for c in d.get("comms") or [] if isinstance(c, dict))
    return out
