#!/usr/bin/env bash
# Issue 43: how the job really ended, told first, and one report per node. Five jobs of 4 ranks on one GPU (each rank
# its own NCCL host on device 0: examples/one_gpu.py), each launched as a user launches one:
#   ncclwatch run --timeout 10 --dir D --collector auto -- torchrun --standalone --nproc-per-node 4 \
#       examples/hang_scenarios.py --one-gpu ...
# (the carried build copied into python/ncclwatch/, which `ncclwatch run` takes), then `ncclwatch analyze D` once
# every process is gone. Per job: the node's stderr lines of ncclwatch (the short prefix, as users see it), the first
# one with its delay from the scenario's departure (the scripts' truth, t_depart), analyze's first line and exit
# status, against the right answer:
#   validation_timeout  rank 0 validates 20 s at step 10; init_process_group(timeout=10 s): torch's watchdog
#                       (pt_nccl_watchdg) ends ranks 1-3: FAILED naming torch's timeout, analyze exit 1
#   validation_abort    the same with TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (the communicators aborted first): FAILED, 1
#   teardown_hang       a 300 s kernel on every rank, one more all_reduce, destroy_process_group(); the launcher's
#                       timeout (SIGTERM to torchrun) ends it: TEARDOWN_HANG or GPU_NOT_REACHED, analyze exit 1
#   silent_mismatch     the last rank all-reduces 4 of 8 elements at the last step; NCCL completes it and the job
#                       exits 0: MISMATCH on stderr during the run
#   healthy             nothing wrong: 0 lines, analyze OK, exit 0
# At most 12 lines of ncclwatch per job (one node), the verdict once.
#
#   device tool: run(command='bash test/gpu/run_issue43.sh', carry=[".carry"], timeout_s=600)   about 3 minutes
# Takes .carry/libncclwatch.so and .carry/ncclwatch-collector (SHIM=... COLLECTOR=... override). Writes $OUT/issue43.txt
# and $OUT/issue43-evidence.tgz (each job's stderr, stdout, analyze output, truth; no rank files).
# Knob: NCW_I43_WORK (/tmp/ncw-i43). Three jobs run at once, then two.
set -u
OUT=${OUT:-/tmp/ncw-i43-out}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 1
SHIM=${SHIM:-$REPO/.carry/libncclwatch.so}
COLLECTOR=${COLLECTOR:-$REPO/.carry/ncclwatch-collector}
W=${NCW_I43_WORK:-/tmp/ncw-i43}
for f in "$SHIM" "$COLLECTOR"; do [ -f "$f" ] || { echo "missing $f (build and carry .carry/)"; exit 2; }; done
rm -rf "$W"
mkdir -p "$W" "$OUT"
# `ncclwatch run` takes the library and the collector beside its package, as the wheel lays them out.
mkdir -p python/ncclwatch/bin
cp "$SHIM" python/ncclwatch/libncclwatch.so
cp "$COLLECTOR" python/ncclwatch/bin/ncclwatch-collector
chmod +x python/ncclwatch/bin/ncclwatch-collector
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"

# job NAME CAP_SEC ENV SCENARIO_ARGS...: one job, its launcher ended by `timeout` after CAP_SEC (SIGTERM, then SIGKILL
# 10 s later), then analyze.
job() {
    local name=$1 cap=$2 extra=$3
    shift 3
    local d=$W/$name
    mkdir -p "$d/truth"
    local t0
    t0=$(date +%s.%N)
    (
        cd "$REPO" && env $extra NCW_TRUTH_DIR="$d/truth" timeout -k 10 "$cap" \
            python3 -m ncclwatch run --timeout 10 --dir "$d/ncw" --collector auto -- \
            torchrun --standalone --nproc-per-node 4 examples/hang_scenarios.py --one-gpu "$@" \
            >"$d/stdout" 2>"$d/stderr"
        echo $? >"$d/rc"
    ) &
    local pid=$!
    # The first ncclwatch line, with the time it appeared (the node's stderr, polled).
    while kill -0 $pid 2>/dev/null; do
        if [ ! -f "$d/first" ] && grep -q '^\[ncclwatch' "$d/stderr" 2>/dev/null; then
            date +%s.%N >"$d/first"
        fi
        sleep 0.2
    done
    wait $pid
    echo "$t0" >"$d/t0"
    python3 -m ncclwatch analyze "$d/ncw" >"$d/analyze.txt" 2>&1
    echo $? >"$d/analyze.rc"
    python3 -m ncclwatch analyze --json "$d/ncw" >"$d/analyze.json" 2>/dev/null
}

