// data_service: one per node. Serves uint8 NHWC batches to the node's trainer ranks through
// shared-memory rings until SIGTERM or SIGINT; then it removes its socket and every
// segment it created and exits 0. Exit codes are the table of common/exit_codes.h: 2 for a
// bad flag or dataset folder, 65 for bad data (the bad-file cap), 1 for other failures.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/shm_segment.h"
#include "data_service/batch_producer.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/image/decode.h"
#include "data_service/memory_limit.h"
#include "data_service/sandbox.h"
#include "data_service/service.h"

ABSL_FLAG(std::string, socket, "",
          "Unix socket to listen on (created 0600; its directory must exist)");
ABSL_FLAG(std::string, job_id, "", "job id; rings are /dev/shm/stoker.<job_id>.ring.<rank>");
ABSL_FLAG(int32_t, node_id, 0, "this node's index, for log lines");
ABSL_FLAG(std::string, owner_record, "",
          "a file to remove on shutdown, after the rings and the socket: the job owner record "
          "of the rank that started this service (launcher/rank/node_data_service.h), so that "
          "nothing is left when that rank dies first");
ABSL_FLAG(bool, remove_socket_dir, false,
          "on shutdown, after the rings and the socket, remove the socket's directory too when "
          "nothing else is left in it (a node's job directory, launcher/rank/job_files.h)");
ABSL_FLAG(std::string, dataset, "synthetic",
          "synthetic, imagefolder (a folder per class of image files) or packed (an index "
          "file plus shard files, made by pack_imagefolder)");
ABSL_FLAG(std::string, train_dir, "",
          "the training split: imagefolder: its root folder (<class>/<image>); packed: its "
          "index file (e.g. /data/train.stkpack)");
ABSL_FLAG(std::string, val_dir, "",
          "the validation split (optional), as --train_dir: a root folder or an index file");
ABSL_FLAG(int64_t, synthetic_samples, 4096, "synthetic: training samples (validation: a tenth)");
ABSL_FLAG(int32_t, synthetic_classes, 10, "synthetic: number of classes");
ABSL_FLAG(uint64_t, data_seed, 0, "synthetic: seed of the generated images");
ABSL_FLAG(int32_t, threads, 0,
          "decode threads; 0: automatic, the cores less one per trainer rank registered on "
          "this node, at least one");
ABSL_FLAG(int32_t, prefetch, 2, "batches per ring decoded at the same time (at most its slots)");
ABSL_FLAG(std::string, bad_files, "skip",
          "an unusable image (missing, unreadable, empty, corrupt, truncated, not an image, "
          "more than --max_image_pixels): skip = replace it by the next usable sample of the "
          "epoch's order and warn once per file; fail = stop with an error naming the file");
ABSL_FLAG(double, max_bad_fraction, 0.01,
          "with --bad_files=skip: fail once more than this fraction of the samples seen "
          "(counted over at least 1000) had to be replaced");
ABSL_FLAG(int64_t, max_image_pixels, stoker::data_service::image::kDefaultMaxPixels,
          "images with more pixels (width x height) are unusable (decompression bombs); the "
          "default is Pillow's limit");
ABSL_FLAG(std::string, jpeg_decode, "fast",
          "JPEG reconstruction: fast (integer IDCT, plain chroma upsampling: ~10% faster, ~43 dB "
          "from Pillow's pixels on 500x375 photos) or exact (Pillow's pixels)");
ABSL_FLAG(std::string, gpu_decode_share, "auto",
          "share of each batch whose baseline JPEGs are sent to the trainer undecoded, with "
          "their crop, for its GPU's JPEG engines to decode (the trainer needs libnvjpeg): "
          "auto = what each trainer asks for (its own --gpu_decode_share: adaptive on a GPU, "
          "0 on the CPU); a number in [0, 1] = that share for every ring, whatever the "
          "trainers ask; 0: every sample is decoded here");
