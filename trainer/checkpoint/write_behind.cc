#include "trainer/checkpoint/write_behind.h"

#include <utility>

namespace stoker::trainer {
namespace {

bool IsIdle(bool* busy) { return !*busy; }

}  // namespace

WriteBehind::WriteBehind() : writer_([this] { WriterLoop(); }) {}

WriteBehind::~WriteBehind() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
}

absl::StatusOr<absl::Duration> WriteBehind::Start(Write write) {
  absl::MutexLock lock(&mu_);
  const bool was_busy = busy_;
  const absl::Time start = absl::Now();
  mu_.Await(absl::Condition(IsIdle, &busy_));
  const absl::Duration waited = was_busy ? absl::Now() - start : absl::ZeroDuration();
  if (!error_.ok()) return error_;
  next_ = std::move(write);
  busy_ = true;
  return waited;
}

absl::Status WriteBehind::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(IsIdle, &busy_));
  return error_;
}

absl::Status WriteBehind::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

bool WriteBehind::busy() const {
  absl::MutexLock lock(&mu_);
  return busy_;
}

void WriteBehind::WriterLoop() {
  while (true) {
    Write write;
    {
      absl::MutexLock lock(&mu_);
      // On stopping, the write handed over is still run: the destructor waits for it.
      mu_.Await(absl::Condition(
          +[](WriteBehind* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->stopping_ || w->next_ != nullptr;
          },
          this));
      if (next_ == nullptr) return;
      write = std::move(next_);
      next_ = nullptr;
    }
    absl::Status status = std::move(write)();
    write = nullptr;  // what it held (a snapshot) is released before the next write starts
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = std::move(status);
    busy_ = false;
  }
}

}  // namespace stoker::trainer
