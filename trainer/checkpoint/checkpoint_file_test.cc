// Checkpoint files: round trip, refusal of truncated and corrupt files with a clear reason,
// and the directory's retention and fall-back to the newest valid checkpoint, also when
// the disk fills while a checkpoint is written (a real ENOSPC from a small tmpfs).
#include "trainer/checkpoint/checkpoint_file.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/test_tmpfs.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;

std::string Sample(int64_t step) {
  CheckpointWriter writer;
  writer.AddInt("step", step);
  writer.AddDouble("lr", 0.125);
  writer.AddString("model", "resnet18");
  const float values[6] = {1, 2, 3, 4, 5, 6.5f};
  writer.AddTensor("model/fc.weight", "float32", {2, 3}, values, sizeof(values));
  writer.AddTensor("scalar", "int64", {}, &step, sizeof(step));
  return std::move(writer).Finish();
}

TEST(CheckpointFileTest, RoundTripsEveryKindOfEntry) {
  auto reader = CheckpointReader::Parse(Sample(42), "mem");
  ASSERT_OK(reader);
  EXPECT_EQ(*reader->Int("step"), 42);
  EXPECT_EQ(*reader->Double("lr"), 0.125);
  EXPECT_EQ(*reader->String("model"), "resnet18");
  auto tensor = reader->Tensor("model/fc.weight");
  ASSERT_OK(tensor);
  EXPECT_EQ(tensor->dtype, "float32");
  EXPECT_EQ(tensor->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(tensor->data.size(), 24u);
  float last = 0;  // the view is not 4-byte aligned: copy, not cast
  std::memcpy(&last, tensor->data.data() + 5 * sizeof(float), sizeof(float));
  EXPECT_EQ(last, 6.5f);
  EXPECT_TRUE(reader->Tensor("scalar")->shape.empty());
  EXPECT_EQ(reader->Names().size(), 5u);
}

// Sample()'s file with its tensors held by reference rather than copied.
CheckpointWriter SampleHeld(int64_t step, std::shared_ptr<std::vector<float>> values,
                            std::shared_ptr<int64_t> scalar) {
  CheckpointWriter writer;
  writer.AddInt("step", step);
  writer.AddDouble("lr", 0.125);
  writer.AddString("model", "resnet18");
  writer.AddHeldTensor("model/fc.weight", "float32", {2, 3}, values, values->data(),
                       values->size() * sizeof(float));
  *scalar = step;
  writer.AddHeldTensor("scalar", "int64", {}, scalar, scalar.get(), sizeof(int64_t));
  return writer;
}

TEST(CheckpointFileTest, HeldTensorsMakeTheSameFileWhenSealedOrFinished) {
  auto values = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6.5f});
  auto scalar = std::make_shared<int64_t>(0);
  const std::string finished = SampleHeld(42, values, scalar).Finish();
  EXPECT_EQ(finished, Sample(42));

  std::weak_ptr<std::vector<float>> watch = values;
  SealedCheckpoint sealed = SampleHeld(42, std::move(values), scalar).Seal();
  EXPECT_FALSE(watch.expired()) << "the sealed file holds its tensors";
  SealedCheckpoint moved = std::move(sealed);
  std::string joined;
  for (absl::string_view part : moved.parts()) joined.append(part.data(), part.size());
  EXPECT_EQ(moved.size(), joined.size());
  EXPECT_EQ(joined, Sample(42));
  ASSERT_OK(CheckpointReader::Parse(joined, "sealed"));
  { SealedCheckpoint gone = std::move(moved); }
  EXPECT_TRUE(watch.expired()) << "the tensors are released with the sealed file";
}

