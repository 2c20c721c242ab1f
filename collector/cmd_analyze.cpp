// `ncclwatch-collector analyze`: rank files from any number of folders to verdicts and a report (text, JSON, trace).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "engine/job_view.h"
#include "read/rank_file.h"
#include "report/analysis_json.h"
#include "report/headline.h"
#include "report/report_json.h"
#include "report/report_text.h"
#include "report/report_trace.h"

namespace ncw::cli {

namespace {

enum class Color { Auto, Always, Never };

struct AnalyzeArgs {
    bool as_json = false;
    bool all_ranks = false;
    Color color = Color::Auto;
    double timeout_s = 0;
    std::string trace_path;
    size_t trace_ops = 500;
    std::vector<std::string> inputs;
};

// 0: parsed; otherwise the exit code (help: 0 after printing it, usage error: 2).
int parse(const std::vector<std::string>& args, AnalyzeArgs& out, bool& done) {
    done = false;
    bool opts_done = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        // "--name VALUE" or "--name=VALUE"; false (after printing why) when the value is missing.
        auto value = [&](const char* name, std::string& v) {
            const std::string n(name);
            if (a == n) {
                if (i + 1 >= args.size()) {
                    fmt::print(stderr, "{}: analyze: {} needs a value\n", kProg, n);
                    return false;
                }
                v = args[++i];
                return true;
            }
            v = a.substr(n.size() + 1);
            return true;
        };
        auto is_opt = [&](const char* name) {
            const std::string n(name);
            return a == n || a.rfind(n + "=", 0) == 0;
        };
        std::string v;
        if (opts_done || a.size() < 2 || a[0] != '-') {
            out.inputs.push_back(a);
        } else if (a == "--") {
            opts_done = true;
        } else if (a == "--help" || a == "-h") {
            fmt::print("{}", kUsage);
            done = true;
            return 0;
        } else if (a == "--json") {
            out.as_json = true;
        } else if (a == "--all-ranks") {
            out.all_ranks = true;
        } else if (is_opt("--color") || is_opt("--colour")) {
            if (!value(a.rfind("--colour", 0) == 0 ? "--colour" : "--color", v)) return 2;
            if (v == "auto")
                out.color = Color::Auto;
            else if (v == "always")
                out.color = Color::Always;
            else if (v == "never")
                out.color = Color::Never;
            else {
                fmt::print(stderr, "{}: analyze: --color takes auto, always or never, not '{}'\n", kProg, clean(v));
                return 2;
            }
        } else if (is_opt("--trace")) {
            if (!value("--trace", v)) return 2;
            if (v.empty()) {
                fmt::print(stderr, "{}: analyze: --trace needs a file name\n", kProg);
                return 2;
            }
            out.trace_path = v;
        } else if (is_opt("--trace-ops")) {
            if (!value("--trace-ops", v)) return 2;
            char* end = nullptr;
            errno = 0;
            const long long n = strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end || errno || n < 0) {
                fmt::print(stderr, "{}: analyze: --trace-ops: '{}' is not a count >= 0\n", kProg, clean(v));
                return 2;
            }
            out.trace_ops = size_t(n);
        } else if (is_opt("--timeout")) {
            if (!value("--timeout", v)) return 2;
            char* end = nullptr;
            errno = 0;
            out.timeout_s = strtod(v.c_str(), &end);
            if (v.empty() || *end || errno || !std::isfinite(out.timeout_s) || out.timeout_s < 0) {
                fmt::print(stderr, "{}: analyze: --timeout: '{}' is not a number of seconds >= 0\n", kProg, clean(v));
                return 2;
            }
        } else {
            fmt::print(stderr, "{}: analyze: unknown option '{}'\n{}", kProg, clean(a), kUsage);
            return 2;
        }
    }
    if (out.inputs.empty()) {
        fmt::print(stderr, "{}: analyze: give at least one folder or rank file\n{}", kProg, kUsage);
        return 2;
    }
    return 0;
}

bool use_color(Color c) {
    if (c != Color::Auto) return c == Color::Always;
    const char* no_color = getenv("NO_COLOR");
    if (no_color && *no_color) return false;
    return isatty(STDOUT_FILENO) == 1;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
    AnalyzeArgs opt;
    bool done = false;
    if (int rc = parse(args, opt, done); rc != 0 || done) return rc;

    // Folders are searched recursively (one per node, or one shared); files are taken as given.
    std::vector<std::string> paths, problems;
    for (const auto& in : opt.inputs) {
        struct stat st {};
        if (stat(in.c_str(), &st) != 0) {
            problems.push_back(in + ": " + strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            auto found = list_rank_files(in, true, &problems);
            if (found.empty()) problems.push_back(in + ": no rank files (*.ncw) in this folder");
            paths.insert(paths.end(), found.begin(), found.end());
        } else {
            paths.push_back(in);
        }
    }

    AnalysisOptions aopt;
    aopt.live = false;
    aopt.timeout_s = opt.timeout_s;
    Analysis a = analyze_paths(paths, aopt);
    a.warnings.insert(a.warnings.begin(), problems.begin(), problems.end());

    if (a.files_read == 0) {
        if (opt.as_json) fmt::print("{}\n", report::dump_json(report::analysis_json(a, opt.timeout_s)));
        fmt::print(stderr, "{}: analyze: no readable rank file\n", kProg);
        for (const auto& w : a.warnings) fmt::print(stderr, "  {}\n", clean(w));
        return 2;
    }

    if (opt.trace_path == "-") {
        // The trace takes stdout.
    } else if (opt.as_json) {
        fmt::print("{}\n", report::dump_json(report::analysis_json(a, opt.timeout_s)));
    } else {
        report::TextOptions topt;
        topt.color = use_color(opt.color);
        topt.all_ranks = opt.all_ranks;
        topt.timeout_s = opt.timeout_s;
        fmt::print("{}", report::render_text(a, topt));
    }
    fflush(stdout);

    if (!opt.trace_path.empty()) {
        const auto t0 = std::chrono::steady_clock::now();
        report::TraceStats stats;
        std::string err;
        report::TraceOptions trace_opt;
        trace_opt.max_ops_per_rank = opt.trace_ops;
        if (!report::write_trace(a, opt.trace_path, trace_opt, &stats, &err)) {
            fmt::print(stderr, "{}: analyze: --trace: {}\n", kProg, clean(err));
            return 2;
        }
        if (opt.trace_path != "-")
            fmt::print(stderr, "{}: trace of {} rank file{} ({} events) written to {} in {:.2f} s\n", kProg,
                       stats.files, stats.files == 1 ? "" : "s", stats.events, clean(opt.trace_path),
                       seconds_since(t0));
    }
    return report::hang_or_mismatch(a) ? 1 : 0;
}

}  // namespace ncw::cli
