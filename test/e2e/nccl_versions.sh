#!/bin/bash
# Issue 44: the version matrix. The test NCCL presents itself as NCCL 2.21, 2.26, 2.28, 2.29, 2.31 and 2.32 (its
# variants libnccl-<V>.so.2, each chosen with FAKE_NCCL_LIBRARY): ncclGetVersion, the entry points that version has,
# the profiler table it takes and that table's descriptors.
#   1. Each variant is libnccl.so.2 by its SONAME and exports exactly the API table's entry points of its version (and
#      the test NCCL's own list), read here from the headers themselves, not through the generator that made them.
#   2. On each: a skip (rank 2 skips an all_reduce: NOT_JOINED naming rank 2), a count mismatch (MISMATCH naming rank
#      1) and a clean job (nothing reported; nothing said but the shim's note of what that NCCL cannot give), under
#      the shim, on the fake GPU. The verdicts are the same on every version; each rank file's nccl_version is the
#      variant's; the profiler table the variant took (its FAKE_NCCL_TRACE lines) is its version's newest; GPU
#      progress comes from NCCL's profiler, except on 2.21 (no profiler interface) and 2.31 (the shim asks it for no
#      events: its kernel-phase fence), where it comes from CUDA events, as a note here says. The clean job also puts
#      and waits for signals (--one-sided) where the NCCL has them.
#      The environment audit knows each version's variables: NCCL_NUM_RMA_CTX (2.29) is found unread by the scan of
#      2.21 to 2.28, and read from 2.29 on (each variant embeds the names its version added).
#   3. The same skip and mismatch with every collective through its Config form (--config-calls): on 2.31 and 2.32
#      the NCCL's own, on 2.28 the shim's export, which says once that the NCCL lacks it and passes the plain call on.
# The tracks (one per version, and per Config run) run side by side: their jobs mostly wait on the 2 s timeout.
. "$(dirname "$0")/lib.sh"
unset NCCL_PROFILER_PLUGIN FAKE_NCCL_PROFILER_VERSION NCCLWATCH_PROFILER NCCLWATCH_COLLECTOR
export NCCLWATCH_TIMEOUT_SEC=2 FAKE_NCCL_TRACE=1
export NCCL_NUM_RMA_CTX=2  # read from NCCL 2.29 on: the environment audit of each version (the skip job)
# At the default level a healthy job prints nothing, on every version: the shim's notes of what an NCCL cannot give
# (2.31's profiler asked for no events, 2.26's naming no send or receive) are debug lines.
export NCCLWATCH_LOG_LEVEL=info
FAKE_DIR=$(dirname "$FAKE_RANK")
TABLE="$NCW_SOURCE_ROOT/include/ncclwatch/api_table.h"
OWN="$NCW_SOURCE_ROOT/test/fake_nccl/fake_nccl_own_api.h"
VERSIONS="2.21:22105 2.26:22606 2.28:22809 2.29:22907 2.31:23102 2.32:23203"
START=$(date +%s%N)

# Every job's process group, killed at the end whatever happened (the tracks run in subshells of their own).
end_all_jobs() {
    local g
    for g in $(cat "$WORK/groups" 2>/dev/null); do kill -KILL -- "-$g" 2>/dev/null; done
}
trap 'end_all_jobs; cleanup' EXIT

# ---- 1. the exports -------------------------------------------------------------------------------------------------

# want_exports CODE: the entry points of that NCCL version, nccl<Name> and pnccl<Name>, sorted. The table's X(name,
# SINCE, ...) lines and the own list's X(name, SINCE); NCW_NCCL_INTERNAL's X(name) have no SINCE: NCCL's oldest.
want_exports() {
    grep -hoE '^ *X\(nccl[A-Za-z]+(, *[0-9]+)?' "$TABLE" "$OWN" | sed -E 's/^ *X\(([A-Za-z]+)(, *([0-9]+))?/\1 \3/' |
        awk -v code="$1" '($2 == "" ? 0 : $2 + 0) <= code + 0 { print $1; print "p" $1 }' | sort
}
for vc in $VERSIONS; do
    v=${vc%:*} code=${vc#*:}
    lib="$FAKE_DIR/libnccl-$v.so.2"
    soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$soname" = libnccl.so.2 ] || check_fail "$lib: SONAME '$soname', want libnccl.so.2"
    got=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | sort)
    want=$(want_exports "$code")
    [ "$(echo "$want" | wc -l)" -gt 60 ] || check_fail "want_exports $code read only $(echo "$want" | wc -l) names"
    if [ "$got" != "$want" ]; then
        check_fail "NCCL $v: exports differ from the API table's entry points of $code (< want, > got):
