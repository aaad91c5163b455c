// WriteBehind: the writer thread of asynchronous checkpoints (--checkpoint_async). Writes
// run on it one at a time while the training thread goes on; the training thread learns of
// a failed write at its next call, so that no error is lost.
#ifndef STOKER_TRAINER_CHECKPOINT_WRITE_BEHIND_H_
#define STOKER_TRAINER_CHECKPOINT_WRITE_BEHIND_H_

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace stoker::trainer {

// Runs writes on its writer thread, at most one in flight: a write handed over while
// another is in flight waits for it to end. The first write that fails is sticky: every
// later Start, Wait and error() returns its error, and nothing more is written. The
// destructor waits for the write in flight, then joins the thread.
//
// Thread-safe; the writes run on the writer thread and must not call back into it.
//
//   WriteBehind writes;
//   ASSIGN_OR_RETURN(absl::Duration waited, writes.Start([file] { return Write(file); }));
//   RETURN_IF_ERROR(writes.error());  // at each step boundary
//   RETURN_IF_ERROR(writes.Wait());   // before the run ends
class WriteBehind {
 public:
  using Write = absl::AnyInvocable<absl::Status() &&>;

  WriteBehind();
  ~WriteBehind();
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // Waits until no write is in flight, then hands `write` to the writer thread and
  // returns how long it waited (zero when none was in flight). The error of an earlier
  // write instead, and `write` is dropped unrun.
  absl::StatusOr<absl::Duration> Start(Write write) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until no write is in flight. The first error of any write, OK if none failed.
  absl::Status Wait() ABSL_LOCKS_EXCLUDED(mu_);

  // Without waiting: the first error of a write that has ended, OK if none.
  absl::Status error() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a write is in flight (handed over and not ended).
  bool busy() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WriterLoop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  Write next_ ABSL_GUARDED_BY(mu_);         // handed over, not yet taken by the writer
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a write handed over and not ended
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // the first write's that failed
  std::thread writer_;                       // last: it reads the members above
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_CHECKPOINT_WRITE_BEHIND_H_
