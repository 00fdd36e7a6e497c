// The golden conformance check (golden_case.h, docs/golden.md, tests/data/golden/README.md).
//
// A case holds, per GDN layer l, the inputs of one verify round (mixed_qkv.l, a.l, b.l, weights,
// conv_state_init.l, ssm_state_init.l), what SGLang's kernels produced (conv_out.l, core_out.l,
// inter_conv_window.l, inter_ssm.l.r<i>, conv_state_committed.l, ssm_state_committed.l) and the
// float64 reference of the same (ref_*). We replay the round through the public API and compare.
#include "cli/golden_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <utility>

#include "cli/golden_mamba2.h"
#include "specstate/spec/json_depth.h"
#include "specstate/specstate.h"

#if defined(SPECSTATE_CLI_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace specstate::cli {
namespace {

using json = nlohmann::json;
using Shape = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A problem of the case itself (missing tensor, inconsistent shapes, ...).
[[noreturn]] void bad_case(const std::string& message) {
  throw Error(Status::kInvalidArgument, message);
}

std::string shape_string(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

template <typename T>
std::string list_string(const std::vector<T>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string layer_name(const std::string& base, int layer) {
  return base + ".l" + std::to_string(layer);
}

// --- memory the pool's backend reads: host memory, or device memory through the CUDA runtime --

class Memory {
 public:
  virtual ~Memory() = default;
  virtual Device device() const noexcept = 0;
  // A buffer of `bytes`, owned by this object.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
};

class HostMemory final : public Memory {
 public:
  Device device() const noexcept override { return Device::kCpu; }
  void* allocate(std::size_t bytes) override {
    blocks_.push_back(std::make_unique<unsigned char[]>(bytes == 0 ? 1 : bytes));
    return blocks_.back().get();
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

 private:
  std::vector<std::unique_ptr<unsigned char[]>> blocks_;
};

#if defined(SPECSTATE_CLI_CUDA)
// Views of a kCuda pool are device pointers: inputs go up and results come down through the CUDA
// runtime, the way an engine that owns device tensors would hand them to specstate.
class CudaMemory final : public Memory {
 public:
  explicit CudaMemory(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }
  ~CudaMemory() override {
    for (void* p : blocks_) cudaFree(p);
  }
  Device device() const noexcept override { return Device::kCuda; }
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    blocks_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    // The pool's work may run on its own stream: wait for everything before reading.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
  }

 private:
  static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
      throw Error(Status::kBackendError,
                  std::string("check-golden: ") + what + ": " + cudaGetErrorString(status));
    }
  }
  std::vector<void*> blocks_;
};
#endif

std::unique_ptr<Memory> make_memory(Backend backend, int device) {
  if (backend == Backend::kCpu) return std::make_unique<HostMemory>();
#if defined(SPECSTATE_CLI_CUDA)
  return std::make_unique<CudaMemory>(device);
#else
  (void)device;
  throw Error(Status::kNotSupported,
              "check-golden was built without the CUDA runtime, so it cannot copy to or from "
              "the pool's device memory (--backend cuda)");
#endif
}

// --- values in storage dtypes --------------------------------------------------------------

// `values` encoded in `dtype`. With `exact`, a value that bf16 cannot hold exactly is an error:
// a bf16 case stores exact float32 copies of bf16 values, so anything else means a wrong dtype.
std::vector<unsigned char> encode(const std::vector<float>& values, DType dtype,
                                  const std::string& what, bool exact) {
  const std::size_t n = values.size();
  std::vector<unsigned char> out(n * dtype_size(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), values.data(), n * sizeof(float));
  } else if (dtype == DType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      const uint16_t bits = bf16_from_float(values[i]);
      if (exact && float_from_bf16(bits) != values[i] && !std::isnan(values[i])) {
        bad_case(what + "[" + std::to_string(i) + "] = " + std::to_string(values[i]) +
                 " is not a bf16 value, yet the case declares it bf16");
      }
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  } else {
    bad_case(what + ": cannot encode floats as " + std::string(dtype_name(dtype)));
  }
  return out;
}

std::vector<float> decode(const std::vector<unsigned char>& bytes, DType dtype) {
  const std::size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> out(n);
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  } else if (dtype == DType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = float_from_bf16(bits);
    }
  } else {
    bad_case(std::string("cannot decode ") + dtype_name(dtype) + " as floats");
  }
  return out;
}

// A row-major view of `shape` at `data`.
TensorView make_view(void* data, DType dtype, const Shape& shape, Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = view.ndim - 1; i >= 0; --i) {
    view.shape[i] = shape[i];
    view.stride[i] = stride;
    stride *= shape[i];
  }
  return view;
}

Shape view_shape(const TensorView& view) {
  return Shape(view.shape.begin(), view.shape.begin() + view.ndim);
}

// Elements from the view's first element to its last, whatever its strides.
int64_t view_extent(const TensorView& view) {
  int64_t last = 0;
  for (int i = 0; i < view.ndim; ++i) {
    if (view.shape[i] == 0) return 0;
    last += (view.shape[i] - 1) * view.stride[i];
  }
  return last + 1;
}

// Calls fn(row-major index, element offset) over every element of `view`.
template <typename Fn>
void for_each_element(const TensorView& view, Fn&& fn) {
  const int64_t n = view.numel();
  std::array<int64_t, TensorView::kMaxDims> index{};
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (int d = 0; d < view.ndim; ++d) offset += index[d] * view.stride[d];
    fn(i, offset);
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (++index[d] < view.shape[d]) break;
      index[d] = 0;
    }
  }
}

void check_device(const Memory& memory, const TensorView& view, const std::string& what) {
  if (view.device != memory.device()) {
    bad_case(what + " lives on " + (view.device == Device::kCuda ? "cuda" : "cpu") +
             " but the check copies through " +
             (memory.device() == Device::kCuda ? "cuda" : "cpu"));
  }
}

// The view's elements in row-major order, as raw bytes of its dtype (for bit-exact checks).
std::vector<unsigned char> read_bytes(Memory& memory, const TensorView& view,
                                      const std::string& what) {
  check_device(memory, view, what);
  const std::size_t esize = dtype_size(view.dtype);
  std::vector<unsigned char> span(static_cast<std::size_t>(view_extent(view)) * esize);
  if (!span.empty()) memory.download(span.data(), view.data, span.size());
  if (view.is_contiguous()) return span;
  std::vector<unsigned char> out(static_cast<std::size_t>(view.numel()) * esize);
  for_each_element(view, [&](int64_t i, int64_t offset) {
    std::memcpy(out.data() + i * esize, span.data() + offset * esize, esize);
  });
  return out;
}

std::vector<float> read_floats(Memory& memory, const TensorView& view, const std::string& what) {
  return decode(read_bytes(memory, view, what), view.dtype);
}

