// How much one process says on stderr over a whole job: one report per node and verdict, and at most kJobLines lines
// however the story unfolds (a suspicion, the stall, the live collector's verdict, the dumps, a recovery, the final
// verdict at the end). The shim's writer (shim/watch/dump_writer.cpp) passes every event it would print through one
// budget; what it cuts is in the report file, and on stderr at NCCLWATCH_LOG_LEVEL=debug.
//
// The rules, in order:
//  - a verdict said in full once is not said again: a later event that leads with it (the stall that follows its
//    suspicion, a teardown held up by it, the live collector's same verdict) goes to the report file only, and the
//    final verdict at the end restates it in its one first line. A mismatch (or drift) that then holds the job up is
//    said again, as the hang it became ("[it now holds the job up]");
//  - a suspicion is one line, once per verdict, and never counts as the verdict said;
//  - a new verdict's first line is always said (it is the answer); its evidence gets what fits, leaving kReserve lines
//    for what may follow (the node's dumps, a recovery, the final verdict), the final verdict itself leaving none;
//  - a line of its own (a recovery) is said; a line that only says where things are (the node's dumps) only where it
//    leaves kNoteReserve.
#pragma once

#include <cstddef>
#include <set>
#include <string>

#include "report/watch_events.h"

namespace ncw::report {

// Lines one node's stderr carries for a job, every event told; kept by an event for those that may follow it; kept by
// the dumps' line (a recovery, a final verdict's answer and one more).
inline constexpr size_t kJobLines = 12;
inline constexpr size_t kReserve = 5;
inline constexpr size_t kNoteReserve = 3;

// The identity of the verdict a line states, whatever else the line says: the kind and its subject (culprits, op,
// communicator) without the prefixes of the event that carries it ("FINAL (SIGTERM): ", "JOB VERDICT (live
// collector): ", "SUSPECTED ") and without what changes from one report of it to the next (waits, times, how many
// ranks wait so far). Two reports of one verdict have the same key. "" for a line that states no verdict.
std::string verdict_key(const std::string& line);

class StderrBudget {
public:
    // Shapes `e` for stderr (its lines; what no longer fits into `more`); false: say nothing of it on stderr (its
    // event still goes into the report file). final: the final verdict at the end (nothing follows it). others: the
    // lines the node's other ranks printed on the same stderr (their share of the one budget).
    bool shape(WatchEvent& e, bool final = false, size_t others = 0);
    // A line that only says where things are (the node's dumps): true when it fits and leaves the reserve.
    bool take_note_line(size_t others = 0);
    size_t used() const { return used_; }  // this process's lines

private:
    std::set<std::string> said_;       // verdicts said in full
    std::set<std::string> suspected_;  // verdicts said as suspicions
    size_t used_ = 0;
};

}  // namespace ncw::report
