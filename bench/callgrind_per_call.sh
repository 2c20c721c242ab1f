#!/bin/bash
# The shim's own instructions per intercepted ncclAllReduce, and how many of them are locked (a lock prefix, or an
# xchg with memory: each a full barrier, about 20 cycles), counted by callgrind: numbers that do not move with the
# machine's load (the wall clock on a shared VM does, by a factor of two). Runs bench/call_cost.cpp's fake loop (the
# fake NCCL, with the fake libcuda.so.1 preloaded so that GPU tracking is on) under callgrind, collecting only inside
# the shim's ncclAllReduce, ncclGroupStart and ncclGroupEnd: entering the real one inside each toggles the collection
# off, so NCCL's own work is left out. Divided by the ops counted (the loop's warm-up is timed, so their number
# varies); with NCW_CALL_COST_ARGS="--group 2", a group's cost is shared by its two ops. The locked instructions are
# found by address in the shim's disassembly (objdump) and counted from callgrind's per-instruction costs.
#   bench/callgrind_per_call.sh BUILD_DIR SHIM_SO [ENV=VALUE...]
#   e.g. bench/callgrind_per_call.sh build build/shim/libncclwatch.so FAKE_CUDA_HOLD_ALL=1
# NCW_CALL_COST_RANKS=N among them: rank 0 of an N-rank communicator is counted, ranks 1..N-1 run beside it without
# the shim. A one-rank communicator gets no profiler event (as in NCCL, whose one-rank collectives are local copies),
# so the profiler path is counted at 2 ranks.
# NCW_CALL_COST_CALLBACKS=1 among them: NCCL's calls into the shim as its profiler plugin (ncw::prof_cb::*, inside the
# real call) are counted too, so that each profiler version's cost shows (FAKE_NCCL_PROFILER_VERSION caps it), and
# NCW_CALL_COST_NCCL=PATH preloads a variant of the test NCCL (test/fake_nccl: libnccl-2.31.so.2 asks for v7).
# Prints "N instructions per op (M ops); L locked per op". Without SHIM_SO ("") the count is the fake NCCL's own
# instructions per call (and no locked count).
set -u
build=$1
shim=$2
shift 2
out=$(mktemp /tmp/ncw-callgrind-XXXXXX)
export NCCLWATCH_DIR=$(mktemp -d /tmp/ncw-bench-XXXXXX)
trap 'rm -rf "$out" "$NCCLWATCH_DIR"' EXIT
read -r -a more <<<"${NCW_CALL_COST_ARGS:-}"
ranks=1
envs=()
callbacks=()
nccl_pre=""
for a in "$@"; do
    case $a in
    NCW_CALL_COST_RANKS=*) ranks=${a#*=} ;;
    NCW_CALL_COST_CALLBACKS=1) callbacks=(--toggle-collect='ncw::prof_cb::*') ;;
    NCW_CALL_COST_NCCL=*) nccl_pre=" ${a#*=}" ;;  # after the shim: its wrappers come first
    *) envs+=("$a") ;;
    esac
done
case $ranks in [1-8]) ;; *) echo "NCW_CALL_COST_RANKS: 1 to 8, not '$ranks'" >&2; exit 1 ;; esac
args=(--batches 10 --calls 2000 "${more[@]}")
peers=()
if [ "$ranks" -gt 1 ]; then
    idf="$NCCLWATCH_DIR/nccl-id"
    for ((r = 1; r < ranks; r++)); do
        env "${envs[@]}" LD_PRELOAD="$build/test/fake_cuda/libcuda.so.1$nccl_pre" "$build/bench/call_cost_fake" \
            --nranks "$ranks" --rank "$r" --id-file "$idf" "${args[@]}" >/dev/null 2>&1 &
        peers+=($!)
    done
    args+=(--nranks "$ranks" --rank 0 --id-file "$idf")
fi
env "${envs[@]}" LD_PRELOAD="$build/test/fake_cuda/libcuda.so.1 $shim$nccl_pre" valgrind --tool=callgrind --dump-instr=yes \
    --toggle-collect=ncclAllReduce --toggle-collect=ncclGroupStart --toggle-collect=ncclGroupEnd "${callbacks[@]}" \
    --callgrind-out-file="$out" "$build/bench/call_cost_fake" "${args[@]}" >/dev/null 2>&1 ||
    { echo "callgrind failed" >&2; kill "${peers[@]}" 2>/dev/null; exit 1; }
for p in "${peers[@]}"; do wait "$p"; done
python3 - "$out" "$shim" <<'PY'
import os, re, subprocess, sys
path, shim = sys.argv[1], sys.argv[2]
names, objs, cost = {}, {}, {}
calls = total = 0
callee = obj = None
pos = 0
call_line = False
for line in open(path):
    c = line[0]
    if c.isdigit() or c in '+-*':  # a cost line: instruction address (absolute, relative or the same), line, Ir
        parts = line.split()
        tok = parts[0]
        pos = pos if tok == '*' else pos + int(tok[1:], 0) if c == '+' else pos - int(tok[1:], 0) if c == '-' \
            else int(tok, 0)
        if call_line:  # the inclusive cost of a call made here: not this instruction's own
            call_line = False
        elif len(parts) >= 3:
            cost[(obj, pos)] = cost.get((obj, pos), 0) + int(parts[2])
        continue
    m = re.match(r'(c?)(ob|fn)=\((\d+)\)(?: (.*))?', line)
    if m:
        table = objs if m.group(2) == 'ob' else names
        if m.group(4):
            table[m.group(3)] = m.group(4).strip()
        if m.group(2) == 'ob' and not m.group(1):
            obj = objs.get(m.group(3))
        if m.group(2) == 'fn' and m.group(1):
            callee = names.get(m.group(3), '')
        continue
    if line.startswith('calls='):
        call_line = True
        # Calls of a function each intercepted call makes once, where collecting: the shim's record, or without the
        # shim the fake NCCL's enqueue of the op's "kernel".
        if callee and re.search(r'record_issue\(|^fakecuda_enqueue$', callee):
            calls += int(line.split('=')[1].split()[0])
    elif line.startswith(('summary:', 'totals:')):
        total = int(line.split()[1])
if not calls:
    sys.exit('no calls counted')
text = f'{total / calls:.0f} instructions per op ({calls} ops)'
if shim:
    dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', shim], capture_output=True, text=True).stdout
    locked = {int(m.group(1), 16) for m in re.finditer(r'^\s*([0-9a-f]+):\s+(?:lock\b|xchg\w*\s+[^\n]*\()', dis, re.M)}
    if not locked and 'lock' not in dis:
        sys.exit('objdump gave no disassembly of ' + shim)
    base = os.path.basename(os.path.realpath(shim))
    n = sum(v for (o, a), v in cost.items() if o and os.path.basename(o) == base and a in locked)
    text += f'; {n / calls:.3f} locked per op'
print(text)
PY
