#include "shim/record/env_probe.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>

#include "shim/base/log.h"
#include "shim/base/resolver.h"
#include "shim/record/runtime.h"

namespace ncw::env_probe {
namespace {

constexpr size_t kMaxNameLen = 128;
constexpr std::string_view kAnchor = "NCCL_";
constexpr std::string_view kTorchPrefix = "TORCH_NCCL_";

bool is_name_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string base_name(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
    std::string out;
    for (const auto& s : v) {
        if (!out.empty()) out += sep;
        out += s;
    }
    return out;
}

// The whole text of a small /proc file ("" on failure).
std::string read_proc_file(const char* path) {
    std::string out;
    FILE* f = fopen(path, "re");
    if (!f) return out;
    char buf[16384];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    fclose(f);
    return out;
}

// Whether a scan of the main library (or of libtorch) tells anything, and why not.
std::string unknown_reason(const std::vector<const LibraryScan*>& scans, size_t found) {
    for (const auto* s : scans)
        if (!s->error.empty()) return s->path + ": " + s->error;
    if (found < kMinNames)
        return std::to_string(found) + " names embedded (fewer than " + std::to_string(kMinNames) +
               "): built from source or stripped";
    return "";
}

// The parts of an ELF64 file where a string literal can live: allocated sections with contents, except code and
// CUDA fat binaries (which make up most of libnccl's and libtorch_cuda's size: 190 of 218 MB in NCCL 2.28). Empty when
// the file is not a well-formed ELF64 (then the whole file is scanned).
std::vector<std::pair<size_t, size_t>> string_ranges(const unsigned char* p, size_t size) {
    std::vector<std::pair<size_t, size_t>> out;
    if (size < sizeof(Elf64_Ehdr) || memcmp(p, ELFMAG, SELFMAG) != 0 || p[EI_CLASS] != ELFCLASS64) return out;
    Elf64_Ehdr eh;
    memcpy(&eh, p, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shstrndx >= eh.e_shnum || eh.e_shoff > size ||
        uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr) > size - eh.e_shoff)
        return out;
    auto shdr = [&](size_t i) {
        Elf64_Shdr sh;
        memcpy(&sh, p + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof sh);
        return sh;
    };
    const Elf64_Shdr names = shdr(eh.e_shstrndx);
    if (names.sh_offset > size || names.sh_size > size - names.sh_offset) return out;
    for (size_t i = 0; i < eh.e_shnum; ++i) {
        const Elf64_Shdr sh = shdr(i);
        if (sh.sh_type == SHT_NULL || sh.sh_type == SHT_NOBITS || !(sh.sh_flags & SHF_ALLOC) ||
            (sh.sh_flags & SHF_EXECINSTR))
            continue;
        if (sh.sh_offset > size || sh.sh_size > size - sh.sh_offset) continue;
        std::string_view name;
        if (sh.sh_name < names.sh_size) {
            const char* n = reinterpret_cast<const char*>(p + names.sh_offset + sh.sh_name);
            name = std::string_view(n, strnlen(n, names.sh_size - sh.sh_name));
        }
        if (name.find("fatbin") != std::string_view::npos) continue;
        out.emplace_back(size_t(sh.sh_offset), size_t(sh.sh_size));
    }
    return out;
}

}  // namespace

