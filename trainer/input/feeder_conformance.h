// The conformance suite of the BatchFeeder interface (trainer/input/batch_feeder.h) for the
// feeders that take a data-service ring: one set of tests that every such feeder passes,
// run against the CPU feeder (batch_feeder_test) and the CUDA feeder (cuda_batch_feeder_test,
// on a GPU). Each feeds from a FakeBatchSource, whose batches' contents are known and whose
// slots are poisoned the moment they are released. A feeder takes part through a
// FeederConformanceTarget and one INSTANTIATE_TEST_SUITE_P:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Cpu, FeederConformanceTest,
//       ::testing::Values(FeederConformanceParam{"cpu", [] { return std::make_unique<CpuTarget>();
//       }}), FeederConformanceParamName);
//
// The test binary links //trainer/input:feeder_conformance (which holds the tests).
#ifndef STOKER_TRAINER_INPUT_FEEDER_CONFORMANCE_H_
#define STOKER_TRAINER_INPUT_FEEDER_CONFORMANCE_H_

#include <c10/core/Device.h>

#include <memory>

#include "absl/status/statusor.h"
#include "common/testing/conformance.h"
#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

// One feeder as the suite drives it. Called from the test's thread.
class FeederConformanceTarget : public ::stoker::testing::ConformanceTarget {
 public:
  // A feeder over `source` (which outlives it).
  virtual absl::StatusOr<std::unique_ptr<BatchFeeder>> Make(BatchSource* source,
                                                            const FeederOptions& options) = 0;
  // Where the batches' tensors live.
  virtual c10::Device device() const = 0;
  // Whether batches with deferred samples are decoded (else Next() refuses them with
  // FailedPrecondition naming --gpu_decode_share, and gives their slot back).
  virtual bool decodes_deferred_samples() const = 0;
  // Whether TrainingBatch::gpu_input_wait is measured (else it stays absent).
  virtual bool measures_gpu_input_wait() const = 0;
};

using FeederConformanceParam = ::stoker::testing::ConformanceParam<FeederConformanceTarget>;
using FeederConformanceTest = ::stoker::testing::ConformanceTest<FeederConformanceTarget>;
inline constexpr auto FeederConformanceParamName =
    &::stoker::testing::ConformanceParamName<FeederConformanceTarget>;

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_FEEDER_CONFORMANCE_H_
