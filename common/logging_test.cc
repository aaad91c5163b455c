#include "common/logging.h"

#include <string>

#include "gtest/gtest.h"

namespace stoker {
namespace {

TEST(EscapeForLogTest, PlainNamesAndUtf8ComeBackUnchanged) {
  EXPECT_EQ(EscapeForLog("/data/train/cat/0001.jpg"), "/data/train/cat/0001.jpg");
  EXPECT_EQ(EscapeForLog("/data/caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x90\x88.png"),
            "/data/caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x90\x88.png");
  EXPECT_EQ(EscapeForLog(""), "");
}

TEST(EscapeForLogTest, ANewlineCannotStartAForgedLine) {
  const std::string forged = "a.jpg\n[trainer rank 0 12:00:00.000] E forged";
  const std::string escaped = EscapeForLog(forged);
  EXPECT_EQ(escaped, "a.jpg\\n[trainer rank 0 12:00:00.000] E forged");
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  EXPECT_EQ(EscapeForLog("tab\tcr\rbell\a del\x7f"), "tab\\tcr\\rbell\\x07 del\\x7f");
  EXPECT_EQ(EscapeForLog(std::string("nul\0x", 5)), "nul\\x00x");
}

TEST(EscapeForLogTest, BytesThatAreNotUtf8AreHexEscaped) {
  EXPECT_EQ(EscapeForLog("caf\xe9-\xff.png"), "caf\\xe9-\\xff.png");      // Latin-1
  EXPECT_EQ(EscapeForLog("\xc0\xaf"), "\\xc0\\xaf");                      // overlong '/'
  EXPECT_EQ(EscapeForLog("\xed\xa0\x80"), "\\xed\\xa0\\x80");             // a surrogate
  EXPECT_EQ(EscapeForLog("\xe6\x97"), "\\xe6\\x97");                      // truncated
  EXPECT_EQ(EscapeForLog("\xc2\x85 next line"), "\\xc2\\x85 next line");  // C1 control
}

TEST(EscapeForLogTest, BackslashesAreDoubledSoThatEscapesAreUnambiguous) {
  EXPECT_EQ(EscapeForLog("a\\nb"), "a\\\\nb");
  EXPECT_NE(EscapeForLog("a\\nb"), EscapeForLog("a\nb"));
}

}  // namespace
}  // namespace stoker
