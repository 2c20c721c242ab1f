"""The `ncclwatch` command (console script of the wheel).

  ncclwatch run [--timeout S] [--dir D] [--collector auto|HOST:PORT] [--action report|abort|kill] -- CMD ...
      sets the NCCLWATCH_* variables it is given, appends the bundled libncclwatch.so to LD_PRELOAD, execs CMD
  ncclwatch lib                              prints the path of the bundled libncclwatch.so
  ncclwatch demo [--dir D] [--timeout S]     a simulated 4-rank hang over the bundled test NCCL, named (CPU, no GPU)
  ncclwatch analyze|dump|serve|env ...       the bundled ncclwatch-collector's command (exec: same output, same
                                             exit status)
  ncclwatch --version                        the collector's version line (release and git commit)

A usage error is one line that points to --help, with exit status 2, as the collector's are. The variables are the
shim's (include/ncclwatch/config_table.h; `ncclwatch env` lists them all); nothing is set that was not asked for.
"""

import argparse
import math
import os
import socket
import sys

import ncclwatch

PROG = "ncclwatch"
COLLECTOR_COMMANDS = ("analyze", "dump", "serve", "relay", "env")

# Option of `run` -> the shim's variable it sets (names from include/ncclwatch/config_table.h).
RUN_VARIABLES = {
    "timeout": "NCCLWATCH_TIMEOUT_SEC",
    "dir": "NCCLWATCH_DIR",
    "collector": "NCCLWATCH_COLLECTOR",
    "action": "NCCLWATCH_ACTION",
}
ACTIONS = ("report", "abort", "kill")  # NCCLWATCH_ACTION's accepted values


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line that points to --help (exit status 2)."""

    def error(self, message):
        raise UsageError("%s: %s; see '%s --help'" % (self.prog, message, self.prog))


# HOST:PORT, in the rules and words of the collector's parser (lib/read/endpoint.cpp parse_endpoint; the shim reads
# NCCLWATCH_COLLECTOR with it): a value refused here is the one the shim would refuse, in the same words
# (test/e2e/endpoints.sh compares them). Kinds: "connect", "collector" (also "auto"), "listen" (also *:PORT, port 0).
ENDPOINT_FORMS = {
    "connect": "HOST:PORT or [IPv6]:PORT, the port 1..65535",
    "collector": "auto, HOST:PORT or [IPv6]:PORT, the port 1..65535",
    "listen": "HOST:PORT, [IPv6]:PORT or *:PORT, the port 0..65535, 0 for any free one",
}
_MAX_HOST = 253  # a DNS name's longest text form
_ECHO = 64  # how much of a part of the value an error repeats


def _echo(value, max_chars=200):
    """lib/read/text.cpp echo: the bytes of a value fit for one log line (escaped, cut)."""
    out = ""
    used = 0
    while used < len(value) and len(out) < max_chars:
        c = value[used]
        if c == 0x0A:
            out += "\\n"
        elif c == 0x09:
            out += "\\t"
        elif c == 0x5C:
            out += "\\\\"
        elif c < 0x20 or c >= 0x7F:
            out += "\\x%02x" % c
        else:
            out += chr(c)
        used += 1
    if used < len(value):
        out += "... (%d bytes)" % len(value)
    return out


def _quoted(part):
    return "'" + _echo(part, _ECHO) + "'"


def _name_char(c):
    return 0x30 <= c <= 0x39 or 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A or c in b".-_"


def _inet_pton(family, text):
    try:
        socket.inet_pton(family, text.decode("ascii"))
        return True
    except (OSError, ValueError):
        return False


def _v6_problem(host):
    if not host:
        return "no host between '[' and ']'"
    addr, pct, zone = host.partition(b"%")
    ok = _inet_pton(socket.AF_INET6, addr)
    if ok and pct:
        ok = 0 < len(zone) <= 64 and all(_name_char(c) for c in zone)
    return "" if ok else "the host %s is not an IPv6 address" % _quoted(host)


def _host_problem(host, kind):
    if not host:
        return "no host before ':' (*:PORT listens on every address)" if kind == "listen" else "no host before ':'"
    if host == b"*":
        return "" if kind == "listen" else "'*' (every address) is for listening only"
    if b":" in host:
        return "an IPv6 address needs brackets, as [::1]:PORT"
    if len(host) > _MAX_HOST:
        return "the host is longer than 253 characters"
    if not all(_name_char(c) for c in host):
        return "the host %s is not a host name or an address" % _quoted(host)
    if all(0x30 <= c <= 0x39 or c == 0x2E for c in host):
        return "" if _inet_pton(socket.AF_INET, host) else "the host %s is not an IPv4 address" % _quoted(host)
    if host[:1] in (b".", b"-") or b".." in host:
        return "the host %s is not a host name or an address" % _quoted(host)
    return ""


def _port_problem(text, kind):
    """(problem, port): problem "" when the port's text is good."""
    if not text:
        return "no port after ':'", 0
    if not all(0x30 <= c <= 0x39 for c in text):
        return "the port %s is not a number" % _quoted(text), 0
    v = int(text.decode("ascii"))
    lowest = 0 if kind == "listen" else 1
    if v < lowest or v > 65535:
        return "the port %s is not in %d..65535" % (_echo(text, _ECHO), lowest), 0
    return "", v


