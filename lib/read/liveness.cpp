// This machine's identity (boot id, host name) and the liveness of a rank file's writer: what turns a snapshot into
// the verdict engine's input (read/rank_file.h: to_rank_comm_state).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "ncclwatch/format.h"
#include "ncclwatch/hash.h"
#include "read/rank_file.h"

namespace ncw {

namespace {

// One field the engine takes, converted to the engine's type (gpu_tracking: nonzero = true).
template <class To, class From>
void engine_assign(To& dst, const From& src) {
    dst = static_cast<To>(src);
}

}  // namespace

uint64_t this_boot_id_hash() noexcept {
    static const uint64_t cached = [] {
        char buf[128];
        const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return uint64_t(0);
        const ssize_t n = ::read(fd, buf, sizeof buf);
        ::close(fd);
        if (n <= 0) return uint64_t(0);
        size_t b = 0, e = size_t(n);
        while (b < e && (buf[b] == ' ' || buf[b] == '\n' || buf[b] == '\t' || buf[b] == '\r')) ++b;
        while (e > b && (buf[e - 1] == ' ' || buf[e - 1] == '\n' || buf[e - 1] == '\t' || buf[e - 1] == '\r')) --e;
        return e > b ? fnv1a64(buf + b, e - b) : uint64_t(0);
    }();
    return cached;
}

std::string this_hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return {};
    return buf;
}

LivenessContext live_context(uint64_t now_mono_ns, double stale_after_s) {
    LivenessContext c;
    c.live = true;
    c.now_mono_ns = now_mono_ns;
    c.stale_after_s = stale_after_s;
    try {
        c.host = this_hostname();
    } catch (...) {
    }
    c.boot_id_hash = this_boot_id_hash();
    return c;
}

verdict::RankCommState to_rank_comm_state(const HeaderInfo& h, const CommInfo& c, const std::string& file,
                                          const LivenessContext& ctx) noexcept {
    verdict::RankCommState s;
    to_rank_comm_state(h, c, file, ctx, s);
    return s;
}

void to_rank_comm_state(const HeaderInfo& h, const CommInfo& c, const std::string& file, const LivenessContext& ctx,
                        verdict::RankCommState& s) noexcept {
    try {
        // What the engine takes from the header and the slot: the ENGINE column of format_fields.h.
#define NCW_TO_ENGINE_FROM(from, type, name, init, show, ...) __VA_OPT__(engine_assign(s.__VA_ARGS__, from.name);)
#define NCW_HEADER_TO_ENGINE(...) NCW_TO_ENGINE_FROM(h, __VA_ARGS__)
#define NCW_COMM_TO_ENGINE(...) NCW_TO_ENGINE_FROM(c, __VA_ARGS__)
        NCW_HEADER_WRITER_FIELDS(NCW_HEADER_TO_ENGINE)
        NCW_COMM_FIELDS(NCW_COMM_TO_ENGINE)
#undef NCW_HEADER_TO_ENGINE
#undef NCW_COMM_TO_ENGINE
#undef NCW_TO_ENGINE_FROM
        s.recent = c.recent;
        s.gpu_spans = c.gpu_spans;
        s.file = file;
        s.py_stacks = h.py_stacks;
        s.py_stacks_status = h.py_stacks_status;
        s.py_stacks_reason = h.py_stacks_reason;
        s.py_stacks_mono_ns = h.py_stacks_mono_ns;
        if (h.py_stacks_status != uint32_t(disk::PyStacksStatus::Captured))
            s.py_stacks_note = h.py_stacks_text.substr(0, 200);
        if (h.py_held) s.py_held = py::Capture{h.py_held, h.py_held_status, h.py_held_reason, h.py_held_mono_ns};

        s.exited_clean = h.process_state == uint32_t(disk::ProcessState::ExitedClean);
        s.end_kind = h.end_kind;
        s.end_status = h.end_status;
        s.end_mono_ns = h.end_mono_ns;
        s.end_thread = h.end_thread;
        s.abort_thread = h.abort_thread;
        s.abort_mono_ns = h.abort_mono_ns;
        s.absorbed_signal = h.absorbed_signal;
        s.absorbed_mono_ns = h.absorbed_mono_ns;
        s.stderr_lines = h.stderr_lines;
        s.last_words = h.last_words;
        s.last_words_mono_ns = h.last_words_mono_ns;
        s.last_words_main = h.last_words_main != 0;
        if (h.teardown_since_ns && h.teardown_comm_id == c.comm_id) {
            s.teardown_since_ns = h.teardown_since_ns;
            s.teardown_op = h.teardown_op;
        }
        // A process that recorded its exit or crash is gone, whatever its heartbeat says (its watchdog may beat on
        // while the exit handlers run). A SIGTERM / SIGINT may be handled by the program, which lives on: live, its
        // pid and heartbeat say; after the fact, it ended. One with an uncaught exception in its main thread is on
        // its way out (its handlers and torch's teardown may take seconds) and issues nothing more.
        const auto end = disk::EndKind(h.end_kind);
        s.alive = !s.exited_clean && end != disk::EndKind::Exit && end != disk::EndKind::FatalSignal &&
                  !(end == disk::EndKind::Terminated && !ctx.live) && !(s.last_words_main && s.last_words_mono_ns);
        const bool same_boot = h.boot_id_hash != 0 && h.boot_id_hash == ctx.boot_id_hash;
        // Monotonic clocks of different boots do not compare: live, the age of a foreign file's heartbeat is unknown.
        const bool can_age = !ctx.live || same_boot;
        if (can_age && h.heartbeat_mono_ns && ctx.now_mono_ns) {
            s.heartbeat_age_s =
                ctx.now_mono_ns > h.heartbeat_mono_ns ? double(ctx.now_mono_ns - h.heartbeat_mono_ns) / 1e9 : 0.0;
            // Never less than three of this process's heartbeats (its watchdog writes one per poll).
            const double poll_s = h.poll_ms ? std::max(0.01, h.poll_ms / 1000.0) : 0.1;
            if (s.heartbeat_age_s > std::max(ctx.stale_after_s, 3 * poll_s)) s.alive = false;
        }
        // pid must be > 0: kill(0, ...) and kill(-1, ...) address process groups. Same host name AND boot, so a
        // different container or a rebooted node with a reused pid is never probed. The live collector probes the
        // process its socket proved (HeaderInfo::proven_pid), never a pid the rank merely says.
        const int64_t probe = h.proven_pid ? h.proven_pid : h.pid;
        if ((ctx.live || ctx.probe_pids_offline) && s.alive && same_boot && !h.host.empty() && h.host == ctx.host &&
            probe > 0 && probe <= INT_MAX) {
            if (kill(pid_t(probe), 0) != 0 && errno != EPERM) s.alive = false;
        }

    } catch (...) {
    }
}

}  // namespace ncw
