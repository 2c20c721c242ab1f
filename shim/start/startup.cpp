#include "shim/start/startup.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "ncclwatch/version.h"
#include "shim/base/clock.h"
#include "shim/base/cuda_driver.h"
#include "shim/base/log.h"
#include "shim/base/resolver.h"
#include "shim/complete/completion_tracker.h"
#include "shim/complete/profiler_plugin.h"
#include "shim/live/digest_client.h"
#include "shim/record/backtrace.h"
#include "shim/record/env_probe.h"
#include "shim/record/sync_proofs.h"
#include "shim/watch/process_end.h"
#include "shim/watch/watchdog.h"

extern char** environ;

namespace ncw {

Runtime* start_runtime_locked();

namespace {

std::mutex g_start_mu;
bool g_start_attempted = false;

void on_fork_child() {
    // Threads do not survive fork and the mapping is shared with the parent's file: the child starts afresh at its
    // own first communicator init, and until then passes every call through.
    g_runtime.store(nullptr, std::memory_order_release);
    new (&g_start_mu) std::mutex();
    g_start_attempted = false;
    watchdog_forget_after_fork();
    digest_client_forget_after_fork();
}

void on_exit() {
    Runtime* rt = runtime();
    if (!rt) return;
    stop_digest_client();  // Bye first: the collector must not take our exit for a death
    if (rt->tracker) rt->tracker->drain_at_exit(100);
    watchdog_on_exit(*rt);
    rt->file.hdr->process_state.store(uint32_t(disk::ProcessState::ExitedClean), std::memory_order_release);
}

std::string hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
    return buf;
}

}  // namespace

Runtime* start_runtime() {
    if (Runtime* rt = runtime()) return rt;
    try {
        return start_runtime_locked();
    } catch (const std::exception& e) {
        NCW_LOG_ONCE(error, "could not start ({}); the shim passes calls through", e.what());
    } catch (...) {
        NCW_LOG_ONCE(error, "could not start; the shim passes calls through");
    }
    return nullptr;
}

Runtime* start_runtime_locked() {
    std::lock_guard<std::mutex> lock(g_start_mu);
    if (Runtime* rt = runtime()) return rt;
    if (g_start_attempted) return nullptr;
    g_start_attempted = true;

    std::vector<std::string> warnings;
    Config cfg = parse_config([](const char* n) { return getenv(n); }, warnings);
    set_log_level(cfg.log_level.c_str());
    set_log_format(cfg.log_format == LogFormat::Full);
    if (!cfg.enable) {
        for (auto& w : warnings) log().warn("{}", w);
        return nullptr;
    }

    auto* rt = new Runtime;  // never freed: see runtime.h
    rt->cfg = cfg;
    rt->id = detect_identity([](const char* n) { return getenv(n); }, cfg.job_id, hostname(), getpid(), getppid());
    set_log_rank(rt->id.global_rank);
    for (auto& w : warnings) log().warn("{}", w);  // with the rank in the prefix
    rt->file = create_rank_file(cfg.dir, rt->id, uint32_t(cfg.ring_size), cfg.backtrace ? cfg.backtrace_depth : 0);
    if (!rt->file.base) {
        log().error("no memory for the flight recorder; the shim passes calls through");
        return nullptr;
    }
    rt->env = snapshot_env(environ);
    // The variables now, the probed facts later (env_probe.h): room is kept for them. The timeout this process runs
    // with (whatever NCCLWATCH_TIMEOUT_SEC said) and its poll period go into the header, for whoever judges the file
    // after the end.
    append_env_entries(rt->file, env_probe::env_entries(rt->env), env_probe::kFactsReserve);
    rt->file.hdr->timeout_ms = uint32_t(cfg.timeout_sec * 1000 + 0.5);
    rt->file.hdr->poll_ms = uint32_t(cfg.poll_ms);
    NCW_CALL_REAL(ncclGetVersion, &rt->nccl_version);
    rt->file.hdr->nccl_version = rt->nccl_version;
    rt->slots.bind(rt->file.comms, rt->file.hdr->max_comms, &rt->file.hdr->num_comms, &rt->file.hdr->comms_unslotted);
    rt->tracker = CompletionTracker::create(cfg, &rt->file, &rt->comms);
    // The host's synchronisations prove ops complete for the tracker's poller to apply (sync_proofs.h).
    if (rt->tracker) sync_proofs_start();
    rt->completes_on_return =
        !rt->tracker && (profiler_setup().mode != ProfilerMode::Auto || profiler_setup().user_plugin != nullptr);
    rt->slots.watch_passes(0, &rt->watchdog_pass);
    if (rt->tracker) rt->slots.watch_passes(1, &rt->tracker->pass_counter());
    rt->comm_pool.watch_passes(CommPool::kWatchdog, &rt->watchdog_reads);
    rt->comm_pool.watch_passes(CommPool::kDigest, &rt->digest_pass);
    if (rt->tracker) rt->comm_pool.watch_passes(CommPool::kPoller, &rt->tracker->pass_counter());
    rt->file.hdr->cuda_driver_version = cuda_driver().driver_version;
    if (cfg.backtrace) rt->backtrace = load_backtrace_fn();

    static bool hooks_installed = false;
    if (!hooks_installed) {
        hooks_installed = true;
        pthread_atfork(nullptr, nullptr, on_fork_child);
        atexit(on_exit);
    }
    // Our threads never take SIGTERM / SIGINT: the handler waits on a host thread for the watchdog's final verdict.
    sigset_t mask;
    pthread_sigmask(SIG_SETMASK, nullptr, &mask);
    block_end_signals_here();
    start_watchdog(*rt);
    profiler_log_setup(*rt);
    env_probe::start_env_probe(*rt);  // after NCCL resolved (ncclGetVersion above): it scans that library
    start_digest_client(*rt);         // NCCLWATCH_COLLECTOR: its own thread (and, for auto on rank 0, the collector)
    if (rt->tracker) {
        std::thread([t = rt->tracker] {
            try {
                t->poll_forever();
            } catch (...) {
                // Without the poller, completion stops advancing and the watchdog reports it as a stuck poller.
                NCW_LOG_ONCE(error, "the GPU completion poller stopped");
            }
        }).detach();
    }
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    install_end_paths(*rt);  // exit, _exit, fatal signals, SIGTERM / SIGINT (format 1.5's end fields)
    // Quiet by default: a healthy job hears nothing from ncclwatch (debug level says where each rank records).
    log().debug("recording to {} (ncclwatch {}, rank {}, timeout {} s, GPU completion {}, NCCL {} from {})",
                rt->file.path, kVersionLine, rt->id.global_rank, cfg.timeout_sec,
                rt->tracker ? "tracked with CUDA events" : "on return", rt->nccl_version, real_nccl_path());
    g_runtime.store(rt, std::memory_order_release);
    return rt;
}

}  // namespace ncw
