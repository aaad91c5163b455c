// The doctor's verdicts as pure functions of made-up machines (Note [Doctor verdicts]).
#include "launcher/doctor.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace stoker::launcher {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// An H200 node as it should be: 8 GPUs, a CUDA 13.0 driver, everything found.
MachineFacts GoodGpuNode() {
  MachineFacts facts;
  facts.driver_loaded = true;
  facts.driver_cuda_version = 13000;
  facts.gpu_count = 8;
  facts.gpu_names.assign(8, "NVIDIA H200");
  facts.cudnn_version = 91000;
  facts.nccl_version = 22803;
  facts.mpirun_path = "/usr/bin/mpirun";
  facts.mpirun_version = "mpirun (Open MPI) 4.1.4";
  facts.shm_known = true;
  facts.shm_total_bytes = 64 * kGiB;
  facts.shm_available_bytes = 64 * kGiB;
  facts.memlock_unlimited = true;
  facts.seccomp = true;
  facts.landlock_abi = 7;
  return facts;
}

// The check named `name`.
Check Find(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& check : checks) {
    if (check.name == name) return check;
  }
  ADD_FAILURE() << "no check named " << name;
  return {};
}

TEST(DoctorTest, AGoodGpuNodeIsAllOk) {
  const std::vector<Check> checks = Evaluate(GoodGpuNode(), DoctorOptions{});
  ASSERT_EQ(checks.size(), 8u);
  for (const Check& check : checks) {
    EXPECT_EQ(check.verdict, Verdict::kOk) << check.name << ": " << check.finding;
    EXPECT_TRUE(check.fix.empty()) << check.name;
  }
  EXPECT_EQ(DoctorExitCode(checks), 0);
  EXPECT_THAT(Find(checks, "GPUs").finding, HasSubstr("8 GPU(s) visible: NVIDIA H200"));
  EXPECT_EQ(Find(checks, "cuDNN").finding, "9.10.0");
  EXPECT_EQ(Find(checks, "NCCL").finding, "2.28.3");
  EXPECT_THAT(Find(checks, "CUDA driver").finding,
              HasSubstr("the driver supports CUDA 13.0; torch 2.11 needs CUDA 13.0"));
}

TEST(DoctorTest, NoGpuIsAWarningWithAFixAndTheCpuNeedsNoCudnnOrNccl) {
  MachineFacts facts = GoodGpuNode();
  facts.driver_loaded = false;
  facts.driver_error = "libcuda.so.1 cannot be loaded (not found)";
  facts.driver_cuda_version = 0;
  facts.gpu_count = 0;
  facts.gpu_names.clear();
  facts.cudnn_version = 0;
  facts.cudnn_error = "libcudnn.so.9 cannot be loaded";
  const std::vector<Check> checks = Evaluate(facts, DoctorOptions{});
  const Check gpus = Find(checks, "GPUs");
  EXPECT_EQ(gpus.verdict, Verdict::kWarn);
  EXPECT_THAT(gpus.finding, HasSubstr("no GPU visible: libcuda.so.1 cannot be loaded"));
  EXPECT_THAT(gpus.fix, HasSubstr("nvidia-smi"));
  EXPECT_EQ(Find(checks, "CUDA driver").verdict, Verdict::kWarn);
  EXPECT_EQ(Find(checks, "cuDNN").verdict, Verdict::kOk);
  EXPECT_THAT(Find(checks, "cuDNN").finding, HasSubstr("not needed without a GPU"));
  EXPECT_EQ(DoctorExitCode(checks), 0);
}

TEST(DoctorTest, MoreRanksThanGpusFails) {
  MachineFacts facts = GoodGpuNode();
  facts.gpu_count = 2;
  facts.cuda_visible_devices_set = true;
  facts.cuda_visible_devices = "0,1";
  DoctorOptions options;
  options.np = 4;
  const Check gpus = Find(Evaluate(facts, options), "GPUs");
  EXPECT_EQ(gpus.verdict, Verdict::kFail);
  EXPECT_THAT(gpus.finding,
              HasSubstr("2 GPU(s) visible (CUDA_VISIBLE_DEVICES=0,1) for 4 ranks on this node"));
  EXPECT_THAT(gpus.fix, HasSubstr("--np=2"));
}

