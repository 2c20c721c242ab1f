#!/usr/bin/env python3
"""The GPU tables' parsers on recorded and derived inputs, without a GPU (run by test/gpu/selftest.sh).

    selftest_parsers.py WORK_DIR [CALL_COST_FAKE SHIM_SO]

Recorded inputs (test/gpu/fixtures/, cut down from one H200 run of test/gpu/run.sh, build af4e699, 2026-12-01):
the 2x4 grid's stall (format 1.3 rank files; STUCK_IN_NCCL on three communicators, the transport blamed) and FSDP2 with
rank 0 in a 15 s evaluate(). Derived from them: the same grid with the verdicts the issue wants, and with format 1.4
counts (exact, lower bounds, wrong claims); suspicion and straggler results in the shapes run_scenario.py writes; the
profiler A/B's raw outputs. Each check asserts what the judge must say. Given the fake-NCCL call_cost and the shim,
two call_cost processes run the 2-rank in-process A/B and their output goes through bench/gpu_profiler_ab.py's parser
(its printf format and the parser's regular expression must agree). Prints one line per failed check; exits 1 if any.
"""
import copy
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "bench"))
import framework_table  # noqa: E402
import grid_table  # noqa: E402
import gpu_profiler_ab  # noqa: E402
import issue41_summary  # noqa: E402
import job_readers as jr  # noqa: E402
import scenario_table  # noqa: E402
import straggler_table  # noqa: E402
import suspect_table  # noqa: E402
import two_nodes_table  # noqa: E402
from grid_readers import TP47, comms_of, stream_order_reached  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"FAIL: {what}")


def fixture(name):
    with open(os.path.join(HERE, "fixtures", name)) as f:
        return json.load(f)


def grid_row(check_fn, res):
    row = {"why": [], "got": "", "rank": "", "secs": "", "after_kill": "", "pass": False}
    try:
        check_fn(row, res)
    except grid_table.JudgeError as e:
        row["why"].append(f"cannot judge: {e}")
    return row


def fixed_grid(res):
    """The recorded grid with the verdicts the issue wants: every STUCK_IN_NCCL becomes a cascade of TP[4-7]."""
    res = copy.deepcopy(res)
    tp47 = comms_of(res).id_of(TP47)

    def fix(vs, with_role):
        for v in vs:
            if v.get("kind") == "STUCK_IN_NCCL":
                v["kind"] = "GPU_NOT_REACHED"
                v["headline"] = f"proven not reached (cascade: waits because of communicator {tp47})"
                if with_role:
                    v["role"], v["caused_by_comm"] = "cascade", tp47
    for e in res["events"]:
        fix(e["verdicts"], False)
    for lr in res["live_reports"]:
        fix(lr["report"]["verdicts"], False)
    fix(res["analyze"]["verdicts"], True)
    return res, tp47


def with_counts(res, source, exact, bump=None):
    """Format 1.4 counts in every rank file's grid comms: the truth (stream order), optionally bumped."""
    res = copy.deepcopy(res)
    cm = comms_of(res, with_live=False)
    for d in res["rank_files"].values():
        g = d["header"]["global_rank"]
        t = res["truth"][str(g)]["groups"]
        reached = stream_order_reached(t)
        for c in d["comms"]:
            rs = cm.ranks.get(jr.norm_id(c["comm_id"]))
            for name, tg in t.items():
                if rs == frozenset(tg["ranks"]):
                    c.update(gpu_source=source, progress_exact=exact, coll_issued=tg["issued"],
                             coll_reached=reached[name], coll_completed=tg["completed_prefix"], coll_unreached=0,
                             coll_uncompleted=0)
                    if bump and bump[0] == g and bump[1] == name:
                        c.update(bump[2])
    return res