def parse_endpoint(text, kind="connect"):
    """(host, port) of HOST:PORT or [IPv6]:PORT by the rules of `kind`; ("", 0) for "auto" (kind "collector").
    Raises ValueError with the collector's one line: "'VALUE': WHY (expected FORMS)"."""
    raw = os.fsencode(text)

    def fail(why):
        raise ValueError("%s: %s (expected %s)" % (_quoted(raw), why, ENDPOINT_FORMS[kind]))

    if kind == "collector" and raw == b"auto":
        return "", 0
    if not raw:
        fail("empty")
    if raw[:1] == b"[":
        close = raw.find(b"]")
        if close < 0:
            fail("no closing ']'")
        host = raw[1:close]
        if close + 1 >= len(raw) or raw[close + 1:close + 2] != b":":
            fail("no ':PORT' after ']'")
        port = raw[close + 2:]
        problem = _v6_problem(host)
    else:
        colon = raw.rfind(b":")
        if colon < 0:
            fail("no port after the host")
        host, port = raw[:colon], raw[colon + 1:]
        problem = _host_problem(host, kind)
    if problem:
        fail(problem)
    problem, value = _port_problem(port, kind)
    if problem:
        fail(problem)
    return os.fsdecode(host), value


def _seconds(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of seconds is needed, not '%s'" % text) from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError("a positive number of seconds is needed, not '%s'" % text)
    return text


def _parser():
    p = _Parser(prog=PROG, description="ncclwatch: names the culprit of a hung NCCL job. The wheel bundles "
                "libncclwatch.so (the LD_PRELOAD shim) and ncclwatch-collector.",
                epilog="analyze, dump, serve, relay and env are the collector's commands: 'ncclwatch analyze --help'.")
    p.add_argument("--version", action="store_true", help="print the version and the git commit, and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run = sub.add_parser("run", help="run a command (torchrun ...) under the shim",
                         description="Runs COMMAND with the bundled libncclwatch.so appended to LD_PRELOAD and "
                         "the NCCLWATCH_* variables of the options given set (the others are left as they are).",
                         usage="ncclwatch run [--timeout S] [--dir D] [--collector auto|HOST:PORT] "
                         "[--action report|abort|kill] -- COMMAND [ARG ...]")
    run.add_argument("--timeout", type=_seconds, metavar="S", help="NCCLWATCH_TIMEOUT_SEC: seconds without "
                     "progress, with an operation outstanding, before a stall is reported")
    run.add_argument("--dir", metavar="D", help="NCCLWATCH_DIR: root of the job folders (made absolute)")
    run.add_argument("--collector", metavar="auto|HOST:PORT", help="NCCLWATCH_COLLECTOR: the live collector, "
                     "HOST:PORT or [IPv6]:PORT (port 1..65535; checked before COMMAND runs); auto: global rank 0 "
                     "runs it")
    run.add_argument("--action", choices=ACTIONS, help="NCCLWATCH_ACTION: what follows a stall report")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run")
    sub.add_parser("lib", help="print the path of the bundled libncclwatch.so (LD_PRELOAD=$(ncclwatch lib))",
                   description="Prints the absolute path of the bundled libncclwatch.so.")
    demo = sub.add_parser("demo", help="watch a simulated 4-rank hang being named (the bundled test NCCL, on CPU)",
                          description="Runs a simulated 4-rank job over the bundled test NCCL (CPU, no GPU) in "
                          "which rank 2 skips one all_reduce, under the shim and its live collector, and shows "
                          "what each says. Exit status 0 when the hang is named.")
    demo.add_argument("--dir", metavar="D", help="the dump folder (default: a new temporary one)")
    demo.add_argument("--timeout", type=_seconds, default=3.0, metavar="S",
                      help="NCCLWATCH_TIMEOUT_SEC for the demo (default 3)")
    for name in COLLECTOR_COMMANDS:
        sub.add_parser(name, help="ncclwatch-collector %s (see 'ncclwatch %s --help')" % (name, name))
    return p


def _exec_collector(args):
    path = ncclwatch.collector_path()
    try:
        os.execv(path, [path] + args)
    except OSError as e:
        print("%s: cannot run the bundled collector %s: %s" % (PROG, path, e.strerror), file=sys.stderr)
        return 1


def run_environment(options, environ):
    """The environment `run` execs its command with: environ plus the variables of the options given."""
    env = dict(environ)
    for opt, name in RUN_VARIABLES.items():
        value = getattr(options, opt)
        if value is not None:
            env[name] = os.path.abspath(value) if opt == "dir" else value
    so = ncclwatch.lib_path()
    pre = env.get("LD_PRELOAD", "")
    if so not in pre.replace(" ", ":").split(":"):
        env["LD_PRELOAD"] = pre + ":" + so if pre.strip() else so
    # A Python rank's last words (an uncaught exception) go into its rank file: the hook's folder first on
    # PYTHONPATH (its sitecustomize hands over to any other one).
    boot = os.path.join(os.path.dirname(os.path.abspath(ncclwatch.__file__)), "_boot")
    path = env.get("PYTHONPATH", "")
    if boot not in path.split(os.pathsep):
        env["PYTHONPATH"] = boot + os.pathsep + path if path else boot
    return env


def _run(options):
    if options.collector is not None:
        try:
            parse_endpoint(options.collector, "collector")
        except ValueError as e:
            raise UsageError("ncclwatch run: --collector: %s; see 'ncclwatch run --help'" % e) from None
    cmd = options.cmd[1:] if options.cmd[:1] == ["--"] else options.cmd
    if not cmd:
        raise UsageError("ncclwatch run: a command to run is needed after '--'; see 'ncclwatch run --help'")
    env = run_environment(options, os.environ)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print("%s run: cannot run '%s': %s" % (PROG, cmd[0], e.strerror), file=sys.stderr)
        return 126 if isinstance(e, PermissionError) else 127


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    # The collector's commands go to it whole, with their own --help, usage errors and exit status.
    if argv and argv[0] in COLLECTOR_COMMANDS:
        return _exec_collector(argv)
    try:
        options = _parser().parse_args(argv)
        if options.version:
            return _exec_collector(["--version"])
        if options.command == "run":
            return _run(options)
        if options.command == "demo":
            from ncclwatch import _demo

            return _demo.run(ncclwatch.lib_path(), ncclwatch.collector_path(), ncclwatch.demo_dir(), options.dir,
                             float(options.timeout))
        if options.command == "lib":
            so = ncclwatch.lib_path()
            if not os.path.isfile(so):
                print("%s lib: %s is missing (a broken install?)" % (PROG, so), file=sys.stderr)
                return 1
            print(so)
            return 0
        raise UsageError("%s: a command is needed (run, lib, demo, analyze, dump, serve, relay, env); see '%s --help'"
                         % (PROG, PROG))
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2


def collector_main():
    """The `ncclwatch-collector` console script: the bundled collector itself, with the same arguments."""
    return _exec_collector(sys.argv[1:])
