"""`ncclwatch demo`: a simulated 4-rank job over the test NCCL, on CPU, in which rank 2 skips the all_reduce of
step 5 and then stays busy; the shim names it within the timeout, the live collector that rank 0 runs inside its
shim (NCCLWATCH_COLLECTOR=auto) names it from the ranks' digests, and the collector reads the dump folder.

The wheel carries the test NCCL (a CPU double of libnccl.so.2 over shared memory) and its launcher in demo/;
scripts/demo.sh runs the same demo from a source build:

  python3 -m ncclwatch._demo --so SO --collector EXE --fake-dir DIR [--dir D] [--timeout S]

Exit status 0 when the hang was named (the collector's analyze found it), 1 otherwise, 2 on a usage error.
"""

import argparse
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

RANKS, SKIP_RANK, SKIP_STEP = 4, 2, 5
FAKE_FILES = ("fake_launch", "fake_rank", "libfakeframework.so", "libnccl.so.2")


def _wait_for(predicate, seconds):
    """Polls a condition every 50 ms; True once it holds, False when the time is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _say(text=""):
    print(text, flush=True)


def run(so, collector, fake_dir, root=None, timeout=3.0, out=None):
    """Runs the demo; returns its exit status. root: the dump folder (a fresh temporary one when None)."""
    out = out or sys.stdout
    missing = [p for p in [so, collector] + [os.path.join(fake_dir, f) for f in FAKE_FILES] if not os.path.isfile(p)]
    if missing:
        print("ncclwatch demo: missing %s (this install has no demo, or the build is incomplete)" %
              ", ".join(missing), file=sys.stderr)
        return 1
    root = os.path.abspath(root or tempfile.mkdtemp(prefix="ncclwatch-demo-"))
    os.makedirs(root, exist_ok=True)
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("NCCLWATCH_"):
            del env[name]  # the demo's settings only: a user's NCCLWATCH_ACTION=kill would end it early
    env.update({"NCCLWATCH_DIR": root, "NCCLWATCH_TIMEOUT_SEC": "%g" % timeout, "NCCLWATCH_COLLECTOR": "auto",
                "FAKE_NCCL_TIMEOUT_SEC": "120"})
    pre = env.get("LD_PRELOAD", "").strip()
    env["LD_PRELOAD"] = pre + ":" + so if pre else so
    _say("demo: %d ranks over the test NCCL (CPU); rank %d skips the all_reduce of step %d, trains on, then stays "
         "busy outside NCCL." % (RANKS, SKIP_RANK, SKIP_STEP))
    _say("demo: NCCLWATCH_TIMEOUT_SEC=%g, NCCLWATCH_COLLECTOR=auto, dumps in %s" % (timeout, root))
    _say()
    log_path = os.path.join(root, "job.log")
    cmd = [os.path.join(fake_dir, "fake_launch"), "--nproc", str(RANKS), "--timeout-sec", "60", "--",
           os.path.join(fake_dir, "fake_rank"), "--steps", "10", "--skip-rank", str(SKIP_RANK), "--skip-step",
           str(SKIP_STEP), "--hold-ms", "60000"]
    started = time.monotonic()
    with open(log_path, "wb") as log:
        # Its own session, so that the demo can end the whole job as a user would end a hung one.
        job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        reports = lambda: glob.glob(os.path.join(root, "*", "*.report.json"))
        if not _wait_for(lambda: len(reports()) >= RANKS - 1 or job.poll() is not None, timeout + 60):
            print("ncclwatch demo: no stall report after %.0f s; the job's log: %s" % (timeout + 60, log_path),
                  file=sys.stderr)
            return 1
        # The other ranks' dumps, which the reporting rank asked for, land within moments: wait for them.
        _wait_for(lambda: len(glob.glob(os.path.join(root, "*", "*.dump.json"))) >= RANKS, 5)
        _say("demo: what the shim wrote on stderr, %.1f s after the start" % (time.monotonic() - started))
        with open(log_path, errors="replace") as f:
            for line in f:
                if line.startswith("[ncclwatch"):
                    out.write(line)
        _say()
        live = lambda: glob.glob(os.path.join(root, "*", "live-report.txt"))
        if _wait_for(lambda: bool(live()), 10):
            _say("demo: the live collector's report (rank 0's shim ran it: NCCLWATCH_COLLECTOR=auto), its first "
                 "lines")
            with open(live()[0], errors="replace") as f:
                for line in f.read().splitlines()[:3]:
                    _say(line)
            _say()
        _say("demo: ncclwatch analyze %s   (while the job hangs; the same command reads it afterwards)" % root)
        out.flush()
        rc = subprocess.call([collector, "analyze", root])
        _say()
        _say("demo: ending the hung job")
        return 0 if rc == 1 else 1  # analyze exits 1 when it found a hang, which is what this demo shows
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except OSError:
            pass
        job.wait()


def main(argv=None):
    p = argparse.ArgumentParser(prog="ncclwatch demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--so", required=True, help="libncclwatch.so")
    p.add_argument("--collector", required=True, help="ncclwatch-collector")
    p.add_argument("--fake-dir", required=True, help="the folder of fake_launch, fake_rank and the test NCCL")
    p.add_argument("--dir", help="the dump folder (default: a new one under the temporary folder)")
    p.add_argument("--timeout", type=float, default=3.0, help="NCCLWATCH_TIMEOUT_SEC (default 3)")
    a = p.parse_args(argv)
    return run(os.path.abspath(a.so), os.path.abspath(a.collector), os.path.abspath(a.fake_dir), a.dir, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
