// A stand-in probe run that lasts until the test releases it or the service cancels it, for the
// scheduler and API tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>

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

// Polls `done` until it holds or a generous bound passes (sanitizer builds are slow): what a
// test waits for is the event it asserts, never a fixed time.
template <typename Predicate>
bool eventually(Predicate done,
                std::chrono::milliseconds bound = std::chrono::milliseconds(20'000)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace ibprobe::testing
