#include "trainer/flags.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/decode_share.h"
#include "common/flag_binding.h"
#include "common/flag_value.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "launcher/rank/data_service_args.h"

// Data and model.
ABSL_FLAG(std::string, data_socket, "",
          "Unix socket of this node's data service (the launcher passes it). Empty (and no "
          "--synthetic_steps): each node's local rank 0 starts the node's data service itself (see "
          "the node data service flags).");
ABSL_FLAG(std::string, model, "small_cnn",
          "Model: small_cnn, resnet18 or resnet50 (torchvision's), or the path of a torch.export "
          "archive (model.pt2, from tools/export_model.py or torch.export.save) to train a model "
          "brought from Python.");
ABSL_FLAG(std::string, init_weights, "",
          "If set, a state dict (safetensors, or torch.save's format with --allow_pickle) that "
          "the model starts from instead of its own initialisation, loaded as "
          "load_state_dict(strict=True) does; a resumed checkpoint still wins.");
ABSL_FLAG(bool, allow_pickle, false,
          "Read an --init_weights file in torch.save's format (a Python pickle, whose C++ reader "
          "is not safe on untrusted input: only for a file you made or trust, such as Stoker's "
          "own --export). Without it such a file is refused; convert it to safetensors.");
ABSL_FLAG(int, num_classes, 10, "Number of classes of the dataset.");
ABSL_FLAG(int, image_size, 32, "Square image size in pixels fed to the model.");
ABSL_FLAG(int, batch_size, 32, "Batch size per rank (per micro-batch with --accumulate).");
ABSL_FLAG(int, epochs, 1, "Number of epochs.");
ABSL_FLAG(uint64_t, seed, 0,
          "Base seed for weights, sampling order and augmentation; rank 0's value wins (the "
          "launcher passes its own).");
ABSL_FLAG(std::string, data_split, "train",
          "Which split to train on: train (with augmentation) or val (evaluation transform).");
ABSL_FLAG(bool, drop_last_batch, true,
          "Skip each epoch's short last batch, so that every step has one shape (cudnn.benchmark "
          "tunes once).");
ABSL_FLAG(int, ring_slots, 4, "Batches in flight in this rank's shared-memory ring (>= 3).");
ABSL_FLAG(std::string, gpu_decode_share, "auto",
          "Share of each batch whose baseline JPEGs this rank asks the data service to leave "
          "undecoded, for its GPU's JPEG engines (nvJPEG): auto = adapt on a GPU, from a start-up "
          "ladder of shares (or --gpu_decode_share_prior) to the one that trains the most images/s "
          "(0.375, fixed, with --deterministic), 0 on the CPU; a number in [0, "
          "1] fixes it (above 0 needs a GPU); 0 turns GPU decode off. A data service started with "
          "its own --gpu_decode_share=F (in --data_service_args) uses F whatever this asks.");
ABSL_FLAG(std::string, gpu_decode_share_prior, "auto",
          "Where an adapting --gpu_decode_share=auto remembers the best share it found for this "
          "host, dataset, model and batch, and starts from next time: auto (a file under "
          "$XDG_CACHE_HOME/stoker or ~/.cache/stoker), none (always the start-up ladder), or a "
          "file's path (beside the dataset, say). A file that does not parse or is older than 30 "
          "days is ignored, with a log line.");
ABSL_FLAG(bool, log_decode_share_windows, false,
          "Log every window the adapting GPU decode share measures (rank 0): its time since the "
          "first batch, share, images/s, the GPU's wait for input, and what it decided.");
ABSL_FLAG(int, gpu_decode_arena_mib, 256,
          "Bound, in MiB, on the GPU memory that decoding a batch's deferred JPEGs at full size "
          "takes (48 or more): JPEGs larger than it, decoded, are left to the data service's "
          "CPUs, and a batch whose deferred JPEGs need more is decoded in rounds.");
ABSL_FLAG(int, data_timeout_s, 120, "Seconds to wait for a batch before failing.");
ABSL_FLAG(int, collective_timeout_s, 300,
          "Seconds a collective (gradient allreduce, stop vote, broadcast) may take before the "
          "rank reports which collective stalled and which ranks of its node have not reached it, "
          "and aborts. MPI_Finalize, which waits for every rank, has the same bound.");
