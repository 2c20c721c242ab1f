"""Readers the GPU tables share (test/gpu/*_table.py): report times, which report events are suspicions, stragglers
or diagnoses, verdict roles and culprits as global ranks, every verdict a job said wherever it said it, and when each
hang scenario's hang began by the scripts' own ground truth. Defensive: an odd shape gives None or an empty list,
never a traceback (the tables turn that into a failing row with the reason).

Tolerance for what other sessions add: an early suspicion is any event whose type, kind, verdict, stage, state or
status names "suspect" (or has suspected: true), and a verdict whose kind names "SUSPECT"; a straggler is a verdict of
kind STRAGGLER, in any event type. Roles come from the verdict's role and caused_by_comm fields (analyze) or, where the
verdict JSON has none (the shims' events, the live report), from its headline's words ("stalled first", "cascade:
waits because of communicator 0x...")."""
import datetime
import json
import re
import time

DIAGNOSES = ("stall", "mismatch", "drift", "init_hang")
SUSPECT_FIELDS = ("type", "kind", "verdict", "stage", "state", "status", "level")
RECOVERED_TYPES = ("recovered",)


def load(path):
    """A result.json (or any JSON object file): (object, None), or (None, why it cannot be had)."""
    try:
        with open(path) as f:
            d = json.load(f)
        return (d, None) if isinstance(d, dict) else (None, f"{path} holds {type(d).__name__}, not an object")
    except OSError as e:
        return None, f"no {path} ({e.strerror})"
    except ValueError as e:
        return None, f"{path} is not JSON ({e})"


def parse_time(s):
    """The report's wall time, RFC 3339 ('2026-11-30T05:51:02.123+00:00'; before: '2026-11-30 05:51:02.123 +0000'), as seconds since the epoch; None if unreadable."""
    if not isinstance(s, str):
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%d %H:%M:%S.%f %z", "%Y-%m-%d %H:%M:%S %z"):
        try:
            return datetime.datetime.strptime(s, fmt).timestamp()
        except ValueError:
            continue
    return None


# "[ncclwatch rank 3 pid 9179 2026-12-01T18:23:56.609+00:00] error: ..." (RFC 3339: NCCLWATCH_LOG_FORMAT=full, which
# run_scenario.py sets; the default "[ncclwatch r3] ..." has no time), or the form before it,
# "[ncclwatch 2026-12-01 18:23:56.609 pid 9179] error: ..." (local time, no zone), in the logs of older runs.
LOG_LINE = re.compile(r"^\[ncclwatch (?:rank \S+ pid (?P<pid>\d+) (?P<iso>\d{4}-\d\d-\d\dT[\d:.]+[+-]\d\d:?\d\d)|"
                      r"(?P<local>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) pid (?P<pid0>\d+))\] (?P<level>\w+): (?P<msg>.*)$")


def log_lines(text, word):
    """(epoch seconds, pid, message) of the shim's stderr lines whose message holds `word` (case-insensitive). The
    shim's log stamps RFC 3339 with the zone (the older form: local time, read back with this machine's zone)."""
    out = []
    for ln in (text or "").splitlines():
        m = LOG_LINE.match(ln.strip())
        if not m or word.lower() not in m.group("msg").lower():
            continue
        try:
            if m.group("iso"):
                t = datetime.datetime.fromisoformat(m.group("iso")).timestamp()
            else:
                base, _, frac = m.group("local").partition(".")
                t = time.mktime(time.strptime(base, "%Y-%m-%d %H:%M:%S")) + (float("0." + frac) if frac else 0.0)
        except ValueError:
            t = None
        out.append((t, int(m.group("pid") or m.group("pid0")), m.group("msg")))
    return out


def _has_suspect(x):
    return isinstance(x, str) and "suspect" in x.lower()


def is_suspicion(e):
    """An early-suspicion event (issue 13 item 5), whatever its exact spelling."""
    if not isinstance(e, dict):
        return False
    if e.get("suspected") is True or any(_has_suspect(e.get(k)) for k in SUSPECT_FIELDS):
        return True
    return any(isinstance(v, dict) and _has_suspect(v.get("kind")) for v in e.get("verdicts") or [])


def is_diagnosis(e):
    """A stall, mismatch or init_hang report (not a suspicion, not a straggler note)."""
    return isinstance(e, dict) and e.get("type") in DIAGNOSES and not is_suspicion(e)


def before_hang(scenario, verdicts, truth):
    """Whether a diagnosis (its verdicts, lead first) is about an op before the scenario's hang, so not about the hang
    under test. A pipeline on one shared GPU starts seconds behind its CPUs, and a first send/recv may wait past the
    timeout (a stall of its own, kept and noted, not judged): its hang is the departing stage's step s, whose sends
    and receives are #s+1. Only the pipeline says its op; before its stage departed (no t_depart yet) every
    diagnosis is before it."""
    if scenario != "pipeline":
        return False
    steps = [t.get("step") for t in (truth or {}).values() if isinstance(t, dict) and "t_depart" in t and
             isinstance(t.get("step"), int)]
    if not steps:
        return True
    lead = next((v for v in verdicts or [] if isinstance(v, dict)), None)
    seq = lead.get("seq") if lead else None
    return isinstance(seq, int) and seq < min(steps) + 1


