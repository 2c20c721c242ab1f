#!/bin/bash
# Checks the GPU harness on a machine without a GPU: syntax of every script, then test/gpu/run_scenario.py and
# test/gpu/scenario_table.py on fake-NCCL jobs (test/fake_nccl) standing in for the torch scenarios, run_scenario.py's
# live logic on a stand-in job (test/gpu/fake_report_job.py: suspicions, the hang's start, a step count), the tables'
# parsers on recorded and derived inputs (test/gpu/selftest_parsers.py: the grid, FSDP, suspicion, straggler and the
# profiler A/B, with two fake-NCCL ranks of call_cost --ab), the nccl-tests parser on synthetic output, and the RAS
# client against a stand-in server. Phase 7: run_scenario.py's --dump-at-phase / --dump-after-report on the stand-in
# job, test/gpu/run_two_nodes.py on a fake-NCCL job split into two node folders with `serve` (its facts, and
# two_nodes_table.py's columns), and the two-node and positions judges on fixtures (test/gpu/selftest_two_nodes.py).
#   bash test/gpu/selftest.sh BUILD_DIR      (BUILD_DIR from `meson setup`, with the shim, collector, fake_launch,
#                                             fake_rank built; bench/call_cost_fake too, or its check is skipped)
# Prints the scenario rows and exits non-zero when a check of the harness itself fails.
set -u
B=$(cd "${1:?build dir}" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
G=$REPO/test/gpu
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
T=$(mktemp -d /tmp/ncw-gpu-selftest-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for f in "$G"/*.sh "$REPO"/bench/*.sh; do bash -n "$f" || fail "bash -n $f"; done
$PY -m py_compile "$G"/*.py "$REPO"/examples/*.py "$REPO"/bench/*.py || fail "py_compile"

SHIM=$B/shim/libncclwatch.so
COLL=$B/collector/ncclwatch-collector
LAUNCH=$B/test/fake_nccl/fake_launch
RANK=$B/test/fake_nccl/fake_rank
for x in "$SHIM" "$COLL" "$LAUNCH" "$RANK"; do [ -e "$x" ] || { echo "missing $x"; exit 2; }; done

# Fake jobs in the shapes of the torch scenarios (2 ranks, timeout 2 s).
declare -A JOB=(
    [skip]="--steps 30 --skip-rank 1 --skip-step 20 --hold-ms 60000"
    [size_mismatch]="--steps 30 --mismatch-rank 1 --mismatch-step 20 --mismatch-kind count --hold-ms 3000"
    [type_mismatch]="--steps 30 --mismatch-rank 1 --mismatch-step 20 --mismatch-kind op --hold-ms 3000"
    [rank_dies]="--steps 30 --exit-rank 1 --exit-step 20 --exit-code 1 --hold-ms 3000"
    [validation]="--steps 30 --sleep-rank 0 --sleep-step 20 --sleep-ms 4000"
    [grad_accum]="--steps 30 --extra-rank 0 --extra-step 20 --hold-ms 60000"
    [clean]="--steps 30"
)
pids=""
for s in "${!JOB[@]}"; do
    kill_first=""
    [ "$s" = rank_dies ] && kill_first="--kill-on-first-failure"
    $PY "$G/run_scenario.py" --scenario "$s" --variant shim --work "$T/scen/$s/shim" --shim "$SHIM" --collector "$COLL" \
        --timeout 2 --nproc 2 --max-sec 60 \
        --cmd "$LAUNCH --nproc 2 --timeout-sec 80 $kill_first -- $RANK ${JOB[$s]}" >"$T/$s.log" 2>&1 &
    pids="$pids $!"
done
wait $pids
for s in "${!JOB[@]}"; do
    [ -f "$T/scen/$s/shim/result.json" ] || { fail "$s: no result.json"; tail -5 "$T/$s.log"; }
done
$PY "$G/scenario_table.py" "$T/scen" --nproc 2 --rows-dir "$T/rows" | tee "$T/table.txt"
# What the harness must get right whatever the verdict engine says.
grep -q "2 GPUs: skip: PASS" "$T/table.txt" || fail "skip: NOT_JOINED naming rank 1 not recognised"
grep -q "2 GPUs: size_mismatch: PASS" "$T/table.txt" || fail "size_mismatch: MISMATCH naming rank 1 not recognised"
grep -q "2 GPUs: validation: PASS" "$T/table.txt" || fail "validation: the wait that recovered not recognised"
grep -q "2 GPUs: clean: PASS" "$T/table.txt" || fail "clean: a report where none is expected"
$PY - "$T/scen" <<'PYEOF' || fail "seconds to verdict not measured from the files"
import json, sys
for s in ("skip", "validation"):
    r = json.load(open(f"{sys.argv[1]}/{s}/shim/result.json"))
    assert r["events"], s
PYEOF
grep -A1 "2 GPUs: skip" "$T/table.txt" | grep -q "after kill NOT_JOINED r1\|after kill DEAD r1" ||
    fail "skip: analyze after the kill does not name rank 1"

# run_scenario.py's live logic on a stand-in job: a suspicion is not the first report; --end-after-suspect,
# --cap-after-hang (the scripts' truth), --analyze-at-step.
FJ="$PY $G/fake_report_job.py"
rs() {  # rs NAME SCENARIO [run_scenario.py ARGS...] -- FAKE-JOB ARGS
    local name=$1 scn=$2 ra=()
    shift 2
    while [ "$1" != -- ]; do ra+=("$1"); shift; done
    shift
    $PY "$G/run_scenario.py" --scenario "$scn" --variant shim --work "$T/live/$name/shim" --shim "$SHIM" \
        --collector "$COLL" --timeout 60 --nproc 2 --max-sec 25 "${ra[@]}" --cmd "$FJ $*" >"$T/live-$name.log" 2>&1
}
rs susp skip --end-after-report -1 --end-after-suspect 1 -- --suspect-at 1 &
rs diag skip --end-after-report 1 -- --suspect-at 0.5 --stall-at 3 &
rs hang skip --end-after-report -1 --cap-after-hang 2 -- --hang-at 1 &
rs step straggler --end-after-report -1 --analyze-at-step 5 -- --steps 8 --sleep 3 &
rs phase skip --end-after-report 2 --dump-at-phase mid --dump-after-report 0.5 -- --phase-at 1 --stall-at 3 &
wait
$PY - "$T/live" <<'PYEOF' || fail "run_scenario.py's live logic (see above)"
import json, sys
def res(n):
    return json.load(open(f"{sys.argv[1]}/{n}/shim/result.json"))
bad = []
r = res("susp")
if r["ended_by"] != "harness after the first suspicion" or not r["first_suspicion_seen"] or r["first_report_seen"]:
    bad.append(f"susp: {r['ended_by']}, suspicion {r['first_suspicion_seen']}, report {r['first_report_seen']}")
r = res("diag")
first = r["first_report_seen"]
if not first or first - r["t_launch"] < 2.5 or "after the report" not in r["ended_by"]:
    bad.append(f"diag: the suspicion taken for the report ({r['ended_by']}, {r['first_report_seen']})")
r = res("hang")
if r["ended_by"] != "harness 2 s after the hang began" or not r["hang_start_live"] or r["t_end"] - r["t_launch"] > 12:
    bad.append(f"hang: {r['ended_by']}, hang start {r['hang_start_live']}")
r = res("step")
s = r.get("analyze_at_step") or {}
if s.get("step") != 5 or min(s.get("steps_then") or [0]) < 5 or r["ended_by"] != "itself":
    bad.append(f"step: {json.dumps(s)[:200]}, {r['ended_by']}")
r = res("phase")  # --dump-at-phase: the dumps while every rank waits at "mid", then go-mid; --dump-after-report
p, a = r.get("dumps_at_phase") or {}, r.get("dumps_after_report") or {}
if p.get("phase") != "mid" or any(t.get("phase") != "mid" for t in (p.get("truth_before") or {"x": {}}).values()):
    bad.append(f"phase: dumps at phase mid: {json.dumps(p)[:200]}")
if not all(t.get("go_seen") for t in r["truth"].values()) or len(r["truth"]) != 2:
    bad.append(f"phase: the ranks did not see go-mid: {r['truth']}")
if a.get("after_s") != 0.5 or not r["first_report_seen"] or a.get("t", 0) < r["first_report_seen"]:
    bad.append(f"phase: dumps after the report: {json.dumps(a)[:200]}, report {r['first_report_seen']}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PYEOF

# Two "nodes" (phase 7): run_two_nodes.py on a test-NCCL job of 4 ranks, ranks 0-1 writing into node A's folder and
# 2-3 into node B's (as test/e2e/offline_two_nodes.sh), every rank streaming to the runner's `serve`; rank 3 skips.
# The runner's facts and the judge's columns: the live collector and analyze of both folders name NOT_JOINED r3,
# node B's shim names it; node A's ranks report (their own UNKNOWN, or the collector's verdict once the shims quote
# it: the row's overall result is the shims' to earn, not asserted here).
cat >"$T/per_node.sh" <<'WRAP'
#!/bin/bash
NCCLWATCH_DIR=$NCW_NODE_DIR_B
[ "$RANK" -lt "$NCW_NODE_SIZE" ] && NCCLWATCH_DIR=$NCW_NODE_DIR_A
export NCCLWATCH_DIR
exec "$@"
WRAP
chmod +x "$T/per_node.sh"
$PY "$G/run_two_nodes.py" --scenario skip --work "$T/2n/skip" --shim "$SHIM" --collector "$COLL" --nproc-per-node 2 \
    --timeout 2 --dead-after 2 --port 28990 --max-sec 60 \
    --cmd "$LAUNCH --nproc 4 --timeout-sec 80 -- $T/per_node.sh $RANK --steps 30 --skip-rank 3 --skip-step 20 \
           --hold-ms 60000" \
    >"$T/2n-skip.log" 2>&1
$PY "$G/two_nodes_table.py" "$T/2n" --scenarios skip --rows-dir "$T/2n-rows" >"$T/2n-table.txt"
cat "$T/2n-table.txt"
$PY - "$T/2n/skip/result.json" "$T/2n-rows/70-two-nodes-00-skip.json" <<'PYEOF' ||
import json, sys
res, row = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bad = []
nodes = sorted(f["node"] for f in res["rank_files"].values())
if nodes != [0, 0, 1, 1]:
    bad.append(f"rank files per node: {nodes}")
if not res["live_history"] or not isinstance(res.get("analyze_during"), dict) or not res.get("analyze"):
    bad.append(f"facts: {len(res['live_history'])} live reports, analyze during {bool(res.get('analyze_during'))}")
if not any("STALL" in ln["msg"] for ln in res["lines0"]):
    bad.append("no STALL line among node A's stderr lines")
if row["live"] != "NOT_JOINED r3" or row["analyze"] != "NOT_JOINED r3":
    bad.append(f"columns: live {row['live']!r}, analyze {row['analyze']!r}")
# Node B sees ranks 2,3 of the 4: its report leads with the collector's verdict where one came in time.
if row["nodes"].get("B", {}).get("2", {}).get("says") not in ("NOT_JOINED r3", "NOT_JOINED r3 (collector's)") or \
        set(row["nodes"].get("A", {})) != {"0", "1"}:
    bad.append(f"nodes: {json.dumps(row['nodes'])[:300]}")
if "harness after the first diagnosis" not in res["ended_by"]:
    bad.append(f"ended by {res['ended_by']}")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PYEOF
    { fail "two nodes: the runner or the judge (see above)"; tail -5 "$T/2n-skip.log"; }
$PY "$G/selftest_two_nodes.py" "$T/two-fixtures" || fail "selftest_two_nodes.py (phase 7's judges on fixtures)"

# The tables' parsers on recorded and derived inputs; call_cost --nranks 2 --ab on the fake NCCL through the shim.
CC_FAKE=$B/bench/call_cost_fake
[ -x "$CC_FAKE" ] || { echo "note: no $CC_FAKE (-Dbench=false?): call_cost's A/B output format not checked"; CC_FAKE=""; }
$PY "$G/selftest_parsers.py" "$T/parsers" ${CC_FAKE:+"$CC_FAKE" "$SHIM"} || fail "selftest_parsers.py"

# nccl-tests parser on synthetic output.
$PY - "$T/nt" <<'PYEOF'
import os, sys
d = sys.argv[1]; os.makedirs(d)
def out(path, shift=0.0, wrong=0, lib=22809):
    L = [f"# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library={lib}", "h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0"]
    s = 8
    while s <= 1 << 27:
        t = 10 + s / 3e5 + shift
        bw = s / t / 1e3
        L.append("%12d  %12d  %8s  %6s  %6s  %7.2f  %6.2f  %6.2f  %6g  %7.2f  %6.2f  %6.2f  %6g" % (s, s // 4, "float", "sum", "-1", t, bw, bw, wrong, t, bw, bw, 0))
        s *= 2
    L += [f"# Out of bounds values : {wrong} OK", "# Avg bus bandwidth    : 100 "]
    open(os.path.join(d, path), "w").write("\n".join(L) + "\n")
for i in range(3):
    out(f"wo{i}.txt"); out(f"w{i}.txt", shift=0.05)
out("bad.txt", wrong=2, lib=22803)
# Runs in two modes 5 us apart: +2 us within the spread of the runs without the shim is not resolved; +2 us on
# steady runs is a loss.
for i, (a, b) in enumerate(((0, 2), (5, 2), (0, 5))):
    out(f"mo{i}.txt", shift=a); out(f"mw{i}.txt", shift=b); out(f"sw{i}.txt", shift=2)
PYEOF
$PY "$G/nccl_tests_compare.py" same ok "$T/nt/wo0.txt" "$T/nt/w0.txt" "$T/ntrows" | grep -q PASS || fail "nccl-tests: equal outputs not recognised"
$PY "$G/nccl_tests_compare.py" same bad "$T/nt/wo0.txt" "$T/nt/bad.txt" "$T/ntrows" | grep -q FAIL || fail "nccl-tests: system NCCL / #wrong not caught"
$PY "$G/nccl_tests_compare.py" cost c "$T/ntrows" "$T"/nt/wo0.txt "$T"/nt/w0.txt "$T"/nt/wo1.txt "$T"/nt/w1.txt \
    "$T"/nt/wo2.txt "$T"/nt/w1.txt | grep -q "cost: .*PASS" || fail "nccl-tests cost: +0.05 us should pass"
$PY "$G/nccl_tests_compare.py" cost m "$T/ntrows" "$T"/nt/mo0.txt "$T"/nt/mw0.txt "$T"/nt/mo1.txt "$T"/nt/mw1.txt \
    "$T"/nt/mo2.txt "$T"/nt/mw2.txt | grep -q "cost: .*info" ||
    fail "nccl-tests cost: +2 us within a 5 us spread is not resolved"
$PY "$G/nccl_tests_compare.py" cost s "$T/ntrows" "$T"/nt/wo0.txt "$T"/nt/sw0.txt "$T"/nt/wo1.txt "$T"/nt/sw1.txt \
    "$T"/nt/wo2.txt "$T"/nt/sw2.txt | grep -q "cost: .*FAIL" || fail "nccl-tests cost: a steady +2 us should fail"
printf 'without: rank 0: 9 steps in 1 s (%s ms/step), loss 1\nwith:    rank 0: 9 steps in 1 s (%s ms/step), loss 1\n' \
    1.0 0.9 1.0 1.1 1.0 0.97 >"$T/steps_mixed.txt"
printf 'without: rank 0: 9 steps in 1 s (%s ms/step), loss 1\nwith:    rank 0: 9 steps in 1 s (%s ms/step), loss 1\n' \
    1.0 1.02 1.0 1.03 1.0 1.02 >"$T/steps_slow.txt"
$PY "$G/ddp_pairs.py" "$T/steps_mixed.txt" "$T/ddp1" >/dev/null && grep -q '"pass": null' "$T/ddp1/40-ddp.json" ||
    fail "ddp_pairs: pairs on both sides of 1 are not resolved"
$PY "$G/ddp_pairs.py" "$T/steps_slow.txt" "$T/ddp2" >/dev/null && grep -q '"pass": false' "$T/ddp2/40-ddp.json" ||
    fail "ddp_pairs: every pair 2 to 3 % slower should fail"

# RAS client against a stand-in server.
$PY - <<'PYEOF' &
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 28977)); s.listen(1)
s.settimeout(20)
c, _ = s.accept(); f = c.makefile("rb")
assert f.readline() == b"CLIENT PROTOCOL 2\n"; c.sendall(b"SERVER PROTOCOL 2\n")
assert f.readline().startswith(b"TIMEOUT"); c.sendall(b"OK\n")
assert f.readline() == b"STATUS\n"
c.sendall(b"Errors\n======\n\n#0-0 (ab) DEAD\n  Rank 1 -- GPU 0 managed by process 7 on node h\n"); c.close()
PYEOF
sleep 0.5
$PY "$G/ras_query.py" --port 28977 | grep -q "Rank 1 -- GPU 0" || fail "RAS client"
wait

cat "$T/rows"/*.json >/dev/null && $PY "$G/print_table.py" "$T/rows" >/dev/null
[ $fails = 0 ] && echo "selftest: ok" || echo "selftest: $fails failure(s)"
exit $((fails > 0))
