#include "common/flag_binding.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "common/flag_value.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, binding_count, 3, "A count.");
ABSL_FLAG(std::string, binding_fruit, "pear", "A fruit.");
ABSL_FLAG(int, binding_timeout_s, 5, "A timeout.");

namespace stoker {
namespace {

using ::stoker::testing::IsOk;
using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

enum class Fruit { kApple, kPear };

absl::StatusOr<Fruit> ParseFruit(absl::string_view name) {
  return ParseFlagChoice<Fruit>("binding_fruit", name,
                                {{"apple", Fruit::kApple}, {"pear", Fruit::kPear}});
}

struct Options {
  int64_t count = 0;  // a field of another type than its flag's
  Fruit fruit = Fruit::kApple;
  absl::Duration timeout;
};

TEST(FlagBindingTest, SetsEachFieldFromItsFlag) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_binding_count, 7);
  Options o;
  EXPECT_THAT(ApplyFlagBindings({
                  {FLAGS_binding_count, &o.count},
                  {FLAGS_binding_fruit, &o.fruit, ParseFruit},
                  {FLAGS_binding_timeout_s, &o.timeout, FlagSeconds},
              }),
              IsOk());
  EXPECT_EQ(o.count, 7);
  EXPECT_EQ(o.fruit, Fruit::kPear);
  EXPECT_EQ(o.timeout, absl::Seconds(5));
}

TEST(FlagBindingTest, StopsAtTheFirstValueThatDoesNotParse) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_binding_fruit, "plum");
  Options o;
  EXPECT_THAT(ApplyFlagBindings({
                  {FLAGS_binding_fruit, &o.fruit, ParseFruit},
                  {FLAGS_binding_count, &o.count},
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--binding_fruit=plum: use apple or pear")));
  EXPECT_EQ(o.fruit, Fruit::kApple);
  EXPECT_EQ(o.count, 0);
}

}  // namespace
}  // namespace stoker