// A checkpoint of several runs (Note [Checkpoint files in parallel]): held tensors of 40
// MiB and 17 MiB, split into runs of 16 MiB, with small entries between them.
CheckpointWriter LargeHeld(const std::shared_ptr<std::vector<uint8_t>>& a,
                           const std::shared_ptr<std::vector<uint8_t>>& b) {
  CheckpointWriter writer;
  writer.AddInt("step", 3);
  writer.AddHeldTensor("a", "uint8", {static_cast<int64_t>(a->size())}, a, a->data(), a->size());
  writer.AddString("between", "x");
  writer.AddHeldTensor("b", "uint8", {static_cast<int64_t>(b->size())}, b, b->data(), b->size());
  writer.AddInt("after", 4);
  return writer;
}

TEST(CheckpointFileTest, SealedAndWrittenOnSeveralThreadsItIsTheSameFile) {
  auto a = std::make_shared<std::vector<uint8_t>>(size_t{40} << 20);
  auto b = std::make_shared<std::vector<uint8_t>>((size_t{17} << 20) + 5);
  for (size_t i = 0; i < a->size(); ++i) (*a)[i] = static_cast<uint8_t>(i * 7 + (i >> 20));
  for (size_t i = 0; i < b->size(); ++i) (*b)[i] = static_cast<uint8_t>(i * 13 + 1);
  const std::string one_thread = LargeHeld(a, b).Finish();
  ASSERT_OK(CheckpointReader::Parse(one_thread, "one thread"));

  const SealedCheckpoint sealed = LargeHeld(a, b).Seal(/*threads=*/4);
  const auto runs = sealed.Runs(size_t{16} << 20);
  EXPECT_GE(runs.size(), 6u);
  std::string joined;
  for (const auto& [run, offset] : runs) {
    EXPECT_EQ(offset, joined.size());
    joined.append(run.data(), run.size());
  }
  EXPECT_TRUE(joined == one_thread) << "the header (CRC) or the bytes differ";

  ASSERT_OK_AND_ASSIGN(const TempDir dir, TempDir::Create("ckpt_parallel"));
  const std::string path = dir.path() + "/ckpt-000000000003.stoker";
  ASSERT_OK(WriteCheckpointAtomically(path, sealed, 0600, /*threads=*/4));
  ASSERT_OK_AND_ASSIGN(std::string written, ReadWholeFile(path));
  EXPECT_TRUE(written == one_thread) << "the file written in parallel differs";
  ASSERT_OK_AND_ASSIGN(CheckpointReader reader, LoadCheckpoint(path));
  EXPECT_EQ(*reader.Int("after"), 4);
  EXPECT_EQ(reader.Tensor("b")->data.size(), b->size());
}

TEST(CheckpointFileTest, HeldBytesAreWaitedForOnceAndTheirErrorReturned) {
  CheckpointWriter ready;
  int calls = 0;
  ready.SetHeldBytesReady([&] {
    ++calls;
    return absl::OkStatus();
  });
  EXPECT_OK(ready.WaitForHeldBytes());
  EXPECT_OK(ready.WaitForHeldBytes());
  EXPECT_EQ(calls, 1);

  CheckpointWriter failed;
  failed.SetHeldBytesReady([] { return absl::InternalError("copy to the host failed"); });
  EXPECT_THAT(failed.WaitForHeldBytes(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("copy to the host failed")));
  EXPECT_OK(CheckpointWriter().WaitForHeldBytes());
}

TEST(CheckpointFileTest, MissingOrMistypedEntriesAreNamed) {
  auto reader = CheckpointReader::Parse(Sample(1), "ckpt-a");
  ASSERT_OK(reader);
  EXPECT_THAT(reader->Int("epoch"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ckpt-a: no entry \"epoch\"")));
  EXPECT_THAT(reader->Int("lr"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckpointFileTest, EveryTruncationIsRefusedAsTruncatedOrCorrupt) {
  const std::string bytes = Sample(7);
  for (size_t n = 0; n < bytes.size(); n += (n < 64 ? 1 : 13)) {
    auto reader = CheckpointReader::Parse(bytes.substr(0, n), "cut");
    ASSERT_FALSE(reader.ok()) << n;
    EXPECT_THAT(reader, StatusIs(absl::StatusCode::kDataLoss)) << n << ": " << reader.status();
  }
  auto reader = CheckpointReader::Parse(bytes.substr(0, bytes.size() - 1), "cut");
  EXPECT_TRUE(absl::StrContains(reader.status().message(), "truncated")) << reader.status();
}

TEST(CheckpointFileTest, EveryFlippedBitIsCaught) {
  const std::string bytes = Sample(7);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    auto reader = CheckpointReader::Parse(bad, "flip");
    EXPECT_FALSE(reader.ok()) << "byte " << i;
  }
}

