#include "common/cuda_work_queues.h"

#include <cstdlib>

namespace stoker {

std::string UseAllCudaWorkQueues() {
  constexpr char kVariable[] = "CUDA_DEVICE_MAX_CONNECTIONS";
  const char* set = std::getenv(kVariable);
  if (set != nullptr && set[0] != '\0') return set;
  const std::string value = std::to_string(kCudaWorkQueues);
  setenv(kVariable, value.c_str(), /*overwrite=*/1);
  return value;
}

}  // namespace stoker
