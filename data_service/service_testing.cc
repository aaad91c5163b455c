#include "data_service/service_testing.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "data_service/test_util.h"

namespace stoker::data_service::test_util {

absl::StatusOr<ServiceAddress> NewServiceAddress(const std::string& name) {
  static std::atomic<int> services{0};
  ServiceAddress address;
  ASSIGN_OR_RETURN(address.dir, stoker::testing::TempDir::CreateShort("stoker-" + name));
  address.socket_path = address.dir.Join("data.sock");
  address.job_id = absl::StrCat(name, UniqueId(), "_", services++);
  return address;
}

absl::StatusOr<std::unique_ptr<RingClient>> ClientWithFirstEpochStarted(
    const std::string& socket_path) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<RingClient> client,
      RingClient::Connect(socket_path, TrainRequest(0, 1, /*batch_size=*/8, /*image_size=*/16),
                          absl::Seconds(10)));
  RETURN_IF_ERROR(client->StartEpoch(0, 1).status());
  return client;
}

}  // namespace stoker::data_service::test_util
