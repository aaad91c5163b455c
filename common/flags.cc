#include "common/flags.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace stoker {
namespace {

constexpr int kMaxConfigDepth = 8;

// One of the program's flags: an Abseil flag of its files or a LocalFlag.
class OwnFlag {
 public:
  OwnFlag() = default;
  explicit OwnFlag(absl::CommandLineFlag* flag) : absl_(flag) {}
  explicit OwnFlag(const LocalFlag* flag) : local_(flag) {}

  bool found() const { return absl_ != nullptr || local_ != nullptr; }
  std::string name() const { return absl_ != nullptr ? std::string(absl_->Name()) : local_->name; }
  bool is_bool() const { return absl_ != nullptr ? absl_->IsOfType<bool>() : local_->is_bool; }
  std::string default_value() const {
    return absl_ != nullptr ? absl_->DefaultValue() : local_->default_value;
  }
  std::string help() const { return absl_ != nullptr ? absl_->Help() : local_->help; }
  bool Parse(absl::string_view value, std::string* error) const {
    return absl_ != nullptr ? absl_->ParseFrom(value, error) : local_->parse(value, error);
  }

 private:
  absl::CommandLineFlag* absl_ = nullptr;
  const LocalFlag* local_ = nullptr;
};

bool InFiles(const absl::CommandLineFlag& flag, const FlagSpec& spec) {
  for (const std::string& file : spec.files) {
    if (absl::EndsWith(flag.Filename(), file)) return true;
  }
  return false;
}

OwnFlag FindOwnFlag(absl::string_view name, const FlagSpec& spec) {
  for (const LocalFlag& local : spec.local) {
    if (local.name == name) return OwnFlag(&local);
  }
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || !InFiles(*flag, spec)) return OwnFlag();
  return OwnFlag(flag);
}

// Every flag of `spec`, sorted by name.
std::vector<OwnFlag> AllOwnFlags(const FlagSpec& spec) {
  std::vector<std::pair<std::string, OwnFlag>> named;
  for (const LocalFlag& local : spec.local) named.emplace_back(local.name, OwnFlag(&local));
  if (!spec.files.empty()) {
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      if (InFiles(*flag, spec)) named.emplace_back(std::string(name), OwnFlag(flag));
    }
  }
  std::sort(named.begin(), named.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<OwnFlag> flags;
  for (auto& [name, flag] : named) flags.push_back(flag);
  return flags;
}

// The messages, in the program's wording (FlagWording).
class Messages {
 public:
  explicit Messages(const FlagSpec& spec) : spec_(spec) {}

  absl::Status Unexpected(absl::string_view where, absl::string_view arg) const {
    if (spec_.wording == FlagWording::kSentence) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "unexpected argument '", arg, "': ", spec_.positional_hint));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, "unexpected argument \"", arg, "\" (", spec_.positional_hint, ")"));
  }
  absl::Status Unknown(absl::string_view where, absl::string_view name) const {
    if (spec_.wording == FlagWording::kSentence) {
      return absl::InvalidArgumentError(absl::StrCat(where, "unknown flag --", name));
    }
    return absl::InvalidArgumentError(absl::StrCat(where, "--", name, ": unknown flag (run `",
                                                   spec_.program, " --help` for the flags)"));
  }
  absl::Status NeedsValue(absl::string_view where, absl::string_view name) const {
    if (spec_.wording == FlagWording::kSentence) {
      return absl::InvalidArgumentError(absl::StrCat(where, "--", name, " needs a value"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, "--", name, ": a value is required (--", name, "=VALUE)"));
  }
  absl::Status BadValue(absl::string_view where, absl::string_view name, absl::string_view value,
                        absl::string_view error) const {
    if (spec_.wording == FlagWording::kSentence) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "--", name, "=", value, " is not a valid value: ", error));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, "--", name, "=", value, ": not a valid value (", error, ")"));
  }
  std::string HelpEntry(const OwnFlag& flag) const {
    const std::string default_value = flag.default_value();
    if (spec_.wording == FlagWording::kSentence) {
      return absl::StrCat("  --", flag.name(), default_value.empty() ? "" : "=", default_value,
                          "\n      ", flag.help(), "\n");
    }
    return absl::StrFormat("  --%s (default \"%s\")\n      %s\n", flag.name(), default_value,
                           flag.help());
  }

 private:
  const FlagSpec& spec_;
};