void scan_names(const char* data, size_t size, NameSets& out) {
    if (!data || size < kAnchor.size()) return;
    const char* const end = data + size;
    const char* p = data;
    while (p < end) {
        const void* hit = memmem(p, size_t(end - p), kAnchor.data(), kAnchor.size());
        if (!hit) break;
        const char* a = static_cast<const char*>(hit);
        // The whole run of name characters around the hit: back to its start, forward to its end.
        const char* b = a;
        while (b > data && is_name_char(b[-1]) && size_t(a - b) <= kMaxNameLen) --b;
        const char* e = a + kAnchor.size();
        while (e < end && is_name_char(*e) && size_t(e - b) <= kMaxNameLen) ++e;
        p = e > a ? e : a + 1;
        if (e >= end || *e != '\0') continue;  // not a NUL-terminated string, or longer than any name
        if (b > data && is_name_char(b[-1])) continue;
        const std::string_view name(b, size_t(e - b));
        if (name.size() > kMaxNameLen || name.back() == '_') continue;
        if (starts_with(name, kAnchor) && name.size() > kAnchor.size())
            out.nccl.emplace(name);
        else if (starts_with(name, kTorchPrefix) && name.size() > kTorchPrefix.size())
            out.torch_nccl.emplace(name);
    }
}

LibraryScan scan_library(const std::string& path) {
    LibraryScan s;
    s.path = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        s.error = std::string("cannot open: ") + strerror(errno);
        return s;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        s.error = "not a regular file";
        return s;
    }
    if (uint64_t(st.st_size) > kMaxLibraryBytes) {
        ::close(fd);
        s.error = "larger than 2 GiB: not scanned";
        return s;
    }
    if (st.st_size == 0) {
        ::close(fd);
        return s;
    }
    void* m = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);
    if (m == MAP_FAILED) {
        s.error = std::string("cannot map: ") + strerror(e);
        return s;
    }
    const auto* bytes = static_cast<const unsigned char*>(m);
    const auto ranges = string_ranges(bytes, size_t(st.st_size));
    if (ranges.empty()) {
        madvise(m, size_t(st.st_size), MADV_SEQUENTIAL);
        scan_names(reinterpret_cast<const char*>(bytes), size_t(st.st_size), s.names);
    }
    for (const auto& [off, len] : ranges) scan_names(reinterpret_cast<const char*>(bytes + off), len, s.names);
    munmap(m, size_t(st.st_size));
    return s;
}

std::vector<std::string> mapped_files(const std::string& maps_text, const std::vector<std::string>& name_prefixes) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < maps_text.size()) {
        size_t nl = maps_text.find('\n', pos);
        if (nl == std::string::npos) nl = maps_text.size();
        const std::string_view line(maps_text.data() + pos, nl - pos);
        pos = nl + 1;
        // "addr perms offset dev inode   path": the path is the first field starting with '/'.
        const size_t slash = line.find('/');
        if (slash == std::string_view::npos) continue;
        std::string path(line.substr(slash));
        if (path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0) continue;
        const std::string name = base_name(path);
        const bool wanted = std::any_of(name_prefixes.begin(), name_prefixes.end(),
                                        [&](const std::string& p) { return starts_with(name, p); });
        if (wanted && std::find(out.begin(), out.end(), path) == out.end()) out.push_back(std::move(path));
    }
    return out;
}

