#!/usr/bin/env python3
"""Runs one scenario of examples/hang_scenarios.py under torchrun, watched, and keeps everything for the checker.

    run_scenario.py --scenario skip --variant shim|fr --work DIR --shim SO --collector EXE [--timeout 10]
                    [--nproc 2] [--ras-port 28100] [--ras-client CMD] [--max-sec 100]

variant shim: LD_PRELOAD of the shim, NCCLWATCH_TIMEOUT_SEC=timeout, NCCLWATCH_DIR=DIR/ncw. Once the first report
  event appears, NCCL RAS is queried (the job is hung by then), and the job is ended a scenario-dependent time later
  the way a scheduler ends a hung job (SIGTERM to torchrun, which ends its workers; SIGKILL 10 s later). Then, with
  every process gone, `ncclwatch-collector analyze --json` and `dump --json` of each rank file: the evidence after
  the kill.
variant fr: no shim; PyTorch's Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1
  TORCH_NCCL_DESYNC_DEBUG=1, dumps to DIR/fr/trace_rank_<rank>), init_process_group(timeout=timeout); the job runs
  until PyTorch ends it (or the cap); then torchfrtrace over the dumps.
Other scripts than examples/hang_scenarios.py (--script, with --script-args; --end-after-report says how long after
the first report the harness ends the job, -1: never), several ranks on one GPU (--one-gpu: the script's own
--one-gpu flag, see examples/one_gpu.py), and the live collector inside rank 0's shim (--live auto). Each rank may
write its own ground truth to $NCW_TRUTH_DIR/truth-rank<R>.json (DIR/truth): it lands in result.json's "truth".
Early suspicions (test/gpu/job_readers.py's is_suspicion) and straggler notes are not "the first report": the job is
ended after the first diagnosis (stall, mismatch, init_hang). --end-after-suspect S ends it S s after the first
suspicion; --cap-after-hang S ends it S s after the hang began by the scripts' truth (job_readers.hang_start);
--analyze-at-step N runs `analyze --json` over the live folder once every rank's truth says step >= N (kept as
result.json's "analyze_at_step": what the analysis knew by then). --dump-at-phase P runs `dump --json` of every rank
file once every rank's truth says phase P, then creates DIR/truth/go-P (the ranks wait for it): result.json's
"dumps_at_phase", with the truth read before and after. --dump-after-report S does the same S s after the first
report, while the job still runs (a hung job: what its rank files say in the hang): "dumps_after_report".
Writes DIR/result.json (raw facts; test/gpu/scenario_table.py judges them) and DIR/job.log (the job's output).
"""
import argparse
import glob
import json
import shlex
import os
import shutil
import socket
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BOOT = os.path.join(REPO, "python", "ncclwatch", "_boot")  # the last-words hook `ncclwatch run` puts on PYTHONPATH
sys.path.insert(0, HERE)
from job_readers import before_hang, hang_start, is_diagnosis, is_suspicion, log_lines  # noqa: E402

# How long the harness lets a hung job run after the shim's first report before it ends the job (None: let the job
# end by itself, within the cap), per scenario: time for the RAS query, and for a mismatch to show whether it hangs.
END_AFTER_REPORT = {"skip": 8, "uneven": 8, "type_mismatch": 14, "size_mismatch": 14, "rank_dies": None, "rank_exit0": None,
                    "rank_segv": None, "rank_killed": None, "drift_skip": 8, "drift_extra": 8,
                    "init_hang": None, "validation": None, "grad_accum": 8, "clean": None,
                    # Issue 41: a MISMATCH may be said before the stall (signatures compared once a second): time for
                    # the stall's report too.
                    "moe_stale_split": 14, "moe_clean": None, "send_cycle": 8, "batch_ring_missing": 8,
                    # A stage away in Python (NOT_JOINED); a send to the wrong peer (MISMATCH, as the stale split: time
                    # for the stall's report too), one never exchanged with; a slow stage is a straggler, not a hang
                    # (its report is no diagnosis: the job runs to its end), and the clean pipeline ends by itself.
                    "pipeline": 8, "pipeline_wrong_peer": 14, "pipeline_fresh_peer": 14, "pipeline_slow": None,
                    "pipeline_clean": None}
# The scenarios that run for --duration-sec and end normally.
TIMED = ("clean", "moe_clean", "pipeline_slow", "pipeline_clean")


