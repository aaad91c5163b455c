// Test support for storage faults: a size-limited tmpfs mounted over a directory (a
// checkpoint folder, /dev/shm) in a mount namespace private to the test process, so that
// "the disk is full" and "/dev/shm is too small" are real ENOSPC from the kernel rather
// than an injected error. Only tests link this.
#ifndef STOKER_COMMON_TEST_TMPFS_H_
#define STOKER_COMMON_TEST_TMPFS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace stoker {

// Moves the calling process into a mount namespace of its own (unshare(CLONE_NEWNS) when
// it has CAP_SYS_ADMIN, as root in CI; else a user namespace that maps the caller to
// root), marks every mount private so that nothing propagates back to the host, and
// mounts a tmpfs of `bytes` over `directory` (which must exist). The mount lives as long
// as the process. Call it while the process has one thread (a user namespace requires
// it), before anything else in the test starts threads. Unavailable, with the reasons of
// both attempts, where neither is allowed (a locked-down container).
absl::Status MountPrivateTmpfs(const std::string& directory, size_t bytes);

}  // namespace stoker

#endif  // STOKER_COMMON_TEST_TMPFS_H_
