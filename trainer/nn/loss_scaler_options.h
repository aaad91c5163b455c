// The loss scaler's options (torch.amp.GradScaler's parameters) and their check. Free of
// libtorch, so that the trainer's flags build quickly.
#ifndef STOKER_TRAINER_NN_LOSS_SCALER_OPTIONS_H_
#define STOKER_TRAINER_NN_LOSS_SCALER_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace stoker::trainer {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2**16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;
  bool enabled = true;  // fp16 only: the trainer decides from the precision

  // InvalidArgument naming the flag at fault (`--init_scale=0: must be > 0`).
  absl::Status Validate() const;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_LOSS_SCALER_OPTIONS_H_
