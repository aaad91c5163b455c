// Test-only helpers for tests that run a DataService in this process: where it listens, and
// a first client of it.
#ifndef STOKER_DATA_SERVICE_SERVICE_TESTING_H_
#define STOKER_DATA_SERVICE_SERVICE_TESTING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/testing/temp_dir.h"
#include "data_service/ring/ring_client.h"

namespace stoker::data_service::test_util {

// Where a test's data service listens: a new private directory under /tmp (a socket path
// under $TEST_TMPDIR can be too long for sun_path), removed with what is left in it when
// the address goes, the socket in it, and a job id that no other service of this or a
// concurrent test run has. `name` begins the directory's and the job's names. The error of
// making the directory if it could not be made.
struct ServiceAddress {
  stoker::testing::TempDir dir;
  std::string socket_path;
  std::string job_id;
};
absl::StatusOr<ServiceAddress> NewServiceAddress(const std::string& name);

// A client of the service at `socket_path` as rank 0 of 1, for training batches of 8 images
// of 16 x 16 pixels (TrainRequest), with epoch 0 (seed 1) started.
absl::StatusOr<std::unique_ptr<RingClient>> ClientWithFirstEpochStarted(
    const std::string& socket_path);

}  // namespace stoker::data_service::test_util

#endif  // STOKER_DATA_SERVICE_SERVICE_TESTING_H_
