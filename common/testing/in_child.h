// RunInChild: runs a check in a forked child, for tests of process-wide state that must not
// touch the test process (resource limits, seccomp filters).
#ifndef STOKER_COMMON_TESTING_IN_CHILD_H_
#define STOKER_COMMON_TESTING_IN_CHILD_H_

#include <functional>
#include <string>

namespace stoker::testing {

// Runs `check` in a child process and returns what it returned ("" when all is well), with
// " (child ended with status N)" appended when the child did not exit 0.
std::string RunInChild(const std::function<std::string()>& check);

}  // namespace stoker::testing

#endif  // STOKER_COMMON_TESTING_IN_CHILD_H_
