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

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "trainer/input/batch_feeder.h"

namespace stoker::trainer {

// One feeder as the suite drives it. Called from the test's thread.
class FeederConformanceTarget {
 public:
  virtual ~FeederConformanceTarget() = default;

  // Non-empty when this machine cannot run the feeder ("needs a GPU"): the test is
  // skipped, saying so.
  virtual std::string MissingHardware() const { return ""; }
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

// An instantiation: its name, and how to make its target (once per test).
struct FeederConformanceParam {
  std::string name;
  std::function<std::unique_ptr<FeederConformanceTarget>()> make;
};

void PrintTo(const FeederConformanceParam& param, std::ostream* os);
// The name generator for INSTANTIATE_TEST_SUITE_P: the param's name.
std::string FeederConformanceParamName(
    const ::testing::TestParamInfo<FeederConformanceParam>& info);

class FeederConformanceTest : public ::testing::TestWithParam<FeederConformanceParam> {
 protected:
  void SetUp() override;
  FeederConformanceTarget& target() { return *target_; }

 private:
  std::unique_ptr<FeederConformanceTarget> target_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_FEEDER_CONFORMANCE_H_
