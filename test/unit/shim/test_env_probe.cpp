// The environment probe: the scanner on synthetic bytes and on the fake NCCL library, /proc/self/maps parsing, and
// the facts it derives.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shim/record/env_probe.h"
#include "temp_dir.h"

namespace {

using namespace ncw;
using namespace ncw::env_probe;

NameSets scan(const std::string& bytes) {
    NameSets s;
    scan_names(bytes.data(), bytes.size(), s);
    return s;
}

LibraryScan fake_scan(const std::string& path, std::vector<std::string> nccl, std::vector<std::string> torch = {}) {
    LibraryScan s;
    s.path = path;
    s.names.nccl.insert(nccl.begin(), nccl.end());
    s.names.torch_nccl.insert(torch.begin(), torch.end());
    return s;
}

// kMinNames distinct NCCL_* names, plus the given ones.
std::vector<std::string> believable(std::vector<std::string> extra = {}) {
    for (size_t i = 0; i < kMinNames; ++i) extra.push_back("NCCL_FILLER_" + std::to_string(i));
    return extra;
}

bool has(const std::vector<std::string>& v, const std::string& x) {
    for (const auto& e : v)
        if (e == x) return true;
    return false;
}

}  // namespace

TEST_CASE("the scanner finds NUL-terminated NCCL_* and TORCH_NCCL_* names", "[env_probe]") {
    using namespace std::string_literals;
    const std::string bytes =
        "\x7f"
        "ELF\0\0NCCL_DEBUG\0NCCL_IB_HCA\0garbage NCCL_ALGO\0"  // tail of a message counts
        "NCCL_\0NCCL_NET_\0"                                   // bare prefixes: completed at run time, not names
        "NCCL_PROTO=%s\0"                                      // not a name: '=' follows
        "XNCCL_FOO\0"                                          // part of a longer name
        "TORCH_NCCL_BLOCKING_WAIT\0"                           // torch's name, not an NCCL one
        "ncclParamDebug\0NCCL_lower\0"                         // lowercase: not a name
        "NCCL_SOCKET_IFNAME\0NCCL_DEBUG\0"s                    // duplicates collapse
        "NCCL_AT_END";                                         // no NUL before the end: not a string
    const NameSets s = scan(bytes);
    CHECK(s.nccl == std::set<std::string>{"NCCL_DEBUG", "NCCL_IB_HCA", "NCCL_ALGO", "NCCL_SOCKET_IFNAME"});
    CHECK(s.torch_nccl == std::set<std::string>{"TORCH_NCCL_BLOCKING_WAIT"});

    CHECK(scan("").nccl.empty());
    CHECK(scan("NCCL").nccl.empty());
    CHECK(scan(std::string("NCCL_A\0", 7)).nccl == std::set<std::string>{"NCCL_A"});
    // An absurdly long run is no name.
    CHECK(scan("NCCL_" + std::string(300, 'A') + std::string(1, '\0')).nccl.empty());
}

TEST_CASE("the fake NCCL library embeds a believable set, without the names NCCL never reads", "[env_probe]") {
    const char* lib = getenv("FAKE_NCCL_LIB");
    if (!lib) {
        WARN("FAKE_NCCL_LIB not set: run through meson test");
        return;
    }
    const LibraryScan s = scan_library(lib);
    CHECK(s.error.empty());
    CHECK(s.names.nccl.size() >= kMinNames);
    CHECK(s.names.nccl.count("NCCL_SOCKET_IFNAME") == 1);
    CHECK(s.names.nccl.count("NCCL_MIN_NRINGS") == 1);
    CHECK(s.names.nccl.count("NCCL_SOCKET_TIMEOUT") == 0);
    CHECK(s.names.nccl.count("NCCL_IB_IFNAME") == 0);
}

TEST_CASE("a file that is not ELF is scanned whole", "[env_probe]") {
    TempDir dir;
    const auto path = dir.file("blob.bin");
    {
        std::ofstream f(path, std::ios::binary);
        const std::string bytes("junk\0NCCL_ALGO\0NCCL_PROTO\0", 26);
        f.write(bytes.data(), std::streamsize(bytes.size()));
    }
    const LibraryScan s = scan_library(path);
    CHECK(s.error.empty());
    CHECK(s.names.nccl == std::set<std::string>{"NCCL_ALGO", "NCCL_PROTO"});
}

TEST_CASE("a real NCCL: only its loaded sections count (not debug info, not fat binaries)", "[env_probe]") {
    // Present where the CUDA toolkit ships NCCL; the check is skipped elsewhere.
    const char* path = "/usr/local/cuda/lib64/libnccl.so.2";
    if (!std::filesystem::exists(path)) return;
    const LibraryScan s = scan_library(path);
    CHECK(s.error.empty());
    CHECK(s.names.nccl.size() >= 150);
    for (const char* read : {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS",
                             "NCCL_NET_GDR_LEVEL", "NCCL_DEBUG_SUBSYS"})
        CHECK(s.names.nccl.count(read) == 1);
    for (const char* unread : {"NCCL_SOCKET_TIMEOUT", "NCCL_IB_IFNAME", "NCCL_TIMEOUT", "NCCL_NSOCKETS",
                               "NCCL_ASYNC_ERROR_HANDLING", "NCCL_LOG_WARN" /* an enum name in .debug_str */})
        CHECK(s.names.nccl.count(unread) == 0);
}

