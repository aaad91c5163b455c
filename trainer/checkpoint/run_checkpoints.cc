#include "trainer/checkpoint/run_checkpoints.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/atomic_file.h"
#include "common/errno_status.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

// Note [One run per checkpoint directory]
// Two runs writing into one directory would resume from each other's checkpoints and
// delete each other's files. So the writing rank of a run holds <dir>/LOCK (flock, released
// by the kernel when the process ends, however it ends) for the whole run, with its pid and
// host in it; a second run pointed at the directory is refused naming the holder. Under the
// lock there is one writer, so every temporary file in the directory belongs to a writer
// that is gone, and removing them never removes a live writer's. <dir>/RUN records the run
// identity of the directory's first run (CheckpointOptions::run_identity); a run with
// another identity is refused before it resumes from or writes anything, so --resume=auto
// never resumes another run's checkpoint. LOCK and RUN stay in the directory.
constexpr char kLockFile[] = "LOCK";
constexpr char kRunFile[] = "RUN";

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

// Takes <dir>/LOCK (Note [One run per checkpoint directory]).
absl::StatusOr<UniqueFd> LockDirectory(const CheckpointOptions& o) {
  const std::string path = absl::StrCat(o.dir, "/", kLockFile);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, o.file_mode & 0777));
  if (!fd.valid()) {
    return WithExitCode(ErrnoToStatus(errno, absl::StrCat("--checkpoint_dir: opening ", path)),
                        kExitCheckpointIo);
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      return WithExitCode(ErrnoToStatus(errno, absl::StrCat("--checkpoint_dir: locking ", path)),
                          kExitCheckpointIo);
    }
    char holder[256] = {};
    const ssize_t n = ::pread(fd.get(), holder, sizeof(holder) - 1, 0);
    std::string who(holder, n > 0 ? static_cast<size_t>(n) : 0);
    while (!who.empty() && who.back() == '\n') who.pop_back();
    return WithExitCode(
        absl::FailedPreconditionError(absl::StrCat(
            "--checkpoint_dir=", o.dir, " is in use by another run (", path, " is locked by ",
            who.empty() ? "a process that has not said who it is" : who,
            "): two runs must not share a checkpoint directory; give this run its own")),
        kExitUsage);
  }
  const std::string who = absl::StrCat("pid ", ::getpid(), " on host ", HostName(), "\n");
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    return WithExitCode(ErrnoToStatus(errno, absl::StrCat("--checkpoint_dir: writing ", path)),
                        kExitCheckpointIo);
  }
  return fd;
}

// Checks <dir>/RUN against this run's identity, or records it (Note [One run per
// checkpoint directory]). Call with the lock held.
absl::Status CheckRunIdentity(const CheckpointOptions& o) {
  if (o.run_identity.empty()) return absl::OkStatus();
  const std::string path = absl::StrCat(o.dir, "/", kRunFile);
  absl::StatusOr<std::string> recorded = ReadWholeFile(path);
  if (absl::IsNotFound(recorded.status())) {
    return WithExitCode(WriteFileAtomically(path, absl::StrCat(o.run_identity, "\n"), o.file_mode),
                        kExitCheckpointIo);
  }
  if (!recorded.ok()) return WithExitCode(recorded.status(), kExitCheckpointIo);
  std::string theirs = *recorded;
  while (!theirs.empty() && theirs.back() == '\n') theirs.pop_back();
  if (theirs == o.run_identity) return absl::OkStatus();
  return WithExitCode(
      absl::FailedPreconditionError(absl::StrCat(
          "--checkpoint_dir=", o.dir, " holds the checkpoints of another run (", path, ": '",
          theirs, "'; this run: '", o.run_identity,
          "'): a run never resumes from or overwrites another run's checkpoints; give this run "
          "its own --checkpoint_dir")),
      kExitUsage);
}

// Rank 0's choice under --resume.
absl::StatusOr<absl::optional<CheckpointReader>> PickCheckpoint(const CheckpointOptions& o) {
  switch (o.resume.mode) {
    case ResumeFrom::Mode::kNone:
      return absl::optional<CheckpointReader>();
    case ResumeFrom::Mode::kFile: {
      absl::StatusOr<CheckpointReader> loaded = LoadCheckpoint(o.resume.file);
      if (!loaded.ok()) {
        return absl::Status(loaded.status().code(), absl::StrCat("--resume=", o.resume.file, ": ",
                                                                 loaded.status().message()));
      }
      return absl::optional<CheckpointReader>(std::move(*loaded));
    }
    case ResumeFrom::Mode::kAuto:
      break;
  }
  if (o.dir.empty()) return absl::optional<CheckpointReader>();
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(absl::optional<CheckpointReader> checkpoint,
                   LoadNewestValidCheckpoint(o.dir, &skipped));
  for (const std::string& why : skipped) LogWarning("skipping an invalid checkpoint: %s", why);
  if (!checkpoint.has_value() && !skipped.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--resume=auto: no valid checkpoint in ", o.dir, " (", skipped.size(),
                     " invalid; see above). Pass --resume=none to start afresh"));
  }
  return checkpoint;
}

// The test-only pause after the first part of each checkpoint file, if any.
PartWrittenHook WritePause(const CheckpointOptions& o) {
  if (o.write_pause_for_testing <= absl::ZeroDuration()) return nullptr;
  return [pause = o.write_pause_for_testing, first = true](size_t) mutable {
    if (first) absl::SleepFor(pause);
    first = false;
  };
}

