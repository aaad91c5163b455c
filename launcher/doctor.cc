#include "launcher/doctor.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/flags.h"
#include "data_service/sandbox.h"
#include "launcher/launch_command.h"
#include "launcher/rank/program_paths.h"

namespace stoker::launcher {
namespace {

// Note [Doctor verdicts]
// GPUs         WARN when none is visible (the job then trains on the CPU); FAIL when fewer
//              than the ranks per node; else OK.
// CUDA driver  WARN when there is no driver to ask; FAIL when it supports an older CUDA
//              than libtorch was built for (kTorchCudaVersion); else OK.
// cuDNN, NCCL  OK when found; when not found: WARN if GPUs are visible (the trainer may
//              still load the copy beside torch, as bundle/stoker arranges), OK otherwise
//              (the CPU path needs neither).
// MPI          FAIL when mpirun is missing or `mpirun --version` fails; WARN when it is not
//              Open MPI (Stoker is built and tested with Open MPI 4.1); else OK.
// /dev/shm     need = ranks * RingBytesPerRank. FAIL when less than need is available;
//              WARN when need is more than half of what is available (no headroom for a
//              validation ring or another job); else OK. WARN when statvfs fails.
// memlock      NCCL and MPI over InfiniBand register memory against the locked-memory
//              limit; pinning the rings does not (cudaHostRegister is not counted: Note
//              [Pinning and the locked-memory limit] in trainer/input/cuda_batch_feeder.cc). OK
//              when unlimited or when the process has CAP_IPC_LOCK (root); otherwise WARN
//              (jobs within one node do not need it).
// sandbox      the data service's sandbox (data_service/sandbox.h), on by default. OK with
//              seccomp filters and Landlock; WARN with seccomp alone (new files can be made
//              and files removed anywhere the user can) or neither (the service runs
//              unconfined; with --require_sandbox it refuses to start).

// The NVIDIA driver API, by hand: the launcher does not link CUDA.
using CuInit = int (*)(unsigned int);
using CuDriverGetVersion = int (*)(int*);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuGetErrorString = int (*)(int, const char**);

std::string DlError() {
  const char* error = dlerror();
  return error != nullptr ? error : "unknown error";
}

void ProbeDriver(MachineFacts& facts) {
  // RTLD_LOCAL and never closed: the driver must not be unloaded while threads it made run.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    facts.driver_error = absl::StrCat("libcuda.so.1 cannot be loaded (", DlError(), ")");
    return;
  }
  auto init = reinterpret_cast<CuInit>(dlsym(cuda, "cuInit"));
  auto driver_version = reinterpret_cast<CuDriverGetVersion>(dlsym(cuda, "cuDriverGetVersion"));
  auto device_count = reinterpret_cast<CuDeviceGetCount>(dlsym(cuda, "cuDeviceGetCount"));
  auto device_get = reinterpret_cast<CuDeviceGet>(dlsym(cuda, "cuDeviceGet"));
  auto device_name = reinterpret_cast<CuDeviceGetName>(dlsym(cuda, "cuDeviceGetName"));
  auto error_string = reinterpret_cast<CuGetErrorString>(dlsym(cuda, "cuGetErrorString"));
  if (init == nullptr || driver_version == nullptr || device_count == nullptr ||
      device_get == nullptr || device_name == nullptr) {
    facts.driver_error = "libcuda.so.1 lacks the driver API (cuInit, cuDeviceGetCount, ...)";
    return;
  }
  facts.driver_loaded = true;
  int version = 0;
  if (driver_version(&version) == 0) facts.driver_cuda_version = version;
  const int result = init(0);
  if (result != 0) {
    const char* text = nullptr;
    if (error_string != nullptr) error_string(result, &text);
    facts.driver_error = absl::StrCat("cuInit failed with error ", result,
                                      text != nullptr ? absl::StrCat(" (", text, ")") : "");
    return;
  }
  int count = 0;
  if (device_count(&count) != 0) count = 0;
  facts.gpu_count = count;
  for (int i = 0; i < count; ++i) {
    int device = 0;
    char name[256] = {};
    if (device_get(&device, i) == 0 && device_name(name, sizeof(name) - 1, device) == 0) {
      facts.gpu_names.push_back(name);
    }
  }
}

// Loads `library` and calls its version function `symbol`; 0 and `error` when it cannot.
template <typename Function, typename Call>
int LibraryVersion(const char* library, const char* symbol, std::string* error, Call call) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *error = absl::StrCat(library, " cannot be loaded (", DlError(), ")");
    return 0;
  }
  auto function = reinterpret_cast<Function>(dlsym(handle, symbol));
  if (function == nullptr) {
    *error = absl::StrCat(library, " has no ", symbol);
    return 0;
  }
  return call(function);
}