def test_grid():
    rec = fixture("grid_stall_h200_af4e699.json")
    r = grid_row(grid_table.check_stall_live, rec)
    check(not r["pass"] and any("STUCK_IN_NCCL" in w for w in r["why"]), f"grid live, recorded: {r['why']}")
    r = grid_row(grid_table.check_stall_offline, rec)
    check(not r["pass"] and any("blames the transport" in w for w in r["why"]) and
          any("DP[0,4] has no cascade verdict" in w for w in r["why"]), f"grid offline, recorded: {r['why']}")
    r = grid_row(grid_table.check_stall_live_report, rec)
    check(not r["pass"] and any("STUCK_IN_NCCL" in w for w in r["why"]), f"grid live report, recorded: {r['why']}")
    r = grid_row(grid_table.check_stall_truth, rec)
    check(r["pass"] and "16 absent (format < 1.4) lower bound" in r["got"] and "short of the truth by up to 1" in
          r["got"], f"grid truth, recorded: {r['got']}")

    good, tp47 = fixed_grid(rec)
    for fn in (grid_table.check_stall_live, grid_table.check_stall_live_report, grid_table.check_stall_offline):
        r = grid_row(fn, good)
        check(r["pass"], f"grid {fn.__name__}, the verdicts the issue wants: {r['why']}")
    # The initiating verdict not marked so: a fault, live and after the end.
    bad = copy.deepcopy(good)
    for v in bad["analyze"]["verdicts"]:
        if v.get("role") == "initiating":
            v["role"] = "none"
    r = grid_row(grid_table.check_stall_offline, bad)
    check(not r["pass"] and any("initiating" in w for w in r["why"]), f"grid offline, no initiating: {r['why']}")
    # A suspicion first in time is not the first diagnosis, but its verdicts obey the same rule.
    sus = copy.deepcopy(good)
    first = min(sus["events"], key=lambda e: e["time"])
    s_ev = dict(copy.deepcopy(first), type="suspected", time=first["time"].replace(":31.", ":25."))
    sus["events"].append(s_ev)
    r = grid_row(grid_table.check_stall_live, sus)
    check(r["pass"] and "rank 4's stall" in r["got"], f"grid live with a benign suspicion first: {r['why']}")
    s_ev["verdicts"] = [dict(s_ev["verdicts"][0], kind="STUCK_IN_NCCL")]
    r = grid_row(grid_table.check_stall_live, sus)
    check(not r["pass"] and any("suspected" in w and "STUCK_IN_NCCL" in w for w in r["why"]),
          f"grid live, a suspicion saying STUCK_IN_NCCL: {r['why']}")

    exact = with_counts(rec, "nccl-profiler", True)
    r = grid_row(grid_table.check_stall_truth, exact)
    check(r["pass"] and "16 nccl-profiler exact" in r["got"], f"grid truth, exact and right: {r['got']} {r['why']}")
    wrong = with_counts(rec, "nccl-profiler", True, (4, "tp", {"coll_reached": 10}))
    r = grid_row(grid_table.check_stall_truth, wrong)
    check(not r["pass"] and any("r4 tp: reached 10 (truth 11, claimed exact)" in w for w in r["why"]),
          f"grid truth, an exact claim one short: {r['why']}")
    low = with_counts(rec, "cuda-events", False, (0, "dp", {"coll_reached": 10}))
    r = grid_row(grid_table.check_stall_truth, low)
    check(r["pass"] and "reached (a lower bound) short of the truth by up to 1" in r["got"],
          f"grid truth, a reached lower bound: {r}")
    stale = with_counts(rec, "cuda-events", False, (0, "dp", {"coll_reached": 9, "coll_completed": 9}))
    r = grid_row(grid_table.check_stall_truth, stale)
    check(not r["pass"] and any("did not catch up" in w for w in r["why"]),
          f"grid truth, a completed lower bound that did not catch up: {r['why']}")
    over = with_counts(rec, "cuda-events", False, (0, "dp", {"coll_completed": 11}))
    r = grid_row(grid_table.check_stall_truth, over)
    check(not r["pass"] and any("must not pass it" in w for w in r["why"]), f"grid truth, past the truth: {r['why']}")
    unr = with_counts(rec, "nccl-profiler", True, (6, "dp", {"coll_unreached": 10}))
    r = grid_row(grid_table.check_stall_truth, unr)
    check(not r["pass"] and any("coll_unreached 10" in w for w in r["why"]), f"grid truth, false unreached: {r}")
    # The stream order: rank 0 waits in DP #11 (TP #11 completed), rank 4 in TP #11, rank 5 issued neither.
    check(stream_order_reached({"tp": {"issued": 20, "completed_prefix": 11}, "dp": {"issued": 20,
                                                                                   "completed_prefix": 10}}) ==
          {"tp": 11, "dp": 11}, "stream order, rank 0")
    check(stream_order_reached({"tp": {"issued": 20, "completed_prefix": 10}, "dp": {"issued": 20,
                                                                                   "completed_prefix": 10}}) ==
          {"tp": 11, "dp": 10}, "stream order, rank 4")
    check(stream_order_reached({"tp": {"issued": 10, "completed_prefix": 10}, "dp": {"issued": 10,
                                                                                   "completed_prefix": 10}}) ==
          {"tp": 10, "dp": 10}, "stream order, rank 5")
    check(not any(jr.is_suspicion(e) for e in rec["events"]), "a stall whose headline says 'suspect' is no suspicion")


