// The progress line, its in-place redraw, and the JSON lines.
#include "trainer/report/progress.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

TEST(ProgressTest, LineShowsEveryField) {
  const ProgressSnapshot p{/*epoch=*/2,
                           /*epochs=*/10,
                           /*step=*/120,
                           /*steps_per_epoch=*/390,
                           /*loss=*/1.23456,
                           /*learning_rate=*/0.08,
                           /*images_per_second=*/1234.4,
                           /*data_wait_share=*/0.03,
                           /*gpu_input_wait_share=*/-1,
                           /*gpu_decode_share=*/-1,
                           /*memory=*/"RSS 1.1 GiB",
                           /*eta_seconds=*/312};
  EXPECT_EQ(FormatProgressLine(p),
            "epoch 2/10  step 120/390  loss 1.2346  lr 0.08  1234 img/s  data 3.0%  RSS 1.1 GiB  "
            "ETA 5m12s");
}

TEST(ProgressTest, LineShowsTheGpusWaitAndDecodeShareWhereKnown) {
  const ProgressSnapshot p{/*epoch=*/1,
                           /*epochs=*/2,
                           /*step=*/10,
                           /*steps_per_epoch=*/47,
                           /*loss=*/5.0,
                           /*learning_rate=*/0.001,
                           /*images_per_second=*/18000,
                           /*data_wait_share=*/0.8,
                           /*gpu_input_wait_share=*/0.004,
                           /*gpu_decode_share=*/0.375};
  EXPECT_EQ(FormatProgressLine(p),
            "epoch 1/2  step 10/47  loss 5.0000  lr 0.001  18000 img/s  data 80.0%  gpu-wait 0.4%  "
            "gpu-decode 37.5%");
}

TEST(ProgressTest, LineShowsTheJobsBoundInAWord) {
  ProgressSnapshot p;
  p.epoch = 1;
  p.epochs = 1;
  p.step = 5;
  p.steps_per_epoch = 9;
  p.loss = 1;
  p.learning_rate = 0.1;
  p.images_per_second = 100;
  p.bound = "input";
  p.eta_seconds = 3;
  EXPECT_EQ(FormatProgressLine(p),
            "epoch 1/1  step 5/9  loss 1.0000  lr 0.1  100 img/s  data 0.0%  bound input  ETA 3s");
}

TEST(ProgressTest, EtaReadsNaturally) {
  EXPECT_EQ(FormatEta(42), "42s");
  EXPECT_EQ(FormatEta(312), "5m12s");
  EXPECT_EQ(FormatEta(3 * 3600 + 7 * 60 + 5), "3h07m");
  EXPECT_EQ(FormatEta(2 * 86400 + 4 * 3600), "2d04h");
  EXPECT_EQ(FormatEta(-1), "?");
}

std::string Printed(bool in_place) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* stream = open_memstream(&buffer, &size);
  {
    ProgressPrinter printer(stream, in_place);
    printer.Update("one");
    printer.Update("two");
    printer.Finish();
    printer.Update("three");
  }
  std::fclose(stream);
  std::string out(buffer, size);
  free(buffer);
  return out;
}

TEST(ProgressTest, OnATerminalTheLineIsRedrawnInPlace) {
  EXPECT_EQ(Printed(true), "\rone\x1b[K\rtwo\x1b[K\n\rthree\x1b[K\n");
}

TEST(ProgressTest, OtherwiseEveryUpdateIsAPlainLine) {
  EXPECT_EQ(Printed(false), "one\ntwo\nthree\n");
}

TEST(ProgressTest, ResidentSetIsKnownOnLinux) { EXPECT_GT(ResidentSetGiB(), 0); }

TEST(JsonTest, ObjectsAreValidJsonInInsertionOrder) {
  JsonObject o;
  o.Add("type", "train")
      .Add("step", int64_t{5})
      .Add("loss", 0.25)
      .Add("ok", true)
      .Add("note", "a \"b\"\n")
      .Add("nan", std::nan(""));
  EXPECT_EQ(o.Build(),
            "{\"type\": \"train\", \"step\": 5, \"loss\": 0.25, \"ok\": true, \"note\": \"a "
            "\\\"b\\\"\\n\", "
            "\"nan\": null}");
}

TEST(JsonTest, WriterAppends) {
  ASSERT_OK_AND_ASSIGN(const stoker::testing::TempDir dir,
                       stoker::testing::TempDir::Create("jsonl"));
  const std::string path = dir.Join("metrics.jsonl");
  for (int i = 0; i < 2; ++i) {
    auto writer = JsonlWriter::Open(path);
    ASSERT_OK(writer);
    ASSERT_OK((*writer)->Write(JsonObject().Add("i", i)));
  }
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  EXPECT_EQ(all.str(), "{\"i\": 0}\n{\"i\": 1}\n");
}

}  // namespace
}  // namespace stoker::trainer
