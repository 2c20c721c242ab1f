#include "shim/base/resolver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "shim/base/config.h"
#include "shim/base/log.h"

namespace ncw {
namespace {

const void* own_base() {
    static const void* base = [] {
        Dl_info info{};
        dladdr(reinterpret_cast<const void*>(&own_base), &info);
        return static_cast<const void*>(info.dli_fbase);
    }();
    return base;
}

bool is_ours(void* p) {
    Dl_info info{};
    return dladdr(p, &info) && info.dli_fbase == own_base();
}

// Looks up pncclX first: it is the PMPI-style name that a wrapper library like ours never defines.
void* lookup_in(void* handle, const char* name) {
    std::string pname = std::string("p") + name;
    void* p = dlsym(handle, pname.c_str());
    if (!p || is_ours(p)) p = dlsym(handle, name);
    return p && !is_ours(p) ? p : nullptr;
}

// Leaked on purpose: the watchdog may ask for the path (in a dump) while static destructors run at exit.
std::mutex& g_path_mu = *new std::mutex;
std::string& g_path = *new std::string;

void remember_path(void* p) {
    Dl_info info{};
    if (!dladdr(p, &info) || !info.dli_fname) return;
    std::lock_guard<std::mutex> lock(g_path_mu);
    if (g_path.empty()) g_path = info.dli_fname;
}

}  // namespace

void* resolve_slow(RealFn& fn, bool quiet) {
    if (fn.absent.load(std::memory_order_relaxed)) return nullptr;  // the host's NCCL lacks it: said once already
    void* p = dlsym(RTLD_NEXT, fn.name);
    if (p && is_ours(p)) p = nullptr;
    if (!p) {
        // RTLD_NOLOAD: only ever the libnccl.so.2 the host program already loaded, never a second one from the
        // system library path.
        if (void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD)) {
            p = lookup_in(h, fn.name);
            // The host's NCCL is loaded and has no such function: an entry point of a later NCCL.
            if (!p && !lookup_in(h, "ncclGetVersion")) h = nullptr;
            if (!p && h) fn.absent.store(true, std::memory_order_relaxed);
        }
    }
    if (!p) {
        const std::string lib = parse_nccl_library([](const char* n) { return getenv(n); });
        if (!lib.empty()) {
            if (void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL)) p = lookup_in(h, fn.name);
        }
    }
    if (!p) {
        if (!quiet && !fn.miss_logged.exchange(true))
            log().error(
                "the real {} was not found (RTLD_NEXT, loaded libnccl.so.2, NCCLWATCH_NCCL_LIBRARY); the call "
                "returns ncclSystemError",
                fn.name);
        return nullptr;
    }
    remember_path(p);
    fn.ptr.store(p, std::memory_order_release);
    return p;
}

void config_form_missing(const char* name, const char* plain) {
    static std::atomic<bool> said{false};
    if (said.exchange(true)) return;
    log().warn(
        "the loaded NCCL has no {} (NCCL 2.31 and later): ncclwatch passes the call on as {}, without its "
        "per-call configuration (said once for every such call)",
        name, plain);
}

std::string real_nccl_path() {
    std::lock_guard<std::mutex> lock(g_path_mu);
    return g_path;
}

}  // namespace ncw