// Ends the write of a checkpoint file whose outcome is `written`: on success, removes the
// checkpoints past the newest --keep_checkpoints. Errors carry kExitCheckpointIo.
absl::Status FinishCheckpointWrite(const CheckpointOptions& o, absl::Status written) {
  RETURN_IF_ERROR(WithExitCode(std::move(written), kExitCheckpointIo));
  return WithExitCode(RemoveOldCheckpoints(o.dir, o.keep), kExitCheckpointIo);
}

// Waits for the bytes `checkpoint` holds (copies from the device), then seals it and writes
// the checkpoint file `path` (Note [Checkpoint files in parallel] in checkpoint_file.cc) and
// removes the checkpoints past the newest --keep_checkpoints. Errors carry
// kExitCheckpointIo. Returns the file's size.
absl::StatusOr<size_t> SealAndWrite(const CheckpointOptions& o, const std::string& path,
                                    CheckpointWriter checkpoint) {
  RETURN_IF_ERROR(WithExitCode(checkpoint.WaitForHeldBytes(), kExitCheckpointIo));
  const int threads = CheckpointWriteThreads();
  const SealedCheckpoint sealed = std::move(checkpoint).Seal(threads);
  RETURN_IF_ERROR(FinishCheckpointWrite(
      o, WriteCheckpointAtomically(path, sealed, o.file_mode, threads, WritePause(o))));
  return sealed.size();
}

}  // namespace

absl::StatusOr<RunCheckpoints> RunCheckpoints::Open(const CheckpointOptions& options, bool writer) {
  RunCheckpoints checkpoints(options, writer);
  if (!checkpoints.writes()) return checkpoints;
  absl::Status made = MakeDirectories(options.dir, DirectoryModeFor(options.file_mode));
  if (!made.ok()) {
    return WithExitCode(
        absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir: ", made.message())),
        kExitCheckpointIo);
  }
  ASSIGN_OR_RETURN(checkpoints.lock_, LockDirectory(options));
  RETURN_IF_ERROR(CheckRunIdentity(options));
  // Under the lock: every temporary is a dead writer's.
  absl::StatusOr<int> removed = RemoveStaleTemporaries(options.dir);
  if (!removed.ok()) return WithExitCode(removed.status(), kExitCheckpointIo);
  const int stale = *removed;
  if (stale > 0) LogInfo("removed %d partial checkpoint file(s) of an interrupted write", stale);
  if (options.async) checkpoints.writes_ = std::make_unique<WriteBehind>();
  return checkpoints;
}

absl::StatusOr<absl::optional<CheckpointReader>> RunCheckpoints::LoadForResume(
    Communicator& host) const {
  const bool root = host.rank() == 0;
  absl::optional<CheckpointReader> checkpoint;
  int64_t size = -1;
  if (root) {
    absl::StatusOr<absl::optional<CheckpointReader>> picked = PickCheckpoint(options_);
    if (!picked.ok()) return WithExitCode(picked.status(), kExitCheckpointIo);
    checkpoint = std::move(*picked);
    if (checkpoint.has_value()) size = static_cast<int64_t>(checkpoint->bytes().size());
  }
  if (host.world_size() == 1) return checkpoint;
  RETURN_IF_ERROR(host.Broadcast(&size, sizeof(size), 0));
  if (size >= 0) {
    if (root) {
      RETURN_IF_ERROR(host.Broadcast(const_cast<char*>(checkpoint->bytes().data()), size, 0));
    } else {
      std::string bytes(static_cast<size_t>(size), '\0');
      RETURN_IF_ERROR(host.Broadcast(bytes.data(), size, 0));
      ASSIGN_OR_RETURN(CheckpointReader parsed,
                       CheckpointReader::Parse(std::move(bytes), "the checkpoint from rank 0"));
      checkpoint = std::move(parsed);
    }
  }
  RETURN_IF_ERROR(host.Synchronize());
  return checkpoint;
}

absl::StatusOr<std::string> RunCheckpoints::Write(int64_t global_step,
                                                  const std::string& bytes) const {
  if (!writes()) return std::string();
  const std::string path = absl::StrCat(options_.dir, "/", CheckpointFileName(global_step));
  RETURN_IF_ERROR(FinishCheckpointWrite(
      options_, WriteFileAtomically(path, {absl::string_view(bytes)}, options_.file_mode,
                                    WritePause(options_))));
  return path;
}

absl::StatusOr<std::string> RunCheckpoints::Save(int64_t global_step, CheckpointWriter checkpoint) {
  if (!writes()) return std::string();
  const std::string path = absl::StrCat(options_.dir, "/", CheckpointFileName(global_step));
  if (writes_ == nullptr) {
    RETURN_IF_ERROR(SealAndWrite(options_, path, std::move(checkpoint)).status());
    return path;
  }
  // Note [Asynchronous checkpoints]. The write owns what it reads: the options by value,
  // and the snapshot.
  RETURN_IF_ERROR(writes_
                      ->Start([options = options_, path,
                               checkpoint = std::move(checkpoint)]() mutable -> absl::Status {
                        const absl::Time start = absl::Now();
                        ASSIGN_OR_RETURN(const size_t bytes,
                                         SealAndWrite(options, path, std::move(checkpoint)));
                        LogInfo("checkpoint %s written in the background: %.1f MB in %.2f s", path,
                                bytes / 1e6, absl::ToDoubleSeconds(absl::Now() - start));
                        return absl::OkStatus();
                      })
                      .status());
  return path;
}

absl::Status RunCheckpoints::WaitForWrites() const {
  return writes_ == nullptr ? absl::OkStatus() : writes_->Wait();
}

absl::Status RunCheckpoints::WriteError() const {
  return writes_ == nullptr ? absl::OkStatus() : writes_->error();
}

}  // namespace stoker::trainer
