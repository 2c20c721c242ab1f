"""Put first on PYTHONPATH by `ncclwatch run`: installs the last-words hook (ncclwatch_last_words.py), then hands
over to the sitecustomize this one shadows, the next on sys.path, as Python would have imported it."""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
try:
    import ncclwatch_last_words

    ncclwatch_last_words.install()
except Exception:
    pass
del sys.modules["sitecustomize"]
_path = sys.path[:]
try:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    try:
        import sitecustomize  # noqa: F401 (the program's own, if any)
    except ImportError:
        pass
finally:
    sys.path[:] = _path
