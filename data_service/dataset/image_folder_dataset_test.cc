// Tests of ImageFolderDataset: torchvision's class and file ordering (checked against
// torchvision itself when it is installed), extension filtering, clear errors, loading
// through DecodeAndTransform (training and evaluation transforms, JPEG and PNG), and
// every kind of unusable file giving a bad-sample error rather than a crash or a hang;
// bad folder shapes (symlink loops, names that are not UTF-8, empty classes, an empty
// dataset, files where class folders should be) and a dataset that vanishes mid-run.
#include "data_service/dataset/image_folder_dataset.h"

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
#include "common/testing/python_runner.h"
#include "common/testing/status_matchers.h"
#include "data_service/dataset/encoded_image.h"
#include "data_service/image/transforms.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

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
  ASSERT_OK(dataset);
  EXPECT_EQ((*dataset)->classes(), (std::vector<std::string>{"Zebra", "cat", "cat.dog", "dog"}));
  // Directories sort as whole path strings, as sorted(os.walk()) does: "dog/sub" before
  // "dog/sub dir".
  std::vector<std::string> listed;
  for (const ImageFolderSample& s : (*dataset)->samples()) {
    listed.push_back(absl::StrCat(s.label, ":", absl::StripPrefix(s.path, root + "/")));
  }
  EXPECT_EQ(listed,
            (std::vector<std::string>{
                "0:Zebra/img.TIFF", "1:cat/1.jpg", "1:cat/10.jpg", "1:cat/2.jpg", "2:cat.dog/p.pgm",
                "2:cat.dog/q.ppm", "2:cat.dog/r.tif", "3:dog/A.jpg", "3:dog/a.JPEG", "3:dog/b.jpg",
                "3:dog/sub/x.webp", "3:dog/sub dir/w.bmp", "3:dog/z/deep.png"}));
  EXPECT_EQ((*dataset)->size(), 13);
  EXPECT_EQ((*dataset)->num_classes(), 4);
  EXPECT_EQ((*dataset)->Label(3), 1);
  EXPECT_NE((*dataset)->Describe(3).find("cat/2.jpg"), std::string::npos);
}

TEST(ImageFolderDatasetTest, MatchesTorchvisionImageFolder) {
  const std::string root = MakeTree();
  auto probe = testing::RunPython("import torchvision");
  if (!probe.ok()) GTEST_SKIP() << "needs torchvision: " << probe.status().message();
  auto output =
      testing::RunPython(absl::StrCat("import torchvision\n"
                                      "d = torchvision.datasets.ImageFolder('",
                                      root,
                                      "', loader=lambda p: p)\n"
                                      "print('CLASSES', '|'.join(d.classes))\n"
                                      "for p, c in d.samples: print('SAMPLE', c, p)\n"));
  ASSERT_OK(output) << output.status().message();
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_OK(dataset);
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
  for (const char* name : {"a.jpg", "a.JPG", "a.jpeg", "a.png", "a.ppm", "a.bmp", "a.pgm", "a.tif",
                           "a.TIFF", "a.webp", "x.y.Jpeg"}) {
    EXPECT_TRUE(HasImageExtension(name)) << name;
  }
  for (const char* name : {"a.gif", "a.txt", "jpg", "a.jpg.bak", "a.jp", ""}) {
    EXPECT_FALSE(HasImageExtension(name)) << name;
  }
}

TEST(ImageFolderDatasetTest, ErrorsSayWhatIsWrong) {
  const std::string base = FreshDirectory("errors");
  auto missing = ImageFolderDataset::Open(base + "/nope");
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));

  Touch(base + "/file");
  EXPECT_THAT(ImageFolderDataset::Open(base + "/file"),
              StatusIs(absl::StatusCode::kInvalidArgument));

  fs::create_directories(base + "/no_classes");
  Touch(base + "/no_classes/a.jpg");
  auto no_classes = ImageFolderDataset::Open(base + "/no_classes");
  EXPECT_THAT(no_classes, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no class")));

  Touch(base + "/empty_class/good/a.jpg");
  Touch(base + "/empty_class/bad/notes.txt");
  auto empty_class = ImageFolderDataset::Open(base + "/empty_class");
  EXPECT_THAT(empty_class, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad")));
}

TEST(ImageFolderDatasetTest, AnEmptyFolderIsRefusedAsEmpty) {
  const std::string root = FreshDirectory("empty_dataset");
  auto empty = ImageFolderDataset::Open(root);
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument,
                              AllOf(HasSubstr(root + " has no class sub-folders"),
                                    HasSubstr("it is empty"))));
}

