// Tests of UniqueName: the prefix is kept, and no two calls give the same name.
#include "common/testing/unique_name.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::testing {
namespace {

using ::testing::MatchesRegex;

TEST(UniqueNameTest, KeepsThePrefixThenRandomDigitsAndACounter) {
  EXPECT_THAT(UniqueName("/stoker.test"), MatchesRegex("/stoker\\.test\\.[0-9a-f]{16}\\.[0-9]+"));
}

TEST(UniqueNameTest, EveryCallGivesANewName) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) names.insert(UniqueName("same"));
  EXPECT_EQ(names.size(), 100u);
}

}  // namespace
}  // namespace stoker::testing
