// Tests that LossScaler reproduces torch.amp.GradScaler(device="cpu") step for step (scale,
// growth tracker, skipped steps, unscaled gradients, parameters) over a gradient sequence
// with injected inf and NaN, and that it enforces GradScaler's call order.
#include "trainer/nn/loss_scaler.h"

#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/testing/python_runner.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

// The gradient sequence both sides run: loss = sum(p0*g0) + sum(p1*g1) + sum(p2*g2) with
// float32 p0 [3], p1 [2, 2] and bfloat16 p2 [2]; g0[1] = inf at `inf_steps`, g1[2] = NaN at
// `nan_steps`, g2[0] = -inf at `neg_inf_steps`; SGD with lr 0.5.
struct Schedule {
  LossScalerOptions options;
  int steps;
  std::set<int> inf_steps, nan_steps, neg_inf_steps;
};

// The same program in Python (sys.argv: init_scale growth backoff interval steps, then the
// three step lists as comma-separated strings). One line per step: step, skipped, scale,
// growth tracker, the unscaled gradients, the updated parameters (floats in hex).
constexpr char kGradScalerScript[] = R"py(
import sys, torch
init_scale, growth, backoff = map(float, sys.argv[1:4])
interval, steps = int(sys.argv[4]), int(sys.argv[5])
inf_steps, nan_steps, neg_inf_steps = ({int(s) for s in a.split(",") if s} for a in sys.argv[6:9])
p0 = torch.tensor([0.5, -1.0, 1.5], requires_grad=True)
p1 = torch.tensor([[0.25, 0.5], [0.75, 1.0]], requires_grad=True)
p2 = torch.tensor([1.0, -1.0], dtype=torch.bfloat16, requires_grad=True)
params = [p0, p1, p2]
class RecordingSGD(torch.optim.SGD):
    def step(self, *args, **kwargs):
        self.stepped = True
        return super().step(*args, **kwargs)
opt = RecordingSGD(params, lr=0.5)
scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth,
                              backoff_factor=backoff, growth_interval=interval)
def hexes(tensors):
    return [float(v).hex() for t in tensors for v in t.detach().flatten().tolist()]
for t in range(steps):
    g0 = torch.tensor([(t % 5 + 1) * 0.125 * (j + 1) * (-1) ** j for j in range(3)])
    g1 = torch.tensor([(t % 3 + 1) * 0.5 * (j + 1) for j in range(4)]).reshape(2, 2)
    g2 = torch.tensor([(t % 4 + 1) * 0.25 * (j + 1) for j in range(2)], dtype=torch.bfloat16)
    if t in inf_steps: g0[1] = float("inf")
    if t in nan_steps: g1.view(-1)[2] = float("nan")
    if t in neg_inf_steps: g2[0] = float("-inf")
    opt.zero_grad(set_to_none=True)
    opt.stepped = False
    loss = (p0 * g0).sum() + (p1 * g1).sum() + (p2 * g2).sum()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    grads = hexes([p.grad for p in params])
    scaler.step(opt)
    scaler.update()
    print(t, int(not opt.stepped), scaler.get_scale().hex(), scaler._get_growth_tracker(),
          *grads, *hexes(params))
)py";

// One step as both sides print it, in doubles (NaN compares equal to NaN below).
struct StepRecord {
  int skipped = 0;
  double scale = 0;
  int64_t growth_tracker = 0;
  std::vector<double> values;  // unscaled gradients, then parameters
};

std::vector<double> Flat(const std::vector<torch::Tensor>& tensors) {
  std::vector<double> values;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor d = t.detach().to(torch::kDouble).contiguous().flatten();
    for (int64_t i = 0; i < d.numel(); ++i) values.push_back(d[i].item<double>());
  }
  return values;
}