class Parser {
 public:
  Parser(const FlagSpec& spec, ParsedFlags* parsed)
      : spec_(spec), messages_(spec), parsed_(parsed) {}

  // Applies `args` in order. `where` names the file and line they come from ("" on the
  // command line, where alone `--` ends the flags); `depth` counts the files around them.
  absl::Status ParseArgs(absl::Span<const std::string> args, absl::string_view where, int depth) {
    const bool command_line = where.empty();
    for (size_t i = 0; i < args.size(); ++i) {
      absl::string_view arg = args[i];
      if (arg == "--" && command_line && spec_.passed_on) {
        parsed_->passed_on.assign(args.begin() + i + 1, args.end());
        break;
      }
      if (arg.size() < 2 || arg[0] != '-' || arg == "--") {
        return messages_.Unexpected(where, arg);
      }
      const absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
      const size_t equals = body.find('=');
      const absl::string_view name = body.substr(0, equals);
      const bool has_value = equals != absl::string_view::npos;
      std::string value = has_value ? std::string(body.substr(equals + 1)) : "";
      if (name == "help" || name == "h" || name == "helpfull") {
        parsed_->help = true;
        continue;
      }
      // The value of a flag given as `--name value`: the next argument, unless it ends
      // the flags.
      auto next_value = [&]() -> bool {
        if (i + 1 >= args.size() || args[i + 1] == "--") return false;
        value = args[++i];
        return true;
      };
      if ((name == "config" && spec_.config_files) ||
          (name == "flagfile" && spec_.flagfile_alias)) {
        if ((!has_value && !next_value()) || value.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, "--", name, " needs a file: --", name, "=FILE"));
        }
        RETURN_IF_ERROR(ApplyConfigFile(value, depth + 1, where));
        continue;
      }

      OwnFlag flag = FindOwnFlag(name, spec_);
      if (!flag.found() && !has_value && absl::StartsWith(name, "no")) {
        flag = FindOwnFlag(name.substr(2), spec_);  // --noname for a bool flag
        if (flag.found() && !flag.is_bool()) flag = OwnFlag();
        value = "false";
      } else if (flag.found() && !has_value) {
        if (flag.is_bool()) {
          value = "true";
        } else if (!next_value()) {
          return messages_.NeedsValue(where, name);
        }
      }
      if (!flag.found()) return messages_.Unknown(where, name);
      std::string error;
      if (!flag.Parse(value, &error)) {
        return messages_.BadValue(where, flag.name(), value, error);
      }
      parsed_->given.insert(flag.name());
    }
    return absl::OkStatus();
  }

 private:
  // Reads a configuration file (flags.h). `where` names the file and line that included
  // this one ("" on the command line).
  absl::Status ApplyConfigFile(const std::string& path, int depth, absl::string_view where) {
    if (depth > kMaxConfigDepth) {
      return absl::InvalidArgumentError(absl::StrCat(where, "--config=", path,
                                                     ": configuration files nest deeper than ",
                                                     kMaxConfigDepth, " (a cycle?)"));
    }
    // A directory opens as an empty stream: refuse it (and say why a file cannot be read).
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "--config=", path, ": cannot read the file: ", std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(where, "--config=", path,
                                                     ": not a regular file",
                                                     S_ISDIR(st.st_mode) ? " (a directory)" : ""));
    }
    std::ifstream in(path);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "--config=", path, ": cannot read the file: ", std::strerror(errno)));
    }
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      absl::string_view text = absl::StripAsciiWhitespace(line);
      if (text.empty() || text[0] == '#') continue;
      std::string arg(text);
      if (!absl::StartsWith(arg, "-")) arg = absl::StrCat("--", arg);
      RETURN_IF_ERROR(ParseArgs({arg}, absl::StrCat(path, " line ", number, ": "), depth));
    }
    return absl::OkStatus();
  }

  const FlagSpec& spec_;
  const Messages messages_;
  ParsedFlags* parsed_;
};

}  // namespace