def scenario_args(scenario, timeout):
    a = ["--scenario", scenario]
    if scenario == "init_hang":
        a += ["--delay-sec", str(timeout + 8)]
    if scenario == "validation":
        a += ["--busy-sec", str(timeout + 6)]
    if scenario in ("type_mismatch", "size_mismatch"):
        # 100 more steps (2.5 s) after the mismatch: the shim compares signatures once a second while the job runs.
        a += ["--steps", "160"]
    return a


def now():
    return time.time()


def report_events(ncw_dir):
    events = []
    for f in sorted(glob.glob(os.path.join(ncw_dir, "*", "*.report.json"))):
        try:
            with open(f) as fh:
                d = json.load(fh)
        except (OSError, ValueError):
            continue  # written atomically, but a partial read is harmless: next poll
        for e in d.get("events", []):
            events.append({"file": f, "global_rank": d.get("process", {}).get("global_rank"), **e})
    return events


def live_reports(ncw_dir):
    """What the live collector inside rank 0's shim wrote (NCCLWATCH_COLLECTOR=auto): <job>/live-report.json."""
    out = []
    for f in sorted(glob.glob(os.path.join(ncw_dir, "*", "live-report.json"))):
        try:
            with open(f) as fh:
                out.append({"file": f, "report": json.load(fh)})
        except (OSError, ValueError) as e:
            out.append({"file": f, "error": str(e)})
    return out


def read_truth(truth_dir):
    """Each rank's own ground truth, {global rank: what it wrote}."""
    out = {}
    for f in sorted(glob.glob(os.path.join(truth_dir, "truth-rank*.json"))):
        try:
            with open(f) as fh:
                out[os.path.basename(f)[len("truth-rank"):-len(".json")]] = json.load(fh)
        except (OSError, ValueError) as e:
            out[os.path.basename(f)] = {"error": str(e)}
    return out


def run_ras(client, port, out_path):
    """Queries NCCL RAS (ncclras, or the python client); returns (seconds it took, exit code)."""
    if os.path.basename(client[0]) == "ncclras":
        cmd = client + ["-p", str(port), "-t", "5"]
    else:
        cmd = client + ["--port", str(port), "--timeout", "5"]
    t0 = now()
    try:
        with open(out_path, "w") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=35).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    except OSError as e:
        with open(out_path, "a") as out:
            out.write(f"RAS client failed to start: {e}\n")
        rc = 127
    return now() - t0, rc


def end_job(proc, log):
    """SIGTERM to torchrun (it ends its workers), SIGKILL to the whole process group 10 s later."""
    if proc.poll() is not None:
        return
    log(f"ending the job: SIGTERM to torchrun (pid {proc.pid})")
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log("torchrun still there after 10 s: SIGKILL to its process group")
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers (workers torchrun did not reap)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def kill_tagged(tag, log):
    """SIGKILL every process whose environment carries NCW_RUN_TAG=tag (workers torchrun left behind)."""
    want = f"NCW_RUN_TAG={tag}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            os.kill(int(pid), signal.SIGKILL)
            log(f"killed leftover process {pid}")
        except (OSError, ProcessLookupError):
            pass


def dump_rank_files(collector, ncw_dir, out_dir, truth_dir):
    """`dump --json` of every rank file of a running job (header and comm table), between two reads of the ranks'
    truth: {"t", "t_done", "truth_before", "truth_after", "files": {path: {"header", "comms"} or {"error"}}}."""
    os.makedirs(out_dir, exist_ok=True)
    out = {"t": now(), "truth_before": read_truth(truth_dir), "files": {}}
    for f in sorted(glob.glob(os.path.join(ncw_dir, "*", "*.ncw"))):
        _, text, err = run_tool([collector, "dump", "--json", f], os.devnull)
        try:
            d = json.loads(text)
            out["files"][f] = {"header": d.get("header"), "comms": d.get("comms")}
        except ValueError:
            out["files"][f] = {"error": (err or text)[-500:]}
        with open(os.path.join(out_dir, os.path.basename(f) + ".json"), "w") as fh:  # the evidence, records left out
            json.dump(out["files"][f], fh, indent=1)
    out["truth_after"] = read_truth(truth_dir)
    out["t_done"] = now()
    return out


