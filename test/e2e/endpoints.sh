#!/bin/bash
# HOST:PORT, one parser (lib/read/endpoint.cpp) for every address: `serve --listen` and `--metrics`, `relay --listen`
# and `--to`, and, in the same rules and words, the launcher's `ncclwatch run --collector` (python/ncclwatch/_cli.py,
# run from the source tree). A bad address fails at once (exit 2, one line on stderr naming the value and what is
# wrong, nothing on stdout, nothing listening, the command never run); a port past 65535 is refused, never wrapped
# onto another port; the launcher and the collector word each refusal alike.
# Environment: NCW_COLLECTOR NCW_SOURCE_ROOT. Bounded: ~10 s (each command under `timeout 10`).
. "$(dirname "$0")/lib.sh"
C=$NCW_COLLECTOR
PY=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
export PYTHONPATH="$NCW_SOURCE_ROOT/python"
unset NCCLWATCH_TOKEN

# refused WANT CMD...: exit 2 at once, nothing on stdout, stderr exactly the one line WANT.
refused() {
    local want=$1
    shift
    timeout 10 "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    [ $rc = 124 ] && fail "'$*' did not fail at once (still running after 10 s): $(cat "$WORK/out")"
    [ $rc = 2 ] || fail "'$*': exit $rc, want 2 ($(cat "$WORK/err"))"
    [ -s "$WORK/out" ] && fail "'$*' wrote to stdout: $(head -3 "$WORK/out")"
    [ "$(wc -l <"$WORK/err")" = 1 ] || fail "'$*': want one line on stderr, got: $(cat "$WORK/err")"
    [ "$(cat "$WORK/err")" = "$want" ] || fail "'$*': stderr '$(cat "$WORK/err")', want '$want'"
}
serve_error() { echo "ncclwatch-collector serve: $1; see 'ncclwatch-collector serve --help'"; }
relay_error() { echo "ncclwatch-collector relay: $1; see 'ncclwatch-collector relay --help'"; }
LISTEN="HOST:PORT, [IPv6]:PORT or *:PORT, the port 0..65535, 0 for any free one"
CONNECT="HOST:PORT or [IPv6]:PORT, the port 1..65535"
COLLECTOR="auto, $CONNECT"

# The issue's cases: a port past 65535 (it used to listen on 99999 - 65536 = 34463), and garbage (it used to be
# answered with the token warning).
refused "$(serve_error "--listen: '127.0.0.1:99999': the port 99999 is not in 0..65535 (expected $LISTEN)")" \
    "$C" serve --listen 127.0.0.1:99999
refused "$(serve_error "--metrics: '127.0.0.1:99999': the port 99999 is not in 0..65535 (expected $LISTEN)")" \
    "$C" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:99999
refused "$(serve_error "--metrics: '127.0.0.1:65536': the port 65536 is not in 0..65535 (expected $LISTEN)")" \
    "$C" serve --listen 127.0.0.1:0 --metrics 127.0.0.1:65536
refused "$(serve_error "--listen: 'nonsense': no port after the host (expected $LISTEN)")" "$C" serve --listen nonsense
refused "$(serve_error "--listen: '127.0.0.1:18446744073709551617': the port 18446744073709551617 is not in 0..65535 \
(expected $LISTEN)")" "$C" serve --listen 127.0.0.1:18446744073709551617
refused "$(serve_error "--metrics: ':29611': no host before ':' (*:PORT listens on every address) (expected $LISTEN)")" \
    "$C" serve --metrics :29611
refused "$(serve_error "--listen: '::1:29610': an IPv6 address needs brackets, as [::1]:PORT (expected $LISTEN)")" \
    "$C" serve --listen ::1:29610
refused "$(relay_error "--listen: 'host:': no port after ':' (expected $LISTEN)")" \
    "$C" relay --to 127.0.0.1:1 --listen host:
refused "$(relay_error "--to: '127.0.0.1:0': the port 0 is not in 1..65535 (expected $CONNECT)")" \
    "$C" relay --to 127.0.0.1:0
refused "$(relay_error "--to: '*:29610': '*' (every address) is for listening only (expected $CONNECT)")" \
    "$C" relay --to '*:29610'

# The launcher: checked before anything runs.
refused "ncclwatch run: --collector: 'host:99999': the port 99999 is not in 1..65535 (expected $COLLECTOR); see \
'ncclwatch run --help'" "$PY" -m ncclwatch run --collector host:99999 -- touch "$WORK/ran"
refused "ncclwatch run: --collector: 'nonsense': no port after the host (expected $COLLECTOR); see 'ncclwatch run \
--help'" "$PY" -m ncclwatch run --collector nonsense -- touch "$WORK/ran"
[ -e "$WORK/ran" ] && fail "ncclwatch run ran its command with a bad --collector"
# auto and a good address pass (the command then runs; the bundled .so is not in a source tree, nothing loads it).
for good in auto 127.0.0.1:29610 "[::1]:29610" node-0.example:1; do
    NCCLWATCH_ENABLE=0 timeout 10 "$PY" -m ncclwatch run --collector "$good" -- /usr/bin/env >"$WORK/env.txt" 2>"$WORK/err" ||
        fail "ncclwatch run --collector $good: exit $? ($(cat "$WORK/err"))"
    grep -qxF "NCCLWATCH_COLLECTOR=$good" "$WORK/env.txt" || fail "ncclwatch run --collector $good did not set it"
done

# The same words from both parsers, value by value: the collector's (relay --to: connect; serve --listen: listen)
# and the launcher's parse_endpoint for the same kind. (An empty value is CLI11's "--to needs a value" there.)
values=(nonsense host: :80 '[::1:80' '[::1]80' '[]:80' '[zz::1]:80' 999.0.0.1:80 10.0.0:80 'a b:80' user@h:80 -h:80
    h..x:80 h:0 h:65536 h:99999 h:-1 h:+1 h:0x50 'h: 80' h:18446744073709551617 '*:80' '::1:80'
    "$(printf 'h\tx:80')" "$(printf '%0254d' 0 | tr 0 a):80")
for v in "${values[@]}"; do
    for pair in "relay --to connect" "serve --listen listen"; do
        set -- $pair
        timeout 10 "$C" "$1" "$2=$v" >/dev/null 2>"$WORK/err" && fail "'$1 $2 $v' was taken"
        got=$(sed -e "s/^ncclwatch-collector $1: $2: //" -e "s/; see 'ncclwatch-collector $1 --help'\$//" "$WORK/err")
        want=$("$PY" -c 'import sys
from ncclwatch._cli import parse_endpoint
try:
    parse_endpoint(sys.argv[1], sys.argv[2])
    print("taken")
except ValueError as e:
    print(e)' "$v" "$3")
        if [ "$want" = taken ]; then  # a listening address (h:0, *:80): past the parser, refused for the token
            grep -q "refusing to listen on" "$WORK/err" || fail "'$1 $2=$v': $(cat "$WORK/err"), the launcher takes it"
            continue
        fi
        [ "$got" = "$want" ] || fail "'$v' ($3): the collector says '$got', the launcher '$want'"
    done
done
echo "ok: bad addresses refused at once in one line, the same words from the collector and the launcher"
