// FusedOptimizer takes the same steps as libtorch's own SGD and AdamW (which follow
// torch.optim's update rules).
#include "trainer/optim/fused_optimizer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

std::vector<at::Tensor> MakeParameters() {
  at::manual_seed(11);
  return {at::randn({4, 3, 3, 3}).requires_grad_(), at::randn({7}).requires_grad_(),
          at::randn({5, 6}).requires_grad_()};
}

std::vector<at::Tensor> Clone(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

// Gives both parameter sets the same gradient for step `step`.
void SetGradients(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int step) {
  for (size_t i = 0; i < a.size(); ++i) {
    at::Tensor g =
        at::sin(at::arange(a[i].numel(), at::kFloat).reshape(a[i].sizes()) * (step + 1) + i);
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

void ExpectSame(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::allclose(a[i], b[i], 1e-5, 1e-6))
        << "parameter " << i << " max diff " << (a[i] - b[i]).abs().max().item<float>();
  }
}

// Takes five steps of `fused` over `mine` and of `torch_optimizer` over `reference`, with
// the same gradients, and expects the same parameters.
void ExpectSameAfterFiveSteps(std::vector<at::Tensor>& mine, FusedOptimizer& fused,
                              std::vector<at::Tensor>& reference,
                              torch::optim::Optimizer& torch_optimizer) {
  for (int step = 0; step < 5; ++step) {
    SetGradients(mine, reference, step);
    fused.Step();
    torch_optimizer.step();
  }
  ExpectSame(mine, reference);
}

TEST(FusedOptimizerTest, SgdWithMomentumAndWeightDecayMatchesTorchOptim) {
  std::vector<at::Tensor> mine = MakeParameters(), reference = Clone(mine);
  const OptimizerOptions options{OptimizerKind::kSgd, /*learning_rate=*/0.05,
                                 /*weight_decay=*/1e-3, /*no_decay_bn_bias=*/false,
                                 /*momentum=*/0.9};
  auto fused = FusedOptimizer::Create(mine, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  torch::optim::SGD sgd(reference, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  ExpectSameAfterFiveSteps(mine, **fused, reference, sgd);
}

TEST(FusedOptimizerTest, AdamWMatchesTorchOptim) {
  std::vector<at::Tensor> mine = MakeParameters(), reference = Clone(mine);
  OptimizerOptions options;
  options.kind = OptimizerKind::kAdamW;
  options.learning_rate = 1e-2;
  options.weight_decay = 1e-2;
  auto fused = FusedOptimizer::Create(mine, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  torch::optim::AdamW adamw(reference, torch::optim::AdamWOptions(1e-2).weight_decay(1e-2));
  ExpectSameAfterFiveSteps(mine, **fused, reference, adamw);
}

TEST(FusedOptimizerTest, BadHyperParametersNameTheFlag) {
  EXPECT_NE(ParseOptimizerKind("lamb").status().message().find("--optimizer"),
            absl::string_view::npos);
  OptimizerOptions options;
  options.kind = OptimizerKind::kSgd;
  options.momentum = 1.5;
  EXPECT_NE(FusedOptimizer::Create(MakeParameters(), options).status().message().find("--momentum"),
            absl::string_view::npos);
}

TEST(FusedOptimizerTest, ParameterGroupsTakeTheirOwnWeightDecayAsTorchOptimParamGroups) {
  std::vector<at::Tensor> mine = MakeParameters(), reference = Clone(mine);
  const OptimizerOptions options{OptimizerKind::kSgd,  /*learning_rate=*/0.05,
                                 /*weight_decay=*/0.0, /*no_decay_bn_bias=*/false,
                                 /*momentum=*/0.9,     /*nesterov=*/true};
  std::vector<ParameterGroup> groups(2);
  groups[0] = {{mine[0], mine[2]}, 1e-2};
  groups[1] = {{mine[1]}, 0.0};
  auto fused = FusedOptimizer::Create(groups, options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::vector<torch::optim::OptimizerParamGroup> torch_groups;
  torch_groups.emplace_back(
      std::vector<at::Tensor>{reference[0], reference[2]},
      std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-2)));
  torch_groups.emplace_back(
      std::vector<at::Tensor>{reference[1]},
      std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0)));
  torch::optim::SGD sgd(torch_groups, torch::optim::SGDOptions(0.05));
  for (int step = 0; step < 5; ++step) {
    SetGradients(mine, reference, step);
    (*fused)->Step();
    sgd.step();
  }
  ExpectSame(mine, reference);
}

// Runs `steps` steps of `kind` on fresh parameters, with a restart from copied state after
// `restart_after` steps when it is >= 0.
std::vector<at::Tensor> RunWithRestart(const std::string& kind, int steps, int restart_after) {
  std::vector<at::Tensor> params = MakeParameters(), unused = Clone(params);
  OptimizerOptions options;
  options.kind = *ParseOptimizerKind(kind);
  options.learning_rate = 0.01;
  options.weight_decay = 1e-3;
  auto optimizer = *FusedOptimizer::Create(params, options);
  for (int step = 0; step < steps; ++step) {
    if (step == restart_after) {
      auto fresh = *FusedOptimizer::Create(params, options);
      const auto from = optimizer->StateTensors();
      const auto to = fresh->StateTensors();
      for (size_t i = 0; i < from.size(); ++i) {
        for (size_t j = 0; j < from[i].size(); ++j) {
          EXPECT_EQ(from[i][j].first, to[i][j].first);
          to[i][j].second.copy_(from[i][j].second);
        }
      }
      fresh->set_steps_taken(optimizer->steps_taken());
      optimizer = std::move(fresh);
    }
    SetGradients(params, unused, step);
    optimizer->Step();
  }
  return params;
}

TEST(FusedOptimizerTest, RestoredStateContinuesBitForBit) {
  for (const std::string kind : {"sgd", "adamw"}) {
    const std::vector<at::Tensor> straight = RunWithRestart(kind, 6, -1);
    const std::vector<at::Tensor> restarted = RunWithRestart(kind, 6, 3);
    for (size_t i = 0; i < straight.size(); ++i)
      EXPECT_TRUE(at::equal(straight[i], restarted[i])) << kind << " " << i;
  }
}

// The learning rate read from a device tensor and a zero inf flag take the host path's
// steps bit for bit (the rate is a power of two, exact in the tensor's float32), and a set
// inf flag changes nothing: parameters, state, the step count.
TEST(FusedOptimizerTest, StepsOnTheDeviceMatchTheHostPathAndSkipOnTheFlag) {
  for (const std::string kind : {"sgd", "adamw"}) {
    std::vector<at::Tensor> host = MakeParameters(), device = Clone(host);
    OptimizerOptions options;
    options.kind = *ParseOptimizerKind(kind);
    options.learning_rate = 1.0 / 128;
    options.momentum = 0.9;
    options.weight_decay = 1e-3;
    auto on_host = *FusedOptimizer::Create(host, options);
    auto on_device = *FusedOptimizer::Create(device, options);
    on_device->KeepLearningRateOnDevice();
    const at::Tensor clear = at::zeros({});
    const at::Tensor found = at::ones({});
    for (int step = 0; step < 6; ++step) {
      const double rate = 1.0 / (64 << step);
      SetGradients(host, device, step);
      on_host->set_learning_rate(rate);
      on_device->set_learning_rate(rate);
      on_host->Step();
      on_device->Step(clear);
    }
    for (size_t i = 0; i < host.size(); ++i)
      EXPECT_TRUE(at::equal(host[i], device[i])) << kind << " " << i;

    std::vector<at::Tensor> before = Clone(device);
    std::vector<at::Tensor> state_before;
    for (const auto& entry : on_device->StateTensors()) {
      for (const auto& named : entry) state_before.push_back(named.second.clone());
    }
    SetGradients(before, device, 7);
    on_device->Step(found);
    for (size_t i = 0; i < device.size(); ++i)
      EXPECT_TRUE(at::equal(before[i], device[i])) << kind << " " << i;
    size_t n = 0;
    for (const auto& entry : on_device->StateTensors()) {
      for (const auto& named : entry)
        EXPECT_TRUE(at::equal(state_before[n++], named.second)) << kind << " " << named.first;
    }
    EXPECT_EQ(on_host->steps_taken(), 6);
    EXPECT_EQ(on_device->steps_taken(), 6) << kind << ": a skipped step is not taken";
    on_device->set_steps_taken(9);
    EXPECT_EQ(on_device->steps_taken(), 9);
    on_device->CountReplayedStep();
    EXPECT_EQ(on_device->steps_taken(), 10) << kind << ": a replayed step counts";
  }
}

TEST(FusedOptimizerTest, StateHasTorchOptimsNames) {
  OptimizerOptions options;
  options.kind = OptimizerKind::kAdamW;
  auto adamw = *FusedOptimizer::Create(MakeParameters(), options);
  const auto state = adamw->StateTensors();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0][0].first, "exp_avg");
  EXPECT_EQ(state[0][1].first, "exp_avg_sq");
  EXPECT_EQ(state[0][2].first, "step");
  options.kind = OptimizerKind::kSgd;
  auto sgd = *FusedOptimizer::Create(MakeParameters(), options);
  EXPECT_EQ(sgd->StateTensors()[1][0].first, "momentum_buffer");
}

}  // namespace
}  // namespace stoker::trainer
