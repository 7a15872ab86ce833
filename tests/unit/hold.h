// A stand-in probe run that lasts until the test releases it or the service cancels it, for the
// scheduler and API tests.
#pragma once

#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace ibprobe::testing {

class Hold {
 public:
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  // True once released; false as soon as `stop` is requested.
  bool wait(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    return changed_.wait(lock, stop, [this] { return released_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable_any changed_;
  bool released_ = false;
};

}  // namespace ibprobe::testing
