// Runs the real data_service binary: two ranks of a world of two read two epochs of the
// synthetic dataset; every index is delivered once per epoch (plus the sampler's padding),
// the images do not depend on --threads, SIGTERM leaves no segment and no socket behind,
// bad flags exit 2, an ImageFolder of JPEGs works end to end, and its packed copy gives
// the same batches (bad files included) at any --threads.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/atomic_file.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "data_service/dataset/packed_writer.h"
#include "data_service/dataset/sampler.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "data_service/ring/ring_client.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::ListEntries;
using ::stoker::testing::StatusIs;
using ::stoker::testing::TempDir;

namespace fs = std::filesystem;

std::string BinaryPath() {
  std::vector<std::string> candidates;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    candidates.push_back(absl::StrCat(srcdir, "/stoker/data_service/data_service"));
  }
  candidates.push_back("data_service/data_service");
  for (const std::string& path : candidates) {
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// A data_service child process; killed if the test forgets it.
class ServiceProcess {
 public:
  explicit ServiceProcess(const std::vector<std::string>& flags) {
    static int counter = 0;
    stderr_path_ =
        absl::StrCat(test_util::TestDirectory("binary_logs"), "/service", counter++, ".log");
    const std::string binary = BinaryPath();
    EXPECT_FALSE(binary.empty()) << "data_service binary not found in runfiles";
    pid_ = fork();
    if (pid_ == 0) {
      const int log = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(log, STDERR_FILENO);
      dup2(log, STDOUT_FILENO);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(binary.c_str()));
      for (const std::string& flag : flags) argv.push_back(const_cast<char*>(flag.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
  }
  ~ServiceProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The exit status (or 128 + signal), or -1 if it did not exit within `timeout`.
  int Wait(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return -1;
  }
  void Signal(int signal) { kill(pid_, signal); }
  pid_t pid() const { return pid_; }
  std::string Log() const {
    std::ifstream in(stderr_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  std::string stderr_path_;
};

std::vector<std::string> SegmentsOfJob(const std::string& job) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, absl::StrCat("stoker.", job, "."))) found.push_back(name);
  }
  return found;
}

constexpr int64_t kSamples = 101;
constexpr int32_t kClasses = 7;
constexpr uint64_t kDataSeed = 3;
constexpr uint64_t kSeed = 2024;
constexpr int kBatch = 8;
constexpr int kImageSize = 16;
constexpr size_t kImageBytes = kImageSize * kImageSize * 3;

struct RunResult {
  // [epoch][rank] -> the indices in delivery order.
  std::vector<std::vector<std::vector<int64_t>>> indices;
  std::map<int64_t, std::vector<uint8_t>> images;
};

RunResult RunTwoRanksTwoEpochs(int threads) {
  RunResult result;
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  absl::StatusOr<TempDir> dir_temp = TempDir::CreateShort("stoker-bintest");
  EXPECT_OK(dir_temp);
  if (!dir_temp.ok()) return result;
  const std::string dir = dir_temp->path();
  const std::string socket = dir + "/ds.sock";
  const std::string job = absl::StrCat("bintest", test_util::UniqueId(), "t", threads);
  ServiceProcess service({"--socket=" + socket, "--job_id=" + job, "--node_id=0",
                          "--dataset=synthetic", absl::StrCat("--synthetic_samples=", kSamples),
                          absl::StrCat("--synthetic_classes=", kClasses),
                          absl::StrCat("--data_seed=", kDataSeed),
                          absl::StrCat("--threads=", threads), "--prefetch=2"});
  std::vector<std::unique_ptr<RingClient>> clients;
  for (int rank = 0; rank < 2; ++rank) {
    RingRequest request;
    request.rank = rank;
    request.world_size = 2;
    request.batch_size = kBatch;
    request.image_size = kImageSize;
    request.slot_count = 3;
    auto client = RingClient::Connect(socket, request, absl::Seconds(60));
    EXPECT_OK(client) << client.status() << "\n" << service.Log();
    if (!client.ok()) return result;
    clients.push_back(std::move(*client));
  }
  std::set<std::string> segments;
  for (const std::string& s : SegmentsOfJob(job)) segments.insert(s);
  EXPECT_EQ(segments, (std::set<std::string>{absl::StrCat("stoker.", job, ".ring.0"),
                                             absl::StrCat("stoker.", job, ".ring.1")}));
  // Both epochs are asked for up front: epoch 1 follows epoch 0 directly in each ring.
  std::vector<std::vector<EpochInfo>> infos(2);
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      auto info = clients[rank]->StartEpoch(epoch, kSeed);
      EXPECT_OK(info);
      if (!info.ok()) return result;
      EXPECT_EQ(info->samples, 51);
      EXPECT_EQ(info->batches, 7);
      infos[rank].push_back(*info);
    }
  }
  result.indices.assign(2, std::vector<std::vector<int64_t>>(2));
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      for (int64_t step = 0; step < infos[rank][epoch].batches; ++step) {
        auto batch = clients[rank]->Acquire(absl::Seconds(30));
        EXPECT_OK(batch);
        if (!batch.ok()) return result;
        EXPECT_EQ(batch->epoch, epoch);
        EXPECT_EQ(batch->step, step);
        for (int i = 0; i < batch->count; ++i) {
          const int64_t index = batch->sample_indices[i];
          EXPECT_EQ(batch->labels[i], index % kClasses);
          result.indices[epoch][rank].push_back(index);
          std::vector<uint8_t> image(batch->images + i * kImageBytes,
                                     batch->images + (i + 1) * kImageBytes);
          auto [it, inserted] = result.images.emplace(index, image);
          // Padding and the second epoch repeat indices: the bytes must repeat too.
          EXPECT_EQ(it->second, image) << "sample " << index;
        }
        EXPECT_OK(clients[rank]->Release(*batch));
      }
    }
  }
  // SIGTERM with the clients still connected: the service cleans up by itself.
  service.Signal(SIGTERM);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
  EXPECT_TRUE(SegmentsOfJob(job).empty()) << absl::StrJoin(SegmentsOfJob(job), " ");
  struct stat st;
  EXPECT_NE(stat(socket.c_str(), &st), 0) << "socket " << socket << " is still there";
  // The clients see the service gone.
  auto after = clients[0]->StartEpoch(2, kSeed);
  EXPECT_THAT(after, StatusIs(absl::StatusCode::kUnavailable));
  clients.clear();
  return result;
}

