"""The last words of a Python rank: an uncaught exception's type, message and the line of the user's code it came
from ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 TiB (train.py:88)"), given to the
preloaded shim (its ncclwatch_note_exception), which keeps them in the rank file: the DEAD verdict then says what the
rank died of, live and after the end.

Self-contained (the standard library only): `ncclwatch run` puts this folder on PYTHONPATH (sitecustomize.py beside
it), whatever environment the launcher itself lives in; the wheel's ncclwatch-last-words.pth installs it for a plain
LD_PRELOAD user. It does nothing unless libncclwatch is preloaded, and never lets an error of its own reach the
program: the previous hook always runs.
"""
import os
import sys

_MAX = 1000  # bytes the rank file keeps (1024 with the NUL); the message is cut before


_STDLIB = tuple({os.path.join(p, "lib") + os.sep for p in (sys.base_prefix, sys.prefix)})


def _library_file(path):
    """Code that is not the user's: an installed package, the standard library, or no file (<frozen ...>)."""
    return (path.startswith("<") or "site-packages" in path or "dist-packages" in path or
            path.startswith(_STDLIB))


def words(exc_type, exc, tb):
    """'Type: message (file:line)': the type with its module unless builtin, the message on one line, and the
    innermost frame of the user's own code (not the standard library's or an installed package's)."""
    mod = getattr(exc_type, "__module__", "") or ""
    name = getattr(exc_type, "__qualname__", None) or getattr(exc_type, "__name__", "Exception")
    text = name if mod in ("builtins", "__main__", "") else mod + "." + name
    try:
        msg = " ".join(str(exc).split())
    except Exception:  # a __str__ that raises
        msg = ""
    if msg:
        text += ": " + msg
    where = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _library_file(code.co_filename):
            where = "%s:%d" % (os.path.basename(code.co_filename), tb.tb_lineno)
        tb = tb.tb_next
    tail = " (%s)" % where if where else ""
    room = _MAX - len(tail.encode("utf-8", "replace"))
    body = text.encode("utf-8", "replace")
    if len(body) > room:
        text = body[: max(0, room - 3)].decode("utf-8", "ignore") + "..."
    return text + tail


def _note(text, main):
    try:
        import ctypes

        fn = ctypes.CDLL(None).ncclwatch_note_exception
        fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fn.restype = ctypes.c_int
        fn(text.encode("utf-8", "replace"), 1 if main else 0)
    except Exception:  # no shim in this process (AttributeError), no ctypes: nothing to tell
        pass


def install():
    """Chains our hook before sys.excepthook and threading.excepthook; once per process, only under the shim."""
    if "libncclwatch" not in os.environ.get("LD_PRELOAD", "") or getattr(sys, "_ncclwatch_last_words", False):
        return
    sys._ncclwatch_last_words = True
    prev = sys.excepthook

    def hook(exc_type, exc, tb):
        try:
            if not issubclass(exc_type, KeyboardInterrupt):
                _note(words(exc_type, exc, tb), True)
        except Exception:
            pass
        prev(exc_type, exc, tb)

    sys.excepthook = hook
    try:
        import threading

        prev_thread = threading.excepthook

        def thread_hook(args):
            try:
                if args.exc_type is not None and not issubclass(args.exc_type, SystemExit):
                    _note(words(args.exc_type, args.exc_value, args.exc_traceback),
                          args.thread is threading.main_thread())
            except Exception:
                pass
            prev_thread(args)

        threading.excepthook = thread_hook
    except (ImportError, AttributeError):  # Python before 3.8 has no threading.excepthook
        pass