def run_tool(cmd, out_path, timeout=60):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        with open(out_path, "w") as f:
            f.write(r.stdout)
            if r.stderr:
                f.write("\n--- stderr\n" + r.stderr)
        return r.returncode, r.stdout, r.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        with open(out_path, "w") as f:
            f.write(f"failed: {e}\n")
        return None, "", str(e)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", required=True)
    p.add_argument("--variant", choices=["shim", "fr"], required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--shim", default="")
    p.add_argument("--collector", default="")
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--ras-port", type=int, default=0, help="NCCL_RAS_ADDR port for this job; 0: no RAS query")
    p.add_argument("--ras-client", default="", help="ncclras, or the python client (default)")
    p.add_argument("--max-sec", type=float, default=100)
    p.add_argument("--duration-sec", type=float, default=0, help="clean: how long to train")
    p.add_argument("--cmd", default="", help="tests only: launch this shell command instead of torchrun")
    p.add_argument("--script", default="", help="instead of examples/hang_scenarios.py (--scenario is then a label)")
    p.add_argument("--script-args", default="", help="the script's arguments, one shell-quoted string")
    p.add_argument("--end-after-report", type=float, default=None,
                   help="seconds after the first report to end the job (-1: let it end by itself)")
    p.add_argument("--one-gpu", action="store_true", help="every rank on device 0 (the script's --one-gpu)")
    p.add_argument("--live", default="", help="NCCLWATCH_COLLECTOR for the job, e.g. auto")
    p.add_argument("--env", action="append", default=[], help="K=V for the job's environment (repeatable)")
    p.add_argument("--end-after-suspect", type=float, default=None,
                   help="seconds after the first early suspicion to end the job (default: never for that reason)")
    p.add_argument("--cap-after-hang", type=float, default=None,
                   help="end the job this long after the hang began, by the scripts' truth (hang_start)")
    p.add_argument("--analyze-at-step", type=int, default=0,
                   help="run analyze over the live folder once every rank's truth 'step' reaches this; 0: never")
    p.add_argument("--dump-at-phase", default="",
                   help="dump every rank file once every rank's truth 'phase' is this, then create truth/go-PHASE")
    p.add_argument("--dump-after-report", type=float, default=None,
                   help="dump every rank file this long after the first report, while the job runs")
    a = p.parse_args()

    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ncw_dir = os.path.join(work, "ncw")
    fr_dir = os.path.join(work, "fr")
    os.makedirs(fr_dir)
    truth_dir = os.path.join(work, "truth")
    os.makedirs(truth_dir)
    notes = []

    def log(msg):
        line = f"[run_scenario {a.scenario}/{a.variant} {time.strftime('%H:%M:%S')}] {msg}"
        notes.append(line)
        print(line, flush=True)

    env = dict(os.environ)
    for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        env[k] = "0" if k == "NCCL_NVLS_ENABLE" else "1"  # never NVLink multicast on these machines
    env["PYTHONUNBUFFERED"] = "1"
    env["NCW_RUN_TAG"] = work  # to find the job's processes should torchrun leave any behind
    env["NCW_TRUTH_DIR"] = truth_dir
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    if a.ras_port:
        env["NCCL_RAS_ADDR"] = f"localhost:{a.ras_port}"
    args = scenario_args(a.scenario, a.timeout) if not a.script else []
    if a.scenario in TIMED and a.duration_sec and not a.script:
        args += ["--duration-sec", str(a.duration_sec)]
    args += shlex.split(a.script_args)
    if a.one_gpu:
        args += ["--one-gpu"]
    if a.variant == "shim":
        env.update({"LD_PRELOAD": a.shim, "NCCLWATCH_DIR": ncw_dir, "NCCLWATCH_TIMEOUT_SEC": str(a.timeout)})
        # The judges read every rank's stderr lines with their pid and time (job_readers.LOG_LINE): the full prefix,
        # and every rank's lines (by default one rank per node says a report, with the short prefix).
        env.setdefault("NCCLWATCH_LOG_FORMAT", "full")
        env.setdefault("NCCLWATCH_LOG_LEVEL", "debug")
        # As `ncclwatch run` does: the last-words hook (an uncaught exception into the rank file) first on PYTHONPATH.
        env["PYTHONPATH"] = os.pathsep.join(x for x in (BOOT, env.get("PYTHONPATH", "")) if x)
        if a.live:
            env["NCCLWATCH_COLLECTOR"] = a.live
            if a.live == "auto" and "NCCLWATCH_COLLECTOR_PORT" not in env:
                # auto listens on MASTER_PORT+1 and serves /metrics on the next port; with thirty jobs' sockets on one
                # machine such a port was once taken ("Address already in use", no live report). Ports free now, as
                # torchrun --standalone picks its own.
                with socket.socket() as so, socket.socket() as sm:
                    so.bind(("127.0.0.1", 0))
                    sm.bind(("127.0.0.1", 0))
                    env["NCCLWATCH_COLLECTOR_PORT"] = str(so.getsockname()[1])
                    env.setdefault("NCCLWATCH_METRICS_PORT", str(sm.getsockname()[1]))
        args += ["--give-up-sec", str(a.max_sec + 30)]
    else:
        env.pop("LD_PRELOAD", None)
        prefix = os.path.join(fr_dir, "trace_rank_")
        env.update({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                    "TORCH_NCCL_DESYNC_DEBUG": "1", "TORCH_FR_DUMP_TEMP_FILE": prefix,
                    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
                    # How long PyTorch waits for the dumps before it ends the process (default 15 s or more).
                    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "5000"})
        args += ["--pg-timeout-sec", str(a.timeout), "--give-up-sec", str(a.max_sec + 30)]
        if a.scenario in ("type_mismatch", "size_mismatch", "init_hang", "validation") + TIMED:
            args += ["--fr-dump-at-end"]  # jobs that may end normally: what torchfrtrace would say given a dump

    script = os.path.join(REPO, a.script) if a.script else os.path.join(REPO, "examples", "hang_scenarios.py")
    cmd = ["torchrun", "--standalone", f"--nproc_per_node={a.nproc}", script] + args
    if a.cmd:
        cmd = ["bash", "-c", a.cmd]
    log("start: " + " ".join(cmd))
    job_log = open(os.path.join(work, "job.log"), "w")
    t_launch = now()
    proc = subprocess.Popen(cmd, env=env, stdout=job_log, stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=REPO)
    first_report = None  # (harness time it was seen, event)
    first_suspect = None  # (harness time it was seen, event)
    at_step = None  # analyze over the live folder at --analyze-at-step
    at_phase = None  # the rank files at --dump-at-phase
    t_phase_read = 0.0
    after_report = None  # the rank files at --dump-after-report
    t_truth_read = 0.0
    hang_t0 = None
    ras = {}
    ras_thread = None
    ended_by = "itself"
    first_fr_dump = None
    noted_early = False
    while True:
        rc = proc.poll()
        t = now()
        if rc is not None:
            break
        if a.variant == "shim" and (first_report is None or first_suspect is None):
            every = report_events(ncw_dir)
            sus = [e for e in every if is_suspicion(e)]
            if sus and first_suspect is None:
                first_suspect = (t, sus[0])
                log(f"first suspicion after {t - t_launch:.1f} s: {sus[0].get('type')}")
            ev = [e for e in every if is_diagnosis(e)] if first_report is None else []
            if ev and a.scenario == "pipeline":
                # A stall before the stage departed (a pipeline's start on a shared GPU) is not the hang under test:
                # it does not end the job (job_readers.before_hang; kept in the events, and noted by the judge).
                truth_now = read_truth(truth_dir)
                early = [e for e in ev if before_hang(a.scenario, e.get("verdicts"), truth_now)]
                if early and not noted_early:
                    noted_early = True
                    log(f"a {early[0].get('type')} report of an op before the scenario's hang: not the first report")
                ev = [e for e in ev if e not in early]
            if ev:
                first_report = (t, ev[0])
                log(f"first report event after {t - t_launch:.1f} s: {ev[0].get('type')}")
                if a.ras_port and a.scenario != "clean":
                    def ras_job():
                        time.sleep(0.5)
                        client = a.ras_client.split() if a.ras_client else [sys.executable,
                                                                            os.path.join(HERE, "ras_query.py")]
                        ras["t_start"] = now()
                        ras["seconds"], ras["rc"] = run_ras(client, a.ras_port, os.path.join(work, "ras.txt"))
                        ras["client"] = os.path.basename(client[-1] if client[0] == sys.executable else client[0])
                    ras_thread = threading.Thread(target=ras_job, daemon=True)
                    ras_thread.start()
        if a.variant == "fr" and first_fr_dump is None and glob.glob(os.path.join(fr_dir, "trace_rank_*")):
            first_fr_dump = t
            log(f"first Flight Recorder dump after {t - t_launch:.1f} s")
        if a.dump_at_phase and at_phase is None and t - t_phase_read > 0.3:
            t_phase_read = t
            phases = [d.get("phase") for d in read_truth(truth_dir).values() if isinstance(d, dict)]
            if len(phases) >= a.nproc and all(x == a.dump_at_phase for x in phases):
                at_phase = dump_rank_files(a.collector, ncw_dir, os.path.join(work, f"dumps-{a.dump_at_phase}"),
                                           truth_dir)
                at_phase["phase"] = a.dump_at_phase
                open(os.path.join(truth_dir, f"go-{a.dump_at_phase}"), "w").close()
                log(f"every rank at phase {a.dump_at_phase}: {len(at_phase['files'])} rank files dumped in "
                    f"{at_phase['t_done'] - at_phase['t']:.1f} s")
        if a.dump_after_report is not None and first_report and after_report is None and \
                t > first_report[0] + a.dump_after_report:
            after_report = dump_rank_files(a.collector, ncw_dir, os.path.join(work, "dumps-after-report"), truth_dir)
            after_report["after_s"] = a.dump_after_report
            log(f"{len(after_report['files'])} rank files dumped {a.dump_after_report:g} s after the first report")
        if (a.cap_after_hang is not None or a.analyze_at_step) and t - t_truth_read > 0.5:
            t_truth_read = t
            truth = read_truth(truth_dir)
            if a.cap_after_hang is not None and hang_t0 is None:
                hang_t0 = hang_start(a.scenario, truth, a.nproc, final=False)
                if hang_t0 is not None:
                    log(f"the hang began {t - hang_t0:.1f} s ago (the scripts' truth)")
            if a.analyze_at_step and at_step is None:
                steps = [d.get("step") for d in truth.values() if isinstance(d, dict)]
                if len(steps) >= a.nproc and all(isinstance(x, int) and x >= a.analyze_at_step for x in steps):
                    rc_s, out_s, err_s = run_tool([a.collector, "analyze", "--json", ncw_dir],
                                                  os.path.join(work, f"analyze-at-step{a.analyze_at_step}.json"))
                    try:
                        doc = json.loads(out_s)
                    except ValueError:
                        doc = None
                    at_step = {"step": a.analyze_at_step, "steps_then": steps, "t": t, "t_done": now(), "exit": rc_s,
                               "analyze": doc,
                               "error": None if doc is not None else (err_s or out_s)[-500:]}
                    log(f"analyze of the live folder at step {min(steps)}: exit {rc_s}")
        if a.variant == "shim" and first_suspect and a.end_after_suspect is not None and \
                t > first_suspect[0] + a.end_after_suspect:
            ended_by = "harness after the first suspicion"
            end_job(proc, log)
            break
        if hang_t0 is not None and t > hang_t0 + a.cap_after_hang:
            ended_by = f"harness {a.cap_after_hang:.0f} s after the hang began"
            end_job(proc, log)
            break
        wait_more = END_AFTER_REPORT.get(a.scenario)
        if a.end_after_report is not None:
            wait_more = None if a.end_after_report < 0 else a.end_after_report
        if (a.variant == "shim" and first_report and wait_more is not None and t > first_report[0] + wait_more
                and (ras_thread is None or not ras_thread.is_alive())):
            ended_by = "harness after the report (a scheduler ending a hung job)"
            end_job(proc, log)
            break
        if a.variant == "fr" and first_fr_dump and t > first_fr_dump + 25:
            ended_by = "harness 25 s after the first Flight Recorder dump"
            end_job(proc, log)
            break
        if t - t_launch > a.max_sec:
            ended_by = f"harness at the {a.max_sec:.0f} s cap"
            end_job(proc, log)
            break
        time.sleep(0.1)
    rc = proc.wait()
    t_end = now()
    job_log.close()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing of the job may outlive it
    except ProcessLookupError:
        pass
    kill_tagged(work, log)
    if ras_thread is not None:
        ras_thread.join(timeout=40)
    log(f"job ended ({ended_by}), torchrun exit code {rc}, after {t_end - t_launch:.1f} s")

    result = {"scenario": a.scenario, "variant": a.variant, "timeout_s": a.timeout, "nproc": a.nproc,
              "one_gpu": a.one_gpu, "script": a.script or "examples/hang_scenarios.py", "args": args,
              "t_launch": t_launch, "t_end": t_end, "exit_code": rc, "ended_by": ended_by, "notes": notes,
              "ras": ras or None, "truth": read_truth(truth_dir)}
    if ras and os.path.exists(os.path.join(work, "ras.txt")):
        with open(os.path.join(work, "ras.txt"), errors="replace") as f:
            result["ras"]["output"] = f.read()[-20000:]

    if a.variant == "shim":
        time.sleep(0.5)
        result["first_report_seen"] = first_report[0] if first_report else None
        result["first_suspicion_seen"] = first_suspect[0] if first_suspect else None
        result["hang_start_live"] = hang_t0
        if a.analyze_at_step:
            result["analyze_at_step"] = at_step
        if a.dump_at_phase:
            result["dumps_at_phase"] = at_phase
        if a.dump_after_report is not None:
            result["dumps_after_report"] = after_report
        result["events"] = report_events(ncw_dir)
        result["live_reports"] = live_reports(ncw_dir)
        rc_an, out, err = run_tool([a.collector, "analyze", "--json", ncw_dir], os.path.join(work, "analyze.json"))
        result["analyze_exit"] = rc_an
        try:
            result["analyze"] = json.loads(out)
        except ValueError:
            result["analyze"] = None
            result["analyze_error"] = (err or out)[-2000:]
        dumps = {}
        for f in sorted(glob.glob(os.path.join(ncw_dir, "*", "*.ncw"))):
            # The decoded file is kept for the short scenarios; a long clean run's full ring is not worth it.
            rc_d, out, err = run_tool([a.collector, "dump", "--json", f],
                                      f + ".decoded.json" if a.scenario != "clean" else os.devnull)
            try:
                d = json.loads(out)
                # Only what the checker needs: the header, the comm table, and the collective records.
                dumps[f] = {"header": d.get("header"), "comms": d.get("comms"),
                            "records": [{k: r.get(k) for k in ("comm_id", "op", "seq", "count", "issue_ms",
                                                               "reached_ms", "done_ms", "tid", "flags")}
                                        for r in d.get("records", {}).get("items", [])][-400:]}
            except ValueError:
                dumps[f] = {"error": (err or out)[-500:]}
        result["rank_files"] = dumps
    else:
        result["first_fr_dump_seen"] = first_fr_dump
        files = sorted(glob.glob(os.path.join(fr_dir, "trace_rank_*")))
        result["fr_files"] = [{"path": f, "size": os.path.getsize(f), "mtime": os.path.getmtime(f)} for f in files]
        if files:
            outs = []
            for cmd_fr in (["torchfrtrace", fr_dir, "-p", "trace_rank_", "--allow-incomplete-ranks"],
                           ["torchfrtrace", fr_dir, "-p", "trace_rank_"],
                           [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", fr_dir, "-p",
                            "trace_rank_", "--allow-incomplete-ranks"]):
                rc_fr, out, err = run_tool(cmd_fr, os.path.join(work, "frtrace.txt"), timeout=90)
                outs.append({"cmd": " ".join(cmd_fr), "rc": rc_fr, "output": (out + "\n" + err)[-12000:]})
                if rc_fr == 0:
                    break
            result["frtrace"] = outs
    with open(os.path.join(work, "job.log"), errors="replace") as f:
        text = f.read()
    result["job_log_tail"] = text[-6000:]
    # The shim's own lines on suspicions and stragglers (stderr), with their times: the report JSON is the record,
    # these show what a user reading the log saw, and when.
    result["log_suspicions"] = [list(x) for x in log_lines(text, "suspect") if "transport" not in x[2].lower()][:40]
    result["log_stragglers"] = [list(x) for x in log_lines(text, "straggler")][:40]
    # PyTorch's own words on a timeout (the watchdog, the desync report), whatever the variant.
    keys = ("Watchdog caught", "timed out", "Timeout", "desync", "Desync", "DESYNC", "not joined", "hasn't",
            "has not", "Flight Recorder", "dump", "MISMATCH", "STALL", "NOT_JOINED", "INIT_HANG", "RECOVERED",
            "EXTRA_OP", "DEAD", "GPU_NOT_REACHED", "exitcode", "Signal", "SUSPECT", "suspect", "STRAGGLER",
            # TORCH_NCCL_DESYNC_DEBUG's report, one line per finding
            "best knowledge", "lagging", "didn't join", "joined but", "Timeout at collective")
    result["job_log_key_lines"] = [ln[:400] for ln in text.splitlines() if any(k in ln for k in keys)][:80]
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    log(f"result written to {work}/result.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