TEST(ImageFolderDatasetTest, EmptyClassFoldersAreAllNamed) {
  const std::string root = FreshDirectory("empty_classes");
  Touch(root + "/good/a.jpg");
  fs::create_directories(root + "/empty1");
  fs::create_directories(root + "/empty2/sub");
  auto opened = ImageFolderDataset::Open(root);
  EXPECT_THAT(opened, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("no image file for the classes empty1, empty2")));
}

TEST(ImageFolderDatasetTest, FilesWhereClassFoldersShouldBeAreIgnoredByNameOrRefusedIfAlone) {
  const std::string root = FreshDirectory("class_is_file");
  Touch(root + "/good/a.jpg");
  Touch(root + "/cat");  // a file named like a class
  ASSERT_EQ(symlink((root + "/nowhere").c_str(), (root + "/ghost").c_str()), 0);
  auto opened = ImageFolderDataset::Open(root);
  ASSERT_OK(opened);
  EXPECT_EQ((*opened)->classes(), std::vector<std::string>{"good"});
  EXPECT_EQ((*opened)->ignored_entries(), (std::vector<std::string>{"cat", "ghost"}));

  const std::string only_files = FreshDirectory("only_files");
  Touch(only_files + "/cat");
  Touch(only_files + "/dog.jpg");
  auto refused = ImageFolderDataset::Open(only_files);
  EXPECT_THAT(
      refused,
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("it holds only 2 file(s), which are not classes: \"cat\", \"dog.jpg\"")));
}

TEST(ImageFolderDatasetTest, ASymlinkLoopIsRefusedNamingTheLink) {
  const std::string root = FreshDirectory("symlink_loop");
  Touch(root + "/cat/a.jpg");
  fs::create_directories(root + "/cat/sub");
  ASSERT_EQ(symlink("..", (root + "/cat/sub/loop").c_str()), 0);
  const absl::Time start = absl::Now();
  auto opened = ImageFolderDataset::Open(root);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(opened, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("symlink loop in the image folder: " + root +
                                         "/cat/sub/loop -> .. leads back to " + root + "/cat")));

  // A link to the class folder itself, and a loop through the root.
  const std::string self = FreshDirectory("symlink_self");
  Touch(self + "/cat/a.jpg");
  ASSERT_EQ(symlink(".", (self + "/cat/me").c_str()), 0);
  EXPECT_TRUE(
      absl::StrContains(ImageFolderDataset::Open(self).status().message(), self + "/cat/me"));
  const std::string via_root = FreshDirectory("symlink_root");
  Touch(via_root + "/cat/a.jpg");
  ASSERT_EQ(symlink(via_root.c_str(), (via_root + "/cat/up").c_str()), 0);
  EXPECT_TRUE(absl::StrContains(ImageFolderDataset::Open(via_root).status().message(),
                                "symlink loop in the image folder: " + via_root + "/cat/up -> " +
                                    via_root + " leads back to " + via_root +
                                    ", which contains it"));
}

TEST(ImageFolderDatasetTest, SymlinksElsewhereAreFollowedAndLoopingFilesAreBadSamples) {
  const std::string outside = FreshDirectory("symlink_target");
  ASSERT_OK(
      test_util::WriteJpeg(outside + "/far.jpg", 20, 20, test_util::PhotoLikeImage(20, 20, 1)));
  const std::string root = FreshDirectory("symlink_ok");
  fs::create_directories(root + "/cat");
  ASSERT_OK(
      test_util::WriteJpeg(root + "/cat/a.jpg", 20, 20, test_util::PhotoLikeImage(20, 20, 2)));
  ASSERT_EQ(symlink(outside.c_str(), (root + "/cat/linked").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), (root + "/dog").c_str()), 0);      // a class folder by link
  ASSERT_EQ(symlink("self.jpg", (root + "/cat/self.jpg").c_str()), 0);  // ELOOP when opened
  auto opened = ImageFolderDataset::Open(root);
  ASSERT_OK(opened);
  std::vector<std::string> paths;
  for (const ImageFolderSample& sample : (*opened)->samples()) paths.push_back(sample.path);
  // Sorted by (directory, name), as torchvision's sorted(os.walk(...)).
  EXPECT_EQ(paths, (std::vector<std::string>{root + "/cat/a.jpg", root + "/cat/self.jpg",
                                             root + "/cat/linked/far.jpg", root + "/dog/far.jpg"}));
  SampleScratch scratch;
  std::vector<uint8_t> dst(8 * 8 * 3);
  EXPECT_OK((*opened)->Load(2, {8, false, 0, 0}, scratch, dst.data()));
  const absl::Status looping = (*opened)->Load(1, {8, false, 0, 0}, scratch, dst.data());
  EXPECT_TRUE(IsBadSampleError(looping)) << looping;
  EXPECT_TRUE(absl::StrContains(looping.message(), "Too many levels of symbolic links")) << looping;
}

