// Tells ThreadSanitizer about Abseil's synchronisation when Abseil itself is not built with
// -fsanitize=thread (Debian's libabsl_synchronization.so is not). Without this, TSan sees
// none of the happens-before edges that absl::Mutex, CondVar and Notification create inside
// that library, and reports every access guarded by them as a race. Preloaded into the
// tests by tools/sanitizers.sh (LD_PRELOAD), never linked into Stoker: each wrapper calls
// the real function (dlsym RTLD_NEXT) and marks a release on the object before anything
// that gives it up (unlock, wait, notify) and an acquire after anything that takes it (lock,
// return from a wait). Reader locks are treated like writer locks, which can only hide
// reader-reader "races", which are none.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

extern "C" void __tsan_acquire(void* addr) __attribute__((weak));
extern "C" void __tsan_release(void* addr) __attribute__((weak));

namespace {

void Acquire(const void* p) {
  if (__tsan_acquire != nullptr) __tsan_acquire(const_cast<void*>(p));
}
void Release(const void* p) {
  if (__tsan_release != nullptr) __tsan_release(const_cast<void*>(p));
}

// Conditions are evaluated inside the library by whichever thread holds the mutex at the
// time: a waiter in Await/LockWhen, or an unlocking thread on behalf of its waiters. The
// wrappers note which mutex this thread is working on, and the Condition::Eval wrapper
// makes the evaluation an acquire and a release of that mutex.
thread_local const void* t_mutex = nullptr;

class ScopedMutex {
 public:
  explicit ScopedMutex(const void* mu) : saved_(t_mutex) { t_mutex = mu; }
  ~ScopedMutex() { t_mutex = saved_; }

 private:
  const void* saved_;
};

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_annotations: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

// The by-value arguments (Duration, Time: 16 and 8 bytes of trivially copyable data) are
// passed through as what they are in the ABI.
struct Duration {
  long rep_hi;
  unsigned rep_lo;
};
struct Time {
  Duration rep;
};

}  // namespace