ABSL_FLAG(std::string, follow_links, "yes",
          "imagefolder: yes = follow symlinks whose target is outside the dataset folder, "
          "naming them in a warning; no = refuse the folder at start, naming the link");
ABSL_FLAG(int32_t, scan_timeout_s, 600,
          "imagefolder: listing a folder at start fails after this many seconds (a hung or "
          "very slow file system), naming the folder and how far it got");
ABSL_FLAG(int32_t, shutdown_timeout_s, 5,
          "on SIGTERM (and when a rank disconnects) wait this long for the samples being "
          "decoded; past it (a read stuck on a hung mount) log each busy decode thread and its "
          "file, remove the rings and the socket, and exit 124. Keep it below the launcher's "
          "--shutdown_grace");
ABSL_FLAG(std::string, max_memory, "auto",
          "the service's address-space limit (RLIMIT_AS): auto = what it uses at start + "
          "640 MiB per decode thread + 1 GiB + each ring while mapped (logged at start); none; "
          "or a size (8G, 512MiB). An image that needs more fails as an unusable file; a ring "
          "that does not fit under a size is refused");
ABSL_FLAG(bool, sandbox, false,
          "once initialised, refuse the system calls the service never needs (running "
          "programs, tracing, new sockets, mounts, identity changes...) with a seccomp filter "
          "and PR_SET_NO_NEW_PRIVS (data_service/sandbox.h)");
ABSL_FLAG(double, eval_resize_ratio, 256.0 / 224.0,
          "validation transform: Resize(round(image_size x this)) then CenterCrop(image_size)");

