// RunReporter on the CPU: the progress line and notes on stderr, the JSON lines of
// --metrics_jsonl, the --metrics_out summary, the TensorBoard event file, the per-batch
// logs, what ranks other than 0 write, and the flag named when an output cannot be opened.
#include "trainer/report/run_reporter.h"

#include <ATen/ATen.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::IsOk;
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The names in directory `path` (std::filesystem is not used: libtorch exports functions of
// its own under its names).
std::vector<std::string> Entries(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

bool Exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// Sends what this process writes to stderr into a file until Text() is called.
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& path) : path_(path) {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ~StderrCapture() { Restore(); }
  std::string Text() {
    Restore();
    return ReadFile(path_);
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }

  std::string path_;
  int saved_ = -1;
};

RunDescription Description() {
  return RunDescription{/*model=*/"resnet18", /*epochs=*/3,      /*world_size=*/2,
                        /*batch_size=*/16,    /*image_size=*/32, /*synthetic=*/true,
                        /*data_only=*/false,  /*warmup_steps=*/1};
}

TrainProgress ProgressAt(int64_t batches_done, double loss) {
  TrainProgress progress;
  progress.epoch = 0;
  progress.batches_done = batches_done;
  progress.batches_per_epoch = 10;
  progress.global_step = batches_done;
  progress.total_steps = 30;
  progress.steps_this_run = batches_done;
  progress.loss = loss;
  progress.learning_rate = 0.25;
  return progress;
}

class RunReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dir_, TempDir::Create("run_reporter"));
    options_.progress = ProgressMode::kLines;
    options_.metrics_jsonl = dir_.Join("metrics.jsonl");
    options_.metrics_out = dir_.Join("summary.json");
    options_.tensorboard_dir = dir_.Join("tb");
    options_.loss_log = dir_.Join("loss.log");
    options_.sample_log = dir_.Join("samples.log");
  }

  // Three steps of 32 images with losses 3, 2 and 1, then a progress line at batch 3.
  void TrainThreeSteps(RunReporter& reporter) {
    reporter.StartRun();
    for (int step = 0; step < 3; ++step) {
      reporter.AddBatch(0, step, absl::Milliseconds(1), std::nullopt, {2 * step, 2 * step + 1});
      const at::Tensor loss = at::full({}, 3.0 - step, at::kFloat);
      ASSERT_OK(reporter.LogLoss(0, step, loss));
      reporter.AddStep(32, loss, /*first_of_run=*/step == 0);
    }
    const at::Tensor mean = reporter.TakeMeanLoss();
    ASSERT_EQ(mean.numel(), 1);
    EXPECT_FLOAT_EQ(mean.item<float>(), 2.0f);
    ASSERT_OK(reporter.Progress(ProgressAt(3, mean.item<float>())));
  }

  TempDir dir_;
  ReportOptions options_;
};

TEST_F(RunReporterTest, RankZeroPrintsTheProgressLineAndWritesItsJsonLine) {
  StderrCapture capture(dir_.Join("stderr"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, /*rank=*/0, Description()));
  EXPECT_TRUE(reporter->rank0());
  TrainThreeSteps(*reporter);
  TrainProgress with_norm = ProgressAt(4, 1.5);
  with_norm.grad_norm = 0.75;
  ASSERT_OK(reporter->Progress(with_norm));
  const std::string printed = capture.Text();
  EXPECT_THAT(printed,
              AllOf(HasSubstr("epoch 1/3"), HasSubstr("step 3/10"), HasSubstr("loss 2.0000"),
                    HasSubstr("lr 0.25  "), HasSubstr("step 4/10")));

  const std::vector<std::string> records = Lines(ReadFile(options_.metrics_jsonl));
  ASSERT_THAT(records, SizeIs(2));
  EXPECT_THAT(records[0], StartsWith("{\"type\": \"train\", \"epoch\": 1, \"step\": 3, "
                                     "\"steps_per_epoch\": 10, \"global_step\": 3, \"loss\": 2, "
                                     "\"lr\": 0.25, \"images_per_second\": "));
  EXPECT_THAT(records[0],
              AllOf(HasSubstr("\"data_wait_share\": "), HasSubstr("\"elapsed_s\": "),
                    HasSubstr("\"time\": "), Not(HasSubstr("grad_norm")),
                    Not(HasSubstr("gpu_input_wait_share")), Not(HasSubstr("gpu_decode_share"))));
  EXPECT_THAT(records[1], AllOf(HasSubstr("\"step\": 4"), HasSubstr("\"grad_norm\": 0.75")));
}