def test_fsdp():
    rec = fixture("fsdp2_eval_h200_af4e699.json")
    js, why = framework_table.judge_eval(rec)
    check(not why and js["rank"] == "0", f"fsdp2_eval, recorded: {why}")
    early = copy.deepcopy(rec)
    t = rec["truth"]["0"]["eval_start"] - 3
    early["events"].insert(0, {"type": "suspected", "global_rank": 1, "file": "x", "comm_id": "0x1",
                               "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + ".000 +0000"})
    js, why = framework_table.judge_eval(early)
    check(any("false suspicion before" in w for w in why), f"fsdp2_eval, a suspicion before the eval: {why}")
    three = dict(copy.deepcopy(rec), nproc=3)
    _, why = framework_table.judge_eval(three)
    check(any("want 4" in w for w in why), f"fsdp2_eval at 3 ranks: {why}")


def stamp(t):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d} +0000"


def suspect_res(scn, secs, ev_type="suspected", recovered=False, timeout=60, extra=None):
    t0 = 1796120000.0
    truth = {str(r): {"rank": r, "t_init_start": t0 - 20, "t_loop_start": t0 - 5} for r in range(4)}
    if scn == "skip":
        for r in range(3):
            truth[str(r)]["t_loop_end"] = t0 + 0.01 * r
        truth["3"].update(t_depart=t0 - 0.6, t_loop_end=t0, t_done=t0 + 0.1)
    elif scn == "validation":
        truth["0"].update(t_depart=t0, t_back=t0 + 15)
    events = []
    if secs is not None:
        e = {"type": ev_type, "global_rank": 1, "comm_id": "0xab", "file": "r1", "time": stamp(t0 + secs),
             "verdicts": [{"kind": "NOT_JOINED", "comm_id": "0xab", "culprits": [3]}]}
        e.update(extra or {})
        events.append(e)
    if recovered:
        events.append({"type": "recovered", "global_rank": 1, "comm_id": "0xab", "time": stamp(t0 + 15.5)})
    return {"scenario": scn, "timeout_s": timeout, "nproc": 4, "truth": truth, "events": events, "exit_code": 0,
            "ended_by": "itself", "rank_files": {}, "log_suspicions": []}


def test_suspect():
    T = suspect_table.judge
    js, why = T("skip", suspect_res("skip", 6.2), 10)
    check(not why and js["secs"] == "6.2", f"suspicion 6.2 s after the hang: {why} {js}")
    js, why = T("skip", suspect_res("skip", 6.2, ev_type="stall", extra={"stage": "suspected"}), 10)
    check(not why, f"a stall event marked stage=suspected is a suspicion: {why}")
    _, why = T("skip", suspect_res("skip", 12.5), 10)
    check(any("want within 10" in w for w in why), f"suspicion after 12.5 s: {why}")
    _, why = T("skip", suspect_res("skip", -2.0), 10)
    check(any("false suspicion" in w for w in why), f"suspicion before the hang: {why}")
    _, why = T("skip", suspect_res("skip", None), 10)
    check(any("no suspicion" in w for w in why), f"no suspicion: {why}")
    _, why = T("skip", suspect_res("skip", 5.0, timeout=20), 10)
    check(any("default 60" in w for w in why), f"a wave not at 60 s: {why}")
    _, why = T("validation", suspect_res("validation", 5.1, recovered=True), 10)
    check(not why, f"validation suspected and recovered: {why}")
    _, why = T("validation", suspect_res("validation", 5.1), 10)
    check(any("recovered" in w for w in why), f"validation without recovery: {why}")
    tr = suspect_res("skip", None)["truth"]
    check(abs(jr.hang_start("skip", tr, 4) - 1796120000.0) < 1e-6, "hang_start skip: the earliest waiting rank")
    check(jr.hang_start("uneven", {"3": {"t_depart": 5.0}}, 4) == 5.0, "hang_start uneven")
    check(jr.hang_start("init_hang", {"0": {"t_init_start": 3.0}, "1": {"t_init_start": 2.0},
                                      "3": {"t_init_start": 60.0}}, 4) == 2.0, "hang_start init_hang")
    check(jr.hang_start("type_mismatch", {str(r): {"t_depart": float(r)} for r in range(3)}, 4) is None,
          "hang_start type_mismatch waits for every rank's departure")
    check(jr.hang_start("clean", tr, 4) is None, "hang_start: no hang in a clean run")
    text = "[ncclwatch 2026-12-01 10:28:31.650 pid 77] warning: SUSPECTED stall on 0xab\nother"
    lines = jr.log_lines(text, "suspect")
    check(len(lines) == 1 and lines[0][1] == 77 and lines[0][0] is not None, f"log_lines: {lines}")


def straggler_res(named=3, source="analyze@step", t_rel=None):
    t0 = 1796120000.0
    truth = {str(r): {"rank": r, "late_rank": 3, "late_ms": 20, "step": 80, "done": True,
                      "t_step": [t0 + 0.03 * k + (0.03 if k >= 50 else 0) * 100 for k in range(80)],
                      "t_hold": t0 + 1.5, "t_resume": t0 + 4.5} for r in range(4)}
    v = {"kind": "STRAGGLER", "comm_id": "0xab", "culprits": [{"comm_rank": named, "global_rank": named}]}
    res = {"nproc": 4, "truth": truth, "events": [], "exit_code": 0, "ended_by": "itself", "rank_files": {},
           "analyze": {"verdicts": [], "comms": []}, "analyze_exit": 0}
    if source == "analyze@step":
        res["analyze_at_step"] = {"step": 50, "t": t0 + 2.0, "analyze": {"verdicts": [v]}}
    elif source == "event":
        res["events"].append({"type": "straggler", "time": stamp(t0 + t_rel), "comm_id": "0xab",
                              "verdicts": [dict(v, culprits=[named])]})
        res["rank_files"] = {"f": {"header": {"global_rank": 0}, "comms": [{"comm_id": "0xab", "rank": 0}]}}
        for r in range(4):
            res["rank_files"][f"f{r}"] = {"header": {"global_rank": r}, "comms": [{"comm_id": "0xab", "rank": r}]}
    return res


def test_straggler(work):
    J = straggler_table.judge_straggler
    js, why = J(straggler_res(), 50)
    check(not why and js["rank"] == "3", f"straggler named at step 50: {why}")
    _, why = J(straggler_res(named=2), 50)
    check(any("naming others" in w for w in why), f"straggler naming rank 2: {why}")
    _, why = J(straggler_res(source="event", t_rel=1.0), 50)
    check(not why, f"straggler event before step 50: {why}")
    _, why = J(straggler_res(source="event", t_rel=10.0), 50)
    check(any("within 50 steps" in w for w in why), f"straggler event only after step 50: {why}")
    late = straggler_res()
    late["analyze_at_step"]["t"] = 1796120000.0 + 6.0  # after the pause: the analysis saw more than 50 steps
    _, why = J(late, 50)
    check(any("within 50 steps" in w for w in why), f"analysis after the pause: {why}")
    # No false straggler: the recorded grid has none; a clean job with one is named.
    root = os.path.join(work, "one_gpu")
    for job, res in (("grid_stall", fixture("grid_stall_h200_af4e699.json")), ("clean", straggler_res(named=1))):
        os.makedirs(os.path.join(root, job, "shim"), exist_ok=True)
        if job == "clean":
            res = {"events": [], "analyze": res["analyze_at_step"]["analyze"]}
        with open(os.path.join(root, job, "shim", "result.json"), "w") as f:
            json.dump(res, f)
    n, seen = straggler_table.scan_others(root, [])
    check(n == 2 and list(seen) == [os.path.join("one_gpu", "clean", "shim", "result.json")],
          f"false stragglers: {n} {seen}")


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1000):03d}+00:00"


