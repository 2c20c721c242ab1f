// The sampling decision of the CUDA-event path (CompletionTracker::sample, StreamClaim): which ops carry their own
// events, which follow, and where a follower gets a mark, under a CPU that runs far ahead of its GPU.
#include <catch2/catch.hpp>
#include <vector>

#include "shim/complete/completion_tracker.h"

using namespace ncw;

namespace {

constexpr uint64_t kUs = 1000;

// Issues `n` ops of `count` elements 1 us apart on the claim's stream, as run_op does (a follower is counted once its
// call returned); no event completes. Returns, per op (1-based), 'S' sampled, 'M' mark, '.' follower.
std::string issue(StreamClaim& c, uint64_t& now, int n, uint64_t count = 1024) {
    std::string out;
    for (int i = 0; i < n; ++i) {
        now += kUs;
        const CompletionTracker::Sampling s = CompletionTracker::sample(&c, now, false, count);
        out += s.gen ? 'S' : s.mark ? 'M' : '.';
        if (!s.gen) c.followers.fetch_add(1);
    }
    return out;
}

std::vector<size_t> positions(const std::string& s, char what) {
    std::vector<size_t> v;
    for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == what) v.push_back(i + 1);
    return v;
}

}  // namespace

TEST_CASE("a burst behind one sampled op carries a mark every 16 followers") {
    StreamClaim c;
    uint64_t now = 1000000000;
    const std::string got = issue(c, now, 240);
    CHECK(positions(got, 'S') == std::vector<size_t>{1});
    // The sample at #1 starts the spacing; then 16 followers to each mark: #18, #34, ...
    std::vector<size_t> want;
    for (size_t m = 18; m <= 240; m += 16) want.push_back(m);
    CHECK(positions(got, 'M') == want);
    CHECK(c.marks.load() == want.size());
}

TEST_CASE("marks thin out as they pile up in flight, and stop at the cap") {
    StreamClaim c;
    uint64_t now = 1000000000;
    const std::vector<size_t> m = positions(issue(c, now, 20000), 'M');
    REQUIRE(m.size() == StreamClaim::kMaxMarks);
    // 16 marks 16 apart, 16 at 32, 16 at 64, 16 at 128.
    for (size_t i = 1; i < m.size(); ++i) {
        const size_t pending_before = i;  // marks in flight when mark i was placed
        CHECK(m[i] - m[i - 1] == (StreamClaim::kMarkEveryOps << (pending_before / StreamClaim::kMarksPerDoubling)));
    }
    // At the cap, a mark is looked at again every 16 ops only; once some resolve, marks resume at the tighter
    // spacing from the next look.
    c.marks_resolved.store(StreamClaim::kMaxMarks);
    const std::vector<size_t> again = positions(issue(c, now, 48), 'M');
    REQUIRE(again.size() >= 2);
    CHECK(again[0] <= StreamClaim::kMarkEveryOps);
    for (size_t i = 1; i < again.size(); ++i) CHECK(again[i] - again[i - 1] == StreamClaim::kMarkEveryOps);
}

TEST_CASE("large ops get a mark of their own; a pause gets a sampled op, which restarts the spacing") {
    StreamClaim c;
    uint64_t now = 1000000000;
    CHECK(issue(c, now, 4, StreamClaim::kMarkEveryElems) == "SMMM");
    c.marks_resolved.store(c.marks.load());
    CHECK(issue(c, now, 10) == "..........");
    now += StreamClaim::kPauseNs;  // a pause: sampled (fewer than kMaxSamples in flight)
    const std::string got = issue(c, now, 40);
    CHECK(got[0] == 'S');
    CHECK(positions(got, 'M') == std::vector<size_t>{18, 34});
}

TEST_CASE("every op sampled: no marks") {
    StreamClaim c;
    for (int i = 0; i < 100; ++i) {
        const CompletionTracker::Sampling s = CompletionTracker::sample(&c, 1000000000 + i * kUs, true, 1024);
        CHECK(s.gen != 0);
        CHECK(!s.mark);
    }
}

TEST_CASE("no claim entry: always sampled") {
    const CompletionTracker::Sampling s = CompletionTracker::sample(nullptr, 12345, false, 1024);
    CHECK(s.gen != 0);
    CHECK(!s.mark);
}
