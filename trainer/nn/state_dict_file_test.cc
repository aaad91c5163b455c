// Tests --init_weights' reading: a state dict Python wrote with torch.save or safetensors
// loads into the model it came from, tensor for tensor, and one that does not fit
// (missing, unexpected or reshaped keys), or a file that is neither format, is refused
// with the keys or the reason named. Python runs in $STOKER_PYTHON.
#include "trainer/nn/state_dict_file.h"

#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/python_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/nn/builtin_models.h"
#include "trainer/nn/state_dict.h"

namespace stoker::trainer {
namespace {

using ::testing::HasSubstr;

using testing::TempPath;

// From the model's own state dict: the same values plus 1 (num_batches_tracked plus 3),
// written both ways, and three that do not fit.
constexpr char kWriteStateDicts[] = R"py(
import sys, torch
from safetensors.torch import save_file
source, out = sys.argv[1], sys.argv[2]
state = torch.load(source, weights_only=True)
changed = {k: (v + 3 if k.endswith("num_batches_tracked") else v + 1) for k, v in state.items()}
torch.save(changed, out + "/changed.pt")
save_file({k: v.contiguous() for k, v in changed.items()}, out + "/changed.safetensors")
missing = dict(changed); missing.pop("fc.bias")
torch.save(missing, out + "/missing.pt")
extra = dict(changed); extra["fc.scale"] = torch.ones(1)
torch.save(extra, out + "/extra.pt")
reshaped = dict(changed); reshaped["fc.weight"] = torch.zeros(3, 3)
torch.save(reshaped, out + "/reshaped.pt")
torch.save([torch.ones(1)], out + "/list.pt")
open(out + "/garbage.pt", "wb").write(b"no state dict here, no format either" * 4)
)py";

class StateDictFileTest : public ::testing::Test {
 protected:
  static constexpr int kSeed = 21;

  static void SetUpTestSuite() {
    torch::manual_seed(kSeed);
    const std::string source = TempPath("source.pt");
    std::ofstream(source, std::ios::binary) << *PickleStateDict(**MakeBuiltinModel("small_cnn", 4));
    absl::StatusOr<std::string> written =
        testing::RunPython(kWriteStateDicts, {source, std::getenv("TEST_TMPDIR")});
    ASSERT_TRUE(written.ok()) << written.status();
  }

  // The model the files were written from, with its initial weights.
  void SetUp() override {
    torch::manual_seed(kSeed);
    model_ = *MakeBuiltinModel("small_cnn", 4);
  }

  absl::Status Load(absl::string_view name) {
    absl::StatusOr<std::map<std::string, at::Tensor>> state = ReadStateDictFile(TempPath(name));
    if (!state.ok()) return state.status();
    return LoadStateDict(*state, *model_, std::string(name));
  }

  std::shared_ptr<ImageClassifier> model_;
};

TEST_F(StateDictFileTest, TorchSaveAndSafetensorsFilesLoadEveryTensor) {
  std::map<std::string, at::Tensor> before;
  for (const auto& [name, tensor] : StateDictItems(*model_)) before[name] = tensor.clone();
  for (const char* file : {"changed.pt", "changed.safetensors"}) {
    SCOPED_TRACE(file);
    ASSERT_TRUE(Load(file).ok()) << Load(file);
    for (const auto& [name, tensor] : StateDictItems(*model_)) {
      const at::Tensor expected =
          before[name] + (absl::EndsWith(name, "num_batches_tracked") ? 3 : 1);
      EXPECT_TRUE(at::equal(tensor, expected)) << name;
    }
  }
}

TEST_F(StateDictFileTest, StateDictThatDoesNotFitIsRefusedByKey) {
  EXPECT_THAT(std::string(Load("missing.pt").message()), HasSubstr("missing keys fc.bias"));
  EXPECT_THAT(std::string(Load("extra.pt").message()), HasSubstr("unexpected keys fc.scale"));
  EXPECT_THAT(std::string(Load("reshaped.pt").message()),
              HasSubstr("other shapes fc.weight ([3, 3] in the file, [4, 64] in the model)"));
}

TEST_F(StateDictFileTest, FilesThatAreNoStateDictAreRefused) {
  EXPECT_THAT(std::string(Load("list.pt").message()), HasSubstr("not a state dict"));
  EXPECT_THAT(std::string(Load("garbage.pt").message()),
              HasSubstr("neither torch.save's zip format nor a safetensors file"));
  EXPECT_THAT(std::string(Load("absent.pt").message()), HasSubstr("cannot open the file"));
}

}  // namespace
}  // namespace stoker::trainer
