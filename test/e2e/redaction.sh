#!/bin/bash
# Secrets never leave the process: with the common secret names set (NCCL_IB_PASSWD, TORCH_DISTRIBUTED_AUTH, a
# token, a URL with a password), a stalled job writes its rank files, reports and dumps, the live collector inside
# rank 0 writes its report, and `analyze` prints its own: none of them holds a secret's value. They are redacted at
# capture, so the live frames (read from the rank file) cannot carry them either. Issue 28, point 6: by pattern (PWD,
# PSK, ?token=, a scheme-less user:password@host, ;password=, ?passwd=), in stderr and `collector env` too. Issue 45,
# item 6: by shape (a bearer or basic credential, a URL password holding '/', password:X, a SAS sig=, X-Amz-*, a JWT
# by name and bare, an AccountKey, JSON keys, --password X, tokens by prefix, sshpass -p), while harmless look-alikes
# stay; then a standalone collector (serve: its stdout and reports) and a process's last words (an exception that
# quotes a signed URL and a bearer token) in its DEAD verdict, live and in analyze.
. "$(dirname "$0")/lib.sh"
export NCCLWATCH_TIMEOUT_SEC=2 NCCLWATCH_COLLECTOR=auto NCCLWATCH_DIGEST_MS=50
export NCCL_IB_PASSWD=hunter2passwd TORCH_DISTRIBUTED_AUTH=opensesame-auth NCCL_NET_TOKEN=tok-3141
export TORCH_DISTRIBUTED_STORE_URL=tcp://bob:pw-in-url-27@store:29500
# Issue 28, point 6: secrets in the forms a list of names missed, found by pattern.
export NCCL_NET_PWD=pwd-netpwd-61 NCCL_PSK=psk-value-66
export TORCH_DISTRIBUTED_INIT_METHOD='tcp://store:29500?token=tok-init-62&world_size=4'
export TORCH_DISTRIBUTED_STORE_ENDPOINT=admin:etcd-pw-63@etcd:2379
export NCCL_DB_OPTIONS='host=db;password=pw-semi-64;port=5432' NCCL_PLUGIN_URL='https://h/x?passwd=pw-q-65'
# Issue 45, item 6: secrets by shape, under names that say nothing (the name alone would redact the whole value).
export NCCL_TEST_HEADER='Authorization: Bearer bearer-tok-71'
export NCCL_TEST_CURL="curl -H 'Authorization: Basic YmFzaWMtdXNlcjpiYXNpYy1wdy03Mg==' https://api"
export NCCL_TEST_S3='s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCY73EXAMPLE@bucket/path'
export NCCL_TEST_DB='password:pw-nospace-74' NCCL_JWT='eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqd3QtNzkifQ.c2lnLWp3dC03OQ'
export NCCL_TEST_BLOB='https://acct.blob.core.windows.net/c/b?sv=2021&ss=b&sig=sig-azure-75%2F'
export NCCL_TEST_AMZ='https://b.s3.amazonaws.com/k?X-Amz-Credential=cred-amz-76&X-Amz-Signature=sig-amz-77&X-Amz-Security-Token=tok-amz-78'
export NCCL_TEST_ARGS='--password pw-opt-80 --hf-token hf-opt-81 ghp_0123456789abcdefghijABCDEFGHIJ820000'
export NCCL_TEST_AZURE='DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=acctkey-83==;EndpointSuffix=x.net'
export NCCL_TEST_BARE='using eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiYXJlLTg0In0.c2ln now'
export NCCL_TEST_JSON='{"private_key": "pk-json-85", "client_secret": "cs-json-86"}'
export NCCL_TEST_SSH='sshpass -p sshpass-87 ssh node1'
# Harmless look-alikes: kept as they are.
export NCCL_TEST_PATH='/data/key_frames/x.pt' NCCL_TEST_FLAGS='--max-tokens 4096 --tokenizer gpt2'
launch_job 4 --steps 10 --skip-rank 2 --skip-step 5 --hold-ms 60000
wait_for 30 has_files '*.ncw' 4 || fail "no rank files"
wait_for 30 test -s "$(job_dir)/live-report.json" || fail "no live report"
wait_for 20 has_files '*.dump.json' 4 || fail "not every rank wrote a dump"
wait_for 20 has_files '*.report.json' 3 || fail "no stall reports"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis.txt" 2>&1
"$NCW_COLLECTOR" analyze --json "$(job_dir)" >"$WORK/analysis.json" 2>&1
for f in "$(job_dir)"/rank0-*.ncw; do "$NCW_COLLECTOR" dump --json "$f" >"$WORK/dump0.json"; done
# `ncclwatch-collector env` shows the settings as set: never the token's value.
NCCLWATCH_TOKEN=tok-env-67 NCCLWATCH_COLLECTOR=collector:29610 "$NCW_COLLECTOR" env >"$WORK/env.txt" 2>&1
grep -q "currently set: <redacted>" "$WORK/env.txt" || fail "collector env does not show NCCLWATCH_TOKEN as redacted"
SECRETS=(hunter2passwd opensesame-auth tok-3141 pw-in-url-27 pwd-netpwd-61 tok-init-62 etcd-pw-63 pw-semi-64 pw-q-65
    psk-value-66 tok-env-67
    bearer-tok-71 YmFzaWMtdXNlcjpiYXNpYy1wdy03Mg wJalrXUtnFEMI K7MDENG bPxRfiCY73 pw-nospace-74 eyJzdWIiOiJqd3QtNzkifQ
    sig-azure-75 cred-amz-76 sig-amz-77 tok-amz-78 pw-opt-80 hf-opt-81 0123456789abcdefghijABCDEFGHIJ820000
    acctkey-83 eyJzdWIiOiJiYXJlLTg0In0 pk-json-85 cs-json-86 sshpass-87)