TEST(ImageFolderDatasetTest, NamesThatAreNotUtf8AreListedAndLoaded) {
  const std::string root = FreshDirectory("not_utf8");
  const std::string latin1_class = root + "/caf\xe9";  // "café" in Latin-1
  fs::create_directories(latin1_class);
  ASSERT_OK(test_util::WriteJpeg(latin1_class + "/\xff\xfe.jpg", 20, 20,
                                 test_util::PhotoLikeImage(20, 20, 3)));
  fs::create_directories(root + "/plain");
  ASSERT_OK(
      test_util::WriteJpeg(root + "/plain/b.jpg", 20, 20, test_util::PhotoLikeImage(20, 20, 4)));
  auto opened = ImageFolderDataset::Open(root);
  ASSERT_OK(opened);
  // Sorted by bytes: "caf\xe9" < "plain".
  EXPECT_EQ((*opened)->classes(), (std::vector<std::string>{"caf\xe9", "plain"}));
  ASSERT_EQ((*opened)->size(), 2);
  EXPECT_EQ((*opened)->samples()[0].path, latin1_class + "/\xff\xfe.jpg");
  SampleScratch scratch;
  std::vector<uint8_t> dst(8 * 8 * 3);
  EXPECT_OK((*opened)->Load(0, {8, true, 1, 0}, scratch, dst.data()));
  // Messages name it escaped (Note [File names in messages]); the raw bytes opened it.
  EXPECT_EQ((*opened)->Describe(0), "sample 0 (" + root + "/caf\\xe9/\\xff\\xfe.jpg)");
}

TEST(ImageFolderDatasetTest, ANameWithANewlineIsEscapedInMessagesAndStillLoads) {
  const std::string root = FreshDirectory("newline");
  fs::create_directories(root + "/a");
  const std::string forged = root + "/a/x.jpg\n[data_service node 0 12:00:00.000] E forged.jpg";
  ASSERT_OK(test_util::WriteJpeg(forged, 20, 20, test_util::PhotoLikeImage(20, 20, 3)));
  Touch(root + "/stray\tfile\n");
  auto opened = ImageFolderDataset::Open(root);
  ASSERT_OK(opened);
  ASSERT_EQ((*opened)->size(), 1);
  EXPECT_EQ((*opened)->samples()[0].path, forged);
  SampleScratch scratch;
  std::vector<uint8_t> dst(8 * 8 * 3);
  EXPECT_OK((*opened)->Load(0, {8, true, 1, 0}, scratch, dst.data()));
  const std::string described = (*opened)->Describe(0);
  EXPECT_EQ(described.find('\n'), std::string::npos) << described;
  EXPECT_EQ(described,
            "sample 0 (" + root + "/a/x.jpg\\n[data_service node 0 12:00:00.000] E forged.jpg)");

  // A folder of only such a file: the refusal names it escaped too.
  const std::string alone = FreshDirectory("newline_alone");
  Touch(alone + "/evil\nname");
  auto refused = ImageFolderDataset::Open(alone);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "\"evil\\nname\"")) << refused.status();
  EXPECT_FALSE(absl::StrContains(refused.status().message(), "\n")) << refused.status();
}