ABSL_FLAG(int, collective_abort_grace_s, 30,
          "Seconds after a collective timed out (and the communicators were aborted) before the "
          "rank exits whatever it is doing.");
ABSL_FLAG(int, bucket_mb, 25, "Gradient bucket size in MiB.");

// Optimizer and schedule.
ABSL_FLAG(std::string, optimizer, "sgd",
          "Optimizer: sgd or adamw (torch.optim semantics, fused kernels).");
ABSL_FLAG(double, lr, 0.1, "Peak learning rate (reached after the warm-up).");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum.");
ABSL_FLAG(bool, nesterov, false, "SGD: Nesterov momentum.");
ABSL_FLAG(double, weight_decay, 0.0,
          "Weight decay (SGD: L2 added to the gradient; AdamW: decoupled).");
ABSL_FLAG(
    bool, no_decay_bn_bias, false,
    "No weight decay for biases and normalisation parameters (all 1-dimensional parameters).");
ABSL_FLAG(double, adam_beta1, 0.9, "AdamW beta1.");
ABSL_FLAG(double, adam_beta2, 0.999, "AdamW beta2.");
ABSL_FLAG(double, adam_eps, 1e-8, "AdamW epsilon.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "Learning-rate schedule after the warm-up, per optimizer step: constant, cosine (to "
          "--lr_min at the end) or step (times --lr_step_gamma at each of --lr_step_epochs).");
ABSL_FLAG(double, warmup_epochs, 0.0,
          "Linear warm-up from lr/warmup_steps to --lr over this many epochs (may be fractional).");
ABSL_FLAG(std::vector<std::string>, lr_step_epochs, {},
          "--lr_schedule=step: the epochs at which the learning rate is multiplied by "
          "--lr_step_gamma, e.g. 30,60,80.");
ABSL_FLAG(double, lr_step_gamma, 0.1,
          "--lr_schedule=step: the factor applied at each of --lr_step_epochs.");
ABSL_FLAG(double, lr_min, 0.0, "--lr_schedule=cosine: the learning rate at the end of training.");
ABSL_FLAG(double, label_smoothing, 0.0, "Cross-entropy label smoothing in [0, 1).");
ABSL_FLAG(double, clip_grad_norm, 0.0,
          "Clip the global L2 norm of the gradients to this value, after unscaling (0: off).");
ABSL_FLAG(int, accumulate, 1,
          "Gradient accumulation: micro-batches per optimizer step; gradients are allreduced only "
          "on the last.");

// Validation.
ABSL_FLAG(int, val_every, 1,
          "Validate every N epochs and after the last, on the data service's validation split (0: "
          "never). Off when the service has no validation split.");
ABSL_FLAG(int, val_batch_size, 0, "Validation batch size per rank (0: --batch_size).");

// Checkpoints and preemption.
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Directory for checkpoints (written atomically by rank 0). Empty: no checkpoints.");
ABSL_FLAG(int, checkpoint_every_steps, 0,
          "Write a checkpoint every N optimizer steps (0: not by steps).");
ABSL_FLAG(int, checkpoint_every_epochs, 1, "Write a checkpoint every N epochs (0: not by epochs).");
ABSL_FLAG(int, keep_checkpoints, 3,
          "Keep the newest N checkpoints and delete older ones (0: keep all). With 2 or more, "
          "--resume=auto falls back past a damaged newest checkpoint to the one before.");
ABSL_FLAG(std::string, resume, "auto",
          "auto: continue from the newest valid checkpoint in --checkpoint_dir if there is one; "
          "none: start afresh; or the path of a checkpoint file.");
ABSL_FLAG(std::string, checkpoint_mode, "0600",
          "File mode (octal) of checkpoints and --export weights; directories made for them get "
          "the same bits plus search where reading is allowed (0600: owner only, folders 0700; "
          "0640: group may read).");
ABSL_FLAG(bool, checkpoint_async, stoker::trainer::kCheckpointAsyncByDefault,
          "Write checkpoints on a writer thread while training goes on: the step waits only "
          "while the state is copied to host memory (pinned on a GPU); one write in flight at a "
          "time; a stop or the end of the run waits for it. --nocheckpoint_async: the step "
          "waits for the whole write.");
ABSL_FLAG(int, stop_after_steps, 0,
          "End this run after N optimizer steps with a checkpoint, as a preemption would, and exit "
          "75 (0: off). For time-sliced jobs.");

// Outputs.
ABSL_FLAG(int, log_every, 10, "Steps between progress lines (rank 0).");
ABSL_FLAG(std::string, progress, "auto",
          "Progress line: inplace (redrawn with \\r), lines, or auto: in place when stderr is a "
          "terminal or STOKER_PROGRESS_IN_PLACE=1 (under mpirun the ranks' stderr is a pipe even "
          "when the job's is a terminal).");
ABSL_FLAG(std::string, metrics_out, "", "If set, rank 0 writes a JSON summary of the run here.");
ABSL_FLAG(
    std::string, metrics_jsonl, "",
    "If set, rank 0 appends one JSON object per progress line, per validation and at the end.");
ABSL_FLAG(std::string, tensorboard_dir, "",
          "If set, rank 0 writes TensorBoard scalars (an events.out.tfevents file) here.");
ABSL_FLAG(std::string, loss_log, "",
          "If set, rank 0 writes `epoch step loss` for every batch here (syncs each step).");
ABSL_FLAG(std::string, export, "",
          "If set, rank 0 writes the final model's state dict here (atomically) in torch.save's "
          "format: torch.load reads it and torchvision's model loads it with load_state_dict.");
ABSL_FLAG(
    std::string, sample_log, "",
    "If set, each rank writes `epoch step index...` for every trained batch to PATH.rank<r>.");
ABSL_FLAG(std::string, final_params_out, "",
          "If set, each rank writes its final parameters to PATH.rank<r> (raw bytes, for tests).");
ABSL_FLAG(int, profile_steps, 0,
          "Measure a time breakdown per step (data wait, host-to-device, forward, backward, "
          "allreduce wait, optimizer) over N steps after the warm-up (0: off).");
ABSL_FLAG(std::string, kernel_trace, "",
          "If set (with --profile_steps), the profiled steps' GPU kernels and copies, recorded "
          "with CUPTI through libtorch's profiler, are written to PATH (PATH.rank<r> with "
          "several ranks) as a Chrome trace (Perfetto opens it; tools/kernel_breakdown.py "
          "classifies it).");
ABSL_FLAG(bool, kernel_trace_ops, false,
          "With --kernel_trace: also record the host's ATen operators and the exported "
          "program's calls, so that tools/kernel_breakdown.py attributes each kernel to the "
          "operator and program call that launched it (costs host time per operator: the "
          "trace's GPU idle time is then not the run's).");
ABSL_FLAG(std::string, trace, "",
          "If set, a directory: every rank writes the traced steps (--trace_steps) as a Chrome "
          "trace (rank<r>.json: data wait, copy, forward, backward, each gradient bucket's "
          "reduction, optimizer, CUDA-graph replay, validation, checkpoint; the GPU's intervals), "
          "each node's data service its decode threads and ring (data_service.node<k>.json), and "
          "rank 0 says what bounded each traced step (the verdict) and sums it up at the end. "
          "`launcher trace merge DIR` puts them on one clock in one file.");
ABSL_FLAG(std::string, trace_steps, "",
          "With --trace: the run's optimizer steps A:B (0-based, B excluded) to trace; empty: the "
          "10 steps after --warmup_steps.");

// Device and precision.
ABSL_FLAG(std::string, device, "auto",
          "auto (a GPU per local rank when there are GPUs), cuda or cpu.");
ABSL_FLAG(std::string, precision, "bf16",
          "Autocast precision on the GPU: bf16, fp16 (with loss scaling), fp32 (AMP off) or fp8 "
          "(bf16 with an exported model's linear layers in FP8; compute capability 8.9 or newer).");
ABSL_FLAG(int, fp8_amax_history, 16,
          "--precision=fp8: each FP8 tensor is scaled by the largest of its last N amaxes "
          "(delayed scaling), N from 1 to 1024. Checkpoints hold the histories: a resume needs "
          "the same N.");
ABSL_FLAG(bool, channels_last, true, "Keep conv weights and inputs in channels_last layout.");
ABSL_FLAG(bool, fused_blocks, true,
          "Run batch norm with its ReLU (and residual add) and max pooling as fused CUDA kernels, "
          "forward and backward (channels_last on a GPU; false: the libtorch ops they replace).");
ABSL_FLAG(bool, sync_batchnorm, false,
          "Batch norm in training mode normalises with the statistics of the step's global batch "
          "over all ranks, as torch.nn.SyncBatchNorm (two small allreduces per batch norm per "
          "step); built-in models and exported programs' batch norms. On a GPU it runs the step "
          "uncaptured (as --nocuda_graphs). false: each rank's own batch, as DDP.");
ABSL_FLAG(bool, cudnn_benchmark, true, "Let cuDNN time its kernels for the (fixed) input shape.");
ABSL_FLAG(bool, cuda_graphs, true,
          "GPU: after a few uncaptured steps, capture the training step (forward, backward, "
          "gradient reductions, optimizer) as CUDA graphs and replay them; same results, far fewer "
          "launches. Profiled steps run uncaptured; false: every step uncaptured.");
ABSL_FLAG(bool, deterministic, false,
          "GPU: deterministic cuDNN and ATen algorithms (slower; turns --cudnn_benchmark off), so "
          "that a run and its resumed continuation give the same bits on the same GPUs. The CPU "
          "path is always deterministic.");
ABSL_FLAG(double, init_scale, 65536.0, "fp16 loss scaler: initial scale.");
ABSL_FLAG(double, growth_factor, 2.0, "fp16 loss scaler: growth factor.");
ABSL_FLAG(double, backoff_factor, 0.5, "fp16 loss scaler: backoff factor.");
ABSL_FLAG(int, growth_interval, 2000, "fp16 loss scaler: steps without inf/NaN before growing.");
ABSL_FLAG(double, cache_release_fraction, 0.9,
          "Release cached device blocks when reserved memory passes this share of the GPU.");
ABSL_FLAG(bool, expandable_segments, true,
          "GPU: the caching allocator maps pages into growing segments instead of reserving fixed "
          "ones, so that reserved memory follows what tensors hold (a PYTORCH_CUDA_ALLOC_CONF "
          "naming expandable_segments wins).");

// Benchmarking.
ABSL_FLAG(int, synthetic_steps, 0,
          "Benchmark: reuse one batch made on the device for this many steps per epoch; no data "
          "service.");
ABSL_FLAG(int, warmup_steps, 10, "Steps left out of the throughput figure.");
ABSL_FLAG(bool, data_only, false,
          "Benchmark the input pipeline: fetch, copy and normalise batches, train nothing.");

// Node data service (without --data_socket; launcher/rank/node_data_service.h).
ABSL_FLAG(std::string, job_id, "",
          "Without --data_socket: the job id naming the node data services' sockets and segments; "
          "rank 0's value counts; empty: rank 0 makes one.");
ABSL_FLAG(std::string, data_service, "",
          "Without --data_socket: the data_service program; default: next to the trainer, or "
          "../data_service/data_service.");
ABSL_FLAG(
    std::string, data_service_args, "",
    "Without --data_socket: more data service flags, split on spaces, each --name=value (e.g. "
    "\"--dataset=imagefolder --train_dir=/data/train\"); not --socket, --job_id or --node_id.");
ABSL_FLAG(int, ranks_per_node, 0,
          "0: a node is a host (ranks sharing memory). N: ranks [kN, (k+1)N) form node k, each "
          "with its own data service (testing several nodes on one host).");

namespace stoker::trainer {
namespace {

// The trainer's flags: those of this file.
FlagSpec TrainerFlagSpec() {
  FlagSpec spec = FlagSpecOf("trainer", "trainer/flags.cc");
  spec.flagfile_alias = true;
  spec.positional_hint = "the trainer takes only --name=value flags";
  spec.sections = {
      {"Data and model",
       {"data_socket", "model", "init_weights", "allow_pickle", "num_classes", "image_size",
        "batch_size", "epochs", "seed", "data_split", "drop_last_batch", "ring_slots",
        "gpu_decode_share", "gpu_decode_share_prior", "log_decode_share_windows",
        "gpu_decode_arena_mib", "data_timeout_s", "bucket_mb"}},
      {"Optimizer and schedule",
       {"optimizer", "lr", "momentum", "nesterov", "weight_decay", "no_decay_bn_bias", "adam_beta1",
        "adam_beta2", "adam_eps", "lr_schedule", "warmup_epochs", "lr_step_epochs", "lr_step_gamma",
        "lr_min", "label_smoothing", "clip_grad_norm", "accumulate"}},
      {"Validation", {"val_every", "val_batch_size"}},
      {"Checkpoints and preemption",
       {"checkpoint_dir", "checkpoint_every_steps", "checkpoint_every_epochs", "keep_checkpoints",
        "resume", "stop_after_steps", "checkpoint_mode", "checkpoint_async"}},
      {"Outputs (rank 0)",
       {"log_every", "progress", "metrics_out", "metrics_jsonl", "tensorboard_dir", "loss_log",
        "export", "final_params_out", "sample_log", "profile_steps", "kernel_trace",
        "kernel_trace_ops", "trace", "trace_steps"}},
      {"Device and precision",
       {"device", "precision", "fp8_amax_history", "channels_last", "fused_blocks",
        "sync_batchnorm", "cuda_graphs", "cudnn_benchmark", "deterministic", "init_scale",
        "growth_factor", "backoff_factor", "growth_interval", "cache_release_fraction",
        "expandable_segments"}},
      {"Benchmarking", {"synthetic_steps", "warmup_steps", "data_only"}},
      {"Fault handling", {"collective_timeout_s", "collective_abort_grace_s"}},
      {"Node data service (without --data_socket)",
       {"job_id", "data_service", "data_service_args", "ranks_per_node"}},
  };
  return spec;
}

absl::StatusOr<bool> ParseDataSplit(absl::string_view name) {
  return ParseFlagChoice<bool>("data_split", name, {{"train", true}, {"val", false}});
}

absl::StatusOr<std::vector<int>> ParseEpochList(const std::vector<std::string>& items) {
  std::vector<int> epochs;
  for (const std::string& item : items) {
    int epoch = 0;
    if (!absl::SimpleAtoi(item, &epoch)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lr_step_epochs: \"", item, "\" is not an epoch number (e.g. 30,60,80)"));
    }
    epochs.push_back(epoch);
  }
  return epochs;
}

}  // namespace

