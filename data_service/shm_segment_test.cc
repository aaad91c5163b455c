// Tests of SharedMemorySegment: exclusive owner-only creation, mapping by name, unlink by
// the owner only.
#include "data_service/shm_segment.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

std::string TestName(absl::string_view what) {
  static const std::string* id = new std::string(test_util::UniqueId());
  return absl::StrCat("/stoker.shmtest.", *id, ".", what);
}

bool Exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(SharedMemorySegmentTest, CreateMakesAnOwnerOnlySegmentAndUnlinksIt) {
  const std::string name = TestName("create");
  {
    auto segment = SharedMemorySegment::Create(name, 10000);
    ASSERT_TRUE(segment.ok()) << segment.status();
    EXPECT_EQ(segment->size(), 10000u);
    EXPECT_TRUE(segment->owns_name());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(segment->data()) % 4096, 0u);
    struct stat st;
    ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(st.st_size, 10000);
    // Pages are reserved up front.
    EXPECT_GE(st.st_blocks * 512, 10000);
  }
  EXPECT_FALSE(Exists(name));
}

TEST(SharedMemorySegmentTest, CreateRefusesAnExistingName) {
  const std::string name = TestName("exists");
  auto first = SharedMemorySegment::Create(name, 100);
  ASSERT_TRUE(first.ok());
  auto second = SharedMemorySegment::Create(name, 100);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find(name), std::string::npos);
  // The failed attempt must not have unlinked the first owner's segment.
  EXPECT_TRUE(Exists(name));
}

TEST(SharedMemorySegmentTest, OpenMapsTheSameBytesWithoutOwningTheName) {
  const std::string name = TestName("open");
  auto owner = SharedMemorySegment::Create(name, 8192);
  ASSERT_TRUE(owner.ok());
  std::memcpy(owner->data(), "hello", 6);
  {
    auto opened = SharedMemorySegment::Open(name);
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_FALSE(opened->owns_name());
    EXPECT_EQ(opened->size(), 8192u);
    EXPECT_STREQ(static_cast<const char*>(opened->data()), "hello");
  }
  EXPECT_TRUE(Exists(name));
}

TEST(SharedMemorySegmentTest, MoveTransfersOwnership) {
  const std::string name = TestName("move");
  auto created = SharedMemorySegment::Create(name, 100);
  ASSERT_TRUE(created.ok());
  SharedMemorySegment a = std::move(*created);
  SharedMemorySegment b;
  b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_TRUE(b.owns_name());
  EXPECT_TRUE(Exists(name));
  b = SharedMemorySegment();
  EXPECT_FALSE(Exists(name));
}

TEST(SharedMemorySegmentTest, ErrorsAreClear) {
  EXPECT_EQ(SharedMemorySegment::Open(TestName("missing")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SharedMemorySegment::Create("no-slash", 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create("/a/b", 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(TestName("empty"), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(TestName("huge"), size_t{1} << 50).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(Exists(TestName("huge")));
}

}  // namespace
}  // namespace stoker::data_service