TEST(DataServiceBinaryTest, TwoRanksGetEveryIndexOncePerEpochAndIdenticalBytesAtAnyThreadCount) {
  ASSERT_FALSE(BinaryPath().empty());
  const RunResult one = RunTwoRanksTwoEpochs(1);
  const RunResult three = RunTwoRanksTwoEpochs(3);
  ASSERT_EQ(one.indices.size(), 2u);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> all;
    for (int rank = 0; rank < 2; ++rank) {
      const std::vector<int64_t>& mine = one.indices[epoch][rank];
      EXPECT_EQ(mine.size(), 51u);
      all.insert(mine.begin(), mine.end());
      // Exactly PyTorch's DistributedSampler order (sampler_test checks that against torch).
      auto sampler = DistributedSampler::Create({kSamples, 2, rank, true, false});
      EXPECT_EQ(mine, sampler->EpochIndices(kSeed, epoch)) << "epoch " << epoch << " rank " << rank;
    }
    // 101 samples over 2 ranks: 102 slots, so the permutation's first index repeats.
    const int64_t padding = one.indices[epoch][0][0];
    for (int64_t i = 0; i < kSamples; ++i) {
      EXPECT_EQ(all.count(i), i == padding ? 2u : 1u) << "epoch " << epoch << " index " << i;
    }
  }
  EXPECT_NE(one.indices[0], one.indices[1]) << "both epochs have the same order";
  // The thread count changes neither the order nor a single byte.
  EXPECT_EQ(one.indices, three.indices);
  ASSERT_EQ(one.images.size(), static_cast<size_t>(kSamples));
  EXPECT_TRUE(one.images == three.images) << "images differ between --threads=1 and --threads=3";
  // And the bytes are the synthetic dataset's.
  auto dataset = SyntheticDataset::Create({kSamples, kClasses, kDataSeed});
  ASSERT_OK(dataset);
  for (const auto& [index, image] : one.images) {
    std::vector<uint8_t> expected(kImageBytes);
    SampleScratch scratch;
    ASSERT_OK((*dataset)->Load(index, {kImageSize, true, kSeed, 0}, scratch, expected.data()));
    EXPECT_EQ(image, expected) << "sample " << index;
  }
}