def p2p_res(mode, kind, culprits, comm="0x5a", world=4):
    """A run of issue 41 in the shapes run_scenario.py (mode one) and run_two_nodes.py (two) write, the verdict
    `kind` naming `culprits` (global = comm ranks) everywhere, 12 s after the departure at t0; and the stderr lines."""
    t0 = 1796120000.0
    truth = {str(r): {"rank": r, "t_loop_start": t0 - 3} for r in range(world)}
    for r in culprits:
        truth[str(r)].update(t_depart=t0, step=8)
    head = f"{kind}: " + " and ".join(f"rank {r} (host fakehost{r}, GPU 0, pid {100 + r})" for r in culprits) + \
        " sends twice what its peer receives; counts are lower bounds (CUDA events)"
    v = {"kind": kind, "comm_id": comm, "culprits": list(culprits), "headline": head[len(kind) + 2:]}
    ev = {"type": "stall", "global_rank": 0, "comm_id": comm, "file": "r0", "time": iso(t0 + 12), "verdicts": [v]}
    an_v = dict(v, culprits=[{"comm_rank": r, "global_rank": r} for r in culprits], role="initiating")
    res = {"scenario": "x", "t_launch": t0 - 20, "t_end": t0 + 30, "ended_by": "harness after the report",
           "truth": truth, "analyze": {"headline": v["headline"], "verdicts": [an_v]},
           "rank_files": {f"r{r}.ncw": {"header": {"global_rank": r}, "comms": [{"comm_id": comm, "rank": r}]}
                          for r in range(world)}}
    sus = f"[ncclwatch rank 1 pid 101 {iso(t0 + 5)}] warn: SUSPECTED {head}\n"
    own = f"[ncclwatch rank 2 pid 102 {iso(t0 + 12.3)}] error: {head}\n"
    news = f"[ncclwatch rank 0 pid 100 {iso(t0 + 11)}] debug: live collector: job j1: {head}\n"
    if mode == "one":
        res.update(nproc=world, exit_code=-15, events=[ev],
                   live_reports=[{"file": "l", "report": {"time": iso(t0 + 11), "verdicts": [v]}}])
        return res, {"job.log": "[scenario rank 0] hello\n" + sus + own + news}
    res.update(world=world, nproc_per_node=world // 2, exit_codes=[-15, -15], events0=[ev], events1=[],
               live_history=[{"t_seen": t0 + 4, "report": {"verdicts": []}},
                             {"t_seen": t0 + 11, "report": {"time": iso(t0 + 11), "verdicts": [v]}}],
               live={"verdicts": [v]})
    return res, {"nodeA.log": own, "nodeB.log": sus}


