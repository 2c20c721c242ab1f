// NCCLWATCH_ACTION after a stall report: nothing, revoke/abort the communicator, or SIGABRT the process.
#include "shim/watch/stall_action.h"

#include <signal.h>
#include <unistd.h>

#include "shim/base/log.h"
#include "shim/base/resolver.h"

namespace ncw {

void act_on_stall(Runtime& rt, CommRuntime& cr) {
    switch (rt.cfg.action) {
        case Action::Report: break;
        case Action::Abort:
            // ncclCommRevoke (NCCL 2.28.7+) makes the stuck operations fail without freeing the communicator,
            // which the framework still holds and will abort itself; ncclCommAbort from our thread would free
            // it under the framework's feet. Abort is the fallback for an older NCCL.
            if (rt.nccl_version >= 22807 && real_available(real::ncclCommRevoke)) {
                log().error("NCCLWATCH_ACTION=abort: revoking communicator {:#018x} so that the framework raises",
                            cr.comm_id);
                cr.slot.load()->state.store(uint32_t(disk::CommState::Revoked));
                NCW_CALL_REAL(ncclCommRevoke, cr.comm, NCCL_REVOKE_DEFAULT);
            } else {
                log().error("NCCLWATCH_ACTION=abort: aborting communicator {:#018x} so that the framework raises",
                            cr.comm_id);
                cr.destroyed.store(true);
                rt.comms.remove(cr.comm);
                cr.slot.load()->state.store(uint32_t(disk::CommState::Aborted));
                NCW_CALL_REAL(ncclCommAbort, cr.comm);
            }
            break;
        case Action::Kill:
            log().error("NCCLWATCH_ACTION=kill: sending SIGABRT to this process after the dump");
            kill(getpid(), SIGABRT);
            break;
    }
}

}  // namespace ncw