TEST(DataServiceBinaryTest, FlagErrorsExitWithCode2AndNameTheFlag) {
  ASSERT_FALSE(BinaryPath().empty());
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string dir = dir_temp.path();
  const std::string socket = "--socket=" + dir + "/s.sock";
  struct Case {
    std::vector<std::string> flags;
    std::string mentions;
  };
  // The socket and the job id themselves wrong or missing.
  std::vector<Case> cases = {
      {{}, "--socket"},
      {{socket}, "--job_id"},
      {{socket, "--job_id=a/b"}, "--job_id"},
      {{"--socket=/nonexistent/dir/s.sock", "--job_id=j"}, "--socket"},
      {{socket, "--job_id"}, "--job_id"},
  };
  // After a usable socket and job id: the flags that are wrong.
  const std::vector<Case> after_socket_and_job_id = {
      {{"--bogus=1"}, "--bogus"},
      {{"--threads=many"}, "--threads"},
      {{"--threads=-1"}, "--threads"},
      {{"--prefetch=0"}, "--prefetch"},
      {{"--dataset=lmdb"}, "--dataset"},
      {{"--dataset=imagefolder"}, "--train_dir"},
      {{"--dataset=imagefolder", "--train_dir=/nonexistent/train"}, "--train_dir"},
      {{"--synthetic_samples=0"}, "--synthetic_samples"},
      {{"stray"}, "stray"},
      {{"--bad_files=maybe"}, "--bad_files"},
      {{"--max_bad_fraction=2"}, "--max_bad_fraction"},
      {{"--max_image_pixels=0"}, "--max_image_pixels"},
      {{"--eval_resize_ratio=0.5"}, "--eval_resize_ratio"},
      {{"--gpu_decode_share=1.5"}, "--gpu_decode_share"},
      {{"--gpu_decode_share=half"}, "--gpu_decode_share"},
      {{"--gpu_decode_share="}, "--gpu_decode_share"},
      {{"--dataset=packed"}, "--train_dir"},
      {{"--dataset=packed", "--train_dir=/nonexistent/t.stkpack"}, "--train_dir"},
      {{"--train_dir=/tmp"}, "--train_dir"},
      {{"--shutdown_timeout_s=0"}, "--shutdown_timeout_s"},
      {{"--max_memory=lots"}, "--max_memory=lots"},
      {{"--max_memory=1M"}, "--max_memory=1048576: the data service already uses"},
  };
  for (const Case& wrong : after_socket_and_job_id) {
    Case c{{socket, "--job_id=j"}, wrong.mentions};
    c.flags.insert(c.flags.end(), wrong.flags.begin(), wrong.flags.end());
    cases.push_back(std::move(c));
  }
  for (const Case& c : cases) {
    ServiceProcess service(c.flags);
    const int code = service.Wait(absl::Seconds(20));
    EXPECT_EQ(code, 2) << absl::StrJoin(c.flags, " ") << "\n" << service.Log();
    EXPECT_NE(service.Log().find(c.mentions), std::string::npos)
        << absl::StrJoin(c.flags, " ") << "\n"
        << service.Log();
  }
  EXPECT_TRUE(SegmentsOfJob("j").empty());
}

