// Tests of the packed format: PackedWriter + PackedDataset round trip (labels, names,
// shards, bytes), PackImageFolder keeping ImageFolderDataset's order and labels, clear
// errors for damaged or mismatched index and shard files, and a writer that leaves
// nothing behind unless it finishes.
#include "data_service/dataset/packed_dataset.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "data_service/dataset/encoded_image.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/dataset/packed_format.h"
#include "data_service/dataset/packed_writer.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

std::string FreshDirectory(const std::string& name) {
  const std::string dir = test_util::TestDirectory(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<uint8_t> Jpeg(int seed) {
  return test_util::JpegBytes(40 + seed, 30, test_util::PhotoLikeImage(40 + seed, 30, seed));
}

// Writes a packed dataset of `n` JPEGs in 2 classes (sample i has label i % 2).
std::string WriteDataset(const std::string& dir, int n, uint64_t shard_bytes) {
  const std::string index = dir + "/data.stkpack";
  PackOptions options;
  options.shard_bytes = shard_bytes;
  auto writer = PackedWriter::Create(index, {"cats", "dogs"}, options);
  EXPECT_OK(writer);
  for (int i = 0; i < n; ++i) {
    EXPECT_OK(writer->Add(i % 2, absl::StrCat(i % 2 ? "dogs" : "cats", "/", i, ".jpg"), Jpeg(i)));
  }
  EXPECT_OK(writer->Finish());
  return index;
}

TEST(PackedDatasetTest, ReadsBackWhatWasWritten) {
  const std::string dir = FreshDirectory("packed_roundtrip");
  const std::string index = WriteDataset(dir, 10, 8000);
  auto dataset = PackedDataset::Open(index);
  ASSERT_OK(dataset);
  EXPECT_EQ((*dataset)->size(), 10);
  EXPECT_EQ((*dataset)->num_classes(), 2);
  EXPECT_EQ((*dataset)->classes(), (std::vector<std::string>{"cats", "dogs"}));
  EXPECT_GT((*dataset)->shard_count(), 2);
  EXPECT_TRUE(fs::exists(dir + "/" + PackedShardFileName("data.stkpack", 0)));
  EXPECT_TRUE(fs::exists(dir + "/data.stkpack-00000.shard"));
  SampleScratch scratch, reference_scratch;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ((*dataset)->Label(i), i % 2);
    EXPECT_EQ((*dataset)->SampleName(i), absl::StrCat(i % 2 ? "dogs" : "cats", "/", i, ".jpg"));
    EXPECT_TRUE(absl::StrContains((*dataset)->Describe(i), (*dataset)->SampleName(i)));
    EXPECT_NE((*dataset)->Describe(i).find(".shard"), std::string::npos);
    std::vector<uint8_t> got(16 * 16 * 3), want(16 * 16 * 3);
    ASSERT_OK((*dataset)->Load(i, {16, true, 3, 1}, scratch, got.data()));
    ASSERT_OK(DecodeSample(Jpeg(i), i, {16, true, 3, 1}, reference_scratch, want.data()));
    EXPECT_EQ(got, want) << i;
  }
  // Every file in place, nothing temporary left.
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();
  }
}

TEST(PackedDatasetTest, AnImageLargerThanAShardGetsAShardOfItsOwn) {
  const std::string dir = FreshDirectory("packed_big");
  const std::string index = dir + "/big.stkpack";
  PackOptions options;
  options.shard_bytes = 100;
  auto writer = PackedWriter::Create(index, {"a"}, options);
  ASSERT_OK(writer);
  ASSERT_OK(writer->Add(0, "a/0.jpg", Jpeg(0)));
  ASSERT_OK(writer->Add(0, "a/1.jpg", Jpeg(1)));
  ASSERT_OK(writer->Add(0, "a/empty.jpg", {}));
  ASSERT_OK(writer->Finish());
  EXPECT_EQ(writer->shard_count(), 3);  // each image passes the limit alone
  auto dataset = PackedDataset::Open(index);
  ASSERT_OK(dataset);
  SampleScratch scratch;
  std::vector<uint8_t> image(8 * 8 * 3);
  absl::Status empty = (*dataset)->Load(2, {8, true, 0, 0}, scratch, image.data());
  EXPECT_TRUE(IsBadSampleError(empty)) << empty;
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty;
}