absl::StatusOr<TrainerOptions> OptionsFromFlags() {
  TrainerOptions o;
  RETURN_IF_ERROR(ApplyFlagBindings({
      {FLAGS_epochs, &o.epochs},
      {FLAGS_seed, &o.seed},
      {FLAGS_model, &o.model.name},
      {FLAGS_num_classes, &o.model.num_classes},
      {FLAGS_fused_blocks, &o.model.fused_blocks},
      {FLAGS_sync_batchnorm, &o.model.sync_batchnorm},
      {FLAGS_init_weights, &o.model.init_weights},
      {FLAGS_allow_pickle, &o.model.allow_pickle},

      {FLAGS_data_socket, &o.input.data_socket},
      {FLAGS_image_size, &o.input.image_size},
      {FLAGS_batch_size, &o.input.batch_size},
      {FLAGS_data_split, &o.input.train_split, ParseDataSplit},
      {FLAGS_drop_last_batch, &o.input.drop_last_batch},
      {FLAGS_ring_slots, &o.input.ring_slots},
      {FLAGS_data_timeout_s, &o.input.data_timeout, FlagSeconds},
      {FLAGS_synthetic_steps, &o.input.synthetic_steps},
      {FLAGS_gpu_decode_share, &o.input.gpu_decode_share, ParseGpuDecodeShare},
      {FLAGS_gpu_decode_share_prior, &o.input.gpu_decode_share_prior},
      {FLAGS_log_decode_share_windows, &o.input.log_decode_share_windows},
      {FLAGS_gpu_decode_arena_mib, &o.input.gpu_decode_arena_mib},

      {FLAGS_collective_timeout_s, &o.comm.collective_timeout, FlagSeconds},
      {FLAGS_collective_abort_grace_s, &o.comm.collective_abort_grace, FlagSeconds},
      {FLAGS_bucket_mb, &o.comm.bucket_mb},

      {FLAGS_optimizer, &o.optimizer.kind, ParseOptimizerKind},
      {FLAGS_lr, &o.optimizer.learning_rate},
      {FLAGS_momentum, &o.optimizer.momentum},
      {FLAGS_nesterov, &o.optimizer.nesterov},
      {FLAGS_weight_decay, &o.optimizer.weight_decay},
      {FLAGS_no_decay_bn_bias, &o.optimizer.no_decay_bn_bias},
      {FLAGS_adam_beta1, &o.optimizer.beta1},
      {FLAGS_adam_beta2, &o.optimizer.beta2},
      {FLAGS_adam_eps, &o.optimizer.eps},

      {FLAGS_lr_schedule, &o.schedule.kind, ParseLrSchedule},
      {FLAGS_warmup_epochs, &o.schedule.warmup_epochs},
      {FLAGS_lr_step_epochs, &o.schedule.step_epochs, ParseEpochList},
      {FLAGS_lr_step_gamma, &o.schedule.gamma},
      {FLAGS_lr_min, &o.schedule.lr_min},

      {FLAGS_label_smoothing, &o.step.label_smoothing},
      {FLAGS_clip_grad_norm, &o.step.clip_grad_norm},
      {FLAGS_accumulate, &o.step.accumulate},
      {FLAGS_cuda_graphs, &o.step.cuda_graphs},

      {FLAGS_val_every, &o.validation.every},
      {FLAGS_val_batch_size, &o.validation.batch_size},

      {FLAGS_checkpoint_dir, &o.checkpoint.dir},
      {FLAGS_checkpoint_every_steps, &o.checkpoint.every_steps},
      {FLAGS_checkpoint_every_epochs, &o.checkpoint.every_epochs},
      {FLAGS_keep_checkpoints, &o.checkpoint.keep},
      {FLAGS_resume, &o.checkpoint.resume, ResumeFrom::Parse},
      {FLAGS_stop_after_steps, &o.checkpoint.stop_after_steps},
      {FLAGS_checkpoint_mode, &o.checkpoint.file_mode, ParseCheckpointMode},
      {FLAGS_checkpoint_async, &o.checkpoint.async},

      {FLAGS_log_every, &o.report.log_every},
      {FLAGS_progress, &o.report.progress, ParseProgressMode},
      {FLAGS_metrics_out, &o.report.metrics_out},
      {FLAGS_metrics_jsonl, &o.report.metrics_jsonl},
      {FLAGS_tensorboard_dir, &o.report.tensorboard_dir},
      {FLAGS_loss_log, &o.report.loss_log},
      {FLAGS_export, &o.report.export_path},
      {FLAGS_final_params_out, &o.report.final_params_out},
      {FLAGS_sample_log, &o.report.sample_log},
      {FLAGS_profile_steps, &o.report.profile_steps},
      {FLAGS_kernel_trace, &o.report.kernel_trace},
      {FLAGS_kernel_trace_ops, &o.report.kernel_trace_ops},
      {FLAGS_trace, &o.report.trace_dir},
      {FLAGS_trace_steps, &o.report.trace_steps},

      {FLAGS_device, &o.device.device, ParseDeviceChoice},
      {FLAGS_precision, &o.device.precision, ParsePrecision},
      {FLAGS_fp8_amax_history, &o.device.fp8_amax_history},
      {FLAGS_channels_last, &o.device.channels_last},
      {FLAGS_cudnn_benchmark, &o.device.cudnn_benchmark},
      {FLAGS_deterministic, &o.device.deterministic},
      {FLAGS_cache_release_fraction, &o.device.cache_release_fraction},
      {FLAGS_expandable_segments, &o.device.expandable_segments},

      {FLAGS_init_scale, &o.scaler.init_scale},
      {FLAGS_growth_factor, &o.scaler.growth_factor},
      {FLAGS_backoff_factor, &o.scaler.backoff_factor},
      {FLAGS_growth_interval, &o.scaler.growth_interval},

      {FLAGS_warmup_steps, &o.benchmark.warmup_steps},
      {FLAGS_data_only, &o.benchmark.data_only},
  }));
  if (const char* pause = std::getenv(kCheckpointWritePauseVariable); pause != nullptr) {
    int milliseconds = 0;
    if (!absl::SimpleAtoi(pause, &milliseconds) || milliseconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat(kCheckpointWritePauseVariable, "=", pause,
                                                     ": not a number of milliseconds"));
    }
    o.checkpoint.write_pause_for_testing = absl::Milliseconds(milliseconds);
  }
  // Without --data_socket the node's local rank 0 starts the data service after MPI start-up
  // and sets it (launcher/rank/node_data_service.h); check the rest now.
  TrainerOptions checked = o;
  if (checked.input.data_socket.empty()) checked.input.data_socket = "(started by local rank 0)";
  RETURN_IF_ERROR(ValidateOptions(checked));
  return o;
}