TEST(DataServiceBinaryTest, ServesAnImageFolderOfJpegs) {
  ASSERT_FALSE(BinaryPath().empty());
  ASSERT_OK_AND_ASSIGN(const TempDir root_temp, TempDir::Create("binary_imagefolder"));
  const std::string root = root_temp.path();
  // "blue" sorts before "red": labels 0 and 1.
  for (int c = 0; c < 2; ++c) {
    const std::string class_dir = root + (c == 0 ? "/blue" : "/red");
    fs::create_directories(class_dir);
    for (int i = 0; i < 3; ++i) {
      std::vector<uint8_t> rgb(40 * 30 * 3, 0);
      for (size_t p = 0; p < rgb.size(); p += 3) rgb[p + (c == 0 ? 2 : 0)] = 240;
      ASSERT_OK(test_util::WriteJpeg(absl::StrCat(class_dir, "/", i, ".jpg"), 40, 30, rgb));
    }
  }
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string dir = dir_temp.path();
  const std::string socket = dir + "/ds.sock";
  const std::string job = absl::StrCat("binfolder", test_util::UniqueId());
  ServiceProcess service({"--socket=" + socket, "--job_id=" + job, "--dataset=imagefolder",
                          "--train_dir=" + root, "--threads=2"});
  RingRequest request;
  request.batch_size = 4;
  request.image_size = 8;
  auto client = RingClient::Connect(socket, request, absl::Seconds(60));
  ASSERT_OK(client) << client.status() << "\n" << service.Log();
  auto info = (*client)->StartEpoch(0, 1);
  ASSERT_OK(info);
  EXPECT_EQ(info->samples, 6);
  EXPECT_EQ(info->batches, 2);
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 2; ++step) {
    auto batch = (*client)->Acquire(absl::Seconds(30));
    ASSERT_OK(batch) << batch.status() << "\n" << service.Log();
    for (int i = 0; i < batch->count; ++i) {
      const int64_t index = batch->sample_indices[i];
      seen.insert(index);
      EXPECT_EQ(batch->labels[i], index < 3 ? 0 : 1);
      const uint8_t* pixel = batch->images + i * 8 * 8 * 3 + (4 * 8 + 4) * 3;
      const int bright = batch->labels[i] == 0 ? 2 : 0;
      EXPECT_GT(pixel[bright], 200) << "sample " << index;
      EXPECT_LT(pixel[2 - bright], 40) << "sample " << index;
    }
    ASSERT_OK((*client)->Release(*batch));
  }
  EXPECT_EQ(seen.size(), 6u);
  client->reset();
  service.Signal(SIGINT);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
  EXPECT_TRUE(SegmentsOfJob(job).empty());
}

// The CRC-32 of PNG chunks (ISO 3309, as zlib's crc32).
uint32_t Crc32(const uint8_t* data, size_t size) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void PutBigEndian(std::vector<uint8_t>& bytes, size_t at, uint32_t value, int width) {
  for (int i = 0; i < width; ++i)
    bytes[at + i] = static_cast<uint8_t>(value >> (8 * (width - 1 - i)));
}

// A small valid image whose header declares `width` x `height`: a few hundred bytes on
// disk that would need width x height x 3 bytes decoded.
std::vector<uint8_t> PngDeclaring(const std::string& path, uint32_t width, uint32_t height) {
  EXPECT_OK(test_util::WritePng(path, 16, 16, std::vector<uint8_t>(16 * 16 * 3, 128)));
  std::vector<uint8_t> bytes = test_util::ReadFileBytes(path);
  PutBigEndian(bytes, 16, width, 4);  // IHDR data starts after the signature, length, type
  PutBigEndian(bytes, 20, height, 4);
  PutBigEndian(bytes, 29, Crc32(&bytes[12], 17), 4);
  return bytes;
}

std::vector<uint8_t> JpegDeclaring(uint16_t width, uint16_t height) {
  std::vector<uint8_t> bytes = test_util::JpegBytes(16, 16, std::vector<uint8_t>(16 * 16 * 3, 128));
  for (size_t i = 2; i + 8 < bytes.size(); ++i) {
    if (bytes[i] == 0xff && bytes[i + 1] == 0xc0) {  // SOF0: length, precision, height, width
      PutBigEndian(bytes, i + 5, height, 2);
      PutBigEndian(bytes, i + 7, width, 2);
      break;
    }
  }
  return bytes;
}

// Peak and anonymous resident memory of process `pid`, from /proc/PID/status, in bytes.
int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, field + ":"))
      return std::atoll(line.c_str() + field.size() + 1) * 1024;
  }
  return -1;
}

