// Internal: validation of user input. Every check throws specstate::Error with a message that
// names the function, the argument and the offending value; nothing here writes anything.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "specstate/status.h"
#include "specstate/tensor_view.h"

namespace specstate::detail {

[[noreturn]] void fail(Status status, const char* function, const std::string& message);

enum class DTypeRule { kExact, kAnyFloat };

struct ViewSpec {
  const char* function;
  const char* name;
  std::initializer_list<int64_t> shape;
  DType dtype = DType::kF32;
  DTypeRule dtype_rule = DTypeRule::kExact;
  Device device = Device::kCpu;
};

// Checks non-null data, rank, extents, dtype, device and non-negative strides.
void check_view(const TensorView& view, const ViewSpec& spec);
// The same, but an empty view is accepted (optional argument).
void check_optional_view(const TensorView& view, const ViewSpec& spec);

std::string shape_string(std::initializer_list<int64_t> shape);

// Bytes from a checked view's first element to one past its last (0 for an empty view).
int64_t span_bytes(const TensorView& view);

}  // namespace specstate::detail