TEST(DoctorTest, OldDriverFailsNamingBothVersions) {
  MachineFacts facts = GoodGpuNode();
  facts.driver_cuda_version = 12080;
  const std::vector<Check> checks = Evaluate(facts, DoctorOptions{});
  const Check driver = Find(checks, "CUDA driver");
  EXPECT_EQ(driver.verdict, Verdict::kFail);
  EXPECT_THAT(driver.finding, HasSubstr("supports CUDA 12.8; torch 2.11 needs CUDA 13.0"));
  EXPECT_THAT(driver.fix, HasSubstr("upgrade the NVIDIA driver"));
  EXPECT_EQ(DoctorExitCode(checks), 1);
}

TEST(DoctorTest, MissingCudnnOrNcclOnAGpuNodeWarns) {
  MachineFacts facts = GoodGpuNode();
  facts.nccl_version = 0;
  facts.nccl_error = "libnccl.so.2 cannot be loaded";
  const Check nccl = Find(Evaluate(facts, DoctorOptions{}), "NCCL");
  EXPECT_EQ(nccl.verdict, Verdict::kWarn);
  EXPECT_THAT(nccl.fix, HasSubstr("LD_LIBRARY_PATH"));
}

TEST(DoctorTest, MissingMpirunFailsAndAnotherMpiWarns) {
  MachineFacts facts = GoodGpuNode();
  facts.mpirun_path = "";
  facts.mpirun_error = "--mpirun=mpirun: not found on PATH";
  Check mpi = Find(Evaluate(facts, DoctorOptions{}), "MPI");
  EXPECT_EQ(mpi.verdict, Verdict::kFail);
  EXPECT_THAT(mpi.fix, HasSubstr("openmpi-bin"));

  facts = GoodGpuNode();
  facts.mpirun_version = "HYDRA build details:";
  mpi = Find(Evaluate(facts, DoctorOptions{}), "MPI");
  EXPECT_EQ(mpi.verdict, Verdict::kWarn);
}

TEST(DoctorTest, SharedMemoryIsJudgedAgainstTheRingsOfEveryRank) {
  DoctorOptions options;  // 8 ranks (one per GPU) x 4 slots x 256 x 224x224x3: about 1.2 GiB
  const uint64_t need = 8 * RingBytesPerRank(options);
  EXPECT_EQ(RingBytesPerRank(options), uint64_t{4} * 256 * (224 * 224 * 3 + 12));
  MachineFacts facts = GoodGpuNode();

  facts.shm_available_bytes = need - 1;
  Check shm = Find(Evaluate(facts, options), "/dev/shm");
  EXPECT_EQ(shm.verdict, Verdict::kFail);
  EXPECT_THAT(shm.fix, HasSubstr("--shm-size="));

  facts.shm_available_bytes = need + need / 2;
  shm = Find(Evaluate(facts, options), "/dev/shm");
  EXPECT_EQ(shm.verdict, Verdict::kWarn);
  EXPECT_THAT(shm.finding, HasSubstr("little headroom"));

  facts.shm_available_bytes = 2 * need;
  EXPECT_EQ(Find(Evaluate(facts, options), "/dev/shm").verdict, Verdict::kOk);
}