void ProbeMpi(MachineFacts& facts, const DoctorOptions& options) {
  const char* path = std::getenv("PATH");
  absl::StatusOr<std::string> mpirun =
      ResolveProgram(options.mpirun, path != nullptr ? path : "", "--mpirun");
  if (!mpirun.ok()) {
    facts.mpirun_error = std::string(mpirun.status().message());
    return;
  }
  facts.mpirun_path = *mpirun;
  const std::string command =
      absl::StrCat("timeout 20 ", ShellQuote(*mpirun), " --version 2>&1 </dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    facts.mpirun_error = "cannot run `mpirun --version`";
    return;
  }
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) {
      facts.mpirun_version = std::string(line);
      break;
    }
  }
  if (status != 0) {
    facts.mpirun_error = absl::StrCat(
        "`", *mpirun,
        " --version` failed: ", facts.mpirun_version.empty() ? "no output" : facts.mpirun_version);
  }
}

void ProbeSharedMemory(MachineFacts& facts) {
  struct statvfs info;
  if (statvfs("/dev/shm", &info) != 0) {
    facts.shm_error = absl::StrCat("statvfs /dev/shm: ", std::strerror(errno));
    return;
  }
  facts.shm_known = true;
  facts.shm_total_bytes = static_cast<uint64_t>(info.f_blocks) * info.f_frsize;
  facts.shm_available_bytes = static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
}

// Whether CAP_IPC_LOCK is in this process's effective capabilities.
bool HasIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "CapEff:")) continue;
    uint64_t caps = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(rest), &caps)) return false;
    constexpr int kCapIpcLock = 14;
    return (caps >> kCapIpcLock) & 1;
  }
  return false;
}

void ProbeMemlock(MachineFacts& facts) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
    facts.memlock_unlimited = limit.rlim_cur == RLIM_INFINITY;
    facts.memlock_bytes = facts.memlock_unlimited ? 0 : limit.rlim_cur;
  }
  facts.has_ipc_lock = HasIpcLock();
}

std::string CudaVersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

// cuDNN 9 and NCCL 2 both count major * 10000 + minor * 100 + patch.
std::string LibraryVersionText(int version) {
  return absl::StrCat(version / 10000, ".", (version % 10000) / 100, ".", version % 100);
}

std::string VisibleDevicesNote(const MachineFacts& facts) {
  return facts.cuda_visible_devices_set
             ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=", facts.cuda_visible_devices, ")")
             : "";
}

Check GpuCheck(const MachineFacts& facts, int ranks) {
  Check check{"GPUs"};
  if (facts.gpu_count == 0) {
    check.verdict = Verdict::kWarn;
    check.finding = absl::StrCat(
        "no GPU visible", facts.driver_error.empty() ? "" : absl::StrCat(": ", facts.driver_error),
        VisibleDevicesNote(facts), "; the trainers would run on the CPU");
    check.fix =
        "on a GPU host: install the NVIDIA driver and check that `nvidia-smi` lists the GPUs; "
        "in a container pass them in (docker run --gpus all); make sure CUDA_VISIBLE_DEVICES "
        "is unset or names them";
    return check;
  }
  const std::string names = absl::StrJoin(facts.gpu_names, ", ");
  if (facts.gpu_count < ranks) {
    check.verdict = Verdict::kFail;
    check.finding = absl::StrCat(facts.gpu_count, " GPU(s) visible", VisibleDevicesNote(facts),
                                 " for ", ranks, " ranks on this node (one GPU each)");
    check.fix = absl::StrCat("run at most --np=", facts.gpu_count,
                             " ranks per node, or make the other GPUs visible");
    return check;
  }
  check.finding = absl::StrCat(facts.gpu_count, " GPU(s) visible", VisibleDevicesNote(facts),
                               names.empty() ? "" : absl::StrCat(": ", names));
  return check;
}

