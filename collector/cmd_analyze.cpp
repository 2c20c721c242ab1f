// `ncclwatch-collector analyze`: rank files from any number of folders to verdicts and a report (text, JSON, trace).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "engine/job_view.h"
#include "ncclwatch/version.h"
#include "read/rank_file.h"
#include "read/snapshot_batch.h"
#include "report/analysis_json.h"
#include "report/headline.h"
#include "report/report_json.h"
#include "report/report_text.h"
#include "report/report_trace.h"
#include "report/story.h"

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

bool use_color(Color c) {
    if (c != Color::Auto) return c == Color::Always;
    const char* no_color = getenv("NO_COLOR");
    if (no_color && *no_color) return false;
    return isatty(STDOUT_FILENO) == 1;
}

// The stall timeouts the ranks ran with (the reader's timeout_ms), each once, in increasing order. Empty: no file
// said (format 1.0 files).
std::vector<double> ranks_timeouts(const Analysis& a) {
    std::vector<double> out;
    for (const auto& f : a.files) {
        if (!f.ok || !f.timeout_ms) continue;
        const double t = f.timeout_ms / 1000.0;
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// "1 s (NCCLWATCH_TIMEOUT_SEC)", "1 s and 60 s (NCCLWATCH_TIMEOUT_SEC; they differ)", "not recorded (...)".
std::string timeouts_words(const std::vector<double>& t) {
    if (t.empty()) return "not recorded (format 1.0 files)";
    std::string out;
    for (size_t i = 0; i < t.size(); ++i)
        out += fmt::format("{}{:g} s", i == 0 ? "" : i + 1 == t.size() ? " and " : ", ", t[i]);
    return out + (t.size() > 1 ? " (NCCLWATCH_TIMEOUT_SEC; they differ)" : " (NCCLWATCH_TIMEOUT_SEC)");
}

// The analysis document (schema ncclwatch.analysis/2) with the version of the collector that wrote it, the
// timeouts the ranks ran with, and what happened before the end (its first line the headline when nothing is hung,
// as the text report's).
nlohmann::json analysis_doc(const Analysis& a, double timeout_s, const std::vector<report::StoryEntry>& story) {
    nlohmann::json doc = report::analysis_json(a, timeout_s);
    doc["ncclwatch_version"] = kVersionLine;
    doc["ranks_timeout_s"] = ranks_timeouts(a);
    doc["story"] = report::story_json(story);
    if (a.all_verdicts().empty() && !story.empty()) doc["headline"] = report::story_headline(story);
    return doc;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_analyze(const AnalyzeArgs& opt) {
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
    // The files are read on a few threads (most of the time on a cold cache is waiting for the disk), then
    // analysed together: the same as analyze_paths, which reads them one after the other.
    Analysis a = analyze(snapshot_paths(paths, aopt.p2p), aopt);
    a.warnings.insert(a.warnings.begin(), problems.begin(), problems.end());
    // What happened before the end: the events the shims wrote beside their rank files, and the files' init times.
    const std::vector<report::StoryEntry> story =
        report::build_story(a, report::read_report_docs(paths, &a.warnings), &a.warnings);
    // Past 1,024 files the files share one history budget: say how far back this analysis looked (claim only what
    // was read).
    if (const uint64_t h = history_records_for(paths.size()); a.files_read && h < kHistoryRecords)
        a.warnings.push_back(fmt::format(
            "{} files: each rank's history before its communicators' signature windows is its newest {} records ({} "
            "with 1,024 files or fewer): a mismatch NCCL completed silently before them, and older GPU times, are "
            "not looked at",
            a.files_read, h, kHistoryRecords));

    if (a.files_read == 0) {
        if (opt.as_json) fmt::print("{}\n", report::dump_json(analysis_doc(a, opt.timeout_s, story)));
        fmt::print(stderr, "{}: analyze: no readable rank file\n", kProg);
        for (const auto& w : a.warnings) fmt::print(stderr, "  {}\n", clean(w));
        return 2;
    }

    if (opt.trace_path == "-") {
        // The trace takes stdout.
    } else if (opt.as_json) {
        fmt::print("{}\n", report::dump_json(analysis_doc(a, opt.timeout_s, story)));
    } else {
        report::TextOptions topt;
        topt.color = use_color(opt.color);
        topt.all_ranks = opt.all_ranks;
        topt.timeout_s = opt.timeout_s;
        topt.ranks_timeout = timeouts_words(ranks_timeouts(a));
        topt.story = &story;
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

}  // namespace

Command add_analyze(CLI::App& sub) {
    auto o = std::make_shared<AnalyzeArgs>();
    sub.add_flag("--json", o->as_json,
                 "one JSON object instead of the report (schema ncclwatch.analysis/2,\n"
                 "docs/schemas/analysis.schema.json)");
    add_value(
        sub, "--timeout", "SEC", "seconds without progress before an outstanding op counts as\nstalled (default 0)",
        [o](const std::string& v) { return parse_seconds(v, o->timeout_s); }, "a number of seconds >= 0");
    add_value(
        sub, "--trace", "FILE",
        "also write the rings as a Chrome/Perfetto trace (one track per\nrank, grouped by host; open in "
        "ui.perfetto.dev or chrome://tracing);\n\"-\" = stdout instead of the report",
        [o](const std::string& v) { return !(o->trace_path = v).empty(); }, "a file name");
    add_value(
        sub, "--trace-ops", "N", "the newest N operations per rank in the trace (default 500;\n0 = the whole ring)",
        [o](const std::string& v) { return parse_count(v, o->trace_ops, false); }, "a count >= 0");
    add_value(
        sub, "--color,--colour", "WHEN", "colour the report: auto (a terminal and NO_COLOR unset), always,\nnever",
        [o](const std::string& v) {
            if (v == "auto") return (o->color = Color::Auto), true;
            if (v == "always") return (o->color = Color::Always), true;
            if (v == "never") return (o->color = Color::Never), true;
            return false;
        },
        "auto, always or never");
    sub.add_flag("--all-ranks", o->all_ranks,
                 "one table row per rank (big communicators group identical rows by\n"
                 "default)");
    sub.add_option("DIR_OR_FILE", o->inputs, "rank files, or folders searched recursively for *.ncw")->type_name("");
    sub.footer(R"(Reads every rank file (folders are searched recursively: give one folder per node, or one shared
folder) and names what holds up each communicator of each job: FAILED (torch's NCCL watchdog ended ranks), DEAD,
DEADLOCK, EXTRA_OP, NOT_JOINED, MISMATCH, INIT_HANG, SETTING_DIFFERS, ASYNC_ERROR, GPU_NOT_REACHED, STUCK_IN_NCCL,
TEARDOWN_HANG, UNKNOWN, STRAGGLER. Files of several jobs are reported per job; missing ranks and
unreadable or truncated files are named, the rest analysed. "Now" is the newest heartbeat of each job, so files
copied later still read as of the hang. The report starts with one verdict line naming the culprit (rank, host,
GPU, pid), then the evidence, the per-communicator table and "Also noticed".
Exit status: 0 nothing found (or only stragglers), 1 a hang, a mismatch or a failed end found (FAILED: torch's
watchdog ended the job; TEARDOWN_HANG or a stall the job was killed in), 2 usage error or no readable file.)");
    return [o] {
        if (o->inputs.empty()) throw UsageError("give at least one folder or rank file");
        return run_analyze(*o);
    };
}

}  // namespace ncw::cli
