// Rendering shared by the collector and the shim's reports and dumps: one JSON shape for a verdict, a header, a comm
// slot and a record, and the small formatters they use.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "engine/verdict.h"
#include "ncclwatch/format.h"
#include "read/rank_file.h"
#include "read/text.h"

namespace ncw::report {

using json = nlohmann::json;

using text::hex;                          // 0x%016x (read/text.h)
std::string clean(const std::string& s);  // text from a file, for a terminal or a log: control characters become '?'
using disk::process_state_name;           // include/ncclwatch/format.h
using text::hexs;                         // 0x%x (read/text.h)
using text::nccl_version_str;             // "2.28.9" (read/text.h)
const char* nccl_result_name(int32_t r);  // of a record's result: "pending" until its call returned
std::string flags_str(uint8_t f);         // RecordFlags names, "-" for none
std::string format_ranks(const std::vector<int>& ranks);  // "0-3,5"
std::string dump_json(const json& j);                     // pretty, invalid UTF-8 replaced
json rel_ms_json(uint64_t t, uint64_t start);
// "2026-11-30T04:12:07.123+00:00": RFC 3339, local time with its zone (read/text.h, the one time format).
inline std::string wall_time(uint64_t real_ns) { return text::rfc3339(real_ns); }

const char* role_name(verdict::Role r);  // "none", "initiating", "cascade"
json op_json(const verdict::OpSig& s);
// What a rank's reached / completed are worth (format 1.4): "gpu_source", "progress_exact", "unreached",
// "uncompleted", added to a rank's row of the analysis and the live report alike.
void add_progress_basis(json& row, const verdict::RankCommState& r);
json verdict_json(const verdict::Verdict& v, const std::string& job_id);
// A list of ranks in a JSON document holds at most this many. A communicator size is a claim (a forged file or
// frame says 2^20), and a job read from one node of thousands has most of its ranks missing: listed whole, ranks no
// file was seen for would fill memory and files (a 2^20-rank claim took analyze --json to 318 MB and 61 MB of output).
inline constexpr size_t kMaxListedRanks = 4096;
// j[name] = the first kMaxListedRanks of `ranks`; when that cuts the list, j[name + "_count"] = its whole size.
void put_rank_list(json& j, const std::string& name, const std::vector<int>& ranks);
// A drift's verdict and its consequences: "drift" (the alignment: rank, shift, where it began, the ranges paired)
// and "consequence": true / "consequence_of", only on verdicts that have them.
void add_drift_json(json& j, const verdict::Verdict& v);
json header_json(const HeaderInfo& h);
json sig_json(const SigInfo& s, uint64_t start);  // one entry of CommInfo::recent
json comm_json(const CommInfo& c, uint64_t start);
json record_json(const Record& r, uint64_t start, const std::vector<uint64_t>& frames);
// A rank's Python stacks (format 1.5): status, reason, the thread that issued NCCL calls and where it is in the user's
// code, then every thread's frames, innermost first. `tid`: the thread of the rank's newest op (0: unknown).
json py_stacks_json(const verdict::RankCommState& r, uint32_t tid = 0);
json py_stacks_json(uint32_t status, uint32_t reason, const py::Stacks* stacks, const std::string& note,
                    uint32_t tid = 0);
// The kernel tid of a rank's newest collective (its signature window), 0 when none: the thread whose stack matters.
uint32_t newest_tid(const verdict::RankCommState& r);

}  // namespace ncw::report
