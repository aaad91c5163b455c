// Tests of ImageFolderDataset: torchvision's class and file ordering (checked against
// torchvision itself when it is installed), extension filtering, clear errors, loading
// through DecodeAndTransform (training and evaluation transforms, JPEG and PNG), and
// every kind of unusable file giving a bad-sample error rather than a crash or a hang.
#include "data_service/image_folder_dataset.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "data_service/encoded_image.h"
#include "data_service/image/transforms.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

namespace fs = std::filesystem;

void Touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << "x";
}

std::string FreshDirectory(const std::string& name) {
  const std::string dir = test_util::TestDirectory(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A tree with nested folders, mixed-case extensions, non-images and an empty-looking
// folder name that sorts oddly.
std::string MakeTree() {
  const std::string root = FreshDirectory("tree");
  for (const char* file :
       {"dog/b.jpg", "dog/a.JPEG", "dog/z/deep.png", "dog/y.txt", "dog/A.jpg", "dog/sub/x.webp",
        "dog/sub dir/w.bmp", "cat/1.jpg", "cat/10.jpg", "cat/2.jpg", "Zebra/img.TIFF",
        "Zebra/readme", "cat.dog/p.pgm", "cat.dog/q.ppm", "cat.dog/r.tif"}) {
    Touch(root + "/" + file);
  }
  Touch(root + "/stray.jpg");  // files at the top are not samples
  return root;
}

TEST(ImageFolderDatasetTest, ListsClassesAndFilesInTorchvisionOrder) {
  const std::string root = MakeTree();
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->classes(), (std::vector<std::string>{"Zebra", "cat", "cat.dog", "dog"}));
  // Directories sort as whole path strings, as sorted(os.walk()) does: "dog/sub" before
  // "dog/sub dir".
  std::vector<std::string> listed;
  for (const ImageFolderSample& s : (*dataset)->samples()) {
    listed.push_back(absl::StrCat(s.label, ":", absl::StripPrefix(s.path, root + "/")));
  }
  EXPECT_EQ(listed, (std::vector<std::string>{
                        "0:Zebra/img.TIFF", "1:cat/1.jpg", "1:cat/10.jpg", "1:cat/2.jpg",
                        "2:cat.dog/p.pgm", "2:cat.dog/q.ppm", "2:cat.dog/r.tif", "3:dog/A.jpg",
                        "3:dog/a.JPEG", "3:dog/b.jpg", "3:dog/sub/x.webp", "3:dog/sub dir/w.bmp",
                        "3:dog/z/deep.png"}));
  EXPECT_EQ((*dataset)->size(), 13);
  EXPECT_EQ((*dataset)->num_classes(), 4);
  EXPECT_EQ((*dataset)->Label(3), 1);
  EXPECT_NE((*dataset)->Describe(3).find("cat/2.jpg"), std::string::npos);
}

TEST(ImageFolderDatasetTest, MatchesTorchvisionImageFolder) {
  const std::string root = MakeTree();
  auto probe = test_util::RunPython("import torchvision");
  if (!probe.ok()) GTEST_SKIP() << "needs torchvision: " << probe.status().message();
  auto output = test_util::RunPython(absl::StrCat(
      "import torchvision\n"
      "d = torchvision.datasets.ImageFolder('",
      root,
      "', loader=lambda p: p)\n"
      "print('CLASSES', '|'.join(d.classes))\n"
      "for p, c in d.samples: print('SAMPLE', c, p)\n"));
  ASSERT_TRUE(output.ok()) << output.status().message();
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<std::string> expected, actual;
  for (absl::string_view line : absl::StrSplit(*output, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "CLASSES ")) {
      EXPECT_EQ(std::string(line), absl::StrJoin((*dataset)->classes(), "|"));
    } else if (absl::ConsumePrefix(&line, "SAMPLE ")) {
      expected.emplace_back(line);
    }
  }
  for (const ImageFolderSample& s : (*dataset)->samples()) {
    actual.push_back(absl::StrCat(s.label, " ", s.path));
  }
  EXPECT_EQ(actual, expected) << *output;
}

TEST(ImageFolderDatasetTest, RecognisesTorchvisionImageExtensions) {
  for (const char* name : {"a.jpg", "a.JPG", "a.jpeg", "a.png", "a.ppm", "a.bmp", "a.pgm",
                           "a.tif", "a.TIFF", "a.webp", "x.y.Jpeg"}) {
    EXPECT_TRUE(HasImageExtension(name)) << name;
  }
  for (const char* name : {"a.gif", "a.txt", "jpg", "a.jpg.bak", "a.jp", ""}) {
    EXPECT_FALSE(HasImageExtension(name)) << name;
  }
}