TEST(DataServiceBinaryTest, ImagesThatDeclareTenGigabytesAreBadFilesAndDoNotRaiseItsMemory) {
  ASSERT_FALSE(BinaryPath().empty());
  ASSERT_OK_AND_ASSIGN(const TempDir root_temp, TempDir::Create("binary_bombs"));
  const std::string root = root_temp.path();
  for (int c = 0; c < 2; ++c) {
    const std::string class_dir = absl::StrCat(root, "/c", c);
    fs::create_directories(class_dir);
    for (int i = 0; i < 12; ++i) {
      ASSERT_OK(test_util::WriteJpeg(absl::StrCat(class_dir, "/", i, ".jpg"), 64, 48,
                                     test_util::PhotoLikeImage(64, 48, 10 * c + i)));
    }
  }
  // 60000 x 60000 x 3 = 10.8 GB and 65000 x 65000 x 3 = 12.7 GB of pixels.
  ASSERT_OK(test_util::WriteFileBytes(root + "/c0/huge.png",
                                      PngDeclaring(root + "/c0/huge.png", 60000, 60000)));
  ASSERT_OK(test_util::WriteFileBytes(root + "/c1/huge.jpg", JpegDeclaring(65000, 65000)));
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string dir = dir_temp.path();
  const std::string socket = dir + "/ds.sock";
  const std::string job = absl::StrCat("binbombs", test_util::UniqueId());
  ServiceProcess service({"--socket=" + socket, "--job_id=" + job, "--dataset=imagefolder",
                          "--train_dir=" + root, "--threads=2", "--max_bad_fraction=0.5"});
  RingRequest request;
  request.batch_size = 4;
  request.image_size = 32;
  auto client = RingClient::Connect(socket, request, absl::Seconds(60));
  ASSERT_OK(client) << client.status() << "\n" << service.Log();
  const int64_t peak_before = ProcStatusBytes(service.pid(), "VmHWM");
  const int64_t anon_before = ProcStatusBytes(service.pid(), "RssAnon");
  ASSERT_GT(peak_before, 0);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    auto info = (*client)->StartEpoch(epoch, 1);
    ASSERT_OK(info);
    for (int64_t step = 0; step < info->batches; ++step) {
      auto batch = (*client)->Acquire(absl::Seconds(30));
      ASSERT_OK(batch) << batch.status() << "\n" << service.Log();
      ASSERT_OK((*client)->Release(*batch));
    }
  }
  const int64_t peak_after = ProcStatusBytes(service.pid(), "VmHWM");
  const int64_t anon_after = ProcStatusBytes(service.pid(), "RssAnon");
  std::printf("data_service resident memory: peak %.1f -> %.1f MiB, anonymous %.1f -> %.1f MiB\n",
              peak_before / 1048576.0, peak_after / 1048576.0, anon_before / 1048576.0,
              anon_after / 1048576.0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(peak_after - peak_before, 32 << 20) << "the peak resident memory grew";
  EXPECT_LT(anon_after - anon_before, 16 << 20) << "the anonymous resident memory grew";
#endif
  client->reset();
  service.Signal(SIGTERM);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
  const std::string log = service.Log();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_NE(log.find("--max_memory=auto: "), std::string::npos) << log;
#else
  // Sanitizer builds run without the automatic limit (data_service/memory_limit.cc).
  EXPECT_NE(log.find("--max_memory=none"), std::string::npos) << log;
#endif
  for (const char* expected :
       {"/c0/huge.png): PNG image is 60000x60000 = 3600000000 pixels, more than the limit",
        "/c1/huge.jpg): JPEG image is 65000x65000 = 4225000000 pixels, more than the limit",
        "unusable files 2"}) {
    EXPECT_NE(log.find(expected), std::string::npos) << expected << "\n" << log;
  }
  EXPECT_TRUE(SegmentsOfJob(job).empty());
}

TEST(DataServiceBinaryTest, WithTheSandboxTheServiceStillServesAndStopsCleanly) {
  ASSERT_FALSE(BinaryPath().empty());
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string dir = dir_temp.path();
  const std::string socket = dir + "/ds.sock";
  const std::string job = absl::StrCat("binsandbox", test_util::UniqueId());
  ServiceProcess service({"--socket=" + socket, "--job_id=" + job, "--threads=2",
                          "--synthetic_samples=64", "--sandbox"});
  RingRequest request;
  request.batch_size = 8;
  request.image_size = 16;
  auto client = RingClient::Connect(socket, request, absl::Seconds(60));
  ASSERT_OK(client) << client.status() << "\n" << service.Log();
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    auto info = (*client)->StartEpoch(epoch, 3);
    ASSERT_OK(info);
    for (int64_t step = 0; step < info->batches; ++step) {
      auto batch = (*client)->Acquire(absl::Seconds(30));
      ASSERT_OK(batch) << batch.status() << "\n" << service.Log();
      ASSERT_OK((*client)->Release(*batch));
    }
  }
  client->reset();
  service.Signal(SIGTERM);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
  EXPECT_NE(service.Log().find("sandbox on: seccomp allowlist of "), std::string::npos)
      << service.Log();
  EXPECT_TRUE(SegmentsOfJob(job).empty());
  struct stat st;
  EXPECT_NE(lstat(socket.c_str(), &st), 0) << "the socket was left";
}

