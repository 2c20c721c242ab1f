// The live collector's analysis thread: see analysis_worker.h.
#include "live/analysis_worker.h"

#include <time.h>
#include <unistd.h>

#include "read/time_base.h"

namespace ncw::live {

bool AnalysisWorker::post(std::unique_ptr<AnalysisTask>& t) noexcept {
    if (busy_ || !t) return false;
    try {
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (stopping_) return false;
            if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
            in_ = std::move(t);
        }
        cv_.notify_one();
        busy_ = true;
        return true;
    } catch (...) {  // no thread (EAGAIN): the loop analyses inline, as before there was one
        std::lock_guard<std::mutex> lock(mu_);
        if (in_) t = std::move(in_);
        return false;
    }
}

std::unique_ptr<AnalysisTask> AnalysisWorker::take() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (!out_) return nullptr;
    busy_ = false;
    return std::move(out_);
}

void AnalysisWorker::stop() noexcept {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cancel_ = true;
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
}

void AnalysisWorker::run() noexcept {
    for (;;) {
        std::unique_ptr<AnalysisTask> t;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stopping_ || in_; });
            if (!in_) return;  // stopping, nothing to finish
            t = std::move(in_);
        }
        const uint64_t t0 = time_base::clock_ns(CLOCK_MONOTONIC);
        try {
            std::vector<const FileSnapshot*> files;
            files.reserve(t->snaps.size());
            for (const auto& s : t->snaps) files.push_back(s.get());
            t->options.cancel = &cancel_;
            t->result = analyze(files, t->options);
        } catch (...) {  // out of memory building the list: an empty analysis, as analyze() itself gives
        }
        t->cost_s = double(time_base::clock_ns(CLOCK_MONOTONIC) - t0) / 1e9;
        // The snapshots go back before the loop sees the result: once it has, it writes to them in place.
        t->snaps.clear();
        t->snaps.shrink_to_fit();
        {
            std::lock_guard<std::mutex> lock(mu_);
            out_ = std::move(t);
        }
        const uint64_t one = 1;
        if (write(wake_fd_, &one, sizeof one) < 0) {
        }
    }
}

}  // namespace ncw::live