TEST_F(RunReporterTest, TheGpusWaitForInputIsReportedWhereTheFeederMeasuredIt) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, 0, Description()));
  reporter->StartRun();
  reporter->AddBatch(0, 0, absl::Milliseconds(1), absl::Milliseconds(2), {0});
  reporter->AddStep(32, at::full({}, 1.0, at::kFloat), true);
  ASSERT_OK(reporter->Progress(ProgressAt(1, 1.0)));
  EXPECT_THAT(ReadFile(options_.metrics_jsonl), HasSubstr("\"gpu_input_wait_share\": "));
}

TEST_F(RunReporterTest, ValidationStopAndEndAreJsonLinesAndTheSummaryIsWritten) {
  StderrCapture capture(dir_.Join("stderr"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, 0, Description()));
  TrainThreeSteps(*reporter);
  ValidationScores scores;
  scores.samples = 100;
  scores.top1 = 0.5;
  scores.top5 = 0.75;
  scores.loss = 1.25;
  ASSERT_OK(reporter->Validation(0, 3, scores, 2.0));
  ASSERT_OK(reporter->Stopped("stopped by SIGTERM", "signal", 0, 3, 10, 3, "/ckpt/ckpt-3"));
  RunSummary summary;
  summary.global_step = 3;
  summary.steps_this_run = 3;
  ASSERT_OK(reporter->Finished(summary));

  const std::string printed = capture.Text();
  EXPECT_THAT(printed,
              HasSubstr("validation after epoch 1: top-1 50.00%  top-5 75.00%  loss 1.2500  "
                        "(100 samples, 2.0 s)"));
  EXPECT_THAT(printed,
              HasSubstr("stopped by SIGTERM at epoch 1, batch 3 of 10 (step 3); resume with "
                        "--resume=auto (/ckpt/ckpt-3)"));
  EXPECT_THAT(printed, HasSubstr("done: 3 epochs, 3 optimizer steps (3 in this run)"));
  EXPECT_THAT(printed, HasSubstr("validation: final top-1 50.00%, top-5 75.00% (100 samples); best "
                                 "top-1 50.00% after epoch 1"));

  const std::vector<std::string> records = Lines(ReadFile(options_.metrics_jsonl));
  ASSERT_THAT(records, SizeIs(4));
  EXPECT_THAT(records[0], StartsWith("{\"type\": \"train\""));
  EXPECT_THAT(records[1],
              StartsWith("{\"type\": \"val\", \"epoch\": 1, \"global_step\": 3, \"top1\": "
                         "0.5, \"top5\": 0.75, \"loss\": 1.25, \"samples\": 100, "));
  EXPECT_EQ(records[2],
            "{\"type\": \"stop\", \"reason\": \"signal\", \"epoch\": 1, \"step\": 3, "
            "\"global_step\": 3, \"checkpoint\": \"/ckpt/ckpt-3\"}");
  EXPECT_THAT(records[3], StartsWith("{\"type\": \"end\", \"epochs\": 3, \"global_step\": 3, "
                                     "\"images_per_second\": "));
  EXPECT_THAT(records[3], AllOf(HasSubstr("\"val_top1\": 0.5"), HasSubstr("\"best_top1\": 0.5")));

  const std::string metrics = ReadFile(options_.metrics_out);
  EXPECT_THAT(metrics,
              StartsWith("{\"model\": \"resnet18\", \"world_size\": 2, \"batch_size\": 16, "
                         "\"image_size\": 32, \"synthetic\": true, \"images_per_second\": "));
  EXPECT_THAT(metrics, AllOf(HasSubstr("\"data_only\": false"), HasSubstr("\"measured_steps\": 3"),
                             HasSubstr("\"global_step\": 3"), HasSubstr("\"final_loss\": 2"),
                             HasSubstr("\"val_top1\": 0.5"), HasSubstr("\"val_samples\": 100")));
  EXPECT_EQ(metrics.back(), '\n');
}

