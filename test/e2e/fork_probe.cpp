// For fork_and_resolve.sh: links libnccl.so.2 directly (RTLD_NEXT finds the real functions), forks after using
// NCCL, and reports what the child sees.
#include <dirent.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

static int threads() {
    int n = 0;
    DIR* d = opendir("/proc/self/task");
    for (dirent* e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') ++n;
    if (d) closedir(d);
    return n;
}

static bool allreduce(ncclComm_t comm, int times) {
    for (int i = 0; i < times; ++i)
        if (ncclAllReduce(reinterpret_cast<void*>(0x1000), reinterpret_cast<void*>(0x1000), 4, ncclFloat32, ncclSum,
                          comm, nullptr) != ncclSuccess)
            return false;
    return true;
}

static bool make_comm(ncclComm_t* comm) {
    ncclUniqueId id;
    return ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(comm, 1, id, 0) == ncclSuccess;
}

int main() {
    ncclComm_t comm;
    if (!make_comm(&comm) || !allreduce(comm, 3)) return 2;
    printf("parent pid %d\n", int(getpid()));
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        printf("child threads before its own init: %d\n", threads());
        allreduce(comm, 5);  // the parent's communicator: passed through, recorded nowhere
        ncclComm_t own;
        if (!make_comm(&own) || !allreduce(own, 2)) _exit(3);
        // The watchdog starts at init; wait for it to show up rather than assume it is there already.
        for (int i = 0; i < 200 && threads() < 2; ++i) usleep(10000);
        printf("child threads after its own init: %d\n", threads());
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
    if (!allreduce(comm, 1)) return 5;
    ncclCommDestroy(comm);
    return 0;
}
