// ValidateOptions refuses every out-of-range value with InvalidArgument naming its flag.
#include "trainer/options.h"

#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TrainerOptions Good() {
  TrainerOptions o;
  o.data_socket = "/tmp/stoker.test/data.sock";
  return o;
}

TEST(ValidateOptionsTest, DefaultsWithASocketAreValid) { EXPECT_TRUE(ValidateOptions(Good()).ok()); }

struct BadCase {
  const char* flag;  // what the message must name, "--flag="
  std::function<void(TrainerOptions&)> change;
};

TEST(ValidateOptionsTest, EveryBadValueIsRefusedNamingItsFlag) {
  const BadCase cases[] = {
      {"--data_socket", [](TrainerOptions& o) { o.data_socket.clear(); }},
      {"--batch_size=", [](TrainerOptions& o) { o.batch_size = 0; }},
      {"--image_size=", [](TrainerOptions& o) { o.image_size = 4; }},
      {"--epochs=", [](TrainerOptions& o) { o.epochs = 0; }},
      {"--num_classes=", [](TrainerOptions& o) { o.num_classes = 0; }},
      {"--bucket_mb=", [](TrainerOptions& o) { o.bucket_bytes = 100; }},
      {"--ring_slots=", [](TrainerOptions& o) { o.ring_slots = 2; }},
      {"--data_timeout_s=", [](TrainerOptions& o) { o.data_timeout = absl::ZeroDuration(); }},
      {"--optimizer=", [](TrainerOptions& o) { o.optimizer = "lamb"; }},
      {"--lr=", [](TrainerOptions& o) { o.learning_rate = 0; }},
      {"--lr=", [](TrainerOptions& o) { o.learning_rate = -1; }},
      {"--momentum=", [](TrainerOptions& o) { o.momentum = 1.0; }},
      {"--momentum=", [](TrainerOptions& o) { o.momentum = -0.1; }},
      {"--nesterov=", [](TrainerOptions& o) { o.nesterov = true, o.momentum = 0; }},
      {"--nesterov=", [](TrainerOptions& o) { o.nesterov = true, o.optimizer = "adamw"; }},
      {"--weight_decay=", [](TrainerOptions& o) { o.weight_decay = -1e-4; }},
      {"--adam_beta1=", [](TrainerOptions& o) { o.adam_beta1 = 1.0; }},
      {"--adam_beta2=", [](TrainerOptions& o) { o.adam_beta2 = -0.5; }},
      {"--adam_eps=", [](TrainerOptions& o) { o.adam_eps = 0; }},
      {"--warmup_epochs=", [](TrainerOptions& o) { o.warmup_epochs = -1; }},
      {"--warmup_epochs=", [](TrainerOptions& o) { o.epochs = 2, o.warmup_epochs = 3; }},
      {"--lr_step_epochs=", [](TrainerOptions& o) { o.lr_schedule = LrSchedule::kStep; }},
      {"--lr_step_epochs=", [](TrainerOptions& o) { o.lr_step_epochs = {3}; }},
      {"--lr_step_epochs=",
       [](TrainerOptions& o) { o.lr_schedule = LrSchedule::kStep, o.lr_step_epochs = {5, 3}; }},
      {"--lr_step_epochs=",
       [](TrainerOptions& o) { o.lr_schedule = LrSchedule::kStep, o.lr_step_epochs = {0}; }},
      {"--lr_step_gamma=", [](TrainerOptions& o) { o.lr_step_gamma = 0; }},
      {"--lr_step_gamma=", [](TrainerOptions& o) { o.lr_step_gamma = 1.5; }},
      {"--lr_min=", [](TrainerOptions& o) { o.lr_schedule = LrSchedule::kCosine, o.lr_min = 0.5; }},
      {"--lr_min=", [](TrainerOptions& o) { o.lr_min = 0.01; }},
      {"--label_smoothing=", [](TrainerOptions& o) { o.label_smoothing = 1.0; }},
      {"--label_smoothing=", [](TrainerOptions& o) { o.label_smoothing = -0.1; }},
      {"--clip_grad_norm=", [](TrainerOptions& o) { o.clip_grad_norm = -1; }},
      {"--accumulate=", [](TrainerOptions& o) { o.accumulate = 0; }},
      {"--val_every=", [](TrainerOptions& o) { o.val_every = -1; }},
      {"--val_batch_size=", [](TrainerOptions& o) { o.val_batch_size = -2; }},
      {"--checkpoint_every_steps=", [](TrainerOptions& o) { o.checkpoint_every_steps = -1; }},
      {"--checkpoint_every_epochs=", [](TrainerOptions& o) { o.checkpoint_every_epochs = -1; }},
      {"--keep_checkpoints=", [](TrainerOptions& o) { o.keep_checkpoints = -1; }},
      {"--resume=", [](TrainerOptions& o) { o.resume.clear(); }},
      {"--stop_after_steps=", [](TrainerOptions& o) { o.stop_after_steps = -3; }},
      {"--stop_after_steps=", [](TrainerOptions& o) { o.stop_after_steps = 10; }},
      {"--device=", [](TrainerOptions& o) { o.device = "tpu"; }},
      {"--log_every=", [](TrainerOptions& o) { o.log_every = 0; }},
      {"--progress=", [](TrainerOptions& o) { o.progress = "fancy"; }},
      {"--profile_steps=", [](TrainerOptions& o) { o.profile_steps = -1; }},
      {"--synthetic_steps=", [](TrainerOptions& o) { o.synthetic_steps = -1; }},
      {"--warmup_steps=", [](TrainerOptions& o) { o.warmup_steps = -1; }},
      {"--data_only=", [](TrainerOptions& o) { o.synthetic_steps = 5, o.data_only = true; }},
      {"--cache_release_fraction=", [](TrainerOptions& o) { o.cache_release_fraction = 0; }},
      {"--cache_release_fraction=", [](TrainerOptions& o) { o.cache_release_fraction = 1.5; }},
      {"--init_scale=", [](TrainerOptions& o) { o.init_scale = 0; }},
      {"--growth_factor=", [](TrainerOptions& o) { o.growth_factor = 1.0; }},
      {"--backoff_factor=", [](TrainerOptions& o) { o.backoff_factor = 1.0; }},
      {"--growth_interval=", [](TrainerOptions& o) { o.growth_interval = 0; }},
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

TEST(ValidateOptionsTest, RelatedValuesThatFitTogetherAreValid) {
  TrainerOptions o = Good();
  o.lr_schedule = LrSchedule::kStep;
  o.lr_step_epochs = {30, 60, 80};
  o.epochs = 90;
  o.warmup_epochs = 5;
  EXPECT_TRUE(ValidateOptions(o).ok());
  o = Good();
  o.lr_schedule = LrSchedule::kCosine;
  o.lr_min = 0.001;
  o.nesterov = true;
  o.label_smoothing = 0.1;
  o.clip_grad_norm = 1.0;
  o.accumulate = 4;
  o.checkpoint_dir = "/tmp/ckpt";
  o.stop_after_steps = 10;
  EXPECT_TRUE(ValidateOptions(o).ok());
  o = Good();
  o.data_socket.clear();
  o.synthetic_steps = 20;
  EXPECT_TRUE(ValidateOptions(o).ok());
}

TEST(ExitCodeTest, SignalStopsExitWithTheShellsCode) {
  EXPECT_EQ(ExitCodeForSignal(15), 143);
  EXPECT_EQ(ExitCodeForSignal(2), 130);
}

}  // namespace
}  // namespace stoker::trainer
