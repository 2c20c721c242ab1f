#include "report/stderr_budget.h"

#include <cctype>
#include <cstring>

#include "ncclwatch/verdict_kinds.h"

namespace ncw::report {

namespace {

bool starts_with(const std::string& s, size_t at, const char* prefix) {
    return s.compare(at, strlen(prefix), prefix) == 0;
}

// The kind a line names at `at` ("KIND: "), its length with the ": "; 0: none.
size_t kind_at(const std::string& s, size_t at) {
    static const char* const kinds[] = {
#define NCW_KIND_TEXT(e, name, ...) name,
        NCW_VERDICT_KINDS(NCW_KIND_TEXT)
#undef NCW_KIND_TEXT
    };
    for (const char* k : kinds)
        if (starts_with(s, at, k) && starts_with(s, at + strlen(k), ": ")) return strlen(k) + 2;
    return 0;
}

}  // namespace

std::string verdict_key(const std::string& line) {
    size_t at = line.find_first_not_of(' ');
    if (at == std::string::npos) return {};
    // What carries it: the final verdict's "FINAL (SIGTERM): ", the collector's, a suspicion's.
    if (starts_with(line, at, "FINAL (")) {
        const size_t close = line.find("): ", at);
        if (close == std::string::npos) return {};
        at = close + 3;
    }
    if (starts_with(line, at, "JOB VERDICT (live collector): ")) at += strlen("JOB VERDICT (live collector): ");
    if (starts_with(line, at, "SUSPECTED ")) at += strlen("SUSPECTED ");
    const size_t kind = kind_at(line, at);
    if (!kind) return {};
    // The subject: up to where a report goes on to what changes (who waits so far, since when, for how long, where
    // the full report is).
    size_t end = line.size();
    for (const char* stop : {"; ", " since ", " for ", " ["}) end = std::min(end, line.find(stop, at + kind));
    std::string key;
    const std::string subject = line.substr(at, end - at);
    // Without the decimals (a wait in seconds): "waited 20.1 s" then "waited 20.2 s" say one verdict.
    for (size_t i = 0; i < subject.size(); ++i) {
        if (std::isdigit(static_cast<unsigned char>(subject[i]))) {
            size_t j = i;
            while (j < subject.size() && std::isdigit(static_cast<unsigned char>(subject[j]))) ++j;
            if (j + 1 < subject.size() && subject[j] == '.' &&
                std::isdigit(static_cast<unsigned char>(subject[j + 1]))) {
                ++j;
                while (j < subject.size() && std::isdigit(static_cast<unsigned char>(subject[j]))) ++j;
                i = j - 1;
                continue;
            }
            key.append(subject, i, j - i);
            i = j - 1;
            continue;
        }
        key += subject[i];
    }
    return key;
}

bool StderrBudget::shape(WatchEvent& e, bool final, size_t others) {
    if (e.lines.empty()) return false;
    const std::string type = e.event.is_object() ? e.event.value("type", std::string()) : std::string();
    const bool suspicion = type == "suspected";
    // What the verdict is said to be doing: ranks that differ (a mismatch NCCL may complete), a straggler, or holding
    // the job up. A mismatch that then hangs the job is said again, as the hang it became.
    const std::string verdict = verdict_key(e.lines.front());
    const bool differs =
        type == "mismatch" || type == "drift" || (type == "collector_verdict" && verdict.rfind("MISMATCH: ", 0) == 0);
    const char* what = differs ? "differs|" : type == "straggler" ? "slow|" : "hangs|";
    const std::string key = verdict.empty() ? std::string() : what + verdict;
    if (!key.empty() && said_.count(key)) {
        if (!final) return false;
        // The end restates the answer in its first line; the rest is what the report above said.
        e.say_more = false;
        refit(e, 0);
        used_ += e.lines.size();
        return true;
    }
    if (suspicion) {
        // One that names no verdict yet is its communicator's.
        const std::string which =
            !key.empty() ? key
                         : "stall on " + (e.event.contains("comm_id") ? e.event["comm_id"].dump() : std::string());
        if (!suspected_.insert(which).second) return false;
    } else if (!key.empty()) {
        said_.insert(key);
    }
    // Said before as ranks that differ, now as what holds the job up: the answer says which.
    const bool became_hang = !suspicion && !differs && !final && type != "straggler" && !verdict.empty() &&
                             said_.count("differs|" + verdict);
    // The answer always; its evidence as far as it leaves room for what may follow.
    const size_t keep = final ? 0 : kReserve;
    const size_t used = used_ + others;
    const size_t room = used + 1 + keep < kJobLines ? kJobLines - used - 1 - keep : 0;
    const size_t evidence = e.lines.size() - 1 + (e.say_more && !e.more.empty() ? 1 : 0);
    if (evidence > room) {
        if (room == 0) e.say_more = false;
        refit(e, room);
    }
    if (became_hang) e.lines.front() += " [it now holds the job up]";
    used_ += e.lines.size() + (e.say_more && !e.more.empty() ? 1 : 0);
    return true;
}

bool StderrBudget::take_note_line(size_t others) {
    if (used_ + others + 1 + kNoteReserve > kJobLines) return false;
    ++used_;
    return true;
}

}  // namespace ncw::report
