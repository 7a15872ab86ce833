// A stand-in probe run that lasts until the test releases it or the service cancels it, for the
// scheduler and API tests.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ibprobe::testing {

class Hold {
 public:
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  // True once released; false as soon as `cancel` is set.
  bool wait(const std::atomic<bool>* cancel) {
    std::unique_lock lock(mutex_);
    while (!released_) {
      if (cancel && *cancel) return false;
      changed_.wait_for(lock, std::chrono::milliseconds(2));
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool released_ = false;
};

}  // namespace ibprobe::testing