def write_run(d, res, logs):
    """A run's folder as the issue-41 runners leave it: its result.json and its logs (name: text)."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f)
    for name, text in logs.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


def test_issue41(work):
    """issue41_summary.py on both folders' shapes, and the judges with a truth of two culprits (send_cycle)."""
    root = os.path.join(work, "issue41")
    for mode, scn, kind, culprits in (("one", "moe_stale_split", "MISMATCH", [3]),
                                      ("two", "send_cycle", "DEADLOCK", [0, 1])):
        res, logs = p2p_res(mode, kind, culprits)
        write_run(os.path.join(root, "one", scn, "shim") if mode == "one" else os.path.join(root, "two", scn), res,
                  logs)
    os.makedirs(os.path.join(root, "status"), exist_ok=True)
    with open(os.path.join(root, "status", "two-moe_clean.txt"), "w") as f:
        f.write("not run: no time left\n")
    one = issue41_summary.summarize(root, "one", "moe_stale_split")
    sh = one.get("shims", {}).get("first") or {}
    check(sh.get("kind") == "MISMATCH" and sh.get("culprits") == [3] and sh.get("match") == "exact" and
          sh.get("rank") == "2" and sh.get("secs_after_depart") == 12.3, f"issue41 one: shims' first line: {sh}")
    check((one["shims"].get("first_suspicion") or {}).get("rank") == "1", f"issue41 one: suspicion: {one['shims']}")
    lv = one.get("live", {}).get("first") or {}
    check(lv.get("kind") == "MISMATCH" and lv.get("culprits") == [3] and lv.get("rank") == "0",
          f"issue41 one: the embedded collector's news: {lv}")
    an = (one.get("analyze") or {}).get("lead") or {}
    check(an.get("match") == "exact" and (one.get("reports") or {}).get("match") == "exact",
          f"issue41 one: analyze / reports: {one.get('analyze')} {one.get('reports')}")
    lb = one.get("lower_bounds") or {}
    check(lb.get("any") and lb.get("stderr") and lb.get("analyze"), f"issue41 one: lower bounds: {lb}")
    two = issue41_summary.summarize(root, "two", "send_cycle")
    check((two.get("shims", {}).get("first") or {}).get("culprits") == [0, 1] and
          (two.get("live", {}).get("first") or {}).get("match") == "exact" and
          (two.get("live", {}).get("first") or {}).get("time") == iso(1796120011.0),
          f"issue41 two: {two.get('shims')} {two.get('live')}")
    gone = issue41_summary.summarize(root, "two", "moe_clean")
    check(gone.get("ran") is False and "no time left" in gone.get("why", ""), f"issue41 not run: {gone}")
    text = issue41_summary.text_of([one, two, gone])
    check("MISMATCH r3 [exact]" in text and "DEADLOCK r0,1 [exact]" in text and "NOT RUN" in text,
          f"issue41 text: {text}")
    # The judges: a deadlock's two culprits, both named (one node), exactly (two nodes).
    res, _ = p2p_res("one", "DEADLOCK", [0, 1])
    js = scenario_table.judge_shim("send_cycle", res, scenario_table.EXPECT["send_cycle"], [0, 1])
    check(js["ok"], f"scenario_table send_cycle, both named: {js['why']}")
    res1, _ = p2p_res("one", "DEADLOCK", [1])
    js = scenario_table.judge_shim("send_cycle", res1, scenario_table.EXPECT["send_cycle"], [0, 1])
    check(not js["ok"], "scenario_table send_cycle: one of the two named is not the truth")
    res2, _ = p2p_res("two", "DEADLOCK", [0, 1])
    row = two_nodes_table.judge("send_cycle", res2)
    check(row["live"] == "DEADLOCK r0,1" and row["analyze"] == "DEADLOCK r0,1", f"two_nodes_table send_cycle: {row}")