Check DriverCheck(const MachineFacts& facts) {
  Check check{"CUDA driver"};
  const std::string needed =
      absl::StrCat("torch ", kTorchVersion, " needs CUDA ", CudaVersionText(kTorchCudaVersion));
  if (facts.driver_cuda_version == 0) {
    check.verdict = Verdict::kWarn;
    check.finding = absl::StrCat("no driver to ask (", needed, " or newer)");
    check.fix = absl::StrCat("on a GPU host: install an NVIDIA driver that supports CUDA ",
                             CudaVersionText(kTorchCudaVersion), " or newer");
    return check;
  }
  if (facts.driver_cuda_version < kTorchCudaVersion) {
    check.verdict = Verdict::kFail;
    check.finding = absl::StrCat("the driver supports CUDA ",
                                 CudaVersionText(facts.driver_cuda_version), "; ", needed);
    check.fix = absl::StrCat("upgrade the NVIDIA driver to one that supports CUDA ",
                             CudaVersionText(kTorchCudaVersion),
                             " (R580 or newer), or install CUDA's forward-compatibility "
                             "package (cuda-compat) for this driver");
    return check;
  }
  check.finding = absl::StrCat("the driver supports CUDA ",
                               CudaVersionText(facts.driver_cuda_version), "; ", needed);
  return check;
}

Check LibraryCheck(const char* name, int version, const std::string& error, bool gpus,
                   const char* soname) {
  Check check{name};
  if (version > 0) {
    check.finding = LibraryVersionText(version);
    return check;
  }
  if (!gpus) {
    check.finding = absl::StrCat("not found (", error, "); not needed without a GPU");
    return check;
  }
  check.verdict = Verdict::kWarn;
  check.finding = absl::StrCat("not found on the library path: ", error);
  check.fix = absl::StrCat(
      "run the programs through bundle/stoker (it puts torch's nvidia/*/lib "
      "on the library path), or add the folder of ",
      soname, " to LD_LIBRARY_PATH");
  return check;
}

Check MpiCheck(const MachineFacts& facts) {
  Check check{"MPI"};
  if (facts.mpirun_path.empty() || !facts.mpirun_error.empty()) {
    check.verdict = Verdict::kFail;
    check.finding = facts.mpirun_error;
    check.fix =
        "install Open MPI 4.1 (Debian/Ubuntu: apt-get install openmpi-bin "
        "libopenmpi-dev), or name it with --mpirun=PATH";
    return check;
  }
  check.finding = absl::StrCat(facts.mpirun_version, " (", facts.mpirun_path, ")");
  if (!absl::StrContains(facts.mpirun_version, "Open MPI")) {
    check.verdict = Verdict::kWarn;
    check.fix =
        "Stoker is built and tested with Open MPI 4.1; the trainer must run under the "
        "MPI it was built against";
  }
  return check;
}

Check SharedMemoryCheck(const MachineFacts& facts, const DoctorOptions& options, int ranks) {
  Check check{"/dev/shm"};
  if (!facts.shm_known) {
    check.verdict = Verdict::kWarn;
    check.finding = facts.shm_error;
    check.fix = "mount a tmpfs on /dev/shm (the rings live there)";
    return check;
  }
  const uint64_t need = static_cast<uint64_t>(ranks) * RingBytesPerRank(options);
  const std::string finding = absl::StrCat(
      FormatBytes(facts.shm_available_bytes), " available of ", FormatBytes(facts.shm_total_bytes),
      "; the rings need ", FormatBytes(need), " (", ranks, " rank(s) x ", options.ring_slots,
      " slots x ", options.batch_size, " x ", options.image_size, "x", options.image_size, "x3)");
  check.finding = finding;
  const std::string fix =
      absl::StrCat("give /dev/shm at least ", FormatBytes(2 * need),
                   ": `mount -o remount,size=", (2 * need + (1 << 30) - 1) >> 30,
                   "G /dev/shm`, or in Docker `--shm-size=", (2 * need + (1 << 30) - 1) >> 30,
                   "g`; or lower --ring_slots or --batch_size");
  if (facts.shm_available_bytes < need) {
    check.verdict = Verdict::kFail;
    check.fix = fix;
  } else if (need > facts.shm_available_bytes / 2) {
    check.verdict = Verdict::kWarn;
    check.finding += " (little headroom)";
    check.fix = fix;
  }
  return check;
}