// Note [Pinning and the locked-memory limit]: the rings' pinning does not count against
// the limit; InfiniBand registration by NCCL and MPI does.
TEST(DoctorTest, ALowMemlockLimitIsAWarningAboutInfinibandUnlessCapIpcLock) {
  DoctorOptions options;
  MachineFacts facts = GoodGpuNode();
  facts.memlock_unlimited = false;
  facts.memlock_bytes = 8 << 20;  // the usual 8 MiB default
  Check memlock = Find(Evaluate(facts, options), "memlock");
  EXPECT_EQ(memlock.verdict, Verdict::kWarn);
  EXPECT_THAT(memlock.finding, HasSubstr("locked-memory limit 8.0 MiB"));
  EXPECT_THAT(memlock.finding, HasSubstr("InfiniBand"));
  EXPECT_THAT(memlock.fix, HasSubstr("ulimit -l unlimited"));

  facts.has_ipc_lock = true;
  EXPECT_EQ(Find(Evaluate(facts, options), "memlock").verdict, Verdict::kOk);

  facts.has_ipc_lock = false;
  facts.memlock_unlimited = true;
  EXPECT_EQ(Find(Evaluate(facts, options), "memlock").verdict, Verdict::kOk);
}

TEST(DoctorTest, TheSandboxWarnsWithoutLandlockOrSeccomp) {
  MachineFacts facts = GoodGpuNode();
  EXPECT_THAT(Find(Evaluate(facts, DoctorOptions{}), "sandbox").finding,
              HasSubstr("seccomp filters and Landlock ABI 7"));
  facts.landlock_abi = 0;
  facts.landlock_missing = "built into the kernel but not enabled";
  Check sandbox = Find(Evaluate(facts, DoctorOptions{}), "sandbox");
  EXPECT_EQ(sandbox.verdict, Verdict::kWarn);
  EXPECT_THAT(sandbox.finding, HasSubstr("no Landlock (built into the kernel but not enabled)"));
  EXPECT_THAT(sandbox.finding, HasSubstr("can still make new files"));
  EXPECT_THAT(sandbox.fix, HasSubstr("lsm="));
  facts.seccomp = false;
  facts.seccomp_missing = "no CONFIG_SECCOMP";
  sandbox = Find(Evaluate(facts, DoctorOptions{}), "sandbox");
  EXPECT_EQ(sandbox.verdict, Verdict::kWarn);
  EXPECT_THAT(sandbox.finding, HasSubstr("runs unconfined"));
  EXPECT_THAT(sandbox.fix, HasSubstr("CONFIG_SECCOMP_FILTER"));
  EXPECT_EQ(DoctorExitCode(Evaluate(facts, DoctorOptions{})), 0);
}

TEST(DoctorTest, ReportShowsVerdictsFixesAndASummary) {
  MachineFacts facts = GoodGpuNode();
  facts.driver_cuda_version = 12000;
  const std::vector<Check> checks = Evaluate(facts, DoctorOptions{});
  const std::string report = FormatReport(checks, DoctorOptions{});
  EXPECT_THAT(report, HasSubstr("[FAIL] CUDA driver: "));
  EXPECT_THAT(report, HasSubstr("\n       fix: upgrade the NVIDIA driver"));
  EXPECT_THAT(report, HasSubstr("[OK]   GPUs: 8 GPU(s) visible"));
  EXPECT_THAT(report, HasSubstr("1 FAIL, 0 WARN, 7 OK\n"));
}

TEST(DoctorArgsTest, ParsesTheJobsShape) {
  absl::StatusOr<DoctorOptions> options = ParseDoctorArgs(
      {"--np=4", "--batch_size=128", "--image_size=160", "--ring_slots=6", "--mpirun=/opt/mpirun"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->np, 4);
  EXPECT_EQ(options->batch_size, 128);
  EXPECT_EQ(options->image_size, 160);
  EXPECT_EQ(options->ring_slots, 6);
  EXPECT_EQ(options->mpirun, "/opt/mpirun");
}

TEST(DoctorArgsTest, RejectsUnknownFlagsAndBadNumbers) {
  for (const char* bad : {"--gpus=2", "--np=0", "--batch_size=x", "np=2", "--np"}) {
    EXPECT_EQ(ParseDoctorArgs({bad}).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(FormatBytesTest, PicksTheUnit) {
  EXPECT_EQ(FormatBytes(17), "17 B");
  EXPECT_EQ(FormatBytes(8 << 10), "8.0 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 29), "1.5 GiB");
}

}  // namespace
}  // namespace stoker::launcher