extern "C" {

// void Mutex::Lock(), ReaderLock(): acquire after.
void _ZN4absl7debian35Mutex4LockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>("_ZN4absl7debian35Mutex4LockEv");
  ScopedMutex scoped(mu);
  real(mu);
  Acquire(mu);
}
void _ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>("_ZN4absl7debian35Mutex10ReaderLockEv");
  ScopedMutex scoped(mu);
  real(mu);
  Acquire(mu);
}
// bool TryLock(), ReaderTryLock(): acquire when taken.
bool _ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  static const auto real = Real<bool (*)(void*)>("_ZN4absl7debian35Mutex7TryLockEv");
  ScopedMutex scoped(mu);
  const bool taken = real(mu);
  if (taken) Acquire(mu);
  return taken;
}
bool _ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu) {
  static const auto real = Real<bool (*)(void*)>("_ZN4absl7debian35Mutex13ReaderTryLockEv");
  ScopedMutex scoped(mu);
  const bool taken = real(mu);
  if (taken) Acquire(mu);
  return taken;
}
// void Unlock(), ReaderUnlock(): release before.
void _ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>("_ZN4absl7debian35Mutex6UnlockEv");
  ScopedMutex scoped(mu);
  Release(mu);
  real(mu);
}
void _ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>("_ZN4absl7debian35Mutex12ReaderUnlockEv");
  ScopedMutex scoped(mu);
  Release(mu);
  real(mu);
}
// LockWhen(const Condition&) and friends: the lock is held on return, whatever they return.
void _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(void* mu, const void* c) {
  static const auto real =
      Real<void (*)(void*, const void*)>("_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  ScopedMutex scoped(mu);
  real(mu, c);
  Acquire(mu);
}
void _ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(void* mu, const void* c) {
  static const auto real = Real<void (*)(void*, const void*)>(
      "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  ScopedMutex scoped(mu);
  real(mu, c);
  Acquire(mu);
}
bool _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu,
                                                                                 const void* c,
                                                                                 Duration d) {
  static const auto real = Real<bool (*)(void*, const void*, Duration)>(
      "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  ScopedMutex scoped(mu);
  const bool r = real(mu, c, d);
  Acquire(mu);
  return r;
}
bool _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                              const void* c,
                                                                              Time t) {
  static const auto real = Real<bool (*)(void*, const void*, Time)>(
      "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  ScopedMutex scoped(mu);
  const bool r = real(mu, c, t);
  Acquire(mu);
  return r;
}
bool _ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    void* mu, const void* c, Duration d) {
  static const auto real = Real<bool (*)(void*, const void*, Duration)>(
      "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  ScopedMutex scoped(mu);
  const bool r = real(mu, c, d);
  Acquire(mu);
  return r;
}
bool _ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                                    const void* c,
                                                                                    Time t) {
  static const auto real = Real<bool (*)(void*, const void*, Time)>(
      "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  ScopedMutex scoped(mu);
  const bool r = real(mu, c, t);
  Acquire(mu);
  return r;
}
// Await*: the lock is given up while waiting and taken again.
void _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(void* mu, const void* c) {
  static const auto real =
      Real<void (*)(void*, const void*)>("_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  ScopedMutex scoped(mu);
  Release(mu);
  real(mu, c);
  Acquire(mu);
}
bool _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu,
                                                                              const void* c,
                                                                              Duration d) {
  static const auto real = Real<bool (*)(void*, const void*, Duration)>(
      "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  ScopedMutex scoped(mu);
  Release(mu);
  const bool r = real(mu, c, d);
  Acquire(mu);
  return r;
}
bool _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu, const void* c,
                                                                           Time t) {
  static const auto real = Real<bool (*)(void*, const void*, Time)>(
      "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  ScopedMutex scoped(mu);
  Release(mu);
  const bool r = real(mu, c, t);
  Acquire(mu);
  return r;
}
// CondVar::Wait*(Mutex*): the mutex is given up and taken again.
void _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  static const auto real =
      Real<void (*)(void*, void*)>("_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(cv, mu);
  Acquire(mu);
}
bool _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu,
                                                                          Duration d) {
  static const auto real = Real<bool (*)(void*, void*, Duration)>(
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool r = real(cv, mu, d);
  Acquire(mu);
  return r;
}
bool _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(void* cv, void* mu, Time t) {
  static const auto real = Real<bool (*)(void*, void*, Time)>(
      "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool r = real(cv, mu, t);
  Acquire(mu);
  return r;
}
// Notification: Notify() releases, a wait that sees it acquires.
void _ZN4absl7debian312Notification6NotifyEv(void* n) {
  static const auto real = Real<void (*)(void*)>("_ZN4absl7debian312Notification6NotifyEv");
  Release(n);
  real(n);
}
void _ZNK4absl7debian312Notification19WaitForNotificationEv(const void* n) {
  static const auto real =
      Real<void (*)(const void*)>("_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(n);
  Acquire(n);
}
bool _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(const void* n,
                                                                                    Duration d) {
  static const auto real = Real<bool (*)(const void*, Duration)>(
      "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool r = real(n, d);
  if (r) Acquire(n);
  return r;
}
bool _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(const void* n,
                                                                                 Time t) {
  static const auto real = Real<bool (*)(const void*, Time)>(
      "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool r = real(n, t);
  if (r) Acquire(n);
  return r;
}

// bool Condition::Eval() const: called by the library with the mutex held.
bool _ZNK4absl7debian39Condition4EvalEv(const void* condition) {
  static const auto real = Real<bool (*)(const void*)>("_ZNK4absl7debian39Condition4EvalEv");
  const void* mu = t_mutex;
  if (mu != nullptr) Acquire(mu);
  const bool r = real(condition);
  if (mu != nullptr) Release(mu);
  return r;
}

}  // extern "C"
