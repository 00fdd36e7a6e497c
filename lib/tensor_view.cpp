#include "specstate/tensor_view.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "specstate/status.h"
#include "validate.h"

namespace specstate {

namespace {
void set_shape(TensorView& view, std::initializer_list<int64_t> shape, const char* function) {
  if (shape.size() > static_cast<std::size_t>(TensorView::kMaxDims)) {
    throw Error(Status::kInvalidArgument, std::string(function) + ": " +
                                              std::to_string(shape.size()) +
                                              " dimensions, at most 6 are supported");
  }
  view.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t extent : shape) {
    if (extent < 0) {
      throw Error(Status::kInvalidArgument, std::string(function) + ": shape[" + std::to_string(i) +
                                                "] = " + std::to_string(extent) + " is negative");
    }
    view.shape[i++] = extent;
  }
  // (A view with a zero extent holds no element, however large the others.)
  bool empty = false;
  for (int d = 0; d < view.ndim; ++d) empty = empty || view.shape[d] == 0;
  int64_t n = 1;
  for (int d = 0; d < view.ndim && !empty; ++d) {
    if (__builtin_mul_overflow(n, view.shape[d], &n)) {
      std::string dims;
      for (int64_t extent : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(extent);
      throw Error(Status::kInvalidArgument,
                  std::string(function) + ": shape [" + dims + "] holds more than 2^63 elements");
    }
  }
}
}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  set_shape(view, shape, "TensorView::contiguous");
  // (set_shape bounded the element count of a non-empty shape; an empty one's strides may still
  // wrap, e.g. [0, 2^62, 4], and are refused as before.)
  int64_t stride = 1;
  for (int i = view.ndim - 1; i >= 0; --i) {
    view.stride[i] = stride;
    if (__builtin_mul_overflow(stride, view.shape[i], &stride)) {
      throw Error(Status::kInvalidArgument,
                  "TensorView::contiguous: shape " + view.describe() +
                      " has strides past 2^63 elements (they would wrap)");
    }
  }
  return view;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> stride, Device device) {
  if (shape.size() != stride.size()) {
    throw Error(Status::kInvalidArgument, "TensorView::strided: shape has " +
                                              std::to_string(shape.size()) + " dims, stride " +
                                              std::to_string(stride.size()));
  }
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  set_shape(view, shape, "TensorView::strided");
  int i = 0;
  for (int64_t s : stride) view.stride[i++] = s;
  return view;
}

namespace {
// ndim as far as shape/stride can be read: a hand-filled view may hold any ndim, and even the
// message that rejects it must not read past the arrays.
int readable_dims(int ndim) noexcept { return ndim < 0 ? 0 : std::min(ndim, TensorView::kMaxDims); }
}  // namespace

int64_t TensorView::numel() const noexcept {
  for (int i = 0; i < readable_dims(ndim); ++i) {
    if (shape[i] == 0) return 0;  // (before a product of the others could saturate)
  }
  int64_t n = 1;
  for (int i = 0; i < readable_dims(ndim); ++i) {
    if (__builtin_mul_overflow(n, shape[i], &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  int64_t expected = 1;
  for (int i = readable_dims(ndim) - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != expected) return false;
    // A view of more than 2^63 elements is no contiguous buffer.
    if (__builtin_mul_overflow(expected, shape[i], &expected)) return false;
  }
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream out;
  const int dims = readable_dims(ndim);
  out << detail::dtype_value_text(dtype) << "[";  // a value outside DType by its number
  for (int i = 0; i < dims; ++i) out << (i ? ", " : "") << shape[i];
  out << "] strides [";
  for (int i = 0; i < dims; ++i) out << (i ? ", " : "") << stride[i];
  out << "] ";
  if (dims != ndim) out << "(ndim = " << ndim << " outside [0, " << kMaxDims << "]) ";
  out << (device == Device::kCuda  ? std::string("cuda")
          : device == Device::kCpu ? std::string("cpu")
                                   : "device " + std::to_string(static_cast<int>(device)));
  if (data == nullptr) out << " (null)";
  return out.str();
}

}  // namespace specstate