TEST_CASE("scan_library reports what it could not read", "[env_probe]") {
    CHECK_FALSE(scan_library("/nonexistent/libnccl.so.2").error.empty());
    CHECK(scan_library("/proc/self").error == "not a regular file");
}

TEST_CASE("mapped_files picks libraries by file name from /proc/self/maps", "[env_probe]") {
    const std::string maps =
        "7f00-7f10 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9\n"
        "7f10-7f20 r-xp 00010000 08:01 123 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9\n"
        "7f20-7f30 r--p 00000000 08:01 124 /opt/site-packages/torch/lib/libtorch_cuda.so\n"
        "7f30-7f40 r--p 00000000 08:01 125 /opt/libnccl-net.so\n"
        "7f40-7f50 rw-p 00000000 00:00 0 [heap]\n"
        "7f50-7f60 r--p 00000000 08:01 126 /tmp/old/libnccl.so.2 (deleted)\n"
        "7f60-7f70 r--p 00000000 08:01 127 /opt/my libs/libtorch_python.so\n"
        "7f70-7f80 r--p 00000000 08:01 128 /opt/libnccl_wrapper_notnccl.so";
    CHECK(mapped_files(maps, {"libnccl.so"}) ==
          std::vector<std::string>{"/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"});
    CHECK(mapped_files(maps, {"libnccl-"}) == std::vector<std::string>{"/opt/libnccl-net.so"});
    CHECK(mapped_files(maps, {"libtorch_cuda.so", "libtorch_python.so"}) ==
          std::vector<std::string>{"/opt/site-packages/torch/lib/libtorch_cuda.so", "/opt/my libs/libtorch_python.so"});
    CHECK(mapped_files("", {"libnccl.so"}).empty());
}

TEST_CASE("facts: set NCCL_* names nothing loaded reads have no effect", "[env_probe]") {
    const EnvList env = {{"NCCL_ASYNC_ERROR_HANDLING", "1"}, {"NCCL_DEBUG", "INFO"}, {"NCCL_PLUGIN_ONLY", "1"},
                         {"NCCL_SOCKET_TIMEOUT", "30"},      {"RANK", "0"},          {"TORCH_NCCL_BOGUS", "1"},
                         {"TORCH_NCCL_BLOCKING_WAIT", "1"}};
    const auto nccl = fake_scan("/lib/libnccl.so.2", believable({"NCCL_DEBUG"}));
    const auto plugin = fake_scan("/lib/libnccl-net.so", {"NCCL_PLUGIN_ONLY"});

    SECTION("without libtorch") {
        const auto f = facts(env, nccl, {plugin}, {});
        CHECK(has(f, "ncclwatch.nccl_library=/lib/libnccl.so.2"));
        CHECK(has(f, "ncclwatch.nccl_plugins=/lib/libnccl-net.so"));
        CHECK(has(f, "ncclwatch.nccl_reads=" + std::to_string(kMinNames + 1)));
        CHECK(has(f, "ncclwatch.no_effect=NCCL_ASYNC_ERROR_HANDLING,NCCL_SOCKET_TIMEOUT"));
        for (const auto& e : f) CHECK(e.rfind("ncclwatch.torch", 0) != 0);
    }
    SECTION("libtorch's names count as read, and its TORCH_NCCL_* names are checked") {
        std::vector<std::string> torch_names;
        for (size_t i = 0; i < kMinNames; ++i) torch_names.push_back("TORCH_NCCL_FILLER_" + std::to_string(i));
        torch_names.push_back("TORCH_NCCL_BLOCKING_WAIT");
        const auto torch = fake_scan("/t/libtorch_cuda.so", {"NCCL_ASYNC_ERROR_HANDLING"}, torch_names);
        const auto f = facts(env, nccl, {plugin}, {torch});
        CHECK(has(f, "ncclwatch.no_effect=NCCL_SOCKET_TIMEOUT"));
        CHECK(has(f, "ncclwatch.torch_library=/t/libtorch_cuda.so"));
        CHECK(has(f, "ncclwatch.torch_reads=" + std::to_string(kMinNames + 1)));
        CHECK(has(f, "ncclwatch.torch_no_effect=TORCH_NCCL_BOGUS"));
    }
    SECTION("a scan with too few names, or a failed one, concludes nothing") {
        auto f = facts(env, fake_scan("/src/libnccl.so.2", {"NCCL_DEBUG"}), {}, {});
        CHECK(has(f, "ncclwatch.nccl_scan=unknown: 1 names embedded (fewer than 20): built from source or stripped"));
        for (const auto& e : f) CHECK(e.rfind("ncclwatch.no_effect", 0) != 0);
        LibraryScan bad;
        bad.path = "/x/libnccl.so.2";
        bad.error = "cannot open: Permission denied";
        f = facts(env, bad, {}, {});
        CHECK(has(f, "ncclwatch.nccl_scan=unknown: /x/libnccl.so.2: cannot open: Permission denied"));
        f = facts(env, LibraryScan{}, {}, {});
        CHECK(has(f, "ncclwatch.nccl_scan=unknown: the NCCL library was not found"));
    }
    SECTION("nothing set, nothing listed") {
        const auto f = facts({{"RANK", "0"}}, nccl, {}, {});
        CHECK(has(f, "ncclwatch.no_effect="));
    }
}

TEST_CASE("env_entries renders NAME=value", "[env_probe]") {
    CHECK(env_entries({{"A", "1"}, {"B", ""}}) == std::vector<std::string>{"A=1", "B="});
}
