#!/bin/bash
# The wheel (issue 16): build it (scripts/build_wheel.py --from-build: meson-python offline over this build's
# binaries, stripped, tagged for the glibc and libstdc++ they need), pip-install it with --no-index into a fresh venv,
# run `ncclwatch demo` (the bundled test NCCL: rank 2 named) and the test-NCCL hang through `ncclwatch run`: the
# wheel's .so is the one preloaded, and the shim names rank 2 NOT_JOINED at #10; `ncclwatch lib`, `ncclwatch analyze`
# and ncclwatch.analyze() work from the venv. With NCW_WHEEL set to a built wheel, that one is tested and nothing is
# built.
. "$(dirname "$0")/lib.sh"
unset LD_PRELOAD NCCLWATCH_TIMEOUT_SEC NCCLWATCH_COLLECTOR
export -n NCCLWATCH_DIR  # `ncclwatch run --dir` sets it; the helpers of lib.sh still read it here

if [ -n "${NCW_WHEEL:-}" ]; then
    whl=$NCW_WHEEL
else
    start=$(date +%s)
    /usr/bin/python3 "$NCW_SOURCE_ROOT/scripts/build_wheel.py" --outdir "$WORK/dist" --sdist \
        --builddir "$WORK/wheel-build" --from-build "$NCW_BUILD_ROOT" >"$WORK/built.txt" 2>"$WORK/build.err" ||
        { tail -30 "$WORK/build.err" >&2; fail "no wheel"; }
    whl=$(sed -n 1p "$WORK/built.txt")
    sdist=$(sed -n 2p "$WORK/built.txt")
    echo "wheel and sdist built in $(($(date +%s) - start)) s: $(grep '^build_wheel:' "$WORK/build.err")"
    # The source distribution: what a package index gets beside the wheel. It builds a wheel (with this build's
    # binaries, not to compile again), and its metadata passes twine's check where twine is installed.
    case "$(basename "$sdist")" in "ncclwatch-$NCW_VERSION.tar.gz") ;; *) fail "the sdist is '$sdist'" ;; esac
    for f in pyproject.toml meson.build meson_options.txt README.md LICENSE python/ncclwatch/_demo.py \
        shim/meson.build test/fake_nccl/meson.build; do
        tar -tzf "$sdist" "ncclwatch-$NCW_VERSION/$f" >/dev/null 2>&1 || fail "the sdist lacks $f"
    done
    # pip 23.0 (Debian 12): --config-settings, and one value per key (nccl_headers keeps its default here).
    /usr/bin/python3 -m pip wheel --no-index --no-build-isolation --no-deps --disable-pip-version-check -w \
        "$WORK/from-sdist" --config-settings setup-args=-Dwheel_from="$NCW_BUILD_ROOT" "$sdist" >"$WORK/sdist.out" 2>&1 ||
        fail "pip wheel of the sdist: $(tail -20 "$WORK/sdist.out")"
    if /usr/bin/python3 -m twine --version >/dev/null 2>&1; then
        /usr/bin/python3 -m twine check --strict "$whl" "$sdist" >"$WORK/twine.out" 2>&1 ||
            fail "twine check: $(cat "$WORK/twine.out")"
    fi
fi
case "$(basename "$whl")" in
ncclwatch-"$NCW_VERSION"-py3-none-manylinux_2_[0-9]*_x86_64.whl) ;;
*) fail "the wheel is $whl, want ncclwatch-$NCW_VERSION-py3-none-manylinux_2_NN_x86_64.whl" ;;
esac

/usr/bin/python3 -m venv "$WORK/venv" || fail "python3 -m venv failed (python3-venv)"
"$WORK/venv/bin/python" -m pip install --no-index --disable-pip-version-check "$whl" >"$WORK/pip.out" 2>&1 ||
    fail "pip install --no-index: $(cat "$WORK/pip.out")"
export PATH="$WORK/venv/bin:$PATH"
[ "$(command -v ncclwatch)" = "$WORK/venv/bin/ncclwatch" ] || fail "no ncclwatch in the venv: $(command -v ncclwatch)"

