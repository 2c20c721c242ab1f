#!/usr/bin/env python3
"""Phase 7's judges on fixtures, without a GPU (run by test/gpu/selftest.sh): test/gpu/two_nodes_table.py on
result.json files in the shape test/gpu/run_two_nodes.py writes (each node's report events and stderr lines, the
collector's live reports, analyze during and after the end, the rank files' comm tables), and
test/gpu/positions_table.py on the shape run_scenario.py --dump-at-phase / --dump-after-report writes for
examples/positions_check.py. The fixtures are built here, each one a variant of a base (a skip at 2 ranks a node, the
grid across two nodes, a recovered validation, a death, a clean run; the positions at mid-run and in the hang), and
written to WORK_DIR/<name>/result.json; each check runs the judge's command line on it and asserts its verdict, and
the reason it gives.

    selftest_two_nodes.py WORK_DIR

The shims' quote of the live collector's verdict (issue 23 item 3) is not written by any shim yet: its fixtures try
the forms the judge accepts (a field naming the collector on the verdict, a later event, a stderr line).
Prints one line per failed check; exits 1 if any.
"""
import copy
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import positions_table  # noqa: E402
import two_nodes_table as tnt  # noqa: E402

FAILS = []
WORLD_ID, TP47, TP03, DP15 = "0x1111", "0x4747", "0x0303", "0x1515"


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"FAIL: {what}")


def stamp(sec):
    return f"2026-12-03T10:00:{sec:06.3f}+00:00"


def verdict(kind, culprits, comm=WORLD_ID, role="none", headline="", summary="", evidence=(), **more):
    v = {"kind": kind, "job_id": "j", "comm_id": comm, "role": role, "caused_by_comm": None, "seq": 81,
         "culprits": list(culprits), "waiting": [0, 1, 2], "missing": [], "op": {"op": "AllReduce"},
         "stalled_for_s": 10.1, "summary": summary or f"comm {comm}: {kind}", "evidence": list(evidence),
         "suspected": False, "headline": headline or f"{kind} headline"}
    v.update(more)
    return v


def an_verdict(kind, globals_, comm=WORLD_ID, comm_ranks=None, **more):
    """A verdict as analyze writes it: culprits as objects with their global rank."""
    comm_ranks = comm_ranks or globals_
    v = verdict(kind, [], comm, **more)
    v["culprits"] = [{"comm_rank": c, "visible": True, "global_rank": g, "host": f"fakehost{g}", "pid": 100 + g,
                      "gpu": 0, "pci_bus_id": "", "gpu_uuid": "", "alive": True, "file": f"rank{g}.ncw"}
                     for c, g in zip(comm_ranks, globals_)]
    return v


def stall(rank, sec, verdicts, comm=WORLD_ID, node_dir="nodeA", typ="stall"):
    return {"file": f"/w/{node_dir}/j/rank{rank}-fakehost{rank}-{100 + rank}.report.json", "global_rank": rank,
            "type": typ, "time": stamp(sec), "comm_id": comm, "no_comm_slot": False, "waiting_in_seq": 81,
            "stalled_for_s": 10.0, "completion_poller_stuck": False, "suspected_at_s": None, "missing_ranks": [],
            "verdicts": verdicts}


def comm_table(comm, pairs, nranks=None):
    return {"comm_id": comm, "name": "", "nranks": nranks or len(pairs), "missing": [],
            "ranks": [{"comm_rank": c, "global_rank": g} for c, g in pairs]}


def live_doc(verdicts, comms):
    return {"schema": "ncclwatch.live/1", "job_id": "j", "time": stamp(30), "verdicts": verdicts, "ranks": [],
            "comms": comms, "warnings": []}


def analysis(verdicts, comms, headline=None):
    return {"schema": "ncclwatch.analysis/2", "headline": headline if headline is not None else
            (verdicts[0]["headline"] if verdicts else "no hang and no mismatch found"), "verdicts": verdicts,
            "comms": comms, "files": [], "files_read": 4}