TEST_F(RunReporterTest, TracedStepsGiveVerdictLinesTheBoundAndASummary) {
  StderrCapture capture(dir_.Join("stderr"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, 0, Description()));
  const std::vector<RankPlace> places = {{0, "hosta", 0}, {1, "hostb", 1}};
  const std::vector<RankStepTimes> slow_input = {{1, 1, 10, 30, 42}, {31, 1, 10, 0, 42}};
  ASSERT_OK(reporter->TraceVerdict(JudgeStep(4, slow_input, places, 40)));
  TrainThreeSteps(*reporter);
  RunSummary summary;
  summary.global_step = 3;
  summary.steps_this_run = 3;
  ASSERT_OK(reporter->Finished(summary));

  const std::string printed = capture.Text();
  EXPECT_THAT(printed, HasSubstr("step 4: 42.0 ms, +2.0 ms against the median (40.0 ms); input: "
                                 "rank 1 on hostb (node 1) waited 31.0 ms for input"));
  EXPECT_THAT(printed, HasSubstr("  bound input  "));
  EXPECT_THAT(printed, HasSubstr("trace verdict over 1 step: bound by input (input 1)"));
  const std::vector<std::string> records = Lines(ReadFile(options_.metrics_jsonl));
  ASSERT_THAT(records, SizeIs(4));
  EXPECT_THAT(records[0], StartsWith("{\"type\": \"trace_step\", \"step\": 4, \"bound\": "
                                     "\"input\", \"step_ms\": 42, \"median_ms\": 40, "
                                     "\"stage\": \"input\", \"stage_ms\": 31, \"rank\": 1, "
                                     "\"host\": \"hostb\", \"node\": 1, "));
  EXPECT_THAT(records[2], StartsWith("{\"type\": \"trace_verdict\", \"steps\": 1, \"bound\": "
                                     "\"input\", \"rank\": 1, \"stage\": \"input\", "));
  EXPECT_THAT(records[3], StartsWith("{\"type\": \"end\""));
}

TEST_F(RunReporterTest, ATensorBoardEventFileIsCreatedAndHoldsTheScalars) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, 0, Description()));
  const std::vector<std::string> files = Entries(options_.tensorboard_dir);
  ASSERT_THAT(files, SizeIs(1));
  EXPECT_THAT(files[0], StartsWith("events.out.tfevents."));
  const std::string path = options_.tensorboard_dir + "/" + files[0];
  const std::string before = ReadFile(path);
  EXPECT_THAT(before, HasSubstr("brain.Event:2"));

  TrainThreeSteps(*reporter);
  ValidationScores scores;
  scores.samples = 10;
  ASSERT_OK(reporter->Validation(0, 3, scores, 1.0));
  const std::string after = ReadFile(path);
  EXPECT_GT(after.size(), before.size());
  for (const char* tag : {"train/loss", "train/lr", "train/images_per_second",
                          "train/data_wait_share", "val/top1", "val/top5", "val/loss"}) {
    EXPECT_THAT(after, HasSubstr(tag));
  }
  EXPECT_THAT(after, Not(HasSubstr("train/grad_norm")));
}

TEST_F(RunReporterTest, TheLossAndSampleLogsHaveALinePerBatch) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, 0, Description()));
  TrainThreeSteps(*reporter);
  EXPECT_THAT(Lines(ReadFile(options_.loss_log)), ElementsAre("0 0 3", "0 1 2", "0 2 1"));
  reporter.reset();  // flushes the sample log
  EXPECT_THAT(Lines(ReadFile(options_.sample_log + ".rank0")),
              ElementsAre("0 0 0 1", "0 1 2 3", "0 2 4 5"));
}

TEST_F(RunReporterTest, OtherRanksWriteOnlyTheirSampleLog) {
  StderrCapture capture(dir_.Join("stderr"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunReporter> reporter,
                       RunReporter::Create(options_, 1, Description()));
  EXPECT_FALSE(reporter->rank0());
  TrainThreeSteps(*reporter);
  reporter->Note("a note only rank 0 prints");
  ASSERT_OK(reporter->Finished(RunSummary()));
  reporter.reset();
  EXPECT_EQ(capture.Text(), "");
  EXPECT_THAT(Lines(ReadFile(options_.sample_log + ".rank1")), SizeIs(3));
  for (const std::string& path : {options_.metrics_jsonl, options_.metrics_out, options_.loss_log,
                                  options_.tensorboard_dir, options_.sample_log + ".rank0"}) {
    EXPECT_FALSE(Exists(path)) << path;
  }
}

TEST_F(RunReporterTest, AnOutputThatCannotBeOpenedIsRefusedNamingItsFlag) {
  ReportOptions options;
  options.sample_log = dir_.Join("missing/samples.log");
  EXPECT_THAT(
      RunReporter::Create(options, 0, Description()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sample_log: cannot write")));
  options = ReportOptions();
  options.loss_log = dir_.Join("missing/loss.log");
  EXPECT_THAT(RunReporter::Create(options, 0, Description()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--loss_log: cannot write")));
  options = ReportOptions();
  options.metrics_jsonl = dir_.Join("missing/metrics.jsonl");
  EXPECT_THAT(RunReporter::Create(options, 0, Description()), Not(IsOk()));
  // Rank 1 opens nothing but its sample log.
  EXPECT_OK(RunReporter::Create(options, 1, Description()));
}

}  // namespace
}  // namespace stoker::trainer
