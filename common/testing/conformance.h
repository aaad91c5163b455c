// The frame of a conformance suite: one set of tests of an interface that every
// implementation passes (TensorStore's driver suites). An implementation takes part through
// a target, which the suite's tests drive and which derives from ConformanceTarget, and one
// INSTANTIATE_TEST_SUITE_P whose ConformanceParam names it and makes its target. Only tests
// link this.
//
//   class FeederConformanceTarget : public ConformanceTarget { ... };
//   using FeederConformanceTest = ConformanceTest<FeederConformanceTarget>;
//   TEST_P(FeederConformanceTest, HandsOutEveryBatch) { ... target() ... }
#ifndef STOKER_COMMON_TESTING_CONFORMANCE_H_
#define STOKER_COMMON_TESTING_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "gtest/gtest.h"

namespace stoker::testing {

// The part every target shares. Called from the test's thread.
class ConformanceTarget {
 public:
  virtual ~ConformanceTarget() = default;

  // Non-empty when this machine cannot run the implementation ("needs a GPU"): the suite's
  // tests are skipped, saying so.
  virtual std::string MissingHardware() const { return ""; }
};

// An instantiation: its name, and how to make its target (once per test).
template <typename Target>
struct ConformanceParam {
  std::string name;
  std::function<std::unique_ptr<Target>()> make;
};

template <typename Target>
void PrintTo(const ConformanceParam<Target>& param, std::ostream* os) {
  *os << param.name;
}

// The name generator for INSTANTIATE_TEST_SUITE_P: the param's name.
template <typename Target>
std::string ConformanceParamName(const ::testing::TestParamInfo<ConformanceParam<Target>>& info) {
  return info.param.name;
}

// The params of an instantiation for one implementation: one, named `name`, whose target
// is a default-constructed `Implementation` (a class derived from `Target`). In the macro,
// the call goes in parentheses, for the comma between the template arguments:
//
//   INSTANTIATE_TEST_SUITE_P(Cpu, FeederConformanceTest,
//                            (OnlyTarget<FeederConformanceTarget, CpuTarget>("cpu")),
//                            ConformanceParamName<FeederConformanceTarget>);
template <typename Target, typename Implementation>
auto OnlyTarget(const std::string& name) {
  return ::testing::Values(
      ConformanceParam<Target>{name, [] { return std::make_unique<Implementation>(); }});
}

// The suite's fixture: makes the param's target before each test, and skips the test when
// the target's hardware is missing.
template <typename Target>
class ConformanceTest : public ::testing::TestWithParam<ConformanceParam<Target>> {
 protected:
  void SetUp() override {
    target_ = this->GetParam().make();
    ASSERT_NE(target_, nullptr);
    if (const std::string missing = target_->MissingHardware(); !missing.empty()) {
      GTEST_SKIP() << missing;
    }
  }
  Target& target() { return *target_; }

 private:
  std::unique_ptr<Target> target_;
};

}  // namespace stoker::testing

#endif  // STOKER_COMMON_TESTING_CONFORMANCE_H_
