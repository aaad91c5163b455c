// Tests the --model reader and graph builder on hostile archives: a small CNN's archive
// (fuzz/seeds/export_archive/tiny_net.pt2) loads, and each one-fault edit of it (of the zip,
// a JSON record, a weight's metadata or bytes, the program's graph) is refused with
// kExitUsage naming the file and the fault, never a crash.
#include "trainer/graph/export_archive.h"

#include <caffe2/serialize/inline_container.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/graph_model.h"

namespace stoker::trainer {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

constexpr char kPath[] = "edited.pt2";

std::string ReadSeed() {
  const std::string path =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/stoker/fuzz/seeds/export_archive/tiny_net.pt2");
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The archive's records by name (without the archive's top folder).
std::map<std::string, std::string> Records(const std::string& archive) {
  std::istringstream in(archive);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::map<std::string, std::string> records;
  for (const std::string& name : reader.getAllRecords()) {
    auto [data, size] = reader.getRecord(name);
    records[name] = std::string(static_cast<const char*>(data.get()), size);
  }
  return records;
}

// An archive of `records`; the one named `compressed` deflated.
std::string Archive(const std::map<std::string, std::string>& records,
                    const std::string& compressed = "") {
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    archive.append(static_cast<const char*>(data), size);
    return size;
  });
  for (const auto& [name, bytes] : records) {
    if (name == ".data/version" || name == ".data/serialization_id") continue;  // the writer's
    writer.writeRecord(name, bytes.data(), bytes.size(), /*compress=*/name == compressed);
  }
  writer.writeEndOfFile();
  return archive;
}

// The seed with the JSON record `name` edited by `edit`.
std::string EditJson(const std::string& name, const std::function<void(json&)>& edit) {
  std::map<std::string, std::string> records = Records(ReadSeed());
  json parsed = json::parse(records.at(name));
  edit(parsed);
  records[name] = parsed.dump();
  return Archive(records);
}

// The seed with conv.weight's tensor_meta edited by `edit`.
std::string EditWeightMeta(const std::function<void(json&)>& edit) {
  return EditJson("data/weights/train_weights_config.json",
                  [&](json& config) { edit(config["config"]["conv.weight"]["tensor_meta"]); });
}

void ExpectRefused(const absl::Status& status, const std::string& message) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(ExitCodeOf(status), kExitUsage) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("--model=", kPath)));
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
}

TEST(ExportArchiveTest, SeedArchiveLoadsAndBuilds) {
  absl::StatusOr<ExportArchive> archive = ParseExportArchive(kPath, ReadSeed());
  ASSERT_TRUE(archive.ok()) << archive.status();
  EXPECT_EQ(archive->weights.size(), 8);
  EXPECT_TRUE(archive->eval.has_value());
  absl::StatusOr<std::shared_ptr<GraphModel>> model = GraphModel::FromArchive(*archive, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->num_classes(), 2);
  // The records survive the round trip this test's edits make.
  EXPECT_TRUE(ParseExportArchive(kPath, Archive(Records(ReadSeed()))).ok());
}

struct ArchiveCase {
  const char* what;
  std::function<std::string()> archive;
  const char* message;
};