$(diff <(echo "$want") <(echo "$got") | grep '^[<>]')"
    fi
done
# The 2.28 variant's twin, the libnccl.so.2 every other test runs, exports the same.
[ "$(nm -D --defined-only "$FAKE_DIR/libnccl.so.2" | awk '{ print $3 }' | sort)" = "$(want_exports 22809)" ] ||
    check_fail "libnccl.so.2 does not export 2.28.9's entry points"
echo "ok: each variant is libnccl.so.2 and exports its version's entry points ($(want_exports 22105 | wc -l) on 2.21, $(want_exports 23203 | wc -l) on 2.32)"

# ---- 2. and 3. the jobs ---------------------------------------------------------------------------------------------

# start_job DIR V [fake_rank args...]: 3 ranks under the shim on variant V, in the background (a process group of
# their own, noted in $WORK/groups), on the fake GPU; dumps in DIR/dumps, output in DIR/out and DIR/err. Sets JOB_PID.
start_job() {
    local dir=$1 v=$2
    shift 2
    mkdir -p "$dir"
    NCCLWATCH_DIR="$dir/dumps" FAKE_NCCL_LIBRARY="$FAKE_DIR/libnccl-$v.so.2" LD_PRELOAD="$NCW_SHIM" \
        setsid "$FAKE_LAUNCH" --nproc 3 --timeout-sec 60 -- "$FAKE_RANK" --fake-cuda "$@" >"$dir/out" 2>"$dir/err" &
    JOB_PID=$!
    echo "$JOB_PID" >>"$WORK/groups"
}
end_job() { kill -KILL -- "-$1" 2>/dev/null; wait "$1" 2>/dev/null; }
reports_in() { [ "$(ls "$1"/dumps/*/*.report.json 2>/dev/null | wc -l)" -ge "$2" ]; }