TEST(DataServiceBinaryTest, ATracedServiceKeepsItsSandboxAndWritesItsTrace) {
  ASSERT_FALSE(BinaryPath().empty());
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string socket = dir_temp.path() + "/ds.sock";
  // Outside /dev/shm, where the sandbox lets the service make no file once it is on.
  ASSERT_OK_AND_ASSIGN(const TempDir trace_temp, TempDir::Create("traced_sandbox"));
  const std::string trace_dir = trace_temp.path() + "/trace";
  const std::string trace_file = trace_dir + "/data_service.node0.json";
  const std::string job = absl::StrCat("bintracesbx", test_util::UniqueId());
  ServiceProcess service({"--socket=" + socket, "--job_id=" + job, "--threads=2",
                          "--synthetic_samples=64", "--sandbox", "--trace=" + trace_dir,
                          "--trace_steps=0:4"});
  RingRequest request;
  request.batch_size = 8;
  request.image_size = 16;
  auto client = RingClient::Connect(socket, request, absl::Seconds(60));
  ASSERT_OK(client) << client.status() << "\n" << service.Log();
  // The file is there before the window ends: opened before the sandbox went on.
  struct stat st;
  EXPECT_EQ(lstat(trace_file.c_str(), &st), 0) << trace_file << " not opened at the start";
  auto info = (*client)->StartEpoch(0, 3);
  ASSERT_OK(info);
  for (int64_t step = 0; step < info->batches; ++step) {
    auto batch = (*client)->Acquire(absl::Seconds(30));
    ASSERT_OK(batch) << batch.status() << "\n" << service.Log();
    ASSERT_OK((*client)->Release(*batch));
  }
  client->reset();
  service.Signal(SIGTERM);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
  const std::string log = service.Log();
  EXPECT_NE(log.find("sandbox on: seccomp allowlist of "), std::string::npos) << log;
  EXPECT_EQ(log.find("the trace: "), std::string::npos) << "the trace was not written: " << log;
  ASSERT_OK_AND_ASSIGN(const std::string text, ReadWholeFile(trace_file));
  EXPECT_NE(text.find("\"kind\":\"data_service\""), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("\"name\":\"sample\""), std::string::npos) << text.substr(0, 400);
  EXPECT_NE(text.find("\"name\":\"slot filled: step 3\""), std::string::npos)
      << text.substr(0, 400);
  // Nothing but the trace in its directory: no temporary file of a rename.
  EXPECT_EQ(ListEntries(trace_dir), std::vector<std::string>{"data_service.node0.json"});
  EXPECT_TRUE(SegmentsOfJob(job).empty());
}

TEST(DataServiceBinaryTest, TheSandboxIsOnByDefaultAndNosandboxTurnsItOff) {
  ASSERT_FALSE(BinaryPath().empty());
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  for (const bool off : {false, true}) {
    const std::string job = absl::StrCat("binsbxdefault", off, test_util::UniqueId());
    std::vector<std::string> flags = {"--socket=" + dir_temp.path() + "/ds.sock", "--job_id=" + job,
                                      "--threads=1", "--synthetic_samples=8"};
    if (off) flags.push_back("--nosandbox");
    ServiceProcess service(flags);
    RingRequest request;
    request.batch_size = 4;
    request.image_size = 16;
    auto client = RingClient::Connect(dir_temp.path() + "/ds.sock", request, absl::Seconds(60));
    ASSERT_OK(client) << client.status() << "\n" << service.Log();
    client->reset();
    service.Signal(SIGTERM);
    EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
    const std::string expected =
        off ? "sandbox off (--nosandbox)" : "sandbox on: seccomp allowlist";
    EXPECT_NE(service.Log().find(expected), std::string::npos) << service.Log();
  }
}

