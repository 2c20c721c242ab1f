// The shim's live digest client (NCCLWATCH_COLLECTOR): one TCP connection per process to the live collector
// (include/ncclwatch/wire.h), on a thread of its own. It sends a Hello (with NCCLWATCH_TOKEN, it answers the
// collector's Challenge with an HMAC proof, lib/live/live_auth.h: the token never travels) and, once accepted, a Digest
// of every communicator's progress whenever it changed (at most every NCCLWATCH_DIGEST_MS) and a KeepAlive each second
// otherwise, and a Bye at clean exit. A DumpRequest from the collector bumps FileHeader::dump_request, so the watchdog
// writes the dump.
//
// The socket is non-blocking and at most one frame is ever pending: when the collector is slow the stale digest is
// dropped and the latest sent once the socket drains. Training threads never touch any of it; a collector that is
// absent, slow or gone costs them nothing. Reconnects back off exponentially (0.5 s .. 30 s, with jitter); a Reject
// stops reconnecting, unless it says "retry" (the rank is already connected, say).
//
// NCCLWATCH_COLLECTOR=auto: the process of global rank 0 also runs the live collector (lib/live/live_server.h) on
// MASTER_ADDR and the auto port, from this thread; every rank, 0 included, connects to MASTER_ADDR:port.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "read/rank_file.h"
#include "shim/live/collector_endpoint.h"
#include "shim/live/digest_frame.h"
#include "shim/live/self_reader.h"

namespace ncw {

struct Runtime;
struct Config;
struct RankFileWriter;

// Starts the client thread when cfg.collector is set (no-op otherwise). Called once, from start_runtime, after the
// watchdog has started.
void start_digest_client(Runtime& rt);
// At clean exit (the runtime's atexit path): sends Bye, waits briefly (never more than ~200 ms) and closes.
void stop_digest_client();
// In a forked child: the parent's thread and socket are not ours.
void digest_client_forget_after_fork();

// Where it connects and when it retries: collector_endpoint.h (the collector of auto: embedded_collector.cpp); the
// frames it sends: digest_frame.h; what it reads of its own process: self_reader.h.

}  // namespace ncw
