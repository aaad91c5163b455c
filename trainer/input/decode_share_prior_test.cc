// The decode share prior file: written and read back by key, other keys kept, a corrupt
// file and a stale entry ignored with a reason, and the flag's paths.
#include "trainer/input/decode_share_prior.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

class DecodeSharePriorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "cache" / "priors.tsv").string();
  }
  void WriteText(const std::string& text) {
    std::filesystem::create_directories(dir_ / "cache");
    std::ofstream(path_) << text;
  }

  std::filesystem::path dir_;
  std::string path_;
  const absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

DecodeSharePriorSetting ResNet18() {
  DecodeSharePriorSetting s;
  s.host = "node 7";
  s.dataset_size = 12000;
  s.num_classes = 100;
  s.model = "resnet18";
  s.batch_size = 256;
  s.image_size = 224;
  return s;
}

TEST_F(DecodeSharePriorTest, KeyNamesEverySettingInOneLine) {
  DecodeSharePriorSetting s = ResNet18();
  EXPECT_EQ(DecodeSharePriorKey(s),
            "host=node_7 samples=12000 classes=100 model=resnet18 batch=256 image=224 ranks=1 "
            "mode=train");
  s.data_only = true;
  EXPECT_NE(DecodeSharePriorKey(s), DecodeSharePriorKey(ResNet18()));
  s = ResNet18();
  s.batch_size = 128;
  EXPECT_NE(DecodeSharePriorKey(s), DecodeSharePriorKey(ResNet18()));
}

TEST_F(DecodeSharePriorTest, AMissingFileIsNoPriorAndNoComplaint) {
  const DecodeSharePriorLookup lookup = ReadDecodeSharePrior(path_, "k", now_);
  EXPECT_FALSE(lookup.prior.has_value());
  EXPECT_EQ(lookup.ignored, "");
}

TEST_F(DecodeSharePriorTest, WrittenEntriesReadBackByKeyAndOthersAreKept) {
  const std::string train = DecodeSharePriorKey(ResNet18());
  DecodeSharePriorSetting data = ResNet18();
  data.data_only = true;
  const std::string data_only = DecodeSharePriorKey(data);
  ASSERT_TRUE(WriteDecodeSharePrior(path_, train, {0.25, 16700, now_}).ok());
  ASSERT_TRUE(WriteDecodeSharePrior(path_, data_only, {0.75, 33488, now_}).ok());
  // A later write of the same key replaces its entry.
  ASSERT_TRUE(WriteDecodeSharePrior(path_, train, {0.375, 16900, now_ + absl::Hours(1)}).ok());

  DecodeSharePriorLookup lookup = ReadDecodeSharePrior(path_, train, now_ + absl::Hours(2));
  ASSERT_TRUE(lookup.prior.has_value()) << lookup.ignored;
  EXPECT_DOUBLE_EQ(lookup.prior->share, 0.375);
  EXPECT_DOUBLE_EQ(lookup.prior->images_per_second, 16900);
  EXPECT_EQ(lookup.prior->recorded, now_ + absl::Hours(1));
  lookup = ReadDecodeSharePrior(path_, data_only, now_);
  ASSERT_TRUE(lookup.prior.has_value());
  EXPECT_DOUBLE_EQ(lookup.prior->share, 0.75);
  lookup = ReadDecodeSharePrior(path_, "host=other", now_);
  EXPECT_FALSE(lookup.prior.has_value());
  EXPECT_EQ(lookup.ignored, "");
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "cache")) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "priors.tsv");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(DecodeSharePriorTest, ACorruptFileIsIgnoredWithItsReasonAndReplacedOnWrite) {
  const std::string key = DecodeSharePriorKey(ResNet18());
  for (const std::string& text :
       {std::string("garbage\n"),
        std::string("# stoker gpu decode share priors 1\n") + key + "\t1.5\t100\t1800000000\n",
        std::string("# stoker gpu decode share priors 1\n") + key + "\t0.25\t100\n",
        std::string("# stoker gpu decode share priors 9\n") + key + "\t0.25\t100\t1800000000\n"}) {
    WriteText(text);
    const DecodeSharePriorLookup lookup = ReadDecodeSharePrior(path_, key, now_);
    EXPECT_FALSE(lookup.prior.has_value()) << text;
    EXPECT_NE(lookup.ignored.find(path_), std::string::npos) << lookup.ignored;
  }
  ASSERT_TRUE(WriteDecodeSharePrior(path_, key, {0.5, 100, now_}).ok());
  const DecodeSharePriorLookup lookup = ReadDecodeSharePrior(path_, key, now_);
  ASSERT_TRUE(lookup.prior.has_value()) << lookup.ignored;
  EXPECT_DOUBLE_EQ(lookup.prior->share, 0.5);
}

TEST_F(DecodeSharePriorTest, AStaleEntryIsIgnoredWithItsAge) {
  const std::string key = DecodeSharePriorKey(ResNet18());
  ASSERT_TRUE(WriteDecodeSharePrior(path_, key, {0.25, 100, now_}).ok());
  DecodeSharePriorLookup lookup =
      ReadDecodeSharePrior(path_, key, now_ + kDecodeSharePriorMaxAge + absl::Hours(24));
  EXPECT_FALSE(lookup.prior.has_value());
  EXPECT_NE(lookup.ignored.find("stale"), std::string::npos) << lookup.ignored;
  EXPECT_NE(lookup.ignored.find("31.0 days"), std::string::npos) << lookup.ignored;
  // Dated in the future: a clock that jumped; not trusted either.
  lookup = ReadDecodeSharePrior(path_, key, now_ - absl::Hours(48));
  EXPECT_FALSE(lookup.prior.has_value());
  EXPECT_NE(lookup.ignored.find("stale"), std::string::npos) << lookup.ignored;
  // Within the age: used.
  EXPECT_TRUE(ReadDecodeSharePrior(path_, key, now_ + absl::Hours(24 * 29)).prior.has_value());
}

TEST_F(DecodeSharePriorTest, AnUnwritablePlaceIsAnErrorNamingThePath) {
  WriteText("");
  // A path below a regular file cannot be created.
  const std::string below_a_file = path_ + "/priors.tsv";
  const absl::Status status = WriteDecodeSharePrior(below_a_file, "k", {0.25, 1, now_});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(below_a_file), std::string::npos) << status;
}

TEST(DecodeSharePriorPathTest, TheFlagNamesAFileNoneOrTheCacheDefault) {
  EXPECT_EQ(DecodeSharePriorPath("none", "/x", "/home/u"), "");
  EXPECT_EQ(DecodeSharePriorPath("/data/train/.priors", "/x", "/home/u"), "/data/train/.priors");
  EXPECT_EQ(DecodeSharePriorPath("auto", "/x", "/home/u"), "/x/stoker/gpu_decode_share_priors.tsv");
  EXPECT_EQ(DecodeSharePriorPath("auto", "", "/home/u"),
            "/home/u/.cache/stoker/gpu_decode_share_priors.tsv");
  EXPECT_EQ(DecodeSharePriorPath("auto", nullptr, nullptr), "");
}

}  // namespace
}  // namespace stoker::trainer