TEST(ImageFolderDatasetTest, ErrorsSayWhatIsWrong) {
  const std::string base = FreshDirectory("errors");
  auto missing = ImageFolderDataset::Open(base + "/nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  Touch(base + "/file");
  EXPECT_EQ(ImageFolderDataset::Open(base + "/file").status().code(),
            absl::StatusCode::kInvalidArgument);

  fs::create_directories(base + "/no_classes");
  Touch(base + "/no_classes/a.jpg");
  auto no_classes = ImageFolderDataset::Open(base + "/no_classes");
  EXPECT_EQ(no_classes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_classes.status().message().find("no class"), std::string::npos);

  Touch(base + "/empty_class/good/a.jpg");
  Touch(base + "/empty_class/bad/notes.txt");
  auto empty_class = ImageFolderDataset::Open(base + "/empty_class");
  EXPECT_EQ(empty_class.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty_class.status().message().find("bad"), std::string::npos);
}

// Left quarter red, middle half green, right quarter blue.
std::vector<uint8_t> Bands(int width, int height) {
  std::vector<uint8_t> image(width * height * 3, 0);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const int channel = x < width / 4 ? 0 : x < width * 3 / 4 ? 1 : 2;
      image[(y * width + x) * 3 + channel] = 255;
    }
  }
  return image;
}

TEST(ImageFolderDatasetTest, EvaluationTakesTheCentreOfAJpeg) {
  const std::string root = FreshDirectory("bands");
  fs::create_directories(root + "/a");
  ASSERT_TRUE(test_util::WriteJpeg(root + "/a/bands.jpg", 96, 32, Bands(96, 32)).ok());
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<uint8_t> dst(8 * 8 * 3);
  SampleScratch scratch;
  ASSERT_TRUE((*dataset)->Load(0, {8, false, 0, 0}, scratch, dst.data()).ok());
  for (int i = 0; i < 64; ++i) {
    EXPECT_LT(dst[i * 3], 40) << i;
    EXPECT_GT(dst[i * 3 + 1], 215) << i;
    EXPECT_LT(dst[i * 3 + 2], 40) << i;
  }
}

TEST(ImageFolderDatasetTest, LoadIsDecodeAndTransformOfTheFile) {
  const std::string root = FreshDirectory("transforms");
  fs::create_directories(root + "/a");
  ASSERT_TRUE(test_util::WriteJpeg(root + "/a/0.jpg", 90, 70, test_util::PhotoLikeImage(90, 70, 1)).ok());
  ASSERT_TRUE(test_util::WritePng(root + "/a/1.png", 50, 80, test_util::PhotoLikeImage(50, 80, 2)).ok());
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  SampleScratch scratch;
  image::TransformScratch reference_scratch;
  for (int64_t index : {0, 1}) {
    const std::vector<uint8_t> bytes = test_util::ReadFileBytes((*dataset)->samples()[index].path);
    for (int64_t epoch : {0, 1}) {
      // Training: RandomResizedCrop(24) + flip, drawn from (seed, epoch, index).
      std::vector<uint8_t> got(24 * 24 * 3), want(24 * 24 * 3);
      ASSERT_TRUE((*dataset)->Load(index, {24, true, 7, epoch}, scratch, got.data()).ok());
      ASSERT_TRUE(image::DecodeAndTransform(bytes, image::TransformSpec::Train(24),
                                            image::SampleKey{7, epoch, index}, reference_scratch,
                                            want.data())
                      .ok());
      EXPECT_EQ(got, want) << "index " << index << " epoch " << epoch;
    }
    // Evaluation: Resize(round(24 * 256 / 224) = 27) + CenterCrop(24), or a given resize.
    std::vector<uint8_t> got(24 * 24 * 3), want(24 * 24 * 3);
    ASSERT_TRUE((*dataset)->Load(index, {24, false, 7, 0}, scratch, got.data()).ok());
    ASSERT_TRUE(image::DecodeAndTransform(bytes, image::TransformSpec::Eval(27, 24),
                                          image::SampleKey{}, reference_scratch, want.data())
                    .ok());
    EXPECT_EQ(got, want) << "index " << index;
    SampleOptions wide{24, false, 7, 0};
    wide.eval_resize = 40;
    ASSERT_TRUE((*dataset)->Load(index, wide, scratch, got.data()).ok());
    ASSERT_TRUE(image::DecodeAndTransform(bytes, image::TransformSpec::Eval(40, 24),
                                          image::SampleKey{}, reference_scratch, want.data())
                    .ok());
    EXPECT_EQ(got, want) << "index " << index;
  }
  // Different epochs draw different crops.
  std::vector<uint8_t> e0(24 * 24 * 3), e1(24 * 24 * 3);
  ASSERT_TRUE((*dataset)->Load(0, {24, true, 7, 0}, scratch, e0.data()).ok());
  ASSERT_TRUE((*dataset)->Load(0, {24, true, 7, 1}, scratch, e1.data()).ok());
  EXPECT_NE(e0, e1);
  EXPECT_EQ((*dataset)->Load(2, {24, true, 0, 0}, scratch, e0.data()).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(ImageFolderDatasetTest, ScratchBuffersAreReusedAcrossSamples) {
  const std::string root = FreshDirectory("reuse");
  fs::create_directories(root + "/a");
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(test_util::WriteJpeg(absl::StrCat(root, "/a/", i, ".jpg"), 60, 40,
                                     test_util::PhotoLikeImage(60, 40, i))
                    .ok());
  }
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  SampleScratch scratch;
  std::vector<uint8_t> dst(16 * 16 * 3);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*dataset)->Load(i, {16, true, 1, 0}, scratch, dst.data()).ok());
  const uint8_t* buffer = scratch.file_bytes.data();
  const size_t capacity = scratch.capacity_bytes();
  EXPECT_GT(capacity, 0u);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE((*dataset)->Load(i, {16, true, 1, round}, scratch, dst.data()).ok());
    }
  }
  EXPECT_EQ(scratch.file_bytes.data(), buffer) << "the file buffer was reallocated";
  EXPECT_EQ(scratch.capacity_bytes(), capacity) << "steady state grew a buffer";
}