void write_floats(Memory& memory, const TensorView& view, const std::vector<float>& values,
                  const std::string& what) {
  check_device(memory, view, what);
  if (static_cast<int64_t>(values.size()) != view.numel()) {
    bad_case(what + ": " + std::to_string(values.size()) + " values for a view of " +
             std::to_string(view.numel()));
  }
  const std::vector<unsigned char> bytes = encode(values, view.dtype, what, true);
  if (view.is_contiguous()) {
    if (!bytes.empty()) memory.upload(view.data, bytes.data(), bytes.size());
    return;
  }
  const std::size_t esize = dtype_size(view.dtype);
  std::vector<unsigned char> span(static_cast<std::size_t>(view_extent(view)) * esize);
  memory.download(span.data(), view.data, span.size());
  for_each_element(view, [&](int64_t i, int64_t offset) {
    std::memcpy(span.data() + offset * esize, bytes.data() + i * esize, esize);
  });
  memory.upload(view.data, span.data(), span.size());
}

// A new buffer holding `values` in `dtype`, viewed as `shape`.
TensorView upload(Memory& memory, const std::vector<float>& values, DType dtype, const Shape& shape,
                  const std::string& what, bool exact = true) {
  const std::vector<unsigned char> bytes = encode(values, dtype, what, exact);
  void* data = memory.allocate(bytes.size());
  if (!bytes.empty()) memory.upload(data, bytes.data(), bytes.size());
  return make_view(data, dtype, shape, memory.device());
}

// The first `rows` x `window` block of a [max_rows, max_window, ...] scratch view.
TensorView leading_block(TensorView view, int64_t rows, int64_t window) {
  view.shape[0] = rows;
  view.shape[1] = window;
  return view;
}

// --- the case's parameters ------------------------------------------------------------------

struct CaseSpec {
  json params = json::object();
  int L = 0, R = 0, T = 0, D = 0, W = 0, S = 0, H = 0, HV = 0, K = 0, V = 0;
  bool tree = false;
  bool conv_bias = false;
  std::optional<float> scale;
  DType act = DType::kF32, conv_state = DType::kF32, ssm_state = DType::kF32;
  // Each gate parameter has its own dtype, as engines hold them (SGLang's Qwen3-Next: A_log f32,
  // dt_bias bf16): params_json's A_log_dtype (or A_dtype) and dt_bias_dtype, each falling back
  // to the shared gate_param_dtype.
  DType conv_weight = DType::kF32, a_log = DType::kF32, dt_bias = DType::kF32;
  std::vector<std::string> notes;
  std::vector<int32_t> cache_indices, accept_len, last_step, parents;
  std::vector<bool> real;  // [R]
  int n_real = 0;
};

Shape shape_in(const TensorStore& store, const std::string& name) {
  if (!store.contains(name)) bad_case("the case has no tensor '" + name + "'");
  return store.info(name).shape;
}

void expect_shape(const TensorStore& store, const std::string& name, const Shape& expected) {
  const Shape got = shape_in(store, name);
  if (got != expected) {
    bad_case("tensor '" + name + "' has shape " + shape_string(got) + ", expected " +
             shape_string(expected));
  }
}

// params_json is a flat object of scalars; anything nested deeper is hostile (nlohmann's dump()
// and operator!= recurse, so 100k levels would overflow the stack). Checked on the raw text.
constexpr int kMaxParamsJsonDepth = 16;

// The params_json of the case's parts (they must agree).
json case_params(const GoldenCase& golden) {
  json params;
  bool found = false;
  for (const auto& file : golden.store.files()) {
    const std::string text = file->metadata_value("params_json");
    if (text.empty()) continue;
    const int64_t too_deep = spec::json_nesting(text, kMaxParamsJsonDepth).first_past_limit;
    if (too_deep >= 0) {
      bad_case("'" + file->path() + "': params_json nests JSON deeper than the limit of " +
               std::to_string(kMaxParamsJsonDepth) + " levels (at byte " +
               std::to_string(too_deep) + ")");
    }
    json parsed;
    try {
      parsed = json::parse(text);
    } catch (const json::exception& e) {
      bad_case("'" + file->path() + "': params_json is not valid JSON: " + e.what());
    }
    if (!parsed.is_object()) bad_case("'" + file->path() + "': params_json is not a JSON object");
    if (found && parsed != params) {
      bad_case("'" + file->path() + "': params_json differs from the other parts of case " +
               golden.name);
    }
    params = std::move(parsed);
    found = true;
  }
  return found ? params : json::object();
}

bool is_mamba2(const GoldenCase& golden, const json& params) {
  const auto model = params.find("model");
  if (model != params.end() && model->is_string() && model->get<std::string>() == "mamba2") {
    return true;
  }
  return golden.store.contains("xBC.l0");
}

std::optional<DType> parse_dtype_string(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text.rfind("torch.", 0) == 0) text = text.substr(6);
  if (text == "f32" || text == "float32" || text == "fp32" || text == "float") return DType::kF32;
  if (text == "bf16" || text == "bfloat16") return DType::kBF16;
  return std::nullopt;
}

// A storage dtype that decides the arithmetic (activations, states): must be understood.
DType required_dtype(const json& params, const char* key, DType fallback) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (!it->is_string()) bad_case(std::string("params_json '") + key + "' is not a string");
  const auto dtype = parse_dtype_string(it->get<std::string>());
  if (!dtype) {
    bad_case(std::string("params_json '") + key + "' = '" + it->get<std::string>() +
             "': check-golden knows f32 and bf16");
  }
  return *dtype;
}

// A parameter dtype that only chooses how exact values are passed (a bf16-representable value is
// the same number as f32 or bf16): anything not understood is passed as f32, with a note.
DType parameter_dtype(const json& params, const char* key, DType fallback,
                      std::vector<std::string>& notes) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  const auto dtype = it->is_string() ? parse_dtype_string(it->get<std::string>()) : std::nullopt;
  if (dtype) return *dtype;
  notes.push_back(std::string(key) + " " + it->dump() + " passed as f32");
  return DType::kF32;
}

void check_param(const json& params, const char* key, int64_t value, const std::string& source) {
  const auto it = params.find(key);
  if (it == params.end()) return;
  if (!it->is_number_integer() || it->get<int64_t>() != value) {
    bad_case(std::string("params_json '") + key + "' = " + it->dump() + " but " + source +
             " gives " + std::to_string(value));
  }
}

// A size read from a tensor's shape: every size of a case is at least 1 (a K, V or HV of 0 would
// divide by zero below) and fits in int.
int dim(const Shape& shape, std::size_t i, const char* what, const std::string& tensor) {
  const int64_t d = shape[i];
  if (d < 1 || d > std::numeric_limits<int>::max()) {
    bad_case(std::string(what) + " = " + std::to_string(d) + " (dim " + std::to_string(i) + " of " +
             tensor + " " + shape_string(shape) + ") must be in [1, " +
             std::to_string(std::numeric_limits<int>::max()) + "]");
  }
  return static_cast<int>(d);
}