// Whether `path` exists within `timeout`.
bool AppearsWithin(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  struct stat st;
  while (lstat(path.c_str(), &st) != 0) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

TEST(DataServiceBinaryTest, RemoveSocketDirRemovesTheDirectoryOnlyOnceItIsEmpty) {
  ASSERT_FALSE(BinaryPath().empty());
  // Two nodes of one job on one machine: their sockets share the job's directory.
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string dir = dir_temp.path();
  const std::string job = absl::StrCat("binsockdir", test_util::UniqueId());
  std::vector<std::unique_ptr<ServiceProcess>> services;
  for (int node = 0; node < 2; ++node) {
    services.push_back(std::make_unique<ServiceProcess>(
        std::vector<std::string>{absl::StrCat("--socket=", dir, "/node", node, ".sock"),
                                 "--job_id=" + job, absl::StrCat("--node_id=", node), "--threads=1",
                                 "--synthetic_samples=16", "--remove_socket_dir=true"}));
    ASSERT_TRUE(AppearsWithin(absl::StrCat(dir, "/node", node, ".sock"), absl::Seconds(60)))
        << services.back()->Log();
  }
  struct stat st;
  services[0]->Signal(SIGTERM);
  EXPECT_EQ(services[0]->Wait(absl::Seconds(20)), 0) << services[0]->Log();
  EXPECT_NE(lstat(absl::StrCat(dir, "/node0.sock").c_str(), &st), 0);
  EXPECT_EQ(lstat(dir.c_str(), &st), 0) << "node 1's socket is still in " << dir;
  services[1]->Signal(SIGTERM);
  EXPECT_EQ(services[1]->Wait(absl::Seconds(20)), 0) << services[1]->Log();
  EXPECT_NE(lstat(dir.c_str(), &st), 0) << dir << " was left";
}

TEST(DataServiceBinaryTest, HelpListsEveryFlag) {
  ServiceProcess service({"--help"});
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0);
  for (const char* flag :
       {"--dataset", "packed", "--bad_files", "--max_bad_fraction", "--max_image_pixels",
        "--eval_resize_ratio", "--threads", "--prefetch", "--max_memory", "--shutdown_timeout_s",
        "--sandbox", "--require_sandbox", "--gpu_decode_share", "--remove_socket_dir"}) {
    EXPECT_NE(service.Log().find(flag), std::string::npos) << flag << "\n" << service.Log();
  }
}

// One epoch of a training and a validation ring of 3 ranks' rank 1, as (indices, bytes).
struct Delivered {
  std::vector<int64_t> indices;
  std::vector<int32_t> labels;
  std::vector<uint8_t> images;
};

Delivered ServeOneEpoch(const std::vector<std::string>& dataset_flags, int threads, bool train) {
  Delivered delivered;
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  absl::StatusOr<TempDir> dir_temp = TempDir::CreateShort("stoker-bintest");
  EXPECT_OK(dir_temp);
  if (!dir_temp.ok()) return delivered;
  const std::string dir = dir_temp->path();
  const std::string socket = dir + "/ds.sock";
  const std::string job = absl::StrCat("binpacked", test_util::UniqueId());
  std::vector<std::string> flags = {"--socket=" + socket, "--job_id=" + job,
                                    absl::StrCat("--threads=", threads), "--max_bad_fraction=0.5"};
  flags.insert(flags.end(), dataset_flags.begin(), dataset_flags.end());
  ServiceProcess service(flags);
  RingRequest request;
  request.rank = 1;
  request.world_size = 3;
  request.batch_size = 4;
  request.image_size = 32;
  request.train = train;
  auto client = RingClient::Connect(socket, request, absl::Seconds(60));
  EXPECT_OK(client) << client.status() << "\n" << service.Log();
  if (!client.ok()) return delivered;
  auto info = (*client)->StartEpoch(0, 77);
  EXPECT_OK(info);
  for (int64_t step = 0; info.ok() && step < info->batches; ++step) {
    auto batch = (*client)->Acquire(absl::Seconds(30));
    EXPECT_OK(batch) << batch.status() << "\n" << service.Log();
    if (!batch.ok()) break;
    delivered.indices.insert(delivered.indices.end(), batch->sample_indices,
                             batch->sample_indices + batch->count);
    delivered.labels.insert(delivered.labels.end(), batch->labels, batch->labels + batch->count);
    delivered.images.insert(delivered.images.end(), batch->images,
                            batch->images + size_t{32} * 32 * 3 * batch->count);
    EXPECT_OK((*client)->Release(*batch));
  }
  client->reset();
  service.Signal(SIGTERM);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 0) << service.Log();
  if (!train) {  // rank 1 of 3 validates indices 1, 4, 7, 10, ...: the bad 10 is replaced
    EXPECT_NE(service.Log().find("unusable sample 10 ("), std::string::npos) << service.Log();
    EXPECT_EQ(delivered.indices, (std::vector<int64_t>{1, 4, 7, 13, 13, 16}));
  }
  return delivered;
}

