// `launcher doctor`: checks the machine for what a Stoker job needs (GPUs and driver, cuDNN,
// NCCL, MPI, /dev/shm for the rings, the locked-memory limit for pinning them, the kernel's
// support for the data service's sandbox), each with a
// verdict and a fix. Facts are gathered at run time without linking CUDA (dlopen), and judged
// by a pure function, so that every verdict is testable on any machine.
#ifndef STOKER_LAUNCHER_DOCTOR_H_
#define STOKER_LAUNCHER_DOCTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace stoker::launcher {

// The CUDA version libtorch was built for, as cuDriverGetVersion() counts (major * 1000 +
// minor * 10): torch 2.11 from PyPI is the cu130 build, so the driver must support CUDA 13.0.
// Keep it in step with third_party/system_deps.bzl's torch version; doctor_command_test
// compares it with torch.version.cuda of the installed torch.
inline constexpr int kTorchCudaVersion = 13000;
inline constexpr char kTorchVersion[] = "2.11";

// What the job will ask of this node: `launcher doctor [--np=N] [--batch_size=B]
// [--image_size=S] [--ring_slots=K] [--mpirun=PROGRAM]`. The defaults are the README's
// ResNet-50 run (256 images of 224x224 per rank, the trainer's 4 ring slots).
struct DoctorOptions {
  int np = 0;  // ranks on this node; 0: one per visible GPU, or 1 without GPUs
  int batch_size = 256;
  int image_size = 224;
  int ring_slots = 4;
  std::string mpirun = "mpirun";
  bool help = false;  // --help was given: print DoctorFlagsHelp() and check nothing
};

// The ranks per node the checks assume: `options.np`, or one per visible GPU (1 if none).
int DoctorRanks(const DoctorOptions& options, int gpu_count);

// Parses the arguments after `doctor` (common/flags.h, --config files too). InvalidArgument
// naming the flag on an unknown flag or a value that is not a positive number.
absl::StatusOr<DoctorOptions> ParseDoctorArgs(absl::Span<const std::string> args);

// Doctor's flags with their defaults and help, for `launcher doctor --help`.
std::string DoctorFlagsHelp();

// Bytes of one rank's ring: slots of batch_size images of image_size^2 * 3 bytes, plus a
// label (4 bytes) and a sample index (8 bytes) per image.
uint64_t RingBytesPerRank(const DoctorOptions& options);

// What GatherFacts found. Plain data; tests make their own.
struct MachineFacts {
  // The NVIDIA driver (libcuda.so.1).
  bool driver_loaded = false;
  std::string driver_error;     // why it could not be loaded or initialised
  int driver_cuda_version = 0;  // cuDriverGetVersion; 0 when unknown
  int gpu_count = 0;            // cuDeviceGetCount after cuInit
  std::vector<std::string> gpu_names;
  std::string cuda_visible_devices;  // the variable, when set
  bool cuda_visible_devices_set = false;
  // Versions as the libraries report them (cudnnGetVersion, ncclGetVersion); 0: not found.
  int cudnn_version = 0;
  std::string cudnn_error;
  int nccl_version = 0;
  std::string nccl_error;
  // mpirun.
  std::string mpirun_path;     // empty: not found
  std::string mpirun_version;  // the first line of `mpirun --version`
  std::string mpirun_error;
  // /dev/shm (statvfs).
  bool shm_known = false;
  std::string shm_error;
  uint64_t shm_total_bytes = 0;
  uint64_t shm_available_bytes = 0;
  // RLIMIT_MEMLOCK and CAP_IPC_LOCK.
  bool memlock_unlimited = false;
  uint64_t memlock_bytes = 0;  // the soft limit
  bool has_ipc_lock = false;
  // The data service's sandbox (data_service/sandbox.h): seccomp filters, Landlock.
  bool seccomp = false;
  std::string seccomp_missing;   // why not
  int landlock_abi = 0;          // 0: none
  std::string landlock_missing;  // why not
};

// Looks at this machine. Never fails: what it cannot find is a fact too.
MachineFacts GatherFacts(const DoctorOptions& options);

enum class Verdict { kOk, kWarn, kFail };

// One line of the report. Plain data.
struct Check {
  std::string name;  // "GPUs", "CUDA driver", "cuDNN", "NCCL", "MPI", "/dev/shm", "memlock",
                     // "sandbox"
  Verdict verdict = Verdict::kOk;
  std::string finding;  // what was found
  std::string fix;      // what to do about it; empty when there is nothing to do
};

// Judges `facts` for a job described by `options`, one Check per subject, in the order
// above. The rules (Note [Doctor verdicts] in doctor.cc) are pure functions of the inputs.
std::vector<Check> Evaluate(const MachineFacts& facts, const DoctorOptions& options);

// The report: one line per check, "[OK]   GPUs: ...", with "       fix: ..." under it when
// there is one, and a summary line.
std::string FormatReport(const std::vector<Check>& checks, const DoctorOptions& options);

// 1 when any check failed, else 0.
int DoctorExitCode(const std::vector<Check>& checks);

// "1.5 GiB", "512.0 MiB", "8.0 KiB", "17 B".
std::string FormatBytes(uint64_t bytes);

}  // namespace stoker::launcher

#endif  // STOKER_LAUNCHER_DOCTOR_H_
