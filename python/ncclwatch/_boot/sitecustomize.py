"""Put first on PYTHONPATH by `ncclwatch run`: installs the last-words hook (ncclwatch_last_words.py) and the torch
timeout hook (ncclwatch_torch_timeout.py), then runs the sitecustomize this one shadows (the next on sys.path), as
Python would have, under its own module name."""
import os
import sys

try:
    import ncclwatch_last_words

    ncclwatch_last_words.install()
except Exception:
    pass
try:
    import ncclwatch_torch_timeout

    ncclwatch_torch_timeout.install()
except Exception:
    pass


def _run_shadowed():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["ncclwatch_shadowed_sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _run_shadowed()
except Exception as e:  # the program's own sitecustomize failed: say so as Python would, and go on
    print("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s" % (type(e).__name__, e), file=sys.stderr)
