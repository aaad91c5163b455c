// Tests of the control protocol: messages survive a SOCK_SEQPACKET socket, and packets of
// the wrong size or with bad fields are rejected, not interpreted.
#include "data_service/ring/control_protocol.h"

#include <sys/socket.h>

#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

class ControlProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    a_.Reset(fds[0]);
    b_.Reset(fds[1]);
  }
  void SendRaw(const void* data, size_t size) {
    ASSERT_EQ(send(a_.get(), data, size, 0), static_cast<ssize_t>(size));
  }
  UniqueFd a_, b_;
};

TEST_F(ControlProtocolTest, RegisterRoundTripsThroughTheSocket) {
  RingRequest request;
  request.rank = 3;
  request.world_size = 8;
  request.batch_size = 64;
  request.image_size = 224;
  request.slot_count = 6;
  request.train = false;
  request.drop_last = true;
  ControlMessage message = NewMessage(MessageType::kRegister, 42);
  SetRequest(request, &message);
  ASSERT_TRUE(SendMessage(a_.get(), message).ok());
  auto received = ReceiveMessage(b_.get(), absl::Seconds(1));
  ASSERT_TRUE(received.ok()) << received.status();
  EXPECT_EQ(received->type, static_cast<uint16_t>(MessageType::kRegister));
  EXPECT_EQ(received->request_id, 42u);
  const RingRequest decoded = GetRequest(*received);
  EXPECT_EQ(decoded.rank, 3);
  EXPECT_EQ(decoded.world_size, 8);
  EXPECT_EQ(decoded.batch_size, 64);
  EXPECT_EQ(decoded.image_size, 224);
  EXPECT_EQ(decoded.slot_count, 6);
  EXPECT_FALSE(decoded.train);
  EXPECT_TRUE(decoded.drop_last);
}

TEST_F(ControlProtocolTest, ErrorsCarryTheirCodeAndATruncatedText) {
  const std::string long_text(1000, 'x');
  ASSERT_TRUE(
      SendMessage(a_.get(), ErrorMessage(absl::NotFoundError(long_text), 7)).ok());
  auto received = ReceiveMessage(b_.get(), absl::Seconds(1));
  ASSERT_TRUE(received.ok()) << received.status();
  const absl::Status status = StatusFromError(*received);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message().size(), kControlTextBytes - 1);
  ControlMessage odd = ErrorMessage(absl::InternalError("x"), 0);
  odd.status_code = 1234;
  EXPECT_EQ(StatusFromError(odd).code(), absl::StatusCode::kUnknown);
}

TEST_F(ControlProtocolTest, AnErrorWithoutAMessageHasAnEmptyText) {
  // An empty message's data() may be null (found by fuzz/control_protocol_fuzzer.cc).
  const ControlMessage message = ErrorMessage(absl::Status(absl::StatusCode::kInternal, ""), 3);
  EXPECT_TRUE(Validate(message).ok());
  EXPECT_EQ(Text(message), "");
  EXPECT_EQ(StatusFromError(message).code(), absl::StatusCode::kInternal);
}

TEST_F(ControlProtocolTest, WrongSizedPacketsAreRejected) {
  const char small[10] = {};
  SendRaw(small, sizeof(small));
  EXPECT_EQ(ReceiveMessage(b_.get(), absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string big(sizeof(ControlMessage) + 50, '\0');
  ControlMessage valid = NewMessage(MessageType::kStartEpoch, 1);
  std::memcpy(big.data(), &valid, sizeof(valid));
  SendRaw(big.data(), big.size());
  absl::Status oversized = ReceiveMessage(b_.get(), absl::Seconds(1)).status();
  EXPECT_EQ(oversized.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(oversized.message().find("control packet of 394 bytes; a message is 344"),
            absl::string_view::npos)
      << oversized;
  // A packet far larger than a message (a huge length prefix in front, say) is consumed
  // whole and named with its real size.
  std::string huge(64 * 1024, '\xff');
  int buffer = 1 << 20;
  ASSERT_EQ(setsockopt(a_.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer)), 0);
  SendRaw(huge.data(), huge.size());
  oversized = ReceiveMessage(b_.get(), absl::Seconds(1)).status();
  EXPECT_EQ(oversized.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(oversized.message().find("control packet of 65536 bytes"), absl::string_view::npos)
      << oversized;
  // The bad packets were consumed: the next good one is read normally.
  ASSERT_TRUE(SendMessage(a_.get(), valid).ok());
  EXPECT_TRUE(ReceiveMessage(b_.get(), absl::Seconds(1)).ok());
}

TEST_F(ControlProtocolTest, BadFieldsAreRejected) {
  std::vector<ControlMessage> bad(6, NewMessage(MessageType::kRegister, 1));
  bad[0].magic ^= 1;
  bad[1].version = kControlVersion + 1;
  bad[2].type = 0;
  bad[3].type = 99;
  bad[4].train = 2;
  std::memset(bad[5].text, 'a', kControlTextBytes);
  for (const ControlMessage& message : bad) {
    EXPECT_EQ(Validate(message).code(), absl::StatusCode::kInvalidArgument);
    SendRaw(&message, sizeof(message));
    EXPECT_EQ(ReceiveMessage(b_.get(), absl::Seconds(1)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(ControlProtocolTest, NothingToReadIsDeadlineExceededAndAClosedPeerUnavailable) {
  EXPECT_EQ(ReceiveMessage(b_.get(), absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ReceiveMessage(b_.get(), absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  a_.Reset();
  EXPECT_EQ(ReceiveMessage(b_.get(), absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(SendMessage(b_.get(), NewMessage(MessageType::kError, 0)).code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace stoker::data_service
