// Tests of the control protocol: messages survive a SOCK_SEQPACKET socket, and packets of
// the wrong size or with bad fields are rejected, not interpreted.
#include "data_service/ring/control_protocol.h"

#include <sys/socket.h>

#include <cstring>
#include <string>

#include "common/testing/status_matchers.h"
#include "common/unique_fd.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

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
  const RingRequest request{/*rank=*/3,         /*world_size=*/8, /*batch_size=*/64,
                            /*image_size=*/224, /*slot_count=*/6, /*train=*/false,
                            /*drop_last=*/true};
  RingRequest with_arena = request;
  with_arena.gpu_decode_arena_bytes = uint64_t{3} << 30;
  ControlMessage message = NewMessage(MessageType::kRegister, 42);
  SetRequest(with_arena, &message);
  ASSERT_OK(SendMessage(a_.get(), message));
  auto received = ReceiveMessage(b_.get(), absl::Seconds(1));
  ASSERT_OK(received);
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
  EXPECT_EQ(decoded.gpu_decode_arena_bytes, uint64_t{3} << 30);
}

TEST_F(ControlProtocolTest, BadSampleReportsRoundTripThroughTheSocket) {
  ControlMessage message = NewMessage(MessageType::kBadSample, 7);
  message.epoch = 2;
  message.sample_index = 123456789012;
  SetText(&message, "nvJPEG: bad JPEG");
  ASSERT_OK(SendMessage(a_.get(), message));
  auto received = ReceiveMessage(b_.get(), absl::Seconds(1));
  ASSERT_OK(received);
  EXPECT_EQ(received->type, static_cast<uint16_t>(MessageType::kBadSample));
  EXPECT_EQ(received->epoch, 2);
  EXPECT_EQ(received->sample_index, 123456789012);
  EXPECT_EQ(Text(*received), "nvJPEG: bad JPEG");
  EXPECT_OK(Validate(NewMessage(MessageType::kBadSampleCounted, 7)));
}

TEST_F(ControlProtocolTest, ErrorsCarryTheirCodeAndATruncatedText) {
  const std::string long_text(1000, 'x');
  ASSERT_OK(SendMessage(a_.get(), ErrorMessage(absl::NotFoundError(long_text), 7)));
  auto received = ReceiveMessage(b_.get(), absl::Seconds(1));
  ASSERT_OK(received);
  const absl::Status status = StatusFromError(*received);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(status.message().size(), kControlTextBytes - 1);
  ControlMessage odd = ErrorMessage(absl::InternalError("x"), 0);
  odd.status_code = 1234;
  EXPECT_THAT(StatusFromError(odd), StatusIs(absl::StatusCode::kUnknown));
}

TEST_F(ControlProtocolTest, AnErrorWithoutAMessageHasAnEmptyText) {
  // An empty message's data() may be null (found by fuzz/control_protocol_fuzzer.cc).
  const ControlMessage message = ErrorMessage(absl::Status(absl::StatusCode::kInternal, ""), 3);
  EXPECT_OK(Validate(message));
  EXPECT_EQ(Text(message), "");
  EXPECT_THAT(StatusFromError(message), StatusIs(absl::StatusCode::kInternal));
}

TEST_F(ControlProtocolTest, WrongSizedPacketsAreRejected) {
  const char small[10] = {};
  SendRaw(small, sizeof(small));
  EXPECT_THAT(ReceiveMessage(b_.get(), absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::string big(sizeof(ControlMessage) + 50, '\0');
  ControlMessage valid = NewMessage(MessageType::kStartEpoch, 1);
  std::memcpy(big.data(), &valid, sizeof(valid));
  SendRaw(big.data(), big.size());
  absl::Status oversized = ReceiveMessage(b_.get(), absl::Seconds(1)).status();
  EXPECT_THAT(oversized, StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("control packet of 410 bytes; a message is 360")));
  // A packet far larger than a message (a huge length prefix in front, say) is consumed
  // whole and named with its real size.
  std::string huge(64 * 1024, '\xff');
  int buffer = 1 << 20;
  ASSERT_EQ(setsockopt(a_.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer)), 0);
  SendRaw(huge.data(), huge.size());
  oversized = ReceiveMessage(b_.get(), absl::Seconds(1)).status();
  EXPECT_THAT(oversized, StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("control packet of 65536 bytes")));
  // The bad packets were consumed: the next good one is read normally.
  ASSERT_OK(SendMessage(a_.get(), valid));
  EXPECT_OK(ReceiveMessage(b_.get(), absl::Seconds(1)));
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
    EXPECT_THAT(Validate(message), StatusIs(absl::StatusCode::kInvalidArgument));
    SendRaw(&message, sizeof(message));
    EXPECT_THAT(ReceiveMessage(b_.get(), absl::Seconds(1)),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

TEST_F(ControlProtocolTest, NothingToReadIsDeadlineExceededAndAClosedPeerUnavailable) {
  EXPECT_THAT(ReceiveMessage(b_.get(), absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(ReceiveMessage(b_.get(), absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  a_.Reset();
  EXPECT_THAT(ReceiveMessage(b_.get(), absl::Seconds(1)), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(SendMessage(b_.get(), NewMessage(MessageType::kError, 0)),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace stoker::data_service