TEST(PackedDatasetTest, PackImageFolderKeepsTheFoldersOrderLabelsAndBytes) {
  const std::string root = FreshDirectory("packed_source");
  for (const char* file : {"b/2.jpg", "b/10.jpg", "a/x/deep.png", "a/z.jpeg", "c/only.JPG"}) {
    fs::create_directories(fs::path(root + "/" + file).parent_path());
    const int seed = static_cast<int>(std::strlen(file));
    const std::vector<uint8_t> rgb = test_util::PhotoLikeImage(50, 40, seed);
    const std::string path = root + "/" + file;
    ASSERT_OK((absl::EndsWith(path, ".png") ? test_util::WritePng(path, 50, 40, rgb)
                                            : test_util::WriteJpeg(path, 50, 40, rgb)));
  }
  ASSERT_OK(test_util::WriteFileBytes(root + "/c/notes.txt", {'x'}));        // not a sample
  ASSERT_OK(test_util::WriteFileBytes(root + "/c/broken.jpg", {'n', 'o'}));  // a bad one
  const std::string out = FreshDirectory("packed_output");
  auto stats = PackImageFolder(root, out + "/all.stkpack", PackOptions{});
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 6);
  EXPECT_EQ(stats->shards, 1);
  EXPECT_EQ(stats->not_images, 1);
  auto folder = ImageFolderDataset::Open(root);
  auto packed = PackedDataset::Open(out + "/all.stkpack");
  ASSERT_TRUE(folder.ok() && packed.ok()) << packed.status();
  EXPECT_EQ((*packed)->classes(), (*folder)->classes());
  ASSERT_EQ((*packed)->size(), (*folder)->size());
  SampleScratch scratch;
  for (int64_t i = 0; i < (*folder)->size(); ++i) {
    EXPECT_EQ((*packed)->Label(i), (*folder)->Label(i)) << i;
    EXPECT_EQ(root + "/" + std::string((*packed)->SampleName(i)), (*folder)->samples()[i].path);
    for (bool train : {true, false}) {
      std::vector<uint8_t> a(20 * 20 * 3), b(20 * 20 * 3);
      absl::Status sa = (*folder)->Load(i, {20, train, 9, 2}, scratch, a.data());
      absl::Status sb = (*packed)->Load(i, {20, train, 9, 2}, scratch, b.data());
      EXPECT_EQ(sa.ok(), sb.ok()) << i;
      if (sa.ok()) {
        EXPECT_EQ(a, b) << i;
      }
    }
  }
}

TEST(PackedDatasetTest, PackingStopsAtAnUnreadableFileNamingIt) {
  const std::string root = FreshDirectory("packed_unreadable");
  fs::create_directories(root + "/a");
  ASSERT_OK(test_util::WriteFileBytes(root + "/a/good.jpg", Jpeg(1)));
  ASSERT_EQ(symlink((root + "/gone").c_str(), (root + "/a/link.jpg").c_str()), 0);
  const std::string out = FreshDirectory("packed_unreadable_out");
  auto stats = PackImageFolder(root, out + "/x.stkpack", PackOptions{});
  EXPECT_THAT(stats, StatusIs(absl::StatusCode::kNotFound, HasSubstr("link.jpg")));
  EXPECT_TRUE(fs::is_empty(out)) << "an unfinished packing leaves no files";
}