def is_final_verdict(e):
    """The verdict a rank's shim gave as its process was ended (SIGTERM/SIGINT from the launcher: type 'final')."""
    return isinstance(e, dict) and e.get("type") == "final" and bool(e.get("verdicts") or e.get("collector_verdict"))


def live_verdict_events(events):
    """What the shims said while the job ran: its diagnoses, or, when the launcher ended the job before any timeout
    (a dying rank: torchrun's SIGTERM to the others 0.3 s later), their final verdicts at that SIGTERM."""
    diag = [e for e in events if is_diagnosis(e)]
    return diag or [e for e in events if is_final_verdict(e)]


def is_recovery(e):
    if not isinstance(e, dict):
        return False
    return e.get("type") in RECOVERED_TYPES or any(
        isinstance(e.get(k), str) and "recover" in e[k].lower() for k in SUSPECT_FIELDS)


def event_time(e):
    return parse_time(e.get("time")) if isinstance(e, dict) else None


def events_of(res):
    """The result's report events (dicts), by time; [] when absent or of another shape."""
    evs = res.get("events") if isinstance(res, dict) else None
    if not isinstance(evs, list):
        return []
    return sorted((e for e in evs if isinstance(e, dict)), key=lambda e: event_time(e) or 0)


def norm_id(x):
    return x.lower() if isinstance(x, str) else x


def comm_rank_map(res):
    """{(comm id, comm rank): global rank} from the decoded rank files (header.global_rank, comms[].rank) and from
    analyze's comm table."""
    m = {}
    files = res.get("rank_files") if isinstance(res, dict) else None
    for d in (files or {}).values() if isinstance(files, dict) else ():
        if not isinstance(d, dict) or not isinstance(d.get("header"), dict):
            continue
        g = d["header"].get("global_rank")
        if not isinstance(g, int) or g < 0:
            continue
        for c in d.get("comms") or []:
            if isinstance(c, dict) and isinstance(c.get("rank"), int):
                m[(norm_id(c.get("comm_id")), c["rank"])] = g
    an = res.get("analyze") if isinstance(res, dict) else None
    for c in (an or {}).get("comms") or [] if isinstance(an, dict) else ():
        if not isinstance(c, dict):
            continue
        for r in c.get("ranks") or []:
            if isinstance(r, dict) and isinstance(r.get("comm_rank"), int) and isinstance(r.get("global_rank"), int):
                m.setdefault((norm_id(c.get("comm_id")), r["comm_rank"]), r["global_rank"])
    return m


def culprits_global(v, cmap, comm_id=None):
    """(global ranks a verdict names, the culprits that could not be placed). Culprit objects (analyze) carry their
    global rank; plain numbers (the shims' events, the live report) are comm ranks."""
    named, unknown = set(), []
    if not isinstance(v, dict):
        return [], ["not a verdict"]
    cid = norm_id(v.get("comm_id") or comm_id)
    for c in v.get("culprits") or []:
        cr = None
        if isinstance(c, dict):
            g = c.get("global_rank")
            if isinstance(g, int) and not isinstance(g, bool) and g >= 0:
                named.add(g)
                continue
            cr = c.get("comm_rank")
        elif isinstance(c, int) and not isinstance(c, bool):
            cr = c
        g = cmap.get((cid, cr)) if isinstance(cr, int) else None
        if g is None:
            unknown.append(f"comm rank {cr}" if isinstance(cr, int) else repr(c)[:30])
        else:
            named.add(g)
    return sorted(named), unknown


def text_of(v):
    if not isinstance(v, dict):
        return ""
    return json.dumps([v.get("headline"), v.get("summary"), v.get("evidence")])


def role_of(v):
    """initiating, cascade or none: the verdict's own role field, else its headline's words."""
    if not isinstance(v, dict):
        return "none"
    if v.get("role") in ("initiating", "cascade"):
        return v["role"]
    if v.get("role") == "none":
        return "none"
    h = str(v.get("headline") or "")
    if "(cascade" in h:
        return "cascade"
    if "stalled first" in h:
        return "initiating"
    return "none"


CAUSED_BY = re.compile(r"because of communicator (0x[0-9a-fA-F]+)")


def caused_by(v):
    """The communicator a cascade verdict waits because of (normalised id), or None."""
    if not isinstance(v, dict):
        return None
    if v.get("caused_by_comm"):
        return norm_id(v["caused_by_comm"])
    m = CAUSED_BY.search(str(v.get("headline") or ""))
    return norm_id(m.group(1)) if m else None


