// fake_rank: the "Python" of a fake training job. It links neither libnccl nor the framework: it dlopens
// libfakeframework.so from its own directory with RTLD_LOCAL, as Python loads torch, and runs fw_run.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        std::perror("fake_rank: readlink(/proc/self/exe)");
        return 4;
    }
    std::string path(exe, static_cast<size_t>(n));
    path = path.substr(0, path.rfind('/') + 1) + "libfakeframework.so";

    void* framework = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (framework == nullptr) {
        std::fprintf(stderr, "fake_rank: dlopen(%s): %s\n", path.c_str(), dlerror());
        return 4;
    }
    using RunFn = int (*)(int, char**);
    auto run = reinterpret_cast<RunFn>(dlsym(framework, "fw_run"));
    if (run == nullptr) {
        std::fprintf(stderr, "fake_rank: dlsym(fw_run): %s\n", dlerror());
        return 4;
    }
    return run(argc, argv);
}