std::vector<StepRecord> RunLossScaler(const Schedule& s) {
  absl::StatusOr<LossScaler> scaler = LossScaler::Create(s.options);
  EXPECT_TRUE(scaler.ok()) << scaler.status();
  if (!scaler.ok()) return {};
  torch::Tensor p0 = torch::tensor({0.5f, -1.0f, 1.5f}).requires_grad_();
  torch::Tensor p1 = torch::tensor({0.25f, 0.5f, 0.75f, 1.0f}).reshape({2, 2}).requires_grad_();
  torch::Tensor p2 = torch::tensor({1.0f, -1.0f}).to(torch::kBFloat16).requires_grad_();
  std::vector<torch::Tensor> params = {p0, p1, p2};
  std::vector<StepRecord> records;
  for (int t = 0; t < s.steps; ++t) {
    std::vector<float> v0, v1, v2;
    for (int j = 0; j < 3; ++j) v0.push_back((t % 5 + 1) * 0.125 * (j + 1) * (j % 2 ? -1 : 1));
    for (int j = 0; j < 4; ++j) v1.push_back((t % 3 + 1) * 0.5 * (j + 1));
    for (int j = 0; j < 2; ++j) v2.push_back((t % 4 + 1) * 0.25 * (j + 1));
    if (s.inf_steps.count(t)) v0[1] = INFINITY;
    if (s.nan_steps.count(t)) v1[2] = NAN;
    if (s.neg_inf_steps.count(t)) v2[0] = -INFINITY;
    const torch::Tensor g0 = torch::tensor(v0);
    const torch::Tensor g1 = torch::tensor(v1).reshape({2, 2});
    const torch::Tensor g2 = torch::tensor(v2).to(torch::kBFloat16);
    for (torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();

    const torch::Tensor loss = (p0 * g0).sum() + (p1 * g1).sum() + (p2 * g2).sum();
    scaler->Scale(loss).backward();
    std::vector<torch::Tensor> grads = {p0.grad(), p1.grad(), p2.grad()};
    EXPECT_TRUE(scaler->Unscale(grads).ok());
    StepRecord record;
    record.values = Flat(grads);
    EXPECT_TRUE(scaler
                    ->Step([&] {
                      torch::NoGradGuard no_grad;
                      for (torch::Tensor& p : params) p.add_(p.grad(), -0.5);
                      return absl::OkStatus();
                    })
                    .ok());
    EXPECT_TRUE(scaler->Update().ok());
    record.skipped = scaler->StepSkipped() ? 1 : 0;
    const LossScaler::State state = scaler->state();
    record.scale = state.scale;
    record.growth_tracker = state.growth_tracker;
    const std::vector<double> values = Flat(params);
    record.values.insert(record.values.end(), values.begin(), values.end());
    records.push_back(std::move(record));
  }
  return records;
}

absl::StatusOr<std::vector<StepRecord>> RunGradScaler(const Schedule& s) {
  auto list = [](const std::set<int>& steps) { return absl::StrJoin(steps, ","); };
  absl::StatusOr<std::string> printed = testing::RunPython(
      kGradScalerScript,
      {absl::StrCat(s.options.init_scale), absl::StrCat(s.options.growth_factor),
       absl::StrCat(s.options.backoff_factor), absl::StrCat(s.options.growth_interval),
       absl::StrCat(s.steps), list(s.inf_steps), list(s.nan_steps), list(s.neg_inf_steps)});
  if (!printed.ok()) return printed.status();
  std::vector<StepRecord> records;
  for (absl::string_view line : absl::StrSplit(*printed, '\n', absl::SkipWhitespace())) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() < 4 || std::stoi(fields[0]) != static_cast<int>(records.size())) {
      return absl::InternalError(absl::StrCat("unexpected line from Python: ", line));
    }
    StepRecord record;
    record.skipped = std::stoi(fields[1]);
    record.scale = std::strtod(fields[2].c_str(), nullptr);
    record.growth_tracker = std::stoll(fields[3]);
    for (size_t i = 4; i < fields.size(); ++i) {
      record.values.push_back(std::strtod(fields[i].c_str(), nullptr));
    }
    records.push_back(std::move(record));
  }
  return records;
}

void ExpectSameAsGradScaler(const Schedule& s) {
  absl::StatusOr<std::vector<StepRecord>> expected = RunGradScaler(s);
  ASSERT_TRUE(expected.ok()) << expected.status();
  const std::vector<StepRecord> actual = RunLossScaler(s);
  ASSERT_EQ(actual.size(), expected->size());
  ASSERT_EQ(actual.size(), static_cast<size_t>(s.steps));
  int skipped = 0;
  for (size_t t = 0; t < actual.size(); ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    const StepRecord& a = actual[t];
    const StepRecord& e = (*expected)[t];
    EXPECT_EQ(a.skipped, e.skipped);
    EXPECT_EQ(a.scale, e.scale);
    EXPECT_EQ(a.growth_tracker, e.growth_tracker);
    ASSERT_EQ(a.values.size(), e.values.size());
    for (size_t i = 0; i < a.values.size(); ++i) {
      if (std::isnan(e.values[i])) {
        EXPECT_TRUE(std::isnan(a.values[i])) << "value " << i;
      } else {
        EXPECT_EQ(a.values[i], e.values[i]) << "value " << i;
      }
    }
    skipped += a.skipped;
  }
  // The schedule must really exercise skipping.
  EXPECT_GT(skipped, 0);
  std::cerr << "scales:";
  for (const StepRecord& r : actual) std::cerr << " " << r.scale << (r.skipped ? "*" : "");
  std::cerr << "\n";
}