def test_issue41_pipelines(work):
    """Issue 41's pipelines: a slow stage is a STRAGGLER and no hang (scenario_table, two_nodes_table,
    issue41_summary), the clean pipeline says nothing at all, and the stalled pipeline's STRAGGLER line is kept apart
    from its hang's first line."""
    t0 = 1796120000.0
    exp = dict(scenario_table.EXPECT["pipeline_slow"], lead=True)

    def slow(mode, culprits=(2,), extra_stall=False):
        res, logs = p2p_res(mode, "STRAGGLER", list(culprits))
        evs = res["events"] if mode == "one" else res["events0"]
        evs[0]["type"] = "straggler"
        if extra_stall:
            evs.append({"type": "stall", "global_rank": 3, "comm_id": "0x5a", "file": "r3", "time": iso(t0 + 20),
                        "verdicts": [{"kind": "NOT_JOINED", "comm_id": "0x5a", "culprits": [2]}]})
        res.update(ended_by="itself", **({"exit_code": 0} if mode == "one" else {"exit_codes": [0, 0]}))
        for r, tr in res["truth"].items():
            tr.update(stage=2, slow_ms=20.0)
        return res, logs

    res, _ = slow("one")
    js = scenario_table.judge_shim("pipeline_slow", res, exp, 2)
    check(js["ok"] and js["rank"] == "2" and js["secs"] == "12.0", f"pipeline_slow: {js}")
    js = scenario_table.judge_shim("pipeline_slow", slow("one", extra_stall=True)[0], exp, 2)
    check(not js["ok"] and any("does not hang" in w for w in js["why"]), f"pipeline_slow with a stall: {js['why']}")
    js = scenario_table.judge_shim("pipeline_slow", slow("one", culprits=(1,))[0], exp, 2)
    check(not js["ok"] and any("naming others" in w for w in js["why"]), f"pipeline_slow naming rank 1: {js['why']}")
    clean_exp = dict(scenario_table.EXPECT["pipeline_clean"], lead=True)
    noisy, _ = slow("one")
    noisy["analyze"] = {"verdicts": []}
    js = scenario_table.judge_shim("pipeline_clean", noisy, clean_exp, None)
    check(not js["ok"] and any("nothing wrong reported" in w for w in js["why"]), f"pipeline_clean noisy: {js}")
    quiet = dict(noisy, events=[], live_reports=[])
    js = scenario_table.judge_shim("pipeline_clean", quiet, clean_exp, None)
    check(js["ok"], f"pipeline_clean quiet: {js['why']}")
    # The stalled pipeline: a stall of its start (before the stage departed at step 8: Recv #2) is not its report.
    stall, _ = p2p_res("one", "NOT_JOINED", [2])
    stall["analyze"]["verdicts"][0]["seq"] = stall["events"][0]["verdicts"][0]["seq"] = 10
    early = {"type": "stall", "global_rank": 3, "comm_id": "0x5a", "file": "r3", "time": iso(t0 - 2),
             "verdicts": [{"kind": "UNKNOWN", "comm_id": "0x5a", "culprits": [], "seq": 2}]}
    stall["events"].insert(0, early)
    js = scenario_table.judge_shim("pipeline", stall, dict(scenario_table.EXPECT["pipeline"], lead=True), 2)
    check(js["ok"] and "earlier report" in js["got"], f"pipeline, an early stall set aside: {js}")

    # Two nodes: the live collector and analyze name the stage; node A's note names it; the agents end with 0.
    res2, _ = slow("two")
    row = two_nodes_table.judge("pipeline_slow", res2)
    check(row["pass"] is True and row["live"] == "STRAGGLER r2" and row["analyze"] == "STRAGGLER r2",
          f"two_nodes_table pipeline_slow: {row['live']} {row['analyze']} {row['why']}")
    res2["exit_codes"] = [0, -15]
    row = two_nodes_table.judge("pipeline_slow", res2)
    check(row["pass"] is False and any("exit codes" in w for w in row["why"]), f"pipeline_slow killed: {row['why']}")
    res3, _ = slow("two")
    res3["analyze"]["verdicts"] = []
    row = two_nodes_table.judge("pipeline_clean", res3)
    check(row["pass"] is False and "STRAGGLER r2" in row["live"], f"two_nodes_table pipeline_clean: {row}")

    # The summary: the straggler's first line, event and lead, each exact against "STRAGGLER r{stage}".
    root = os.path.join(work, "issue41p")
    res, logs = slow("one")
    res2, logs2 = p2p_res("one", "NOT_JOINED", [2])
    logs2["job.log"] = (f"[ncclwatch rank 1 pid 101 {iso(t0 + 1)}] warn: STRAGGLER: rank 1 (host fakehost1, GPU 0, "
                        "pid 101) is the slowest stage on communicator 0x5a\n") + logs2["job.log"]
    for scn, (r, lg) in (("pipeline_slow", (res, logs)), ("pipeline", (res2, logs2))):
        write_run(os.path.join(root, "one", scn, "shim"), r, lg)
    one = issue41_summary.summarize(root, "one", "pipeline_slow")
    sh = (one.get("shims") or {}).get("first") or {}
    check(sh.get("kind") == "STRAGGLER" and sh.get("match") == "exact" and
          (one.get("reports") or {}).get("match") == "exact" and one.get("truth", "").startswith("STRAGGLER r2"),
          f"issue41 pipeline_slow: {one.get('truth')} {sh} {one.get('reports')}")
    pl = issue41_summary.summarize(root, "one", "pipeline")
    check(((pl.get("shims") or {}).get("first") or {}).get("kind") == "NOT_JOINED" and
          ((pl.get("shims") or {}).get("first_straggler") or {}).get("culprits") == [1] and
          "a STRAGGLER line too" in issue41_summary.text_of([pl]), f"issue41 pipeline: {pl.get('shims')}")


