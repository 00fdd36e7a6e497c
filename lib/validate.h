// Internal: validation of user input. Every check throws specstate::Error with a message that
// names the function, the argument and the offending value; nothing here writes anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "specstate/status.h"
#include "specstate/tensor_view.h"

namespace specstate::detail {

// A dtype as errors name it: its name, or its value where it is none of DType's ("7 (not a
// DType)"; dtype_name printed "unknown dtype").
inline std::string dtype_value_text(DType dtype) {
  if (dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI32)
    return dtype_name(dtype);
  return std::to_string(static_cast<int>(dtype)) + " (not a DType)";
}

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
// The furthest element of `view` (non-negative strides) lies within 2^48 bytes of its start, so
// no offset computed from it wraps; names the first stride past it.
void check_span(const char* function, const char* name, const TensorView& view);
// A view of any shape: ndim in [1, kMaxDims], extents and strides >= 0, span within 2^48 bytes.
void check_strided(const char* function, const char* name, const TensorView& view);
// An output whose different indices name one element would be written by several tokens or
// heads, the last write winning (on CUDA, a race): rejected, naming the dimension. Its elements
// must be pairwise distinct: no stride of 0 along more than one element (a broadcast view, e.g.
// torch's expand), and, sorted by stride, each dimension's stride reaches past the elements the
// smaller ones span (an as_strided view over too little memory; views that interleave their
// dimensions are refused with them). A view of no elements passes. Call it after check_view or
// check_strided, which bound ndim, the strides' signs and the span (nothing here overflows then).
void check_no_self_overlap(const char* function, const char* name, const TensorView& view);
// The same, but an empty view is accepted (optional argument).
void check_optional_view(const TensorView& view, const ViewSpec& spec);
// An optional view the config says is absent (`flag` = false) must not be given: a silent ignore
// would hide a config that does not match the model.
void check_absent(const char* function, const char* name, const TensorView& view, const char* flag);
// A view the config's `flag` asks for (`on`: check_view, an empty one named with the flag that
// wants it) or forbids (check_absent): conv_bias, Mamba2's D and z.
void check_flagged(const TensorView& view, const ViewSpec& spec, bool on, const char* flag);
// Every kind's conv weights: weights.conv_weight [conv_dim, conv_width], and weights.conv_bias
// [conv_dim] when the config has a bias (else it must not be given); any float dtype.
void check_conv_weights(const char* function, int64_t conv_dim, int conv_width, bool has_bias,
                        const TensorView& weight, const TensorView& bias, DType act, Device dev);

std::string shape_string(std::initializer_list<int64_t> shape);

// A file path argument `name`: not empty, and no NUL byte (the system would take the name up to
// it: another file). Throws kInvalidArgument naming the argument and the path (NULs as \0).
void check_path(const char* function, const char* name, const std::string& path);

// Bytes from a checked view's first element to one past its last (0 for an empty view).
int64_t span_bytes(const TensorView& view);

// A set of bytes as `count` equally spaced intervals: interval i is [begin + i * stride,
// begin + i * stride + len) (addresses as integers, stride > 0). The intervals may overlap one
// another.
struct ByteRows {
  int64_t begin = 0, stride = 0, len = 0, count = 0;
  int64_t end() const noexcept { return begin + (count - 1) * stride + len; }
};

// Whether some interval i of `a` and interval j of `b` share a byte; `*ia`, `*jb` name such a
// pair. Exact (no span approximation), O(1) for equal strides and where the strides' gcd leaves
// no residue that meets, otherwise O(intervals of `a` inside b's span). Spans below 2^48 bytes
// (check_view), so nothing here overflows.
bool rows_overlap(const ByteRows& a, const ByteRows& b, int64_t* ia, int64_t* jb);

// A pair (a, b), a < b, of `rows` whose intervals share a byte (rows_overlap) among the pairs
// `check(a, b)` accepts: the first by (b, a) (kLaterFirst: the first row that meets an earlier
// one, as a loop checking each row against those before it finds it) or by (a, b)
// (kEarlierFirst). One sweep over the rows sorted by their hulls' [begin, end()): only rows whose
// hulls meet are compared, O(n log n) for rows of disjoint hulls (separate tensors), where
// comparing every pair took 28 s for 64,000 layers' views. Returns false when no pair overlaps;
// else *a, *b and their intervals *ia, *jb.
enum class OverlapOrder { kLaterFirst, kEarlierFirst };
bool first_overlap(const std::vector<const ByteRows*>& rows,
                   const std::function<bool(std::size_t, std::size_t)>& check, OverlapOrder order,
                   std::size_t* a, std::size_t* b, int64_t* ia, int64_t* jb);

// A checked, non-empty view as the intervals of its leading dimension: interval i is the span of
// index i (its remaining dimensions). A view of one index, or of leading stride 0, is one interval.
ByteRows byte_rows(const TensorView& view);

}  // namespace specstate::detail