TEST(LossScalerTest, MatchesGradScalerWithCustomFactorsAndInjectedInfAndNan) {
  Schedule s;
  s.options.init_scale = 1024.0;
  s.options.growth_factor = 3.0;
  s.options.backoff_factor = 0.25;
  s.options.growth_interval = 3;
  s.steps = 24;
  s.inf_steps = {2, 9, 15, 16};
  s.nan_steps = {5, 13, 15};
  s.neg_inf_steps = {20};
  ExpectSameAsGradScaler(s);
}

TEST(LossScalerTest, MatchesGradScalerWithDefaultFactors) {
  Schedule s;
  s.options.growth_interval = 2;
  s.steps = 12;
  s.inf_steps = {0, 1, 7};
  s.nan_steps = {4};
  ExpectSameAsGradScaler(s);
}

// One parameter p whose loss p * g has gradient g.
struct OneParameter {
  torch::Tensor p = torch::tensor({1.0f}).requires_grad_();
  // Scales the loss and runs backward: p.grad() becomes scale * g.
  void RunBackward(LossScaler& scaler, float g) {
    p.mutable_grad() = torch::Tensor();
    scaler.Scale((p * g).sum()).backward();
  }
};

TEST(LossScalerTest, RestoredStateContinuesTheSameSequence) {
  LossScalerOptions options;
  options.init_scale = 8.0;
  options.growth_interval = 3;
  absl::StatusOr<LossScaler> original = LossScaler::Create(options);
  ASSERT_TRUE(original.ok());
  const float gradients[] = {1, 1, INFINITY, 1, 1, 1, 1, NAN, 1, 1, 1, 1};
  OneParameter a;
  std::vector<LossScaler::State> states;
  for (float g : gradients) {
    a.RunBackward(*original, g);
    std::vector<torch::Tensor> grads = {a.p.grad()};
    ASSERT_TRUE(original->Unscale(grads).ok());
    ASSERT_TRUE(original->Step([] { return absl::OkStatus(); }).ok());
    ASSERT_TRUE(original->Update().ok());
    states.push_back(original->state());
  }
  // Resume from the state after step 4, before the first Scale and after it.
  for (bool scale_first : {false, true}) {
    absl::StatusOr<LossScaler> resumed = LossScaler::Create(options);
    ASSERT_TRUE(resumed.ok());
    OneParameter b;
    if (scale_first) b.RunBackward(*resumed, 1);
    ASSERT_TRUE(resumed->Restore(states[4]).ok());
    EXPECT_EQ(resumed->state().scale, states[4].scale);
    EXPECT_EQ(resumed->state().growth_tracker, states[4].growth_tracker);
    for (size_t i = 5; i < std::size(gradients); ++i) {
      b.RunBackward(*resumed, gradients[i]);
      std::vector<torch::Tensor> grads = {b.p.grad()};
      ASSERT_TRUE(resumed->Unscale(grads).ok());
      ASSERT_TRUE(resumed->Update().ok());
      EXPECT_EQ(resumed->state().scale, states[i].scale) << "step " << i;
      EXPECT_EQ(resumed->state().growth_tracker, states[i].growth_tracker) << "step " << i;
    }
  }
}

