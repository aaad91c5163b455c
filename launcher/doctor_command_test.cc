// `launcher doctor` on the machine the test runs on: each verdict is recomputed here from the
// machine's own values (statvfs, getrlimit, capabilities, dlopen) by the rules of Note
// [Doctor verdicts], and kTorchCudaVersion is compared with the installed torch.
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/testing/python_runner.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/sandbox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/doctor.h"
#include "launcher/launch_command.h"
#include "launcher/rank/child_process.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher {
namespace {

using ::stoker::launcher::testing::ReadFileOrEmpty;
using ::stoker::launcher::testing::Runfile;
using ::stoker::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct DoctorRun {
  ExitStatus status = ExitStatus::Lost();
  std::string stdout_text;
  std::string stderr_text;
};

DoctorRun RunDoctor(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
  DoctorRun run;
  absl::StatusOr<TempDir> out_temp = TempDir::Create("doctor");
  EXPECT_OK(out_temp);
  if (!out_temp.ok()) return run;
  const std::string out = out_temp->path();
  std::vector<std::string> argv = {Runfile("launcher/launcher"), "doctor"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string script =
      absl::StrCat("exec ", FormatCommand({}, argv), " >", out, "/stdout 2>", out, "/stderr");
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Spawn({"doctor", "/bin/sh", {"sh", "-c", script}, std::move(env)});
  EXPECT_OK(child);
  if (!child.ok()) return run;
  absl::StatusOr<ExitStatus> status = child->Wait(absl::Seconds(60));
  EXPECT_OK(status);
  if (status.ok()) run.status = *status;
  run.stdout_text = ReadFileOrEmpty(out + "/stdout");
  run.stderr_text = ReadFileOrEmpty(out + "/stderr");
  return run;
}

// The report line of check `name` ("[WARN] GPUs: ..."), and the fix line under it if any.
struct ReportLine {
  std::string line;
  std::string fix;
};
ReportLine Line(const std::string& report, const std::string& name) {
  std::vector<std::string> lines = absl::StrSplit(report, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].size() > 7 && absl::StartsWith(lines[i].substr(7), name + ": ")) {
      ReportLine found{lines[i], ""};
      if (i + 1 < lines.size() && absl::StartsWith(lines[i + 1], "       fix: ")) {
        found.fix = lines[i + 1];
      }
      return found;
    }
  }
  ADD_FAILURE() << "no line for " << name << " in:\n" << report;
  return {};
}

bool HasCapIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, "CapEff:")) continue;
    uint64_t caps = 0;
    EXPECT_TRUE(absl::SimpleHexAtoi(absl::StripAsciiWhitespace(line.substr(7)), &caps)) << line;
    return (caps >> 14) & 1;
  }
  return false;
}

bool DriverPresent() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return false;
  dlclose(cuda);
  return true;
}

TEST(DoctorCommandTest, NoGpuHereIsAWarningWithAFix) {
  if (DriverPresent()) GTEST_SKIP() << "this machine has an NVIDIA driver";
  const DoctorRun run = RunDoctor({});
  const ReportLine gpus = Line(run.stdout_text, "GPUs");
  EXPECT_THAT(gpus.line, StartsWith("[WARN] GPUs: no GPU visible"));
  EXPECT_THAT(gpus.fix, HasSubstr("nvidia-smi"));
  EXPECT_THAT(Line(run.stdout_text, "CUDA driver").line,
              StartsWith("[WARN] CUDA driver: no driver"));
}

TEST(DoctorCommandTest, SharedMemoryVerdictMatchesThisMachine) {
  struct statvfs info;
  ASSERT_EQ(statvfs("/dev/shm", &info), 0);
  const uint64_t available = static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
  // Three shapes: one that fits with room, one that fits without headroom, one that does not.
  // Ranks x slots x batch x (size^2 * 3 + 12) bytes; the last two are sized from `available`.
  struct Case {
    int np, batch, size;
  };
  const uint64_t per_image = 64 * 64 * 3 + 12;
  const int big_batch = static_cast<int>(available / (4 * per_image)) + 1;  // 1 rank: > available
  const int tight_batch = static_cast<int>(available * 3 / 4 / (4 * per_image));
  for (const Case& c : {Case{1, 2, 64}, Case{1, tight_batch, 64}, Case{1, big_batch, 64}}) {
    if (c.batch < 1) continue;
    const uint64_t need = static_cast<uint64_t>(c.np) * 4 * c.batch * per_image;
    const std::string expected = need > available       ? "[FAIL]"
                                 : need > available / 2 ? "[WARN]"
                                                        : "[OK]  ";
    const DoctorRun run =
        RunDoctor({absl::StrCat("--np=", c.np), absl::StrCat("--batch_size=", c.batch),
                   "--image_size=64", "--ring_slots=4"});
    // statvfs moves as other tests use /dev/shm: only judge cases clear of the boundaries.
    const double margin = 0.02;
    if (std::abs(static_cast<double>(need) - available) < margin * available ||
        std::abs(static_cast<double>(need) - available / 2.0) < margin * available) {
      continue;
    }
    const ReportLine shm = Line(run.stdout_text, "/dev/shm");
    EXPECT_THAT(shm.line, StartsWith(expected + " /dev/shm: ")) << "batch " << c.batch;
    EXPECT_THAT(shm.line, HasSubstr(absl::StrCat("the rings need ", FormatBytes(need))));
    if (expected == "[FAIL]") {
      EXPECT_EQ(run.status, ExitStatus::Exited(1));
      EXPECT_THAT(shm.fix, HasSubstr("--shm-size="));
    }
  }
}

