// Threads that live as long as their owner, so that running work in parallel creates none.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ibprobe::collectors {

class WorkerPool {
 public:
  explicit WorkerPool(std::size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Calls job(0) ... job(count - 1), in index order of start, on the pool's threads and the
  // caller's, and returns when all have returned. One batch runs at a time: a caller that finds
  // the pool busy (overlapping scrapes) runs its jobs itself.
  void run(std::size_t count, const std::function<void(std::size_t)>& job);

 private:
  struct Batch;
  void work();
  static void drain(Batch& batch);

  std::mutex run_mutex_;  // held by the caller whose batch the pool runs
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  Batch* batch_ = nullptr;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::jthread> threads_;
};

}  // namespace ibprobe::collectors