def base_skip():
    """Rank 3 (node B) skips: node B's rank 2 names it; node A's ranks 0 and 1 see UNKNOWN and quote the collector
    (a field on the verdict)."""
    world = [comm_table(WORLD_ID, [(r, r) for r in range(4)])]
    unknown = verdict("UNKNOWN", [], summary="2,3 of 4: not visible from here (no rank file); run "
                                             "ncclwatch-collector analyze over every node's folder")
    quoted = verdict("NOT_JOINED", [3], headline="rank 3 (host fakehost3, GPU 0, pid 103) never issued AllReduce #81",
                     source="collector")
    live_v = verdict("NOT_JOINED", [3], headline="rank 3 (host fakehost3, GPU 0, pid 103) never issued AllReduce #81")
    return {
        "scenario": "skip", "nproc_per_node": 2, "world": 4, "timeout_s": 10, "one_gpu": True, "exit_codes": [-15, -15],
        "ended_by": "harness", "truth": {str(r): {"rank": r, "t_loop_end": 1000.0 + r, **({"t_done": 1001.0} if r == 3
                                                                                             else {})}
                                         for r in range(4)},
        "events0": [stall(0, 11, [unknown, quoted]), stall(1, 11.2, [unknown, quoted])],
        "events1": [stall(2, 11.1, [verdict("NOT_JOINED", [3])], node_dir="nodeB")],
        "lines0": [], "lines1": [],
        "live_history": [{"t_seen": 1011.5, "kept": "", "report": live_doc([live_v], world)}],
        "live": live_doc([live_v], world),
        "analyze_during": {"t": 1014, "analyze": analysis([an_verdict("NOT_JOINED", [3])], world)},
        "analyze": analysis([an_verdict("NOT_JOINED", [3])], world),
        "rank_files": {},
    }


def base_grid():
    """The grid across two nodes: rank 5 (comm rank 1 of TP[4-7]) stalls; node A's ranks wait in DP groups (UNKNOWN
    there) and quote the collector in a later event; the live report's verdicts lead with a cascade (DP[1,5]) before
    the initiating one."""
    comms = [comm_table(TP47, [(i, 4 + i) for i in range(4)]), comm_table(DP15, [(0, 1), (1, 5)]),
             comm_table(TP03, [(i, i) for i in range(4)])]
    init = verdict("NOT_JOINED", [1], comm=TP47, role="initiating",
                   headline="rank 5 (comm rank 1, host fakehost5, GPU 0, pid 105) never issued AllReduce #11")
    casc = verdict("NOT_JOINED", [1], comm=DP15, role="cascade", headline="cascade")
    unknown = verdict("UNKNOWN", [], comm=DP15)
    ev_a = []
    for r in range(4):
        ev_a.append(stall(r, 11 + r / 10, [unknown], comm=DP15))
        ev_a.append(dict(stall(r, 12 + r / 10, [dict(init, from_collector=True)], comm=TP47),
                         type="collector_verdict"))
    ev_b = [stall(r, 11, [init], comm=TP47, node_dir="nodeB") for r in (4, 6, 7)]
    doc = live_doc([casc, init], comms)
    return {
        "scenario": "grid_stall", "nproc_per_node": 4, "world": 8, "timeout_s": 10, "one_gpu": True,
        "exit_codes": [-15, -15], "truth": {}, "events0": ev_a, "events1": ev_b, "lines0": [], "lines1": [],
        "live_history": [{"t_seen": 1.0, "kept": "", "report": doc}], "live": doc,
        "analyze_during": None,
        "analyze": analysis([an_verdict("NOT_JOINED", [1], comm=DP15, role="cascade"),
                             an_verdict("NOT_JOINED", [5], comm=TP47, comm_ranks=[1], role="initiating",
                                        headline=init["headline"])], comms, headline="job j: " + init["headline"]),
        "rank_files": {},
    }


