// A stand-in for data_service in the launcher's lifecycle tests. It accepts the real
// program's flags (so the launcher's command line is checked against the contract), records
// what it was given, creates a segment file stoker.<job_id>.ring.0, listens on --socket, and
// then behaves as STOKER_FAKE_DATA_SERVICE says:
//   serve                    (default) accept connections until SIGTERM, clean up, exit 0
//   exit_before_ready:CODE   exit CODE without ever listening
//   never_ready              never listen; exit 0 on SIGTERM
//   exit_after_ready:CODE:MS listen, then exit CODE after MS ms without cleaning up
//   crash_after_ready:MS[:SIGNAL]  listen, then die of SIGNAL (default SIGSEGV) after MS ms
//   leak_on_term             on SIGTERM exit 0 but leave the socket and segment behind
//   ignore_term              ignore SIGTERM (the launcher must SIGKILL it)
//   fail_on_term:CODE        on SIGTERM clean up but exit CODE
// It listens on a SOCK_SEQPACKET socket, as the real one does, or on a SOCK_STREAM one when
// STOKER_FAKE_SOCKET_TYPE=stream.
// Files it writes to $STOKER_FAKE_OUT: data_service.pid, data_service.args (one per line),
// data_service.env (its NCCL_NVLS_ENABLE). Segments go to $STOKER_FAKE_SHM_DIR or /dev/shm.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/names.h"
#include "common/unix_socket.h"

ABSL_FLAG(std::string, socket, "", "Unix socket to listen on");
ABSL_FLAG(std::string, job_id, "", "job id");
ABSL_FLAG(int, node_id, 0, "node id");
ABSL_FLAG(std::string, dataset, "synthetic", "dataset");
ABSL_FLAG(std::string, train_dir, "", "train dir");
ABSL_FLAG(std::string, val_dir, "", "val dir");
ABSL_FLAG(int64_t, synthetic_samples, 0, "samples");
ABSL_FLAG(int, synthetic_classes, 0, "classes");
ABSL_FLAG(uint64_t, data_seed, 0, "seed");
ABSL_FLAG(int, threads, 0, "threads");
ABSL_FLAG(int, prefetch, 0, "prefetch");

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fake data service: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(70);
}

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

int IntField(const std::vector<std::string>& fields, size_t index) {
  int value = 0;
  if (index >= fields.size() || !absl::SimpleAtoi(fields[index], &value)) {
    std::fprintf(stderr, "fake data service: bad STOKER_FAKE_DATA_SERVICE\n");
    std::exit(71);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  stoker::ParseFlagsOrExit(
      argc, argv, stoker::FlagSpecOf("fake_data_service", "launcher/testing/fake_data_service.cc"),
      "fake_data_service --socket=PATH --job_id=ID ...: a stand-in for data_service");
  const std::string out = Env("STOKER_FAKE_OUT", "");
  const std::vector<std::string> mode =
      absl::StrSplit(Env("STOKER_FAKE_DATA_SERVICE", "serve"), ':');
  const std::string socket_path = absl::GetFlag(FLAGS_socket);
  const std::string segment =
      absl::StrCat(Env("STOKER_FAKE_SHM_DIR", "/dev/shm"),
                   stoker::RingSegmentName(absl::GetFlag(FLAGS_job_id), 0, /*train=*/true));
  if (!out.empty()) {
    std::ofstream(out + "/data_service.pid") << getpid() << "\n";
    std::ofstream args(out + "/data_service.args");
    for (int i = 1; i < argc; ++i) args << argv[i] << "\n";
    std::ofstream(out + "/data_service.env") << Env("NCCL_NVLS_ENABLE", "unset") << "\n";
  }

  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (mode[0] == "ignore_term") {
    signal(SIGTERM, SIG_IGN);
  } else {
    sigprocmask(SIG_BLOCK, &term, nullptr);
  }
  const int term_fd = signalfd(-1, &term, SFD_CLOEXEC);
  if (term_fd < 0) Die("signalfd");

  if (mode[0] == "exit_before_ready") {
    usleep(100 * 1000);
    return IntField(mode, 1);
  }
  const int segment_fd = open(segment.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (segment_fd < 0) Die("create " + segment);
  close(segment_fd);

  int listen_fd = -1;
  if (mode[0] != "never_ready") {
    listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const absl::StatusOr<sockaddr_un> address = stoker::UnixSocketAddress(socket_path);
    if (!address.ok()) Die(std::string(address.status().message()));
    // Ready only once listen() returns: a connect before that fails.
    if (const int error = stoker::BindUnixSocket(listen_fd, *address); error != 0) {
      errno = error;
      Die("bind " + socket_path);
    }
    chmod(socket_path.c_str(), 0600);
    if (listen(listen_fd, 16) != 0) Die("listen");
  }

  int timeout_ms = -1;
  if (mode[0] == "exit_after_ready") timeout_ms = IntField(mode, 2);
  if (mode[0] == "crash_after_ready") timeout_ms = IntField(mode, 1);
  while (true) {
    pollfd fds[2] = {{term_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}};
    const int ready = poll(fds, listen_fd >= 0 ? 2 : 1, timeout_ms);
    if (ready == 0 && mode[0] == "crash_after_ready") {
      const int fatal = mode.size() > 2 ? IntField(mode, 2) : SIGSEGV;
      signal(fatal, SIG_DFL);
      raise(fatal);
    }
    if (ready == 0) return IntField(mode, 1);  // exit_after_ready: no cleanup, as a crash
    if (ready < 0) continue;
    if (fds[1].revents & POLLIN) {
      const int client = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) close(client);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      if (read(term_fd, &info, sizeof(info)) != sizeof(info)) continue;
      if (mode[0] == "leak_on_term") return 0;
      unlink(socket_path.c_str());
      unlink(segment.c_str());
      return mode[0] == "fail_on_term" ? IntField(mode, 1) : 0;
    }
  }
}
