// ValidateOptions refuses every out-of-range value with InvalidArgument naming its flag.
#include "trainer/options.h"

#include "common/decode_share.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TrainerOptions Good() {
  TrainerOptions o;
  o.input.data_socket = "/tmp/stoker.test/data.sock";
  return o;
}

TEST(ValidateOptionsTest, DefaultsWithASocketAreValid) {
  EXPECT_TRUE(ValidateOptions(Good()).ok());
}

struct BadCase {
  const char* flag;  // what the message must name, "--flag="
  std::function<void(TrainerOptions&)> change;
};

TEST(ValidateOptionsTest, EveryBadValueIsRefusedNamingItsFlag) {
  const BadCase cases[] = {
      {"--data_socket", [](TrainerOptions& o) { o.input.data_socket.clear(); }},
      {"--batch_size=", [](TrainerOptions& o) { o.input.batch_size = 0; }},
      {"--image_size=", [](TrainerOptions& o) { o.input.image_size = 4; }},
      {"--epochs=", [](TrainerOptions& o) { o.epochs = 0; }},
      {"--num_classes=", [](TrainerOptions& o) { o.model.num_classes = 0; }},
      {"--bucket_mb=", [](TrainerOptions& o) { o.comm.bucket_mb = 0; }},
      {"--ring_slots=", [](TrainerOptions& o) { o.input.ring_slots = 2; }},
      {"--data_timeout_s=", [](TrainerOptions& o) { o.input.data_timeout = absl::ZeroDuration(); }},
      {"--data_timeout_s=120 must be less than --collective_timeout_s=60",
       [](TrainerOptions& o) { o.comm.collective_timeout = absl::Seconds(60); }},
      {"--data_timeout_s=300 must be less than --collective_timeout_s=300",
       [](TrainerOptions& o) { o.input.data_timeout = absl::Seconds(300); }},
      {"--lr=", [](TrainerOptions& o) { o.optimizer.learning_rate = 0; }},
      {"--lr=", [](TrainerOptions& o) { o.optimizer.learning_rate = -1; }},
      {"--momentum=", [](TrainerOptions& o) { o.optimizer.momentum = 1.0; }},
      {"--momentum=", [](TrainerOptions& o) { o.optimizer.momentum = -0.1; }},
      {"--nesterov=",
       [](TrainerOptions& o) { o.optimizer.nesterov = true, o.optimizer.momentum = 0; }},
      {"--nesterov=",
       [](TrainerOptions& o) {
         o.optimizer.nesterov = true, o.optimizer.kind = OptimizerKind::kAdamW;
       }},
      {"--weight_decay=", [](TrainerOptions& o) { o.optimizer.weight_decay = -1e-4; }},
      {"--adam_beta1=", [](TrainerOptions& o) { o.optimizer.beta1 = 1.0; }},
      {"--adam_beta2=", [](TrainerOptions& o) { o.optimizer.beta2 = -0.5; }},
      {"--adam_eps=", [](TrainerOptions& o) { o.optimizer.eps = 0; }},
      {"--warmup_epochs=", [](TrainerOptions& o) { o.schedule.warmup_epochs = -1; }},
      {"--warmup_epochs=", [](TrainerOptions& o) { o.epochs = 2, o.schedule.warmup_epochs = 3; }},
      {"--lr_step_epochs=", [](TrainerOptions& o) { o.schedule.kind = LrSchedule::kStep; }},
      {"--lr_step_epochs=", [](TrainerOptions& o) { o.schedule.step_epochs = {3}; }},
      {"--lr_step_epochs=",
       [](TrainerOptions& o) {
         o.schedule.kind = LrSchedule::kStep, o.schedule.step_epochs = {5, 3};
       }},
      {"--lr_step_epochs=",
       [](TrainerOptions& o) {
         o.schedule.kind = LrSchedule::kStep, o.schedule.step_epochs = {0};
       }},
      {"--lr_step_gamma=", [](TrainerOptions& o) { o.schedule.gamma = 0; }},
      {"--lr_step_gamma=", [](TrainerOptions& o) { o.schedule.gamma = 1.5; }},
      {"--lr_min=",
       [](TrainerOptions& o) { o.schedule.kind = LrSchedule::kCosine, o.schedule.lr_min = 0.5; }},
      {"--lr_min=", [](TrainerOptions& o) { o.schedule.lr_min = 0.01; }},
      {"--label_smoothing=", [](TrainerOptions& o) { o.step.label_smoothing = 1.0; }},
      {"--label_smoothing=", [](TrainerOptions& o) { o.step.label_smoothing = -0.1; }},
      {"--clip_grad_norm=", [](TrainerOptions& o) { o.step.clip_grad_norm = -1; }},
      {"--accumulate=", [](TrainerOptions& o) { o.step.accumulate = 0; }},
      {"--val_every=", [](TrainerOptions& o) { o.validation.every = -1; }},
      {"--val_batch_size=", [](TrainerOptions& o) { o.validation.batch_size = -2; }},
      {"--checkpoint_every_steps=", [](TrainerOptions& o) { o.checkpoint.every_steps = -1; }},
      {"--checkpoint_every_epochs=", [](TrainerOptions& o) { o.checkpoint.every_epochs = -1; }},
      {"--keep_checkpoints=", [](TrainerOptions& o) { o.checkpoint.keep = -1; }},
      {"--resume=", [](TrainerOptions& o) { o.checkpoint.resume.mode = ResumeFrom::Mode::kFile; }},
      {"--stop_after_steps=", [](TrainerOptions& o) { o.checkpoint.stop_after_steps = -3; }},
      {"--stop_after_steps=", [](TrainerOptions& o) { o.checkpoint.stop_after_steps = 10; }},
      {"--log_every=", [](TrainerOptions& o) { o.report.log_every = 0; }},
      {"--profile_steps=", [](TrainerOptions& o) { o.report.profile_steps = -1; }},
      {"--synthetic_steps=", [](TrainerOptions& o) { o.input.synthetic_steps = -1; }},
      {"--warmup_steps=", [](TrainerOptions& o) { o.benchmark.warmup_steps = -1; }},
      {"--data_only=",
       [](TrainerOptions& o) { o.input.synthetic_steps = 5, o.benchmark.data_only = true; }},
      {"--cache_release_fraction=", [](TrainerOptions& o) { o.device.cache_release_fraction = 0; }},
      {"--fp8_amax_history=", [](TrainerOptions& o) { o.device.fp8_amax_history = 0; }},
      {"--fp8_amax_history=", [](TrainerOptions& o) { o.device.fp8_amax_history = 1025; }},
      {"--cache_release_fraction=",
       [](TrainerOptions& o) { o.device.cache_release_fraction = 1.5; }},
      {"--init_scale=", [](TrainerOptions& o) { o.scaler.init_scale = 0; }},
      {"--growth_factor=", [](TrainerOptions& o) { o.scaler.growth_factor = 1.0; }},
      {"--backoff_factor=", [](TrainerOptions& o) { o.scaler.backoff_factor = 1.0; }},
      {"--growth_interval=", [](TrainerOptions& o) { o.scaler.growth_interval = 0; }},
      {"--gpu_decode_share=", [](TrainerOptions& o) { o.input.gpu_decode_share = 1.5; }},
      {"--gpu_decode_arena_mib=", [](TrainerOptions& o) { o.input.gpu_decode_arena_mib = 47; }},
      {"--gpu_decode_arena_mib=",
       [](TrainerOptions& o) { o.input.gpu_decode_arena_mib = (1 << 20) + 1; }},
      {"--gpu_decode_share=",
       [](TrainerOptions& o) {
         o.device.device = DeviceChoice::kCpu, o.input.gpu_decode_share = 0.5;
       }},
      {"--sync_batchnorm",
       [](TrainerOptions& o) {
         o.model.name = "m.pt2", o.model.sync_batchnorm = true, o.model.fused_blocks = false;
       }},
      // FP8 runs an exported model's linear layers (a built-in model has none) on a GPU.
      {"--precision=fp8", [](TrainerOptions& o) { o.device.precision = Precision::kFp8; }},
      {"--precision=fp8",
       [](TrainerOptions& o) {
         o.model.name = "m.pt2", o.device.precision = Precision::kFp8;
         o.device.device = DeviceChoice::kCpu;
       }},
  };
  for (const BadCase& c : cases) {
    TrainerOptions options = Good();
    c.change(options);
    const absl::Status status = ValidateOptions(options);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.flag << ": " << status;
    EXPECT_NE(std::string(status.message()).find(c.flag), std::string::npos)
        << "expected the message to name " << c.flag << ", got: " << status.message();
  }
}

