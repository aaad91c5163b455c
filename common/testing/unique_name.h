// Names that concurrent test runs cannot share: shared-memory segments, job ids. A process
// id does not do, since Bazel's sandbox gives every test the same one. Only tests link this.
#ifndef STOKER_COMMON_TESTING_UNIQUE_NAME_H_
#define STOKER_COMMON_TESTING_UNIQUE_NAME_H_

#include <string>

#include "absl/strings/string_view.h"

namespace stoker::testing {

// `prefix`, a dot, 16 random hex digits drawn once per process, a dot and a counter:
// "/stoker.ringtest.3f09c2a17b44e0d1.0". Each call returns a new name. Thread-safe.
std::string UniqueName(absl::string_view prefix);

}  // namespace stoker::testing

#endif  // STOKER_COMMON_TESTING_UNIQUE_NAME_H_