TEST(DoctorCommandTest, MemlockVerdictMatchesThisMachine) {
  struct rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &limit), 0);
  const bool unlimited = limit.rlim_cur == RLIM_INFINITY;
  const bool ipc_lock = HasCapIpcLock();
  const DoctorRun run = RunDoctor({"--np=1", "--batch_size=256", "--image_size=224"});
  const ReportLine memlock = Line(run.stdout_text, "memlock");
  if (unlimited) {
    EXPECT_THAT(memlock.line, StartsWith("[OK]   memlock: locked-memory limit unlimited"));
  } else if (ipc_lock) {
    EXPECT_THAT(memlock.line, StartsWith("[OK]   memlock: "));
    EXPECT_THAT(memlock.line,
                HasSubstr(absl::StrCat("locked-memory limit ", FormatBytes(limit.rlim_cur))));
    EXPECT_THAT(memlock.line, HasSubstr("CAP_IPC_LOCK"));
  } else {
    EXPECT_THAT(memlock.line, StartsWith("[WARN] memlock: "));
    EXPECT_THAT(memlock.fix, HasSubstr("ulimit -l"));
  }
}

TEST(DoctorCommandTest, SandboxVerdictMatchesThisMachine) {
  const data_service::SandboxSupport support = data_service::ProbeSandboxSupport();
  const DoctorRun run = RunDoctor({"--np=1"});
  const ReportLine sandbox = Line(run.stdout_text, "sandbox");
  if (support.seccomp && support.landlock_abi > 0) {
    EXPECT_THAT(sandbox.line,
                StartsWith(absl::StrCat("[OK]   sandbox: seccomp filters and Landlock ABI ",
                                        support.landlock_abi)));
  } else {
    EXPECT_THAT(sandbox.line, StartsWith("[WARN] sandbox: "));
  }
}

TEST(DoctorCommandTest, FindsMpiAndFailsWithoutIt) {
  DoctorRun run = RunDoctor({});
  EXPECT_THAT(Line(run.stdout_text, "MPI").line, StartsWith("[OK]   MPI: mpirun (Open MPI) "));
  run = RunDoctor({"--mpirun=/nonexistent/mpirun"});
  const ReportLine mpi = Line(run.stdout_text, "MPI");
  EXPECT_THAT(mpi.line, StartsWith("[FAIL] MPI: "));
  EXPECT_THAT(mpi.fix, HasSubstr("openmpi-bin"));
  EXPECT_EQ(run.status, ExitStatus::Exited(1));
}

TEST(DoctorCommandTest, ExitCodeIsOneExactlyWhenACheckFails) {
  const DoctorRun run = RunDoctor({"--np=1", "--batch_size=2", "--image_size=32"});
  const bool failed = absl::StrContains(run.stdout_text, "\n[FAIL]");
  EXPECT_EQ(run.status, ExitStatus::Exited(failed ? 1 : 0)) << run.stdout_text;
  EXPECT_THAT(run.stdout_text, HasSubstr(failed ? " FAIL, " : "0 FAIL, "));
}

TEST(DoctorCommandTest, BadFlagsAreUsageErrors) {
  const DoctorRun run = RunDoctor({"--gpus=8"});
  EXPECT_EQ(run.status, ExitStatus::Exited(2));
  EXPECT_THAT(run.stderr_text, HasSubstr("doctor: unknown flag --gpus"));
}

TEST(DoctorCommandTest, TorchCudaVersionConstantMatchesTheInstalledTorch) {
  const absl::StatusOr<std::string> output = ::stoker::testing::RunPython(
      "import torch; print(torch.__version__); print(torch.version.cuda)\n");
  if (!output.ok()) GTEST_SKIP() << "no torch to compare with (set STOKER_PYTHON)";
  std::vector<std::string> lines = absl::StrSplit(*output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << *output;
  EXPECT_THAT(lines[0], StartsWith(kTorchVersion));
  // torch.version.cuda is "13.0"; kTorchCudaVersion counts 13000.
  EXPECT_EQ(lines[1], absl::StrCat(kTorchCudaVersion / 1000, ".", kTorchCudaVersion % 1000 / 10));
}

}  // namespace
}  // namespace stoker::launcher