TEST(CheckpointFileTest, SealingGivesAnEditedPayloadTheHeaderAWriterWouldHaveGiven) {
  const std::string bytes = Sample(7);
  EXPECT_EQ(SealedCheckpointForTesting(bytes), bytes);
  std::string edited = bytes;
  edited.back() ^= 0x10;  // the last byte of the "scalar" tensor's data
  ASSERT_FALSE(CheckpointReader::Parse(edited, "edited").ok());
  auto reader = CheckpointReader::Parse(SealedCheckpointForTesting(edited), "sealed");
  ASSERT_OK(reader);
  auto scalar = reader->Tensor("scalar");
  ASSERT_OK(scalar);
  EXPECT_EQ(scalar->data, absl::string_view(edited).substr(edited.size() - 8));
  const std::string short_file(kCheckpointHeaderBytes - 1, 'x');
  EXPECT_EQ(SealedCheckpointForTesting(short_file), short_file);
}

TEST(CheckpointFileTest, OtherFilesAndVersionsAreRefusedClearly) {
  auto other = CheckpointReader::Parse(std::string(100, 'z'), "junk");
  EXPECT_THAT(other,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a Stoker checkpoint")));
}

TEST(CheckpointDirectoryTest, KeepsTheNewestAndFallsBackPastCorruptOnes) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_dir"));
  const std::string dir = dir_temp.path();
  for (int64_t step : {5, 10, 15, 20}) {
    ASSERT_OK(WriteFileAtomically(absl::StrCat(dir, "/", CheckpointFileName(step)), Sample(step)));
  }
  ASSERT_OK(RemoveOldCheckpoints(dir, 3));
  auto listed = ListCheckpoints(dir);
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].global_step, 10);
  EXPECT_EQ((*listed)[2].global_step, 20);

  // Truncate the newest: the one before is used, and the reason is reported.
  const std::string newest = absl::StrCat(dir, "/", CheckpointFileName(20));
  const std::string bytes = Sample(20);
  ASSERT_OK(WriteFileAtomically(newest, bytes.substr(0, bytes.size() / 2)));
  std::vector<std::string> skipped;
  auto loaded = LoadNewestValidCheckpoint(dir, &skipped);
  ASSERT_OK(loaded);
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ(*(*loaded)->Int("step"), 15);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_TRUE(absl::StrContains(skipped[0], newest)) << skipped[0];
  EXPECT_TRUE(absl::StrContains(skipped[0], "truncated")) << skipped[0];
}

TEST(CheckpointDirectoryTest, NoDirectoryOrNoCheckpointMeansNothingToResume) {
  auto loaded = LoadNewestValidCheckpoint("/nonexistent/stoker/ckpt", nullptr);
  ASSERT_OK(loaded);
  EXPECT_FALSE(loaded->has_value());
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_empty"));
  const std::string dir = dir_temp.path();
  loaded = LoadNewestValidCheckpoint(dir, nullptr);
  ASSERT_OK(loaded);
  EXPECT_FALSE(loaded->has_value());
}

TEST(CheckpointDirectoryTest, StaleTemporariesAreRemoved) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_stale"));
  const std::string dir = dir_temp.path();
  ASSERT_OK(WriteFileAtomically(dir + "/.ckpt-000000000003.stoker.tmp-999", "partial"));
  ASSERT_OK(WriteFileAtomically(dir + "/" + CheckpointFileName(3), Sample(3)));
  auto removed = RemoveStaleTemporaries(dir);
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, 1);
  EXPECT_EQ(ListCheckpoints(dir)->size(), 1u);
}