for secret in "${SECRETS[@]}"; do
    hits=$(grep -rl -a -- "$secret" "$(job_dir)" "$WORK/analysis.txt" "$WORK/analysis.json" "$WORK/dump0.json" \
        "$WORK/launch.err" "$WORK/launch.out" "$WORK/env.txt")
    [ -z "$hits" ] || fail "the value of a secret ($secret) was written to: $hits"
done
grep -q '"NCCL_IB_PASSWD": "<redacted>"' "$(ls "$(job_dir)"/*.dump.json | head -1)" ||
    fail "the dump does not show NCCL_IB_PASSWD as redacted"
grep -q 'tcp://bob:<redacted>@store:29500' "$(ls "$(job_dir)"/*.dump.json | head -1)" ||
    fail "the URL's password is not redacted in the dump"
grep -q 'tcp://store:29500?token=<redacted>&world_size=4' "$(ls "$(job_dir)"/*.dump.json | head -1)" ||
    fail "the init method's token is not redacted in the dump (or the rest of it was lost)"
# Issue 45, item 6: each form as the dump shows it, the secret gone and the rest intact; the look-alikes whole.
dump=$(ls "$(job_dir)"/*.dump.json | head -1)
for want in '"NCCL_TEST_HEADER": "Authorization: Bearer <redacted>"' \
    '"NCCL_TEST_CURL": "curl -H '"'"'Authorization: Basic <redacted>'"'"' https://api"' \
    '"NCCL_TEST_S3": "s3://AKIAIOSFODNN7EXAMPLE:<redacted>@bucket/path"' '"NCCL_TEST_DB": "password:<redacted>"' \
    '"NCCL_JWT": "<redacted>"' '"NCCL_TEST_BLOB": "https://acct.blob.core.windows.net/c/b?sv=2021&ss=b&sig=<redacted>"' \
    '"NCCL_TEST_AMZ": "https://b.s3.amazonaws.com/k?X-Amz-Credential=<redacted>&X-Amz-Signature=<redacted>&X-Amz-Security-Token=<redacted>"' \
    '"NCCL_TEST_ARGS": "--password <redacted> --hf-token <redacted> ghp_<redacted>"' \
    '"NCCL_TEST_AZURE": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=<redacted>;EndpointSuffix=x.net"' \
    '"NCCL_TEST_BARE": "using <redacted> now"' \
    '"NCCL_TEST_JSON": "{\"private_key\": \"<redacted>\", \"client_secret\": \"<redacted>\"}"' \
    '"NCCL_TEST_SSH": "sshpass -p <redacted> ssh node1"' \
    '"NCCL_TEST_PATH": "/data/key_frames/x.pt"' '"NCCL_TEST_FLAGS": "--max-tokens 4096 --tokenizer gpt2"'; do
    grep -qF -- "$want" "$dump" || fail "the dump lacks $want: $(grep -F "${want%%:*}" "$dump")"
done
echo "ok: no secret's value, in any of its forms, in the rank files, reports, dumps, the live report, analyze, stderr or env"

# Issue 45, item 6: a standalone collector (serve) and a process's last words. Rank 3 of a CPython job (py_stall.py)
# dies of an exception whose message quotes a signed URL and a bearer token; the environment above is set still.
# Serve's stdout, stderr and reports, the rank files, a dump and analyze carry its DEAD verdict with the words and
# never a secret: the shim redacts the words as it records them, each reader again.
[ -x /usr/bin/python3 ] || { echo "SKIP: the last words (no /usr/bin/python3)"; exit 0; }
stop_job
export NCCLWATCH_DIR="$WORK/dumps2" NCCLWATCH_SUSPECT=0
start_live_serve
export FAKE_NCCL_LIB="$(dirname "$FAKE_RANK")/libnccl.so.2" RAISE_RANK=3 RAISE_STEP=3 STEPS=6 EXIT_SLOW_SEC=2
export RAISE_MESSAGE='403 for url https://acct.blob.core.windows.net/c/x?sv=2021&sig=sig-words-88 (Authorization: Bearer bearer-words-89)'
new_launch_logs
PYTHONPATH="$NCW_SOURCE_ROOT/python/ncclwatch/_boot" LD_PRELOAD="$NCW_SHIM" setsid "$FAKE_LAUNCH" --nproc 4 \
    --timeout-sec 90 -- /usr/bin/python3 "$(dirname "$0")/py_stall.py" >"$WORK/launch.out" 2>"$WORK/launch.err" &
LAUNCH_PID=$!
words="RuntimeError: 403 for url https://acct.blob.core.windows.net/c/x?sv=2021&sig=<redacted> (Authorization: Bearer <redacted>)"
wait_for 30 grep -qF "DEAD: rank 3 (" "$WORK/serve.out" || fail "serve reported no DEAD: $(tail -3 "$WORK/serve.out")"
grep -F "DEAD: rank 3 (" "$WORK/serve.out" | head -1 | grep -qF "$words" ||
    fail "serve's DEAD lacks the redacted words: $(grep -F 'DEAD: rank 3 (' "$WORK/serve.out" | head -1)"
wait_for 20 sh -c "\"$NCW_COLLECTOR\" dump --json $(ls "$(job_dir)"/rank3-*.ncw) | grep -q '\"end_kind\": \"exit\"'" ||
    fail "rank 3 never ended"
"$NCW_COLLECTOR" analyze "$(job_dir)" >"$WORK/analysis2.txt" 2>&1
head -1 "$WORK/analysis2.txt" | grep -qF "exited (exit code 1): $words" ||
    fail "analyze's lead lacks the redacted words: $(head -1 "$WORK/analysis2.txt")"
"$NCW_COLLECTOR" dump --json "$(ls "$(job_dir)"/rank3-*.ncw)" >"$WORK/dump3.json"
# The shim's lines of the job's stderr (Python's own traceback there is the program's, not ours).
ncw_lines "$WORK/launch.err" >"$WORK/shim2.err"
for secret in "${SECRETS[@]}" sig-words-88 bearer-words-89; do
    hits=$(grep -rl -a -- "$secret" "$(job_dir)" "$WORK/live" "$WORK/serve.out" "$WORK/serve.err" "$WORK/analysis2.txt" \
        "$WORK/dump3.json" "$WORK/shim2.err")
    [ -z "$hits" ] || fail "the value of a secret ($secret) was written to: $hits"
done
echo "ok: serve's stdout and reports, and the last words (live, in the file, in analyze), hold no secret either"