# A rank file's facts: nccl_version, then each communicator's GPU source with its collectives (issued/completed),
# and the one-sided records: rank_facts FILE.
rank_facts() {
    "$NCW_COLLECTOR" dump --json "$1" | "$PY" -c "import json, sys
d = json.load(sys.stdin)
comms = [c for c in d['comms'] if c['coll_issued'] > 0]
ops = [r['op'] for r in d['records']['items']]
print('nccl_version', d['header']['nccl_version'])
print('gpu_source', ' '.join(sorted(set(c['gpu_source'] for c in comms))))
print('collectives', ' '.join(f\"{c['coll_issued']}/{c['coll_completed']}\" for c in comms))
print('one_sided', ops.count('PutSignal'), ops.count('WaitSignal'))"
}

# track NAME V [fake_rank args...]: the skip, the mismatch and (but with --config-calls) the clean job on variant V.
# Facts go to $WORK/NAME/facts ("key value..." a line), failures to $WORK/NAME/fails.
track() {
    local name=$1 v=$2
    shift 2
    local d="$WORK/$name" r
    mkdir -p "$d"
    : >"$d/facts"
    : >"$d/fails"
    tfail() { echo "$name: $*" >>"$d/fails"; }

    # Rank 2 skips its all_reduce of step 3: ranks 0 and 1 wait in their 6th, and each reports the stall.
    start_job "$d/skip" "$v" --steps 6 --skip-rank 2 --skip-step 3 --hold-ms 60000 "$@"
    if wait_for 20 reports_in "$d/skip" 2; then
        for r in "$d"/skip/dumps/*/rank[01]-*.report.json; do
            echo "skip $(stall_lead "$r" kind) $(stall_lead "$r" culprits) #$(stall_lead "$r" seq)" >>"$d/facts"
        done
    else
        tfail "skip: no stall report from ranks 0 and 1 in 20 s: $(grep -v '^fake-nccl' "$d/skip/err" | tail -3)"
    fi
    # The environment audit: NCCL_NUM_RMA_CTX (set for every job here) is read from NCCL 2.29 on, so the scan of an
    # older variant finds it unread, and of a newer one read (the probe's facts, written while the ranks hang).
    probed() { tr '\0' '\n' <"$1" | grep -qx 'ncclwatch.probe=done'; }
    for r in "$d"/skip/dumps/*/rank0-*.ncw; do
        if wait_for 10 probed "$r"; then
            if tr '\0' '\n' <"$r" | grep -q '^ncclwatch.no_effect=.*NCCL_NUM_RMA_CTX'; then
                echo "rma_ctx unread" >>"$d/facts"
            else
                echo "rma_ctx read" >>"$d/facts"
            fi
        else
            tfail "skip: the environment probe's facts did not appear in $(basename "$r")"
        fi
    done
    end_job "$JOB_PID"

    # Rank 1 all-reduces half the elements at step 2 (the 3rd): reported while the job runs, without a stall.
    touch "$d/mismatch.hold"
    start_job "$d/mismatch" "$v" --steps 5 --mismatch-rank 1 --mismatch-step 2 --mismatch-kind count \
        --wait-gone "$d/mismatch.hold" "$@"
    if wait_for 20 reports_in "$d/mismatch" 1; then
        r=$(ls "$d"/mismatch/dumps/*/*.report.json | head -1)
        echo "mismatch $(json_get "$r" "d['events'][0]['verdicts'][0]['kind']") $(json_get "$r" \
            "d['events'][0]['verdicts'][0]['culprits']") #$(json_get "$r" "d['events'][0]['verdicts'][0]['seq']")" \
            >>"$d/facts"
    else
        tfail "mismatch: no report in 20 s: $(grep -v '^fake-nccl' "$d/mismatch/err" | tail -3)"
    fi
    rm -f "$d/mismatch.hold"
    end_job "$JOB_PID"
    case " $* " in *" --config-calls "*) return ;; esac

    # A clean job: groups of an all_reduce and a ring send/recv, broadcasts, one-sided signals where the NCCL has them.
    start_job "$d/clean" "$v" --steps 6 --group --bcast-every 3 --one-sided "$@"
    wait "$JOB_PID"
    local rc=$?
    [ "$rc" = 0 ] || tfail "clean: the job exited $rc: $(grep -v '^fake-nccl' "$d/clean/err" | tail -3)"
    [ "$(ls "$d"/clean/dumps/*/*.report.json 2>/dev/null | wc -l)" = 0 ] || tfail "clean: a report was written"
    local said
    said=$(grep '^\[ncclwatch' "$d/clean/err")
    [ -z "$said" ] || tfail "clean: the shim said: $(echo "$said" | head -2 | tr '\n' ' ')"
    grep -Eq 'asks it for no profiler events|take CUDA events here' "$d/clean/err" && echo "note said" >>"$d/facts"
    "$NCW_COLLECTOR" analyze "$d"/clean/dumps/*/ >"$d/clean/analysis.txt" ||
        tfail "clean: analyze found a problem: $(head -2 "$d/clean/analysis.txt")"
    for r in "$d"/clean/dumps/*/rank*.ncw; do rank_facts "$r"; done | sort -u >>"$d/facts"
    # What the variant's own debug lines say it took, and the event mask the plugin (the shim) asked for.
    sed -n 's/^fake-nccl: NCCL [0-9.]* ([0-9]*): profiler plugin \(v[0-9]\) found.*/profiler \1/p
            s/^fake-nccl: NCCL [0-9.]* ([0-9]*): looks up no profiler plugin$/profiler none/p
            s/^fake-nccl: rank [0-9]*: profiler plugin v[0-9] init: event mask \(0x[0-9a-f]*\)$/mask \1/p' \
        "$d/clean/err" | sort -u >>"$d/facts"
    grep -q "one-sided: this NCCL has no ncclPutSignal" "$d/clean/err" && echo "one_sided skipped" >>"$d/facts"
    return 0
}

tracks=()
for vc in $VERSIONS; do
    track "${vc%:*}" "${vc%:*}" &
    tracks+=($!)
done
for v in 2.28 2.31 2.32; do
    track "$v-config" "$v" --config-calls &
    tracks+=($!)
done
for p in "${tracks[@]}"; do wait "$p"; done

# What each track found, one line each, for the log.
for t in $(echo "$VERSIONS" | sed 's/:[0-9]*//g') 2.28-config 2.31-config 2.32-config; do
    printf '%-12s %s\n' "$t" "$(grep -E '^(skip|mismatch|profiler|mask|gpu_source|nccl_version)' "$WORK/$t/facts" |
        sort -u | tr '\n' ';' | sed 's/;$//; s/;/ | /g')"
done

# has NAME LINE: the track's facts hold that line.
has() { grep -qxF "$2" "$WORK/$1/facts"; }
# want NAME LINE WHY: it does, or a failure that shows what the track found instead.
want() { has "$1" "$2" || check_fail "$1: want '$2' ($3); found: $(tr '\n' ';' <"$WORK/$1/facts")"; }

for vc in $VERSIONS; do
    v=${vc%:*} code=${vc#*:}
    while read -r line; do check_fail "$line"; done <"$WORK/$v/fails"
    # The verdicts: the same on every version, and the ones the job calls for.
    [ "$(grep -c '^skip NOT_JOINED \[2\] #6$' "$WORK/$v/facts")" = 2 ] ||
        check_fail "$v: skip: want NOT_JOINED [2] at #6 from ranks 0 and 1; found: $(grep '^skip' "$WORK/$v/facts" | tr '\n' ';')"
    want "$v" "mismatch MISMATCH [1] #3" "the count mismatch"
    want "$v" "nccl_version $code" "every rank file's NCCL is the variant"
    [ "$(grep -c '^nccl_version' "$WORK/$v/facts")" = 1 ] || check_fail "$v: rank files of several NCCL versions"
    want "$v" "collectives 8/8" "6 all_reduces and 2 broadcasts, all completed"
    if [ "$code" -ge 22900 ]; then
        want "$v" "rma_ctx read" "NCCL_NUM_RMA_CTX, a 2.29 variable, is read by NCCL $v: not flagged"
    else
        want "$v" "rma_ctx unread" "NCCL_NUM_RMA_CTX, a 2.29 variable, is flagged on NCCL $v"
    fi
    case $v in
        2.21)
            want "$v" "profiler none" "2.21 looks up no profiler plugin"
            has "$v" "mask 0x0" && check_fail "$v: a profiler init on an NCCL without a profiler interface"
            want "$v" "gpu_source cuda-events" "no profiler: the shim's CUDA events"
            want "$v" "one_sided skipped" "no ncclPutSignal before 2.29"
            echo "NOTE: NCCL 2.21 has no profiler plugin interface: its GPU progress comes from CUDA events (sampled:" \
                "lower bounds, never exact); its verdicts are the same as the others'"
            ;;
        2.31)
            want "$v" "profiler v7" "2.31 takes v7"
            want "$v" "mask 0x0" "the shim asks 2.31 for no profiler events"
            has "$v" "note said" && check_fail "$v: a healthy job heard the shim's note (it is a debug line)"
            want "$v" "gpu_source cuda-events" "no profiler events: the shim's CUDA events"
            want "$v" "one_sided 6 6" "a put and a wait each step"
            echo "NOTE: NCCL 2.31 takes the profiler's v7 table, but the shim asks it for no events (its kernel-phase" \
                "fence, NVIDIA/nccl#2355): GPU progress comes from CUDA events, lower bounds; the verdicts are the same"
            ;;
        *)
            n=$(case $v in 2.26) echo 3 ;; 2.28) echo 5 ;; 2.29) echo 6 ;; *) echo 7 ;; esac)
            want "$v" "profiler v$n" "NCCL $v takes the newest it knows"
            has "$v" "mask 0x0" && check_fail "$v: the shim asked NCCL $v for no profiler events"
            want "$v" "gpu_source nccl-profiler" "GPU progress from NCCL's profiler"
            if [ "$v" = 2.26 ]; then
                echo "NOTE: NCCL 2.26's profiler (v3) names no send or receive: those take CUDA events, and a" \
                    "communicator with both has lower-bound counts (a debug line says so); the verdicts are the same"
            fi
            if [ "$code" -ge 22902 ]; then
                want "$v" "one_sided 6 6" "a put and a wait each step"
            else
                want "$v" "one_sided skipped" "no ncclPutSignal before 2.29"
            fi
            ;;
    esac
