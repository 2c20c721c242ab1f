// fake_rank: the "Python" of a fake training job. It links neither libnccl nor the framework: it dlopens
// libfakeframework.so from its own directory with RTLD_LOCAL, as Python loads torch, and runs fw_run.
//
// FAKE_NCCL_LIBRARY=<path> (a variant of the test NCCL, libnccl-2.31.so.2 & co) is loaded first, RTLD_LOCAL: every
// variant's SONAME is libnccl.so.2, and the dynamic linker binds a DT_NEEDED libnccl.so.2 to an object of that SONAME
// already loaded before it searches the framework's rpath, so the framework (and the shim, which finds NCCL with
// dlopen("libnccl.so.2", RTLD_NOLOAD)) runs on that variant, as a job runs on whichever NCCL its environment loads.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
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

    void* nccl = nullptr;
    const char* variant = std::getenv("FAKE_NCCL_LIBRARY");
    if (variant != nullptr && *variant != '\0' && (nccl = dlopen(variant, RTLD_NOW | RTLD_LOCAL)) == nullptr) {
        std::fprintf(stderr, "fake_rank: dlopen(FAKE_NCCL_LIBRARY=%s): %s\n", variant, dlerror());
        return 4;
    }
    void* framework = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (framework == nullptr) {
        std::fprintf(stderr, "fake_rank: dlopen(%s): %s\n", path.c_str(), dlerror());
        return 4;
    }
    // The framework's libnccl.so.2 must be the variant: a library without that SONAME would leave it on the default.
    if (nccl != nullptr && dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD) != nccl) {
        std::fprintf(stderr, "fake_rank: FAKE_NCCL_LIBRARY=%s is not the framework's libnccl.so.2 (its SONAME?)\n",
                     variant);
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
