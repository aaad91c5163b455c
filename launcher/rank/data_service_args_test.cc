// Tests of --data_service_args parsing: splitting on spaces, the words that are refused,
// and the messages that name the flag and the word.
#include "launcher/rank/data_service_args.h"

#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::stoker::testing::IsOkAndHolds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(DataServiceArgsTest, SplitsOnSpacesAndDropsEmptyWords) {
  EXPECT_THAT(ParseDataServiceArgs("  --bad_files=fail   -threads=2 --train_dir=/data/a=b "),
              IsOkAndHolds(ElementsAre("--bad_files=fail", "-threads=2", "--train_dir=/data/a=b")));
}

TEST(DataServiceArgsTest, AnEmptyValueGivesNoWords) {
  for (const char* value : {"", "   "}) {
    EXPECT_THAT(ParseDataServiceArgs(value), IsOkAndHolds(IsEmpty())) << "'" << value << "'";
  }
}

TEST(DataServiceArgsTest, TheDataSeedAndDatasetMayBeSet) {
  EXPECT_THAT(
      ParseDataServiceArgs("--data_seed=7 --dataset=packed --jpeg_decode=exact"),
      IsOkAndHolds(ElementsAre("--data_seed=7", "--dataset=packed", "--jpeg_decode=exact")));
}

TEST(DataServiceArgsTest, WordsThatAreNotFlagsWithValuesAreRefusedByName) {
  // "--bad_files fail" is two words: a flag without its value, then a bare word.
  for (const char* value :
       {"synthetic", "--bad_files fail", "--bad_files", "--", "-", "--=3", "--threads=1 stray"}) {
    absl::StatusOr<std::vector<std::string>> args = ParseDataServiceArgs(value);
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(std::string(args.status().message()), HasSubstr("--data_service_args: '")) << value;
    EXPECT_THAT(std::string(args.status().message()), HasSubstr("--name=value")) << value;
  }
}

TEST(DataServiceArgsTest, WhatTheStarterDecidesIsRefused) {
  for (const char* value : {"--socket=/x", "--job_id=k", "-node_id=3", "--threads=2 --node_id=1",
                            "--owner_record=/tmp/x", "--remove_socket_dir=false"}) {
    absl::StatusOr<std::vector<std::string>> args = ParseDataServiceArgs(value);
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(std::string(args.status().message()),
                HasSubstr("--data_service_args must not set --"))
        << value;
  }
}

TEST(DataServiceArgsTest, FlagNameOfReadsBothDashForms) {
  EXPECT_EQ(FlagNameOf("--threads=2"), "threads");
  EXPECT_EQ(FlagNameOf("-threads=2"), "threads");
  EXPECT_EQ(FlagNameOf("--threads"), "threads");
  EXPECT_EQ(FlagNameOf("threads=2"), "");
  EXPECT_EQ(FlagNameOf("-"), "");
}

}  // namespace
}  // namespace stoker::launcher
