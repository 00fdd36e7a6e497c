#include "validate.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>

#include "specstate/spec/file_path.h"

namespace specstate::detail {

void fail(Status status, const char* function, const std::string& message) {
  throw Error(status, std::string(function) + ": " + message);
}

void check_path(const char* function, const char* name, const std::string& path) {
  if (path.empty()) fail(Status::kInvalidArgument, function, std::string(name) + " is empty");
  const std::string problem = spec::path_nul_problem(name, path);
  if (!problem.empty()) fail(Status::kInvalidArgument, function, problem);
}

int64_t span_bytes(const TensorView& view) {
  if (view.empty()) return 0;
  int64_t last = 0;
  for (int d = 0; d < view.ndim; ++d) {
    if (view.shape[d] == 0) return 0;
    last += (view.shape[d] - 1) * view.stride[d];
  }
  return (last + 1) * static_cast<int64_t>(dtype_size(view.dtype));
}

namespace {
// floor(a / b) for b > 0.
int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0 ? 1 : 0); }
}  // namespace

// Interval [x, x + la) meets [y, y + lb) iff -lb < y - x < la.
bool rows_overlap(const ByteRows& a, const ByteRows& b, int64_t* ia, int64_t* jb) {
  if (a.count <= 0 || b.count <= 0 || a.len <= 0 || b.len <= 0) return false;
  if (a.end() <= b.begin || b.end() <= a.begin) return false;
  // The intervals j of b that meet the byte interval [x, x + len) (x relative to b.begin).
  auto meeting = [&](int64_t x, int64_t len, int64_t* jlo, int64_t* jhi) {
    *jlo = std::max<int64_t>(0, floor_div(x - b.len, b.stride) + 1);
    *jhi = std::min<int64_t>(b.count - 1, -floor_div(-(x + len), b.stride) - 1);
    return *jlo <= *jhi;
  };
  if (a.stride == b.stride) {
    // Interval i of a against interval i + k of b: the distance d + k * S, the same for every
    // i, so one range of k decides.
    const int64_t S = a.stride, d = b.begin - a.begin;
    const int64_t klo = std::max<int64_t>(-(a.count - 1), floor_div(-b.len - d, S) + 1);
    const int64_t khi = std::min<int64_t>(b.count - 1, -floor_div(-(a.len - d), S) - 1);
    if (klo > khi) return false;
    *ia = std::max<int64_t>(0, -klo);
    *jb = *ia + klo;
    return true;
  }
  // Other strides. Interval i of a meets interval j of b iff x = d + j * Sb - i * Sa lies in
  // (-b.len, a.len), d = b.begin - a.begin, and every such x is d modulo g = gcd(Sa, Sb): where
  // no integer of that residue lies in the range, nothing meets (O(1): the layouts that
  // interleave two views' slots in one buffer, one view's slot stride a multiple of the other's,
  // took O(slots) here per pair of views, 1.1 s for 16 layers of 2^20 slots).
  {
    const int64_t g = std::gcd(a.stride, b.stride);
    const int64_t d = b.begin - a.begin;
    const int64_t r = d - floor_div(d, g) * g;        // d mod g, in [0, g)
    const int64_t lo = 1 - b.len;                     // the least x in range
    const int64_t x0 = r - floor_div(r - lo, g) * g;  // the least x >= lo with x = d (mod g)
    if (x0 >= a.len) return false;
  }
  // Otherwise interval by interval over the intervals of `a` inside b's span (each an O(1) range
  // test against b's intervals).
  const int64_t i0 = std::max<int64_t>(0, floor_div(b.begin - a.begin - a.len, a.stride) + 1);
  const int64_t i1 = std::min<int64_t>(a.count - 1, floor_div(b.end() - 1 - a.begin, a.stride));
  for (int64_t i = i0; i <= i1; ++i) {
    int64_t jlo = 0, jhi = 0;
    if (meeting(a.begin + i * a.stride - b.begin, a.len, &jlo, &jhi)) {
      *ia = i;
      *jb = jlo;
      return true;
    }
  }
  return false;
}

