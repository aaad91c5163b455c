// Where a rank's batches come from and what they look like: the data service's socket and
// ring, the batch and image size, the split, the normalisation, or synthetic batches made
// on the device (the GPU-bound ceiling). With its check. Free of libtorch.
#ifndef STOKER_TRAINER_INPUT_INPUT_OPTIONS_H_
#define STOKER_TRAINER_INPUT_INPUT_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace stoker::trainer {

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

  // InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_INPUT_OPTIONS_H_
