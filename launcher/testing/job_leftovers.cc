#include "launcher/testing/job_leftovers.h"

#include <sys/types.h>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/job_owner.h"
#include "launcher/testing/process_probe.h"

namespace stoker::launcher::testing {

void ExpectNothingLeftOfJob(absl::string_view out, absl::string_view job_id) {
  for (pid_t pid : ReadPidFiles(out)) EXPECT_FALSE(IsProcessAlive(pid)) << "pid " << pid;
  EXPECT_FALSE(PathExists(JobDirectoryPath("/tmp", job_id)));
  EXPECT_FALSE(PathExists(JobOwnerPath("/tmp", job_id)));
  EXPECT_THAT(::stoker::testing::ListEntries("/dev/shm", absl::StrCat("stoker.", job_id, ".")),
              ::testing::IsEmpty());
}

}  // namespace stoker::launcher::testing
