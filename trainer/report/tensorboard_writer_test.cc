// The event files are what TensorBoard reads: its own EventAccumulator (from the
// tensorboard pip package, in $STOKER_PYTHON) reads the scalars back.
#include "trainer/report/tensorboard_writer.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/python_runner.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(TensorBoardWriterTest, RecordFramingHasLengthAndMaskedChecksums) {
  const std::string record = internal::FrameRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(record[0], 3);
  EXPECT_EQ(record.substr(12, 3), "abc");
}

TEST(TensorBoardWriterTest, TensorBoardsEventAccumulatorReadsTheScalarsBack) {
  ASSERT_OK_AND_ASSIGN(const stoker::testing::TempDir temp,
                       stoker::testing::TempDir::Create("tb_run"));
  const std::string dir = temp.path();
  {
    auto writer = TensorBoardWriter::Create(dir);
    ASSERT_OK(writer);
    for (int step = 1; step <= 5; ++step) {
      ASSERT_OK((*writer)->AddScalar("train/loss", 2.0 / step, step, 1000.0 + step));
      ASSERT_OK((*writer)->AddScalar("train/lr", 0.1 * step, step));
    }
    ASSERT_OK((*writer)->AddScalar("val/top1", 0.875, 1000000));
  }
  auto printed = testing::RunPython(R"py(
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for e in acc.Scalars(tag):
        print(tag, e.step, "%.6f" % e.value, "%.1f" % e.wall_time if tag == "train/loss" else "-")
)py",
                                    {dir});
  ASSERT_OK(printed);
  EXPECT_EQ(*printed,
            "train/loss 1 2.000000 1001.0\n"
            "train/loss 2 1.000000 1002.0\n"
            "train/loss 3 0.666667 1003.0\n"
            "train/loss 4 0.500000 1004.0\n"
            "train/loss 5 0.400000 1005.0\n"
            "train/lr 1 0.100000 -\n"
            "train/lr 2 0.200000 -\n"
            "train/lr 3 0.300000 -\n"
            "train/lr 4 0.400000 -\n"
            "train/lr 5 0.500000 -\n"
            "val/top1 1000000 0.875000 -\n");
}

}  // namespace
}  // namespace stoker::trainer
