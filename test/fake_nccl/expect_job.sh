#!/bin/sh
# Runs a fake_launch job and checks how each rank ended and how long the job took.
#   expect_job.sh "<status of rank 0> <status of rank 1> ..." <min seconds> <max seconds> <fake_launch> [args...]
# A status is what fake_launch prints after "status=": an exit code or a signal name (e.g. "3 0 3 SIGKILL").
set -u
expected=$1 min_sec=$2 max_sec=$3
shift 3

start=$(date +%s%N)
out=$("$@")
rc=$?
end=$(date +%s%N)
printf '%s\n' "$out"

want=""
rank=0
all_zero=1
for status in $expected; do
    want="${want}exit rank=$rank status=$status
"
    [ "$status" = 0 ] || all_zero=0
    rank=$((rank + 1))
done
got=$(printf '%s\n' "$out" | grep '^exit rank=')
if [ "$got" != "$(printf '%s' "$want")" ]; then
    printf 'expect_job: rank statuses differ\n--- expected\n%s--- got\n%s\n' "$want" "$got" >&2
    exit 1
fi
want_rc=$((1 - all_zero))
if [ "$rc" != "$want_rc" ]; then
    echo "expect_job: fake_launch exited $rc, expected $want_rc" >&2
    exit 1
fi
# Whole milliseconds, compared in awk to allow fractional bounds.
ms=$(( (end - start) / 1000000 ))
if ! awk -v ms="$ms" -v lo="$min_sec" -v hi="$max_sec" 'BEGIN { exit !(ms >= lo * 1000 && ms <= hi * 1000) }'; then
    echo "expect_job: the job took ${ms} ms, expected between ${min_sec} s and ${max_sec} s" >&2
    exit 1
fi
echo "expect_job: ok (${ms} ms)" >&2