TEST(ImageFolderDatasetTest, ASymlinkLeavingTheRootIsNamedAndFollowedOrRefusedWithFollowLinksNo) {
  const std::string base = FreshDirectory("outside_links");
  const std::string root = base + "/root";
  const std::string elsewhere = base + "/elsewhere";
  fs::create_directories(root + "/a/inner");
  fs::create_directories(elsewhere + "/more");
  ASSERT_OK(
      test_util::WriteJpeg(root + "/a/inner/0.jpg", 20, 20, test_util::PhotoLikeImage(20, 20, 1)));
  ASSERT_OK(
      test_util::WriteJpeg(elsewhere + "/x.jpg", 20, 20, test_util::PhotoLikeImage(20, 20, 2)));
  ASSERT_OK(test_util::WriteJpeg(elsewhere + "/more/y.jpg", 20, 20,
                                 test_util::PhotoLikeImage(20, 20, 3)));
  fs::create_symlink(elsewhere + "/x.jpg", root + "/a/out.jpg");   // a file outside
  fs::create_directory_symlink(elsewhere + "/more", root + "/b");  // a class outside
  fs::create_directory_symlink("inner", root + "/a/same");         // inside: not reported

  auto followed = ImageFolderDataset::Open(root);
  ASSERT_OK(followed);
  // a/inner/0.jpg once (Note [Bounded scan]), a/out.jpg, b/y.jpg.
  EXPECT_EQ((*followed)->size(), 3);
  EXPECT_EQ((*followed)->outside_links(),
            (std::vector<std::string>{root + "/b -> " + elsewhere + "/more",
                                      root + "/a/out.jpg -> " + elsewhere + "/x.jpg"}));

  ImageFolderOptions strict;
  strict.follow_links_outside_root = false;
  auto refused = ImageFolderDataset::Open(root, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the symlink " + root + "/b -> " + elsewhere +
                                 "/more leaves the image folder " + root + " (--follow_links=no")));
}

TEST(ImageFolderDatasetTest, AFolderReachedTwiceWithinAClassIsListedOnceSoALinkFarmStaysCheap) {
  // Level k has two links to level k + 1: 2^20 paths to the last level without the
  // visited set, 21 folders with it.
  const std::string root = FreshDirectory("link_farm");
  constexpr int kLevels = 20;
  for (int k = 0; k <= kLevels; ++k) fs::create_directories(root + "/a/L" + std::to_string(k));
  for (int k = 0; k < kLevels; ++k) {
    for (const char* name : {"/p", "/q"}) {
      fs::create_directory_symlink("../L" + std::to_string(k + 1),
                                   root + "/a/L" + std::to_string(k) + name);
    }
  }
  ASSERT_OK(
      test_util::WriteJpeg(root + "/a/L20/img.jpg", 20, 20, test_util::PhotoLikeImage(20, 20, 1)));
  const absl::Time start = absl::Now();
  auto opened = ImageFolderDataset::Open(root);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_OK(opened);
  ASSERT_EQ((*opened)->size(), 1);
  // The first path in name order wins: a/L0/p/p/.../img.jpg.
  std::string expected = root + "/a/L0";
  for (int k = 0; k < kLevels; ++k) expected += "/p";
  EXPECT_EQ((*opened)->samples()[0].path, expected + "/img.jpg");
  EXPECT_FALSE((*opened)->revisited_links().empty());
}

TEST(ImageFolderDatasetTest, TheScanHasADeadlineNamingTheFolderAndHowFarItGot) {
  const std::string root = MakeTree();
  ImageFolderOptions hurried;
  hurried.scan_timeout = absl::ZeroDuration();
  const absl::Time start = absl::Now();
  auto opened = ImageFolderDataset::Open(root, hurried);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("listing the image folder " + root +
                                 " took longer than --scan_timeout_s=0 (1 entries so far")));
}

