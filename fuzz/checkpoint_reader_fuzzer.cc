// libFuzzer target for the checkpoint reader: whatever bytes a checkpoint file holds,
// CheckpointReader::Parse() either refuses them (DataLoss or InvalidArgument) or indexes
// entries each of which reads back as exactly one kind, a tensor's data lying inside the
// file. Each input is also parsed sealed: with a valid header (magic, version, the payload's
// length and both checksums recomputed), so that mutations reach the entry parser instead
// of stopping at a checksum. Built as //fuzz:checkpoint_reader_fuzzer; tools/fuzz.sh runs it under
// libFuzzer with ASan and UBSan. With STOKER_FUZZ_WRITE_SEEDS=DIR it writes its seed corpus
// (checkpoints the writer made) into DIR and exits.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fuzz/seed_files.h"
#include "trainer/checkpoint/checkpoint_file.h"

namespace stoker::trainer {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "checkpoint_reader_fuzzer: %s\n", what);
  std::abort();
}

void WriteSeeds(const std::string& dir) {
  std::vector<std::string> files;
  files.push_back(CheckpointWriter().Finish());
  {
    CheckpointWriter w;
    w.AddInt("global_step", 1234);
    w.AddDouble("loss_scale", 65536.0);
    w.AddString("run", "resnet18 classes=10 image=64 seed=5");
    const float weights[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
    w.AddTensor("model/fc.weight", "float32", {2, 3}, weights, sizeof(weights));
    const int64_t steps[1] = {9};
    w.AddTensor("optimizer/step", "int64", {1}, steps, sizeof(steps));
    w.AddTensor("empty", "float32", {0}, nullptr, 0);
    files.push_back(std::move(w).Finish());
  }
  {
    CheckpointWriter w;
    for (int i = 0; i < 8; ++i) w.AddInt("int" + std::to_string(i), -i);
    files.push_back(std::move(w).Finish());
  }
  for (size_t i = 0; i < files.size(); ++i) {
    fuzz::WriteSeedFile(dir, "checkpoint_" + std::to_string(i), files[i]);
  }
}

const bool kSeedsWritten = fuzz::WriteSeedsIfAsked(&WriteSeeds);

void Check(std::string bytes, bool sealed) {
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Parse(std::move(bytes), "fuzz");
  if (!reader.ok()) {
    const absl::StatusCode code = reader.status().code();
    if (code != absl::StatusCode::kDataLoss &&
        !(code == absl::StatusCode::kInvalidArgument && !sealed)) {
      std::fprintf(stderr, "%s\n", reader.status().ToString().c_str());
      Fail(sealed ? "Parse of a sealed file: not DataLoss"
                  : "Parse: neither DataLoss nor InvalidArgument");
    }
    return;
  }
  const std::string& file = reader->bytes();
  for (const std::string& name : reader->Names()) {
    if (!reader->Has(name)) Fail("a listed entry is not there");
    int kinds = 0;
    kinds += reader->Int(name).ok();
    kinds += reader->Double(name).ok();
    absl::StatusOr<std::string> text = reader->String(name);
    if (text.ok()) ++kinds;
    absl::StatusOr<CheckpointTensor> tensor = reader->Tensor(name);
    if (tensor.ok()) {
      ++kinds;
      const char* begin = tensor->data.data();
      if (!tensor->data.empty() &&
          (begin < file.data() ||
           tensor->data.size() > static_cast<size_t>(file.data() + file.size() - begin))) {
        Fail("a tensor's data lies outside the file");
      }
      unsigned sum = 0;
      for (char c : tensor->data) sum += static_cast<unsigned char>(c);
      for (int64_t d : tensor->shape) sum += static_cast<unsigned>(d);
      if (sum == 0xfeedfaceu) std::fprintf(stderr, "%u\n", sum);
    }
    if (kinds != 1) Fail("an entry reads as more or fewer than one kind");
  }
}

}  // namespace
}  // namespace stoker::trainer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::trainer;
  if (size > kMaxFileBytes) return -1;  // not added to the corpus
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes, /*sealed=*/false);
  if (size >= kCheckpointHeaderBytes) Check(SealedCheckpointForTesting(bytes), /*sealed=*/true);
  return 0;
}