TEST(PackedDatasetTest, WriterRefusesBadInput) {
  const std::string dir = FreshDirectory("packed_writer_errors");
  EXPECT_THAT(PackedWriter::Create(dir + "/x.stkpack", {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PackedWriter::Create(dir + "/missing/x.stkpack", {"a"}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto writer = PackedWriter::Create(dir + "/x.stkpack", {"a"}, {});
  ASSERT_OK(writer);
  EXPECT_THAT(writer->Add(1, "a/1.jpg", Jpeg(1)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(writer->Finish(), StatusIs(absl::StatusCode::kFailedPrecondition));
  {
    auto unfinished = PackedWriter::Create(dir + "/y.stkpack", {"a"}, {});
    ASSERT_OK(unfinished->Add(0, "a/1.jpg", Jpeg(1)));
  }
  EXPECT_FALSE(fs::exists(dir + "/y.stkpack"));
  EXPECT_FALSE(fs::exists(dir + "/y.stkpack-00000.shard"));
  EXPECT_FALSE(fs::exists(dir + "/y.stkpack-00000.shard.partial"));
}

// Opens `index` and expects `code` with `words` in the message.
void ExpectOpenError(const std::string& index, absl::StatusCode code, const std::string& words) {
  auto dataset = PackedDataset::Open(index);
  ASSERT_FALSE(dataset.ok()) << "opened " << index;
  EXPECT_EQ(dataset.status().code(), code) << dataset.status();
  EXPECT_NE(dataset.status().message().find(words), std::string::npos) << dataset.status();
}

TEST(PackedDatasetTest, DamagedFilesGiveErrorsThatNameThem) {
  const std::string dir = FreshDirectory("packed_damaged");
  const std::string index = WriteDataset(dir, 6, 6000);
  const std::vector<uint8_t> original = test_util::ReadFileBytes(index);
  const std::string shard0 = dir + "/data.stkpack-00000.shard";
  const std::vector<uint8_t> shard_bytes = test_util::ReadFileBytes(shard0);
  auto write_index = [&](const std::vector<uint8_t>& bytes) {
    ASSERT_OK(test_util::WriteFileBytes(index, bytes));
  };
  auto header = [&]() {
    PackedIndexHeader h;
    std::memcpy(&h, original.data(), sizeof(h));
    return h;
  };
  auto with_header = [&](const PackedIndexHeader& h) {
    std::vector<uint8_t> bytes = original;
    std::memcpy(bytes.data(), &h, sizeof(h));
    return bytes;
  };

  ExpectOpenError(dir + "/nope.stkpack", absl::StatusCode::kNotFound, "nope.stkpack");
  ExpectOpenError(dir, absl::StatusCode::kInvalidArgument, "not a regular file");
  ExpectOpenError(shard0, absl::StatusCode::kInvalidArgument, "bad magic");

  PackedIndexHeader h = header();
  h.version = 2;
  write_index(with_header(h));
  ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "version 2");

  write_index(std::vector<uint8_t>(original.begin(), original.end() - 7));
  ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "truncated");

  write_index(std::vector<uint8_t>(original.begin(), original.begin() + 20));
  ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "shorter than its header");

  h = header();
  h.samples_offset = original.size() - 10;
  write_index(with_header(h));
  ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "outside the file");

  // A sample whose label or byte range is out of range.
  for (int field = 0; field < 3; ++field) {
    std::vector<uint8_t> bytes = original;
    h = header();
    PackedSample sample;
    std::memcpy(&sample, bytes.data() + h.samples_offset + 3 * sizeof(sample), sizeof(sample));
    if (field == 0) sample.label = 2;
    if (field == 1) sample.length = 1 << 30;
    if (field == 2) sample.shard = 99;
    std::memcpy(bytes.data() + h.samples_offset + 3 * sizeof(sample), &sample, sizeof(sample));
    write_index(bytes);
    ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "sample 3");
  }
  write_index(original);
  ASSERT_OK(PackedDataset::Open(index));

  // Shards: missing, truncated, or another shard's file.
  fs::rename(shard0, shard0 + ".away");
  ExpectOpenError(index, absl::StatusCode::kNotFound, "data.stkpack-00000.shard");
  ASSERT_OK(test_util::WriteFileBytes(
      shard0, std::vector<uint8_t>(shard_bytes.begin(), shard_bytes.end() - 100)));
  ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "truncated");
  std::vector<uint8_t> renumbered = shard_bytes;
  renumbered[12] = 1;  // PackedShardHeader::shard
  ASSERT_OK(test_util::WriteFileBytes(shard0, renumbered));
  ExpectOpenError(index, absl::StatusCode::kInvalidArgument, "is not shard 0");
  ASSERT_OK(test_util::WriteFileBytes(shard0, shard_bytes));
  EXPECT_OK(PackedDataset::Open(index));
}

}  // namespace
}  // namespace stoker::data_service