TEST(ImageFolderDatasetTest, AFolderThatVanishesMidRunIsAFailureNotABadSample) {
  const std::string base = FreshDirectory("vanish");
  const std::string root = base + "/data";
  for (const char* name : {"/a/0.jpg", "/a/1.jpg", "/b/0.jpg"}) {
    fs::create_directories(fs::path(root + name).parent_path());
    ASSERT_OK(test_util::WriteJpeg(root + name, 20, 20, test_util::PhotoLikeImage(20, 20, 5)));
  }
  auto opened = ImageFolderDataset::Open(root);
  ASSERT_OK(opened);
  SampleScratch scratch;
  std::vector<uint8_t> dst(8 * 8 * 3);
  ASSERT_OK((*opened)->Load(0, {8, true, 1, 0}, scratch, dst.data()));

  // One file gone: a bad sample (skipped and counted under --bad_files=skip).
  fs::remove(root + "/a/1.jpg");
  absl::Status one = (*opened)->Load(1, {8, true, 1, 0}, scratch, dst.data());
  EXPECT_TRUE(IsBadSampleError(one)) << one;
  EXPECT_THAT(one, StatusIs(absl::StatusCode::kNotFound));

  // A class folder gone: the dataset changed under the run.
  fs::rename(root + "/b", base + "/b_moved");
  absl::Status class_gone = (*opened)->Load(2, {8, true, 1, 0}, scratch, dst.data());
  EXPECT_THAT(class_gone, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(IsBadSampleError(class_gone));
  EXPECT_TRUE(absl::StrContains(class_gone.message(),
                                "the class folder " + root + "/b of the image folder is gone"))
      << class_gone;

  // The whole folder gone (deleted, or unmounted and replaced by an empty mount point).
  fs::remove_all(root);
  for (int64_t index : {0, 1, 2}) {
    absl::Status gone = (*opened)->Load(index, {8, false, 1, 0}, scratch, dst.data());
    EXPECT_THAT(gone, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_FALSE(IsBadSampleError(gone));
    EXPECT_TRUE(
        absl::StrContains(gone.message(), "the image folder " + root +
                                              " is gone (No such file or directory); it was "
                                              "listed at start with 3 samples"))
        << gone;
  }
  fs::create_directories(root);  // an empty mount point
  absl::Status empty = (*opened)->Load(0, {8, false, 1, 0}, scratch, dst.data());
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("class folder " + root + "/a")));
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
  ASSERT_OK(test_util::WriteJpeg(root + "/a/bands.jpg", 96, 32, Bands(96, 32)));
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_OK(dataset);
  std::vector<uint8_t> dst(8 * 8 * 3);
  SampleScratch scratch;
  ASSERT_OK((*dataset)->Load(0, {8, false, 0, 0}, scratch, dst.data()));
  for (int i = 0; i < 64; ++i) {
    EXPECT_LT(dst[i * 3], 40) << i;
    EXPECT_GT(dst[i * 3 + 1], 215) << i;
    EXPECT_LT(dst[i * 3 + 2], 40) << i;
  }
}

