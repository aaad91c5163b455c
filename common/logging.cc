#include "common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker {
namespace {

std::string& Identity() {
  static std::string* identity = new std::string("stoker");
  return *identity;
}

}  // namespace

void SetLogIdentity(absl::string_view identity) { Identity() = std::string(identity); }

void LogLine(LogLevel level, absl::string_view message) {
  timeval now;
  gettimeofday(&now, nullptr);
  tm local;
  localtime_r(&now.tv_sec, &local);
  const char tag = level == LogLevel::kInfo ? 'I' : level == LogLevel::kWarning ? 'W' : 'E';
  std::string line =
      absl::StrFormat("[%s %02d:%02d:%02d.%03d] %c %s\n", Identity(), local.tm_hour, local.tm_min,
                      local.tm_sec, static_cast<int>(now.tv_usec / 1000), tag, message);
  // One write so that lines of concurrent processes sharing stderr do not interleave.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

namespace {

// The length of the valid UTF-8 sequence (2 to 4 bytes; no overlong forms, surrogates or
// code points past U+10FFFF) that starts `text`, or 0.
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto continuation = [&](size_t i) { return i < text.size() && (byte(i) & 0xC0) == 0x80; };
  const unsigned char lead = byte(0);
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (lead == 0xE0 && byte(1) < 0xA0) return 0;  // overlong
    if (lead == 0xED && byte(1) > 0x9F) return 0;  // surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (lead == 0xF0 && byte(1) < 0x90) return 0;  // overlong
    if (lead == 0xF4 && byte(1) > 0x8F) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

absl::string_view WhitespaceEscape(unsigned char c) {
  switch (c) {
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    default:
      return "";
  }
}

std::string EscapeForLog(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text.substr(i));
      const bool c1_control =
          length == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
      if (length > 0 && !c1_control) {
        out.append(text.data() + i, length);
        i += length;
        continue;
      }
    }
    const absl::string_view escape = WhitespaceEscape(c);
    if (!escape.empty()) {
      out.append(escape.data(), escape.size());
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
    ++i;
    if (c == 0xC2 && i < text.size() && static_cast<unsigned char>(text[i]) >= 0x80 &&
        static_cast<unsigned char>(text[i]) < 0xA0) {
      absl::StrAppendFormat(&out, "\\x%02x",
                            static_cast<unsigned char>(text[i]));  // U+0080..U+009F
      ++i;
    }
  }
  return out;
}

}  // namespace stoker
