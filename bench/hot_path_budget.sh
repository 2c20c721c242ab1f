#!/bin/bash
# CI's guard on the hot path's cost: the instructions and the locked instructions per intercepted call, counted by
# callgrind (bench/callgrind_per_call.sh: counts, not times, so they hold on a noisy 2-core machine), must not grow
# past the figures of record in docs/PERFORMANCE.md ("Hot path" table, the rows that name an environment) by more
# than 10 %. A change that costs more updates the figure there, with its reason, in the same commit.
#   bench/hot_path_budget.sh BUILD_DIR SHIM_SO PERFORMANCE_MD
set -u
build=$1
shim=$2
doc=$3
command -v valgrind >/dev/null || { echo "hot_path_budget: valgrind is needed (scripts/setup.sh installs it)"; exit 1; }
command -v objdump >/dev/null || { echo "hot_path_budget: objdump is needed (binutils)"; exit 1; }
here=$(dirname "$0")
rows=$(grep -E '^\| [^|]+ \| `[^`]*` \| [0-9]+ \| [0-9.]+ \|' "$doc")
[ -n "$rows" ] || { echo "hot_path_budget: no figures of record in $doc"; exit 1; }
status=0
while IFS='|' read -r _ what envs instr locked _; do
    envs=$(echo "$envs" | tr -d '`' | xargs)
    instr=$(echo "$instr" | xargs)
    locked=$(echo "$locked" | xargs)
    # shellcheck disable=SC2086
    got=$(bash "$here/callgrind_per_call.sh" "$build" "$shim" $envs) || { echo "FAIL $envs: $got"; status=1; continue; }
    verdict=$(python3 - "$got" "$instr" "$locked" <<'PY'
import re, sys
got, instr, locked = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
m = re.match(r'(\d+) instructions per op .*; ([0-9.]+) locked per op', got)
if not m:
    print('FAIL (no count)')
    sys.exit()
gi, gl = float(m.group(1)), float(m.group(2))
over = [f'{name} {g:g} > {f:g} + 10 %' for name, g, f in (('instructions', gi, instr), ('locked', gl, locked))
        if g > f * 1.10 + 1e-9]
print('FAIL (' + '; '.join(over) + ')' if over else 'ok')
PY
)
    echo "$verdict:$(echo "$what" | sed 's/ *$//') ($envs): $got; of record $instr and $locked"
    case $verdict in ok) ;; *) status=1 ;; esac
done <<<"$rows"
exit $status
