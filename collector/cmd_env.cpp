// `ncclwatch-collector env`: the NCCLWATCH_* table (include/ncclwatch/config_table.h).
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "ncclwatch/config_table.h"
#include "read/redact.h"

namespace ncw::cli {

namespace {

std::string lower(std::string s) {
    for (auto& c : s) c = char(std::tolower((unsigned char)c));
    return s;
}

int run_env() {
    struct Row {
        const char *name, *kind, *def, *accepted, *desc;
    };
    std::vector<Row> rows;
#define X(field, name, kind, type, def, accepted, desc) rows.push_back(Row{name, #kind, def, accepted, desc});
    NCW_CONFIG_TABLE(X)
#undef X
    size_t wn = 4, wk = 4, wd = 7;
    for (const auto& r : rows) {
        wn = std::max(wn, strlen(r.name));
        wk = std::max(wk, strlen(r.kind));
        wd = std::max(wd, strlen(r.def));
    }
    fmt::print("Environment variables read by the ncclwatch shim (set them for the training processes):\n\n");
    fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "NAME", wn, "KIND", wk, "DEFAULT", wd, "ACCEPTED");
    for (const auto& r : rows) {
        fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", r.name, wn, lower(r.kind), wk, r.def, wd, r.accepted);
        fmt::print("    {}\n", r.desc);
        if (const char* v = getenv(r.name)) fmt::print("    currently set: {}\n", clean(redact::env_value(r.name, v)));
    }
    return 0;
}

}  // namespace

Command add_env(CLI::App& sub) {
    sub.footer("Each variable with its kind, default and accepted values; \"currently set\" shows this environment's.");
    return run_env;
}

}  // namespace ncw::cli
