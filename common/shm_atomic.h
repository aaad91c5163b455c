// Atomic access to integer fields of structs that live in shared memory.
//
// Note [Atomics in shared memory]
// A struct shared between processes stays trivially copyable, with its size asserted and
// a version field (STYLE.md), so its atomic fields are plain integers, not std::atomic<T>
// members (which are not trivially copyable and make layout a library detail). They are
// read and written only through the functions here, which are the GCC/Clang __atomic
// builtins on the field itself: what std::atomic_ref<T> does in C++20. Only lock-free
// widths are allowed, since a lock would be private to one process. A field accessed this
// way says so in its struct's comment; such a field may also be a futex word.
#ifndef STOKER_COMMON_SHM_ATOMIC_H_
#define STOKER_COMMON_SHM_ATOMIC_H_

#include <type_traits>

namespace stoker {

template <typename T>
inline constexpr bool kIsSharedMemoryAtomic =
    std::is_integral_v<T>&& __atomic_always_lock_free(sizeof(T), 0);

// Reads `*word` with acquire ordering: everything written before the matching
// StoreRelease, in any process, is visible after it.
template <typename T>
T LoadAcquire(const T* word) {
  static_assert(kIsSharedMemoryAtomic<T>,
                "a lock-free integer: see Note [Atomics in shared memory]");
  return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

// Writes `value` to `*word` with release ordering.
template <typename T>
void StoreRelease(T* word, typename std::remove_cv<T>::type value) {
  static_assert(kIsSharedMemoryAtomic<T>,
                "a lock-free integer: see Note [Atomics in shared memory]");
  __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

}  // namespace stoker

#endif  // STOKER_COMMON_SHM_ATOMIC_H_
