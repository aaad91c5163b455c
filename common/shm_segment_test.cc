// Tests of SharedMemorySegment: exclusive owner-only creation, mapping by name, unlink by
// the owner only (at destruction, or early and once), and a /dev/shm too small for a
// segment refused at creation (a real small tmpfs over /dev/shm) instead of a SIGBUS later.
#include "common/shm_segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/test_tmpfs.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

// Names unique to this run (Bazel's sandbox gives every test the same pid).
std::string TestName(absl::string_view what) {
  static const std::string* id = [] {
    std::random_device device;
    return new std::string(absl::StrFormat("%08x%08x", device(), device()));
  }();
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
    ASSERT_OK(segment);
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
  ASSERT_OK(first);
  auto second = SharedMemorySegment::Create(name, 100);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(name)));
  // The failed attempt must not have unlinked the first owner's segment.
  EXPECT_TRUE(Exists(name));
}

TEST(SharedMemorySegmentTest, OpenMapsTheSameBytesWithoutOwningTheName) {
  const std::string name = TestName("open");
  auto owner = SharedMemorySegment::Create(name, 8192);
  ASSERT_OK(owner);
  std::memcpy(owner->data(), "hello", 6);
  {
    auto opened = SharedMemorySegment::Open(name);
    ASSERT_OK(opened);
    EXPECT_FALSE(opened->owns_name());
    EXPECT_EQ(opened->size(), 8192u);
    EXPECT_STREQ(static_cast<const char*>(opened->data()), "hello");
  }
  EXPECT_TRUE(Exists(name));
}

TEST(SharedMemorySegmentTest, OpenRefusesASegmentOthersMayUseOrOfAnotherUser) {
  const std::string name = TestName("mode");
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  ASSERT_EQ(fchmod(fd, 0644), 0);
  absl::StatusOr<SharedMemorySegment> opened = SharedMemorySegment::Open(name);
  EXPECT_THAT(
      opened,
      StatusIs(absl::StatusCode::kPermissionDenied,
               HasSubstr(absl::StrCat("shared-memory segment ", name,
                                      " has mode 0644: other users may read or change it"))));
  ASSERT_EQ(fchmod(fd, 0600), 0);
  EXPECT_OK(SharedMemorySegment::Open(name));
  if (geteuid() == 0 && fchown(fd, 65534, 65534) == 0) {  // not in a sandbox's user namespace
    opened = SharedMemorySegment::Open(name);
    EXPECT_THAT(opened, StatusIs(absl::StatusCode::kPermissionDenied,
                                 HasSubstr("belongs to uid 65534, not to this user")));
    // Nor can Create take the name: it says whose the segment is.
    EXPECT_THAT(SharedMemorySegment::Create(name, 4096),
                StatusIs(absl::StatusCode::kAlreadyExists,
                         HasSubstr("already exists and belongs to uid 65534, not to this user")));
  }
  close(fd);
  shm_unlink(name.c_str());
}

TEST(SharedMemorySegmentTest, MoveTransfersOwnership) {
  const std::string name = TestName("move");
  auto created = SharedMemorySegment::Create(name, 100);
  ASSERT_OK(created);
  SharedMemorySegment a = std::move(*created);
  SharedMemorySegment b;
  b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_TRUE(b.owns_name());
  EXPECT_TRUE(Exists(name));
  b = SharedMemorySegment();
  EXPECT_FALSE(Exists(name));
}

TEST(SharedMemorySegmentTest, UnlinkRemovesTheNameOnceAndKeepsTheMapping) {
  const std::string name = TestName("unlink");
  auto owner = SharedMemorySegment::Create(name, 4096);
  ASSERT_OK(owner);
  auto opened = SharedMemorySegment::Open(name);
  ASSERT_OK(opened);
  const absl::Status by_opener = opened->Unlink();
  EXPECT_THAT(by_opener, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(name)));
  EXPECT_TRUE(Exists(name));

  ASSERT_OK(owner->Unlink());
  EXPECT_FALSE(owner->owns_name());
  EXPECT_FALSE(Exists(name));
  EXPECT_THAT(owner->Unlink(), StatusIs(absl::StatusCode::kFailedPrecondition));
  // Both mappings still share their bytes.
  std::memcpy(owner->data(), "still", 6);
  EXPECT_STREQ(static_cast<const char*>(opened->data()), "still");

  // The name is free again: a new segment can take it, and the old owner's destruction
  // must not remove the new one's name.
  auto successor = SharedMemorySegment::Create(name, 4096);
  ASSERT_OK(successor);
  *owner = SharedMemorySegment();
  EXPECT_TRUE(Exists(name));
}

