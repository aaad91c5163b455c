// Tests that KernelTrace records between Start and Stop and writes a Chrome trace that JSON
// readers take (on a machine without a GPU it holds no kernel records), that a second trace
// can follow the first in one process, that the host's operators and user scopes are in it
// only when asked, and that a path it cannot write is refused at Start.
#include "trainer/report/kernel_trace.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {
namespace {

using ::stoker::testing::IsOk;
using ::stoker::testing::StatusIs;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

TEST(KernelTraceTest, WritesAChromeTraceEachTime) {
  absl::StatusOr<stoker::testing::TempDir> dir = stoker::testing::TempDir::Create("kernel_trace");
  ASSERT_THAT(dir.status(), IsOk());
  for (const char* name : {"first.json", "second.json"}) {
    const std::string path = dir->Join(name);
    absl::StatusOr<std::unique_ptr<KernelTrace>> trace = KernelTrace::Start(path);
    ASSERT_THAT(trace.status(), IsOk());
    const at::Tensor product = at::mm(at::ones({64, 64}), at::ones({64, 64}));
    EXPECT_EQ(product[0][0].item<float>(), 64.0f);
    ASSERT_THAT((*trace)->Stop(), IsOk());
    const nlohmann::json written = ReadJson(path);
    ASSERT_FALSE(written.is_discarded()) << path << " is not JSON";
    EXPECT_TRUE(written.contains("traceEvents")) << path;
  }
}

// The names of the trace's events of category `category`.
std::vector<std::string> EventNames(const nlohmann::json& trace, const std::string& category) {
  std::vector<std::string> names;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == category) names.push_back(e.value("name", ""));
  }
  return names;
}

TEST(KernelTraceTest, HostOperatorsAndScopesOnlyWhenAsked) {
  absl::StatusOr<stoker::testing::TempDir> dir = stoker::testing::TempDir::Create("kernel_trace");
  ASSERT_THAT(dir.status(), IsOk());
  for (const bool host_ops : {true, false}) {
    const std::string path = dir->Join(host_ops ? "ops.json" : "gpu_only.json");
    absl::StatusOr<std::unique_ptr<KernelTrace>> trace = KernelTrace::Start(path, host_ops);
    ASSERT_THAT(trace.status(), IsOk());
    {
      RECORD_USER_SCOPE("m.pt2: node mm (torch.ops.aten.mm.default)");
      EXPECT_EQ(at::mm(at::ones({8, 8}), at::ones({8, 8}))[0][0].item<float>(), 8.0f);
    }
    ASSERT_THAT((*trace)->Stop(), IsOk());
    const nlohmann::json written = ReadJson(path);
    ASSERT_FALSE(written.is_discarded()) << path;
    const std::vector<std::string> ops = EventNames(written, "cpu_op");
    const std::vector<std::string> scopes = EventNames(written, "user_annotation");
    if (host_ops) {
      EXPECT_NE(std::find(ops.begin(), ops.end(), "aten::mm"), ops.end()) << path;
      EXPECT_NE(
          std::find(scopes.begin(), scopes.end(), "m.pt2: node mm (torch.ops.aten.mm.default)"),
          scopes.end())
          << path;
    } else {
      EXPECT_TRUE(ops.empty()) << path << ": " << ops.size() << " operator records";
      EXPECT_TRUE(scopes.empty()) << path;
    }
  }
}

TEST(KernelTraceTest, AnUnwritablePathIsRefusedBeforeRecording) {
  EXPECT_THAT(KernelTrace::Start("/nonexistent-dir/trace.json").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--kernel_trace=/nonexistent-dir/trace.json: cannot write the file"));
  // The profiler was not left on: a trace can start and be written.
  absl::StatusOr<stoker::testing::TempDir> dir = stoker::testing::TempDir::Create("kernel_trace");
  ASSERT_THAT(dir.status(), IsOk());
  absl::StatusOr<std::unique_ptr<KernelTrace>> trace = KernelTrace::Start(dir->Join("after.json"));
  ASSERT_THAT(trace.status(), IsOk());
  EXPECT_THAT((*trace)->Stop(), IsOk());
}

}  // namespace
}  // namespace stoker::trainer