def ab_line(own, added, ranks=" ranks 2", who="linked = the shim"):
    return (f"ab nccl 22809 GPU{ranks}, {who}: NCCL's own {own:.3f} us/iter (launch 5.000), linked "
            f"{own + added:.3f} us/iter (launch 5.050); added: median {added:.3f} us, p10 {added - 0.2:.3f}, p90 "
            f"{added + 0.2:.3f} (30 rounds of 200 iterations); launch added: median 0.050 us\n")


def test_profiler_ab(work, call_cost, shim):
    d0 = os.path.join(work, "ab")
    base = {"none": (25.0, 0.0, 250.0, 1.00), "profiler": (25.6, 0.10, 330.0, 0.99), "empty": (25.4, 0.08, 300.0, 1.0),
            "events": (25.1, 0.45, 370.0, 1.0), "neither": (25.0, 0.05, 290.0, 1.0)}
    for rnd in range(2):
        for m, (own, add, cpu, bwf) in base.items():
            d = os.path.join(d0, f"r{rnd}-{m}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "cpu.out"), "w") as f:
                f.write(f"nccl 22809 GPU: median {cpu + rnd:.1f} ns/call, p10 1, p90 2 (60 batches of 2000)\n")
            with open(os.path.join(d, "rank0.out"), "w") as f:
                f.write(ab_line(own + rnd * 0.1, add, who="A/A (no shim)" if m == "none" else "linked = the shim"))
                for b in (1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20):
                    f.write(f"sweep ranks 2 bytes {b} us 100.0 busbw {2.0 * bwf * (1 + 0.01 * rnd):.3f}\n")
            for k, v in (("plugin", "PROFILER/Plugin: Loaded ncclwatch (v5)" if m in ("profiler", "empty") else
                          "none loaded"), ("source", {"profiler": "nccl-profiler exact", "events": "cuda-events"}
                                           .get(m, "none"))):
                with open(os.path.join(d, k + ".txt"), "w") as f:
                    f.write(v)
    recs = {}
    for d in sorted(os.listdir(d0)):
        recs.setdefault(d.split("-", 1)[1], []).append(gpu_profiler_ab.parse_dir(os.path.join(d0, d)))
    table, rows = gpu_profiler_ab.summarize(recs)
    rows = dict(rows)
    check(rows["52-profiler-ab"]["pass"] is True and "+0.100 us" in rows["52-profiler-ab"]["got"],
          f"profiler A/B row: {rows['52-profiler-ab']}")
    check(rows["52-profiler-cpu"]["pass"] is True and "+80.0 ns" in rows["52-profiler-cpu"]["got"],
          f"profiler CPU row: {rows['52-profiler-cpu']}")
    check(rows["52-profiler-busbw"]["pass"] is True, f"profiler busbw row: {rows['52-profiler-busbw']}")
    check("empty - neither): 8 B us/iter, NCCL's own arm +0.400" in table and "| profiler |" in table,
          f"profiler table:\n{table}")
    # An old call_cost (no --nranks) prints a 1-rank line: no numbers, and the row says so.
    with open(os.path.join(d0, "r0-profiler", "rank0.out"), "w") as f:
        f.write(ab_line(25.0, 0.1, ranks=""))
    rec = gpu_profiler_ab.parse_dir(os.path.join(d0, "r0-profiler"))
    check("add" not in rec and rec["bw"] == {}, f"a 1-rank A/B line is not the 2-rank one: {rec}")
    if not call_cost:
        return
    # The real printf: two fake-NCCL ranks of call_cost --ab (one through the shim), parsed by the same expression.
    idf = os.path.join(work, "fake-id")
    outs, procs = [], []
    for r in (0, 1):
        env = dict(os.environ, LD_PRELOAD=shim, NCCLWATCH_DIR=os.path.join(work, "ncw-ab"))
        out = open(os.path.join(work, f"fake-ab{r}.out"), "w")
        procs.append(subprocess.Popen([call_cost, "--nranks", "2", "--rank", str(r), "--id-file", idf, "--ab",
                                       "--rounds", "4", "--iters", "50"], env=env, stdout=out,
                                      stderr=subprocess.STDOUT))
        outs.append(out)
    rcs = [p.wait(timeout=60) for p in procs]
    for o in outs:
        o.close()
    text = open(os.path.join(work, "fake-ab0.out")).read()
    m = gpu_profiler_ab.AB_RE.search(text)
    check(rcs == [0, 0] and m and "ranks 2" in m.group("what") and m.group("add_l") is not None and
          "linked = the shim" in m.group("who"), f"call_cost --nranks 2 --ab output not parsed ({rcs}): {text[-600:]}")


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    call_cost = sys.argv[2] if len(sys.argv) > 2 else ""
    shim = sys.argv[3] if len(sys.argv) > 3 else ""
    for t in (test_grid, test_fsdp, test_suspect):
        t()
    test_straggler(work)
    test_issue41(work)
    test_issue41_pipelines(work)
    test_profiler_ab(work, call_cost, shim)
    print(f"selftest_parsers: {len(FAILS)} failure(s)" if FAILS else "selftest_parsers: ok")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