bool first_overlap(const std::vector<const ByteRows*>& rows,
                   const std::function<bool(std::size_t, std::size_t)>& check, OverlapOrder order,
                   std::size_t* a, std::size_t* b, int64_t* ia, int64_t* jb) {
  std::vector<std::size_t> sorted(rows.size());
  for (std::size_t k = 0; k < sorted.size(); ++k) sorted[k] = k;
  std::sort(sorted.begin(), sorted.end(), [&](std::size_t x, std::size_t y) {
    return std::make_pair(rows[x]->begin, x) < std::make_pair(rows[y]->begin, y);
  });
  const auto key = [&](std::size_t lo, std::size_t hi) {
    return order == OverlapOrder::kLaterFirst ? std::make_pair(hi, lo) : std::make_pair(lo, hi);
  };
  bool found = false;
  std::vector<std::size_t> open;  // rows whose hull reaches past the current row's begin
  for (const std::size_t k : sorted) {
    const ByteRows& r = *rows[k];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](std::size_t o) { return rows[o]->end() <= r.begin; }),
               open.end());
    for (const std::size_t o : open) {
      const std::size_t lo = std::min(o, k), hi = std::max(o, k);
      if (found && key(lo, hi) >= key(*a, *b)) continue;
      int64_t i = 0, j = 0;
      if (check(lo, hi) && rows_overlap(*rows[hi], *rows[lo], &j, &i)) {
        found = true;
        *a = lo;
        *b = hi;
        *ia = i;
        *jb = j;
      }
    }
    open.push_back(k);
  }
  return found;
}

ByteRows byte_rows(const TensorView& view) {
  const auto elem = static_cast<int64_t>(dtype_size(view.dtype));
  ByteRows rows;
  rows.begin = static_cast<int64_t>(reinterpret_cast<uintptr_t>(view.data));
  if (view.ndim == 0) {
    rows.count = 1;
    rows.len = rows.stride = elem;
    return rows;
  }
  int64_t last = 0;  // the last element of index 0, relative to its first
  for (int d = 1; d < view.ndim; ++d) last += (view.shape[d] - 1) * view.stride[d];
  rows.len = (last + 1) * elem;
  rows.count = view.shape[0];
  rows.stride = view.stride[0] * elem;
  if (rows.count == 1 || rows.stride == 0) {
    rows.count = 1;
    rows.stride = rows.len;
  }
  return rows;
}

std::string shape_string(std::initializer_list<int64_t> shape) {
  std::ostringstream out;
  out << "[";
  int i = 0;
  for (int64_t extent : shape) out << (i++ ? ", " : "") << extent;
  out << "]";
  return out.str();
}

void check_span(const char* function, const char* name, const TensorView& view) {
  constexpr int64_t kMaxSpanBytes = int64_t{1} << 48;
  int64_t span = 0;
  for (int d = 0; d < view.ndim; ++d) {
    int64_t term = 0;
    if (view.shape[d] > 1 &&
        (__builtin_mul_overflow(view.shape[d] - 1, view.stride[d], &term) ||
         __builtin_add_overflow(span, term, &span) ||
         span > kMaxSpanBytes / static_cast<int64_t>(dtype_size(view.dtype)))) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " stride " + std::to_string(d) + " = " +
               std::to_string(view.stride[d]) + " (shape " + std::to_string(view.shape[d]) +
               "): the view would span more than 2^48 bytes");
    }
  }
}

void check_strided(const char* function, const char* name, const TensorView& view) {
  if (view.ndim < 1 || view.ndim > TensorView::kMaxDims) {
    fail(Status::kInvalidArgument, function,
         std::string(name) + " has ndim = " + std::to_string(view.ndim) + ", outside [1, " +
             std::to_string(TensorView::kMaxDims) + "]");
  }
  for (int d = 0; d < view.ndim; ++d) {
    if (view.shape[d] < 0 || view.stride[d] < 0) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " dim " + std::to_string(d) + " has extent " +
               std::to_string(view.shape[d]) + " and stride " + std::to_string(view.stride[d]) +
               ": both must be >= 0");
    }
  }
  check_span(function, name, view);
}

