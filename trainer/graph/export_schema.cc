#include "trainer/graph/export_schema.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<at::ScalarType> ScalarTypeOf(int code, absl::string_view where) {
  switch (code) {
    case 1:
      return at::kByte;
    case 2:
      return at::kChar;
    case 3:
      return at::kShort;
    case 4:
      return at::kInt;
    case 5:
      return at::kLong;
    case 6:
      return at::kHalf;
    case 7:
      return at::kFloat;
    case 8:
      return at::kDouble;
    case 9:
      return at::kComplexHalf;
    case 10:
      return at::kComplexFloat;
    case 11:
      return at::kComplexDouble;
    case 12:
      return at::kBool;
    case 13:
      return at::kBFloat16;
    case 28:
      return at::kUInt16;
    case 29:
      return at::kFloat8_e4m3fn;
    case 30:
      return at::kFloat8_e5m2;
    case 31:
      return at::kFloat8_e4m3fnuz;
    case 32:
      return at::kFloat8_e5m2fnuz;
    default:
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown dtype code ", code));
  }
}

absl::StatusOr<at::MemoryFormat> MemoryFormatOf(int code, absl::string_view where) {
  switch (code) {
    case 1:
      return at::MemoryFormat::Contiguous;
    case 2:
      return at::MemoryFormat::ChannelsLast;
    case 3:
      return at::MemoryFormat::ChannelsLast3d;
    case 4:
      return at::MemoryFormat::Preserve;
    default:
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown memory format code ", code));
  }
}

absl::StatusOr<at::Layout> LayoutOf(int code, absl::string_view where) {
  switch (code) {
    case 1:
      return at::kSparse;
    case 2:
      return at::kSparseCsr;
    case 3:
      return at::kSparseCsc;
    case 4:
      return at::kSparseBsr;
    case 5:
      return at::kSparseBsc;
    case 6:
      return at::kMkldnn;
    case 7:
      return at::kStrided;
    default:
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown layout code ", code));
  }
}

absl::StatusOr<c10::Device> DeviceOf(const nlohmann::json& device, absl::string_view where) {
  if (!device.is_object() || !device.contains("type") || !device["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": malformed device"));
  }
  std::string spec = device["type"].get<std::string>();
  if (device.contains("index") && device["index"].is_number_integer()) {
    spec = absl::StrCat(spec, ":", device["index"].get<int>());
  }
  try {
    return c10::Device(spec);
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": unknown device '", spec, "'"));
  }
}

absl::StatusOr<std::vector<int64_t>> StaticInts(const nlohmann::json& sym_ints,
                                                absl::string_view where) {
  if (!sym_ints.is_array())
    return absl::InvalidArgumentError(absl::StrCat(where, ": sizes are not a list"));
  std::vector<int64_t> ints;
  for (const nlohmann::json& s : sym_ints) {
    if (!s.is_object() || !s.contains("as_int") || !s["as_int"].is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a size is symbolic (", s.dump(), ")"));
    }
    ints.push_back(s["as_int"].get<int64_t>());
  }
  return ints;
}

}  // namespace stoker::trainer
