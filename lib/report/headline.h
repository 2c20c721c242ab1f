// The one voice of a verdict: the line that says what is wrong and who is to blame, naming the culprit with where it
// runs (global rank, host, GPU, pid). Every report says it in these words: the shim's stderr and .report.json
// (shim/watch/dump_writer.cpp), the live collector's report (lib/live), and `analyze` as text and JSON. The engine's
// Verdict::summary is the detailed account that follows it, and the evidence follows that.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/job_view.h"

namespace ncw::report {

// The verdict line of one verdict of one job: one case per verdict kind, with its role (initiating, cascade).
std::string verdict_headline(const JobResult& job, const CommResult& comm, const verdict::Verdict& v);

// The verdict as a log or a live report prints it: "KIND: headline" ("SUSPECTED KIND: headline" for a suspicion),
// then the summary and the evidence (the caller indents those).
std::vector<std::string> verdict_lines(const JobResult& job, const CommResult& comm, const verdict::Verdict& v);

// verdict_json (report_json.h) with the verdict line as "headline": the verdicts of .report.json and the live report.
nlohmann::json verdict_json_with_headline(const JobResult& job, const CommResult& comm, const verdict::Verdict& v);

// A hang or a mismatch: any verdict but STRAGGLER (slow, not stuck). Decides the exit status and "problem_found".
bool hang_or_mismatch(const Analysis& a);

// The verdict the report leads with: the most important one, an initiating stall before the cascades it causes, never
// a consequence (of a drift).
// nullptr fields when there is none.
Analysis::VerdictRef lead_verdict(const Analysis& a);

// The verdict line of a whole analysis: the lead verdict's line ("job J: " first when there are several jobs), or
// "no hang and no mismatch: ..." when nothing was found.
std::string headline(const Analysis& a);

// The verdict of a communicator whose culprits a page names (/metrics' ncclwatch_stall_culprit_info): a cause before a
// consequence (of a drift), then a stall's before a mismatch's, then an initiating or plain one before a cascade;
// never a straggler's, a suspicion's, or one that names no culprit. nullptr: none.
const verdict::Verdict* culprit_verdict(const CommResult& c);

// The culprits of `v` and the op they hold up, short and bounded, for labels: their global ranks ("2", "2,5-7"; at most
// 8, then " and N more"; "comm 3" where a global rank is not known), their distinct hosts (at most 4, then " and N
// more"; "?" for one not known), and the op in the headline's words ("AllReduce #6").
struct CulpritLabels {
    std::string ranks, hosts, op;
};
CulpritLabels culprit_labels(const JobResult& job, const CommResult& c, const verdict::Verdict& v);

// ---- The words the headline is made of, shared with the text report and the JSON document ----

std::string plural(size_t n, const char* one, const char* many);              // "1 rank", "3 ranks"
const verdict::RankCommState* find_rank(const CommResult& c, int comm_rank);  // nullptr: no rank file here
bool is_world(const JobResult& job, const CommResult& c);  // no parent and no bigger communicator in the job
// Whether the communicator's comm ranks are the job's global ranks: its world (as large as the WORLD_SIZE its ranks
// recorded), every visible rank's global rank its comm rank. One pass over its ranks: once per verdict, not per rank.
bool ranks_are_global(const JobResult& job, const CommResult& c);
// Each comm rank's global rank: from its file, or, with no file, the comm rank itself where ranks_are_global (scanned
// once, and only when some rank has no file); -1: unknown.
std::vector<int> global_ranks(const JobResult& job, const CommResult& c, const std::vector<int>& comm_ranks);
int known_global_rank(const JobResult& job, const CommResult& c, int comm_rank);  // global_ranks of one
std::string comm_words(const JobResult& job, const CommResult& c);  // "communicator 0x... (world, 512 ranks)"
// When the stall began, as wall-clock time (from the job's "now" and the stall length); 0 when unknown.
uint64_t stalled_since_real_ns(const JobResult& job, const verdict::Verdict& v);
// The Python stacks capture a report shows for a rank in a verdict (nullptr `v`: the rank on its own). A rank file
// keeps two (format 1.8): the newest, and the first taken for a stall. The one taken while the rank was where the
// verdict says is chosen: for a rank that had not issued the verdict's op, after it issued the op before it and before
// it issued this one; for a rank inside the op, after it issued it (and, once the op completed, no later than its last
// completion). `during` false: neither capture was taken then (the newest is returned, for what it is).
struct StacksChoice {
    const py::Stacks* stacks = nullptr;  // nullptr: no stacks captured
    uint32_t reason = 0;                 // disk::PyStacksReason
    uint64_t mono_ns = 0;
    bool during = true;
    bool held = false;  // the held capture, the newest having been taken later
};
StacksChoice stacks_for(const verdict::RankCommState& r, const verdict::Verdict* v);
// Where a rank is in its Python code (format 1.5): the innermost user frame of its thread that issued NCCL calls, in
// the capture stacks_for chooses; nothing without stacks, or where that capture was not taken during the verdict.
std::optional<py::Where> python_where(const verdict::RankCommState& r, const verdict::Verdict* v = nullptr);
std::optional<py::Where> where_in(const verdict::RankCommState& r, const StacksChoice& c);  // the same, c chosen
// "rank 5 is in slow_eval (grid.py:14), called from <module> (grid.py:19); ranks 4,6,7 wait in all_reduce at
// grid.py:20": the verdict's culprits and waiting ranks in their Python code, "" where no stacks are known. Part of
// the verdict line.
std::string python_words(const CommResult& c, const verdict::Verdict& v);

}  // namespace ncw::report
