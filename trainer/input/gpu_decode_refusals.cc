#include "trainer/input/gpu_decode_refusals.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<std::vector<SampleReplacement>> RouteRefusedSamples(
    const data_service::BatchView& batch, absl::Span<const RefusedJpeg> refused,
    const BadSampleReport& report) {
  std::vector<SampleReplacement> replacements;
  if (refused.empty()) return replacements;
  if (batch.sample_indices == nullptr) {
    return absl::InvalidArgumentError(
        "a batch without sample indices: its refused samples "
        "cannot be reported");
  }
  int32_t previous = -1;
  for (const RefusedJpeg& r : refused) {
    if (r.position <= previous || r.position >= batch.count) {
      return absl::InvalidArgumentError(absl::StrCat("refused position ", r.position,
                                                     " in a batch of ", batch.count,
                                                     " (positions must increase)"));
    }
    previous = r.position;
  }
  for (const RefusedJpeg& r : refused) {
    absl::StatusOr<std::string> counted = report(batch.sample_indices[r.position], r.why);
    if (!counted.ok()) return counted.status();
  }
  if (static_cast<int32_t>(refused.size()) == batch.count) {
    return absl::DataLossError(
        absl::StrCat("epoch ", batch.epoch, ", step ", batch.step,
                     ": the GPU decoder refused every one of the ", batch.count,
                     " samples of the batch (deferred JPEGs), so none can replace another; the "
                     "data service's log names their files"));
  }
  std::vector<bool> bad(static_cast<size_t>(batch.count), false);
  for (const RefusedJpeg& r : refused) bad[r.position] = true;
  for (const RefusedJpeg& r : refused) {
    int32_t with = (r.position + 1) % batch.count;
    while (bad[with]) with = (with + 1) % batch.count;
    replacements.push_back(SampleReplacement{r.position, with});
  }
  return replacements;
}

}  // namespace stoker::trainer
