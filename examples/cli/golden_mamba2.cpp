// check-golden for Mamba2 cases (golden_mamba2.h). The case holds, per layer l, the inputs of one
// verify round (xBC.l, dt.l, z.l, conv_weight.l, conv_bias.l, A_log.l, dt_bias.l, D.l,
// conv_state_init.l, ssm_state_init.l), SGLang's results (conv_out.l, core_out.l,
// inter_conv_window.l, inter_ssm.l.r<i>, conv_state_committed.l, ssm_state_committed.l) and the
// float64 reference of the same (ref_*). Tolerances: the README's, per activation dtype, against
// ref_*; twice that against SGLang; conv windows and the committed conv pool exactly.
#include "cli/golden_mamba2.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "specstate/specstate.h"

#if defined(SPECSTATE_CLI_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace specstate::cli {
namespace {

using json = nlohmann::json;
using Shape = std::vector<int64_t>;
using Bytes = std::vector<unsigned char>;

constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] void bad_case(const std::string& message) {
  throw Error(Status::kInvalidArgument, "Mamba2 case: " + message);
}

std::string shape_string(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::string lname(const std::string& base, int layer) {
  return base + ".l" + std::to_string(layer);
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// --- the memory the pool's backend reads (host, or device through the CUDA runtime) ----------

class Memory {
 public:
  explicit Memory(Backend backend)
      : device_(backend == Backend::kCuda ? Device::kCuda : Device::kCpu) {
#if !defined(SPECSTATE_CLI_CUDA)
    if (device_ == Device::kCuda) {
      throw Error(Status::kNotSupported,
                  "check-golden was built without the CUDA runtime, so it cannot copy to or from "
                  "the pool's device memory (--backend cuda)");
    }
#endif
  }
  ~Memory() {
    for (void* p : device_blocks_) {
#if defined(SPECSTATE_CLI_CUDA)
      cudaFree(p);
#else
      (void)p;
#endif
    }
  }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;

  Device device() const noexcept { return device_; }

  // A contiguous view of `shape` holding `bytes`.
  TensorView put(const Bytes& bytes, DType dtype, const Shape& shape) {
    void* data = nullptr;
    if (device_ == Device::kCpu) {
      host_blocks_.emplace_back(bytes.empty() ? Bytes(1) : bytes);
      data = host_blocks_.back().data();
    } else {
#if defined(SPECSTATE_CLI_CUDA)
      check(cudaMalloc(&data, bytes.empty() ? 1 : bytes.size()), "cudaMalloc");
      device_blocks_.push_back(data);
      upload(data, bytes.data(), bytes.size());
#endif
    }
    return view(data, dtype, shape);
  }
  TensorView view(void* data, DType dtype, const Shape& shape) const {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device_;
    v.ndim = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[i];
      v.stride[i] = stride;
      stride *= shape[i];
    }
    return v;
  }
  // The bytes of a contiguous view (the pool's views and ours are all contiguous).
  Bytes read(const TensorView& v) const {
    if (!v.is_contiguous()) bad_case("internal: a non-contiguous view was read");
    Bytes out(static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype));
    if (device_ == Device::kCpu) {
      std::memcpy(out.data(), v.data, out.size());
    } else {
      download(out.data(), v.data, out.size());
    }
    return out;
  }
  void write(const TensorView& v, const Bytes& bytes) const {
    if (!v.is_contiguous() || bytes.size() != v.numel() * dtype_size(v.dtype)) {
      bad_case("internal: a write does not fit its view");
    }
    if (device_ == Device::kCpu) {
      std::memcpy(v.data, bytes.data(), bytes.size());
    } else {
      upload(v.data, bytes.data(), bytes.size());
    }
  }

 private:
#if defined(SPECSTATE_CLI_CUDA)
  static void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
      throw Error(Status::kBackendError, std::string(what) + ": " + cudaGetErrorString(err));
    }
  }
  static void upload(void* dst, const void* src, std::size_t n) {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy host to device");
  }
  static void download(void* dst, const void* src, std::size_t n) {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy device to host");
  }
#else
  static void upload(void*, const void*, std::size_t) {}
  static void download(void*, const void*, std::size_t) {}
#endif
  Device device_;
  std::vector<Bytes> host_blocks_;
  std::vector<void*> device_blocks_;
};