CaseSpec read_spec(const GoldenCase& golden, const json& params) {
  const TensorStore& store = golden.store;
  CaseSpec spec;
  spec.params = params;

  while (store.contains(layer_name("mixed_qkv", spec.L))) ++spec.L;
  if (spec.L == 0) bad_case("no tensor 'mixed_qkv.l0': not a GDN golden case");
  const Shape x = shape_in(store, "mixed_qkv.l0");
  if (x.size() != 3) bad_case("mixed_qkv.l0 has shape " + shape_string(x) + ", expected [R, T, D]");
  spec.R = dim(x, 0, "R", "mixed_qkv.l0");
  spec.T = dim(x, 1, "T", "mixed_qkv.l0");
  spec.D = dim(x, 2, "conv_dim", "mixed_qkv.l0");
  const Shape cw = shape_in(store, "conv_weight.l0");
  if (cw.size() != 2 || cw[0] != spec.D || cw[1] < 2) {
    bad_case("conv_weight.l0 has shape " + shape_string(cw) + ", expected [" +
             std::to_string(spec.D) + ", W] with W >= 2");
  }
  spec.W = dim(cw, 1, "W", "conv_weight.l0");
  const Shape a = shape_in(store, "a.l0");
  if (a.size() != 3) bad_case("a.l0 has shape " + shape_string(a) + ", expected [R, T, HV]");
  spec.HV = dim(a, 2, "HV", "a.l0");
  const Shape ssm = shape_in(store, "ssm_state_init.l0");
  if (ssm.size() != 4 || ssm[1] != spec.HV) {
    bad_case("ssm_state_init.l0 has shape " + shape_string(ssm) + ", expected [S, " +
             std::to_string(spec.HV) + ", V, K]");
  }
  spec.S = dim(ssm, 0, "S", "ssm_state_init.l0");
  spec.V = dim(ssm, 2, "V", "ssm_state_init.l0");
  spec.K = dim(ssm, 3, "K", "ssm_state_init.l0");
  const int64_t qk = int64_t{spec.D} - int64_t{spec.HV} * spec.V;
  if (qk <= 0 || qk % (2 * spec.K) != 0) {
    bad_case("conv_dim " + std::to_string(spec.D) +
             " is not 2*H*K + HV*V for K=" + std::to_string(spec.K) +
             ", HV=" + std::to_string(spec.HV) + ", V=" + std::to_string(spec.V));
  }
  spec.H = static_cast<int>(qk / (2 * spec.K));

  const std::string from = "the tensor shapes";
  check_param(params, "L", spec.L, "the mixed_qkv.l<l> tensors");
  check_param(params, "rows", spec.R, from);
  check_param(params, "T", spec.T, from);
  check_param(params, "conv_dim", spec.D, from);
  check_param(params, "width", spec.W, from);
  check_param(params, "slots", spec.S, from);
  check_param(params, "H", spec.H, from);
  check_param(params, "HV", spec.HV, from);
  check_param(params, "K", spec.K, from);
  check_param(params, "V", spec.V, from);

  spec.conv_bias = store.contains("conv_bias.l0");
  const auto has_bias = params.find("has_conv_bias");
  if (has_bias != params.end() && has_bias->is_boolean() && *has_bias != spec.conv_bias) {
    bad_case(std::string("params_json has_conv_bias = ") + has_bias->dump() +
             " but conv_bias.l0 is " + (spec.conv_bias ? "present" : "absent"));
  }
  const auto scale = params.find("scale");
  if (scale != params.end() && scale->is_number()) spec.scale = scale->get<float>();

  // Storage dtypes. Without params_json a BF16-stored input means bf16 activations.
  const DType stored =
      store.info("mixed_qkv.l0").dtype == SafetensorsDType::kBF16 ? DType::kBF16 : DType::kF32;
  spec.act = required_dtype(params, "act_dtype", stored);
  spec.conv_state = required_dtype(params, "conv_state_dtype", spec.act);
  spec.ssm_state = required_dtype(params, "ssm_state_dtype", DType::kF32);
  spec.conv_weight = parameter_dtype(params, "conv_weight_dtype", spec.act, spec.notes);
  const DType gate = parameter_dtype(params, "gate_param_dtype", DType::kF32, spec.notes);
  spec.a_log = parameter_dtype(params, params.contains("A_log_dtype") ? "A_log_dtype" : "A_dtype",
                               gate, spec.notes);
  spec.dt_bias = parameter_dtype(params, "dt_bias_dtype", gate, spec.notes);

  // Every per-layer tensor must have the shape the sizes imply.
  for (int l = 0; l < spec.L; ++l) {
    expect_shape(store, layer_name("mixed_qkv", l), {spec.R, spec.T, spec.D});
    expect_shape(store, layer_name("a", l), {spec.R, spec.T, spec.HV});
    expect_shape(store, layer_name("b", l), {spec.R, spec.T, spec.HV});
    expect_shape(store, layer_name("conv_weight", l), {spec.D, spec.W});
    if (spec.conv_bias) expect_shape(store, layer_name("conv_bias", l), {spec.D});
    expect_shape(store, layer_name("A_log", l), {spec.HV});
    expect_shape(store, layer_name("dt_bias", l), {spec.HV});
    expect_shape(store, layer_name("conv_state_init", l), {spec.S, spec.D, spec.W - 1});
    expect_shape(store, layer_name("ssm_state_init", l), {spec.S, spec.HV, spec.V, spec.K});
  }

  // Index tensors.
  spec.cache_indices = store.to_int32("cache_indices");
  if (static_cast<int>(spec.cache_indices.size()) != spec.R) {
    bad_case("cache_indices has " + std::to_string(spec.cache_indices.size()) +
             " entries, expected R = " + std::to_string(spec.R));
  }
  spec.real.assign(spec.R, false);
  std::set<int32_t> used;
  for (int r = 0; r < spec.R; ++r) {
    const int32_t slot = spec.cache_indices[r];
    if (slot < -1 || slot >= spec.S) {
      bad_case("cache_indices[" + std::to_string(r) + "] = " + std::to_string(slot) +
               " outside [-1, " + std::to_string(spec.S) + ")");
    }
    if (slot >= 0 && !used.insert(slot).second) {
      bad_case("cache_indices names slot " + std::to_string(slot) + " twice");
    }
    spec.real[r] = slot >= 0;
    spec.n_real += slot >= 0;
  }
  if (store.contains("parents")) {
    spec.parents = store.to_int32("parents");
    if (static_cast<int>(spec.parents.size()) != spec.T) {
      bad_case("parents has " + std::to_string(spec.parents.size()) +
               " entries, expected T = " + std::to_string(spec.T));
    }
  } else {
    for (int t = 0; t < spec.T; ++t) spec.parents.push_back(t - 1);
  }
  bool chain = true;
  for (int t = 0; t < spec.T; ++t) chain = chain && spec.parents[t] == t - 1;
  const auto tree = params.find("tree");
  spec.tree = !chain || (tree != params.end() && tree->is_boolean() && tree->get<bool>());

  // Every index is range-checked before any arithmetic on it (accept_len - 1 of INT32_MIN
  // overflows) and before it indexes anything.
  const auto check_range = [&](const std::vector<int32_t>& values, const char* name, int32_t lo,
                               int32_t hi) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] < lo || values[i] > hi) {
        bad_case(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(values[i]) +
                 " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
    }
  };
  check_range(spec.parents, "parents", -1, spec.T - 1);
  if (store.contains("accept_len")) {
    spec.accept_len = store.to_int32("accept_len");
    check_range(spec.accept_len, "accept_len", 0, spec.T);
  }
  if (store.contains("last_step")) {
    spec.last_step = store.to_int32("last_step");
    check_range(spec.last_step, "last_step", -1, spec.T - 1);
  }
  if (spec.last_step.empty()) {
    if (spec.tree) bad_case("a tree case needs 'last_step' (the accepted node of each row)");
    if (spec.accept_len.empty()) bad_case("the case has neither 'accept_len' nor 'last_step'");
    for (int32_t n : spec.accept_len) spec.last_step.push_back(n - 1);
  }
  if (!spec.tree && spec.accept_len.empty()) {
    for (int32_t step : spec.last_step) spec.accept_len.push_back(step + 1);
  }
  if (static_cast<int>(spec.last_step.size()) != spec.R) {
    bad_case("last_step has " + std::to_string(spec.last_step.size()) + " entries, expected R");
  }
  if (!spec.tree && !spec.accept_len.empty()) {
    if (static_cast<int>(spec.accept_len.size()) != spec.R) {
      bad_case("accept_len has " + std::to_string(spec.accept_len.size()) + " entries, expected R");
    }
    for (int r = 0; r < spec.R; ++r) {
      if (spec.real[r] && spec.last_step[r] != spec.accept_len[r] - 1) {
        bad_case("row " + std::to_string(r) + ": last_step " + std::to_string(spec.last_step[r]) +
                 " != accept_len - 1 = " + std::to_string(spec.accept_len[r] - 1) +
                 " in a chain case");
      }
    }
  }
  for (int r = 0; r < spec.R; ++r) {
    if (!spec.real[r]) spec.last_step[r] = -1;  // a padding row keeps (and reads nothing)
  }
  return spec;
}

