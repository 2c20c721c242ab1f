"""The grid judge's readers (test/gpu/grid_table.py): the grid's communicators by their ranks, culprits mapped from
comm ranks to global ranks, and the verdicts of the shims' events, the live report and analyze, read defensively (a
missing key or an odd shape raises JudgeError with the reason, never a traceback)."""
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:  # the scenario table's readers of report times and stall starts, when it imports cleanly
    from scenario_table import parse_time, stall_start
except Exception:  # noqa: BLE001 -- a sibling being edited must not stop this table
    stall_start = None

    def parse_time(s):
        try:
            return datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f %z").timestamp()
        except (TypeError, ValueError):
            return None

CULPRIT = 5
EXIT_TEXT = "exit code 3"
WORLD = frozenset(range(8))
TP03, TP47 = frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})
DP04, DP15, DP26, DP37 = frozenset({0, 4}), frozenset({1, 5}), frozenset({2, 6}), frozenset({3, 7})
GROUPS = {TP03: "TP[0-3]", TP47: "TP[4-7]", DP04: "DP[0,4]", DP15: "DP[1,5]", DP26: "DP[2,6]", DP37: "DP[3,7]",
          WORLD: "world"}
DIAGNOSES = ("stall", "mismatch", "init_hang")
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
    if v.get("role") not in (None, "none"):
        s += f" [{v['role']}" + (f" of {cm.name(v['caused_by_comm'])}" if v.get("caused_by_comm") else "") + "]"
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
