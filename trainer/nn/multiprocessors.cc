#include "trainer/nn/multiprocessors.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>

namespace stoker::trainer {
namespace {

// Devices beyond this many are asked each time (none of Stoker's hosts has that many).
constexpr int kCachedDevices = 64;

// 0: not read yet. Racing readers store the same value.
std::atomic<int> cached_counts[kCachedDevices];

int ReadMultiprocessors(int device) {
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 0;
  }
  return count;
}

}  // namespace

int CurrentDeviceMultiprocessors() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 1;
  if (device < 0 || device >= kCachedDevices) return std::max(1, ReadMultiprocessors(device));
  int count = cached_counts[device].load(std::memory_order_relaxed);
  if (count == 0) {
    count = ReadMultiprocessors(device);
    if (count <= 0) return 1;
    cached_counts[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

}  // namespace stoker::trainer
