// What happened before the end and is over: a stall that recovered, a suspicion that came to nothing, an init that
// waited and then finished. The rank files say how things stand at the end; these are told from the events the shims
// wrote as they happened (<rank file>.report.json, schema ncclwatch.report/1, report/watch_events.h), which carry
// the verdict as it was judged then, with the culprit's frame of that moment, and from the files' init times. `analyze`
// lists them after the end, and leads with the first when nothing is hung.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/job_view.h"

namespace ncw::report {

struct StoryEntry {
    enum class Kind { Recovered, SuspicionCleared, InitWaited };
    Kind kind = Kind::Recovered;
    std::string time;  // when it was first reported (RFC 3339 wall time, "" for an init told from the files)
    std::string job_id;
    uint64_t comm_id = 0;  // the communicator of the verdict (a cascade's: its cause's)
    uint64_t seq = 0;      // the op held up (0: an init)
    double duration_s = 0;
    std::vector<int> culprits;  // the global ranks named (empty: none named, or not known)
    std::string line;           // the whole story in one line, "recovered: rank 0 held AllReduce #11 for 19.6 s in ..."
    nlohmann::json verdict;     // the lead verdict as it was judged then (null: none, or an init told from the files)
};

// One .report.json as read: its path and its document (null where it could not be read).
struct ReportDoc {
    std::string path;
    nlohmann::json doc;
};

// The .report.json beside each rank file that has one (<base>.ncw -> <base>.report.json), at most 16 MiB each, the
// first 4,096 (256 MiB in all; the rest are counted in a warning); what cannot be read or parsed is a warning, never
// an error.
std::vector<ReportDoc> read_report_docs(const std::vector<std::string>& rank_files, std::vector<std::string>* warnings);

// The story of a job, oldest first: the reports' stalls and suspicions that recovered (one entry per verdict, however
// many ranks reported it; the longest wait), and each communicator whose init waited past the ranks' stall timeout and
// then finished (from the rank files). Events that do not parse are skipped, counted in *warnings.
std::vector<StoryEntry> build_story(const Analysis& a, const std::vector<ReportDoc>& reports,
                                    std::vector<std::string>* warnings);

nlohmann::json story_json(const std::vector<StoryEntry>& story);
// The first line of a report when nothing is hung at the end but the story is not empty: its first entry, said to be
// over.
std::string story_headline(const std::vector<StoryEntry>& story);

}  // namespace ncw::report
