// libFuzzer target for the --init_weights reader: whatever bytes a weights file holds,
// ParseStateDictFile() either refuses them (InvalidArgument tagged kExitUsage, naming the
// file) or returns CPU tensors whose bytes all lay inside the file. torch.save's format is
// refused here as a run without --allow_pickle refuses it (Note [Pickled state dicts]), so
// what is fuzzed is the safetensors reader and the format sniffing. Seeds:
// fuzz/seeds/safetensors (fuzz/seeds/make_seeds.py). Built as //fuzz:safetensors_fuzzer;
// tools/fuzz.sh runs it under libFuzzer with ASan and UBSan.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/exit_codes.h"
#include "trainer/nn/state_dict_file.h"

namespace stoker::trainer {
namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "safetensors_fuzzer: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

void Check(const std::string& bytes) {
  absl::StatusOr<std::map<std::string, at::Tensor>> state =
      ParseStateDictFile("fuzz.safetensors", bytes);
  if (!state.ok()) {
    if (state.status().code() != absl::StatusCode::kInvalidArgument ||
        ExitCodeOf(state.status()) != kExitUsage ||
        !absl::StartsWith(state.status().message(), "--init_weights=fuzz.safetensors: ")) {
      Fail("a refusal that is not InvalidArgument with kExitUsage naming the file", state.status());
    }
    return;
  }
  size_t total = 0;
  for (const auto& [name, tensor] : *state) {
    if (!tensor.defined() || !tensor.device().is_cpu() || !tensor.is_contiguous())
      Fail("an accepted tensor is not a contiguous CPU tensor", absl::OkStatus());
    total += tensor.nbytes();
  }
  if (total > bytes.size()) Fail("the tensors hold more bytes than the file", absl::OkStatus());
}

}  // namespace
}  // namespace stoker::trainer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::trainer::Check(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
