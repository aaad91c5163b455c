// Tests of the operator table: each group sorted, no operator listed twice, every entry an
// operator (or overload) this libtorch registers; and the refusal, by node, operator and
// reason, of operators outside it.
#include "trainer/graph/operator_allowlist.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// "aten::add.Tensor" -> {"aten::add", "Tensor"}; "aten::relu" -> {"aten::relu", ""}.
c10::OperatorName EntryName(absl::string_view entry) {
  std::vector<std::string> parts = absl::StrSplit(entry, absl::MaxSplits('.', 1));
  return c10::OperatorName(parts[0], parts.size() > 1 ? parts[1] : "");
}

// A node `name` calling `target` with `inputs` (argument name -> Argument).
absl::StatusOr<GraphNode> Node(const std::string& name, const std::string& target,
                               const json& inputs) {
  static auto* const kKeep = new std::vector<std::unique_ptr<json>>();
  json node = {{"name", name}, {"target", target}, {"inputs", json::array()}};
  for (const auto& [input, arg] : inputs.items())
    node["inputs"].push_back({{"name", input}, {"arg", arg}});
  node["outputs"] = json::array({{{"as_tensor", {{"name", name}}}}});
  kKeep->push_back(std::make_unique<json>(std::move(node)));
  return ReadGraphNode(*kKeep->back(), "m.pt2");
}

TEST(OperatorAllowlistTest, GroupsAreSortedAndSayWhy) {
  for (const AllowedOperatorGroup& group : AllowedOperatorGroups()) {
    EXPECT_FALSE(group.why.empty());
    EXPECT_FALSE(group.operators.empty()) << group.why;
    EXPECT_TRUE(std::is_sorted(group.operators.begin(), group.operators.end())) << group.why;
  }
}

TEST(OperatorAllowlistTest, NoOperatorIsListedTwice) {
  std::set<absl::string_view> seen;
  std::set<absl::string_view> names;
  for (const AllowedOperatorGroup& group : AllowedOperatorGroups()) {
    for (absl::string_view op : group.operators) {
      EXPECT_TRUE(seen.insert(op).second) << op << " is listed twice";
      if (!absl::StrContains(op, '.')) names.insert(op);
    }
  }
  // An overload is not listed beside its whole operator.
  for (absl::string_view op : seen) {
    if (absl::StrContains(op, '.')) {
      EXPECT_EQ(names.count(EntryName(op).name), 0u) << op << " is covered by its name";
    }
  }
}

TEST(OperatorAllowlistTest, EveryEntryIsAnOperatorOfThisLibtorch) {
  std::set<std::string> registered;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames())
    registered.insert(name.name);
  for (const AllowedOperatorGroup& group : AllowedOperatorGroups()) {
    for (absl::string_view op : group.operators) {
      ASSERT_TRUE(absl::StartsWith(op, "aten::")) << op;
      const c10::OperatorName name = EntryName(op);
      if (name.overload_name.empty()) {
        EXPECT_EQ(registered.count(name.name), 1u) << op << " is no operator of this libtorch";
      } else {
        EXPECT_TRUE(c10::Dispatcher::singleton().findSchema(name).has_value())
            << op << " is no overload of this libtorch";
      }
    }
  }
}

TEST(OperatorAllowlistTest, AdmitsListedOperatorsAndTheirOverloads) {
  EXPECT_TRUE(IsAllowedOperator({"aten::conv2d", ""}));
  EXPECT_TRUE(IsAllowedOperator({"aten::add", "Tensor"}));
  EXPECT_TRUE(IsAllowedOperator({"aten::copy_", ""}));
  EXPECT_TRUE(IsAllowedOperator({"aten::where", "self"}));
  EXPECT_FALSE(IsAllowedOperator({"aten::where", ""})) << "the nonzero form waits on the device";
  EXPECT_FALSE(IsAllowedOperator({"aten::from_file", ""}));
  EXPECT_FALSE(IsAllowedOperator({"aten::conv2d_fake", ""}));
}

TEST(OperatorAllowlistTest, RefusalNamesTheNodeTheOperatorAndWhy) {
  struct Case {
    const char* target;
    c10::OperatorName name;
    const char* why;
  };
  const std::vector<Case> cases = {
      {"torch.ops.aten.from_file.default", {"aten::from_file", ""}, "it reads or writes files"},
      {"torch.ops.aten._local_scalar_dense.default",
       {"aten::_local_scalar_dense", ""},
       "waits on the device"},
      {"torch.ops.aten.nonzero.default", {"aten::nonzero", ""}, "waits on the device"},
      {"torch.ops.aten.record_stream.default",
       {"aten::record_stream", ""},
       "it works on devices, streams or events"},
      {"torch.ops.aten.set_.source_Storage",
       {"aten::set_", "source_Storage"},
       "it reaches a tensor's storage or memory"},
      {"torch.ops.aten.as_strided.default",
       {"aten::as_strided", ""},
       "not one of the reviewed operators"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<GraphNode> node = Node("n", c.target, json::object());
    ASSERT_TRUE(node.ok()) << node.status();
    absl::Status refused = CheckAllowedOperator(*node, c.name);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << c.target;
    const std::string message(refused.message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("m.pt2: node n (", c.target, "): ", c.name.name,
                                                " is not among the operators Stoker runs: ")));
    EXPECT_THAT(message, HasSubstr(c.why));
    EXPECT_THAT(message, HasSubstr("trainer/graph/operator_allowlist.cc"));
  }
}

TEST(OperatorAllowlistTest, PinnedMemoryIsRefused) {
  absl::StatusOr<GraphNode> pinned =
      Node("empty", "torch.ops.aten.empty.memory_format", {{"pin_memory", {{"as_bool", true}}}});
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_THAT(
      std::string(CheckAllowedOperator(*pinned, {"aten::empty", "memory_format"}).message()),
      HasSubstr("node empty (torch.ops.aten.empty.memory_format): aten::empty with "
                "pin_memory=True"));
  absl::StatusOr<GraphNode> plain =
      Node("empty", "torch.ops.aten.empty.memory_format", {{"pin_memory", {{"as_bool", false}}}});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(CheckAllowedOperator(*plain, {"aten::empty", "memory_format"}).ok());
}

}  // namespace
}  // namespace stoker::trainer
