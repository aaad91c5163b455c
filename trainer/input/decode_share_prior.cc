#include "trainer/input/decode_share_prior.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace stoker::trainer {
namespace {

constexpr absl::string_view kHeader = "# stoker gpu decode share priors 1";

// A key's parts carry no whitespace: a model path with spaces keeps its shape with '_'.
std::string Token(absl::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = '_';
  }
  return out;
}

// The entries of `text`, or why it does not parse.
absl::Status Parse(const std::string& path, const std::string& text,
                   std::map<std::string, DecodeSharePrior>* entries) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0] != kHeader) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a GPU decode share prior file (its first line is not \"", kHeader, "\")"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(lines[i], '\t');
    DecodeSharePrior prior;
    double seconds = 0;
    if (fields.size() != 4 || fields[0].empty() || !absl::SimpleAtod(fields[1], &prior.share) ||
        !(prior.share >= 0 && prior.share <= 1) ||
        !absl::SimpleAtod(fields[2], &prior.images_per_second) || !(prior.images_per_second >= 0) ||
        !absl::SimpleAtod(fields[3], &seconds)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": line ", i + 1,
                       " does not parse (key, share in [0, 1], images/s, "
                       "unix seconds, tab-separated)"));
    }
    prior.recorded = absl::FromUnixSeconds(static_cast<int64_t>(seconds));
    (*entries)[std::string(fields[0])] = prior;
  }
  return absl::OkStatus();
}

// The file's text; NotFound when there is none.
absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::error_code missing;
  if (!std::filesystem::exists(path, missing)) return absl::NotFoundError(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  return text.str();
}

}  // namespace

std::string DecodeSharePriorKey(const DecodeSharePriorSetting& s) {
  return absl::StrCat("host=", Token(s.host), " samples=", s.dataset_size,
                      " classes=", s.num_classes, " model=", Token(s.model),
                      " batch=", s.batch_size, " image=", s.image_size, " ranks=", s.world_size,
                      " mode=", s.data_only ? "data_only" : "train");
}

DecodeSharePriorLookup ReadDecodeSharePrior(const std::string& path, absl::string_view key,
                                            absl::Time now) {
  DecodeSharePriorLookup lookup;
  absl::StatusOr<std::string> text = ReadText(path);
  if (absl::IsNotFound(text.status())) return lookup;
  if (!text.ok()) {
    lookup.ignored = std::string(text.status().message());
    return lookup;
  }
  std::map<std::string, DecodeSharePrior> entries;
  if (absl::Status parsed = Parse(path, *text, &entries); !parsed.ok()) {
    lookup.ignored = std::string(parsed.message());
    return lookup;
  }
  auto it = entries.find(std::string(key));
  if (it == entries.end()) return lookup;
  const absl::Duration age = now - it->second.recorded;
  if (age > kDecodeSharePriorMaxAge || age < -absl::Hours(1)) {
    lookup.ignored = absl::StrFormat(
        "%s: the entry for this setting is stale (recorded %.1f days ago; at most %.0f days)", path,
        absl::ToDoubleHours(age) / 24, absl::ToDoubleHours(kDecodeSharePriorMaxAge) / 24);
    return lookup;
  }
  lookup.prior = it->second;
  return lookup;
}

absl::Status WriteDecodeSharePrior(const std::string& path, absl::string_view key,
                                   const DecodeSharePrior& prior) {
  std::map<std::string, DecodeSharePrior> entries;
  if (absl::StatusOr<std::string> text = ReadText(path); text.ok()) {
    // A file that does not parse is replaced (its reader said why it was ignored).
    if (!Parse(path, *text, &entries).ok()) entries.clear();
  }
  entries[std::string(key)] = prior;
  std::string out = absl::StrCat(kHeader, "\n");
  for (const auto& [k, p] : entries) {
    absl::StrAppendFormat(&out, "%s\t%.6f\t%.1f\t%d\n", k, p.share, p.images_per_second,
                          absl::ToUnixSeconds(p.recorded));
  }
  auto error = [&](absl::string_view what) {
    return absl::InternalError(absl::StrCat("--gpu_decode_share_prior=", path, ": cannot ", what,
                                            ": ", std::strerror(errno)));
  };
  const std::filesystem::path file(path);
  if (file.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("--gpu_decode_share_prior=", path,
                                              ": cannot create its folder: ", ec.message()));
    }
  }
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error("create a temporary file beside it");
  size_t written = 0;
  while (written < out.size()) {
    const ssize_t n = ::write(fd, out.data() + written, out.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status status = error("write");
      ::close(fd);
      ::unlink(temporary.c_str());
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    absl::Status status = error("sync");
    ::unlink(temporary.c_str());
    return status;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    absl::Status status = error("rename the temporary file over it");
    ::unlink(temporary.c_str());
    return status;
  }
  return absl::OkStatus();
}

std::string DecodeSharePriorPath(absl::string_view flag, const char* xdg_cache_home,
                                 const char* home) {
  if (flag == "none") return "";
  if (flag != "auto") return std::string(flag);
  constexpr absl::string_view kFile = "stoker/gpu_decode_share_priors.tsv";
  if (xdg_cache_home != nullptr && *xdg_cache_home != '\0') {
    return absl::StrCat(xdg_cache_home, "/", kFile);
  }
  if (home != nullptr && *home != '\0') return absl::StrCat(home, "/.cache/", kFile);
  return "";
}

}  // namespace stoker::trainer