// --- comparisons ----------------------------------------------------------------------------

// max|ours - x| and max|x| over a set of elements, with where the largest difference sits.
struct Diff {
  double max_diff = 0.0;
  double max_ref = 0.0;
  bool nonfinite = false;
  std::string where;

  double rel() const {
    if (nonfinite) return kInf;
    if (max_ref > 0.0) return max_diff / max_ref;
    return max_diff > 0.0 ? kInf : 0.0;
  }
};

std::string index_string(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return shape_string(index);
}

// Adds ours vs x over the [outer, ...] tensor `shape`, skipping outer indices where !keep.
void accumulate(Diff& diff, const std::vector<float>& ours, const std::vector<float>& x,
                const Shape& shape, const std::vector<bool>* keep, const std::string& label) {
  const int64_t n = numel_of(shape);
  const int64_t inner = shape.empty() || shape[0] == 0 ? 0 : n / shape[0];
  for (int64_t i = 0; i < n; ++i) {
    if (keep != nullptr && !(*keep)[static_cast<std::size_t>(i / inner)]) continue;
    const double o = ours[i], r = x[i];
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (!diff.nonfinite) diff.where = label + " " + index_string(i, shape) + " non-finite";
      diff.nonfinite = true;
      continue;
    }
    diff.max_ref = std::max(diff.max_ref, std::abs(r));
    const double d = std::abs(o - r);
    if (d > diff.max_diff && !diff.nonfinite) diff.where = label + " " + index_string(i, shape);
    diff.max_diff = std::max(diff.max_diff, d);
  }
}

// What we produced for one layer, as floats in row-major order.
struct LayerResult {
  std::vector<float> conv_out, core_out;             // [R, T, D], [R, T, HV, V]
  std::vector<float> snap_conv, snap_ssm;            // [R, T, D, W-1], [R, T, HV, V, K]
  std::vector<float> conv_committed, ssm_committed;  // [S, D, W-1], [S, HV, V, K]
};

// One compared tensor over all layers: per layer max_rel, the worst layer counts.
class Comparison {
 public:
  Comparison(std::string tensor, double tol_ref, double tol_sglang)
      : tensor_(std::move(tensor)), tol_ref_(tol_ref), tol_sglang_(tol_sglang) {}

  // ours vs `name` (SGLang) and `ref_` + name, for one layer; absent tensors are skipped.
  void add_layer(const TensorStore& store, const std::string& name, const std::vector<float>& ours,
                 const Shape& shape, const std::vector<bool>* keep) {
    Diff sglang, ref;
    const bool has_s = add(store, name, ours, shape, keep, sglang);
    const bool has_r = add(store, "ref_" + name, ours, shape, keep, ref);
    finish_layer(has_s, sglang, has_r, ref);
  }

  // Several tensors (one per row) making one logical layer tensor (inter_ssm.l<l>.r<i>).
  void add_rows(const TensorStore& store, const std::vector<std::string>& names,
                const std::vector<std::vector<float>>& ours, const Shape& shape) {
    Diff sglang, ref;
    bool has_s = false, has_r = false;
    for (std::size_t i = 0; i < names.size(); ++i) {
      has_s = add(store, names[i], ours[i], shape, nullptr, sglang) || has_s;
      has_r = add(store, "ref_" + names[i], ours[i], shape, nullptr, ref) || has_r;
    }
    finish_layer(has_s, sglang, has_r, ref);
  }

  TensorComparison result(bool required) const {
    TensorComparison out;
    out.tensor = tensor_;
    out.has_sglang = has_sglang_;
    out.has_ref = has_ref_;
    out.vs_sglang = vs_sglang_;
    out.vs_ref = vs_ref_;
    out.tol_ref = tol_ref_;
    out.tol_sglang = tol_sglang_;
    out.worst = worst_;
    const bool ok_ref = !has_ref_ || vs_ref_ <= tol_ref_;
    const bool ok_sglang = !has_sglang_ || vs_sglang_ <= tol_sglang_;
    out.pass = ok_ref && ok_sglang && (has_ref_ || has_sglang_ || !required);
    if (!has_ref_ && !has_sglang_ && required) out.worst = "missing from the case";
    return out;
  }

 private:
  static bool add(const TensorStore& store, const std::string& name, const std::vector<float>& ours,
                  const Shape& shape, const std::vector<bool>* keep, Diff& diff) {
    if (!store.contains(name)) return false;
    expect_shape(store, name, shape);
    accumulate(diff, ours, store.to_float(name), shape, keep, name);
    return true;
  }