def run_judge(name, res):
    """Writes WORK/two/<name>/result.json and runs two_nodes_table.py on it: the row."""
    d = os.path.join(WORK, "two", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f)
    rows = os.path.join(WORK, "two-rows", name)
    r = subprocess.run([sys.executable, os.path.join(HERE, "two_nodes_table.py"), os.path.join(WORK, "two"),
                        "--scenarios", name, "--rows-dir", rows], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    files = [f for f in os.listdir(rows)] if os.path.isdir(rows) else []
    if len(files) != 1:
        check(False, f"{name}: {len(files)} row files: {r.stdout[-500:]}")
        return {"pass": None, "why": [], "got": ""}
    with open(os.path.join(rows, files[0])) as f:
        row = json.load(f)
    check((r.returncode == 0) == bool(row["pass"]), f"{name}: exit {r.returncode} but the row says {row['pass']}")
    return row


def why_has(row, words):
    return any(words in w for w in row.get("why") or [])


def two_node_checks():
    row = run_judge("skip", base_skip())
    check(row["pass"] is True, f"skip, collector quoted on the verdict: {row['why']}")
    check("NOT_JOINED r3 (collector's)" in row["got"] and "r2: NOT_JOINED r3" in row["got"],
          f"skip: the row's words: {row['got']}")
    check(row["live"] == "NOT_JOINED r3" and row["analyze"] == "NOT_JOINED r3", f"skip: columns {row}")
    check(row["secs"] == "11.5", f"skip: seconds from the hang (the waiting ranks' t_loop_end) to the live "
                                 f"report: {row['secs']}")

    # A slow init under load reported as an init hang first is not the lead of a skip.
    res = base_skip()
    res["events0"].insert(0, dict(stall(0, 3, [], typ="init_hang"), not_seen=[2, 3]))
    row = run_judge("skip", res)
    check(row["pass"] is True and "init-hang" in " ".join(row.get("notes") or []),
          f"skip after a slow init: {row['why']} {row.get('notes')}")

    # The shim's own UNKNOWN and nothing quoted: node A fails, and says why.
    res = base_skip()
    for e in res["events0"]:
        e["verdicts"] = e["verdicts"][:1]
    res["scenario"] = "skip"
    row = run_judge("skip", res)
    check(row["pass"] is False and why_has(row, "no verdict of the collector's quoted"),
          f"skip without a quote: {row['pass']} {row['why']}")
    # The shim's note that the collector asked for a dump names the collector's verdict, but it is not the lead of
    # the rank's report.
    res["lines0"] = [{"rank": str(r), "pid": str(100 + r), "time": stamp(12), "level": "warning",
                      "msg": "the live collector asks for a dump: NOT_JOINED: rank 3 (host fakehost3, GPU 0, pid 103) "
                             "never issued AllReduce #81"} for r in (0, 1)]
    row = run_judge("skip", res)
    check(row["pass"] is False, "the collector's dump request taken for the shim quoting its verdict")
    res["lines0"] = []
    # "ncclwatch-collector analyze" advice is not the collector's verdict.
    res["events0"][0]["verdicts"][0]["headline"] = "UNKNOWN: run ncclwatch-collector analyze over every folder"
    row = run_judge("skip", res)
    check(row["pass"] is False, "advice naming ncclwatch-collector taken for the collector's verdict")
    # The quote on stderr only.
    res["lines0"] = [{"rank": str(r), "pid": str(100 + r), "time": stamp(12), "level": "error",
                      "msg": "  NOT_JOINED: rank 3 (host fakehost3, GPU 0, pid 103) never issued AllReduce #81 "
                             "[the live collector's verdict]"} for r in (0, 1)]
    row = run_judge("skip", res)
    check(row["pass"] is True, f"skip, the collector's verdict quoted on stderr: {row['why']}")

    # A MISMATCH that names two ranks is not the truth; live and analyze that differ are named.
    res = base_skip()
    res["scenario"] = "type_mismatch"
    m2 = verdict("MISMATCH", [2, 3])
    res["events1"] = [stall(2, 11, [m2], node_dir="nodeB", typ="mismatch")]
    res["live_history"][0]["report"]["verdicts"] = [verdict("MISMATCH", [3])]
    res["live"] = res["live_history"][0]["report"]
    res["analyze"] = analysis([an_verdict("MISMATCH", [3])], res["analyze"]["comms"])
    for e in res["events0"]:
        e["verdicts"][1] = dict(verdict("MISMATCH", [3]), source="collector")
    row = run_judge("type_mismatch", res)
    check(row["pass"] is False and why_has(row, "node B, rank 2: leads with MISMATCH r2,3"),
          f"mismatch naming ranks 2 and 3: {row['why']}")
    res["events1"] = [stall(2, 11, [verdict("MISMATCH", [3])], node_dir="nodeB", typ="mismatch")]
    res["analyze"] = analysis([an_verdict("NOT_JOINED", [3])], res["analyze"]["comms"])
    row = run_judge("type_mismatch", res)
    check(row["pass"] is False and why_has(row, "differ"), f"live and analyze differing: {row['why']}")

    # A death: the exit code in the verdict's words, live and after the end.
    res = base_skip()
    res["scenario"] = "rank_dies"
    dead = dict(verdict("DEAD", [3], evidence=["rank 3 exited (exit code 3)"]))
    res["events1"] = [dict(stall(2, 11, [dead], node_dir="nodeB"), type="final")]
    for e in res["events0"]:
        e["verdicts"][1] = dict(dead, source="collector")
    res["live_history"][0]["report"]["verdicts"] = [dead]
    res["live"] = copy.deepcopy(res["live_history"][0]["report"])
    res["analyze"] = analysis([an_verdict("DEAD", [3], evidence=["exit code 3"])], res["analyze"]["comms"])
    row = run_judge("rank_dies", res)
    check(row["pass"] is True, f"rank_dies: {row['why']}")
    # As the shims write it: node A's own view (a peer's lost connection: ASYNC_ERROR on rank 0, ranks 2,3 not
    # visible) follows the collector's line, which the stall event carries as collector_verdict: it leads.
    res_q = copy.deepcopy(res)
    line = "DEAD: rank 3 (host fakehost3, GPU 0, pid 103) exited (exit code 3); 2 ranks wait in AllReduce #81"
    for e in res_q["events0"]:
        e["verdicts"] = [verdict("ASYNC_ERROR", [0])]
        e["collector_verdict"] = line
    row = run_judge("rank_dies", res_q)
    check(row["pass"] is True and "DEAD r3 (collector's)" in row["got"], f"rank_dies, node A led by the collector's "
                                                                         f"line: {row['why']} {row['got']}")
    for e in res_q["events0"]:
        e["collector_verdict"] = None
    row = run_judge("rank_dies", res_q)
    check(row["pass"] is False and why_has(row, "leads with ASYNC_ERROR r0"),
          f"rank_dies, node A's own ASYNC_ERROR without the collector's: {row['why']}")
    res["live"]["verdicts"] = [verdict("DEAD", [3])]  # the last live report lost the exit code
    row = run_judge("rank_dies", res)
    check(row["pass"] is False and why_has(row, "does not say 'exit code 3'"), f"rank_dies without the code: "
                                                                                 f"{row['why']}")
    res["live_history"] = []
    res["live"] = None
    row = run_judge("rank_dies", res)
    check(row["pass"] is False and why_has(row, "live collector, first report: nothing"),
          f"rank_dies without a live report: {row['why']}")

    # The validation: judged on the analysis during the hang; after the end nothing; the job went on, recovered.
    res = base_skip()
    res["scenario"] = "validation"
    nj0 = verdict("NOT_JOINED", [0])
    res["events1"] = [stall(2, 11, [nj0], node_dir="nodeB"), stall(3, 11, [nj0], node_dir="nodeB"),
                      {"type": "recovered", "time": stamp(20), "comm_id": WORLD_ID, "stalled_for_s": 19.0,
                       "suspected_only": False, "global_rank": 2, "file": "x"}]
    res["events0"] = [stall(1, 11, [nj0])]
    res["live_history"][0]["report"]["verdicts"] = [nj0]
    res["live"] = res["live_history"][0]["report"]
    res["analyze_during"]["analyze"] = analysis([an_verdict("NOT_JOINED", [0])], res["analyze"]["comms"])
    line = "recovered: rank 0 held AllReduce #11 for 19.0 s in validate (hang_scenarios.py:118)"
    res["analyze"] = analysis([], res["analyze"]["comms"], headline=line + "; nothing is hung at the end")
    res["exit_codes"] = [0, 0]
    # After the end the story must tell it (issue 24): without one the row fails, with it it passes.
    row = run_judge("validation", res)
    check(row["pass"] is False and why_has(row, "story"), f"validation with no story after the end: {row['why']}")
    res["analyze"]["story"] = [{"kind": "recovered", "culprits": [0], "line": line}]
    row = run_judge("validation", res)
    check(row["pass"] is True and row["analyze"].startswith("during the hang: NOT_JOINED r0"),
          f"validation: {row['why']} {row['analyze']}")
    res["events1"] = res["events1"][:2]
    res["exit_codes"] = [0, 1]
    row = run_judge("validation", res)
    check(row["pass"] is False and why_has(row, "no shim reported 'recovered'") and why_has(row, "exit codes"),
          f"validation that did not recover: {row['why']}")

    # An init hang: the communicator in init is in no comm table, and the late rank has no row: its comm rank is its
    # global rank; the shims' init_hang events name it by not_seen.
    res = base_skip()
    res["scenario"] = "init_hang"
    ih = verdict("INIT_HANG", [3], comm="0x9999")
    quoted_ih = dict(ih, source="collector")
    res["events1"] = [dict(stall(2, 11, [], comm="0x9999", node_dir="nodeB", typ="init_hang"), not_seen=[3])]
    res["events0"] = [dict(stall(r, 11, [verdict("UNKNOWN", [], comm="0x9999"), quoted_ih], comm="0x9999"))
                      for r in (0, 1)]
    res["live_history"][0]["report"]["verdicts"] = [ih]
    res["live"] = res["live_history"][0]["report"]
    late = an_verdict("INIT_HANG", [3], comm="0x9999")
    late["culprits"][0].update(visible=False, global_rank=None)
    res["analyze_during"]["analyze"] = analysis([late], [])
    line = "init of communicator 0x9999 (world, 4 ranks) waited 25.3 s for rank 3, which began its init 25.1 s after"
    res["analyze"] = analysis([], [], headline=line + "; nothing is hung at the end")
    res["analyze"]["story"] = [{"kind": "init_waited", "culprits": [3], "line": line}]
    res["exit_codes"] = [0, 0]
    row = run_judge("init_hang", res)
    check(row["pass"] is True and row["live"] == "INIT_HANG r3", f"init_hang: {row['live']} {row['why']}")

    # The grid: comm ranks of TP[4-7] mapped through the live report's comm table; the lead past the cascade;
    # node A's quote in a later event.
    row = run_judge("grid_stall", base_grid())
    check(row["pass"] is True and row["live"] == "NOT_JOINED r5", f"grid_stall: {row['live']} {row['why']}")

    # Clean: nothing anywhere; a live report is a failure.
    res = base_skip()
    res["scenario"] = "clean"
    res.update(events0=[], events1=[], live_history=[], live=None, analyze=analysis([], []), analyze_during=None,
               exit_codes=[0, 0])
    row = run_judge("clean", res)
    check(row["pass"] is True, f"clean: {row['why']}")
    res["live"] = live_doc([verdict("UNKNOWN", [])], [])
    row = run_judge("clean", res)
    check(row["pass"] is False, "clean with a live verdict passes")

    # A scenario that did not run leaves a failing row naming it.
    os.makedirs(os.path.join(WORK, "two", "pipeline"), exist_ok=True)
    r = subprocess.run([sys.executable, os.path.join(HERE, "two_nodes_table.py"), os.path.join(WORK, "two"),
                        "--scenarios", "pipeline"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 1 and "no result.json" in r.stdout, f"a run without result.json: {r.stdout[-300:]}")

    # A pipeline on a shared GPU: a stall at its start (an op before the departing stage's step, #2) is not the hang
    # under test; the first report of the hang (#61: stage 2 departs at step 60) is judged.
    res = base_skip()
    res["scenario"] = "pipeline"
    res["truth"] = {str(r): {"rank": r, "t_loop_end": 1000.0} for r in (0, 1, 3)}
    res["truth"]["2"] = {"rank": 2, "t_depart": 990.0, "step": 60}
    early_v = verdict("UNKNOWN", [], seq=2)
    hang_v = verdict("NOT_JOINED", [2], seq=61, headline="rank 2 never issued Send #61")
    quoted_h = dict(hang_v, source="collector")
    res["events0"] = [stall(0, 11, [early_v]), stall(0, 30, [verdict("UNKNOWN", [], seq=61), quoted_h]),
                      stall(1, 30.1, [verdict("UNKNOWN", [], seq=61), quoted_h])]
    res["events1"] = [stall(3, 11, [early_v], node_dir="nodeB"), stall(3, 30, [hang_v], node_dir="nodeB")]
    res["live_history"] = [{"t_seen": 1011.5, "kept": "", "report": live_doc([early_v], res["live"]["comms"])},
                           {"t_seen": 1030.5, "kept": "", "report": live_doc([hang_v], res["live"]["comms"])}]
    res["live"] = live_doc([hang_v], res["live"]["comms"])
    res["analyze"] = analysis([an_verdict("NOT_JOINED", [2], seq=61)], res["live"]["comms"])
    row = run_judge("pipeline", res)
    check(row["pass"] is True and row["live"] == "NOT_JOINED r2", f"pipeline: {row['live']} {row['why']}")
    check(any("before the scenario's hang" in n for n in row.get("notes") or []), "pipeline: the early stall unnoted")
    res["live_history"] = res["live_history"][:1]  # only the start's report: the hang was never reported live
    res["live"] = res["live_history"][0]["report"]
    row = run_judge("pipeline", res)
    check(row["pass"] is False, "pipeline: a report of the start taken for the hang's")
    check(tnt.before_hang("pipeline", [early_v], {"2": {"step": 60}}) is True,
          "before_hang: before the departure every diagnosis is before the hang")
    check(tnt.before_hang("skip", [early_v], {}) is False, "before_hang: only the pipeline says its op")

    # lead_of: the verdict whose headline is the analysis's; else the first neither cascade nor consequence.
    vs = [verdict("NOT_JOINED", [1], role="cascade", headline="a"), verdict("MISMATCH", [2], consequence=True,
                                                                            headline="b"),
          verdict("NOT_JOINED", [3], role="initiating", headline="c")]
    check(tnt.lead_of(vs)["headline"] == "c", "lead_of: cascade or consequence taken for the lead")
    check(tnt.lead_of(vs, "job x: b")["headline"] == "b", "lead_of: the analysis's headline not followed")
    check(tnt.lead_of([dict(vs[2], suspected=True)]) is None, "lead_of: a suspicion taken for a verdict")


# ------------------------------------------------------------------------------------------------------ positions
def pos_comm(slot, start_ms, issued, completed, reached=None, exact=True, source="nccl-profiler", cid="0x1"):
    return {"slot": slot, "state": "active", "rank": 0, "nranks": 4, "comm_id": cid, "parent_id": None,
            "init_start_ms": start_ms, "coll_issued": issued, "coll_reached": issued if reached is None else reached,
            "coll_completed": completed, "progress_exact": exact, "gpu_source": source}


def pos_result():
    """4 ranks; skip at B's op #31 by rank 3. Mid-run: every op complete (world 20, A 16, B 16). In the hang: ranks
    0-2 issued B #31 (not complete), rank 3 issued A #32 (not reached) and world ops the others never issued."""
    truth, mid_files, hang_files = {}, {}, {}
    for r in range(4):
        mid = {"world": {"ranks": [0, 1, 2, 3], "issued": 20, "completed": 20},
               "A": {"ranks": [0, 1, 2, 3], "issued": 16, "completed": 16},
               "B": {"ranks": [0, 1, 2, 3], "issued": 16, "completed": 16}}
        if r < 3:
            hang = {"world": (38, 38), "A": (31, 31), "B": (31, 30)}
        else:
            hang = {"world": (39, 38), "A": (32, 31), "B": (30, 30)}
        truth[str(r)] = {"rank": r, "order": ["world", "A", "B"], "mid": mid, "phase": "steps",
                         "groups": {g: {"ranks": [0, 1, 2, 3], "issued": i, "completed": c} for g, (i, c) in
                                    hang.items()}}
        if r == 3:
            truth["3"]["skipped"] = {"group": "B", "op": 31, "step": 30}
        header = {"global_rank": r}
        # The comm table's slots out of creation order: the match goes by init_start_ms.
        mid_files[f"/n/j/rank{r}.ncw"] = {"header": header, "comms": [
            pos_comm(0, 900.0, 16, 16, cid="0xb"), pos_comm(1, 100.0, 20, 20, cid="0xw"),
            pos_comm(2, 500.0, 16, 16, cid="0xa")]}
        hang_files[f"/n/j/rank{r}.ncw"] = {"header": header, "comms": [
            pos_comm(0, 900.0, hang["B"][0], hang["B"][1], cid="0xb"),
            pos_comm(1, 100.0, hang["world"][0], hang["world"][1], cid="0xw"),
            pos_comm(2, 500.0, hang["A"][0], hang["A"][1], reached=hang["A"][1], cid="0xa")]}
    return {"nproc": 4, "truth": truth, "events": [],
            "dumps_at_phase": {"phase": "mid", "files": mid_files, "truth_before": truth, "truth_after": truth},
            "dumps_after_report": {"files": hang_files, "truth_before": truth, "truth_after": truth}}


def run_positions(name, res, log_text="[positions rank 0] done\n"):
    d = os.path.join(WORK, "pos", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump(res, f)
    with open(os.path.join(d, "job.log"), "w") as f:
        f.write(log_text)
    rows_dir = os.path.join(WORK, "pos-rows", name)
    r = subprocess.run([sys.executable, os.path.join(HERE, "positions_table.py"), d, "--rows-dir", rows_dir],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = {}
    for k in ("mid", "hang", "log"):
        try:
            with open(os.path.join(rows_dir, f"71-positions-{k}.json")) as f:
                rows[k] = json.load(f)
        except (OSError, ValueError) as e:
            check(False, f"positions {name}: no {k} row ({e}): {r.stdout[-300:]}")
            rows[k] = {"pass": None, "why": [], "got": ""}
    return rows, r.returncode


def positions_checks():
    rows, rc = run_positions("exact", pos_result())
    check(rc == 0 and all(r["pass"] is True for r in rows.values()),
          f"positions, all exact: {[(k, r['got']) for k, r in rows.items()]}")
    check("(rank 3 skipped B #31)" in rows["hang"]["case"], f"positions: the hang row's case: {rows['hang']['case']}")

    res = pos_result()  # rank 1 counts B #31 done: the op rank 3 never issued
    res["dumps_after_report"]["files"]["/n/j/rank1.ncw"]["comms"][0]["coll_completed"] = 31
    rows, rc = run_positions("false_done", res)
    check(rc == 1 and rows["hang"]["pass"] is False and any("never issued" in w for w in rows["hang"]["why"]) and
          rows["mid"]["pass"] is True, f"positions, a completion rank 3 never allowed: {rows['hang']['why']}")

    res = pos_result()  # a lower bound at mid-run, on A of rank 2
    res["dumps_at_phase"]["files"]["/n/j/rank2.ncw"]["comms"][2].update(progress_exact=False, coll_completed=2,
                                                                       coll_reached=2)
    rows, _ = run_positions("lower_bound", res)
    check(rows["mid"]["pass"] is False and any("r2 A: a lower bound" in w for w in rows["mid"]["why"]) and
          any("r2 A: completed 2, is_completed() says 16" in w for w in rows["mid"]["why"]),
          f"positions, a lower bound: {rows['mid']['why']}")

    res = pos_result()  # the event fallback instead of NCCL's profiler
    for d in res["dumps_at_phase"]["files"].values():
        for c in d["comms"]:
            c["gpu_source"] = "cuda-events"
    rows, _ = run_positions("events", res)
    check(rows["mid"]["pass"] is False and any("gpu_source 'cuda-events'" in w for w in rows["mid"]["why"]),
          f"positions, cuda-events: {rows['mid']['why']}")

    res = pos_result()  # a fourth communicator of 4 ranks
    res["dumps_at_phase"]["files"]["/n/j/rank0.ncw"]["comms"].append(pos_comm(3, 950.0, 1, 1, cid="0xc"))
    rows, _ = run_positions("extra_comm", res)
    check(rows["mid"]["pass"] is False and any("4 communicators of 4 ranks" in w for w in rows["mid"]["why"]),
          f"positions, an extra communicator: {rows['mid']['why']}")

    rows, rc = run_positions("log", pos_result(), "[ncclwatch rank 1 pid 7 2026-12-03T10:00:00.000+00:00] warn: a "
                                                  "collective offered to NCCL's profiler events got none within its "
                                                  "call\n")
    check(rc == 1 and rows["log"]["pass"] is False and "1 'got none within its call'" in rows["log"]["got"],
          f"positions, the log: {rows['log']['got']}")

    res = pos_result()
    res["dumps_at_phase"] = None
    rows, _ = run_positions("no_mid", res)
    check(rows["mid"]["pass"] is False and "no dumps" in rows["mid"]["got"], f"positions without mid dumps: "
                                                                              f"{rows['mid']['got']}")
    check(positions_table.match_comms([pos_comm(0, None, 1, 1), pos_comm(1, 5.0, 2, 2)], ["a", "b"], 4)[0]["a"]
          ["slot"] == 1, "match_comms: a communicator without init time sorted first")


def main():
    global WORK
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    WORK = os.path.abspath(sys.argv[1])
    os.makedirs(WORK, exist_ok=True)
    two_node_checks()
    positions_checks()
    print(f"selftest_two_nodes: {len(FAILS)} failure(s)")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