run_jobs() {
    job validation_timeout 150 "" --scenario validation --steps 30 --at-step 10 --busy-sec 20 --pg-timeout-sec 10 &
    job validation_abort 150 "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" --scenario validation --steps 30 --at-step 10 \
        --busy-sec 20 --pg-timeout-sec 10 &
    job teardown_hang 80 "" --scenario teardown_hang --steps 20 --gpu-busy-sec 300 &
    wait
    job silent_mismatch 90 "" --scenario size_mismatch --steps 20 --at-step 19 --count 8 &
    job healthy 90 "" --scenario clean --duration-sec 15 &
    wait
}
T=$(date +%s)
run_jobs
python3 - "$W" >"$OUT/issue43.txt" <<'EOF'
import glob, json, os, re, sys
w = sys.argv[1]
want = {"validation_timeout": ("FAILED", 1), "validation_abort": ("FAILED", 1),
        "teardown_hang": ("TEARDOWN_HANG|GPU_NOT_REACHED", 1), "silent_mismatch": ("MISMATCH", None),
        "healthy": ("OK", 0)}
def read(p, default=""):
    try:
        return open(p, errors="replace").read()
    except OSError:
        return default
rows = []
for name, (kind, arc) in want.items():
    d = os.path.join(w, name)
    err = read(os.path.join(d, "stderr")).splitlines()
    ours = [l for l in err if l.startswith("[ncclwatch")]
    first = ours[0] if ours else ""
    t0 = float(read(os.path.join(d, "t0"), "0") or 0)
    tf = float(read(os.path.join(d, "first"), "0") or 0)
    departs = []
    for f in glob.glob(os.path.join(d, "truth", "truth-rank*.json")):
        try:
            departs.append(json.load(open(f)).get("t_depart") or 0)
        except (OSError, ValueError):
            pass
    dep = max(departs) if departs else 0
    an = read(os.path.join(d, "analyze.txt")).splitlines()
    an_first = an[0] if an else ""
    an_rc = read(os.path.join(d, "analyze.rc"), "?").strip()
    # analyze's lead kind, from its JSON (the text's first line is "VERDICT  <headline>" or "OK ...").
    try:
        vs = json.loads(read(os.path.join(d, "analyze.json"), "{}")).get("verdicts") or []
        an_kind = vs[0].get("kind", "") if vs else "OK"
    except ValueError:
        an_kind = "?"
    job_rc = read(os.path.join(d, "rc"), "?").strip()
    lead = r"\] (FINAL \(SIG[A-Z]+\): |JOB VERDICT \(live collector\): )?(%s)\b" % kind
    verdicts = [l for l in ours if re.search(lead, l)] if name != "healthy" else []
    if name == "healthy":
        ok = not ours and an_first.startswith("OK") and an_kind == "OK" and an_rc == "0"
    else:
        live_ok = bool(verdicts) and len(ours) <= 12
        end_ok = re.fullmatch(kind, an_kind) is not None and (arc is None or an_rc == str(arc))
        ok = live_ok and end_ok
    rows.append((name, "PASS" if ok else "FAIL", job_rc, len(ours), len(verdicts),
                 f"{tf - dep:.1f}" if tf and dep else "-", f"{tf - t0:.1f}" if tf else "-", an_rc, an_kind, first, an_first))
print("| job | result | job exit | ncclwatch lines | verdict lines | first line after departure (s) | "
      "after launch (s) | analyze exit | analyze's lead | first line | analyze's first line |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(str(x).replace("|", "/")[:300] for x in r) + " |")
print()
for name in want:
    d = os.path.join(w, name)
    print(f"## {name}: every ncclwatch line on the node's stderr")
    for l in read(os.path.join(d, "stderr")).splitlines():
        if l.startswith("[ncclwatch"):
            print("    " + l[:400])
    print(f"## {name}: analyze (first 12 lines)")
    for l in read(os.path.join(d, "analyze.txt")).splitlines()[:12]:
        print("    " + l[:400])
    print()
EOF
cat "$OUT/issue43.txt"
echo "issue 43: $(($(date +%s) - T)) s"
(cd "$W" && tar czf "$OUT/issue43-evidence.tgz" --exclude=ncw ./*) 2>/dev/null
rm -f python/ncclwatch/libncclwatch.so python/ncclwatch/bin/ncclwatch-collector
grep -q "| FAIL |" "$OUT/issue43.txt" && exit 1
exit 0