TEST(SharedMemorySegmentTest, ATruncatedSegmentEndsTheProcessNamingItInsteadOfASigbus) {
  const std::string name = TestName("truncated");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto created = SharedMemorySegment::Create(name, 4 * page);
  ASSERT_OK(created);
  auto opened = SharedMemorySegment::Open(name);
  ASSERT_OK(opened);
  volatile const uint8_t* last_page = static_cast<const uint8_t*>(opened->data()) + 3 * page;
  const auto truncate_and_read = [&] {
    if (!InstallTruncatedSharedMemoryGuard(kExitPeerLost, "trainer rank 0").ok()) _exit(3);
    // Another process shrinks the segment to one page.
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(page)) != 0) _exit(4);
    close(fd);
    std::printf("%d\n", last_page[0]);  // SIGBUS
    _exit(0);
  };
  const absl::Time start = absl::Now();
  EXPECT_EXIT(truncate_and_read(), ::testing::ExitedWithCode(kExitPeerLost),
              absl::StrCat(
                  "\\[trainer rank 0\\] E peer lost \\(exit 69\\): shared memory truncated: ", name,
                  " was mapped with ", 4 * page, " bytes, but byte ", 3 * page,
                  " is past the end of the segment now"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A SIGBUS elsewhere keeps its default action.
  EXPECT_EXIT(
      {
        if (!InstallTruncatedSharedMemoryGuard(1, "test").ok()) _exit(3);
        raise(SIGBUS);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST(SharedMemorySegmentTest, ErrorsAreClear) {
  EXPECT_THAT(SharedMemorySegment::Open(TestName("missing")),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(SharedMemorySegment::Create("no-slash", 10),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedMemorySegment::Create("/a/b", 10),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedMemorySegment::Create(TestName("empty"), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedMemorySegment::Create(TestName("huge"), size_t{1} << 50),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(Exists(TestName("huge")));
}

// Runs in a child process (EXPECT_EXIT forks): the 4 MiB tmpfs over /dev/shm is private
// to it. Exits 0 when every check holds, else prints what failed and exits 1.
void CreateOnASmallDevShm() {
  if (absl::Status mounted = MountPrivateTmpfs("/dev/shm", 4 << 20); !mounted.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mounted.message()).c_str());
    std::exit(77);
  }
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "FAILED: %s\n", why.c_str());
    std::exit(1);
  };
  // A first ring fits; the second one (8 MiB) does not fit beside it.
  auto fits = SharedMemorySegment::Create("/stoker.small.ring.0", 3 << 20);
  if (!fits.ok()) fail(absl::StrCat("a 3 MiB segment should fit: ", fits.status().ToString()));
  auto too_big = SharedMemorySegment::Create("/stoker.small.ring.1", 8 << 20);
  const std::string message(too_big.status().message());
  if (too_big.status().code() != absl::StatusCode::kResourceExhausted) {
    fail(absl::StrCat("want ResourceExhausted, got ", too_big.status().ToString()));
  }
  for (const std::string& part :
       {std::string("/stoker.small.ring.1"),
        std::string("/dev/shm has no room for its 8388608 bytes"),
        std::string("bytes free of 4194304"), std::string("--shm-size")}) {
    if (!absl::StrContains(message, part)) fail(absl::StrCat("\"", part, "\" not in: ", message));
  }
  // The refused segment is gone and its pages are free again; the first is untouched.
  if (Exists("/stoker.small.ring.1")) fail("the refused segment was left in /dev/shm");
  std::memset(fits->data(), 0xab, fits->size());  // no SIGBUS: its pages were reserved
  auto after = SharedMemorySegment::Create("/stoker.small.ring.2", 512 << 10);
  if (!after.ok()) fail(absl::StrCat("the space was not released: ", after.status().ToString()));
  std::fprintf(stderr, "refused clearly: %s\n", message.c_str());
  std::exit(0);
}

// Whether a child process can mount a private tmpfs here (see common/test_tmpfs.h).
bool CanMountPrivateTmpfs() {
  const pid_t child = fork();
  if (child == 0) _exit(MountPrivateTmpfs("/dev/shm", 1 << 20).ok() ? 0 : 77);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

TEST(SharedMemorySegmentTest, ASegmentThatDoesNotFitInDevShmIsRefusedWithTheSizes) {
  if (!CanMountPrivateTmpfs()) GTEST_SKIP() << "needs a private mount namespace for a small tmpfs";
  EXPECT_EXIT(CreateOnASmallDevShm(), ::testing::ExitedWithCode(0), "refused clearly");
}

}  // namespace
}  // namespace stoker
