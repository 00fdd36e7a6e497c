#include "validate.h"

#include <sstream>

namespace specstate::detail {

void fail(Status status, const char* function, const std::string& message) {
  throw Error(status, std::string(function) + ": " + message);
}

std::string shape_string(std::initializer_list<int64_t> shape) {
  std::ostringstream out;
  out << "[";
  int i = 0;
  for (int64_t extent : shape) out << (i++ ? ", " : "") << extent;
  out << "]";
  return out.str();
}

void check_view(const TensorView& view, const ViewSpec& spec) {
  const std::string name = spec.name;
  if (view.data == nullptr) {
    fail(Status::kInvalidArgument, spec.function,
         name + " is empty (null data), expected " + shape_string(spec.shape));
  }
  // Checked before anything reads shape[]/stride[] (describe() included): a hand-filled view may
  // claim any ndim, and only kMaxDims entries exist.
  if (view.ndim < 0 || view.ndim > TensorView::kMaxDims) {
    fail(Status::kInvalidArgument, spec.function,
         name + " has ndim = " + std::to_string(view.ndim) + ", outside [0, " +
             std::to_string(TensorView::kMaxDims) + "] (expected shape " +
             shape_string(spec.shape) + ")");
  }
  if (view.ndim != static_cast<int>(spec.shape.size())) {
    fail(Status::kInvalidArgument, spec.function,
         name + " has " + std::to_string(view.ndim) + " dims (" + view.describe() +
             "), expected shape " + shape_string(spec.shape));
  }
  int dim = 0;
  for (int64_t extent : spec.shape) {
    if (view.shape[dim] != extent) {
      fail(Status::kInvalidArgument, spec.function,
           name + " dim " + std::to_string(dim) + " = " + std::to_string(view.shape[dim]) +
               ", expected " + std::to_string(extent) + " (shape " + shape_string(spec.shape) +
               ", got " + view.describe() + ")");
    }
    if (view.stride[dim] < 0) {
      fail(Status::kInvalidArgument, spec.function,
           name + " stride " + std::to_string(dim) + " = " + std::to_string(view.stride[dim]) +
               " is negative");
    }
    ++dim;
  }
  const bool float_dtype = view.dtype == DType::kF32 || view.dtype == DType::kBF16;
  if ((spec.dtype_rule == DTypeRule::kExact && view.dtype != spec.dtype) ||
      (spec.dtype_rule == DTypeRule::kAnyFloat && !float_dtype)) {
    fail(Status::kInvalidArgument, spec.function,
         name + " dtype = " + dtype_name(view.dtype) + ", expected " +
             (spec.dtype_rule == DTypeRule::kExact ? dtype_name(spec.dtype) : "f32 or bf16"));
  }
  if (view.device != spec.device) {
    fail(Status::kInvalidArgument, spec.function,
         name + " lives on " + (view.device == Device::kCuda ? "cuda" : "cpu") +
             ", the pool's backend needs " + (spec.device == Device::kCuda ? "cuda" : "cpu") +
             " memory");
  }
}

void check_optional_view(const TensorView& view, const ViewSpec& spec) {
  if (view.empty()) return;
  check_view(view, spec);
}

}  // namespace specstate::detail