  void finish_layer(bool has_s, const Diff& sglang, bool has_r, const Diff& ref) {
    if (has_s) {
      has_sglang_ = true;
      if (!(sglang.rel() <= vs_sglang_)) {
        vs_sglang_ = sglang.rel();
        if (!has_r && !has_ref_) worst_ = sglang.where;
      }
    }
    if (has_r) {
      has_ref_ = true;
      if (!(ref.rel() <= vs_ref_)) {
        vs_ref_ = ref.rel();
        worst_ = ref.where;
      }
    }
  }

  std::string tensor_;
  double tol_ref_, tol_sglang_;
  bool has_sglang_ = false, has_ref_ = false;
  double vs_sglang_ = 0.0, vs_ref_ = 0.0;
  std::string worst_;
};

std::string describe(const CaseSpec& s, const GoldenOptions& options) {
  std::ostringstream out;
  out << "GDN " << (s.tree ? "tree" : "chain") << " T=" << s.T << ", rows=" << s.R << " ("
      << s.n_real << " real), L=" << s.L << ", H=" << s.H << " HV=" << s.HV << " K=" << s.K
      << " V=" << s.V << " W=" << s.W << ", slots=" << s.S << ", act " << dtype_name(s.act)
      << ", conv state " << dtype_name(s.conv_state) << ", ssm state " << dtype_name(s.ssm_state)
      << ", " << (s.conv_bias ? "conv bias" : "no conv bias") << ", A_log " << dtype_name(s.a_log)
      << ", dt_bias " << dtype_name(s.dt_bias) << ", backend " << backend_name(options.backend)
      << ", strategy " << strategy_name(options.strategy);
  for (const std::string& note : s.notes) out << "; " << note;
  return out.str();
}

// The raw bytes of a run, per layer: what two strategies must agree on bit for bit.
struct RunBytes {
  std::vector<std::vector<unsigned char>> conv_out, core_out, conv_committed, ssm_committed;
};

// The first layer and tensor where two runs differ, or "" when they are bit-identical.
std::string first_difference(const RunBytes& x, const RunBytes& y) {
  const std::pair<const char*, const std::vector<std::vector<unsigned char>> RunBytes::*>
      tensors[] = {{"conv_out", &RunBytes::conv_out},
                   {"core_out", &RunBytes::core_out},
                   {"conv_state_committed", &RunBytes::conv_committed},
                   {"ssm_state_committed", &RunBytes::ssm_committed}};
  for (const auto& [name, member] : tensors) {
    const auto& xs = x.*member;
    const auto& ys = y.*member;
    if (xs.size() != ys.size()) return std::string(name) + ": different layer counts";
    for (std::size_t l = 0; l < xs.size(); ++l) {
      if (xs[l] != ys[l]) return layer_name(name, static_cast<int>(l)) + " differs";
    }
  }
  return "";
}