namespace stoker::data_service {
namespace {

constexpr int kFlagError = kExitUsage;

[[noreturn]] void FlagError(absl::string_view message) {
  std::fprintf(stderr, "data_service: %.*s\nRun data_service --help for the flags.\n",
               static_cast<int>(message.size()), message.data());
  std::exit(kFlagError);
}

// Removes the directory of `socket_path` when it is empty; another node's socket in it (two
// nodes of one job on one machine) keeps it.
void RemoveSocketDirectoryIfEmpty(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  if (slash == std::string::npos || slash == 0) return;
  const std::string dir = socket_path.substr(0, slash);
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST) {
    LogWarning("cannot remove the socket's directory %s: %s", dir, std::strerror(errno));
  }
}

// Parses data_service's own flags (common/flags.h; not the ones libraries register),
// exiting 2 (not Abseil's 1) on an unknown flag, a bad value or a positional argument.
void ParseFlags(int argc, char** argv) {
  FlagSpec spec;
  spec.program = "data_service";
  spec.files = {"data_service/main.cc"};
  spec.sections = {
      {"Flags",
       {"socket",           "job_id",           "node_id",           "dataset",
        "train_dir",        "val_dir",          "synthetic_samples", "synthetic_classes",
        "data_seed",        "threads",          "prefetch",          "bad_files",
        "max_bad_fraction", "max_image_pixels", "eval_resize_ratio", "jpeg_decode",
        "gpu_decode_share", "follow_links",     "scan_timeout_s",    "shutdown_timeout_s",
        "max_memory",       "sandbox",          "owner_record",      "remove_socket_dir"}}};
  absl::StatusOr<ParsedFlags> parsed =
      stoker::ParseFlags(absl::MakeConstSpan(argv + 1, argc - 1), spec);
  if (!parsed.ok()) FlagError(parsed.status().message());
  if (parsed->help) {
    std::printf(
        "data_service --socket=PATH --job_id=ID [--node_id=N] "
        "[--dataset=synthetic|imagefolder|packed] [--train_dir=DIR|INDEX] [--val_dir=DIR|INDEX] "
        "[--synthetic_samples=N] [--synthetic_classes=K] [--data_seed=S] [--threads=N] "
        "[--prefetch=N] [--bad_files=skip|fail] [--max_bad_fraction=F] [--max_image_pixels=N] "
        "[--eval_resize_ratio=R] [--jpeg_decode=fast|exact] [--gpu_decode_share=auto|F] "
        "[--follow_links=yes|no] "
        "[--scan_timeout_s=N] [--shutdown_timeout_s=N] [--max_memory=auto|none|SIZE] "
        "[--sandbox]\n%s",
        FlagsHelp(spec).c_str());
    std::exit(0);
  }
}

int Main(int argc, char** argv) {
  ParseFlags(argc, argv);
  if (absl::GetFlag(FLAGS_socket).empty()) FlagError("--socket: required");
  if (absl::GetFlag(FLAGS_job_id).empty()) FlagError("--job_id: required");
  if (absl::Status s = ValidateJobId(absl::GetFlag(FLAGS_job_id)); !s.ok()) FlagError(s.message());
  if (absl::GetFlag(FLAGS_node_id) < 0) FlagError("--node_id: must not be negative");
  if (absl::GetFlag(FLAGS_threads) < 0) FlagError("--threads: must be 0 (automatic) or positive");
  if (absl::GetFlag(FLAGS_prefetch) < 1) FlagError("--prefetch: must be at least 1");
  if (absl::GetFlag(FLAGS_dataset) != "imagefolder" && absl::GetFlag(FLAGS_dataset) != "packed" &&
      (!absl::GetFlag(FLAGS_train_dir).empty() || !absl::GetFlag(FLAGS_val_dir).empty())) {
    FlagError("--train_dir/--val_dir: only used with --dataset=imagefolder or packed");
  }
  absl::StatusOr<BadFilePolicy> bad_files = ParseBadFilePolicy(absl::GetFlag(FLAGS_bad_files));
  if (!bad_files.ok()) FlagError(bad_files.status().message());
  BadSampleOptions bad_samples;
  bad_samples.policy = *bad_files;
  bad_samples.max_fraction = absl::GetFlag(FLAGS_max_bad_fraction);
  if (absl::Status s = bad_samples.Validate(); !s.ok()) FlagError(s.message());
  if (absl::GetFlag(FLAGS_max_image_pixels) < 1) FlagError("--max_image_pixels: must be positive");
  const double ratio = absl::GetFlag(FLAGS_eval_resize_ratio);
  if (!(ratio >= 1.0 && ratio <= 8.0)) FlagError("--eval_resize_ratio: must be in [1, 8]");
  const absl::StatusOr<std::optional<double>> gpu_decode_share =
      ParseGpuDecodeShare(absl::GetFlag(FLAGS_gpu_decode_share));
  if (!gpu_decode_share.ok()) FlagError(gpu_decode_share.status().message());
  const std::string jpeg_decode = absl::GetFlag(FLAGS_jpeg_decode);
  if (jpeg_decode != "fast" && jpeg_decode != "exact") {
    FlagError(absl::StrCat("--jpeg_decode=", jpeg_decode, ": must be fast or exact"));
  }
  const std::string follow_links = absl::GetFlag(FLAGS_follow_links);
  if (follow_links != "yes" && follow_links != "no") {
    FlagError(absl::StrCat("--follow_links=", follow_links, ": must be yes or no"));
  }
  if (absl::GetFlag(FLAGS_scan_timeout_s) < 1) FlagError("--scan_timeout_s: must be positive");
  if (absl::GetFlag(FLAGS_shutdown_timeout_s) < 1) {
    FlagError("--shutdown_timeout_s: must be positive");
  }
  absl::StatusOr<MaxMemory> max_memory = ParseMaxMemory(absl::GetFlag(FLAGS_max_memory));
  if (!max_memory.ok()) FlagError(max_memory.status().message());
  SetLogIdentity(absl::StrCat("data_service node ", absl::GetFlag(FLAGS_node_id)));

  // Block the termination signals in every thread; the main thread takes them with
  // sigtimedwait. Threads created below inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Note [Truncated shared memory] in common/shm_segment.h.
  if (absl::Status guarded = InstallTruncatedSharedMemoryGuard(
          kExitFailure, absl::StrCat("data_service node ", absl::GetFlag(FLAGS_node_id)));
      !guarded.ok()) {
    return ReportFailure(guarded);
  }

  DatasetConfig config;
  config.kind = absl::GetFlag(FLAGS_dataset);
  config.train_dir = absl::GetFlag(FLAGS_train_dir);
  config.val_dir = absl::GetFlag(FLAGS_val_dir);
  config.synthetic_samples = absl::GetFlag(FLAGS_synthetic_samples);
  config.synthetic_classes = absl::GetFlag(FLAGS_synthetic_classes);
  config.data_seed = absl::GetFlag(FLAGS_data_seed);
  config.image_folder.follow_links_outside_root = follow_links == "yes";
  config.image_folder.scan_timeout = absl::Seconds(absl::GetFlag(FLAGS_scan_timeout_s));
  absl::StatusOr<Datasets> datasets = OpenDatasets(config);
  if (!datasets.ok()) {
    const bool usage =
        absl::IsInvalidArgument(datasets.status()) || absl::IsNotFound(datasets.status());
    return ReportFailure(usage ? WithExitCode(datasets.status(), kFlagError) : datasets.status());
  }

  ServiceOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.node_id = absl::GetFlag(FLAGS_node_id);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.prefetch = absl::GetFlag(FLAGS_prefetch);
  options.eval_resize_ratio = ratio;
  options.max_image_pixels = absl::GetFlag(FLAGS_max_image_pixels);
  options.exact_jpeg = jpeg_decode == "exact";
  options.gpu_decode_share = *gpu_decode_share;
  options.bad_samples = bad_samples;
  options.shutdown_timeout = absl::Seconds(absl::GetFlag(FLAGS_shutdown_timeout_s));
  options.max_memory = *max_memory;
  absl::StatusOr<std::unique_ptr<DataService>> service =
      DataService::Start(options, std::move(*datasets));
  if (!service.ok()) {
    const bool usage = absl::IsInvalidArgument(service.status());
    return ReportFailure(usage ? WithExitCode(service.status(), kFlagError) : service.status());
  }

  if (absl::GetFlag(FLAGS_sandbox)) {
    if (absl::Status sandboxed = InstallSandbox(); !sandboxed.ok()) {
      (void)(*service)->Shutdown();
      return ReportFailure(sandboxed);
    }
    LogInfo("sandbox on: %s refused (EPERM)", absl::StrJoin(SandboxRefusedSyscalls(), ", "));
  }

  int exit_code = 0;
  while (true) {
    const timespec one_second{1, 0};
    const int signal = sigtimedwait(&signals, nullptr, &one_second);
    if (signal == SIGTERM || signal == SIGINT) {
      LogInfo("%s: shutting down", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    if (absl::Status health = (*service)->health(); !health.ok()) {
      exit_code = ReportFailure(
          absl::Status(health.code(), absl::StrCat("cannot serve any more: ", health.message())));
      break;
    }
  }
  const absl::Status stopped = (*service)->Shutdown();
  if (!stopped.ok()) {
    const int code = ReportFailure(stopped);
    if (exit_code == 0) exit_code = code;
  }
  if (absl::GetFlag(FLAGS_remove_socket_dir)) RemoveSocketDirectoryIfEmpty(options.socket_path);
  if (const std::string record = absl::GetFlag(FLAGS_owner_record); !record.empty()) {
    if (unlink(record.c_str()) != 0 && errno != ENOENT) {
      LogWarning("cannot remove the job owner record %s: %s", record, std::strerror(errno));
    }
  }
  if (!stopped.ok()) {
    // Note [Abandoned decodes at shutdown]: decode threads still run; end without the
    // static destructors they might race with.
    std::fflush(nullptr);
    _exit(exit_code);
  }
  return exit_code;
}

}  // namespace
}  // namespace stoker::data_service

int main(int argc, char** argv) { return stoker::data_service::Main(argc, argv); }
