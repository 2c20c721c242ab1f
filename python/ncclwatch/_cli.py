"""The `ncclwatch` command (console script of the wheel).

  ncclwatch run [--timeout S] [--dir D] [--collector auto|HOST:PORT] [--action report|abort|kill] -- CMD ...
      sets the NCCLWATCH_* variables it is given, appends the bundled libncclwatch.so to LD_PRELOAD, execs CMD
  ncclwatch lib                              prints the path of the bundled libncclwatch.so
  ncclwatch analyze|dump|serve|env ...       the bundled ncclwatch-collector's command (exec: same output, same
                                             exit status)
  ncclwatch --version                        the collector's version line (release and git commit)

A usage error is one line that points to --help, with exit status 2, as the collector's are. The variables are the
shim's (include/ncclwatch/config_table.h; `ncclwatch env` lists them all); nothing is set that was not asked for.
"""

import argparse
import math
import os
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
    run.add_argument("--collector", metavar="auto|HOST:PORT", help="NCCLWATCH_COLLECTOR: the live collector; "
                     "auto: global rank 0 runs it")
    run.add_argument("--action", choices=ACTIONS, help="NCCLWATCH_ACTION: what follows a stall report")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run")
    sub.add_parser("lib", help="print the path of the bundled libncclwatch.so (LD_PRELOAD=$(ncclwatch lib))",
                   description="Prints the absolute path of the bundled libncclwatch.so.")
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
        if options.command == "lib":
            so = ncclwatch.lib_path()
            if not os.path.isfile(so):
                print("%s lib: %s is missing (a broken install?)" % (PROG, so), file=sys.stderr)
                return 1
            print(so)
            return 0
        raise UsageError("%s: a command is needed (run, lib, analyze, dump, serve, relay, env); see '%s --help'"
                         % (PROG, PROG))
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2


def collector_main():
    """The `ncclwatch-collector` console script: the bundled collector itself, with the same arguments."""
    return _exec_collector(sys.argv[1:])
