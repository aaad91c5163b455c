// Pinning the data ring and the locked-memory limit (Note [Pinning and the locked-memory
// limit] in trainer/input/cuda_batch_feeder.cc): cudaHostRegister pins a /dev/shm segment like
// the ring even with RLIMIT_MEMLOCK at 0 and without CAP_IPC_LOCK, where mlock() of a
// single page is refused; and a copy from the pinned range reaches the GPU. Needs a GPU.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

// Drops CAP_IPC_LOCK from the effective set: root (as in CI) would bypass the limit.
bool DropIpcLock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  return syscall(SYS_capset, &header, data) == 0;
}

TEST(PinningMemlockTest, TheRingIsPinnedUnderAZeroLockedMemoryLimitWithoutCapIpcLock) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "needs a GPU";
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(DropIpcLock()) << std::strerror(errno);
  const rlimit zero{0, 0};
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &zero), 0) << std::strerror(errno);
  std::vector<char> page(8192);
  ASSERT_NE(mlock(page.data(), 4096), 0) << "RLIMIT_MEMLOCK=0 is not in force";

  // A 256 MiB segment in /dev/shm, written through, as the data service makes a ring.
  const size_t bytes = size_t{256} << 20;
  const std::string name = "/stoker.pinning_memlock_test." + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  shm_unlink(name.c_str());
  ASSERT_EQ(posix_fallocate(fd, 0, static_cast<off_t>(bytes)), 0);
  void* ring = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(ring, MAP_FAILED);
  std::memset(ring, 7, bytes);

  const cudaError_t registered = cudaHostRegister(ring, bytes, cudaHostRegisterDefault);
  EXPECT_EQ(registered, cudaSuccess) << cudaGetErrorString(registered);
  if (registered == cudaSuccess) {
    void* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, 1 << 20), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(device, ring, 1 << 20, cudaMemcpyHostToDevice, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<char> back(1 << 20);
    EXPECT_EQ(cudaMemcpy(back.data(), device, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back[12345], 7);
    cudaStreamDestroy(stream);
    cudaFree(device);
    EXPECT_EQ(cudaHostUnregister(ring), cudaSuccess);
  }
  munmap(ring, bytes);
}

}  // namespace
}  // namespace stoker::trainer
