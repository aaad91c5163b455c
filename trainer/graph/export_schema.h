// The enums and small values of torch.export's serialised schema
// (torch/_export/serde/schema.py, major version 8) turned into libtorch's types.
#ifndef STOKER_TRAINER_GRAPH_EXPORT_SCHEMA_H_
#define STOKER_TRAINER_GRAPH_EXPORT_SCHEMA_H_

#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {

// schema.ScalarType -> at::ScalarType. InvalidArgument "<where>: ..." for an unknown code.
absl::StatusOr<at::ScalarType> ScalarTypeOf(int code, absl::string_view where);
// schema.MemoryFormat -> at::MemoryFormat.
absl::StatusOr<at::MemoryFormat> MemoryFormatOf(int code, absl::string_view where);
// schema.Layout -> at::Layout.
absl::StatusOr<at::Layout> LayoutOf(int code, absl::string_view where);
// schema.Device ({"type": "cuda", "index": 0}) -> c10::Device.
absl::StatusOr<c10::Device> DeviceOf(const nlohmann::json& device, absl::string_view where);
// A list of schema.SymInt that are all plain integers ({"as_int": 3}); InvalidArgument when
// one is symbolic.
absl::StatusOr<std::vector<int64_t>> StaticInts(const nlohmann::json& sym_ints,
                                                absl::string_view where);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_EXPORT_SCHEMA_H_
