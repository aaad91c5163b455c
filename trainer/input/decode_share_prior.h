// The GPU decode share an adapting run held, remembered for the next run of the same
// setting (--gpu_decode_share_prior): a small text file of entries keyed by host, dataset,
// model and batch. Free of libtorch.
//
// Note [The decode share prior]
// The best share depends on the node (its cores, its GPU), the dataset (image sizes), the
// model and the batch, and these rarely change between runs; starting from the share the
// last run held skips the start-up ladder (Note [Adapting the GPU decode share] in
// decode_share_controller.h) and refines around it instead. The file:
//   # stoker gpu decode share priors 1
//   <key>\t<share>\t<images/s>\t<unix seconds when recorded>
// one line per key, the newest write winning. The trainer does not know the dataset's path
// (only its data service does), so a dataset is told apart by its sample count and class
// count; two datasets that agree on both share an entry. A prior is only a start: the
// controller refines from it and moves away when a neighbour pays. A file that does not
// parse is ignored as a whole, and an entry older than kDecodeSharePriorMaxAge (or dated in
// the future) is stale; both are reported so that the caller can log them, and the next
// write replaces a corrupt file. Writes go to a temporary file in the same folder, fsynced
// and renamed over the old one, so that a reader never sees half a file.
#ifndef STOKER_TRAINER_INPUT_DECODE_SHARE_PRIOR_H_
#define STOKER_TRAINER_INPUT_DECODE_SHARE_PRIOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace stoker::trainer {

inline constexpr absl::Duration kDecodeSharePriorMaxAge = absl::Hours(24 * 30);

// What a run's best share depends on.
struct DecodeSharePriorSetting {
  std::string host;
  int64_t dataset_size = 0;  // the training split's samples
  int num_classes = 0;
  std::string model;  // --model: a built-in name or an archive's path
  int batch_size = 0;
  int image_size = 0;
  int world_size = 1;
  bool data_only = false;  // --data_only: no step competes with the decode
};

// One line of text with no tab or newline: "host=... samples=... classes=... model=...".
std::string DecodeSharePriorKey(const DecodeSharePriorSetting& setting);

struct DecodeSharePrior {
  double share = 0.0;
  double images_per_second = 0.0;
  absl::Time recorded;
};

struct DecodeSharePriorLookup {
  std::optional<DecodeSharePrior> prior;  // the entry for the key, if usable
  // Why a file or entry was not used ("... does not parse at line 3"); empty when the file
  // or the key's entry is simply absent, or the prior is usable.
  std::string ignored;
};

// The entry of `key` in the file at `path` as of `now`.
DecodeSharePriorLookup ReadDecodeSharePrior(const std::string& path, absl::string_view key,
                                            absl::Time now);

// Sets `key`'s entry in the file at `path` (creating it and its folder), keeping the
// other entries of a file that parses. Internal naming the path when it cannot be written.
absl::Status WriteDecodeSharePrior(const std::string& path, absl::string_view key,
                                   const DecodeSharePrior& prior);

// --gpu_decode_share_prior: "none" is "" (no file), "auto" the default file under
// `xdg_cache_home` (if set and not empty) or `home`/.cache (stoker/gpu_decode_share_priors.tsv;
// "" when neither is set), anything else a file's path.
std::string DecodeSharePriorPath(absl::string_view flag, const char* xdg_cache_home,
                                 const char* home);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DECODE_SHARE_PRIOR_H_