TEST(LossScalerTest, CallsOutOfOrderFailWithFailedPrecondition) {
  absl::StatusOr<LossScaler> scaler = LossScaler::Create({});
  ASSERT_TRUE(scaler.ok());
  OneParameter a;
  std::vector<torch::Tensor> grads;
  EXPECT_EQ(scaler->Unscale(grads).code(), absl::StatusCode::kFailedPrecondition);  // no Scale
  a.RunBackward(*scaler, 1);
  auto no_step = [] { return absl::OkStatus(); };
  EXPECT_EQ(scaler->Step(no_step).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scaler->Update().code(), absl::StatusCode::kFailedPrecondition);
  grads = {a.p.grad()};
  ASSERT_TRUE(scaler->Unscale(grads).ok());
  EXPECT_EQ(scaler->Unscale(grads).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(scaler->Step(no_step).ok());
  EXPECT_EQ(scaler->Step(no_step).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scaler->Unscale(grads).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(scaler->Update().ok());
  EXPECT_EQ(scaler->Update().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(LossScalerTest, UnscaleWithoutDefinedGradientsLeavesStepAndUpdateFailing) {
  absl::StatusOr<LossScaler> scaler = LossScaler::Create({});
  ASSERT_TRUE(scaler.ok());
  OneParameter a;
  a.RunBackward(*scaler, 1);
  std::vector<torch::Tensor> grads = {torch::Tensor()};
  ASSERT_TRUE(scaler->Unscale(grads).ok());
  EXPECT_EQ(scaler->Step([] { return absl::OkStatus(); }).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scaler->Update().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(LossScalerTest, Float16GradientsAreRefusedAndLeftUnchanged) {
  absl::StatusOr<LossScaler> scaler = LossScaler::Create({});
  ASSERT_TRUE(scaler.ok());
  scaler->Scale(torch::ones({}));
  std::vector<torch::Tensor> grads = {torch::full({2}, 4.0f), torch::full({2}, 4.0, torch::kHalf)};
  const absl::Status status = scaler->Unscale(grads);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("gradient 1"), absl::string_view::npos) << status;
  EXPECT_EQ(grads[0][0].item<float>(), 4.0f);
  // The refused call did not count: a corrected one succeeds.
  grads.pop_back();
  EXPECT_TRUE(scaler->Unscale(grads).ok());
  EXPECT_EQ(grads[0][0].item<float>(), 4.0f / 65536.0f);
}

TEST(LossScalerTest, OptimizerErrorIsReturnedFromStep) {
  absl::StatusOr<LossScaler> scaler = LossScaler::Create({});
  ASSERT_TRUE(scaler.ok());
  OneParameter a;
  a.RunBackward(*scaler, 1);
  std::vector<torch::Tensor> grads = {a.p.grad()};
  ASSERT_TRUE(scaler->Unscale(grads).ok());
  EXPECT_EQ(scaler->Step([] { return absl::InternalError("optimizer broke"); }).message(),
            "optimizer broke");
}

TEST(LossScalerTest, DisabledScalerPassesEverythingThrough) {
  LossScalerOptions options;
  options.enabled = false;
  options.growth_factor = 0.5;  // not checked when disabled
  absl::StatusOr<LossScaler> scaler = LossScaler::Create(options);
  ASSERT_TRUE(scaler.ok());
  const torch::Tensor loss = torch::full({}, 3.0f);
  EXPECT_TRUE(scaler->Scale(loss).is_same(loss));
  std::vector<torch::Tensor> grads = {torch::full({1}, INFINITY)};
  EXPECT_TRUE(scaler->Unscale(grads).ok());
  bool stepped = false;
  EXPECT_TRUE(scaler
                  ->Step([&] {
                    stepped = true;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_TRUE(stepped);
  EXPECT_FALSE(scaler->StepSkipped());
  EXPECT_TRUE(scaler->Update().ok());
  EXPECT_EQ(scaler->scale(), 1.0);
}

TEST(LossScalerTest, InvalidOptionsAndStatesAreRejected) {
  auto with = [](auto change) {
    LossScalerOptions options;
    change(options);
    return LossScaler::Create(options).status().code();
  };
  EXPECT_EQ(with([](LossScalerOptions& o) { o.init_scale = 0; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](LossScalerOptions& o) { o.init_scale = INFINITY; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](LossScalerOptions& o) { o.growth_factor = 1.0; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](LossScalerOptions& o) { o.backoff_factor = 1.0; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](LossScalerOptions& o) { o.backoff_factor = 0.0; }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with([](LossScalerOptions& o) { o.growth_interval = 0; }),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<LossScaler> scaler = LossScaler::Create({});
  ASSERT_TRUE(scaler.ok());
  EXPECT_EQ(scaler->Restore({NAN, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scaler->Restore({1.0, -1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scaler->scale(), 65536.0);
}

}  // namespace
}  // namespace stoker::trainer