TEST(CheckpointDirectoryTest, ACorruptNewestCheckpointIsRefusedByNameAndTheOneBeforeIsUsed) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_corrupt"));
  const std::string dir = dir_temp.path();
  for (int64_t step : {4, 8}) {
    ASSERT_OK(WriteFileAtomically(absl::StrCat(dir, "/", CheckpointFileName(step)), Sample(step)));
  }
  // One flipped bit in the payload of the newest (bit rot, a bad copy).
  const std::string newest = absl::StrCat(dir, "/", CheckpointFileName(8));
  std::string bytes = Sample(8);
  bytes[bytes.size() - 5] ^= 0x01;
  ASSERT_OK(WriteFileAtomically(newest, bytes));

  const absl::StatusOr<CheckpointReader> direct = LoadCheckpoint(newest);
  EXPECT_THAT(direct, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_TRUE(absl::StartsWith(direct.status().message(), newest + ": checksum mismatch"))
      << direct.status();

  std::vector<std::string> skipped;
  auto loaded = LoadNewestValidCheckpoint(dir, &skipped);
  ASSERT_OK(loaded);
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ(*(*loaded)->Int("step"), 4);
  EXPECT_EQ((*loaded)->source(), absl::StrCat(dir, "/", CheckpointFileName(4)));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(skipped[0], newest + ": checksum mismatch")) << skipped[0];

  // Nothing valid at all: nothing to resume, and every file is named.
  const std::string older = absl::StrCat(dir, "/", CheckpointFileName(4));
  ASSERT_OK(WriteFileAtomically(older, "STOKERCK"));
  skipped.clear();
  loaded = LoadNewestValidCheckpoint(dir, &skipped);
  ASSERT_OK(loaded);
  EXPECT_FALSE(loaded->has_value());
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(skipped[1], older + ": truncated")) << skipped[1];
}

// A checkpoint of about 40 KB with the step in it.
std::string Large(int64_t step) {
  CheckpointWriter writer;
  writer.AddInt("step", step);
  const std::vector<float> weights(10000, 0.5f);
  writer.AddTensor("model/w", "float32", {10000}, weights.data(), weights.size() * sizeof(float));
  return std::move(writer).Finish();
}

TEST(CheckpointDirectoryTest, ACheckpointThatDoesNotFitLeavesThePreviousOneLoadable) {
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::Create("ckpt_full"));
  const std::string dir = dir_temp.path();
  // Room for one checkpoint (40 KB) but not for the next one beside it.
  if (absl::Status mounted = MountPrivateTmpfs(dir, 64 << 10); !mounted.ok()) {
    GTEST_SKIP() << "needs a small tmpfs: " << mounted;
  }
  const std::string first = absl::StrCat(dir, "/", CheckpointFileName(10));
  ASSERT_OK(WriteFileAtomically(first, Large(10)));
  const std::string second = absl::StrCat(dir, "/", CheckpointFileName(20));
  const absl::Status full = WriteFileAtomically(second, Large(20));
  ASSERT_THAT(full, StatusIs(absl::StatusCode::kResourceExhausted,
                             ::testing::AllOf(HasSubstr(second), HasSubstr("ENOSPC"))));

  auto listed = ListCheckpoints(dir);
  ASSERT_OK(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].global_step, 10);
  EXPECT_EQ(*RemoveStaleTemporaries(dir), 0);  // the writer removed its partial file
  std::vector<std::string> skipped;
  auto loaded = LoadNewestValidCheckpoint(dir, &skipped);
  ASSERT_OK(loaded);
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ(*(*loaded)->Int("step"), 10);
  EXPECT_EQ((*loaded)->Tensor("model/w")->data.size(), 40000u);
  EXPECT_TRUE(skipped.empty());
}

}  // namespace
}  // namespace stoker::trainer
