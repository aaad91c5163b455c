// Tests that PythonWorker answers requests from one process, restarts after the process
// exits, and kills a process that does not reply in time.
#include "common/testing/python_worker.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace stoker::testing {
namespace {

// Replies "<pid> <request>", exits on "exit" and hangs on "hang".
constexpr char kEcho[] = R"py(
import os, sys, time
for line in sys.stdin:
    request = line.strip()
    if request == "exit":
        sys.exit(3)
    if request == "hang":
        time.sleep(60)
    print(os.getpid(), request, flush=True)
)py";

TEST(PythonWorkerTest, AnswersEveryRequestFromOneProcess) {
  PythonWorker worker(kEcho);
  absl::StatusOr<std::string> first = worker.Call("a", 60);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::string> second = worker.Call("b", 60);
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string pid = first->substr(0, first->find(' '));
  EXPECT_EQ(*first, pid + " a");
  EXPECT_EQ(*second, pid + " b");
}

TEST(PythonWorkerTest, RestartsAfterTheProcessExits) {
  PythonWorker worker(kEcho);
  absl::StatusOr<std::string> gone = worker.Call("exit", 60);
  EXPECT_TRUE(absl::IsInternal(gone.status())) << gone.status();
  EXPECT_NE(gone.status().message().find("exited with code 3"), std::string::npos) << gone.status();
  absl::StatusOr<std::string> again = worker.Call("c", 60);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->find(" c"), std::string::npos);
}

TEST(PythonWorkerTest, KillsAProcessThatDoesNotReplyInTime) {
  PythonWorker worker(kEcho);
  absl::StatusOr<std::string> hung = worker.Call("hang", 1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(hung.status())) << hung.status();
  absl::StatusOr<std::string> again = worker.Call("d", 60);
  ASSERT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace stoker::testing
