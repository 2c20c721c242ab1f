#!/bin/bash
# The collector's command line (issue 16): every command answers --version with "ncclwatch VERSION (COMMIT)" and
# --help with its own options (exit 0); a usage error is one line on stderr that names the command and points to
# its --help, with exit status 2 and nothing on stdout; analyze --json and dump --json carry the version; the options
# the other tests use keep working in both spellings; the man page is made from the help.
# Environment: NCW_SHIM NCW_COLLECTOR FAKE_LAUNCH FAKE_RANK NCW_VERSION NCW_SOURCE_ROOT NCW_MAN. Bounded: ~10 s.
. "$(dirname "$0")/lib.sh"
C=$NCW_COLLECTOR
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)

# --version, on its own and after each command.
hash=""
for cmd in "" analyze dump serve relay env; do
    out=$("$C" $cmd --version 2>"$WORK/err")
    rc=$?
    [ $rc = 0 ] || fail "'$cmd --version': exit $rc, want 0"
    [ -s "$WORK/err" ] && fail "'$cmd --version' wrote to stderr: $(cat "$WORK/err")"
    [[ "$out" =~ ^ncclwatch\ ${NCW_VERSION//./\\.}\ \(([0-9a-f]+|unknown)\)$ ]] ||
        fail "'$cmd --version' printed '$out', want 'ncclwatch $NCW_VERSION (COMMIT)'"
    [ -z "$hash" ] || [ "${BASH_REMATCH[1]}" = "$hash" ] || fail "'$cmd --version' names another commit: $out"
    hash=${BASH_REMATCH[1]}
done
if git -C "$NCW_SOURCE_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$NCW_SOURCE_ROOT" cat-file -e "$hash^{commit}" 2>/dev/null ||
        fail "--version names '$hash', not a commit of $NCW_SOURCE_ROOT"
else
    [ "$hash" = unknown ] || fail "not a git checkout: want commit 'unknown', got '$hash'"
fi
version="$NCW_VERSION ($hash)"

# --help (and -h, and `help COMMAND`) per command: exit 0, stdout only, the command's own options.
check_help() {
    local cmd=$1
    shift
    "$C" $cmd --help >"$WORK/help.txt" 2>"$WORK/err" || fail "'$cmd --help': exit $?, want 0"
    [ -s "$WORK/err" ] && fail "'$cmd --help' wrote to stderr: $(cat "$WORK/err")"
    "$C" $cmd -h | cmp -s - "$WORK/help.txt" || fail "'$cmd -h' differs from '$cmd --help'"
    if [ -n "$cmd" ]; then
        "$C" help "$cmd" | cmp -s - "$WORK/help.txt" || fail "'help $cmd' differs from '$cmd --help'"
        grep -q "^Usage: ncclwatch-collector $cmd" "$WORK/help.txt" || fail "'$cmd --help' has no usage line"
    fi
    for o in --help --version "$@"; do
        grep -qe "$o" "$WORK/help.txt" || fail "'$cmd --help' does not name $o"
    done
    [ "$(wc -l <"$WORK/help.txt")" -lt 100 ] || fail "'$cmd --help' has $(wc -l <"$WORK/help.txt") lines"
}
check_help "" analyze dump serve relay env
check_help analyze --json --timeout --trace --trace-ops --color --all-ranks DIR_OR_FILE "Exit status"
check_help dump --json FILE
check_help serve --listen --metrics --timeout --dead-after --out --once --quiet --insecure --metrics-ids \
    --max-connections --max-ranks --max-jobs --retention --hello-timeout --frame-timeout --max-conn-buffer \
    --buffer-budget --metrics-max-bytes --metrics-budget --scrape-timeout --allow-uid --allow-user NCCLWATCH_TOKEN
check_help relay --to --listen --max-ranks "Exit status"
check_help env NCCLWATCH_
grep -q -- "--listen" "$WORK/help.txt" && fail "env --help names serve's options"
"$C" analyze --help | grep -q -- "--listen" && fail "analyze --help names serve's options"
"$C" --help | grep -q -- "--max-ranks" && fail "the top-level --help lists serve's options (want the commands)"

# A usage error: exactly one line on stderr, "PROG CMD: WHY; see 'PROG CMD --help'", exit 2, nothing on stdout.
usage_error() {
    local why=$1 cmd=$2
    shift 2
    local who="ncclwatch-collector${cmd:+ $cmd}"
    "$C" $cmd "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    [ $rc = 2 ] || fail "'$cmd $*': exit $rc, want 2"
    [ -s "$WORK/out" ] && fail "'$cmd $*' wrote to stdout: $(head -3 "$WORK/out")"
    [ "$(wc -l <"$WORK/err")" = 1 ] || fail "'$cmd $*': want one line on stderr, got: $(cat "$WORK/err")"
    [ "$(cat "$WORK/err")" = "$who: $why; see '$who --help'" ] ||
        fail "'$cmd $*': stderr '$(cat "$WORK/err")', want '$who: $why; see '$who --help''"
}
usage_error "unknown option '--frob'" analyze --frob x
usage_error "--timeout needs a value" analyze x --timeout
usage_error "--timeout: 'abc' is not a number of seconds >= 0" analyze --timeout abc x
usage_error "--timeout: 'inf' is not a number of seconds >= 0" analyze --timeout=inf x
usage_error "--trace-ops: '1x' is not a count >= 0" analyze --trace-ops 1x x
usage_error "--color: 'pink' is not auto, always or never" analyze --color pink x
usage_error "--color: 'pink' is not auto, always or never" analyze --colour=pink x
usage_error "--trace: '' is not a file name" analyze x --trace ""
usage_error "give at least one folder or rank file" analyze
usage_error "give at least one folder or rank file" analyze --json
usage_error "unknown option '--frob'" dump --frob
usage_error "unexpected argument 'b'" dump a b
usage_error "give a rank file" dump --json
usage_error "unknown option '--frob'" serve --frob
usage_error "unexpected argument 'x'" serve x
usage_error "--max-ranks: '12Q' is not a count (digits, optionally K, M or G)" serve --max-ranks 12Q
usage_error "--timeout: 'soon' is not a number of seconds (0 to 1e7)" serve --timeout soon
usage_error "--listen needs a value" serve --listen
usage_error "--allow-uid: 'bob' is not a uid (digits, below 4294967295)" serve --allow-uid 0,bob
usage_error "--allow-uid: '4294967295' is not a uid (digits, below 4294967295)" serve --allow-uid 4294967295
usage_error "--allow-user: 'no-such-user-ncw' is not a user of this host" serve --allow-user no-such-user-ncw
usage_error "--to is required" relay
usage_error "--to: 'nowhere': no port after the host (expected HOST:PORT or [IPv6]:PORT, the port 1..65535)" relay \
    --to nowhere
usage_error "--max-ranks: '12Q' is not a count (digits, optionally K, M or G)" relay --to 127.0.0.1:1 --max-ranks 12Q
usage_error "unexpected argument 'x'" env x
usage_error "unknown command 'frob'" "" frob
usage_error "unknown option '--frob'" "" --frob
usage_error "give a command (analyze, dump, serve, relay, env)" ""
usage_error "unknown command 'frob'" "" help frob

# A small clean job: the JSON outputs carry the version; the option spellings the tests and users use still work.
export NCCLWATCH_TIMEOUT_SEC=5
export NCCLWATCH_LOG_LEVEL=debug  # the shim's first line, where each rank records, is said at debug level
run_job 2 --steps 3
unset NCCLWATCH_LOG_LEVEL
[ "$JOB_RC" = 0 ] || fail "job failed under the shim (rc $JOB_RC)"
"$C" analyze --json "$(job_dir)" >"$WORK/a.json" || fail "analyze --json of a clean job: exit $?"
got=$(json_get "$WORK/a.json" "d['ncclwatch_version']")
[ "$got" = "$version" ] || fail "analyze --json: ncclwatch_version '$got', want '$version'"
"$PY" "$(dirname "$0")/../golden/check_schema.py" "$(dirname "$0")/../../docs/schemas/analysis.schema.json" \
    "$WORK/a.json" || fail "analyze --json does not follow its schema"
# The timeout the ranks ran with, in the JSON and in the text's header (issue 16); the shim's first line names its
# version.
got=$(json_get "$WORK/a.json" "d['ranks_timeout_s']")
[ "$got" = "[5.0]" ] || fail "analyze --json: ranks_timeout_s $got, want [5.0]"
"$C" analyze --color=never "$(job_dir)" >"$WORK/a0.txt"
sed -n 2p "$WORK/a0.txt" | grep -q "the ranks' stall timeout 5 s (NCCLWATCH_TIMEOUT_SEC), analyzed with --timeout 0 s)" ||
    fail "analyze's header does not state the ranks' timeout: $(sed -n 2p "$WORK/a0.txt")"
grep -q "^\[ncclwatch r0\] recording to .* (ncclwatch $version, rank 0, timeout 5 s" "$WORK/launch.err" ||
    fail "the shim's first line does not name version $version: $(grep -m1 "recording to" "$WORK/launch.err")"
f=$(ls "$(job_dir)"/rank0-*.ncw)
"$C" dump --json "$f" >"$WORK/d.json" || fail "dump --json: exit $?"
got=$(json_get "$WORK/d.json" "d['ncclwatch_version']")
[ "$got" = "$version" ] || fail "dump --json: ncclwatch_version '$got', want '$version'"
got=$(json_get "$WORK/d.json" "d['schema']")
[ "$got" = "ncclwatch.rank_file/1" ] || fail "dump --json: schema '$got', want ncclwatch.rank_file/1"
"$C" analyze --colour=never --timeout=5 --trace-ops=10 --all-ranks -- "$(job_dir)" >"$WORK/a.txt" ||
    fail "analyze with --opt=value spellings and --: exit $?"
grep -q "^OK .*no hang and no mismatch found" "$WORK/a.txt" || fail "analyze of the clean job: $(head -2 "$WORK/a.txt")"
"$C" analyze --json --trace - "$(job_dir)" | "$PY" -c "import json,sys; json.load(sys.stdin)['traceEvents']" ||
    fail "analyze --trace - does not write the trace on stdout"

# The man page, made from the help at build time.
if [ -n "${NCW_MAN:-}" ]; then
    [ -s "$NCW_MAN" ] || fail "no man page at $NCW_MAN"
    grep -q "^\.TH NCCLWATCH-COLLECTOR 1 .*ncclwatch $NCW_VERSION" "$NCW_MAN" || fail "man page: no .TH with the version"
    for cmd in analyze dump serve relay env; do
        grep -q "^\.SH \"ncclwatch-collector $cmd\"" "$NCW_MAN" || fail "man page: no section for $cmd"
    done
    grep -q '^\.B \\-\\-max\\-ranks' "$NCW_MAN" || fail "man page: serve's --max-ranks missing"
    if command -v man >/dev/null 2>&1; then
        MANWIDTH=100 man -l "$NCW_MAN" 2>"$WORK/man.err" | grep -q "dead-after" || fail "man -l cannot render it"
    fi
fi
echo "ok: --version, --help, usage errors, versioned JSON and the man page"