so=$(ncclwatch lib) || fail "ncclwatch lib exited $?"
case "$so" in "$WORK"/venv/*/site-packages/ncclwatch/libncclwatch.so) ;; *) fail "ncclwatch lib: $so" ;; esac
[ -f "$so" ] || fail "ncclwatch lib names $so, which does not exist"
# Stripped, it still exports the NCCL API and nothing else, and needs no libnccl/libcudart/libcuda.
bash "$(dirname "$0")/check_exports.sh" "$so" "$NCW_SOURCE_ROOT/include/ncclwatch/api_table.h" >"$WORK/exports.txt" ||
    fail "the wheel's .so: $(cat "$WORK/exports.txt")"
ncclwatch --version | grep -qx "ncclwatch $NCW_VERSION (.*)" || fail "ncclwatch --version: $(ncclwatch --version)"
ncclwatch-collector --version | grep -qx "ncclwatch $NCW_VERSION (.*)" || fail "the venv's ncclwatch-collector"

# `ncclwatch demo`: the bundled test NCCL's 4 ranks, rank 2 named by the shim, the live collector and analyze.
ncclwatch demo --dir "$WORK/demo" >"$WORK/demo.out" 2>&1 ||
    fail "ncclwatch demo exited $?: $(tail -20 "$WORK/demo.out")"
grep -q "^\[ncclwatch r[0-9]\] NOT_JOINED: rank 2 (.*) never issued AllReduce #" "$WORK/demo.out" ||
    fail "ncclwatch demo: the shim's first line does not name rank 2: $(cat "$WORK/demo.out")"
grep -q "^VERDICT  rank 2 (.*) never issued AllReduce #" "$WORK/demo.out" ||
    fail "ncclwatch demo: analyze does not name rank 2"
! pgrep -f "$WORK/venv/.*/demo/fake_rank" >/dev/null || fail "ncclwatch demo left its job running"
echo "ncclwatch demo: $(grep -c . "$WORK/demo.out") lines"

# `run` sets the shim's variables it is given (each one `ncclwatch env` lists) and appends to LD_PRELOAD.
ncclwatch env >"$WORK/env.txt" || fail "ncclwatch env exited $?"
for v in $("$WORK/venv/bin/python" -c 'from ncclwatch._cli import RUN_VARIABLES; print(*RUN_VARIABLES.values())'); do
    grep -q "^$v " "$WORK/env.txt" || fail "run sets $v, which the shim does not read"
done
(cd "$WORK" && LD_PRELOAD=libm.so.6 NCCLWATCH_ENABLE=0 ncclwatch run --timeout 2.5 --dir rel --action abort \
    --collector 127.0.0.1:9 -- /usr/bin/env) >"$WORK/run_env.txt" || fail "ncclwatch run -- env exited $?"
for kv in "NCCLWATCH_TIMEOUT_SEC=2.5" "NCCLWATCH_DIR=$WORK/rel" "NCCLWATCH_ACTION=abort" \
    "NCCLWATCH_COLLECTOR=127.0.0.1:9" "LD_PRELOAD=libm.so.6:$so"; do
    grep -qxF "$kv" "$WORK/run_env.txt" || fail "ncclwatch run: no $kv in $(grep -E 'NCCLWATCH|PRELOAD' "$WORK/run_env.txt")"
done
# And the last-words hook: its folder in the installed package first on PYTHONPATH, where Python finds it; a plain
# LD_PRELOAD user of the installed wheel gets it from ncclwatch-last-words.pth.
boot=$("$WORK/venv/bin/python" -c 'import ncclwatch, os; print(os.path.join(os.path.dirname(ncclwatch.__file__), "_boot"))')
grep -q "^PYTHONPATH=$boot" "$WORK/run_env.txt" || fail "ncclwatch run: PYTHONPATH is $(grep PYTHONPATH "$WORK/run_env.txt")"
[ -f "$boot/sitecustomize.py" ] && [ -f "$boot/ncclwatch_last_words.py" ] || fail "the hook is not in the wheel"
LD_PRELOAD="$so" NCCLWATCH_ENABLE=0 "$WORK/venv/bin/python" -c 'import sys; sys.exit(0 if getattr(sys, "_ncclwatch_last_words", False) else 3)' ||
    fail "the wheel's .pth does not install the hook under the shim"
"$WORK/venv/bin/python" -c 'import sys; sys.exit(3 if getattr(sys, "_ncclwatch_last_words", False) else 0)' ||
    fail "the wheel's .pth installs the hook without the shim"
