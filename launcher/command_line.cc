#include "launcher/command_line.h"

#include <algorithm>
#include <utility>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace stoker::launcher {
namespace {

absl::CommandLineFlag* FindOwnFlag(absl::string_view name, absl::string_view flags_file) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || !absl::EndsWith(flag->Filename(), flags_file)) return nullptr;
  return flag;
}

}  // namespace

absl::StatusOr<ParsedCommandLine> ParseFlags(absl::Span<const char* const> args,
                                             absl::string_view flags_file) {
  ParsedCommandLine parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      parsed.passed_on.assign(args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument '", arg, "': trainer flags go after '--'"));
    }
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    const bool has_value = equals != absl::string_view::npos;
    if (name == "help" || name == "h" || name == "helpfull") {
      parsed.help = true;
      continue;
    }

    absl::CommandLineFlag* flag = FindOwnFlag(name, flags_file);
    std::string value = has_value ? std::string(body.substr(equals + 1)) : "";
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      flag = FindOwnFlag(name.substr(2), flags_file);
      if (flag != nullptr && !flag->IsOfType<bool>()) flag = nullptr;
      value = "false";
    } else if (flag != nullptr && !has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < args.size() && absl::string_view(args[i + 1]) != "--") {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag->Name(), "=", value, " is not a valid value: ", error));
    }
    parsed.given.insert(std::string(flag->Name()));
  }
  return parsed;
}

std::string FlagsHelp(absl::string_view flags_file) {
  std::vector<std::pair<absl::string_view, absl::CommandLineFlag*>> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), flags_file)) flags.emplace_back(name, flag);
  }
  std::sort(flags.begin(), flags.end());
  std::string help;
  for (const auto& [name, flag] : flags) {
    const std::string default_value = flag->DefaultValue();
    absl::StrAppend(&help, "  --", name, default_value.empty() ? "" : "=", default_value, "\n      ",
                    flag->Help(), "\n");
  }
  return help;
}

}  // namespace stoker::launcher