Check MemlockCheck(const MachineFacts& facts) {
  Check check{"memlock"};
  if (facts.memlock_unlimited) {
    check.finding = "locked-memory limit unlimited";
    return check;
  }
  const std::string limit = FormatBytes(facts.memlock_bytes);
  if (facts.has_ipc_lock) {
    check.finding = absl::StrCat("locked-memory limit ", limit,
                                 ", but this process has CAP_IPC_LOCK (root): no limit applies");
    return check;
  }
  check.verdict = Verdict::kWarn;
  check.finding = absl::StrCat(
      "locked-memory limit ", limit,
      ": enough within one node (pinning the rings does not count "
      "against it), too low for NCCL or MPI over InfiniBand, which register memory against it");
  check.fix =
      "for jobs over InfiniBand raise it: `ulimit -l unlimited` (limits.conf: `* - memlock "
      "unlimited`); in Docker `--ulimit memlock=-1`; under Slurm the limit comes from slurmd "
      "(PropagateResourceLimits, LimitMEMLOCK=infinity in its systemd unit)";
  return check;
}

Check SandboxCheck(const MachineFacts& facts) {
  Check check{"sandbox"};
  const std::string landlock = facts.landlock_abi > 0
                                   ? absl::StrCat("Landlock ABI ", facts.landlock_abi)
                                   : absl::StrCat("no Landlock (", facts.landlock_missing, ")");
  const std::string landlock_fix =
      "enable Landlock: Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK, and landlock in "
      "the kernel's lsm= boot parameter (or CONFIG_LSM)";
  if (!facts.seccomp) {
    check.verdict = Verdict::kWarn;
    check.finding = absl::StrCat("no seccomp filters (", facts.seccomp_missing, "), ", landlock,
                                 ": the data service runs unconfined; a decoder bug exploited "
                                 "by a crafted image has every right of the user");
    check.fix = absl::StrCat("use a kernel with CONFIG_SECCOMP_FILTER",
                             facts.landlock_abi > 0 ? "" : absl::StrCat("; ", landlock_fix));
    return check;
  }
  if (facts.landlock_abi == 0) {
    check.verdict = Verdict::kWarn;
    check.finding = absl::StrCat(
        "seccomp filters, ", landlock,
        ": the data service's system calls are confined, but it can still make new files "
        "and remove files anywhere the user can");
    check.fix = landlock_fix;
    return check;
  }
  check.finding = absl::StrCat("seccomp filters and ", landlock,
                               ": the data service's system calls and file writes are confined");
  return check;
}

}  // namespace

namespace {

// Doctor's command line: its numbers as given (checked by ParseDoctorArgs) and --mpirun.
struct DoctorArgs {
  explicit DoctorArgs(const DoctorOptions& defaults)
      : np(absl::StrCat(defaults.np)),
        batch_size(absl::StrCat(defaults.batch_size)),
        image_size(absl::StrCat(defaults.image_size)),
        ring_slots(absl::StrCat(defaults.ring_slots)),
        mpirun(defaults.mpirun) {}
  std::string np, batch_size, image_size, ring_slots, mpirun;
};

// Doctor's flags, bound to `args`. They are not Abseil flags: --np and --mpirun are also
// the launcher's, with other defaults.
FlagSpec DoctorFlagSpec(DoctorArgs* args) {
  FlagSpec spec;
  spec.program = "launcher doctor";
  spec.local = {
      StringFlag("np", &args->np, "Ranks on this node; 0: one per visible GPU (1 without GPUs)."),
      StringFlag("batch_size", &args->batch_size, "Batch size per rank, for the ring size."),
      StringFlag("image_size", &args->image_size, "Square image size, for the ring size."),
      StringFlag("ring_slots", &args->ring_slots,
                 "Ring slots per rank (the trainer's --ring_slots)."),
      StringFlag("mpirun", &args->mpirun, "The mpirun program; a bare name is looked up on PATH."),
  };
  spec.wording = FlagWording::kSentence;
  return spec;
}

}  // namespace

absl::StatusOr<DoctorOptions> ParseDoctorArgs(absl::Span<const std::string> args) {
  DoctorOptions options;
  DoctorArgs given(options);
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, DoctorFlagSpec(&given));
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("doctor: ", parsed.status().message()));
  }
  options.help = parsed->help;
  options.mpirun = given.mpirun;
  const std::tuple<const char*, const std::string*, int*> numbers[] = {
      {"np", &given.np, &options.np},
      {"batch_size", &given.batch_size, &options.batch_size},
      {"image_size", &given.image_size, &options.image_size},
      {"ring_slots", &given.ring_slots, &options.ring_slots}};
  for (const auto& [name, text, number] : numbers) {
    if (parsed->given.count(name) == 0) continue;
    if (!absl::SimpleAtoi(*text, number) || *number < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("doctor: --", name, "=", *text, " must be a positive number"));
    }
  }
  return options;
}