TEST(ExportArchiveTest, MalformedArchivesAreRefusedByName) {
  const std::vector<ArchiveCase> cases = {
      {"not a zip", [] { return std::string("PK\x03\x04 and then nothing of a zip"); },
       "not a readable torch.export archive"},
      {"truncated", [] { return ReadSeed().substr(0, 20000); },
       "not a readable torch.export archive"},
      {"another archive format",
       [] {
         auto records = Records(ReadSeed());
         records["archive_format"] = "pt3";
         return Archive(records);
       },
       "archive_format is 'pt3'"},
      {"a weight's record missing",
       [] {
         auto records = Records(ReadSeed());
         records.erase("data/weights/weight_0");
         return Archive(records);
       },
       "the archive has no data/weights/weight_0"},
      {"a compressed record larger than the archive",
       [] {
         auto records = Records(ReadSeed());
         records["data/weights/weight_0"] = std::string(8 << 20, '\0');
         return Archive(records, "data/weights/weight_0");
       },
       "data/weights/weight_0 claims 8388608 bytes, more than the archive's"},
      {"a program that is not JSON",
       [] {
         auto records = Records(ReadSeed());
         records["models/train.json"] = "{\"graph_module\": ";
         return Archive(records);
       },
       "models/train.json is not a JSON object"},
      {"torch_version a number",
       [] { return EditJson("models/train.json", [](json& p) { p["torch_version"] = 2.11; }); },
       "exported by torch (unknown)"},
      {"schema version a string",
       [] {
         return EditJson("models/train.json", [](json& p) { p["schema_version"]["major"] = "8"; });
       },
       "export schema version -1"},
      {"graph_module a list",
       [] {
         return EditJson("models/train.json", [](json& p) { p["graph_module"] = json::array(); });
       },
       "models/train.json has no graph_module"},
      {"weights config without config",
       [] {
         return EditJson("data/weights/train_weights_config.json",
                         [](json& c) { c["config"] = 3; });
       },
       "train_weights_config.json has no config"},
      {"tensor_meta a number",
       [] {
         return EditJson("data/weights/train_weights_config.json",
                         [](json& c) { c["config"]["conv.weight"]["tensor_meta"] = 5; });
       },
       "weight conv.weight: malformed entry in the weights config"},
      {"path_name a number",
       [] {
         return EditJson("data/weights/train_weights_config.json",
                         [](json& c) { c["config"]["conv.weight"]["path_name"] = 0; });
       },
       "weight conv.weight: malformed entry"},
      {"a pickled weight",
       [] {
         return EditJson("data/weights/train_weights_config.json",
                         [](json& c) { c["config"]["conv.weight"]["use_pickle"] = true; });
       },
       "weight conv.weight: a pickled tensor subclass"},
      {"dtype a string", [] { return EditWeightMeta([](json& m) { m["dtype"] = "float"; }); },
       "weight conv.weight: its dtype is not a dtype code"},
      {"unknown dtype", [] { return EditWeightMeta([](json& m) { m["dtype"] = 99; }); },
       "unknown dtype code 99"},
      {"sizes missing", [] { return EditWeightMeta([](json& m) { m.erase("sizes"); }); },
       "sizes are not a list"},
      {"a symbolic size",
       [] { return EditWeightMeta([](json& m) {
              m["sizes"][0] = {{"as_expr", "s0"}};
            }); },
       "a size is symbolic"},
      {"a negative size",
       [] { return EditWeightMeta([](json& m) { m["sizes"][0]["as_int"] = -4; }); },
       "are not a view of a storage"},
      {"a negative stride",
       [] { return EditWeightMeta([](json& m) { m["strides"][0]["as_int"] = -27; }); },
       "are not a view of a storage"},
      {"fewer strides than sizes",
       [] { return EditWeightMeta([](json& m) { m["strides"].erase(0); }); },
       "it has 4 sizes and 3 strides"},
      {"an overflowing view",
       [] {
         return EditWeightMeta([](json& m) {
           m["sizes"][0]["as_int"] = int64_t{1} << 62;
           m["strides"][0]["as_int"] = 4;
         });
       },
       "are not a view of a storage"},
      {"an offset past the stored bytes",
       [] { return EditWeightMeta([](json& m) { m["storage_offset"]["as_int"] = 1; }); },
       "432 bytes stored, the tensor needs 109 of 4 bytes"},
      {"a huge offset",
       [] {
         return EditWeightMeta([](json& m) { m["storage_offset"]["as_int"] = int64_t{1} << 62; });
       },
       "bytes stored, the tensor needs"},
      {"a broadcast view larger than the archive",
       [] {
         return EditWeightMeta([](json& m) {
           m["sizes"][0]["as_int"] = int64_t{1} << 40;
           m["strides"][0]["as_int"] = 0;
         });
       },
       "spans 118747255799808, more than the archive's"},
      {"a negative offset",
       [] { return EditWeightMeta([](json& m) { m["storage_offset"]["as_int"] = -1; }); },
       "are not a view of a storage"},
  };
  for (const ArchiveCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExpectRefused(ParseExportArchive(kPath, c.archive()).status(), c.message);
  }
}

struct ProgramCase {
  const char* what;
  std::function<void(json&)> edit;  // of the training program's graph_module
  const char* message;
};

TEST(ExportArchiveTest, MalformedProgramsAreRefusedByName) {
  const std::vector<ProgramCase> cases = {
      {"no signature", [](json& g) { g.erase("signature"); }, "has no graph or signature"},
      {"signature a number", [](json& g) { g["signature"] = 5; }, "malformed program"},
      {"an empty input spec", [](json& g) { g["signature"]["input_specs"][0] = json::object(); },
       "an input of kind ''"},
      {"an input spec without its arg",
       [](json& g) { g["signature"]["input_specs"][0]["parameter"].erase("arg"); },
       "malformed program"},
      {"input sizes missing",
       [](json& g) {
         for (auto& [name, meta] : g["graph"]["tensor_values"].items()) meta.erase("sizes");
       },
       "is not one NCHW image batch"},
      {"a node input without its arg",
       [](json& g) { g["graph"]["nodes"][0]["inputs"][0].erase("arg"); },
       "node conv2d (torch.ops.aten.conv2d.default): an input without its argument"},
      {"a node whose outputs are a string",
       [](json& g) { g["graph"]["nodes"][0]["outputs"] = "conv2d"; }, "malformed program"},
      {"a node without outputs", [](json& g) { g["graph"]["nodes"][0]["outputs"] = json::array(); },
       "the node has 0 outputs"},
      {"nodes an object", [](json& g) { g["graph"]["nodes"] = json::object(); },
       "is never computed"},
      {"a node a number", [](json& g) { g["graph"]["nodes"][0] = 7; }, "malformed program"},
  };
  absl::StatusOr<ExportArchive> seed = ParseExportArchive(kPath, ReadSeed());
  ASSERT_TRUE(seed.ok()) << seed.status();
  for (const ProgramCase& c : cases) {
    SCOPED_TRACE(c.what);
    ExportArchive archive = *seed;
    c.edit(archive.train);
    ExpectRefused(GraphModel::FromArchive(archive, {}).status(), c.message);
  }
}

}  // namespace
}  // namespace stoker::trainer
