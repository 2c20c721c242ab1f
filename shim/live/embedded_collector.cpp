// The live collector inside rank 0's process (NCCLWATCH_COLLECTOR=auto): collector_endpoint.h. Started from the
// digest client's thread, never from a training thread. Quiet: where it listens and its news (the job's verdicts, its
// reports written) at debug level, since the ranks' shims say the verdicts once per node and its reports are in the
// job folder; its troubles as warnings.
#include <memory>
#include <string>

#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/live/collector_endpoint.h"

namespace ncw::live_client {

bool start_embedded_collector(const Config& cfg, const Endpoint& ep, const std::string& job_id, int world_size) {
#ifndef NCW_HAVE_LIVE_SERVER
    (void)cfg;
    (void)ep;
    (void)job_id;
    (void)world_size;
    log().error(
        "NCCLWATCH_COLLECTOR=auto: this build of ncclwatch has no live collector; run "
        "`ncclwatch-collector serve` and set NCCLWATCH_COLLECTOR=HOST:PORT instead");
    return false;
#else
    live::ServerOptions opt = embedded_server_options(cfg, ep, job_id, world_size);
    opt.log = [](const std::string& line) { log().warn("live collector: {}", line); };
    opt.log_news = [](const std::string& line) { log().debug("live collector: {}", line); };
    auto server = std::make_unique<live::LiveServer>(opt);
    std::string err;
    bool started = server->start(&err);
    if (!started && !opt.metrics_listen.empty()) {
        // The collector matters more than its /metrics: without them, if their port is what failed.
        const std::string metrics_err = err, metrics_listen = opt.metrics_listen;
        opt.metrics_listen.clear();
        server = std::make_unique<live::LiveServer>(opt);
        started = server->start(&err);
        if (started)
            log().warn("NCCLWATCH_COLLECTOR=auto: no /metrics on {} ({}): set NCCLWATCH_METRICS_PORT to a free port",
                       metrics_listen, metrics_err);
    }
    if (!started) {
        log().error(
            "NCCLWATCH_COLLECTOR=auto: cannot run the live collector on {} ({}); set MASTER_ADDR to an address of "
            "this host or NCCLWATCH_COLLECTOR_PORT to a free port",
            opt.listen, err);
        return false;
    }
    const std::string metrics = opt.metrics_listen.empty()
                                    ? std::string()
                                    : ", /metrics on http://" +
                                          opt.metrics_listen.substr(0, opt.metrics_listen.rfind(':')) + ":" +
                                          std::to_string(server->stats().metrics_port) + "/metrics";
    log().debug("NCCLWATCH_COLLECTOR=auto: live collector listening on {}{}{}, reports in {}/<job>", opt.listen,
                metrics,
                auto_loopback_only(cfg) ? " (loopback only, NCCLWATCH_TOKEN being unset; ranks of other hosts are "
                                          "not watched live)"
                                        : "",
                opt.out_dir);
    server.release();  // never stopped: it runs until the process exits
    return true;
#endif
}

}  // namespace ncw::live_client
