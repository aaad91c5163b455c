// Test support: a fresh directory per test under the test's private temporary directory.
// Only tests link this.
#ifndef STOKER_COMMON_TEST_DIR_H_
#define STOKER_COMMON_TEST_DIR_H_

#include <string>

namespace stoker {

// Creates (with its parents) and returns $TEST_TMPDIR/`name`, or /tmp/`name` where
// TEST_TMPDIR is unset; a failure to create it fails the calling test.
std::string TestDir(const std::string& name);

}  // namespace stoker

#endif  // STOKER_COMMON_TEST_DIR_H_
