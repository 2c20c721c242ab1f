// Python stacks (format 1.5): faulthandler's text parsed into threads and frames (read/py_stacks.h), the thread that
// issued NCCL calls, the user's innermost frame, and the verdict line that names it (report/headline.h).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "engine/job_view.h"
#include "ncclwatch/format.h"
#include "read/py_stacks.h"
#include "report/headline.h"
#include "temp_dir.h"

namespace {

using namespace ncw;

// As CPython 3.11's _Py_DumpTracebackThreads prints it, after the shim's lines: a loader thread first (the newest),
// the main thread, which issued NCCL calls, last.
const char* kCulpritText =
    "# ncclwatch nccl-thread 0x00007f0000000001 tid 4242\n"
    "Thread 0x00007f0000000002 (most recent call first):\n"
    "  File \"/work/grid.py\", line 40 in loader\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 1038 in _bootstrap_inner\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 995 in _bootstrap\n"
    "\n"
    "Thread 0x00007f0000000001 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 622 in wait\n"
    "  File \"/work/grid.py\", line 14 in slow_eval\n"
    "  File \"/work/grid.py\", line 19 in <module>\n";

const char* kWaiterText =
    "# ncclwatch nccl-thread 0x00007f00000000aa tid 77\n"
    "Thread 0x00007f00000000aa (most recent call first):\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", line 2501 in all_reduce\n"
    "  File \"/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py\", line 79 in wrapper\n"
    "  File \"/work/grid.py\", line 20 in <module>\n";

TEST_CASE("faulthandler's text parses into threads and frames, innermost first") {
    const py::Stacks s = py::parse(kCulpritText);
    REQUIRE(s.threads.size() == 2);
    CHECK(s.threads[0].ident == 0x7f0000000002ull);
    CHECK(s.threads[1].ident == 0x7f0000000001ull);
    REQUIRE(s.threads[1].frames.size() == 4);
    CHECK(s.threads[1].frames[2].file == "/work/grid.py");
    CHECK(s.threads[1].frames[2].line == 14);
    CHECK(s.threads[1].frames[2].func == "slow_eval");
    CHECK(s.threads[1].frames[3].func == "<module>");
    REQUIRE(s.nccl_threads.size() == 1);
    CHECK(s.nccl_threads[0].tid == 4242);
    CHECK(s.notes.empty());
}

TEST_CASE("odd text is kept as notes, never a crash; truncation and unknown lines are marked") {
    const py::Stacks s = py::parse(
        "Current thread 0x0000000000000abc (most recent call first):\n"
        "  File \"x.py\", line ??? in f\n"
        "  ...\n"
        "garbage line\n"
        "Thread 0xZZZ (most recent call first):\n"
        "  File \"broken\n"
        "# ncclwatch nccl-thread nothex tid 3\n");
    REQUIRE(s.threads.size() == 1);
    CHECK(s.threads[0].current);
    CHECK(s.threads[0].truncated);
    REQUIRE(s.threads[0].frames.size() == 1);
    CHECK(s.threads[0].frames[0].line == 0);
    CHECK(py::location(s.threads[0].frames[0]) == "x.py:?");
    CHECK(s.notes.size() == 3);
    CHECK(s.nccl_threads.empty());
    CHECK(py::parse("").threads.empty());
    CHECK(py::nccl_thread(py::parse("")) == nullptr);
}

TEST_CASE("the thread that matters is the one that issued NCCL calls; the user's innermost frame is named") {
    const py::Stacks s = py::parse(kCulpritText);
    const py::Thread* t = py::nccl_thread(s, 4242);
    REQUIRE(t != nullptr);
    CHECK(t->ident == 0x7f0000000001ull);
    CHECK(py::nccl_thread(s, 0) == t);  // no tid known: a thread the shim saw issue NCCL calls
    const py::Where w = py::where(*t);
    REQUIRE(w.known);
    CHECK(w.at.func == "slow_eval");
    CHECK(w.callee == "wait");  // the stdlib's frames inside it are skipped
    CHECK(py::where_words(w) == "slow_eval (grid.py:14), called from <module> (grid.py:19)");

    // No shim lines: the last thread printed (CPython's main thread).
    const py::Stacks plain = py::parse(std::string(kCulpritText).substr(std::string(kCulpritText).find('\n') + 1));
    CHECK(py::nccl_thread(plain)->ident == 0x7f0000000001ull);

    // Torch's frames are a library's: a waiting rank waits in torch's all_reduce at the user's line.
    const py::Stacks ws = py::parse(kWaiterText);
    const py::Where ww = py::where(*py::nccl_thread(ws));
    CHECK(py::wait_words(ww) == "all_reduce at grid.py:20");  // not the decorator's wrapper
    CHECK(ww.at.func == "<module>");
    CHECK_FALSE(ww.has_caller);

    // Every frame a library's: the innermost one.
    const py::Stacks lib = py::parse(
        "Thread 0x1 (most recent call first):\n  File \"<frozen importlib._bootstrap>\", line 241 in _call\n");
    CHECK(py::where(lib.threads[0]).at.func == "_call");
    CHECK(py::is_library_file("/usr/lib/python3.11/threading.py"));
    CHECK(py::is_library_file("/opt/conda/lib/python3.12/site-packages/torch/nn/modules/module.py"));
    CHECK_FALSE(py::is_library_file("/home/me/train/grid.py"));

    // DDP: the newest op came from PyTorch's autograd thread, which has a thread state and no Python frame; the
    // thread that says where the rank is is the main one, which issued NCCL calls too.
    const py::Stacks ddp = py::parse(
        "# ncclwatch nccl-thread 0x00007f00000000b1 tid 501\n"
        "# ncclwatch nccl-thread 0x00007f00000000b2 tid 502\n"
        "Thread 0x00007f00000000b2 (most recent call first):\n  <no Python frame>\n\n"
        "Thread 0x00007f00000000b1 (most recent call first):\n"
        "  File \"/work/hang_scenarios.py\", line 118 in validate\n");
    REQUIRE(py::nccl_thread(ddp, 502) != nullptr);
    CHECK(py::nccl_thread(ddp, 502)->ident == 0x7f00000000b1ull);
    CHECK(py::where(*py::nccl_thread(ddp, 502)).at.func == "validate");
}

// A job of one 4-rank communicator `comm` whose verdict is NOT_JOINED at AllReduce #`seq`, naming comm rank `culprit`
// (its stacks `culprit_text`) while the others wait in all_reduce (kWaiterText); global ranks are comm ranks plus
// `global_offset`.
JobResult not_joined_job(uint64_t comm, uint64_t seq, int culprit, const char* culprit_text, int global_offset) {
    JobResult job;
    job.job_id = "job-py";
    CommResult c;
    c.job_id = job.job_id;
    c.comm_id = c.view.comm_id = comm;
    c.view.nranks = 4;
    const auto culprit_stacks = std::make_shared<const py::Stacks>(py::parse(culprit_text));
    const auto waiter = std::make_shared<const py::Stacks>(py::parse(kWaiterText));
    verdict::Verdict v;
    v.kind = verdict::Kind::NotJoined;
    v.comm_id = comm;
    v.seq = seq;
    v.op.op = uint8_t(disk::OpType::AllReduce);
    v.culprits = {culprit};
    for (int r = 0; r < 4; ++r) {
        verdict::RankCommState s;
        s.comm_rank = r;
        s.global_rank = r + global_offset;
        s.host = "node0";
        s.pid = 100 + r;
        s.py_stacks = r == culprit ? culprit_stacks : waiter;
        s.py_stacks_status = 1;
        c.view.ranks.push_back(s);
        if (r != culprit) v.waiting.push_back(r);
    }
    c.verdicts.push_back(v);
    job.comms.push_back(c);
    return job;
}

TEST_CASE("the verdict line names the culprit's frame and the waiting ranks' line") {
    JobResult job = not_joined_job(0xAB, 21, 1, kCulpritText, 4);
    const std::string line = report::verdict_headline(job, job.comms[0], job.comms[0].verdicts[0]);
    CHECK_THAT(line, Catch::Contains(
                         "rank 5 is in slow_eval (grid.py:14), called from <module> (grid.py:19); ranks 4,6,7 wait in "
                         "all_reduce at grid.py:20"));
    // Without stacks, the line is what it was.
    for (auto& r : job.comms[0].view.ranks) r.py_stacks.reset();
    CHECK(report::python_words(job.comms[0], job.comms[0].verdicts[0]).empty());
    CHECK_THAT(report::verdict_headline(job, job.comms[0], job.comms[0].verdicts[0]), !Catch::Contains("slow_eval"));
}

TEST_CASE("a culprit inside torch's send, outside NCCL, is said to be setting up a new pair (issue 41)") {
    // A pipeline stage that sends to a wrong peer: torch makes the pair's connection at its first send, which waits
    // for a peer that never posts the receive. Its process is in dist.send, not in any NCCL call.
    const char* sender =
        "# ncclwatch nccl-thread 0x00007f0000000003 tid 99\n"
        "Thread 0x00007f0000000003 (most recent call first):\n"
        "  File \"/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py\", line 2401 in send\n"
        "  File \"/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py\", line 81 in wrapper\n"
        "  File \"/work/pipe.py\", line 57 in forward_stage\n"
        "  File \"/work/pipe.py\", line 90 in <module>\n";
    JobResult job = not_joined_job(0xCD, 11, 2, sender, 0);
    const verdict::Verdict& v = job.comms[0].verdicts[0];
    CHECK_THAT(
        report::python_words(job.comms[0], job.comms[0].verdicts[0]),
        Catch::StartsWith("rank 2 is blocked in send at pipe.py:57, outside NCCL: torch sets up a pair's "
                          "connection at its first send or receive, which waits for the peer to post its match"));
    // A send's MISMATCH (its first to a wrong peer, inside NCCL's call) names the culprit's line too; a collective's
    // does not (it is about the op).
    verdict::Verdict m = v;
    m.kind = verdict::Kind::Mismatch;
    m.op.op = uint8_t(disk::OpType::Send);
    m.op.root = 0;
    m.seq = m.op.seq = 1;
    CHECK_THAT(report::python_words(job.comms[0], m), Catch::StartsWith("rank 2 is in forward_stage (pipe.py:57)"));
    m.op.op = uint8_t(disk::OpType::AllReduce);
    CHECK(report::python_words(job.comms[0], m).empty());
    // In any other library call, or in its own code, it is where it is.
    job.comms[0].view.ranks[2].py_stacks = std::make_shared<const py::Stacks>(py::parse(kCulpritText));
    CHECK_THAT(report::python_words(job.comms[0], job.comms[0].verdicts[0]),
               Catch::StartsWith("rank 2 is in slow_eval"));
}

// A file as the shim lays it out (compute_layout), with `text` published in its Python stacks region.
std::vector<uint64_t> file_with_stacks(const std::string& text, uint64_t seq = 2) {
    const disk::Layout l = disk::compute_layout(disk::kMinRingCapacity, 2, 0);
    std::vector<uint64_t> words(l.file_size / 8, 0);
    auto* bytes = reinterpret_cast<unsigned char*>(words.data());
    auto* h = new (bytes) disk::FileHeader{};
    disk::init_header(*h, l);
    disk::seal_header(*h);
    std::memcpy(bytes + l.py_stacks_offset, text.data(), text.size());
    h->py_stacks_len = uint32_t(text.size());
    h->py_stacks_status = uint32_t(disk::PyStacksStatus::Captured);
    h->py_stacks_reason = uint32_t(disk::PyStacksReason::Stall);
    h->py_stacks_seq = seq;
    return words;
}

void write_words(const std::string& path, const std::vector<uint64_t>& w) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(w.data()), std::streamsize(w.size() * 8));
}