done
for v in 2.28 2.31 2.32; do
    t="$v-config"
    while read -r line; do check_fail "$line"; done <"$WORK/$t/fails"
    [ "$(grep -c '^skip NOT_JOINED \[2\] #6$' "$WORK/$t/facts")" = 2 ] ||
        check_fail "$t: skip: want NOT_JOINED [2] at #6 from ranks 0 and 1, as the plain calls; found: $(grep '^skip' "$WORK/$t/facts" | tr '\n' ';')"
    want "$t" "mismatch MISMATCH [1] #3" "as the plain calls"
    missing=$(cat "$WORK/$t"/*/err | grep -c "^\[ncclwatch r[0-9]*\] the loaded NCCL has no ncclAllReduceConfig")
    # The NCCL's own Config form ran, given the framework's configuration (its FAKE_NCCL_TRACE line, once a rank).
    called=$(cat "$WORK/$t"/*/err | grep -c "^fake-nccl: AllReduceConfig: called with NCCL's configuration")
    if [ "$v" = 2.28 ]; then
        # Once per rank of each job (3 + 3), no more.
        [ "$missing" = 6 ] || check_fail "$t: the shim said $missing times that NCCL has no ncclAllReduceConfig, want 6 (once a rank)"
        [ "$called" = 0 ] || check_fail "$t: a Config form ran on NCCL 2.28"
    else
        [ "$missing" = 0 ] || check_fail "$t: the shim said NCCL $v has no ncclAllReduceConfig"
        [ "$called" = 6 ] || check_fail "$t: NCCL $v's ncclAllReduceConfig ran in $called ranks, want 6 (3 a job)"
    fi
