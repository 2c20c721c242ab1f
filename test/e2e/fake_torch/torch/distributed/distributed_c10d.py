# torch.distributed.distributed_c10d's process-group functions, their signatures as torch 2.11's, doing nothing but
# keep what they were given (GROUPS) and fail as torch does on a bad backend.
import datetime

__all__ = ["init_process_group", "new_group", "default_pg_timeout", "GROUPS"]

default_pg_timeout = datetime.timedelta(minutes=30)
default_pg_nccl_timeout = datetime.timedelta(minutes=10)
GROUPS = []


def _get_default_timeout(backend):
    return default_pg_nccl_timeout if str(backend).lower() == "nccl" else default_pg_timeout


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    if backend is not None and str(backend).lower() not in ("nccl", "gloo", "cpu:gloo,cuda:nccl"):
        raise ValueError("Invalid backend: '%s'" % backend)
    GROUPS.append(("default", backend, timeout))
    return None


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    GROUPS.append(("group", backend, timeout))
    return "group%d" % len(GROUPS)