TEST_CASE("the rank file's Python stacks region reads back; a damaged one is a warning, a capture being written none") {
    TempDir dir;
    const std::string path = dir.file("r.ncw");
    write_words(path, file_with_stacks(kCulpritText));
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.warnings().empty());
    HeaderInfo h = f.header();
    CHECK(h.py_stacks_status == uint32_t(disk::PyStacksStatus::Captured));
    CHECK(h.py_stacks_reason == uint32_t(disk::PyStacksReason::Stall));
    REQUIRE(h.py_stacks);
    CHECK(h.py_stacks->threads.size() == 2);
    RankFile moved = std::move(f);  // the watchdog keeps its readers in a map
    REQUIRE(moved.header().py_stacks);

    // Odd seq: a capture being written is not read (no stacks), the rest of the file is.
    write_words(path, file_with_stacks(kCulpritText, 3));
    RankFile g;
    REQUIRE(g.open(path));
    CHECK_FALSE(g.header().py_stacks);

    // A region past the end of the file: ignored with a warning, the file still opens.
    auto w = file_with_stacks(kCulpritText);
    reinterpret_cast<disk::FileHeader*>(w.data())->py_stacks_offset = w.size() * 8;
    write_words(path, w);
    RankFile d;
    REQUIRE(d.open(path));
    REQUIRE_FALSE(d.warnings().empty());
    CHECK_THAT(d.warnings()[0], Catch::Contains("Python stacks region ignored"));
    CHECK_FALSE(d.header().py_stacks);
}

