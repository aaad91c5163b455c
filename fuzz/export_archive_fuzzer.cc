// libFuzzer target for the --model reader and graph builder: whatever bytes a .pt2 file
// holds, ParseExportArchive() and GraphModel::FromArchive() either refuse them (a Status
// tagged kExitUsage naming the file) or build a model; never a crash, a hang or a
// sanitizer report. An input is one of two kinds, by its first byte:
// - 'P': the archive's bytes as they are, for libtorch's zip reader and what follows;
// - else a bundle of records (name, NUL, 4-byte little-endian length, content; a short
//   last record takes what is left), which the target writes into a well-formed archive
//   (valid zip, checksums) so that mutations reach the JSON records, the weights and the
//   graph builder instead of stopping at a checksum.
// Seeds: fuzz/seeds/export_archive (fuzz/seeds/make_seeds.py: archives of a small CNN and
// of a plain torch.export.save, each as itself and as a bundle). Built as
// //fuzz:export_archive_fuzzer; tools/fuzz.sh runs it under libFuzzer with ASan and UBSan.
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "trainer/graph/export_archive.h"
#include "trainer/graph/graph_model.h"

namespace stoker::trainer {
namespace {

constexpr char kPath[] = "fuzz.pt2";

[[noreturn]] void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "export_archive_fuzzer: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

void CheckRefusal(const absl::Status& status) {
  if (ExitCodeOf(status) != kExitUsage ||
      !absl::StartsWith(status.message(), absl::StrCat("--model=", kPath))) {
    Fail("a refusal without kExitUsage or the file's name", status);
  }
}

// The archive a bundle of records describes (the file comment's format).
std::string ArchiveOfBundle(const std::string& bundle) {
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    archive.append(static_cast<const char*>(data), size);
    return size;
  });
  size_t at = 0;
  while (at < bundle.size()) {
    const size_t name_end = bundle.find('\0', at);
    if (name_end == std::string::npos) break;
    const std::string name = bundle.substr(at, name_end - at);
    at = name_end + 1;
    uint32_t length = 0;
    std::memcpy(&length, bundle.data() + at, std::min<size_t>(4, bundle.size() - at));
    at = std::min(bundle.size(), at + 4);
    const size_t taken = std::min<size_t>(length, bundle.size() - at);
    try {
      writer.writeRecord(name, bundle.data() + at, taken);
    } catch (const std::exception&) {  // a name written twice, or one the writer refuses
    }
    at += taken;
  }
  writer.writeEndOfFile();
  return archive;
}

void Check(const std::string& bytes) {
  absl::StatusOr<ExportArchive> archive = ParseExportArchive(kPath, bytes);
  if (!archive.ok()) return CheckRefusal(archive.status());
  absl::StatusOr<std::shared_ptr<GraphModel>> model = GraphModel::FromArchive(*archive, {});
  if (!model.ok()) return CheckRefusal(model.status());
}

}  // namespace
}  // namespace stoker::trainer

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  stoker::trainer::Check(
      !input.empty() && input[0] == 'P' ? input : stoker::trainer::ArchiveOfBundle(input));
  return 0;
}
