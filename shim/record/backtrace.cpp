#include "shim/record/backtrace.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cstdio>
#include <cstdlib>

#include "shim/base/log.h"

namespace ncw {

BacktraceFn load_backtrace_fn() {
    void* lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
        if (auto fn = reinterpret_cast<BacktraceFn>(dlsym(lib, "unw_backtrace"))) {
            log().info("NCCLWATCH_BACKTRACE=1: call stacks through libunwind");
            return fn;
        }
    }
    // glibc's unwinder is in the process already; it is slower but needs nothing new.
    log().info("NCCLWATCH_BACKTRACE=1: libunwind.so.8 not found, call stacks through glibc backtrace()");
    return [](void** frames, int depth) { return backtrace(frames, depth); };
}

std::string symbolize(uint64_t addr) {
    Dl_info info{};
    char buf[64];
    snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(addr));
    if (!dladdr(reinterpret_cast<void*>(addr), &info) || !info.dli_fname) return buf;
    std::string out = info.dli_fname;
    if (info.dli_sname) {
        int status = 0;
        char* dem = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        char off[32];
        snprintf(off, sizeof(off), "+0x%llx",
                 static_cast<unsigned long long>(addr - reinterpret_cast<uint64_t>(info.dli_saddr)));
        out += std::string("(") + (status == 0 && dem ? dem : info.dli_sname) + off + ")";
        free(dem);
    } else {
        char off[32];
        snprintf(off, sizeof(off), "(+0x%llx)",
                 static_cast<unsigned long long>(addr - reinterpret_cast<uint64_t>(info.dli_fbase)));
        out += off;
    }
    return out + " [" + buf + "]";
}

}  // namespace ncw
