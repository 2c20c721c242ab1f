// The registry of CUDA graphs that hold captured NCCL ops (shim/record/graph_registry.h), over the fake CUDA driver
// (test/fake_cuda, linked: it names the graph a stream's capture builds). Ops captured on a stream go to that capture's
// graph, in order; an instantiation runs them; destroying the graph keeps them for its instantiations (torch destroys
// its graph right after instantiating it), destroying the last instantiation forgets them; a full table is said, not
// overrun; a stream not capturing adds nothing; a captured op keeps its communicator's life (comm_pool.h).
#include <catch2/catch.hpp>

#include "fake_cuda.h"
#include "shim/base/cuda_driver.h"
#include "shim/record/comm_registry.h"
#include "shim/record/graph_registry.h"

using namespace ncw;

namespace {

void* h(uintptr_t v) { return reinterpret_cast<void*>(v); }
cudaStream_t stream(uintptr_t v) { return reinterpret_cast<cudaStream_t>(v); }

OpDesc all_reduce(size_t count, cudaStream_t s) {
    OpDesc d{};
    d.op = disk::OpType::AllReduce;
    d.count = count;
    d.redop = 0;
    d.root_or_peer = -1;
    d.comm = reinterpret_cast<ncclComm_t>(uintptr_t(0xc0));
    d.stream = s;
    return d;
}

// A graph captured on `s` holding `n` all_reduces (counts 1..n), as fakecuda names it once the capture ended.
void* capture(GraphRegistry& reg, CommRuntime& cr, cudaStream_t s, int n) {
    fakecuda_set_capturing(s, 1);
    for (int i = 1; i <= n; ++i) reg.captured(cr, all_reduce(size_t(i), s), s);
    fakecuda_set_capturing(s, 0);
    return fakecuda_last_capture(s);
}

}  // namespace

TEST_CASE("captured ops belong to their capture's graph, and a launch of its instantiation runs them") {
    REQUIRE(cuda_driver().ok);
    REQUIRE(cuda_driver().cuStreamGetCaptureInfo != nullptr);
    auto* reg = new GraphRegistry;  // large: not on the stack
    CommRuntime cr;
    const cudaStream_t s = stream(0x7100);
    reg->captured(cr, all_reduce(9, s), s);  // not capturing: nothing
    void* g = capture(*reg, cr, s, 3);
    REQUIRE(g != nullptr);
    CHECK(reg->ops_of(h(0x9000)) == nullptr);  // not instantiated yet
    reg->instantiated(g, h(0x9000));
    const GraphRegistry::Graph* ops = reg->ops_of(h(0x9000));
    REQUIRE(ops != nullptr);
    REQUIRE(ops->n.load() == 3);
    CHECK(ops->ops[0].desc.count == 1);
    CHECK(ops->ops[2].desc.count == 3);
    CHECK(ops->ops[1].cr == &cr);
    CHECK(ops->ops[1].life == cr.life.load());

    // The graph destroyed (torch's way): its instantiation still runs the ops; a second one of it too.
    reg->graph_destroyed(g);
    CHECK(reg->ops_of(h(0x9000)) == ops);
    reg->instantiated(g, h(0x9100));  // a graph handle no longer known: nothing
    CHECK(reg->ops_of(h(0x9100)) == nullptr);
    reg->exec_destroyed(h(0x9000));
    CHECK(reg->ops_of(h(0x9000)) == nullptr);

    // Two graphs captured one after another on one stream are two graphs.
    void* g1 = capture(*reg, cr, s, 1);
    void* g2 = capture(*reg, cr, s, 2);
    REQUIRE(g1 != g2);
    reg->instantiated(g1, h(0x9200));
    reg->instantiated(g2, h(0x9300));
    CHECK(reg->ops_of(h(0x9200))->n.load() == 1);
    CHECK(reg->ops_of(h(0x9300))->n.load() == 2);
    CHECK(reg->ops_of(nullptr) == nullptr);
}

TEST_CASE("the tables are bounded: past them a graph's ops are not recorded, and nothing is overrun") {
    REQUIRE(cuda_driver().ok);
    auto* reg = new GraphRegistry;
    CommRuntime cr;
    const cudaStream_t s = stream(0x7200);
    // One graph with more ops than it holds: its launches are not recorded (an overflowed graph never instantiates).
    void* big = capture(*reg, cr, s, int(GraphRegistry::kOpsPerGraph) + 1);
    reg->instantiated(big, h(0xa000));
    CHECK(reg->ops_of(h(0xa000)) == nullptr);
    // More graphs than entries: the ones beyond have none.
    void* last = nullptr;
    for (uint32_t i = 0; i < GraphRegistry::kGraphs + 2; ++i) last = capture(*reg, cr, s, 1);
    reg->instantiated(last, h(0xa100));
    CHECK(reg->ops_of(h(0xa100)) == nullptr);
    // More instantiations than entries, of a graph that fits.
    auto* reg2 = new GraphRegistry;
    void* g = capture(*reg2, cr, s, 1);
    for (uint32_t i = 0; i < GraphRegistry::kExecs; ++i) reg2->instantiated(g, h(0xb000 + 16 * i));
    reg2->instantiated(g, h(0xc000));
    CHECK(reg2->ops_of(h(0xb000)) != nullptr);
    CHECK(reg2->ops_of(h(0xb000 + 16 * (GraphRegistry::kExecs - 1))) != nullptr);
    CHECK(reg2->ops_of(h(0xc000)) == nullptr);
    // Destroying one frees its entry for the next.
    reg2->exec_destroyed(h(0xb000));
    reg2->instantiated(g, h(0xc000));
    CHECK(reg2->ops_of(h(0xc000)) != nullptr);
}

// A communicator destroyed after the capture whose runtime a later one reuses (comm_pool.h): the captured ops keep the
// life they were captured in, which the replay (graph_hooks.cpp) checks, so the later communicator runs none of them.
TEST_CASE("a captured op keeps its communicator's life: a reuse of the runtime is another communicator") {
    REQUIRE(cuda_driver().ok);
    auto* reg = new GraphRegistry;
    auto* cr = new CommRuntime;
    const cudaStream_t s = stream(0x7300);
    void* g = capture(*reg, *cr, s, 1);
    reg->instantiated(g, h(0xd000));
    const GraphRegistry::Graph* ops = reg->ops_of(h(0xd000));
    REQUIRE(ops != nullptr);
    const uint64_t captured = ops->ops[0].life;
    CHECK(captured == cr->life.load());
    cr->renew();  // the runtime serves a later communicator
    CHECK(ops->ops[0].cr == cr);
    CHECK(ops->ops[0].life != cr->life.load());
    CHECK(cr->life.load() == captured + 1);
}
