// Where a rank's batches come from and what they look like: the data service's socket and
// ring, the batch and image size, the split, the normalisation, or synthetic batches made
// on the device (the GPU-bound ceiling). With its check. Free of libtorch.
#ifndef STOKER_TRAINER_INPUT_INPUT_OPTIONS_H_
#define STOKER_TRAINER_INPUT_INPUT_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace stoker::trainer {

// --gpu_decode_arena_mib's default and bounds: data_service::kDefaultGpuDecodeArenaBytes,
// and at least a 4096 x 4096 JPEG (48 MiB decoded), the largest the service defers.
inline constexpr int kDefaultGpuDecodeArenaMib = 256;
inline constexpr int kMinGpuDecodeArenaMib = 48;
inline constexpr int kMaxGpuDecodeArenaMib = 1 << 20;

struct InputOptions {
  std::string data_socket;  // the node's data service; empty with synthetic_steps
  int batch_size = 32;      // per rank and micro-batch
  int image_size = 32;
  int ring_slots = 4;
  bool train_split = true;  // the training split with augmentation, or the validation split
  // Skip the short last batch of an epoch (DataLoader's drop_last): every step then has
  // the same shape, which cudnn.benchmark needs to tune once and not at each epoch's end.
  bool drop_last_batch = true;
  absl::Duration data_timeout = absl::Seconds(120);  // for one batch to arrive
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float stddev[3] = {0.229f, 0.224f, 0.225f};
  // Benchmarking: one batch made on the device and reused for this many steps per epoch,
  // no data service. 0: off.
  int synthetic_steps = 0;
  // --gpu_decode_share: the share of each batch whose JPEGs this rank decodes on its GPU
  // (Note [Deferred samples] in data_service/image/deferred_jpeg.h), in [0, 1]; nullopt
  // is auto (PlanGpuDecodeShare).
  std::optional<double> gpu_decode_share;
  // --gpu_decode_arena_mib: the bound on the GPU memory the JPEG decoder holds for a batch's
  // full-size images (Note [The GPU decode arena] in data_service/image/deferred_jpeg.h).
  int gpu_decode_arena_mib = kDefaultGpuDecodeArenaMib;
  // --gpu_decode_share_prior: auto, none or a file's path (decode_share_prior.h).
  std::string gpu_decode_share_prior = "auto";
  // --log_decode_share_windows: rank 0 logs each window the adapting share measures.
  bool log_decode_share_windows = false;

  // InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
};

// --gpu_decode_arena_mib in bytes.
inline uint64_t GpuDecodeArenaBytes(const InputOptions& options) {
  return static_cast<uint64_t>(options.gpu_decode_arena_mib) << 20;
}

// What `auto` resolves to where the share does not adapt: under --deterministic (which
// samples the GPU decodes depends on the share, so an adapting share would change the
// bits between runs) and on the validation ring. The best share measured for ResNet-18
// from JPEG on one H200 (docs/INPUT_SPEED.md).
inline constexpr double kAutoFixedGpuDecodeShare = 0.375;

// How one ring's GPU decode share is chosen: the share asked for from its first batch, and
// whether a DecodeShareController adapts it from there.
struct GpuDecodeSharePlan {
  double initial = 0.0;
  bool adaptive = false;
  // adaptive: a remembered best share the first windows start from (decode_share_prior.h);
  // `initial` is then the same share.
  std::optional<double> prior;
};

// --gpu_decode_share for a ring of a rank that trains on a CUDA device (`cuda`) or the CPU:
//   auto, CPU:                           0 (the CPU trainer refuses deferred samples)
//   auto, CUDA, training ring:           adaptive from 0; kAutoFixedGpuDecodeShare with
//                                        `deterministic`
//   auto, CUDA, validation ring:         kAutoFixedGpuDecodeShare
//   F:                                   F, fixed (F > 0 on the CPU: InvalidArgument,
//                                        naming the flag)
absl::StatusOr<GpuDecodeSharePlan> PlanGpuDecodeShare(const std::optional<double>& flag, bool cuda,
                                                      bool deterministic, bool training_ring);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_INPUT_OPTIONS_H_