done
# The framework itself, with no shim: it finds 2.31's own Config forms (in its libnccl.so.2, loaded RTLD_LOCAL), and
# on 2.28, with no shim to pass them on, stops with a clear usage error.
"$FAKE_LAUNCH" --nproc 1 --env "FAKE_NCCL_LIBRARY=$FAKE_DIR/libnccl-2.31.so.2" -- "$FAKE_RANK" --config-calls \
    --steps 2 >"$WORK/noshim.out" 2>"$WORK/noshim.err" ||
    check_fail "--config-calls on 2.31 without the shim: $(cat "$WORK/noshim.out" "$WORK/noshim.err" | head -3)"
"$FAKE_LAUNCH" --nproc 1 --env "FAKE_NCCL_LIBRARY=$FAKE_DIR/libnccl-2.28.so.2" -- "$FAKE_RANK" --config-calls \
    >"$WORK/noshim.out" 2>"$WORK/noshim.err"
grep -q "exit rank=0 status=2" "$WORK/noshim.out" && grep -q "the process has no ncclAllReduceConfig (NCCL 22809" "$WORK/noshim.err" ||
    check_fail "--config-calls on 2.28 without the shim: $(cat "$WORK/noshim.out" "$WORK/noshim.err" | head -3)"

checks_done "ok: NCCL 2.21 to 2.32: NOT_JOINED [2] and MISMATCH [1] on each, clean jobs quiet, each variant's profiler table and version; the Config calls alike on 2.28, 2.31 and 2.32 ($((($(date +%s%N) - START) / 1000000)) ms)"
