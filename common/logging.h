// Minimal logging to stderr (Debian's Abseil has no absl/log): one line per call, with the
// program's role and time, e.g. "[trainer rank 1 12:00:01.234] W message".
#ifndef STOKER_COMMON_LOGGING_H_
#define STOKER_COMMON_LOGGING_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace stoker {

enum class LogLevel { kInfo, kWarning, kError };

// Sets the prefix that names this process in every line ("data_service", "trainer rank 3").
// Call once from main() before other threads start.
void SetLogIdentity(absl::string_view identity);

// Writes one line atomically (a single write(2)). Thread-safe.
void LogLine(LogLevel level, absl::string_view message);

// `text` (a file name, say) made safe to put in a log line, so that no name can forge a
// line or garble the terminal: valid UTF-8 other than control characters (C0, DEL, C1)
// stays as it is;
// a backslash becomes "\\", a newline "\n", a tab "\t", a carriage return "\r", and every
// other control character or byte that is not part of valid UTF-8 "\xHH". Text without
// those comes back unchanged. For messages only: open files by their raw bytes.
std::string EscapeForLog(absl::string_view text);

// The two-character escape of a newline, tab or carriage return ("\\n", "\\t", "\\r"), as
// EscapeForLog, C and JSON all write them; empty for any other character.
absl::string_view WhitespaceEscape(unsigned char c);

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kInfo, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kWarning, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogLevel::kError, absl::StrFormat(format, args...));
}

}  // namespace stoker

#endif  // STOKER_COMMON_LOGGING_H_
