#include "data_service/flags.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/decode_share.h"
#include "common/flag_binding.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/trace_events.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/image/decode.h"
#include "data_service/memory_limit.h"

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
ABSL_FLAG(bool, sandbox, true,
          "confine the service where the kernel allows (data_service/sandbox.h): a seccomp "
          "allowlist (no new programs, processes, namespaces, sockets, io_uring or tracing; "
          "no file opened for writing but new rings) and Landlock (files written only under "
          "/dev/shm); --nosandbox: off");
ABSL_FLAG(bool, require_sandbox, false,
          "fail at start (exit 2) when the kernel lacks seccomp filters or Landlock, instead "
          "of logging it and running with what is there");
ABSL_FLAG(std::string, trace, "",
          "If set, a directory: the service writes a Chrome trace of each training ring's batches "
          "--trace_steps (data_service.node<N>.json: every sample on its decode thread with its "
          "file, bytes, read, decode and resize time; each ring slot filled and each wait for a "
          "free one). The trainer passes it with its own --trace.");
ABSL_FLAG(std::string, trace_steps, "",
          "With --trace: the batches A:B (0-based, B excluded) of each training ring to trace, "
          "with the ring's slot count of batches before them (decoded ahead); empty: 0:30.");
ABSL_FLAG(double, eval_resize_ratio, 256.0 / 224.0,
          "validation transform: Resize(round(image_size x this)) then CenterCrop(image_size)");

namespace stoker::data_service {
namespace {

// data_service's own flags (this file's; not the ones libraries register).
FlagSpec DataServiceFlagSpec() {
  FlagSpec spec = FlagSpecOf("data_service", "data_service/flags.cc");
  spec.sections = {{"Flags",
                    {"socket",
                     "job_id",
                     "node_id",
                     "dataset",
                     "train_dir",
                     "val_dir",
                     "synthetic_samples",
                     "synthetic_classes",
                     "data_seed",
                     "threads",
                     "prefetch",
                     "bad_files",
                     "max_bad_fraction",
                     "max_image_pixels",
                     "eval_resize_ratio",
                     "jpeg_decode",
                     "gpu_decode_share",
                     "follow_links",
                     "scan_timeout_s",
                     "shutdown_timeout_s",
                     "max_memory",
                     "sandbox",
                     "require_sandbox",
                     "owner_record",
                     "remove_socket_dir",
                     "trace",
                     "trace_steps"}}};
  return spec;
}

// Note [Injected decode delay] in data_service/service.h.
absl::StatusOr<absl::Duration> InjectedDecodeDelay(int32_t node_id) {
  const char* value = std::getenv("STOKER_TEST_SLOW_DECODE");
  if (value == nullptr) return absl::ZeroDuration();
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  int32_t node = 0;
  int ms = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &node) || !absl::SimpleAtoi(parts[1], &ms) ||
      ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("STOKER_TEST_SLOW_DECODE=", value, ": must be NODE:MS (tests only)"));
  }
  return node == node_id ? absl::Milliseconds(ms) : absl::ZeroDuration();
}

}  // namespace

absl::StatusOr<DataServiceOptions> OptionsFromFlags() {
  DataServiceOptions o;
  RETURN_IF_ERROR(ApplyFlagBindings({
      {FLAGS_dataset, &o.dataset.kind},
      {FLAGS_train_dir, &o.dataset.train_dir},
      {FLAGS_val_dir, &o.dataset.val_dir},
      {FLAGS_synthetic_samples, &o.dataset.synthetic_samples},
      {FLAGS_synthetic_classes, &o.dataset.synthetic_classes},
      {FLAGS_data_seed, &o.dataset.data_seed},
      {FLAGS_follow_links, &o.dataset.image_folder.follow_links_outside_root, ParseFollowLinks},
      {FLAGS_scan_timeout_s, &o.dataset.image_folder.scan_timeout, FlagSeconds},

      {FLAGS_socket, &o.service.socket_path},
      {FLAGS_job_id, &o.service.job_id},
      {FLAGS_node_id, &o.service.node_id},
      {FLAGS_threads, &o.service.threads},
      {FLAGS_prefetch, &o.service.prefetch},
      {FLAGS_eval_resize_ratio, &o.service.eval_resize_ratio},
      {FLAGS_max_image_pixels, &o.service.max_image_pixels},
      {FLAGS_jpeg_decode, &o.service.exact_jpeg, ParseJpegDecode},
      {FLAGS_gpu_decode_share, &o.service.gpu_decode_share, ParseGpuDecodeShare},
      {FLAGS_bad_files, &o.service.bad_samples.policy, ParseBadFilePolicy},
      {FLAGS_max_bad_fraction, &o.service.bad_samples.max_fraction},
      {FLAGS_shutdown_timeout_s, &o.service.shutdown_timeout, FlagSeconds},
      {FLAGS_max_memory, &o.service.max_memory, ParseMaxMemory},

      {FLAGS_owner_record, &o.owner_record},
      {FLAGS_remove_socket_dir, &o.remove_socket_dir},
      {FLAGS_sandbox, &o.sandbox},
      {FLAGS_require_sandbox, &o.require_sandbox},
      {FLAGS_trace, &o.service.trace_dir},
  }));
  if (!absl::GetFlag(FLAGS_trace_steps).empty()) {
    ASSIGN_OR_RETURN(o.service.trace_batches, ParseTraceSteps(absl::GetFlag(FLAGS_trace_steps)));
  }
  ASSIGN_OR_RETURN(o.service.injected_decode_delay, InjectedDecodeDelay(o.service.node_id));
  RETURN_IF_ERROR(o.Validate());
  return o;
}

absl::StatusOr<DataServiceCommandLine> ParseDataServiceCommandLine(
    absl::Span<const char* const> args) {
  DataServiceCommandLine result;
  ASSIGN_OR_RETURN(const ParsedFlags parsed, ParseFlags(args, DataServiceFlagSpec()));
  result.help = parsed.help;
  if (result.help) return result;
  ASSIGN_OR_RETURN(result.options, OptionsFromFlags());
  return result;
}

std::string DataServiceFlagsHelp() {
  return absl::StrCat(
      "data_service --socket=PATH --job_id=ID [--node_id=N] "
      "[--dataset=synthetic|imagefolder|packed] [--train_dir=DIR|INDEX] [--val_dir=DIR|INDEX] "
      "[--synthetic_samples=N] [--synthetic_classes=K] [--data_seed=S] [--threads=N] "
      "[--prefetch=N] [--bad_files=skip|fail] [--max_bad_fraction=F] [--max_image_pixels=N] "
      "[--eval_resize_ratio=R] [--jpeg_decode=fast|exact] [--gpu_decode_share=auto|F] "
      "[--follow_links=yes|no] "
      "[--scan_timeout_s=N] [--shutdown_timeout_s=N] [--max_memory=auto|none|SIZE] "
      "[--nosandbox|--require_sandbox]\n",
      FlagsHelp(DataServiceFlagSpec()));
}

}  // namespace stoker::data_service
