"""ncclwatch: names the culprit of a hung NCCL job.

The wheel bundles the LD_PRELOAD shim (libncclwatch.so) and the collector (ncclwatch-collector) in this package;
the `ncclwatch` command launches a job under the shim (`ncclwatch run -- torchrun ...`) and passes `analyze`,
`dump`, `serve` and `env` to the collector. `analyze(path)` reads a job folder from Python.
"""

import json
import os
import subprocess

__all__ = ["AnalyzeError", "analyze", "collector_path", "lib_path", "__version__"]

_HERE = os.path.dirname(os.path.abspath(__file__))

try:
    from importlib.metadata import version as _dist_version

    __version__ = _dist_version("ncclwatch")
except Exception:  # not installed as a distribution (a source tree on sys.path)
    __version__ = "unknown"


class AnalyzeError(RuntimeError):
    """The collector could not analyse what it was given; the message is the collector's own."""

    def __init__(self, message, returncode):
        super().__init__(message)
        self.returncode = returncode


def lib_path():
    """The absolute path of the bundled libncclwatch.so (for LD_PRELOAD)."""
    return os.path.join(_HERE, "libncclwatch.so")


def collector_path():
    """The absolute path of the bundled ncclwatch-collector."""
    return os.path.join(_HERE, "bin", "ncclwatch-collector")


def demo_dir():
    """The folder of the bundled test NCCL and its launcher (`ncclwatch demo`)."""
    return os.path.join(_HERE, "demo")


def analyze(*paths, timeout=None):
    """Analyses the rank files under the given job folders or files, as `ncclwatch-collector analyze --json` does.

    Returns its JSON report as Python objects: a dict with "headline", "problem_found", "verdicts" (each with
    "kind", "culprits", ...), "story" (what happened and was over by the end: a stall that recovered, an init that
    waited), "comms", "files", "warnings" and the rest of docs/schemas/analysis.schema.json.
    A hang or a mismatch is a result, not an error. Raises AnalyzeError, with the collector's message, when
    nothing is readable or the arguments are wrong (the collector's exit status 2).
    """
    if not paths:
        raise TypeError("analyze() needs at least one path (a job folder or a rank file)")
    args = [collector_path(), "analyze", "--json", "--"] + [os.fspath(p) for p in paths]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    err = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode not in (0, 1):
        raise AnalyzeError(err or "ncclwatch-collector analyze exited with status %d" % proc.returncode,
                           proc.returncode)
    try:
        return json.loads(proc.stdout)
    except ValueError as e:
        raise AnalyzeError("ncclwatch-collector analyze --json wrote no JSON (%s): %s" % (e, err),
                           proc.returncode) from None