TEST(ImageFolderDatasetTest, LoadIsDecodeAndTransformOfTheFile) {
  const std::string root = FreshDirectory("transforms");
  fs::create_directories(root + "/a");
  ASSERT_OK(test_util::WriteJpeg(root + "/a/0.jpg", 90, 70, test_util::PhotoLikeImage(90, 70, 1)));
  ASSERT_OK(test_util::WritePng(root + "/a/1.png", 50, 80, test_util::PhotoLikeImage(50, 80, 2)));
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_OK(dataset);
  SampleScratch scratch;
  image::TransformScratch reference_scratch;
  for (int64_t index : {0, 1}) {
    const std::vector<uint8_t> bytes = test_util::ReadFileBytes((*dataset)->samples()[index].path);
    for (int64_t epoch : {0, 1}) {
      // Training: RandomResizedCrop(24) + flip, drawn from (seed, epoch, index).
      std::vector<uint8_t> got(24 * 24 * 3), want(24 * 24 * 3);
      ASSERT_OK((*dataset)->Load(index, {24, true, 7, epoch}, scratch, got.data()));
      ASSERT_OK(image::DecodeAndTransform(bytes, image::TransformSpec::Train(24),
                                          image::SampleKey{7, epoch, index}, reference_scratch,
                                          want.data()));
      EXPECT_EQ(got, want) << "index " << index << " epoch " << epoch;
    }
    // Evaluation: Resize(round(24 * 256 / 224) = 27) + CenterCrop(24), or a given resize.
    std::vector<uint8_t> got(24 * 24 * 3), want(24 * 24 * 3);
    ASSERT_OK((*dataset)->Load(index, {24, false, 7, 0}, scratch, got.data()));
    ASSERT_OK(image::DecodeAndTransform(bytes, image::TransformSpec::Eval(27, 24),
                                        image::SampleKey{}, reference_scratch, want.data()));
    EXPECT_EQ(got, want) << "index " << index;
    SampleOptions wide{24, false, 7, 0};
    wide.eval_resize = 40;
    ASSERT_OK((*dataset)->Load(index, wide, scratch, got.data()));
    ASSERT_OK(image::DecodeAndTransform(bytes, image::TransformSpec::Eval(40, 24),
                                        image::SampleKey{}, reference_scratch, want.data()));
    EXPECT_EQ(got, want) << "index " << index;
  }
  // Different epochs draw different crops.
  std::vector<uint8_t> e0(24 * 24 * 3), e1(24 * 24 * 3);
  ASSERT_OK((*dataset)->Load(0, {24, true, 7, 0}, scratch, e0.data()));
  ASSERT_OK((*dataset)->Load(0, {24, true, 7, 1}, scratch, e1.data()));
  EXPECT_NE(e0, e1);
  EXPECT_THAT((*dataset)->Load(2, {24, true, 0, 0}, scratch, e0.data()),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(ImageFolderDatasetTest, ScratchBuffersAreReusedAcrossSamples) {
  const std::string root = FreshDirectory("reuse");
  fs::create_directories(root + "/a");
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(test_util::WriteJpeg(absl::StrCat(root, "/a/", i, ".jpg"), 60, 40,
                                   test_util::PhotoLikeImage(60, 40, i)));
  }
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_OK(dataset);
  SampleScratch scratch;
  std::vector<uint8_t> dst(16 * 16 * 3);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE((*dataset)->Load(i, {16, true, 1, 0}, scratch, dst.data()).ok());
  const uint8_t* buffer = scratch.file_bytes.data();
  const size_t capacity = scratch.capacity_bytes();
  EXPECT_GT(capacity, 0u);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) {
      ASSERT_OK((*dataset)->Load(i, {16, true, 1, round}, scratch, dst.data()));
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
  ASSERT_OK(names);
  ASSERT_OK(test_util::WriteJpeg(dir + "/good.jpg", 40, 30, test_util::PhotoLikeImage(40, 30, 5)));
  ASSERT_EQ(mkfifo((dir + "/fifo.jpg").c_str(), 0600), 0);
  ASSERT_EQ(symlink((dir + "/nowhere.jpg").c_str(), (dir + "/dangling.jpg").c_str()), 0);
  ASSERT_OK(
      test_util::WriteJpeg(dir + "/deleted.jpg", 40, 30, test_util::PhotoLikeImage(40, 30, 6)));
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_OK(dataset);
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
        EXPECT_OK(status);
        continue;
      }
      ASSERT_TRUE(expected.count(name)) << name;
      EXPECT_FALSE(status.ok()) << name;
      EXPECT_TRUE(IsBadSampleError(status)) << name << ": " << status;
      EXPECT_NE(status.message().find(expected.at(name)), std::string::npos)
          << name << ": " << status;
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
  ASSERT_OK(test_util::WriteJpeg(path, 40, 30, test_util::PhotoLikeImage(40, 30, 7)));
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_OK(dataset);
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  auto load = [&]() {
    SampleScratch scratch;
    std::vector<uint8_t> dst(8 * 8 * 3);
    return (*dataset)->Load(0, {8, true, 0, 0}, scratch, dst.data());
  };
  if (access(path.c_str(), R_OK) != 0) {
    absl::Status status = load();
    chmod(path.c_str(), 0600);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kPermissionDenied));
    EXPECT_TRUE(IsBadSampleError(status)) << status;
    return;
  }
  // Root reads any file: load as "nobody" in a child process instead.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    const absl::Status status = load();
    _exit(status.code() == absl::StatusCode::kPermissionDenied && IsBadSampleError(status) ? 0 : 1);
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  chmod(path.c_str(), 0600);
  ASSERT_TRUE(WIFEXITED(wait_status));
  if (WEXITSTATUS(wait_status) == 77) GTEST_SKIP() << "cannot switch to another user id here";
  EXPECT_EQ(WEXITSTATUS(wait_status), 0)
      << "an unreadable file must be PermissionDenied, marked bad";
}

}  // namespace
}  // namespace stoker::data_service