LocalFlag IntFlag(absl::string_view name, int* value, absl::string_view help) {
  LocalFlag flag;
  flag.name = std::string(name);
  flag.help = std::string(help);
  flag.default_value = absl::StrCat(*value);
  flag.parse = [value](absl::string_view text, std::string* error) {
    int parsed = 0;
    if (!absl::SimpleAtoi(text, &parsed)) {
      *error = "not an integer";
      return false;
    }
    *value = parsed;
    return true;
  };
  return flag;
}

LocalFlag StringFlag(absl::string_view name, std::string* value, absl::string_view help) {
  LocalFlag flag;
  flag.name = std::string(name);
  flag.help = std::string(help);
  flag.default_value = *value;
  flag.parse = [value](absl::string_view text, std::string*) {
    *value = std::string(text);
    return true;
  };
  return flag;
}

FlagSpec FlagSpecOf(absl::string_view program, absl::string_view file) {
  FlagSpec spec;
  spec.program = std::string(program);
  spec.files = {std::string(file)};
  return spec;
}

absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const std::string> args, const FlagSpec& spec) {
  ParsedFlags parsed;
  RETURN_IF_ERROR(Parser(spec, &parsed).ParseArgs(args, "", 0));
  return parsed;
}

absl::StatusOr<ParsedFlags> ParseFlags(absl::Span<const char* const> args, const FlagSpec& spec) {
  return ParseFlags(std::vector<std::string>(args.begin(), args.end()), spec);
}

std::string FlagsHelp(const FlagSpec& spec) {
  const Messages messages(spec);
  const std::vector<OwnFlag> flags = AllOwnFlags(spec);
  std::string help;
  std::set<std::string> listed;
  for (const FlagSection& section : spec.sections) {
    absl::StrAppend(&help, "\n", section.title, ":\n");
    for (const std::string& name : section.flags) {
      const OwnFlag flag = FindOwnFlag(name, spec);
      if (!flag.found()) continue;
      absl::StrAppend(&help, messages.HelpEntry(flag));
      listed.insert(name);
    }
  }
  bool other_title = spec.sections.empty();
  for (const OwnFlag& flag : flags) {
    if (listed.count(flag.name()) > 0) continue;
    if (!other_title) {
      absl::StrAppend(&help, "\nOther flags:\n");
      other_title = true;
    }
    absl::StrAppend(&help, messages.HelpEntry(flag));
  }
  if (spec.config_files) {
    absl::StrAppend(
        &help,
        "\nFlags may also come from a configuration file, one `name=value` (or `--name=value`)\n"
        "per line, `#` starting a comment: --config=FILE",
        spec.flagfile_alias ? " (or Abseil's --flagfile=FILE)" : "",
        ".\nFlags apply in order: those after --config override the file.\n");
  }
  return help;
}

void ParseFlagsOrExit(int argc, char** argv, const FlagSpec& spec, absl::string_view usage) {
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags(absl::MakeConstSpan(argv + 1, argc > 0 ? argc - 1 : 0), spec);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %s\nRun `%s --help` for the flags.\n", spec.program.c_str(),
                 std::string(parsed.status().message()).c_str(), spec.program.c_str());
    std::exit(kExitUsage);
  }
  if (parsed->help) {
    std::printf("%s\n%s", std::string(usage).c_str(), FlagsHelp(spec).c_str());
    std::exit(0);
  }
}

}  // namespace stoker
