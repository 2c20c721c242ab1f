#!/bin/bash
# The wheel on the GPU machine (issue 16): installs a built wheel into torch's environment and runs the DDP example
# at 2 ranks on one GPU through `ncclwatch run -- torchrun ...`; checks exit 0, a rank file per rank, a clean
# `ncclwatch analyze`, and each file's GPU UUID against nvidia-smi's. Its last line: PASS or FAIL, and why.
#   bash test/gpu/wheel_check.sh [WHEEL]   (default: the newest dist/ncclwatch-*.whl, or .carry/ncclwatch-*.whl)
#   device tool: run(command="bash test/gpu/wheel_check.sh", carry=["dist"], kind="nvidia-h200", timeout_s=300)
# The two ranks share GPU 0 as examples/one_gpu.py arranges it (NCCL_HOSTID=fakehost<RANK>, NCCL_SOCKET_IFNAME=lo,
# device 0): ddp_train.py takes its device from LOCAL_RANK, so a small wrapper sets those and LOCAL_RANK=0 in each
# rank, then runs the example unchanged.
# Install: `pip install --no-index --no-deps` into /opt/torch/.venv; if that venv is read-only (or has no pip),
# `--target /tmp/ncw-site` (with PYTHONPATH), or, with no pip at all, the wheel unpacked there.
set -u
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
W=/tmp/ncw-wheel-check
VENV=${NCW_TORCH_VENV:-/opt/torch/.venv}
SITE=/tmp/ncw-site
rm -rf "$W" "$SITE"
mkdir -p "$W"

result() { echo "wheel_check: $*"; exit "$([ "${1%%:*}" = PASS ] && echo 0 || echo 1)"; }

whl=${1:-$(ls -t dist/ncclwatch-*.whl .carry/ncclwatch-*.whl 2>/dev/null | head -1)}
[ -n "$whl" ] && [ -f "$whl" ] || result "FAIL: no wheel (give its path; dist/ is git-ignored: carry it)"
whl=$(realpath "$whl")
PY=$VENV/bin/python
[ -x "$PY" ] || result "FAIL: no $PY"
export PATH="$VENV/bin:$PATH" NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
echo "== $(basename "$whl") into $VENV ($("$PY" --version 2>&1), $(ldd --version | head -1))"
if "$PY" -m pip install --no-index --no-deps --force-reinstall "$whl"; then
    NCW=("$VENV/bin/ncclwatch")
elif "$PY" -m pip install --no-index --no-deps --target "$SITE" "$whl"; then
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    NCW=("$SITE/bin/ncclwatch")
else
    echo "== no pip for $PY: the wheel unpacked into $SITE"
    "$PY" -m zipfile -e "$whl" "$SITE" && chmod +x "$SITE/ncclwatch/bin/ncclwatch-collector" ||
        result "FAIL: cannot install or unpack $whl"
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    NCW=("$PY" -m ncclwatch)
fi
"${NCW[@]}" --version || result "FAIL: ncclwatch --version"
so=$("${NCW[@]}" lib) && [ -f "$so" ] || result "FAIL: ncclwatch lib: '$so'"
echo "== ncclwatch lib: $so"

cat >"$W/one_gpu_rank.py" <<PY
import os, runpy, sys
sys.path.insert(0, "$REPO/examples")
import one_gpu
os.environ["LOCAL_RANK"] = str(one_gpu.setup(True))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
echo "== ncclwatch run --timeout 20 --dir $W/dumps -- torchrun --standalone --nproc_per_node=2 ... ddp_train.py --steps 200"
timeout 240 "${NCW[@]}" run --timeout 20 --dir "$W/dumps" -- torchrun --standalone --nproc_per_node=2 \
    "$W/one_gpu_rank.py" examples/ddp_train.py --steps 200
rc=$?
[ $rc = 0 ] || result "FAIL: ncclwatch run -- torchrun exited $rc"
n=$(ls "$W"/dumps/*/rank[01]-*.ncw 2>/dev/null | wc -l)
[ "$n" = 2 ] || result "FAIL: $n rank files in $W/dumps, want 2: $(ls -R "$W/dumps" 2>&1 | head -5)"
"${NCW[@]}" analyze "$W"/dumps/*/ >"$W/analysis.txt" 2>&1
arc=$?
head -3 "$W/analysis.txt"
[ $arc = 0 ] || result "FAIL: ncclwatch analyze of the clean job exited $arc: $(head -1 "$W/analysis.txt")"
# The GPU's UUID in the rank files (format 1.6): nvidia-smi's for GPU 0, which both ranks use.
want=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null | tr -d ' ')
for f in "$W"/dumps/*/rank[01]-*.ncw; do
    got=$("${NCW[@]}" dump --json "$f" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['comms'][0]['gpu_uuid'])")
    [ -z "$want" ] || [ "$got" = "$want" ] || result "FAIL: $(basename "$f"): gpu_uuid '$got', nvidia-smi says '$want'"
done
echo "== gpu_uuid in the rank files: ${got:-?} (nvidia-smi: ${want:-not available})"
uuid_word=$([ -n "$want" ] && echo "GPU UUID as nvidia-smi's" || echo "GPU UUID not checked (no nvidia-smi)")
result "PASS: $(basename "$whl") in $VENV: ncclwatch run -- torchrun (2 ranks, 1 GPU, 200 steps) exit 0, 2 rank files, analyze clean, $uuid_word"