void check_no_self_overlap(const char* function, const char* name, const TensorView& view) {
  // No element (numpy gives such arrays strides of 0): nothing is written.
  for (int d = 0; d < view.ndim; ++d) {
    if (view.shape[d] == 0) return;
  }
  for (int d = 0; d < view.ndim; ++d) {
    if (view.shape[d] > 1 && view.stride[d] == 0) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " (" + view.describe() + ") stride " + std::to_string(d) +
               " = 0 along " + std::to_string(view.shape[d]) +
               " elements: an output's elements must not share memory (a broadcast view?)");
    }
  }
  // The dimensions of more than one element, smallest stride first: each stride must reach past
  // every element the smaller ones span (then no two indices share an element). Strides of 0 are
  // refused above; check_strided bounds the span, so nothing here overflows.
  int dims[TensorView::kMaxDims];
  int n = 0;
  for (int d = 0; d < view.ndim; ++d) {
    if (view.shape[d] > 1) dims[n++] = d;
  }
  // Equal strides: the later dimension counts as the inner one (row-major), so that the message
  // names the same dimension every time.
  std::sort(dims, dims + n, [&](int a, int b) {
    return view.stride[a] != view.stride[b] ? view.stride[a] < view.stride[b] : a > b;
  });
  int64_t spanned = 1;  // elements the smaller strides' dimensions span
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (view.stride[d] < spanned) {
      fail(Status::kInvalidArgument, function,
           std::string(name) + " (" + view.describe() + ") stride " + std::to_string(d) + " = " +
               std::to_string(view.stride[d]) + " is less than the " + std::to_string(spanned) +
               " elements its smaller strides span: an output's elements must not share memory "
               "(an overlapping view, or one whose dimensions interleave?)");
    }
    spanned = view.stride[d] * (view.shape[d] - 1) + spanned;
  }
}

void check_view(const TensorView& view, const ViewSpec& spec) {
  const std::string name = spec.name;
  if (view.data == nullptr) {
    // A tensor of no elements (a round whose rows all verify 0 tokens) may be given as an empty
    // view: nothing of it is read or written.
    int64_t expected = 1;
    for (int64_t d : spec.shape) expected *= d;
    if (expected == 0) return;
    fail(Status::kInvalidArgument, spec.function,
         name + " is empty (null data), expected " + shape_string(spec.shape));
  }
  // A hand-filled view may claim any device value: named with it (it was described as "cpu").
  if (view.device != Device::kCpu && view.device != Device::kCuda) {
    fail(Status::kInvalidArgument, spec.function,
         name + ".device = " + std::to_string(static_cast<int>(view.device)) +
             " is not a device (0 cpu, 1 cuda)");
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
  check_span(spec.function, spec.name, view);
  const bool float_dtype = view.dtype == DType::kF32 || view.dtype == DType::kBF16;
  if ((spec.dtype_rule == DTypeRule::kExact && view.dtype != spec.dtype) ||
      (spec.dtype_rule == DTypeRule::kAnyFloat && !float_dtype)) {
    fail(Status::kInvalidArgument, spec.function,
         name + " dtype = " + dtype_value_text(view.dtype) + ", expected " +
             (spec.dtype_rule == DTypeRule::kExact ? dtype_name(spec.dtype) : "f32 or bf16"));
  }
  // The dtype's natural alignment (4 bytes f32 / i32, 2 bytes bf16): the backends read elements
  // through typed pointers (and vector loads on CUDA), so a view at an odd byte address is
  // undefined behaviour there. Strides are in elements, so only the address can break it.
  {
    const auto align = static_cast<uintptr_t>(dtype_size(view.dtype));
    const auto address = reinterpret_cast<uintptr_t>(view.data);
    if (address % align != 0) {
      fail(Status::kInvalidArgument, spec.function,
           name + " (" + view.describe() + ") data address % " + std::to_string(align) + " = " +
               std::to_string(address % align) + ": a " + dtype_name(view.dtype) +
               " view must be " + std::to_string(align) + "-byte aligned");
    }
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

void check_absent(const char* function, const char* name, const TensorView& view,
                  const char* flag) {
  if (view.empty()) return;
  fail(Status::kInvalidArgument, function,
       std::string(name) + " is given (" + view.describe() + ") but the layer config has " + flag +
           " = false");
}

void check_flagged(const TensorView& view, const ViewSpec& spec, bool on, const char* flag) {
  if (!on) {
    check_absent(spec.function, spec.name, view, flag);
    return;
  }
  int64_t expected = 1;
  for (int64_t d : spec.shape) expected *= d;
  if (view.empty() && expected > 0) {  // "(null data)" did not say why the view is needed
    fail(Status::kInvalidArgument, spec.function,
         std::string(spec.name) + " is empty (not given), but the layer config has " + flag +
             " = true: expected " + shape_string(spec.shape));
  }
  check_view(view, spec);
}

void check_conv_weights(const char* function, int64_t conv_dim, int conv_width, bool has_bias,
                        const TensorView& weight, const TensorView& bias, DType act, Device dev) {
  check_view(
      weight,
      {function, "weights.conv_weight", {conv_dim, conv_width}, act, DTypeRule::kAnyFloat, dev});
  check_flagged(bias, {function, "weights.conv_bias", {conv_dim}, act, DTypeRule::kAnyFloat, dev},
                has_bias, "conv_bias");
}

}  // namespace specstate::detail
