// Test expectations on what a job leaves behind once it is over: its processes, its
// directory and owner record under /tmp and its shared-memory segments.
#ifndef STOKER_LAUNCHER_TESTING_JOB_LEFTOVERS_H_
#define STOKER_LAUNCHER_TESTING_JOB_LEFTOVERS_H_

#include "absl/strings/string_view.h"

namespace stoker::launcher::testing {

// Expects (gtest EXPECT_*) that the job `job_id`, whose fakes wrote their pids into `*.pid`
// files under `out`, left nothing: no process of those pids, no /tmp/stoker.<job_id>, no
// /tmp/stoker.<job_id>.owner and no /dev/shm/stoker.<job_id>.* segment.
void ExpectNothingLeftOfJob(absl::string_view out, absl::string_view job_id);

}  // namespace stoker::launcher::testing

#endif  // STOKER_LAUNCHER_TESTING_JOB_LEFTOVERS_H_