TEST(DataServiceBinaryTest, APackedDatasetServesTheSameBatchesAsItsFolder) {
  ASSERT_FALSE(BinaryPath().empty());
  ASSERT_OK_AND_ASSIGN(const TempDir root_temp, TempDir::Create("binary_packed_source"));
  const std::string root = root_temp.path();
  for (int c = 0; c < 3; ++c) {
    fs::create_directories(absl::StrCat(root, "/c", c));
    for (int i = 0; i < 6; ++i) {
      ASSERT_OK(test_util::WriteJpeg(absl::StrCat(root, "/c", c, "/", i, ".jpg"), 70, 50,
                                     test_util::PhotoLikeImage(70, 50, c * 100 + i), 90));
    }
  }
  ASSERT_OK(test_util::WriteFileBytes(root + "/c1/4.jpg", {0xff, 0xd8, 0xff, 'x'}));
  ASSERT_OK_AND_ASSIGN(const TempDir out_temp, TempDir::Create("binary_packed"));
  const std::string out = out_temp.path();
  PackOptions options;
  options.shard_bytes = 10000;
  auto stats = PackImageFolder(root, out + "/train.stkpack", options);
  ASSERT_OK(stats);
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "validation");
    const Delivered folder = ServeOneEpoch(
        {"--dataset=imagefolder", "--train_dir=" + root, "--val_dir=" + root}, 1, train);
    const Delivered packed =
        ServeOneEpoch({"--dataset=packed", "--train_dir=" + out + "/train.stkpack",
                       "--val_dir=" + out + "/train.stkpack"},
                      2, train);
    EXPECT_EQ(folder.indices.size(), 6u);  // 18 samples over 3 ranks
    EXPECT_EQ(folder.indices, packed.indices);
    EXPECT_EQ(folder.labels, packed.labels);
    EXPECT_TRUE(folder.images == packed.images) << "packed and folder images differ";
  }
}

TEST(DataServiceBinaryTest, AKilledServiceIsReportedAsUnavailableByAcquire) {
  ASSERT_FALSE(BinaryPath().empty());
  // A short private directory for the socket (TEST_TMPDIR is too long for sun_path).
  ASSERT_OK_AND_ASSIGN(const TempDir dir_temp, TempDir::CreateShort("stoker-bintest"));
  const std::string dir = dir_temp.path();
  const std::string socket = dir + "/ds.sock";
  const std::string job = absl::StrCat("binkill", test_util::UniqueId());
  ServiceProcess service({"--socket=" + socket, "--job_id=" + job, "--threads=1"});
  RingRequest request;
  request.batch_size = 4;
  request.image_size = 8;
  request.slot_count = 2;
  auto client = RingClient::Connect(socket, request, absl::Seconds(60));
  ASSERT_OK(client) << client.status() << "\n" << service.Log();
  ASSERT_OK((*client)->StartEpoch(0, 1));
  // Let the service fill the ring, then kill it without a chance to clean up.
  absl::SleepFor(absl::Milliseconds(300));
  service.Signal(SIGKILL);
  EXPECT_EQ(service.Wait(absl::Seconds(20)), 128 + SIGKILL);
  // What was published is still delivered; then the death shows, well within the timeout.
  int delivered = 0;
  absl::Status status;
  const absl::Time start = absl::Now();
  while (status.ok()) {
    auto batch = (*client)->Acquire(absl::Seconds(30));
    status = batch.status();
    if (batch.ok()) {
      ++delivered;
      EXPECT_OK((*client)->Release(*batch));
    }
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_LE(delivered, 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  client->reset();
  // A killed service leaves its segment (the launcher removes stoker.<job_id>.*) and its
  // socket file; remove them as the launcher would.
  for (const std::string& name : SegmentsOfJob(job)) shm_unlink(("/" + name).c_str());
  unlink(socket.c_str());
}

}  // namespace
}  // namespace stoker::data_service