// Runs the round and fills the report (and `bytes`, when given). Throws specstate::Error for
// problems of the case or the backend; the caller turns them into kError.
void run_gdn(const GoldenCase& golden, const CaseSpec& s, const GoldenOptions& options,
             GoldenReport& report, RunBytes* bytes = nullptr) {
  const bool snapshots = options.strategy == Strategy::kSnapshot;
  const TensorStore& store = golden.store;
  GdnConfig layer;
  layer.num_k_heads = s.H;
  layer.num_v_heads = s.HV;
  layer.head_k_dim = s.K;
  layer.head_v_dim = s.V;
  layer.conv_width = s.W;
  layer.scale = s.scale;
  layer.conv_bias = s.conv_bias;
  layer.act_dtype = s.act;
  layer.conv_state_dtype = s.conv_state;
  layer.ssm_state_dtype = s.ssm_state;
  PoolOptions pool_options;
  pool_options.num_slots = s.S;
  pool_options.max_rows = s.R;
  pool_options.max_window = s.T;
  pool_options.backend = options.backend;
  pool_options.strategy = options.strategy;
  StatePool pool(ModelConfig::gated_delta_net(s.L, layer), pool_options);
  std::unique_ptr<Memory> memory = make_memory(options.backend, pool_options.device);
  Memory& mem = *memory;

  // Slot s of the case is slot s of the pool: acquire all of them and index by slot.
  std::vector<SlotHandle> by_slot(s.S);
  for (int i = 0; i < s.S; ++i) {
    const SlotHandle handle = pool.acquire();
    by_slot.at(static_cast<std::size_t>(pool.slot_index(handle))) = handle;
  }

  std::vector<std::vector<unsigned char>> conv_before(s.L), ssm_before(s.L);
  for (int l = 0; l < s.L; ++l) {
    write_floats(mem, pool.conv_state(l), store.to_float(layer_name("conv_state_init", l)),
                 layer_name("conv_state_init", l));
    write_floats(mem, pool.ssm_state(l), store.to_float(layer_name("ssm_state_init", l)),
                 layer_name("ssm_state_init", l));
    conv_before[l] = read_bytes(mem, pool.conv_state(l), "conv_state");
    ssm_before[l] = read_bytes(mem, pool.ssm_state(l), "ssm_state");
  }

  VerifyBatch batch;
  batch.window = s.T;
  for (int r = 0; r < s.R; ++r) {
    batch.rows.push_back(s.real[r] ? by_slot[s.cache_indices[r]] : SlotHandle::padding());
  }
  if (s.tree) batch.parents = s.parents;
  pool.begin_verify(batch);

  const int64_t tokens = int64_t{s.R} * s.T;
  const std::vector<bool>& real = s.real;
  std::vector<LayerResult> ours(s.L);
  RunBytes run;
  run.conv_out.resize(s.L);
  run.core_out.resize(s.L);
  std::vector<std::vector<unsigned char>> snap_conv_bytes(s.L), snap_ssm_bytes(s.L);
  bool outputs_written = true;
  std::string unwritten;
  for (int l = 0; l < s.L; ++l) {
    auto name = [l](const char* base) { return layer_name(base, l); };
    GdnWeights weights;
    weights.conv_weight = upload(mem, store.to_float(name("conv_weight")), s.conv_weight,
                                 {s.D, s.W}, name("conv_weight"));
    if (s.conv_bias) {
      weights.conv_bias =
          upload(mem, store.to_float(name("conv_bias")), s.conv_weight, {s.D}, name("conv_bias"));
    }
    weights.A_log = upload(mem, store.to_float(name("A_log")), s.a_log, {s.HV}, name("A_log"));
    weights.dt_bias =
        upload(mem, store.to_float(name("dt_bias")), s.dt_bias, {s.HV}, name("dt_bias"));
    GdnInputs inputs;
    inputs.mixed_qkv =
        upload(mem, store.to_float(name("mixed_qkv")), s.act, {tokens, s.D}, name("mixed_qkv"));
    inputs.a = upload(mem, store.to_float(name("a")), s.act, {tokens, s.HV}, name("a"));
    inputs.b = upload(mem, store.to_float(name("b")), s.act, {tokens, s.HV}, name("b"));
    // Outputs start as NaN, so that a real row's output left unwritten cannot pass.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    GdnOutputs outputs;
    outputs.conv_out =
        upload(mem, std::vector<float>(tokens * s.D, nan), s.act, {tokens, s.D}, "conv_out", false);
    outputs.core_out = upload(mem, std::vector<float>(tokens * s.HV * s.V, nan), s.act,
                              {tokens, s.HV, s.V}, "core_out", false);
    pool.verify(l, weights, inputs, outputs);

    LayerResult& res = ours[l];
    run.conv_out[l] = read_bytes(mem, outputs.conv_out, "conv_out");
    run.core_out[l] = read_bytes(mem, outputs.core_out, "core_out");
    res.conv_out = decode(run.conv_out[l], s.act);
    res.core_out = decode(run.core_out[l], s.act);
    if (snapshots) {
      // Replay keeps no snapshots (records only): there is nothing to read.
      const TensorView snap_conv = leading_block(pool.snapshot_conv(l), s.R, s.T);
      const TensorView snap_ssm = leading_block(pool.snapshot_ssm(l), s.R, s.T);
      snap_conv_bytes[l] = read_bytes(mem, snap_conv, "snapshot_conv");
      snap_ssm_bytes[l] = read_bytes(mem, snap_ssm, "snapshot_ssm");
      res.snap_conv = decode(snap_conv_bytes[l], snap_conv.dtype);
      res.snap_ssm = decode(snap_ssm_bytes[l], snap_ssm.dtype);
    }

    const int64_t per_row_conv = int64_t{s.T} * s.D, per_row_core = int64_t{s.T} * s.HV * s.V;
    for (int r = 0; r < s.R && outputs_written; ++r) {
      if (!real[r]) continue;
      for (int64_t i = 0; i < per_row_conv; ++i) {
        if (std::isnan(res.conv_out[r * per_row_conv + i])) {
          outputs_written = false;
          unwritten = name("conv_out") + " row " + std::to_string(r);
          break;
        }
      }
      for (int64_t i = 0; i < per_row_core && outputs_written; ++i) {
        if (std::isnan(res.core_out[r * per_row_core + i])) {
          outputs_written = false;
          unwritten = name("core_out") + " row " + std::to_string(r);
        }
      }
    }
  }

  // Verify is pure (DESIGN.md section 7): the committed pool is bit-identical to before. (Under
  // replay too: the views materialize, and no slot of the case had pending steps.)
  std::string impure;
  for (int l = 0; l < s.L && impure.empty(); ++l) {
    if (read_bytes(mem, pool.conv_state(l), "conv_state") != conv_before[l]) {
      impure = "conv_state layer " + std::to_string(l) + " changed";
    } else if (read_bytes(mem, pool.ssm_state(l), "ssm_state") != ssm_before[l]) {
      impure = "ssm_state layer " + std::to_string(l) + " changed";
    }
  }

  std::vector<int32_t> accepted(s.R);
  for (int r = 0; r < s.R; ++r) {
    accepted[r] = s.tree ? s.last_step[r] : (s.real[r] ? s.accept_len[r] : 0);
  }
  if (mem.device() == Device::kCuda) {
    // The engine's path on a GPU: accepted values in device memory, checked by the commit kernel.
    void* data = mem.allocate(accepted.size() * sizeof(int32_t));
    mem.upload(data, accepted.data(), accepted.size() * sizeof(int32_t));
    pool.commit(make_view(data, DType::kI32, {s.R}, Device::kCuda));
    const Status status = pool.last_commit_status();
    if (status != Status::kSuccess) {
      throw Error(status, "StatePool::commit skipped rows of accepted " + list_string(accepted));
    }
  } else {
    pool.commit(accepted);
  }

  // Under replay the views materialize the accepted steps (re-run from the records with the
  // weights of the last verify, which are still alive in `mem`).
  std::vector<std::vector<unsigned char>> conv_after(s.L), ssm_after(s.L);
  for (int l = 0; l < s.L; ++l) {
    conv_after[l] = read_bytes(mem, pool.conv_state(l), "conv_state");
    ssm_after[l] = read_bytes(mem, pool.ssm_state(l), "ssm_state");
    ours[l].conv_committed = decode(conv_after[l], s.conv_state);
    ours[l].ssm_committed = decode(ssm_after[l], s.ssm_state);
  }

  // Commit copies the snapshot of the accepted step bit for bit; every other slot keeps its bytes.
  const std::size_t conv_slot = int64_t{s.D} * (s.W - 1) * dtype_size(s.conv_state);
  const std::size_t ssm_slot = int64_t{s.HV} * s.V * s.K * dtype_size(s.ssm_state);
  std::vector<int32_t> step_of_slot(s.S, -1);
  for (int r = 0; r < s.R; ++r) {
    if (s.real[r] && s.last_step[r] >= 0) step_of_slot[s.cache_indices[r]] = r;
  }
  std::string copy_error, keep_error;
  std::vector<int> kept;
  for (int slot = 0; slot < s.S; ++slot) {
    const int r = step_of_slot[slot];
    if (r < 0) kept.push_back(slot);
    for (int l = 0; l < s.L; ++l) {
      const unsigned char* conv_now = conv_after[l].data() + slot * conv_slot;
      const unsigned char* ssm_now = ssm_after[l].data() + slot * ssm_slot;
      if (r < 0) {
        if (keep_error.empty() &&
            (std::memcmp(conv_now, conv_before[l].data() + slot * conv_slot, conv_slot) != 0 ||
             std::memcmp(ssm_now, ssm_before[l].data() + slot * ssm_slot, ssm_slot) != 0)) {
          keep_error = "slot " + std::to_string(slot) + " layer " + std::to_string(l) + " changed";
        }
        continue;
      }
      const std::size_t snap = static_cast<std::size_t>(r) * s.T + s.last_step[r];
      if (snapshots && copy_error.empty() &&
          (std::memcmp(conv_now, snap_conv_bytes[l].data() + snap * conv_slot, conv_slot) != 0 ||
           std::memcmp(ssm_now, snap_ssm_bytes[l].data() + snap * ssm_slot, ssm_slot) != 0)) {
        copy_error = "slot " + std::to_string(slot) + " layer " + std::to_string(l) +
                     " differs from row " + std::to_string(r) + " step " +
                     std::to_string(s.last_step[r]);
      }
    }
  }
  report.checks.push_back(
      {"verify left the committed pool unchanged (bit-exact)", impure.empty(), impure});
  report.checks.push_back({"outputs of every real row written", outputs_written,
                           unwritten.empty() ? "" : unwritten + " still holds the NaN sentinel"});
  if (snapshots) {
    report.checks.push_back(
        {"commit = own snapshot at the accepted step (bit-exact)", copy_error.empty(), copy_error});
  } else {
    // The strategy-equivalence invariant (DESIGN.md section 7) on the golden inputs: the same
    // case through a snapshot pool on the same backend gives the same bytes.
    run.conv_committed = conv_after;
    run.ssm_committed = ssm_after;
    GoldenOptions snapshot_options = options;
    snapshot_options.strategy = Strategy::kSnapshot;
    GoldenReport snapshot_report;
    RunBytes snapshot_run;
    run_gdn(golden, s, snapshot_options, snapshot_report, &snapshot_run);
    const std::string differs = first_difference(run, snapshot_run);
    report.checks.push_back(
        {"outputs and commit = the snapshot strategy's (bit-exact)", differs.empty(), differs});
  }
  report.checks.push_back({"slots without a commit unchanged " + list_string(kept) + " (bit-exact)",
                           keep_error.empty(), keep_error});

  // Against SGLang and the float64 reference. Tolerances: tests/data/golden/README.md, per
  // activation dtype, against ref_*; against SGLang twice that (ours and SGLang's each within tol
  // of float64). Conv windows are copies of inputs: exact.
  const double tol = s.act == DType::kBF16 ? 1e-2 : 1e-5;
  Comparison conv_out("conv_out", tol, 2 * tol), window("inter_conv_window", 0.0, 0.0),
      core_out("core_out", tol, 2 * tol), inter_ssm("inter_ssm", tol, 2 * tol),
      conv_committed("conv_state_committed", 0.0, 0.0),
      ssm_committed("ssm_state_committed", tol, 2 * tol);
  for (int l = 0; l < s.L; ++l) {
    const LayerResult& res = ours[l];
    conv_out.add_layer(store, layer_name("conv_out", l), res.conv_out, {s.R, s.T, s.D}, &real);
    core_out.add_layer(store, layer_name("core_out", l), res.core_out, {s.R, s.T, s.HV, s.V},
                       &real);
    if (snapshots) {
      window.add_layer(store, layer_name("inter_conv_window", l), res.snap_conv,
                       {s.R, s.T, s.D, s.W - 1}, &real);
      std::vector<std::string> names;
      std::vector<std::vector<float>> rows;
      const int64_t per_row = int64_t{s.T} * s.HV * s.V * s.K;
      for (int r = 0; r < s.R; ++r) {
        if (!real[r]) continue;
        names.push_back(layer_name("inter_ssm", l) + ".r" + std::to_string(r));
        rows.emplace_back(res.snap_ssm.begin() + r * per_row,
                          res.snap_ssm.begin() + (r + 1) * per_row);
      }
      inter_ssm.add_rows(store, names, rows, {s.T, s.HV, s.V, s.K});
    }
    conv_committed.add_layer(store, layer_name("conv_state_committed", l), res.conv_committed,
                             {s.S, s.D, s.W - 1}, nullptr);
    ssm_committed.add_layer(store, layer_name("ssm_state_committed", l), res.ssm_committed,
                            {s.S, s.HV, s.V, s.K}, nullptr);
  }
  if (snapshots) {
    report.tensors = {conv_out.result(true),       window.result(false),
                      core_out.result(true),       inter_ssm.result(false),
                      conv_committed.result(true), ssm_committed.result(true)};
  } else {
    report.tensors = {conv_out.result(true), core_out.result(true), conv_committed.result(true),
                      ssm_committed.result(true)};
    report.notes.push_back(
        "intermediate snapshots (inter_conv_window, inter_ssm): n/a under replay (the strategy "
        "keeps none)");
  }
  if (bytes != nullptr) {
    run.conv_committed = std::move(conv_after);
    run.ssm_committed = std::move(ssm_after);
    *bytes = std::move(run);
  }

  bool pass = true;
  for (const auto& t : report.tensors) pass = pass && t.pass;
  for (const auto& c : report.checks) pass = pass && c.pass;
  report.outcome = pass ? GoldenOutcome::kPass : GoldenOutcome::kFail;
}