// Every kind of unusable file: a bad-sample error whose message says what is wrong.
TEST(ImageFolderDatasetTest, UnusableFilesAreBadSamplesWithClearErrors) {
  const std::string root = FreshDirectory("bad_files");
  const std::string dir = root + "/a";
  auto names = test_util::WriteBadImageFiles(dir);
  ASSERT_TRUE(names.ok()) << names.status();
  ASSERT_TRUE(test_util::WriteJpeg(dir + "/good.jpg", 40, 30, test_util::PhotoLikeImage(40, 30, 5)).ok());
  ASSERT_EQ(mkfifo((dir + "/fifo.jpg").c_str(), 0600), 0);
  ASSERT_EQ(symlink((dir + "/nowhere.jpg").c_str(), (dir + "/dangling.jpg").c_str()), 0);
  ASSERT_TRUE(test_util::WriteJpeg(dir + "/deleted.jpg", 40, 30, test_util::PhotoLikeImage(40, 30, 6)).ok());
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  fs::remove(dir + "/deleted.jpg");  // gone after the listing

  const std::map<std::string, std::string> expected = {
      {"corrupt.jpg", "invalid JPEG header"},
      {"truncated.jpg", "JPEG"},
      {"empty.jpg", "empty file"},
      {"text.jpg", "not a JPEG or PNG"},
      {"bomb.jpg", "decompression bomb"},
      {"fifo.jpg", "not a regular file"},
      {"dangling.jpg", "No such file"},
      {"deleted.jpg", "No such file"},
  };
  SampleScratch scratch;
  std::vector<uint8_t> dst(16 * 16 * 3);
  int checked = 0;
  for (int64_t i = 0; i < (*dataset)->size(); ++i) {
    const std::string name = fs::path((*dataset)->samples()[i].path).filename().string();
    for (bool train : {true, false}) {
      const absl::Time start = absl::Now();
      absl::Status status = (*dataset)->Load(i, {16, train, 3, 0}, scratch, dst.data());
      EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << name << " took long (a hang?)";
      if (name == "good.jpg") {
        EXPECT_TRUE(status.ok()) << status;
        continue;
      }
      ASSERT_TRUE(expected.count(name)) << name;
      EXPECT_FALSE(status.ok()) << name;
      EXPECT_TRUE(IsBadSampleError(status)) << name << ": " << status;
      EXPECT_NE(status.message().find(expected.at(name)), std::string::npos) << name << ": " << status;
      EXPECT_NE((*dataset)->Describe(i).find(name), std::string::npos);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * static_cast<int>(expected.size()));
  // The same bomb decodes under a larger limit... and a small image is a bomb under a
  // tiny one.
  SampleOptions tiny{16, false, 0, 0};
  tiny.max_pixels = 100;
  int64_t good = -1;
  for (int64_t i = 0; i < (*dataset)->size(); ++i) {
    if (absl::EndsWith((*dataset)->samples()[i].path, "/good.jpg")) good = i;
  }
  ASSERT_GE(good, 0);
  absl::Status small_bomb = (*dataset)->Load(good, tiny, scratch, dst.data());
  EXPECT_TRUE(IsBadSampleError(small_bomb)) << small_bomb;
  EXPECT_NE(small_bomb.message().find("decompression bomb"), std::string::npos) << small_bomb;
}

TEST(ImageFolderDatasetTest, AnUnreadableFileIsABadSample) {
  const std::string root = FreshDirectory("unreadable");
  const std::string path = root + "/a/secret.jpg";
  fs::create_directories(root + "/a");
  ASSERT_TRUE(test_util::WriteJpeg(path, 40, 30, test_util::PhotoLikeImage(40, 30, 7)).ok());
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  auto load = [&]() {
    SampleScratch scratch;
    std::vector<uint8_t> dst(8 * 8 * 3);
    return (*dataset)->Load(0, {8, true, 0, 0}, scratch, dst.data());
  };
  if (access(path.c_str(), R_OK) != 0) {
    absl::Status status = load();
    chmod(path.c_str(), 0600);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_TRUE(IsBadSampleError(status)) << status;
    return;
  }
  // Root reads any file: load as "nobody" in a child process instead.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    const absl::Status status = load();
    _exit(status.code() == absl::StatusCode::kPermissionDenied && IsBadSampleError(status) ? 0
                                                                                           : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  chmod(path.c_str(), 0600);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 77) GTEST_SKIP() << "cannot switch to another user id here";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0) << "an unreadable file must be PermissionDenied, marked bad";
}

}  // namespace
}  // namespace stoker::data_service
