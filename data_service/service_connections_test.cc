// Tests of DataService's connections (Note [Connections without a thread]): many idle
// peers cost no thread each and real clients are still served; a peer that connects,
// sends nothing and leaves is forgotten.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "data_service/ring/ring_client.h"
#include "data_service/service.h"
#include "data_service/service_testing.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

// Threads of this process now.
int ThreadCount() {
  int count = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

class ServiceConnectionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(address_, test_util::NewServiceAddress("connectionstest"));
    ServiceOptions options;
    options.socket_path = address_.socket_path;
    options.job_id = address_.job_id;
    options.threads = 2;
    auto service = DataService::Start(
        options,
        {std::shared_ptr<const Dataset>(std::move(*SyntheticDataset::Create({64, 10, 1, false}))),
         nullptr});
    ASSERT_OK(service);
    service_ = std::move(*service);
  }
  void TearDown() override { service_.reset(); }

  UniqueFd IdleConnection() {
    UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    absl::StatusOr<sockaddr_un> address = UnixSocketAddress(address_.socket_path);
    EXPECT_OK(address);
    EXPECT_EQ(ConnectUnixSocket(fd.get(), *address), 0);
    return fd;
  }

  // One epoch's first batch through a real client.
  void ServeARealClient() {
    auto client = test_util::ClientWithFirstEpochStarted(address_.socket_path);
    ASSERT_OK(client);
    auto batch = (*client)->Acquire(absl::Seconds(10));
    ASSERT_OK(batch);
    EXPECT_OK((*client)->Release(*batch));
    client->reset();
    // Its connection ends (and its ring is unlinked) before the next client of rank 0.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (service_->connection_count() > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(service_->connection_count(), 0);
  }

  test_util::ServiceAddress address_;
  std::unique_ptr<DataService> service_;
};

TEST_F(ServiceConnectionsTest, ManyIdlePeersCostNoThreadsAndRealClientsAreServed) {
  const int before = ThreadCount();
  ASSERT_GT(before, 0);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(IdleConnection());
  absl::SleepFor(absl::Milliseconds(500));  // all accepted by now
  const int with_idle = ThreadCount();
  EXPECT_LE(with_idle, before + 2)
      << "threads: " << before << " before, " << with_idle << " with 300 idle connections";
  EXPECT_EQ(service_->connection_count(), 0);
  ServeARealClient();  // once the real client is gone its thread is too
  EXPECT_LE(ThreadCount(), before + 2);
}

TEST_F(ServiceConnectionsTest, PeersThatLeaveWithoutARequestAreForgotten) {
  for (int round = 0; round < 3; ++round) {
    std::vector<UniqueFd> idle;
    for (int i = 0; i < 200; ++i) idle.push_back(IdleConnection());
  }  // each round's connections closed
  absl::SleepFor(absl::Milliseconds(500));
  // 600 connections were accepted; the service still takes new ones and serves them.
  ServeARealClient();
  std::vector<UniqueFd> more;
  for (int i = 0; i < 100; ++i) more.push_back(IdleConnection());
  ServeARealClient();
}

}  // namespace
}  // namespace stoker::data_service