absl::StatusOr<NodeDataServiceFlags> NodeDataServiceFlagsFromFlags() {
  NodeDataServiceFlags node;
  RETURN_IF_ERROR(ApplyFlagBindings({
      {FLAGS_job_id, &node.job_id},
      {FLAGS_data_service, &node.program},
      {FLAGS_data_service_args, &node.args, launcher::ParseDataServiceArgs},
      {FLAGS_ranks_per_node, &node.ranks_per_node},
  }));
  return node;
}

absl::StatusOr<TrainerCommandLine> ParseTrainerCommandLine(absl::Span<const char* const> args) {
  TrainerCommandLine result;
  ASSIGN_OR_RETURN(const ParsedFlags parsed, ParseFlags(args, TrainerFlagSpec()));
  result.help = parsed.help;
  if (result.help) return result;
  ASSIGN_OR_RETURN(result.options, OptionsFromFlags());
  ASSIGN_OR_RETURN(result.node_data_service, NodeDataServiceFlagsFromFlags());
  return result;
}

std::string TrainerFlagsHelp() {
  std::string out = absl::StrCat(
      "Usage: trainer --name=value ... (one MPI rank; usually started by `launcher`)\n",
      FlagsHelp(TrainerFlagSpec()));
  absl::StrAppend(
      &out,
      "\nStopping: SIGINT, SIGTERM, SIGUSR1 or SIGUSR2 stops every rank after the same "
      "step, with a\ncheckpoint when --checkpoint_dir is set (mpirun forwards SIGUSR1/2 at "
      "once; sbatch\n--signal=USR2@120 sends one before the time limit). The same signal "
      "twice kills at once.\n"
      "\nExit codes (common/exit_codes.h; the same for launcher and data_service): 0 "
      "finished; 1 any other\nfailure; 2 bad flag or configuration (also no room in "
      "/dev/shm); 65 bad data (bad-file\ncap, more classes than --num_classes); 69 a rank "
      "or the data service lost or stuck, or\na ring broken by another process; 74 "
      "checkpoint I/O; "
      "75 stopped by --stop_after_steps\n(checkpoint written); 124 a collective or start-up "
      "timeout; 128+N stopped by signal N at a\nstep boundary (130 SIGINT, 143 SIGTERM, 138 "
      "SIGUSR1, 140 SIGUSR2).\nWith --resume=auto (the default) a rerun continues from the "
      "newest checkpoint.\n");
  return out;
}

}  // namespace stoker::trainer