// Floats in a storage dtype; a value a bf16 tensor cannot hold exactly means a wrong dtype.
Bytes encode(const std::vector<float>& values, DType dtype, const std::string& what, bool exact) {
  Bytes out(values.size() * dtype_size(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = bf16_from_float(values[i]);
    if (exact && float_from_bf16(bits) != values[i] && !std::isnan(values[i])) {
      bad_case(what + "[" + std::to_string(i) + "] = " + std::to_string(values[i]) +
               " is not a bf16 value, yet the case declares it bf16");
    }
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

std::vector<float> decode(const Bytes& bytes, DType dtype) {
  const std::size_t n = bytes.size() / dtype_size(dtype);
  std::vector<float> out(n);
  if (dtype == DType::kF32) {
    std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = float_from_bf16(bits);
    }
  }
  return out;
}

// --- the case's parameters ------------------------------------------------------------------

struct Spec {
  int L = 0, R = 0, T = 0, Dc = 0, W = 0, S = 0, H = 0, P = 0, N = 0, G = 0;
  bool conv_bias = false, d_skip = false, gate = false;
  DType act = DType::kF32, conv_state = DType::kF32, ssm_state = DType::kF32;
  // Each gate parameter has its own dtype, as engines hold them (vLLM / SGLang keep Nemotron-H's
  // A_log in f32, dt_bias and D in bf16): params_json's A_dtype (or A_log_dtype), dt_bias_dtype
  // and D_dtype; the last two fall back to the shared dt_bias_D_dtype, A_log to f32 (which passes
  // a bf16 value as the same number).
  DType conv_weight = DType::kF32, a_log = DType::kF32, dt_bias = DType::kF32, d = DType::kF32;
  std::vector<int32_t> cache_indices, accept_len, last_step;
  std::vector<bool> real;  // [R]
  int n_real = 0;
};

Shape shape_of(const TensorStore& store, const std::string& name) {
  if (!store.contains(name)) bad_case("the case has no tensor '" + name + "'");
  return store.info(name).shape;
}

void expect_shape(const TensorStore& store, const std::string& name, const Shape& expected) {
  const Shape got = shape_of(store, name);
  if (got != expected) {
    bad_case("tensor '" + name + "' has shape " + shape_string(got) + ", expected " +
             shape_string(expected));
  }
}

int dim(const Shape& shape, std::size_t i, const char* what, const std::string& tensor) {
  if (i >= shape.size() || shape[i] < 1 || shape[i] > std::numeric_limits<int>::max()) {
    bad_case(std::string(what) + " (dim " + std::to_string(i) + " of " + tensor + " " +
             shape_string(shape) + ") must be in [1, 2^31 - 1]");
  }
  return static_cast<int>(shape[i]);
}

DType dtype_param(const json& params, const char* key, DType fallback) {
  const auto it = params.find(key);
  if (it == params.end()) return fallback;
  const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
  if (text == "f32" || text == "float32" || text == "torch.float32") return DType::kF32;
  if (text == "bf16" || text == "bfloat16" || text == "torch.bfloat16") return DType::kBF16;
  bad_case(std::string("params_json '") + key + "' = " + text + ": check-golden knows f32, bf16");
}

void check_param(const json& params, const char* key, int64_t value) {
  const auto it = params.find(key);
  if (it == params.end()) return;
  if (!it->is_number_integer() || it->get<int64_t>() != value) {
    bad_case(std::string("params_json '") + key + "' = " + it->dump() +
             " but the tensor shapes give " + std::to_string(value));
  }
}

bool flag_param(const json& params, const char* key, bool from_tensors, const char* tensor) {
  const auto it = params.find(key);
  if (it != params.end() && it->is_boolean() && it->get<bool>() != from_tensors) {
    bad_case(std::string("params_json ") + key + " = " + it->dump() + " but " + tensor + " is " +
             (from_tensors ? "present" : "absent"));
  }
  return from_tensors;
}

Spec read_spec(const TensorStore& store, const json& params) {
  Spec s;
  while (store.contains(lname("xBC", s.L))) ++s.L;
  if (s.L == 0) bad_case("no tensor 'xBC.l0'");
  const Shape x = shape_of(store, "xBC.l0");
  if (x.size() != 3) bad_case("xBC.l0 has shape " + shape_string(x) + ", expected [R, T, Dc]");
  s.R = dim(x, 0, "R", "xBC.l0");
  s.T = dim(x, 1, "T", "xBC.l0");
  s.Dc = dim(x, 2, "conv_dim", "xBC.l0");
  const Shape cw = shape_of(store, "conv_weight.l0");
  if (cw.size() != 2 || cw[0] != s.Dc) {
    bad_case("conv_weight.l0 has shape " + shape_string(cw) + ", expected [Dc, W]");
  }
  s.W = dim(cw, 1, "W", "conv_weight.l0");
  if (s.W < 2) bad_case("conv width W = " + std::to_string(s.W) + " must be >= 2");
  const Shape ssm = shape_of(store, "ssm_state_init.l0");
  if (ssm.size() != 4) {
    bad_case("ssm_state_init.l0 has shape " + shape_string(ssm) + ", expected [S, H, P, N]");
  }
  s.S = dim(ssm, 0, "S", "ssm_state_init.l0");
  s.H = dim(ssm, 1, "H", "ssm_state_init.l0");
  s.P = dim(ssm, 2, "P", "ssm_state_init.l0");
  s.N = dim(ssm, 3, "N", "ssm_state_init.l0");
  const int64_t bc = int64_t{s.Dc} - int64_t{s.H} * s.P;
  if (bc <= 0 || bc % (2 * int64_t{s.N}) != 0) {
    bad_case("conv_dim " + std::to_string(s.Dc) + " is not H*P + 2*G*N for H=" +
             std::to_string(s.H) + ", P=" + std::to_string(s.P) + ", N=" + std::to_string(s.N));
  }
  s.G = static_cast<int>(bc / (2 * int64_t{s.N}));
  if (s.H % s.G != 0) {
    bad_case("H = " + std::to_string(s.H) + " is not a multiple of G = " + std::to_string(s.G));
  }
  check_param(params, "L", s.L);
  check_param(params, "rows", s.R);
  check_param(params, "T", s.T);
  check_param(params, "conv_dim", s.Dc);
  check_param(params, "width", s.W);
  check_param(params, "slots", s.S);
  check_param(params, "nheads", s.H);
  check_param(params, "head_dim", s.P);
  check_param(params, "d_state", s.N);
  check_param(params, "n_groups", s.G);
  s.conv_bias = flag_param(params, "has_conv_bias", store.contains("conv_bias.l0"), "conv_bias.l0");
  s.d_skip = flag_param(params, "has_D", store.contains("D.l0"), "D.l0");
  s.gate = flag_param(params, "has_z", store.contains("z.l0"), "z.l0");
  const auto softplus = params.find("dt_softplus");
  if (softplus != params.end() && softplus->is_boolean() && !softplus->get<bool>()) {
    bad_case("params_json dt_softplus = false: specstate always applies softplus to dt");
  }
  const auto threshold = params.find("softplus_threshold");
  if (threshold != params.end() && (!threshold->is_number() || threshold->get<double>() != 20.0)) {
    bad_case("params_json softplus_threshold = " + threshold->dump() + ": specstate uses 20");
  }
  const DType stored =
      store.info("xBC.l0").dtype == SafetensorsDType::kBF16 ? DType::kBF16 : DType::kF32;
  s.act = dtype_param(params, "act_dtype", stored);
  s.conv_state = dtype_param(params, "conv_state_dtype", s.act);
  s.ssm_state = dtype_param(params, "ssm_state_dtype", DType::kF32);
  s.conv_weight = dtype_param(params, "conv_weight_dtype", s.act);
  const DType dt_bias_D = dtype_param(params, "dt_bias_D_dtype", DType::kF32);
  s.a_log =
      dtype_param(params, params.contains("A_log_dtype") ? "A_log_dtype" : "A_dtype", DType::kF32);
  s.dt_bias = dtype_param(params, "dt_bias_dtype", dt_bias_D);
  s.d = dtype_param(params, "D_dtype", dt_bias_D);
  for (int l = 0; l < s.L; ++l) {
    expect_shape(store, lname("xBC", l), {s.R, s.T, s.Dc});
    expect_shape(store, lname("dt", l), {s.R, s.T, s.H});
    if (s.gate) expect_shape(store, lname("z", l), {s.R, s.T, s.H, s.P});
    expect_shape(store, lname("conv_weight", l), {s.Dc, s.W});
    if (s.conv_bias) expect_shape(store, lname("conv_bias", l), {s.Dc});
    expect_shape(store, lname("A_log", l), {s.H});
    expect_shape(store, lname("dt_bias", l), {s.H});
    if (s.d_skip) expect_shape(store, lname("D", l), {s.H});
    expect_shape(store, lname("conv_state_init", l), {s.S, s.Dc, s.W - 1});
    expect_shape(store, lname("ssm_state_init", l), {s.S, s.H, s.P, s.N});
  }
  if (store.contains("parents")) {
    const std::vector<int32_t> parents = store.to_int32("parents");
    for (int t = 0; t < static_cast<int>(parents.size()); ++t) {
      if (static_cast<int>(parents.size()) != s.T || parents[t] != t - 1) {
        bad_case("parents is not the chain [-1, 0, ..., T-2]: Mamba2 cases are chains");
      }
    }
  }
  s.cache_indices = store.to_int32("cache_indices");
  if (static_cast<int>(s.cache_indices.size()) != s.R) {
    bad_case("cache_indices has " + std::to_string(s.cache_indices.size()) +
             " entries, R = " + std::to_string(s.R));
  }
  s.accept_len = store.to_int32("accept_len");
  if (static_cast<int>(s.accept_len.size()) != s.R) {
    bad_case("accept_len has " + std::to_string(s.accept_len.size()) +
             " entries, R = " + std::to_string(s.R));
  }
  std::set<int32_t> used;
  s.real.assign(s.R, false);
  s.last_step.assign(s.R, -1);
  const std::vector<int32_t> last =
      store.contains("last_step") ? store.to_int32("last_step") : std::vector<int32_t>{};
  for (int r = 0; r < s.R; ++r) {
    const int32_t slot = s.cache_indices[r], a = s.accept_len[r];
    if (slot < -1 || slot >= s.S) {
      bad_case("cache_indices[" + std::to_string(r) + "] = " + std::to_string(slot) +
               " outside [-1, " + std::to_string(s.S) + ")");
    }
    if (slot >= 0 && !used.insert(slot).second) {
      bad_case("cache_indices names slot " + std::to_string(slot) + " twice");
    }
    if (a < 0 || a > s.T) {
      bad_case("accept_len[" + std::to_string(r) + "] = " + std::to_string(a) + " outside [0, " +
               std::to_string(s.T) + "]");
    }
    if (slot < 0 && a != 0) {
      bad_case("accept_len[" + std::to_string(r) + "] = " + std::to_string(a) +
               " for a padded row (must be 0)");
    }
    if (!last.empty() && (last.size() != s.accept_len.size() || (slot >= 0 && last[r] != a - 1))) {
      bad_case("last_step[" + std::to_string(r) + "] != accept_len - 1 in a chain case");
    }
    s.real[r] = slot >= 0;
    s.n_real += slot >= 0;
    s.last_step[r] = slot >= 0 ? a - 1 : -1;
  }
  return s;
}

// --- comparisons ----------------------------------------------------------------------------

struct Diff {
  double max_diff = 0, max_ref = 0;
  bool nonfinite = false;
  std::string where;
  double rel() const {
    if (nonfinite) return kInf;
    if (max_ref > 0) return max_diff / max_ref;
    return max_diff > 0 ? kInf : 0.0;
  }
};

// ours vs `x` over a [outer, ...] tensor of `shape`, skipping outer indices where !keep.
void accumulate(Diff& d, const std::vector<float>& ours, const std::vector<float>& x,
                const Shape& shape, const std::vector<bool>* keep, const std::string& label) {
  const int64_t n = numel(shape), inner = n / shape[0];
  for (int64_t i = 0; i < n; ++i) {
    if (keep && !(*keep)[static_cast<std::size_t>(i / inner)]) continue;
    const double o = ours[i], r = x[i];
    if (!std::isfinite(o) || !std::isfinite(r)) {
      if (!d.nonfinite) d.where = label + " element " + std::to_string(i) + " non-finite";
      d.nonfinite = true;
      continue;
    }
    d.max_ref = std::max(d.max_ref, std::abs(r));
    if (std::abs(o - r) > d.max_diff && !d.nonfinite) {
      d.max_diff = std::abs(o - r);
      d.where = label + " element " + std::to_string(i);
    }
  }
}

// One tensor over every layer (the worst layer counts), against SGLang and ref_*.
class Comparison {
 public:
  Comparison(std::string tensor, double tol) : tensor_(std::move(tensor)), tol_(tol) {}
  // `names[i]` holds `ours[i]` of `shape` (one name per layer, or per layer and row).
  void add(const TensorStore& store, const std::string& name, const std::vector<float>& ours,
           const Shape& shape, const std::vector<bool>* keep) {
    for (const bool ref : {false, true}) {
      const std::string full = ref ? "ref_" + name : name;
      if (!store.contains(full)) continue;
      expect_shape(store, full, shape);
      Diff d;
      accumulate(d, ours, store.to_float(full), shape, keep, full);
      double& worst = ref ? vs_ref_ : vs_sglang_;
      (ref ? has_ref_ : has_sglang_) = true;
      if (!(d.rel() <= worst)) {
        worst = d.rel();
        if (ref || !has_ref_) where_ = d.where;
      }
    }
  }
  TensorComparison result() const {
    TensorComparison out;
    out.tensor = tensor_;
    out.has_sglang = has_sglang_;
    out.has_ref = has_ref_;
    out.vs_sglang = vs_sglang_;
    out.vs_ref = vs_ref_;
    out.tol_ref = tol_;
    out.tol_sglang = 2 * tol_;
    out.worst = has_ref_ || has_sglang_ ? where_ : "missing from the case";
    out.pass = (has_ref_ || has_sglang_) && (!has_ref_ || vs_ref_ <= tol_) &&
               (!has_sglang_ || vs_sglang_ <= 2 * tol_);
    return out;
  }

 private:
  std::string tensor_;
  double tol_;
  bool has_sglang_ = false, has_ref_ = false;
  double vs_sglang_ = 0, vs_ref_ = 0;
  std::string where_;
};

std::string describe(const Spec& s, const GoldenOptions& options) {
  std::ostringstream out;
  out << "Mamba2 chain T=" << s.T << ", rows=" << s.R << " (" << s.n_real << " real), L=" << s.L
      << ", nheads=" << s.H << " P=" << s.P << " N=" << s.N << " G=" << s.G << " W=" << s.W
      << ", slots=" << s.S << ", act " << dtype_name(s.act) << ", conv state "
      << dtype_name(s.conv_state) << ", ssm state " << dtype_name(s.ssm_state) << ", "
      << (s.conv_bias ? "conv bias" : "no conv bias") << ", " << (s.d_skip ? "D" : "no D") << ", "
      << (s.gate ? "z gate" : "no gate") << ", A_log " << dtype_name(s.a_log) << ", dt_bias "
      << dtype_name(s.dt_bias) << (s.d_skip ? std::string(", D ") + dtype_name(s.d) : "")
      << ", backend " << backend_name(options.backend) << ", strategy "
      << strategy_name(options.strategy);
  return out.str();
}

// What two strategies must agree on bit for bit, per layer.
struct RunBytes {
  std::vector<Bytes> conv_out, y, conv_committed, ssm_committed;
};

std::string first_difference(const RunBytes& x, const RunBytes& y) {
  const std::pair<const char*, std::vector<Bytes> RunBytes::*> tensors[] = {
      {"conv_out", &RunBytes::conv_out},
      {"core_out", &RunBytes::y},
      {"conv_state_committed", &RunBytes::conv_committed},
      {"ssm_state_committed", &RunBytes::ssm_committed}};
  for (const auto& [name, member] : tensors) {
    for (std::size_t l = 0; l < (x.*member).size(); ++l) {
      if (l >= (y.*member).size() || (x.*member)[l] != (y.*member)[l]) {
        return lname(name, static_cast<int>(l)) + " differs";
      }
    }
  }
  return "";
}

void run_case(const TensorStore& store, const Spec& s, const GoldenOptions& options,
              GoldenReport& report, RunBytes* bytes_out) {
  const bool snapshots = options.strategy == Strategy::kSnapshot;
  Mamba2Config layer;
  layer.num_heads = s.H;
  layer.head_dim = s.P;
  layer.d_state = s.N;
  layer.n_groups = s.G;
  layer.conv_width = s.W;
  layer.conv_bias = s.conv_bias;
  layer.d_skip = s.d_skip;
  layer.gate = s.gate;
  layer.act_dtype = s.act;
  layer.conv_state_dtype = s.conv_state;
  layer.ssm_state_dtype = s.ssm_state;
  PoolOptions po;
  po.num_slots = s.S;
  po.max_rows = s.R;
  po.max_window = s.T;
  po.backend = options.backend;
  po.strategy = options.strategy;
  StatePool pool(ModelConfig::mamba2(s.L, layer), po);
  Memory mem(options.backend);
  auto put = [&](const std::string& name, DType dtype, const Shape& shape) {
    return mem.put(encode(store.to_float(name), dtype, name, true), dtype, shape);
  };

  // Slot s of the case is slot s of the pool.
  std::vector<SlotHandle> by_slot(s.S);
  for (int i = 0; i < s.S; ++i) {
    const SlotHandle h = pool.acquire();
    by_slot.at(static_cast<std::size_t>(pool.slot_index(h))) = h;
  }
  std::vector<Bytes> conv_before(s.L), ssm_before(s.L);
  for (int l = 0; l < s.L; ++l) {
    mem.write(pool.conv_state(l), encode(store.to_float(lname("conv_state_init", l)), s.conv_state,
                                         lname("conv_state_init", l), true));
    mem.write(pool.ssm_state(l), encode(store.to_float(lname("ssm_state_init", l)), s.ssm_state,
                                        lname("ssm_state_init", l), true));
    conv_before[l] = mem.read(pool.conv_state(l));
    ssm_before[l] = mem.read(pool.ssm_state(l));
  }

  VerifyBatch batch;
  batch.window = s.T;
  for (int r = 0; r < s.R; ++r) {
    batch.rows.push_back(s.real[r] ? by_slot[s.cache_indices[r]] : SlotHandle::padding());
  }
  pool.begin_verify(batch);

  const int64_t tokens = int64_t{s.R} * s.T, HP = int64_t{s.H} * s.P;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  RunBytes run;
  std::vector<std::vector<float>> conv_out(s.L), y(s.L), snap_conv(s.L), snap_ssm(s.L);
  std::vector<Bytes> snap_conv_bytes(s.L), snap_ssm_bytes(s.L);
  std::string unwritten, a_note;
  for (int l = 0; l < s.L; ++l) {
    Mamba2Weights w;
    w.conv_weight = put(lname("conv_weight", l), s.conv_weight, {s.Dc, s.W});
    if (s.conv_bias) w.conv_bias = put(lname("conv_bias", l), s.conv_weight, {s.Dc});
    w.A_log = put(lname("A_log", l), s.a_log, {s.H});
    w.dt_bias = put(lname("dt_bias", l), s.dt_bias, {s.H});
    if (s.d_skip) w.D = put(lname("D", l), s.d, {s.H});
    Mamba2Inputs in;
    in.xBC = put(lname("xBC", l), s.act, {tokens, s.Dc});
    in.dt = put(lname("dt", l), s.act, {tokens, s.H});
    if (s.gate) in.z = put(lname("z", l), s.act, {tokens, HP});  // [R, T, H, P] as [tokens, H*P]
    // Outputs start as NaN, so that a real row's output left unwritten cannot pass.
    Mamba2Outputs out;
    out.conv_out = mem.put(encode(std::vector<float>(tokens * s.Dc, nan), s.act, "", false), s.act,
                           {tokens, s.Dc});
    out.y = mem.put(encode(std::vector<float>(tokens * HP, nan), s.act, "", false), s.act,
                    {tokens, s.H, s.P});
    pool.verify(l, w, in, out);
    run.conv_out.push_back(mem.read(out.conv_out));
    run.y.push_back(mem.read(out.y));
    conv_out[l] = decode(run.conv_out[l], s.act);
    y[l] = decode(run.y[l], s.act);
    for (int r = 0; r < s.R && unwritten.empty(); ++r) {
      if (!s.real[r]) continue;
      for (int64_t i = 0; i < int64_t{s.T} * HP && unwritten.empty(); ++i) {
        if (std::isnan(y[l][r * s.T * HP + i]))
          unwritten = lname("core_out", l) + " row " + std::to_string(r);
      }
      for (int64_t i = 0; i < int64_t{s.T} * s.Dc && unwritten.empty(); ++i) {
        if (std::isnan(conv_out[l][r * s.T * s.Dc + i]))
          unwritten = lname("conv_out", l) + " row " + std::to_string(r);
      }
    }
    if (snapshots) {
      TensorView sc = pool.snapshot_conv(l), ss = pool.snapshot_ssm(l);
      snap_conv_bytes[l] = mem.read(sc);
      snap_ssm_bytes[l] = mem.read(ss);
      snap_conv[l] = decode(snap_conv_bytes[l], sc.dtype);
      snap_ssm[l] = decode(snap_ssm_bytes[l], ss.dtype);
    }
    // The case gives A = -exp(A_log) as the kernel received it; specstate takes A_log.
    if (store.contains(lname("A", l))) {
      const std::vector<float> A = store.to_float(lname("A", l)),
                               A_log = store.to_float(lname("A_log", l));
      double worst = 0;
      for (std::size_t h = 0; h < A.size() && h < A_log.size(); ++h) {
        const float ours = -std::exp(A_log[h]);
        worst = std::max(worst, std::abs(double(ours) - A[h]) / std::abs(double(A[h])));
      }
      if (worst > 0 && a_note.empty()) {
        std::ostringstream note;
        note << "A = -exp(A_log) in f32 differs from the case's A by up to " << worst << " (rel)";
        a_note = note.str();
      }
    }
  }

  std::string impure;
  for (int l = 0; l < s.L && impure.empty(); ++l) {
    if (mem.read(pool.conv_state(l)) != conv_before[l])
      impure = lname("conv_state", l) + " changed";
    if (mem.read(pool.ssm_state(l)) != ssm_before[l]) impure = lname("ssm_state", l) + " changed";
  }

  std::vector<int32_t> accepted(s.R);
  for (int r = 0; r < s.R; ++r) accepted[r] = s.real[r] ? s.accept_len[r] : 0;
  if (mem.device() == Device::kCuda) {
    Bytes raw(accepted.size() * 4);
    std::memcpy(raw.data(), accepted.data(), raw.size());
    pool.commit(mem.put(raw, DType::kI32, {s.R}));
    if (pool.last_commit_status() != Status::kSuccess) {
      throw Error(pool.last_commit_status(), "StatePool::commit skipped rows");
    }
  } else {
    pool.commit(accepted);
  }
  std::vector<Bytes> conv_after(s.L), ssm_after(s.L);
  for (int l = 0; l < s.L; ++l) {
    conv_after[l] = mem.read(pool.conv_state(l));  // replay: materializes the accepted steps
    ssm_after[l] = mem.read(pool.ssm_state(l));
  }

  // Commit copies our own snapshot of the accepted step bit for bit; other slots keep theirs.
  const std::size_t conv_slot = int64_t{s.Dc} * (s.W - 1) * dtype_size(s.conv_state);
  const std::size_t ssm_slot = int64_t{s.H} * s.P * s.N * dtype_size(s.ssm_state);
  std::vector<int> row_of_slot(s.S, -1);
  for (int r = 0; r < s.R; ++r) {
    if (s.real[r] && s.last_step[r] >= 0) row_of_slot[s.cache_indices[r]] = r;
  }
  std::string copy_error, keep_error, kept;
  for (int slot = 0; slot < s.S; ++slot) {
    const int r = row_of_slot[slot];
    if (r < 0) kept += (kept.empty() ? "" : ", ") + std::to_string(slot);
    for (int l = 0; l < s.L; ++l) {
      const unsigned char* c = conv_after[l].data() + slot * conv_slot;
      const unsigned char* m = ssm_after[l].data() + slot * ssm_slot;
      if (r < 0) {
        if (keep_error.empty() &&
            (std::memcmp(c, conv_before[l].data() + slot * conv_slot, conv_slot) != 0 ||
             std::memcmp(m, ssm_before[l].data() + slot * ssm_slot, ssm_slot) != 0)) {
          keep_error = "slot " + std::to_string(slot) + " layer " + std::to_string(l) + " changed";
        }
        continue;
      }
      const std::size_t snap = static_cast<std::size_t>(r) * s.T + s.last_step[r];
      if (snapshots && copy_error.empty() &&
          (std::memcmp(c, snap_conv_bytes[l].data() + snap * conv_slot, conv_slot) != 0 ||
           std::memcmp(m, snap_ssm_bytes[l].data() + snap * ssm_slot, ssm_slot) != 0)) {
        copy_error = "slot " + std::to_string(slot) + " layer " + std::to_string(l) +
                     " differs from row " + std::to_string(r) + " step " +
                     std::to_string(s.last_step[r]);
      }
    }
  }
  report.checks.push_back(
      {"verify left the committed pool unchanged (bit-exact)", impure.empty(), impure});
  report.checks.push_back({"outputs of every real row written", unwritten.empty(),
                           unwritten.empty() ? "" : unwritten + " still holds the NaN sentinel"});
  run.conv_committed = conv_after;
  run.ssm_committed = ssm_after;
  if (snapshots) {
    report.checks.push_back(
        {"commit = own snapshot at the accepted step (bit-exact)", copy_error.empty(), copy_error});
  } else {
    GoldenOptions snapshot_options = options;
    snapshot_options.strategy = Strategy::kSnapshot;
    GoldenReport snapshot_report;
    RunBytes snapshot_run;
    run_case(store, s, snapshot_options, snapshot_report, &snapshot_run);
    const std::string differs = first_difference(run, snapshot_run);
    report.checks.push_back(
        {"outputs and commit = the snapshot strategy's (bit-exact)", differs.empty(), differs});
  }
  report.checks.push_back({"slots without a commit unchanged [" + kept + "] (bit-exact)",
                           keep_error.empty(), keep_error});

  const double tol = s.act == DType::kBF16 ? 1e-2 : 1e-5;
  Comparison c_conv("conv_out", tol), c_window("inter_conv_window", 0.0), c_y("core_out", tol),
      c_inter("inter_ssm", tol), c_conv_commit("conv_state_committed", 0.0),
      c_ssm_commit("ssm_state_committed", tol);
  for (int l = 0; l < s.L; ++l) {
    c_conv.add(store, lname("conv_out", l), conv_out[l], {s.R, s.T, s.Dc}, &s.real);
    c_y.add(store, lname("core_out", l), y[l], {s.R, s.T, s.H, s.P}, &s.real);
    if (snapshots) {
      c_window.add(store, lname("inter_conv_window", l), snap_conv[l], {s.R, s.T, s.Dc, s.W - 1},
                   &s.real);
      const int64_t per_row = int64_t{s.T} * s.H * s.P * s.N;
      for (int r = 0; r < s.R; ++r) {
        if (!s.real[r]) continue;
        const std::vector<float> row(snap_ssm[l].begin() + r * per_row,
                                     snap_ssm[l].begin() + (r + 1) * per_row);
        c_inter.add(store, lname("inter_ssm", l) + ".r" + std::to_string(r), row,
                    {s.T, s.H, s.P, s.N}, nullptr);
      }
    }
    c_conv_commit.add(store, lname("conv_state_committed", l), decode(conv_after[l], s.conv_state),
                      {s.S, s.Dc, s.W - 1}, nullptr);
    c_ssm_commit.add(store, lname("ssm_state_committed", l), decode(ssm_after[l], s.ssm_state),
                     {s.S, s.H, s.P, s.N}, nullptr);
  }
  if (snapshots) {
    report.tensors = {c_conv.result(),  c_window.result(),      c_y.result(),
                      c_inter.result(), c_conv_commit.result(), c_ssm_commit.result()};
  } else {
    report.tensors = {c_conv.result(), c_y.result(), c_conv_commit.result(), c_ssm_commit.result()};
    report.notes.push_back(
        "intermediate snapshots (inter_conv_window, inter_ssm): n/a under replay (the strategy "
        "keeps none)");
  }
  report.notes.push_back("core_out is the SSU output y (Mamba2Outputs::y)");
  if (!a_note.empty()) report.notes.push_back(a_note);
  if (bytes_out) *bytes_out = std::move(run);

  bool pass = true;
  for (const auto& t : report.tensors) pass = pass && t.pass;
  for (const auto& c : report.checks) pass = pass && c.pass;
  report.outcome = pass ? GoldenOutcome::kPass : GoldenOutcome::kFail;
}

}  // namespace

void run_mamba2_golden_case(const GoldenCase& golden, const json& params,
                            const GoldenOptions& options, GoldenReport& report) {
  const Spec spec = read_spec(golden.store, params);
  report.description = describe(spec, options);
  run_case(golden.store, spec, options, report, nullptr);
}

}  // namespace specstate::cli