std::vector<std::string> facts(const EnvList& env, const LibraryScan& nccl, const std::vector<LibraryScan>& plugins,
                               const std::vector<LibraryScan>& torch) {
    std::vector<std::string> out;
    std::vector<std::string> set_nccl, set_torch;
    for (const auto& [name, value] : env) {
        if (starts_with(name, kAnchor))
            set_nccl.push_back(name);
        else if (starts_with(name, kTorchPrefix))
            set_torch.push_back(name);
    }

    // Everything loaded that can read an NCCL_* variable: NCCL, its plugins, libtorch (which still reads some old
    // NCCL_* spellings of its own variables).
    std::set<std::string> torch_reads_torch, reads_nccl;
    for (const auto& t : torch) {
        torch_reads_torch.insert(t.names.torch_nccl.begin(), t.names.torch_nccl.end());
        reads_nccl.insert(t.names.nccl.begin(), t.names.nccl.end());
    }
    for (const auto& p : plugins) reads_nccl.insert(p.names.nccl.begin(), p.names.nccl.end());
    reads_nccl.insert(nccl.names.nccl.begin(), nccl.names.nccl.end());

    if (!nccl.path.empty()) {
        out.push_back("ncclwatch.nccl_library=" + nccl.path);
        std::vector<std::string> plugin_paths;
        for (const auto& p : plugins) plugin_paths.push_back(p.path);
        if (!plugin_paths.empty()) out.push_back("ncclwatch.nccl_plugins=" + join(plugin_paths));
        const std::string why = unknown_reason({&nccl}, nccl.names.nccl.size());
        if (!why.empty()) {
            out.push_back("ncclwatch.nccl_scan=unknown: " + why);
        } else {
            out.push_back("ncclwatch.nccl_reads=" + std::to_string(nccl.names.nccl.size()));
            std::vector<std::string> none;
            for (const auto& n : set_nccl)
                if (!reads_nccl.count(n)) none.push_back(n);
            out.push_back("ncclwatch.no_effect=" + join(none));
        }
    } else {
        out.push_back("ncclwatch.nccl_scan=unknown: the NCCL library was not found");
    }

    if (!torch.empty()) {
        std::vector<std::string> paths;
        std::vector<const LibraryScan*> scans;
        for (const auto& t : torch) {
            paths.push_back(t.path);
            scans.push_back(&t);
        }
        out.push_back("ncclwatch.torch_library=" + join(paths));
        const std::string why = unknown_reason(scans, torch_reads_torch.size());
        if (!why.empty()) {
            out.push_back("ncclwatch.torch_scan=unknown: " + why);
        } else {
            out.push_back("ncclwatch.torch_reads=" + std::to_string(torch_reads_torch.size()));
            std::vector<std::string> none;
            for (const auto& n : set_torch)
                if (!torch_reads_torch.count(n)) none.push_back(n);
            out.push_back("ncclwatch.torch_no_effect=" + join(none));
        }
    }
    return out;
}

std::vector<std::string> env_entries(const EnvList& env) {
    std::vector<std::string> out;
    out.reserve(env.size());
    for (const auto& [name, value] : env) out.push_back(name + "=" + value);
    return out;
}

namespace {

void run_probe(Runtime& rt) {
    // Low priority for this thread only (on Linux, nice applies per thread): the scan must not compete with the
    // host's data loaders at start-up.
    setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), 19);

    const std::string maps = read_proc_file("/proc/self/maps");
    std::string nccl_path = real_nccl_path();
    if (nccl_path.empty()) {
        const auto found = mapped_files(maps, {"libnccl.so"});
        if (!found.empty()) nccl_path = found.front();
    }
    LibraryScan nccl;
    if (!nccl_path.empty()) nccl = scan_library(nccl_path);

    std::vector<LibraryScan> plugins, torch;
    // NCCL's net, tuner, profiler and env plugins read NCCL_* variables of their own.
    for (const auto& p : mapped_files(maps, {"libnccl-"})) plugins.push_back(scan_library(p));
    for (const auto& p :
         mapped_files(maps, {"libtorch_cuda.so", "libtorch_python.so", "libtorch_cpu.so", "libtorch.so"}))
        torch.push_back(scan_library(p));

    auto entries = facts(rt.env, nccl, plugins, torch);
    entries.push_back("ncclwatch.probe=done");
    if (size_t skipped = append_env_entries(rt.file, entries))
        NCW_LOG_ONCE(warn, "the environment region is full: {} probed facts not recorded", skipped);
}

}  // namespace

void start_env_probe(Runtime& rt) {
    try {
        std::thread([&rt] {
            try {
                run_probe(rt);
            } catch (const std::exception& e) {
                NCW_LOG_ONCE(warn, "the environment probe failed ({}); variables that do nothing are not reported",
                             e.what());
            } catch (...) {
                NCW_LOG_ONCE(warn, "the environment probe failed; variables that do nothing are not reported");
            }
        }).detach();
    } catch (...) {
        NCW_LOG_ONCE(warn, "could not start the environment probe; variables that do nothing are not reported");
    }
}

}  // namespace ncw::env_probe
