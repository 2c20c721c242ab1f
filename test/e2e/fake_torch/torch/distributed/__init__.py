# As torch's: the process-group functions re-exported from distributed_c10d.
from .distributed_c10d import *  # noqa: F401,F403
from .distributed_c10d import _get_default_timeout  # noqa: F401