TEST(ValidateOptionsTest, Fp8IsAcceptedForAnExportedModelOnAnyGpuChoice) {
  absl::StatusOr<Precision> fp8 = ParsePrecision("fp8");
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_EQ(*fp8, Precision::kFp8);
  for (DeviceChoice device : {DeviceChoice::kAuto, DeviceChoice::kCuda}) {
    TrainerOptions o = Good();
    o.model.name = "/models/vit_b_16.pt2";
    o.device.precision = *fp8;
    o.device.device = device;
    EXPECT_TRUE(ValidateOptions(o).ok()) << ValidateOptions(o);
  }
}

// Values that name a choice are parsed into enums, refused there when unknown.
TEST(ValidateOptionsTest, EveryUnknownChoiceIsRefusedNamingItsFlag) {
  const std::pair<const char*, absl::Status> cases[] = {
      {"--optimizer=", ParseOptimizerKind("lamb").status()},
      {"--lr_schedule=", ParseLrSchedule("linear").status()},
      {"--gpu_decode_share=", ParseGpuDecodeShare("most").status()},
      {"--gpu_decode_share=", ParseGpuDecodeShare("1.01").status()},
      {"--device=", ParseDeviceChoice("tpu").status()},
      {"--precision=", ParsePrecision("fp4").status()},
      {"--progress=", ParseProgressMode("fancy").status()},
      {"--resume=", ResumeFrom::Parse("").status()},
  };
  for (const auto& [flag, status] : cases) {
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << flag << ": " << status;
    EXPECT_NE(std::string(status.message()).find(flag), std::string::npos)
        << "expected the message to name " << flag << ", got: " << status.message();
  }
}

