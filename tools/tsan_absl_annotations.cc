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

// The by-value arguments (Duration, Time: 16 and 8 bytes of trivially copyable data) are
// passed through as what they are in the ABI.
struct Duration {
  long rep_hi;
  unsigned rep_lo;
};
struct Time {
  Duration rep;
};

// The definition of `name` that this library's wrapper hides: the next one in the lookup
// order. Each wrapper below passes its own __func__, which is the mangled name it defines.
template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_annotations: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

// Marks an acquire of its object when it goes: after the call it was made before returns.
class AcquireAfter {
 public:
  explicit AcquireAfter(const void* p) : p_(p) {}
  ~AcquireAfter() { Acquire(p_); }

 private:
  const void* p_;
};

// A Mutex call that returns with `mu` held (Lock, LockWhen and their reader and timed forms,
// whatever they return): an acquire after.
template <typename R, typename... Params, typename... Args>
R HeldOnReturn(R (*real)(void*, Params...), void* mu, Args... args) {
  ScopedMutex scoped(mu);
  AcquireAfter acquire(mu);
  return real(mu, args...);
}

// A Mutex call that gives `mu` up while it waits and returns with it held (Await and its timed
// forms): a release before, an acquire after.
template <typename R, typename... Params, typename... Args>
R GivenUpWhileWaiting(R (*real)(void*, Params...), void* mu, Args... args) {
  ScopedMutex scoped(mu);
  Release(mu);
  AcquireAfter acquire(mu);
  return real(mu, args...);
}

// CondVar::Wait and its timed forms on `mu`: a release before, an acquire after.
template <typename R, typename... Params, typename... Args>
R WaitOn(R (*real)(void*, void*, Params...), void* cv, void* mu, Args... args) {
  Release(mu);
  AcquireAfter acquire(mu);
  return real(cv, mu, args...);
}

// TryLock, ReaderTryLock: an acquire after, when `mu` was taken.
bool HeldIfTaken(bool (*real)(void*), void* mu) {
  ScopedMutex scoped(mu);
  const bool taken = real(mu);
  if (taken) Acquire(mu);
  return taken;
}

// Unlock, ReaderUnlock: a release before.
void GivenUp(void (*real)(void*), void* mu) {
  ScopedMutex scoped(mu);
  Release(mu);
  real(mu);
}

// A timed wait for notification `n`: an acquire when it saw the notification.
bool AcquiredIfNotified(bool notified, const void* n) {
  if (notified) Acquire(n);
  return notified;
}

}  // namespace

extern "C" {

// void Mutex::Lock(), ReaderLock(): acquire after.
void _ZN4absl7debian35Mutex4LockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>(__func__);
  HeldOnReturn(real, mu);
}
void _ZN4absl7debian35Mutex10ReaderLockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>(__func__);
  HeldOnReturn(real, mu);
}
// bool TryLock(), ReaderTryLock(): acquire when taken.
bool _ZN4absl7debian35Mutex7TryLockEv(void* mu) {
  static const auto real = Real<bool (*)(void*)>(__func__);
  return HeldIfTaken(real, mu);
}
bool _ZN4absl7debian35Mutex13ReaderTryLockEv(void* mu) {
  static const auto real = Real<bool (*)(void*)>(__func__);
  return HeldIfTaken(real, mu);
}
// void Unlock(), ReaderUnlock(): release before.
void _ZN4absl7debian35Mutex6UnlockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>(__func__);
  GivenUp(real, mu);
}
void _ZN4absl7debian35Mutex12ReaderUnlockEv(void* mu) {
  static const auto real = Real<void (*)(void*)>(__func__);
  GivenUp(real, mu);
}
// LockWhen(const Condition&) and friends: the lock is held on return, whatever they return.
void _ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE(void* mu, const void* c) {
  static const auto real = Real<void (*)(void*, const void*)>(__func__);
  HeldOnReturn(real, mu, c);
}
void _ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE(void* mu, const void* c) {
  static const auto real = Real<void (*)(void*, const void*)>(__func__);
  HeldOnReturn(real, mu, c);
}
bool _ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu,
                                                                                 const void* c,
                                                                                 Duration d) {
  static const auto real = Real<bool (*)(void*, const void*, Duration)>(__func__);
  return HeldOnReturn(real, mu, c, d);
}
bool _ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                              const void* c,
                                                                              Time t) {
  static const auto real = Real<bool (*)(void*, const void*, Time)>(__func__);
  return HeldOnReturn(real, mu, c, t);
}
bool _ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    void* mu, const void* c, Duration d) {
  static const auto real = Real<bool (*)(void*, const void*, Duration)>(__func__);
  return HeldOnReturn(real, mu, c, d);
}
bool _ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu,
                                                                                    const void* c,
                                                                                    Time t) {
  static const auto real = Real<bool (*)(void*, const void*, Time)>(__func__);
  return HeldOnReturn(real, mu, c, t);
}
// Await*: the lock is given up while waiting and taken again.
void _ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(void* mu, const void* c) {
  static const auto real = Real<void (*)(void*, const void*)>(__func__);
  GivenUpWhileWaiting(real, mu, c);
}
bool _ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(void* mu,
                                                                              const void* c,
                                                                              Duration d) {
  static const auto real = Real<bool (*)(void*, const void*, Duration)>(__func__);
  return GivenUpWhileWaiting(real, mu, c, d);
}
bool _ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(void* mu, const void* c,
                                                                           Time t) {
  static const auto real = Real<bool (*)(void*, const void*, Time)>(__func__);
  return GivenUpWhileWaiting(real, mu, c, t);
}
// CondVar::Wait*(Mutex*): the mutex is given up and taken again.
void _ZN4absl7debian37CondVar4WaitEPNS0_5MutexE(void* cv, void* mu) {
  static const auto real = Real<void (*)(void*, void*)>(__func__);
  WaitOn(real, cv, mu);
}
bool _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE(void* cv, void* mu,
                                                                          Duration d) {
  static const auto real = Real<bool (*)(void*, void*, Duration)>(__func__);
  return WaitOn(real, cv, mu, d);
}
bool _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE(void* cv, void* mu, Time t) {
  static const auto real = Real<bool (*)(void*, void*, Time)>(__func__);
  return WaitOn(real, cv, mu, t);
}
// Notification: Notify() releases, a wait that sees it acquires.
void _ZN4absl7debian312Notification6NotifyEv(void* n) {
  static const auto real = Real<void (*)(void*)>(__func__);
  Release(n);
  real(n);
}
void _ZNK4absl7debian312Notification19WaitForNotificationEv(const void* n) {
  static const auto real = Real<void (*)(const void*)>(__func__);
  real(n);
  Acquire(n);
}
bool _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE(const void* n,
                                                                                    Duration d) {
  static const auto real = Real<bool (*)(const void*, Duration)>(__func__);
  return AcquiredIfNotified(real(n, d), n);
}
bool _ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE(const void* n,
                                                                                 Time t) {
  static const auto real = Real<bool (*)(const void*, Time)>(__func__);
  return AcquiredIfNotified(real(n, t), n);
}

// bool Condition::Eval() const: called by the library with the mutex held.
bool _ZNK4absl7debian39Condition4EvalEv(const void* condition) {
  static const auto real = Real<bool (*)(const void*)>(__func__);
  const void* mu = t_mutex;
  if (mu != nullptr) Acquire(mu);
  const bool r = real(condition);
  if (mu != nullptr) Release(mu);
  return r;
}

}  // extern "C"