std::string format_rel(double value) {
  if (std::isinf(value)) return "inf";
  std::ostringstream out;
  out << std::scientific << std::setprecision(2) << value;
  return out.str();
}

int part_number(const SafetensorsFile& file, const char* key, int fallback) {
  const std::string text = file.metadata_value(key);
  if (text.empty()) return fallback;
  try {
    std::size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error(Status::kInvalidArgument,
              "'" + file.path() + "': metadata " + key + " = '" + text + "' is not an integer");
}

}  // namespace

bool cuda_device_available() noexcept {
#if defined(SPECSTATE_CLI_CUDA)
  static const bool available = [] {
    int count = 0;
    // Fails (cudaErrorInsufficientDriver, 35) on machines without a driver.
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return available;
#else
  return false;
#endif
}

bool GoldenReport::counts_as_failure() const noexcept {
  switch (outcome) {
    case GoldenOutcome::kPass:
      return false;
    case GoldenOutcome::kNotSupported:
      return named_explicitly;
    case GoldenOutcome::kFail:
    case GoldenOutcome::kError:
      return true;
  }
  return true;
}

GoldenCase make_golden_case(std::vector<SafetensorsFile> parts, bool named_explicitly) {
  if (parts.empty()) throw Error(Status::kInvalidArgument, "a golden case needs at least one file");
  GoldenCase golden;
  golden.named_explicitly = named_explicitly;
  golden.name = parts.front().metadata_value("case", parts.front().path());
  const int nparts = part_number(parts.front(), "nparts", 1);
  std::map<int, std::size_t> by_part;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const SafetensorsFile& file = parts[i];
    const std::string name = file.metadata_value("case", file.path());
    if (name != golden.name) {
      throw Error(Status::kInvalidArgument,
                  "'" + file.path() + "' is case '" + name + "', not case '" + golden.name + "'");
    }
    if (part_number(file, "nparts", 1) != nparts) {
      throw Error(Status::kInvalidArgument,
                  "'" + file.path() + "': nparts = " + file.metadata_value("nparts", "1") +
                      " but the other parts of case " + golden.name + " say " +
                      std::to_string(nparts));
    }
    const int part = part_number(file, "part", 0);
    if (part < 0 || part >= nparts) {
      throw Error(Status::kInvalidArgument, "'" + file.path() + "': part " + std::to_string(part) +
                                                " outside [0, " + std::to_string(nparts) + ")");
    }
    if (!by_part.emplace(part, i).second) {
      throw Error(Status::kInvalidArgument,
                  "case " + golden.name + ": part " + std::to_string(part) + " given twice ('" +
                      parts[by_part[part]].path() + "' and '" + file.path() + "')");
    }
  }
  if (static_cast<int>(by_part.size()) != nparts) {
    std::string missing;
    for (int p = 0; p < nparts; ++p) {
      if (!by_part.count(p)) missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    }
    throw Error(Status::kInvalidArgument, "case " + golden.name + " has " + std::to_string(nparts) +
                                              " parts; missing part(s) " + missing +
                                              " (pass every file of the case)");
  }
  for (const auto& kv : by_part) {
    golden.files.push_back(parts[kv.second].path());
    golden.store.add(std::move(parts[kv.second]));
  }
  return golden;
}

