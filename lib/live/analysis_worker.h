// The live collector's analysis thread. A large job's analysis takes over a second (131,072 ranks), and the loop that
// reads the ranks' frames would read nothing meanwhile: its frames would then be judged late, and the verdict held
// back until it caught up. So the loop hands such an analysis to this thread (the second core) and goes on reading.
// One task at a time, on snapshots the loop shares with it: the loop never writes to a snapshot the task holds (it
// copies the rank's snapshot first), so neither side locks. The loop is woken through its eventfd when the task is
// done, and takes the result back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/job_view.h"
#include "read/snapshot.h"

namespace ncw::live {

struct AnalysisTask {
    std::string job_id;
    uint64_t job_serial = 0;  // which job of that id (one evicted during its analysis may be made again)
    uint64_t facts_gen = 0;   // the job's processes and GPUs as posted (options.audit: audited at that)
    std::vector<std::shared_ptr<const FileSnapshot>> snaps;  // the job's ranks as they stood when posted
    AnalysisOptions options;
    uint64_t now = 0;    // the loop's clock when posted (options.now_mono_ns)
    bool death = false;  // posted for a rank's death (judged at timeout 0)
    Analysis result;     // filled by the thread
    double cost_s = 0;   // the analysis's own time
};

class AnalysisWorker {
public:
    // wake_fd: an eventfd the loop polls; written once per finished task.
    explicit AnalysisWorker(int wake_fd) : wake_fd_(wake_fd) {}
    ~AnalysisWorker() { stop(); }
    AnalysisWorker(const AnalysisWorker&) = delete;
    AnalysisWorker& operator=(const AnalysisWorker&) = delete;

    // Loop thread only: a task was posted and not taken back yet.
    bool busy() const { return busy_; }
    // Starts the thread at the first task. false (the task is handed back in `t`): busy, stopped, or no thread could
    // be started; the caller analyses inline.
    bool post(std::unique_ptr<AnalysisTask>& t) noexcept;
    // The finished task, or null while it runs (or none was posted).
    std::unique_ptr<AnalysisTask> take() noexcept;
    // Joins the thread; a task still running stops at its next step (AnalysisOptions::cancel: a file, a
    // communicator) and is handed back incomplete (Analysis::cancelled): SIGTERM is not held up by an analysis.
    void stop() noexcept;

private:
    void run() noexcept;

    const int wake_fd_;
    bool busy_ = false;  // loop thread only
    std::mutex mu_;
    std::condition_variable cv_;
    std::unique_ptr<AnalysisTask> in_, out_;  // under mu_
    bool stopping_ = false;                   // under mu_
    std::atomic<bool> cancel_{false};         // every task's AnalysisOptions::cancel
    std::thread thread_;
};

}  // namespace ncw::live
