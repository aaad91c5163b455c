#include "common/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"

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
  std::string line = absl::StrFormat("[%s %02d:%02d:%02d.%03d] %c %s\n", Identity(), local.tm_hour,
                                     local.tm_min, local.tm_sec, static_cast<int>(now.tv_usec / 1000),
                                     tag, message);
  // One write so that lines of concurrent processes sharing stderr do not interleave.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace stoker
