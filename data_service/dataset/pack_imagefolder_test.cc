// Runs the pack_imagefolder binary: it packs a folder into an index and shards that
// PackedDataset reads with the ImageFolder's order and labels, and it exits non-zero with
// a message for bad flags and a missing folder; with --max_short_side it stores large
// images shrunk, from which training and evaluation samples load.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/dataset/packed_dataset.h"
#include "data_service/image/decode.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::TempDir;

namespace fs = std::filesystem;

std::string BinaryPath() {
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    const std::string path = absl::StrCat(srcdir, "/stoker/data_service/dataset/pack_imagefolder");
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "data_service/dataset/pack_imagefolder";
}

// Runs the tool; returns its exit status and, in `output`, what it printed.
int RunTool(const std::string& args, std::string* output) {
  const std::string command = absl::StrCat("'", BinaryPath(), "' ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t got;
  output->clear();
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, got);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Packs the folder `root` into `index` with the further `flags`; the tool must succeed.
// `output`: what it printed.
void Pack(const std::string& root, const std::string& index, const std::string& flags,
          std::string* output) {
  ASSERT_EQ(RunTool(absl::StrCat("--input=", root, " --output=", index, " ", flags), output), 0)
      << *output;
}

TEST(PackImagefolderTest, PacksAFolderThatReadsBackInTheSameOrder) {
  ASSERT_OK_AND_ASSIGN(const TempDir source, TempDir::Create("tool_source"));
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(source.Join(absl::StrCat("c", c)));
    for (int i = 0; i < 5; ++i) {
      ASSERT_OK(test_util::WriteJpeg(source.Join(absl::StrCat("c", c, "/", i, ".jpg")), 48, 32,
                                     test_util::PhotoLikeImage(48, 32, c * 10 + i)));
    }
  }
  ASSERT_OK_AND_ASSIGN(const TempDir out, TempDir::Create("tool_output"));
  std::string output;
  ASSERT_NO_FATAL_FAILURE(
      Pack(source.path(), out.Join("train.stkpack"), "--shard_bytes=4096", &output));
  EXPECT_NE(output.find("15 samples"), std::string::npos) << output;
  auto folder = ImageFolderDataset::Open(source.path());
  auto packed = PackedDataset::Open(out.Join("train.stkpack"));
  ASSERT_OK(folder);
  ASSERT_OK(packed);
  EXPECT_GT((*packed)->shard_count(), 1);
  ASSERT_EQ((*packed)->size(), 15);
  for (int64_t i = 0; i < 15; ++i) {
    EXPECT_EQ((*packed)->Label(i), (*folder)->Label(i));
    EXPECT_EQ(source.Join((*packed)->SampleName(i)), (*folder)->samples()[i].path);
  }
}

TEST(PackImagefolderTest, MaxShortSideStoresLargeImagesShrunkAndTheyTrainAndEvaluate) {
  ASSERT_OK_AND_ASSIGN(const TempDir root_temp, TempDir::Create("shrink_source"));
  const std::string root = root_temp.path();
  fs::create_directories(root + "/a");
  fs::create_directories(root + "/b");
  struct Image {
    const char* name;
    int width, height;
  };
  int seed = 0;
  for (const Image& image : {Image{"a/wide.jpg", 200, 150}, Image{"a/tall.jpg", 120, 160},
                             Image{"b/wide.png", 180, 90}, Image{"b/small.jpg", 60, 40}}) {
    const std::string path = absl::StrCat(root, "/", image.name);
    const std::vector<uint8_t> rgb = test_util::PhotoLikeImage(image.width, image.height, ++seed);
    ASSERT_OK(absl::EndsWith(path, ".png")
                  ? test_util::WritePng(path, image.width, image.height, rgb)
                  : test_util::WriteJpeg(path, image.width, image.height, rgb));
  }
  ASSERT_OK(test_util::WriteFileBytes(root + "/b/broken.jpg", {0xff, 0xd8, 0xff, 0x00}));
  ASSERT_OK_AND_ASSIGN(const TempDir out, TempDir::Create("shrink_output"));
  std::string output;
  ASSERT_NO_FATAL_FAILURE(
      Pack(root, out.Join("small.stkpack"), "--max_short_side=64 --quality=85", &output));
  EXPECT_NE(output.find("3 images shrunk to a shorter side of 64 (quality 85)"), std::string::npos)
      << output;
  auto folder = ImageFolderDataset::Open(root);
  auto packed = PackedDataset::Open(out.Join("small.stkpack"));
  ASSERT_OK(folder);
  ASSERT_OK(packed);
  ASSERT_EQ((*packed)->size(), 5);
  // Sizes as torchvision's Resize(64): short side 64, long side int(64 * long / short).
  const std::map<std::string, std::pair<int, int>> sizes = {{"a/wide.jpg", {85, 64}},
                                                            {"a/tall.jpg", {64, 85}},
                                                            {"b/wide.png", {128, 64}},
                                                            {"b/small.jpg", {60, 40}}};
  SampleScratch packed_scratch, folder_scratch;
  for (int64_t i = 0; i < 5; ++i) {
    const std::string name((*packed)->SampleName(i));
    EXPECT_EQ((*packed)->Label(i), (*folder)->Label(i));
    auto stored = (*packed)->ReadEncoded(i, packed_scratch);
    ASSERT_OK(stored);
    const std::vector<uint8_t> kept(stored->begin(), stored->end());
    auto original = (*folder)->ReadEncoded(i, folder_scratch);
    ASSERT_OK(original);
    const bool same =
        kept.size() == original->size() && std::equal(kept.begin(), kept.end(), original->begin());
    if (name == "b/broken.jpg" || name == "b/small.jpg") {
      EXPECT_TRUE(same) << name << " is stored as it is";
    }
    if (name == "b/broken.jpg") continue;
    auto decoded = image::DecodeImage(kept);
    ASSERT_OK(decoded) << name << ": " << decoded.status();
    EXPECT_EQ(decoded->width, sizes.at(name).first) << name;
    EXPECT_EQ(decoded->height, sizes.at(name).second) << name;
    // Training and evaluation samples load from the shrunk file.
    std::vector<uint8_t> sample(32 * 32 * 3);
    for (bool train : {true, false}) {
      const SampleOptions options{32, train, 7, 1};
      EXPECT_OK((*packed)->Load(i, options, packed_scratch, sample.data())) << name;
    }
  }
  EXPECT_NE(RunTool(absl::StrCat("--input=", root, " --output=", out.Join("q.stkpack"), " ",
                                 "--max_short_side=64 --quality=0"),
                    &output),
            0);
  EXPECT_NE(output.find("--quality"), std::string::npos) << output;
}

TEST(PackImagefolderTest, FailsWithAMessageForBadFlagsOrInput) {
  std::string output;
  EXPECT_NE(RunTool("", &output), 0);
  EXPECT_NE(output.find("--input"), std::string::npos) << output;
  EXPECT_NE(RunTool("--input=/nonexistent/stoker --output=/tmp/x.stkpack", &output), 0);
  EXPECT_NE(output.find("/nonexistent/stoker"), std::string::npos) << output;
  EXPECT_NE(RunTool("--input=/tmp --output=/nonexistent/dir/x.stkpack --shard_bytes=1", &output),
            0);
  EXPECT_NE(output.find("--shard_bytes"), std::string::npos) << output;
}

}  // namespace
}  // namespace stoker::data_service
