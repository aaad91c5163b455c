#include "launcher/termination_signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "common/errno_status.h"

namespace stoker::launcher {
namespace {

// The write end of the live instance's pipe; -1 when none is installed.
std::atomic<int> signal_pipe{-1};

void OnSignal(int signal) {
  const int saved_errno = errno;
  const int fd = signal_pipe.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signal);
    ssize_t ignored = write(fd, &byte, 1);  // A full pipe already wakes the reader.
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

absl::StatusOr<TerminationSignals> TerminationSignals::Install() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoToStatus(errno, "pipe2");
  TerminationSignals signals{UniqueFd(fds[0]), UniqueFd(fds[1])};
  int expected = -1;
  if (!signal_pipe.compare_exchange_strong(expected, signals.write_end_.get())) {
    return absl::FailedPreconditionError("termination signals are already being caught");
  }
  signals.installed_ = true;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < kNumCaught; ++i) {
    if (sigaction(kCaught[i], &action, &signals.previous_[i]) != 0) {
      return ErrnoToStatus(errno, "sigaction");  // ~TerminationSignals restores the others
    }
    signals.handlers_set_ = i + 1;
  }
  return signals;
}

TerminationSignals::TerminationSignals(TerminationSignals&& other) noexcept
    : read_end_(std::move(other.read_end_)),
      write_end_(std::move(other.write_end_)),
      installed_(std::exchange(other.installed_, false)),
      handlers_set_(std::exchange(other.handlers_set_, 0)),
      first_signal_(other.first_signal_) {
  for (int i = 0; i < kNumCaught; ++i) previous_[i] = other.previous_[i];
}

TerminationSignals& TerminationSignals::operator=(TerminationSignals&& other) noexcept {
  if (this != &other) {
    Uninstall();
    read_end_ = std::move(other.read_end_);
    write_end_ = std::move(other.write_end_);
    installed_ = std::exchange(other.installed_, false);
    handlers_set_ = std::exchange(other.handlers_set_, 0);
    first_signal_ = other.first_signal_;
    for (int i = 0; i < kNumCaught; ++i) previous_[i] = other.previous_[i];
  }
  return *this;
}

TerminationSignals::~TerminationSignals() { Uninstall(); }

void TerminationSignals::Uninstall() {
  if (!installed_) return;
  for (int i = 0; i < handlers_set_; ++i) sigaction(kCaught[i], &previous_[i], nullptr);
  handlers_set_ = 0;
  signal_pipe.store(-1);
  installed_ = false;
}

absl::optional<int> TerminationSignals::Take() {
  unsigned char bytes[64];
  ssize_t got;
  while ((got = read(read_end_.get(), bytes, sizeof(bytes))) > 0 || (got < 0 && errno == EINTR)) {
    if (got > 0 && !first_signal_.has_value()) first_signal_ = bytes[0];
  }
  return first_signal_;
}

}  // namespace stoker::launcher