std::string DoctorFlagsHelp() {
  DoctorArgs defaults{DoctorOptions()};
  return FlagsHelp(DoctorFlagSpec(&defaults));
}

int DoctorRanks(const DoctorOptions& options, int gpu_count) {
  if (options.np > 0) return options.np;
  return gpu_count > 0 ? gpu_count : 1;
}

uint64_t RingBytesPerRank(const DoctorOptions& options) {
  const uint64_t image = static_cast<uint64_t>(options.image_size) * options.image_size * 3;
  return static_cast<uint64_t>(options.ring_slots) * options.batch_size * (image + 4 + 8);
}

MachineFacts GatherFacts(const DoctorOptions& options) {
  MachineFacts facts;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    facts.cuda_visible_devices_set = true;
    facts.cuda_visible_devices = visible;
  }
  ProbeDriver(facts);
  using CudnnGetVersion = size_t (*)();
  facts.cudnn_version = static_cast<int>(
      LibraryVersion<CudnnGetVersion>("libcudnn.so.9", "cudnnGetVersion", &facts.cudnn_error,
                                      [](CudnnGetVersion f) { return static_cast<int>(f()); }));
  using NcclGetVersion = int (*)(int*);
  facts.nccl_version = LibraryVersion<NcclGetVersion>("libnccl.so.2", "ncclGetVersion",
                                                      &facts.nccl_error, [](NcclGetVersion f) {
                                                        int version = 0;
                                                        return f(&version) == 0 ? version : 0;
                                                      });
  ProbeMpi(facts, options);
  ProbeSharedMemory(facts);
  ProbeMemlock(facts);
  const data_service::SandboxSupport sandbox = data_service::ProbeSandboxSupport();
  facts.seccomp = sandbox.seccomp;
  facts.seccomp_missing = sandbox.seccomp_missing;
  facts.landlock_abi = sandbox.landlock_abi;
  facts.landlock_missing = sandbox.landlock_missing;
  return facts;
}

std::vector<Check> Evaluate(const MachineFacts& facts, const DoctorOptions& options) {
  const int ranks = DoctorRanks(options, facts.gpu_count);
  const bool gpus = facts.gpu_count > 0;
  return {
      GpuCheck(facts, ranks),
      DriverCheck(facts),
      LibraryCheck("cuDNN", facts.cudnn_version, facts.cudnn_error, gpus, "libcudnn.so.9"),
      LibraryCheck("NCCL", facts.nccl_version, facts.nccl_error, gpus, "libnccl.so.2"),
      MpiCheck(facts),
      SharedMemoryCheck(facts, options, ranks),
      MemlockCheck(facts),
      SandboxCheck(facts),
  };
}

std::string FormatReport(const std::vector<Check>& checks, const DoctorOptions& options) {
  std::string report = absl::StrFormat(
      "Stoker doctor: checks for %s, --batch_size=%d --image_size=%d --ring_slots=%d\n",
      options.np > 0 ? absl::StrCat(options.np, " rank(s) per node")
                     : std::string("one rank per visible GPU (1 without GPUs)"),
      options.batch_size, options.image_size, options.ring_slots);
  int counts[3] = {0, 0, 0};
  for (const Check& check : checks) {
    const char* tag = check.verdict == Verdict::kOk     ? "[OK]  "
                      : check.verdict == Verdict::kWarn ? "[WARN]"
                                                        : "[FAIL]";
    ++counts[static_cast<int>(check.verdict)];
    absl::StrAppend(&report, tag, " ", check.name, ": ", check.finding, "\n");
    if (!check.fix.empty()) absl::StrAppend(&report, "       fix: ", check.fix, "\n");
  }
  absl::StrAppend(&report, counts[2], " FAIL, ", counts[1], " WARN, ", counts[0], " OK\n");
  return report;
}

int DoctorExitCode(const std::vector<Check>& checks) {
  for (const Check& check : checks) {
    if (check.verdict == Verdict::kFail) return 1;
  }
  return 0;
}

std::string FormatBytes(uint64_t bytes) {
  constexpr uint64_t kKiB = 1024, kMiB = kKiB << 10, kGiB = kMiB << 10;
  if (bytes >= kGiB) return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / kGiB);
  if (bytes >= kMiB) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / kMiB);
  if (bytes >= kKiB) return absl::StrFormat("%.1f KiB", static_cast<double>(bytes) / kKiB);
  return absl::StrCat(bytes, " B");
}

}  // namespace stoker::launcher
