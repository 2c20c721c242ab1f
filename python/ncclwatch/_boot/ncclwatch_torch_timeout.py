"""The timeout of torch's process groups, given to the preloaded shim (its ncclwatch_note_torch_timeout), which keeps
the shortest in the rank file: when torch's NCCL watchdog ends the job, the FAILED verdict says which timeout it was,
beside NCCLWATCH_TIMEOUT_SEC.

torch keeps the timeout in its C++ process group, out of NCCL's sight, so it is read where the user gives it: the
`timeout=` of torch.distributed.init_process_group and new_group (torch's own default for the backend where none is
given). Both are wrapped as torch.distributed.distributed_c10d is imported (an import hook, before torch.distributed
re-exports them): each wrapper calls the real function exactly once, returns what it returns and lets what it raises
through; only after it returns is the timeout noted.

Self-contained (the standard library only), installed beside the last-words hook (sitecustomize.py, the wheel's .pth).
It does nothing unless libncclwatch is preloaded, and never lets an error of its own reach the program.
"""
import functools
import os
import sys

_MODULE = "torch.distributed.distributed_c10d"
_WRAPPED = ("init_process_group", "new_group")


def _note(seconds):
    try:
        import ctypes

        fn = ctypes.CDLL(None).ncclwatch_note_torch_timeout
        fn.argtypes = [ctypes.c_double]
        fn.restype = ctypes.c_int
        fn(float(seconds))
    except Exception:  # no shim in this process (AttributeError), no ctypes: nothing to tell
        pass


def timeout_seconds(module, signature, args, kwargs):
    """The timeout a call gives (a timedelta), else the module's default for its backend; None: not known, or a
    backend without NCCL (its timeout is not torch's NCCL watchdog's)."""
    bound = signature.bind_partial(*args, **kwargs).arguments
    backend = bound.get("backend")
    if backend is not None and "nccl" not in str(backend).lower():
        return None
    timeout = bound.get("timeout")
    if timeout is None:
        default = getattr(module, "_get_default_timeout", None)
        if callable(default):
            timeout = default(backend if backend is not None else "nccl")
        else:
            timeout = getattr(module, "default_pg_timeout", None)
    seconds = getattr(timeout, "total_seconds", None)
    return float(seconds()) if callable(seconds) else None


def wrap(module, name):
    """module.name, wrapped to note the timeout of the group it makes; once. torch.distributed's re-export of it,
    where torch.distributed was imported already, follows."""
    real = getattr(module, name, None)
    if not callable(real) or getattr(real, "_ncclwatch_wrapped", False):
        return
    try:
        import inspect

        signature = inspect.signature(real)
    except (TypeError, ValueError):
        return

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        result = real(*args, **kwargs)
        try:
            seconds = timeout_seconds(module, signature, args, kwargs)
            if seconds:
                _note(seconds)
        except Exception:
            pass
        return result

    wrapper._ncclwatch_wrapped = True
    setattr(module, name, wrapper)
    package = sys.modules.get(module.__name__.rpartition(".")[0])
    if package is not None and getattr(package, name, None) is real:
        setattr(package, name, wrapper)


class _Loader:
    """The module's own loader, then the wrappers; everything else is the loader's."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            for name in _WRAPPED:
                wrap(module, name)
        except Exception:
            pass


class _Finder:
    """Finds nothing itself: for torch's distributed_c10d, the spec the other finders give, with its loader wrapped."""

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader)
                    return spec
        except Exception:
            pass
        return None


def install():
    """Once per process, only under the shim: wraps at once when torch.distributed is already imported."""
    if "libncclwatch" not in os.environ.get("LD_PRELOAD", "") or getattr(sys, "_ncclwatch_torch_timeout", False):
        return
    sys._ncclwatch_torch_timeout = True
    module = sys.modules.get(_MODULE)
    if module is not None:
        for name in _WRAPPED:
            wrap(module, name)
        return
    sys.meta_path.insert(0, _Finder())
