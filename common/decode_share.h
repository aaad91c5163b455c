// The grammar of --gpu_decode_share, which the trainer and data_service both take: `auto`
// or a number in [0, 1], the share of each batch whose baseline JPEGs the trainer's GPU
// decodes (Note [Deferred samples] in data_service/image/deferred_jpeg.h). What `auto`
// means is each program's own (its --help says).
#ifndef STOKER_COMMON_DECODE_SHARE_H_
#define STOKER_COMMON_DECODE_SHARE_H_

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker {

// `value` as --gpu_decode_share: nullopt for "auto", else the share in [0, 1] ("-0" is
// zero). InvalidArgument `--gpu_decode_share=<value>: must be auto or a number in [0, 1]`
// for anything else, including an empty value, NaN and trailing text.
absl::StatusOr<std::optional<double>> ParseGpuDecodeShare(absl::string_view value);

}  // namespace stoker

#endif  // STOKER_COMMON_DECODE_SHARE_H_