TEST_CASE("the held capture reads back; a report shows the capture taken while the rank was where its verdict says") {
    // The newest capture is of the exit (the culprit had moved on to its next all_reduce); the held one, of the stall
    // (format 1.8).
    TempDir dir;
    const std::string path = dir.file("r.ncw");
    auto w = file_with_stacks(kWaiterText);
    auto* h = reinterpret_cast<disk::FileHeader*>(w.data());
    h->py_stacks_reason = uint32_t(disk::PyStacksReason::Exit);
    h->py_stacks_mono_ns = 5000;
    std::memcpy(reinterpret_cast<unsigned char*>(w.data()) + h->py_held_offset, kCulpritText, strlen(kCulpritText));
    h->py_held_len = uint32_t(strlen(kCulpritText));
    h->py_held_status = uint32_t(disk::PyStacksStatus::Captured);
    h->py_held_reason = uint32_t(disk::PyStacksReason::DumpRequest);
    h->py_held_mono_ns = 2000;
    h->py_held_seq = 2;
    write_words(path, w);
    RankFile f;
    REQUIRE(f.open(path));
    CHECK(f.warnings().empty());
    const HeaderInfo hi = f.header();
    REQUIRE(hi.py_held);
    CHECK(hi.py_held_reason == uint32_t(disk::PyStacksReason::DumpRequest));
    CHECK(hi.py_held_mono_ns == 2000);
    REQUIRE(hi.py_stacks);
    CHECK(hi.py_stacks_reason == uint32_t(disk::PyStacksReason::Exit));

    // Rank 1 issued #20 at 1000, then nothing until #21 at 3000: a verdict about #21 that it had not joined is about
    // [1000, 3000), when the held capture (2000) was taken, not the newest (5000).
    JobResult job;
    job.job_id = "job-held";
    CommResult c;
    c.job_id = job.job_id;
    c.comm_id = c.view.comm_id = 0xAB;
    c.view.nranks = 2;
    for (int r = 0; r < 2; ++r) {
        verdict::RankCommState s;
        s.comm_rank = r;
        s.global_rank = r;
        s.host = "node0";
        s.pid = 100 + r;
        c.view.ranks.push_back(s);
    }
    verdict::RankCommState& culprit = c.view.ranks[1];
    culprit.py_stacks = hi.py_stacks;
    culprit.py_stacks_status = hi.py_stacks_status;
    culprit.py_stacks_reason = hi.py_stacks_reason;
    culprit.py_stacks_mono_ns = hi.py_stacks_mono_ns;
    culprit.py_held = py::Capture{hi.py_held, hi.py_held_status, hi.py_held_reason, hi.py_held_mono_ns};
    verdict::OpSig s20, s21;
    s20.seq = 20, s20.t_issue_ns = 1000, s20.tid = 4242;
    s21.seq = 21, s21.t_issue_ns = 3000, s21.tid = 4242;
    culprit.recent.push_back(s20);
    culprit.recent.push_back(s21);
    culprit.issued = 21;
    verdict::Verdict v;
    v.kind = verdict::Kind::NotJoined;
    v.comm_id = 0xAB;
    v.seq = 21;
    v.op.op = uint8_t(disk::OpType::AllReduce);
    v.culprits = {1};
    v.waiting = {0};
    culprit.issued = 20;  // as the verdict has it: it had not issued #21 (yet)
    culprit.recent.mut().pop_back();
    c.verdicts.push_back(v);
    job.comms.push_back(c);
    const CommResult& jc = job.comms[0];
    const verdict::RankCommState& r1 = jc.view.ranks[1];
    // Not issued #21 at all, by the end: any capture since #20 is where it still is: the newest.
    CHECK_FALSE(report::stacks_for(r1, &jc.verdicts[0]).held);
    CHECK(report::stacks_for(r1, &jc.verdicts[0]).during);

    // It issued #21 at 3000 after all (the stall recovered): the held capture is the one of the stall.
    job.comms[0].view.ranks[1].recent.push_back(s21);
    job.comms[0].view.ranks[1].issued = 21;
    const report::StacksChoice pick = report::stacks_for(jc.view.ranks[1], &jc.verdicts[0]);
    CHECK(pick.held);
    CHECK(pick.during);
    CHECK(pick.reason == uint32_t(disk::PyStacksReason::DumpRequest));
    CHECK_THAT(report::verdict_headline(job, jc, jc.verdicts[0]),
               Catch::Contains("rank 1 is in slow_eval (grid.py:14)"));

    // Neither capture was taken then: no frame is claimed, and the stacks shown say they are of another moment.
    job.comms[0].view.ranks[1].py_held.mono_ns = 4000;
    CHECK_FALSE(report::stacks_for(jc.view.ranks[1], &jc.verdicts[0]).during);
    CHECK_FALSE(report::python_where(jc.view.ranks[1], &jc.verdicts[0]));
    CHECK_THAT(report::verdict_headline(job, jc, jc.verdicts[0]), !Catch::Contains("rank 1 is in"));

    // A rank on its own (no verdict): its newest capture.
    CHECK(report::stacks_for(jc.view.ranks[1], nullptr).reason == uint32_t(disk::PyStacksReason::Exit));
}

}  // namespace
