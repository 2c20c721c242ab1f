// A few of the NCCL_* names that NCCL 2.28.9 embeds (it reads each with getenv), so that the shim's environment
// probe finds a believable set in the fake libnccl.so.2 (more than its minimum of 20). The fake reads none of them;
// FAKE_NCCL_* variables drive it. Names known NOT to be read by NCCL (NCCL_SOCKET_TIMEOUT, NCCL_IB_IFNAME, ...)
// must never be added here: the end-to-end tests rely on their absence.
namespace {

__attribute__((used)) const char* const kKnownEnvNames[] = {
    "NCCL_DEBUG",         "NCCL_DEBUG_SUBSYS",   "NCCL_DEBUG_FILE",       "NCCL_SOCKET_IFNAME",
    "NCCL_IB_HCA",        "NCCL_IB_DISABLE",     "NCCL_P2P_DISABLE",      "NCCL_NET_GDR_LEVEL",
    "NCCL_ALGO",          "NCCL_PROTO",          "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS",
    "NCCL_IB_TIMEOUT",    "NCCL_IB_RETRY_CNT",   "NCCL_IB_GID_INDEX",     "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS",     "NCCL_MAX_NRINGS",       "NCCL_SHM_DISABLE",
    "NCCL_BUFFSIZE",      "NCCL_NTHREADS",       "NCCL_LAUNCH_MODE",      "NCCL_CUMEM_ENABLE",
    "NCCL_NVLS_ENABLE",   "NCCL_COLLNET_ENABLE", "NCCL_CROSS_NIC",        "NCCL_TOPO_FILE",
    "NCCL_GRAPH_FILE",    "NCCL_CONF_FILE",      "NCCL_RAS_ENABLE",       "NCCL_NET_PLUGIN",
};

}  // namespace
