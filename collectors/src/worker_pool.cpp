#include "worker_pool.h"

#include <atomic>

namespace ibprobe::collectors {

struct WorkerPool::Batch {
  const std::function<void(std::size_t)>& job;
  const std::size_t count;
  std::atomic<std::size_t> next = 0;
  std::size_t participants = 0;  // pool threads inside drain(); guarded by mutex_
};

WorkerPool::WorkerPool(std::size_t threads) {
  threads_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  threads_.clear();
}

void WorkerPool::drain(Batch& batch) {
  for (std::size_t i; (i = batch.next.fetch_add(1)) < batch.count;) batch.job(i);
}

void WorkerPool::work() {
  std::uint64_t seen = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    Batch* batch = batch_;
    if (!batch) continue;
    ++batch->participants;
    lock.unlock();
    drain(*batch);
    lock.lock();
    if (--batch->participants == 0) finished_.notify_all();
  }
}

void WorkerPool::run(std::size_t count, const std::function<void(std::size_t)>& job) {
  std::unique_lock busy(run_mutex_, std::try_to_lock);
  if (threads_.empty() || count <= 1 || !busy) {
    for (std::size_t i = 0; i < count; ++i) job(i);
    return;
  }
  Batch batch{job, count};
  {
    std::lock_guard lock(mutex_);
    batch_ = &batch;
    ++generation_;
  }
  wake_.notify_all();
  drain(batch);
  // Every job has started once next passed count; wait for the threads still running one.
  std::unique_lock lock(mutex_);
  batch_ = nullptr;
  finished_.wait(lock, [&] { return batch.participants == 0; });
}

}  // namespace ibprobe::collectors