GoldenInputs load_golden_inputs(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  GoldenInputs inputs;
  // (path, named explicitly), without repeats: a file named both ways counts as named.
  std::vector<std::pair<std::string, bool>> files;
  std::map<std::string, std::size_t> seen;
  auto add_file = [&](const std::string& path, bool named) {
    std::error_code ec;
    const std::string key = fs::weakly_canonical(path, ec).string();
    const auto it = seen.find(ec ? path : key);
    if (it != seen.end()) {
      files[it->second].second = files[it->second].second || named;
      return;
    }
    seen.emplace(ec ? path : key, files.size());
    files.emplace_back(path, named);
  };
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
          found.push_back(entry.path().string());
        }
      }
      if (ec) inputs.errors.push_back({path, "cannot list the folder: " + ec.message(), true});
      std::sort(found.begin(), found.end());
      if (found.empty()) inputs.errors.push_back({path, "no *.safetensors file in folder", true});
      for (const std::string& f : found) add_file(f, false);
    } else {
      add_file(path, true);
    }
  }

  // Group by case, keeping the order in which cases first appear.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::pair<SafetensorsFile, bool>>> groups;
  for (const auto& [path, named] : files) {
    try {
      SafetensorsFile file(path);
      const std::string name = file.metadata_value("case", path);
      if (!groups.count(name)) order.push_back(name);
      groups[name].emplace_back(std::move(file), named);
    } catch (const std::exception& e) {
      inputs.errors.push_back({path, e.what(), named});
    }
  }
  for (const std::string& name : order) {
    auto& group = groups[name];
    bool named = false;
    std::vector<SafetensorsFile> parts;
    std::string listed;
    for (auto& [file, explicit_file] : group) {
      named = named || explicit_file;
      listed += (listed.empty() ? "" : ", ") + file.path();
      parts.push_back(std::move(file));
    }
    try {
      inputs.cases.push_back(make_golden_case(std::move(parts), named));
    } catch (const std::exception& e) {
      inputs.errors.push_back({listed, e.what(), named});
    }
  }
  return inputs;
}

GoldenReport run_golden_case(const GoldenCase& golden, const GoldenOptions& options) {
  GoldenReport report;
  report.case_name = golden.name;
  report.files = golden.files;
  report.named_explicitly = golden.named_explicitly;
  try {
    const json params = case_params(golden);
    if (is_mamba2(golden, params)) {
      run_mamba2_golden_case(golden, params, options, report);  // cli/golden_mamba2.cpp
      return report;
    }
    const CaseSpec spec = read_spec(golden, params);
    report.description = describe(spec, options);
    run_gdn(golden, spec, options, report);
  } catch (const Error& e) {
    report.outcome = GoldenOutcome::kError;
    report.tensors.clear();
    report.checks.clear();
    report.message = e.status() == Status::kNotSupported && options.backend == Backend::kCuda
                         ? std::string("backend cuda unavailable: ") + e.what()
                         : e.what();
  } catch (const std::exception& e) {
    report.outcome = GoldenOutcome::kError;
    report.tensors.clear();
    report.checks.clear();
    report.message = e.what();
  }
  return report;
}

void print_golden_report(std::ostream& out, const GoldenReport& report) {
  out << "case " << report.case_name << " (";
  for (std::size_t i = 0; i < report.files.size(); ++i) {
    out << (i ? ", " : "") << std::filesystem::path(report.files[i]).filename().string();
  }
  out << ")\n";
  if (!report.description.empty()) out << "  " << report.description << "\n";
  if (report.outcome == GoldenOutcome::kNotSupported) {
    out << "  " << report.message << "\n";
    out << (report.named_explicitly
                ? "  FAIL (counted as a failure: the file was named explicitly)\n"
                : "  SKIP (found in a folder, not counted; name the file to make it count)\n");
    return;
  }
  if (report.outcome == GoldenOutcome::kError) {
    out << "  error: " << report.message << "\n  FAIL\n";
    return;
  }
  out << "  " << std::left << std::setw(22) << "tensor" << std::setw(12) << "vs sglang"
      << std::setw(12) << "vs f64 ref" << std::setw(20) << "tolerance (ref/sgl)"
      << "result\n";
  for (const TensorComparison& t : report.tensors) {
    std::ostringstream tol;
    tol << (t.tol_ref == 0 ? "exact" : format_rel(t.tol_ref)) << "/"
        << (t.tol_sglang == 0 ? "exact" : format_rel(t.tol_sglang));
    out << "  " << std::setw(22) << t.tensor << std::setw(12)
        << (t.has_sglang ? format_rel(t.vs_sglang) : "absent") << std::setw(12)
        << (t.has_ref ? format_rel(t.vs_ref) : "absent") << std::setw(20) << tol.str()
        << (t.pass ? "ok" : "FAIL");
    if (!t.has_ref && !t.has_sglang) {
      out << (t.pass ? "  (not in the case)" : "  (missing from the case)");
    } else if (!t.pass && !t.worst.empty()) {
      out << "  worst at " << t.worst;
    }
    out << "\n";
  }
  for (const std::string& note : report.notes) out << "  " << note << "\n";
  for (const PropertyCheck& c : report.checks) {
    out << "  check " << c.name << ": " << (c.pass ? "ok" : "FAIL");
    if (!c.pass && !c.detail.empty()) out << " (" << c.detail << ")";
    out << "\n";
  }
  out << std::right << "  " << (report.outcome == GoldenOutcome::kPass ? "PASS" : "FAIL") << "\n";
}

int check_golden(const std::vector<std::string>& paths, const GoldenOptions& options,
                 std::ostream& out) {
  const GoldenInputs inputs = load_golden_inputs(paths);
  int passed = 0, failed = 0, skipped = 0;
  for (const GoldenLoadError& error : inputs.errors) {
    out << "error: " << error.file << ": " << error.message << "\n  FAIL\n";
    ++failed;
  }
  for (const GoldenCase& golden : inputs.cases) {
    const GoldenReport report = run_golden_case(golden, options);
    print_golden_report(out, report);
    if (report.outcome == GoldenOutcome::kPass) {
      ++passed;
    } else if (report.counts_as_failure()) {
      ++failed;
    } else {
      ++skipped;
    }
  }
  if (inputs.cases.empty() && inputs.errors.empty()) {
    out << "error: no golden case given\n";
    ++failed;
  }
  out << "check-golden (" << backend_name(options.backend) << ", "
      << strategy_name(options.strategy) << "): " << passed << " passed, " << failed << " failed";
  if (skipped > 0) out << ", " << skipped << " not supported (not counted)";
  out << "\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace specstate::cli
