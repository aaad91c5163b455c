#include "trainer/comm/collective_ledger.h"

#include <time.h>

namespace stoker::trainer {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kNone:
      return "none";
    case CollectiveKind::kAllReduce:
      return "allreduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
  }
  return "unknown";
}

int64_t MonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

uint64_t CollectiveLedger::Issue(CollectiveKind kind) {
  const int64_t now = MonotonicNanos();
  absl::MutexLock lock(&mu_);
  const uint64_t seq = ++issued_;
  issued_kind_ = kind;
  issued_at_ns_ = now;
  pending_.push_back(Pending{seq, kind, now});
  Publish();
  return seq;
}

void CollectiveLedger::Complete(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  if (seq <= completed_ || seq > issued_) return;
  while (!pending_.empty() && pending_.front().seq <= seq) {
    completed_kind_ = pending_.front().kind;
    pending_.pop_front();
  }
  completed_ = seq;
  Publish();
}

CollectiveLedger::Snapshot CollectiveLedger::Read() const {
  absl::MutexLock lock(&mu_);
  Snapshot snapshot;
  snapshot.issued = issued_;
  snapshot.completed = completed_;
  snapshot.completed_kind = completed_kind_;
  if (!pending_.empty()) {
    snapshot.pending = pending_.front().seq;
    snapshot.pending_kind = pending_.front().kind;
    snapshot.pending_since_ns = pending_.front().issued_at_ns;
  }
  return snapshot;
}

void CollectiveLedger::MirrorTo(ChannelProgress* mirror) {
  absl::MutexLock lock(&mu_);
  mirror_ = mirror;
  if (mirror_ != nullptr) Publish();
}

void CollectiveLedger::Publish() {
  if (mirror_ == nullptr) return;
  // Kinds and times first, counters last: a reader that sees a counter sees its kind.
  StoreRelease(&mirror_->issued_kind, static_cast<uint32_t>(issued_kind_));
  StoreRelease(&mirror_->issued_at_ns, issued_at_ns_);
  StoreRelease(&mirror_->completed_kind, static_cast<uint32_t>(completed_kind_));
  StoreRelease(&mirror_->issued, issued_);
  StoreRelease(&mirror_->completed, completed_);
}

}  // namespace stoker::trainer
