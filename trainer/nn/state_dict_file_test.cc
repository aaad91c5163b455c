// Tests --init_weights' reading: a state dict Python wrote with torch.save (read with
// allow_pickle) or safetensors loads into the model it came from, tensor for tensor, and one
// that does not fit (missing, unexpected or reshaped keys), or a file that is neither
// format, is refused with the keys or the reason named. A torch.save file is refused
// without allow_pickle. Malformed safetensors files, one fault each, are refused naming the
// file, the tensor and the field, with kExitUsage, never a crash. Python runs in
// $STOKER_PYTHON.
#include "trainer/nn/state_dict_file.h"

#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/testing/python_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/nn/builtin_models.h"
#include "trainer/nn/state_dict.h"

namespace stoker::trainer {
namespace {

using ::testing::HasSubstr;

using testing::TempPath;

// The test's own torch.save files are trusted.
const StateDictFileOptions kTrusted = {/*allow_pickle=*/true};

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
    absl::StatusOr<std::map<std::string, at::Tensor>> state =
        ReadStateDictFile(TempPath(name), kTrusted);
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

TEST_F(StateDictFileTest, TorchSaveFileIsRefusedUnlessPicklesAreAllowed) {
  const std::string path = TempPath("changed.pt");
  absl::StatusOr<std::map<std::string, at::Tensor>> state = ReadStateDictFile(path);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(ExitCodeOf(state.status()), kExitUsage);
  EXPECT_THAT(
      std::string(state.status().message()),
      HasSubstr(absl::StrCat("--init_weights=", path, ": torch.save's format is a Python pickle")));
  EXPECT_THAT(std::string(state.status().message()), HasSubstr("--allow_pickle"));
}

// A safetensors file: the 8-byte header length, `header`, then `data`.
std::string Safetensors(const std::string& header, const std::string& data) {
  const uint64_t size = header.size();
  std::string bytes(reinterpret_cast<const char*>(&size), sizeof(size));
  return absl::StrCat(bytes, header, data);
}

TEST(SafetensorsTest, WellFormedFileLoadsEveryTensor) {
  const float values[3] = {1.5f, -2, 4};
  const std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  absl::StatusOr<std::map<std::string, at::Tensor>> state =
      ParseStateDictFile("ok.safetensors", Safetensors(R"({"__metadata__": {"format": "pt"},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
                      "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "e": {"dtype": "I64", "shape": [0, 3], "data_offsets": [12, 12]}})",
                                                       data));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->size(), 3);
  EXPECT_TRUE(at::equal(state->at("a"), torch::tensor({1.5f, -2.0f})));
  EXPECT_TRUE(at::equal(state->at("b"), torch::tensor({4.0f})));
  EXPECT_EQ(state->at("e").sizes(), (std::vector<int64_t>{0, 3}));
}

struct MalformedCase {
  const char* what;
  std::string bytes;
  const char* message;  // what the refusal says after "--init_weights=<file>: "
};

TEST(SafetensorsTest, MalformedFilesAreRefusedByName) {
  const std::string data(8, '\0');  // two float32
  auto entry = [](const std::string& fields) { return absl::StrCat(R"({"t": {)", fields, "}}"); };
  const std::string f32 = R"("dtype": "F32", )";
  // A file of one F32 tensor 't' whose entry has `fields` after its dtype, over `data`.
  auto f32_file = [&](const std::string& fields) { return Safetensors(entry(f32 + fields), data); };
  const std::vector<MalformedCase> cases = {
      {"shorter than a header length", "\x08\0\0{", "neither torch.save's zip format"},
      {"header past the end", std::string("\x64\0\0\0\0\0\0\0{}xx", 12),
       "the header runs past the end"},
      {"huge header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10),
       "over the limit of 100000000"},
      {"not JSON", Safetensors("{not json", data), "the header is not a JSON object"},
      {"a JSON list", Safetensors("[1, 2]", data), "neither torch.save's zip format"},
      {"entry not an object", Safetensors(R"({"t": 3})", data), "tensor 't': its entry is not"},
      {"missing dtype", Safetensors(entry(R"("shape": [2], "data_offsets": [0, 8])"), data),
       "tensor 't': no dtype"},
      {"missing shape", f32_file(R"("data_offsets": [0, 8])"), "tensor 't': no shape"},
      {"missing offsets", f32_file(R"("shape": [2])"), "tensor 't': no data_offsets"},
      {"dtype a number",
       Safetensors(entry(R"("dtype": 7, "shape": [2], "data_offsets": [0, 8])"), data),
       "tensor 't': dtype is not a string"},
      {"unknown dtype",
       Safetensors(entry(R"("dtype": "F128", "shape": [2], "data_offsets": [0, 8])"), data),
       "tensor 't': unknown safetensors dtype F128"},
      {"shape a string", f32_file(R"("shape": "2", "data_offsets": [0, 8])"),
       "tensor 't': shape is not a list"},
      {"negative shape", f32_file(R"("shape": [-2], "data_offsets": [0, 8])"),
       "tensor 't': shape [-2] is not a list of sizes >= 0"},
      {"fractional shape", f32_file(R"("shape": [2.0], "data_offsets": [0, 8])"),
       "is not a list of sizes >= 0"},
      {"overflowing shape",
       f32_file(R"("shape": [4294967296, 4294967296, 2], "data_offsets": [0, 8])"),
       "has more elements than 2^64"},
      {"shape times size overflows",
       f32_file(R"("shape": [4611686018427387904], "data_offsets": [0, 8])"),
       "needs 4611686018427387904 elements"},
      {"one offset", f32_file(R"("shape": [2], "data_offsets": [8])"),
       "data_offsets [8] are not [begin, end]"},
      {"negative offset", f32_file(R"("shape": [2], "data_offsets": [-8, 0])"),
       "data_offsets [-8,0] are not [begin, end]"},
      {"reversed offsets", f32_file(R"("shape": [0], "data_offsets": [8, 0])"),
       "are not [begin, end] with begin <= end"},
      {"offsets do not fit the shape", f32_file(R"("shape": [3], "data_offsets": [0, 8])"),
       "span 8 bytes, its shape [3] of F32 needs 3 elements"},
      {"offsets past the end", f32_file(R"("shape": [2], "data_offsets": [8, 16])"),
       "its data starts at byte 8, after a gap"},
      {"offsets far past the end",
       f32_file(R"("shape": [2], "data_offsets": [18446744073709551608, 18446744073709551615])"),
       "span 7 bytes"},
      {"overlapping tensors",
       Safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                       "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   data),
       "tensor 'b': its data starts at byte 4, inside another tensor's"},
      {"trailing bytes", f32_file(R"("shape": [1], "data_offsets": [0, 4])"),
       "the tensors cover 4 bytes of data, the file holds 8"},
      {"duplicate tensor",
       Safetensors(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   data),
       "the header names 't' twice"},
      {"duplicate field", f32_file(R"("dtype": "I32", "shape": [2], "data_offsets": [0, 8])"),
       "the header names 'dtype' twice"},
      {"metadata not an object", Safetensors(R"({"__metadata__": [1]})", ""),
       "__metadata__ is not an object"},
  };
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.what);
    absl::StatusOr<std::map<std::string, at::Tensor>> state =
        ParseStateDictFile("bad.safetensors", c.bytes);
    ASSERT_FALSE(state.ok());
    EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ExitCodeOf(state.status()), kExitUsage);
    EXPECT_THAT(std::string(state.status().message()),
                HasSubstr("--init_weights=bad.safetensors: "));
    EXPECT_THAT(std::string(state.status().message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace stoker::trainer