TRANSPORT_BLAME = re.compile(r"transport (?:is|may be|looks) suspect|suspect[^.;]{0,40}transport|blam\w*[^.;]{0,30}"
                             r"transport", re.I)


def blames_transport(v):
    return bool(TRANSPORT_BLAME.search(text_of(v)))


def all_verdicts(res):
    """Every verdict a job said, wherever: [(source, epoch time or None, verdict, event or None)]. Sources: 'event'
    (a shim's .report.json event), 'live' (the embedded live collector's live-report.json), 'analyze@step' (analyze
    of the live folder while the job ran, run_scenario.py --analyze-at-step), 'analyze' (after the end)."""
    out = []
    for e in events_of(res):
        for v in e.get("verdicts") or []:
            if isinstance(v, dict):
                out.append(("event", event_time(e), v, e))
    for lr in res.get("live_reports") or [] if isinstance(res, dict) else ():
        rep = lr.get("report") if isinstance(lr, dict) else None
        if isinstance(rep, dict):
            for v in rep.get("verdicts") or []:
                if isinstance(v, dict):
                    out.append(("live", parse_time(rep.get("time")), v, None))
    snap = res.get("analyze_at_step") if isinstance(res, dict) else None
    if isinstance(snap, dict) and isinstance(snap.get("analyze"), dict):
        for v in snap["analyze"].get("verdicts") or []:
            if isinstance(v, dict):
                out.append(("analyze@step", snap.get("t"), v, None))
    an = res.get("analyze") if isinstance(res, dict) else None
    if isinstance(an, dict):
        for v in an.get("verdicts") or []:
            if isinstance(v, dict):
                out.append(("analyze", None, v, None))
    return out


# ----------------------------------------------------------------------------------- the hang scenarios' ground truth
# examples/hang_scenarios.py writes, per rank, truth-rank<R>.json with time.time() at: t_init_start (before
# init_process_group), t_loop_start, t_depart (the departing rank at its departure; every rank just before the
# mismatched op), t_loop_end (out of the training loop, before the final synchronize), t_done (past it). When the
# hang began, by scenario (None: no hang, or the truth does not tell yet):
#   skip, grad_accum          the earliest t_loop_end of a rank that never got past it (no t_done): it issued the op
#                             that never completes in its last step, and waits from there (live: any rank's);
#   uneven                    the last rank's t_depart (it leaves the epoch; the others issue the op it never will
#                             within one step);
#   validation                rank 0's t_depart (the others wait in the next all_reduce from then on);
#   type_mismatch             the latest t_depart (the mismatched op, once every rank issued it);
#   init_hang                 the earliest t_init_start of the ranks that entered init on time (all but the last).
HANG_SCENARIOS = ("skip", "uneven", "type_mismatch", "init_hang", "validation", "grad_accum")


def story_names(an, kinds, rank):
    """Whether `analyze --json`'s story (what happened and was over by the end, lib/report/story.h) has an entry of
    one of `kinds` naming global rank `rank`; (ok, words) where words is what it said."""
    story = (an or {}).get("story") if isinstance(an, dict) else None
    if not isinstance(story, list) or not story:
        return False, "no story"
    said = [f"{e.get('kind')} {e.get('culprits')}" for e in story if isinstance(e, dict)]
    ok = any(isinstance(e, dict) and e.get("kind") in kinds and rank in (e.get("culprits") or []) for e in story)
    if ok and isinstance(an.get("headline"), str) and not an.get("verdicts"):
        ok = an["headline"].startswith(str(story[0].get("line", "")))
    return ok, "; ".join(said)


def _times(truth, key, ranks=None):
    out = []
    for r, t in (truth or {}).items():
        if not isinstance(t, dict) or (ranks is not None and str(r) not in ranks):
            continue
        x = t.get(key)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            out.append(x)
    return out


def hang_start(scenario, truth, nproc, final=True):
    """Epoch seconds the scenario's hang began, from the ranks' own truth files ({rank: dict}); None if not known.
    final=False (while the job runs) does not wait for the ranks' t_done to tell the waiting ranks apart."""
    if not isinstance(truth, dict):
        return None
    if scenario == "uneven":
        ts = _times(truth, "t_depart", {str(nproc - 1)})
        return ts[0] if ts else None
    if scenario in ("skip", "grad_accum"):
        waiting = {r for r, t in truth.items() if isinstance(t, dict) and "t_done" not in t} if final else None
        ts = _times(truth, "t_loop_end", waiting)
        return min(ts) if ts else None
    if scenario == "validation":
        ts = _times(truth, "t_depart", {"0"})
        return ts[0] if ts else None
    if scenario == "type_mismatch":
        ts = _times(truth, "t_depart")
        return max(ts) if ts and (not final or len(ts) >= nproc) else None
    if scenario == "init_hang":
        ts = _times(truth, "t_init_start", {str(r) for r in range(max(nproc - 1, 0))})
        return min(ts) if ts else None
    return None
