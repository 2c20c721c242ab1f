#!/bin/bash
# The GPU's UUID (format 1.6, issue 16): read at communicator init (cuDeviceGetUuid), it is in each rank file
# (`dump --json`: gpu_uuid), in analyze --json (the ranks of each communicator), and on the live collector's
# /metrics as dcgm-exporter's own `UUID` label, next to `pci_bus_id`, so that ncclwatch's series join its GPU series.
# The fake libcuda gives device d the UUID GPU-fa4e0000-00dd-4000-8000-0000000000dd (dd: d in hex). A rank without
# libcuda has no UUID: no label, and "" in the files.
. "$(dirname "$0")/lib_fakecuda.sh"
SERVE_PID=""
trap 'stop_serve; cleanup' EXIT
uuid_of() { printf "GPU-fa4e0000-00%02x-4000-8000-0000000000%02x" "$1" "$1"; }

mkdir -p "$WORK/live"
"$NCW_COLLECTOR" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --timeout 30 --out "$WORK/live" \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
wait_for 10 grep -q "metrics on" "$WORK/serve.out" || fail "serve did not start: $(cat "$WORK/serve.err")"
export NCCLWATCH_COLLECTOR="127.0.0.1:$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")"
MPORT=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/serve.out")
export NCCLWATCH_DIGEST_MS=50 NCCLWATCH_TIMEOUT_SEC=30
# rank R's series carry its GPU's pci_bus_id and UUID
labelled() { metrics | grep -q "^ncclwatch_alive{.*rank=\"$1\".*pci_bus_id=\"00000000:$2:00.0\",UUID=\"$3\"} 1$"; }

touch "$GO"
launch_job 2 --fake-cuda --steps 5 --wait-gone "$GO"
wait_for 30 has_files '*.ncw' 2 || fail "no rank files"
for r in 0 1; do
    wait_for 20 dump_rank "$r" || fail "cannot read rank $r's file"
    dev=$(json_get "$WORK/rank$r.json" "d['comms'][0]['cuda_dev']")
    want=$(uuid_of "$dev")
    got=$(json_get "$WORK/rank$r.json" "d['comms'][0]['gpu_uuid']")
    [ "$got" = "$want" ] || fail "rank $r (device $dev): gpu_uuid '$got', want '$want'"
    bus=$(printf "%02X" $((0x10 + dev)))
    wait_for 20 labelled "$r" "$bus" "$want" ||
        fail "/metrics: rank $r's series lack UUID=\"$want\": $(metrics | grep '^ncclwatch_alive')"
done
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json"
got=$(json_get "$WORK/analysis.json" "sorted({r['gpu_uuid'] for c in d['comms'] for r in c['ranks']})")
want="['$(uuid_of 0)', '$(uuid_of 1)']"
[ "$got" = "$want" ] || fail "analyze --json: the ranks' gpu_uuid are $got, want $want"
finish_job
[ "$JOB_RC" = 0 ] || fail "the job failed (rc $JOB_RC)"

# No libcuda in the process: no UUID anywhere, and no empty label.
rm -rf "$NCCLWATCH_DIR"
touch "$GO"
launch_job 1 --steps 5 --wait-gone "$GO"
wait_for 30 has_files '*.ncw' 1 || fail "no rank file (no libcuda)"
wait_for 20 dump_rank 0 || fail "cannot read the rank file (no libcuda)"
[ "$(json_get "$WORK/rank0.json" "d['comms'][0]['gpu_uuid']")" = "" ] || fail "a rank without libcuda has a UUID"
metrics | grep -q 'UUID=""' && fail "/metrics writes an empty UUID label"
finish_job
echo "ok: each rank's GPU UUID in its file, in analyze --json and as the UUID label on /metrics; none without libcuda"