// --gpu_decode_share (PlanGpuDecodeShare): auto adapts on a GPU's training ring, is fixed
// at kAutoFixedGpuDecodeShare under --deterministic and on the validation ring, and is 0
// on the CPU, where only 0 may be fixed.
TEST(GpuDecodeSharePlanTest, AutoResolvesByDeviceDeterminismAndRing) {
  auto plan = [](std::optional<double> flag, bool cuda, bool deterministic, bool training) {
    absl::StatusOr<GpuDecodeSharePlan> p = PlanGpuDecodeShare(flag, cuda, deterministic, training);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : GpuDecodeSharePlan{-1, false};
  };
  EXPECT_TRUE(plan(std::nullopt, true, false, true).adaptive);
  EXPECT_EQ(plan(std::nullopt, true, false, true).initial, 0.0);
  EXPECT_FALSE(plan(std::nullopt, true, true, true).adaptive);
  EXPECT_EQ(plan(std::nullopt, true, true, true).initial, kAutoFixedGpuDecodeShare);
  EXPECT_EQ(plan(std::nullopt, true, false, false).initial, kAutoFixedGpuDecodeShare);
  EXPECT_FALSE(plan(std::nullopt, false, false, true).adaptive);
  EXPECT_EQ(plan(std::nullopt, false, false, true).initial, 0.0);
  EXPECT_EQ(plan(std::nullopt, false, true, false).initial, 0.0);
  EXPECT_EQ(plan(0.5, true, false, true).initial, 0.5);
  EXPECT_FALSE(plan(0.5, true, false, true).adaptive);
  EXPECT_EQ(plan(0.0, false, false, true).initial, 0.0);
  const absl::Status cpu = PlanGpuDecodeShare(0.5, false, false, true).status();
  EXPECT_TRUE(absl::IsInvalidArgument(cpu)) << cpu;
  EXPECT_NE(std::string(cpu.message()).find("--gpu_decode_share=0.5"), std::string::npos) << cpu;
  ASSERT_TRUE(ParseGpuDecodeShare("auto").ok());
  EXPECT_FALSE(ParseGpuDecodeShare("auto")->has_value());
  EXPECT_EQ(**ParseGpuDecodeShare("0.25"), 0.25);
}

TEST(ValidateOptionsTest, ADataTimeoutBelowTheCollectiveTimeoutIsValid) {
  TrainerOptions o = Good();
  o.input.data_timeout = absl::Seconds(9);
  o.comm.collective_timeout = absl::Seconds(10);
  EXPECT_TRUE(ValidateOptions(o).ok());
  // Without a data service (--synthetic_steps) no rank waits for a batch.
  o = Good();
  o.input.synthetic_steps = 5;
  o.comm.collective_timeout = absl::Seconds(10);
  EXPECT_TRUE(ValidateOptions(o).ok());
}

TEST(ValidateOptionsTest, RelatedValuesThatFitTogetherAreValid) {
  TrainerOptions o = Good();
  o.schedule.kind = LrSchedule::kStep;
  o.schedule.step_epochs = {30, 60, 80};
  o.epochs = 90;
  o.schedule.warmup_epochs = 5;
  EXPECT_TRUE(ValidateOptions(o).ok());
  o = Good();
  o.schedule.kind = LrSchedule::kCosine;
  o.schedule.lr_min = 0.001;
  o.optimizer.nesterov = true;
  o.step.label_smoothing = 0.1;
  o.step.clip_grad_norm = 1.0;
  o.step.accumulate = 4;
  o.checkpoint.dir = "/tmp/ckpt";
  o.checkpoint.stop_after_steps = 10;
  EXPECT_TRUE(ValidateOptions(o).ok());
  o = Good();
  o.input.data_socket.clear();
  o.input.synthetic_steps = 20;
  EXPECT_TRUE(ValidateOptions(o).ok());
}

TEST(ExitCodeTest, SignalStopsExitWithTheShellsCode) {
  EXPECT_EQ(ExitCodeForSignal(15), 143);
  EXPECT_EQ(ExitCodeForSignal(2), 130);
}

}  // namespace
}  // namespace stoker::trainer
