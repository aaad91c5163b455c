// Tests of ImageFolderDataset: torchvision's class and file ordering (checked against
// torchvision itself when it is installed), extension filtering, and clear errors.
#include "data_service/image_folder_dataset.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

TEST(ImageFolderDatasetTest, LoadsJpegSamples) {
  const std::string root = FreshDirectory("jpegs");
  fs::create_directories(root + "/red");
  std::vector<uint8_t> red(20 * 30 * 3, 0);
  for (size_t i = 0; i < red.size(); i += 3) red[i] = 250;
  ASSERT_TRUE(test_util::WriteJpeg(root + "/red/1.jpg", 20, 30, red).ok());
  auto dataset = ImageFolderDataset::Open(root);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::vector<uint8_t> image(6 * 6 * 3);
  ASSERT_TRUE((*dataset)->Load(0, {6, true, 0, 0}, image.data()).ok());
  for (size_t i = 0; i < image.size(); i += 3) {
    EXPECT_GT(image[i], 230);
    EXPECT_LT(image[i + 1], 25);
  }
  EXPECT_EQ((*dataset)->Load(1, {6, true, 0, 0}, image.data()).code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace stoker::data_service
