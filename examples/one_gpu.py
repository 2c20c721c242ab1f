"""Several real NCCL ranks on one GPU, for the examples' --one-gpu flag.

NCCL refuses two ranks on one GPU only when they share a host hash, and it takes the host hash from NCCL_HOSTID when
that is set. So each rank gets its own NCCL_HOSTID (fakehost<RANK>: the global rank, so that two torchrun agents on
one machine, as two "nodes", never share one), NCCL_SOCKET_IFNAME=lo, and device 0. NCCL then sees one host per rank
and connects the ranks through its socket transport: a dying peer gives the survivors ncclRemoteError, as between
real nodes. Call setup() before init_process_group (NCCL reads these at its first communicator init).
"""
import os


def setup(one_gpu):
    """The CUDA device index this rank uses: LOCAL_RANK normally, 0 with one_gpu (after setting NCCL's variables)."""
    if not one_gpu:
        return int(os.environ.get("LOCAL_RANK", 0))
    os.environ["NCCL_HOSTID"] = f"fakehost{os.environ.get('RANK', os.environ.get('LOCAL_RANK', '0'))}"
    os.environ["NCCL_SOCKET_IFNAME"] = "lo"
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    return 0
