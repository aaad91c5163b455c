// Test tool: the logits of a trainer checkpoint's model (eval mode, fp32, CPU) on a seeded
// random batch, so that a test can check that the weights the trainer exported (--export)
// give torchvision's model the same function. Writes the input batch and the logits as raw
// float32 files (NCHW and [batch, classes], C order).
//
//   checkpoint_logits --checkpoint=ckpt-...stoker --model=resnet18 --num_classes=10
//       --image_size=32 --input_out=x.f32 --logits_out=y.f32   (one command line)
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "common/flags.h"
#include "trainer/checkpoint/checkpoint_file.h"
#include "trainer/checkpoint/training_state.h"
#include "trainer/nn/builtin_models.h"

ABSL_FLAG(std::string, checkpoint, "", "A trainer checkpoint file.");
ABSL_FLAG(std::string, model, "resnet18", "The checkpoint's model (a built-in one).");
ABSL_FLAG(int, num_classes, 10, "The checkpoint's number of classes.");
ABSL_FLAG(int, image_size, 32, "Input size.");
ABSL_FLAG(int, batch, 4, "Images in the batch.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the random batch.");
ABSL_FLAG(std::string, input_out, "", "Where to write the batch.");
ABSL_FLAG(std::string, logits_out, "", "Where to write the logits.");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "checkpoint_logits: %s\n", message.c_str());
  return 1;
}

bool WriteRaw(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  stoker::ParseFlagsOrExit(
      argc, argv,
      stoker::FlagSpecOf("checkpoint_logits", "trainer/checkpoint/checkpoint_logits.cc"),
      "checkpoint_logits --checkpoint=FILE --input_out=PATH --logits_out=PATH: the logits of "
      "a checkpoint's model on a random batch");
  auto checkpoint = stoker::trainer::LoadCheckpoint(absl::GetFlag(FLAGS_checkpoint));
  if (!checkpoint.ok()) return Fail(std::string(checkpoint.status().message()));
  auto model = stoker::trainer::MakeBuiltinModel(absl::GetFlag(FLAGS_model),
                                                 absl::GetFlag(FLAGS_num_classes));
  if (!model.ok()) return Fail(std::string(model.status().message()));
  if (absl::Status s = stoker::trainer::RestoreModelState(*checkpoint, **model); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  (*model)->eval();
  c10::NoGradGuard no_grad;
  at::manual_seed(absl::GetFlag(FLAGS_seed));
  const int64_t size = absl::GetFlag(FLAGS_image_size);
  const at::Tensor input = at::randn({absl::GetFlag(FLAGS_batch), 3, size, size});
  const at::Tensor logits = (*model)->forward(input);
  if (!WriteRaw(absl::GetFlag(FLAGS_input_out), input) ||
      !WriteRaw(absl::GetFlag(FLAGS_logits_out), logits)) {
    return Fail("cannot write the outputs");
  }
  std::printf("wrote the logits [%d, %d] of the checkpoint's %s\n",
              static_cast<int>(logits.size(0)), static_cast<int>(logits.size(1)),
              absl::GetFlag(FLAGS_model).c_str());
  return 0;
}