# A bad --collector is refused before anything runs, in the collector's parser's words (test/e2e/endpoints.sh).
ncclwatch run --collector host:99999 -- touch "$WORK/ran" 2>"$WORK/bad_collector.err"
rc=$?
[ $rc = 2 ] && [ ! -e "$WORK/ran" ] || fail "ncclwatch run --collector host:99999: exit $rc, want 2 and nothing run"
grep -qxF "ncclwatch run: --collector: 'host:99999': the port 99999 is not in 1..65535 (expected auto, HOST:PORT or \
[IPv6]:PORT, the port 1..65535); see 'ncclwatch run --help'" "$WORK/bad_collector.err" ||
    fail "ncclwatch run --collector host:99999: $(cat "$WORK/bad_collector.err")"
ncclwatch run -- sh -c 'exit 7'
[ $? = 7 ] || fail "ncclwatch run does not pass on its command's exit status"
ncclwatch run --timeout x -- true 2>"$WORK/usage.txt"
[ $? = 2 ] && [ "$(wc -l <"$WORK/usage.txt")" = 1 ] && grep -q "see 'ncclwatch run --help'" "$WORK/usage.txt" ||
    fail "a usage error of run is not one line with exit status 2: $(cat "$WORK/usage.txt")"

# The hang: rank 2 of 4 skips one all_reduce, under `ncclwatch run` only (no LD_PRELOAD of ours, no NCCLWATCH_DIR).
setsid ncclwatch run --timeout 2 --dir "$NCCLWATCH_DIR" -- "$FAKE_LAUNCH" --nproc 4 --timeout-sec 90 -- \
    "$FAKE_RANK" --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000 >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!
wait_for 60 has_files '*.report.json' 3 || fail "no report from the three waiting ranks"
has_files '*.ncw' 4 || fail "not every rank has a rank file"
for f in "$(job_dir)"/rank*.ncw; do
    pid=$(echo "$f" | sed -n 's/.*-\([0-9]*\)\.ncw$/\1/p')
    grep -qF "$so" "/proc/$pid/maps" || fail "rank $f: the wheel's $so is not loaded"
done
for r in "$(job_dir)"/rank[013]-*.report.json; do
    v="[e for e in d['events'] if e['type']=='stall'][0]['verdicts'][0]"
    [ "$(json_get "$r" "$v['kind']")" = NOT_JOINED ] || fail "$r: verdict $(json_get "$r" "$v")"
    [ "$(json_get "$r" "$v['culprits']")" = "[2]" ] || fail "$r: culprits $(json_get "$r" "$v['culprits']")"
done
wait_for 10 grep -q "NOT_JOINED: rank 2 (.*) never issued AllReduce #10 on communicator" "$WORK/launch.err" ||
    fail "the stderr report does not name rank 2"

ncclwatch analyze "$(job_dir)" >"$WORK/analysis.txt"
rc=$?
[ $rc = 1 ] || fail "ncclwatch analyze exit $rc, want 1 (hang found)"
grep -q "NOT_JOINED" "$WORK/analysis.txt" || fail "ncclwatch analyze does not say NOT_JOINED"
"$WORK/venv/bin/python" - "$(job_dir)" <<'PY' || fail "ncclwatch.analyze() from Python"
import sys
import ncclwatch
a = ncclwatch.analyze(sys.argv[1])
v = a["verdicts"][0]
culprits = [c["global_rank"] for c in v["culprits"]]
assert a["problem_found"] and v["kind"] == "NOT_JOINED" and culprits == [2] and v["seq"] == 10, v
try:
    ncclwatch.analyze("/nonexistent/ncclwatch-job")
    sys.exit("no AnalyzeError for a path with no rank file")
except ncclwatch.AnalyzeError as e:
    assert "no readable rank file" in str(e) and e.returncode == 2, (str(e), e.returncode)
print("ncclwatch.analyze:", a["headline"])
PY
ncclwatch analyze /nonexistent/ncclwatch-job 2>/dev/null
[ $? = 2 ] || fail "ncclwatch analyze of nothing readable does not exit 2"
stop_job

# A clean job through `ncclwatch run`: exit 0, a rank file per rank.
rm -rf "$NCCLWATCH_DIR"
ncclwatch run --timeout 5 --dir "$NCCLWATCH_DIR" -- "$FAKE_LAUNCH" --nproc 2 --timeout-sec 60 -- "$FAKE_RANK" \
    --steps 3 >"$WORK/launch.out" 2>"$WORK/launch.err" || fail "a clean job under ncclwatch run exited $?"
has_files '*.ncw' 2 || fail "the clean job left no rank files"
echo "ok: $(basename "$whl") from a fresh venv: ncclwatch run names rank 2 NOT_JOINED at #10"
