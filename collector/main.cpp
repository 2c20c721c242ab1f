// ncclwatch-collector: reads rank files after the fact (or while the job hangs) and names the culprit. One file per
// command (cmd_*.cpp); this one builds the command line (CLI11) and dispatches. Every command takes --help and
// --version; a usage error is one line on stderr that points to --help, with exit status 2.
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "cli.h"
#include "ncclwatch/version.h"

namespace ncw::cli {

namespace {

const char* const kAbout =
    "ncclwatch: names the rank, the communicator and the operation that hold up a hung NCCL job, from the rank "
    "files\nthat libncclwatch.so writes (offline) or from the digests its ranks stream (live).";

const char* const kFooter =
    R"(Run 'ncclwatch-collector COMMAND --help' for the options of a command; `ncclwatch-collector env` lists
the NCCLWATCH_* variables that configure the shim (LD_PRELOAD=libncclwatch.so).)";

std::string version_text() { return fmt::format("ncclwatch {}", kVersionLine); }

// "ncclwatch-collector analyze: WHY; see 'ncclwatch-collector analyze --help'" on stderr; exit status 2.
int usage_error(const CLI::App* sub, const std::string& why) {
    const std::string who = sub ? fmt::format("{} {}", kProg, sub->get_name()) : std::string(kProg);
    fmt::print(stderr, "{}: {}; see '{} --help'\n", who, why, who);
    return 2;
}

// Words left over after parsing: an option nobody knows, or one argument too many.
std::string extras_error(const std::vector<std::string>& extra, bool top) {
    const std::string& a = extra.front();
    if (a.size() > 1 && a[0] == '-') return fmt::format("unknown option '{}'", clean(a));
    return fmt::format("{} '{}'", top ? "unknown command" : "unexpected argument", clean(a));
}

// What CLI11 left over, less the "--" that ends the options (it keeps that too).
std::vector<std::string> left_over(const CLI::App* app) {
    std::vector<std::string> r = app->remaining(false);
    if (auto it = std::find(r.begin(), r.end(), "--"); it != r.end()) r.erase(it);
    return r;
}

// CLI11's words for a missing value ("--timeout: 1 required SEC missing") in ours.
std::string parse_error(const CLI::ParseError& e) {
    std::string m = e.what();
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && m.find(" required ") != std::string::npos &&
        m.find(':') != std::string::npos)
        return fmt::format("{} needs a value", m.substr(0, m.find(':')));
    return clean(m);
}

int run(int argc, char** argv) {
    CLI::App app(kAbout, kProg);
    app.footer(kFooter);
    app.allow_extras();
    app.set_version_flag("--version", version_text(), "print the version and the git commit, and exit");
    app.set_help_flag("-h,--help", "print this help and exit");
    app.get_formatter()->column_width(26);

    struct Sub {
        const char* name;
        const char* about;
        Command (*add)(CLI::App&);
    };
    const Sub subs[] = {
        {"analyze", "read the rank files (*.ncw) of a job and name what holds up each communicator", add_analyze},
        {"dump", "decode one rank file: header, communicators and every valid record", add_dump},
        {"serve", "the live collector: ranks stream digests to it; it reports a stall as it happens", add_serve},
        {"relay", "a node's relay: carries its ranks to the collector on one connection", add_relay},
        {"env", "list the NCCLWATCH_* environment variables the shim reads", add_env},
    };
    std::map<const CLI::App*, Command> commands;
    for (const auto& s : subs) {
        CLI::App* sub = app.add_subcommand(s.name, s.about);
        sub->set_version_flag("--version", version_text(), "print the version and the git commit, and exit");
        sub->set_help_flag("-h,--help", "print this help and exit");
        commands[sub] = s.add(*sub);
    }
    // `help [COMMAND]` is `[COMMAND] --help`; listed here, answered before parsing.
    app.add_subcommand("help", "this text, or a command's options: help COMMAND");
    if (argc >= 2 && std::string(argv[1]) == "help" && argc <= 3) {
        bool known = argc == 2;
        for (const auto& [s, cmd] : commands) known = known || s->get_name() == argv[2];
        if (!known) return usage_error(nullptr, fmt::format("unknown command '{}'", clean(argv[2])));
        std::string help_flag = "--help";
        char* again[] = {argv[0], argc == 3 ? argv[2] : help_flag.data(), help_flag.data(), nullptr};
        return run(argc == 3 ? 3 : 2, again);
    }

    CLI::App* sub = nullptr;
    try {
        app.parse(argc, argv);
        if (!app.get_subcommands().empty()) sub = app.get_subcommands().front();
        if (const auto extra = left_over(&app); !extra.empty()) return usage_error(nullptr, extras_error(extra, true));
        if (!sub) return usage_error(nullptr, "give a command (analyze, dump, serve, relay, env)");
        if (const auto extra = left_over(sub); !extra.empty()) return usage_error(sub, extras_error(extra, false));
        if (!commands.count(sub)) return usage_error(sub, "give one command name");
        return commands.at(sub)();
    } catch (const CLI::CallForHelp&) {
        fmt::print("{}", app.help());  // the help of the subcommand given, if any
        return 0;
    } catch (const CLI::CallForVersion& e) {
        fmt::print("{}\n", e.what());
        return 0;
    } catch (const CLI::ParseError& e) {
        if (!app.get_subcommands().empty()) sub = app.get_subcommands().front();
        return usage_error(sub, parse_error(e));
    } catch (const UsageError& e) {
        return usage_error(sub, e.what());
    }
}

}  // namespace

}  // namespace ncw::cli

int main(int argc, char** argv) {
    try {
        return ncw::cli::run(argc, argv);
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: {}\n", ncw::cli::kProg, e.what());
        return 2;
    }
}
