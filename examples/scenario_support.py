"""What the scenario scripts beside this file share: the give-up guard, GPU work outside NCCL, and each rank's
ground truth for the GPU harness (test/gpu/run_scenario.py reads $NCW_TRUTH_DIR/truth-rank<R>.json)."""
import json
import os
import threading
import time


def give_up_after(seconds, on_give_up):
    """Ends the process (os._exit(7)) `seconds` from now unless it ended first: a guard; the harness normally ends the
    job. on_give_up() runs first (a log line). 0: no guard."""
    if seconds <= 0:
        return
    guard = threading.Timer(seconds, lambda: (on_give_up(), os._exit(7)))
    guard.daemon = True
    guard.start()


def busy_gpu(seconds, hidden):
    """GPU work outside NCCL for `seconds` (validation, evaluation): forward passes of a separate, unsharded model
    under no_grad, synchronised now and then. Returns the passes run."""
    import torch
    import torch.nn as nn

    net = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)).cuda()
    x = torch.randn(256, hidden, device="cuda")
    end = time.time() + seconds
    n = 0
    with torch.no_grad():
        while time.time() < end:
            for _ in range(20):
                x = torch.tanh(net(x))
            torch.cuda.synchronize()
            n += 20
    return n


def truth_path(rank):
    """Where this rank's ground truth goes, or None when the harness asked for none."""
    d = os.environ.get("NCW_TRUTH_DIR")
    return os.path.join(d, f"truth-rank{rank}.json") if d else None


def write_truth(path, truth):
    """Writes the truth whole (a temporary file, then a rename: the harness may read at any moment). Returns the
    error, or None."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(truth, f)
        os.replace(tmp, path)
        return None
    except OSError as e:
        return e
