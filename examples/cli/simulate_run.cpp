// `specstate simulate`: the driver (pools, synthetic weights and inputs, timed rounds, checks).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli/simulate.h"

#ifdef SPECSTATE_CLI_CUDA
#include <cuda_runtime.h>
#endif

#include "cli/commands.h"
#include "cli/sim_helpers.h"
#include "cli_checks.h"
#include "specstate/spec/trace.h"
#include "specstate/spec/verify_batch.h"
#include "specstate/specstate.h"

namespace specstate::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Uniform in [0, 1) and standard normal (Box-Muller), reproducible across standard libraries.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}
float normal(std::mt19937_64& rng) {
  const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// A host buffer of f32 or bf16 elements.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(DType dtype, int64_t numel)
      : dtype_(dtype), numel_(numel), bytes_(static_cast<std::size_t>(numel) * dtype_size(dtype)) {}
  void set(int64_t i, float v) {
    if (dtype_ == DType::kBF16) {
      const uint16_t x = bf16_from_float(v);
      std::memcpy(bytes_.data() + i * 2, &x, 2);
    } else {
      std::memcpy(bytes_.data() + i * 4, &v, 4);
    }
  }
  void* data() noexcept { return bytes_.data(); }
  const void* data() const noexcept { return bytes_.data(); }
  DType dtype() const noexcept { return dtype_; }
  int64_t numel() const noexcept { return numel_; }
  std::size_t bytes() const noexcept { return bytes_.size(); }

 private:
  DType dtype_ = DType::kF32;
  int64_t numel_ = 0;
  std::vector<uint8_t> bytes_;
};

float element(const void* base, DType dtype, int64_t i) {
  if (dtype == DType::kBF16) {
    uint16_t x;
    std::memcpy(&x, static_cast<const uint8_t*>(base) + i * 2, 2);
    return float_from_bf16(x);
  }
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * 4, 4);
  return v;
}

// Where the pool's kernels read and write: host memory (CPU) or device copies (CUDA).
class Memory {
 public:
  explicit Memory(bool cuda) : cuda_(cuda) {}
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() noexcept {
#ifdef SPECSTATE_CLI_CUDA
    for (void* p : device_) cudaFree(p);
#endif
  }
  Device device() const noexcept { return cuda_ ? Device::kCuda : Device::kCpu; }
  // The address the pool gets for `host`: itself, or a device copy.
  void* place(HostBuffer& host) {
    if (!cuda_) return host.data();
#ifdef SPECSTATE_CLI_CUDA
    void* p = nullptr;
    check(cudaMalloc(&p, host.bytes()), "cudaMalloc");
    device_.push_back(p);
    check(cudaMemcpy(p, host.data(), host.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return p;
#else
    return nullptr;
#endif
  }
  void synchronize() {
#ifdef SPECSTATE_CLI_CUDA
    if (cuda_) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
  }
  // Copies `bytes` at `src` (pool memory) into `dst` (host).
  void download(void* dst, const void* src, std::size_t bytes) {
    if (!cuda_) {
      std::memcpy(dst, src, bytes);
      return;
    }
#ifdef SPECSTATE_CLI_CUDA
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
#endif
  }

 private:
#ifdef SPECSTATE_CLI_CUDA
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      throw Error(Status::kBackendError,
                  std::string("simulate: ") + what + ": " + cudaGetErrorString(e));
    }
  }
  std::vector<void*> device_;
#endif
  bool cuda_;
};

constexpr bool kHaveCuda =
#ifdef SPECSTATE_CLI_CUDA
    true;
#else
    false;
#endif

// One layer's synthetic weights, of either kind: the GDN or the Mamba2 views over the same
// buffers (conv_weight [D, W]; A_log, dt_bias and, for Mamba2, conv_bias [D] and D [heads]).
struct LayerWeightsHost {
  HostBuffer conv_weight, conv_bias, A_log, dt_bias, d_skip;  // f32
  GdnWeights host, pool;
  Mamba2Weights m2_host, m2_pool;
  KdaWeights kda_host, kda_pool;  // dt_bias [HV, K]
};

// One set of per-token inputs for max_rows * max_window tokens; verify uses its first rows * T.
// GDN: qkv = mixed_qkv [D], a and b [HV] each; Mamba2: qkv = xBC [D], a = dt [heads], b = z
// [heads * P] when the layer is gated (else empty).
struct InputSet {
  HostBuffer qkv, a, b;
  void *qkv_pool = nullptr, *a_pool = nullptr, *b_pool = nullptr;
};

// What simulate feeds a layer of either kind, and its core output [tokens, heads, head_dim].
struct LayerShape {
  bool mamba2 = false, kda = false;
  int64_t K = 1;                    // KDA: the gate's columns per head (g [tokens, HV, K])
  int64_t D = 0, W = 0;             // conv channels, taps
  int64_t heads = 0, head_dim = 0;  // core output: GDN HV x V, Mamba2 nheads x P
  int64_t a_cols = 0, b_cols = 0;   // GDN: HV, HV; Mamba2: nheads (dt), nheads * P (z) or 0
  DType act = DType::kF32;
  bool conv_bias = false, d_skip = false;
};

LayerShape layer_shape(const ModelConfig& c) {
  LayerShape s;
  s.D = c.conv_dim();
  s.act = c.act_dtype();
  if (c.kind == LayerKind::kMamba2) {
    const Mamba2Config& m = c.mamba;
    s.mamba2 = true;
    s.W = m.conv_width;
    s.heads = m.num_heads;
    s.head_dim = m.head_dim;
    s.a_cols = m.num_heads;
    s.b_cols = m.gate ? int64_t{m.num_heads} * m.head_dim : 0;
    s.conv_bias = m.conv_bias;
    s.d_skip = m.d_skip;
  } else if (c.kind == LayerKind::kKda) {
    const KdaConfig& k = c.kda_layer;
    s.kda = true;
    s.W = k.conv_width;
    s.heads = k.num_v_heads;
    s.head_dim = k.head_v_dim;
    s.K = k.head_k_dim;
    s.a_cols = int64_t{k.num_v_heads} * k.head_k_dim;  // g [tokens, HV, K]
    s.b_cols = k.num_v_heads;
    s.conv_bias = k.conv_bias;
  } else {
    const GdnConfig& g = c.gdn;
    s.W = g.conv_width;
    s.heads = g.num_v_heads;
    s.head_dim = g.head_v_dim;
    s.a_cols = s.b_cols = g.num_v_heads;
    s.conv_bias = g.conv_bias;
  }
  return s;
}

// One layer call of the pool's kind over `tokens` tokens at the given addresses (host or
// device memory as `device` says): verify, or prefill of `handle`.
void layer_call(StatePool& pool, const LayerShape& sh, int layer, const LayerWeightsHost& w,
                bool pool_weights, const void* x, const void* a, const void* b, void* out,
                int64_t tokens, Device device, const SlotHandle* prefill_handle) {
  const auto view = [&](const void* p, int64_t cols) {
    return cols == 0 ? TensorView{} : TensorView::contiguous(p, sh.act, {tokens, cols}, device);
  };
  TensorView core = TensorView::contiguous(out, sh.act, {tokens, sh.heads, sh.head_dim}, device);
  if (sh.mamba2) {
    const Mamba2Inputs in{view(x, sh.D), view(a, sh.a_cols), view(b, sh.b_cols)};
    const Mamba2Outputs o{{}, core};
    const Mamba2Weights& mw = pool_weights ? w.m2_pool : w.m2_host;
    if (prefill_handle) {
      pool.prefill(layer, *prefill_handle, mw, in, o);
    } else {
      pool.verify(layer, mw, in, o);
    }
    return;
  }
  if (sh.kda) {
    const KdaInputs in{view(x, sh.D),
                       TensorView::contiguous(a, sh.act, {tokens, sh.heads, sh.K}, device),
                       view(b, sh.b_cols)};
    const KdaOutputs o{{}, core};
    const KdaWeights& kw = pool_weights ? w.kda_pool : w.kda_host;
    if (prefill_handle) {
      pool.prefill(layer, *prefill_handle, kw, in, o);
    } else {
      pool.verify(layer, kw, in, o);
    }
    return;
  }
  const GdnInputs in{view(x, sh.D), view(a, sh.a_cols), view(b, sh.b_cols)};
  const GdnOutputs o{{}, core};
  const GdnWeights& gw = pool_weights ? w.pool : w.host;
  if (prefill_handle) {
    pool.prefill(layer, *prefill_handle, gw, in, o);
  } else {
    pool.verify(layer, gw, in, o);
  }
}

Json percentiles(std::vector<double> v) {
  Json j;
  if (v.empty()) {
    j["mean"] = 0.0;
    j["p50"] = 0.0;
    j["max"] = 0.0;
    return j;
  }
  double sum = 0;
  for (double x : v) sum += x;
  std::sort(v.begin(), v.end());
  j["mean"] = sum / static_cast<double>(v.size());
  j["p50"] = examples::median(v);
  j["max"] = v.back();
  return j;
}

// FNV-1a over bytes: fingerprints of outputs and states, so that --strategy both can compare
// two runs bit for bit without holding either in memory.
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
uint64_t fnv1a(uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void draw_progress(std::ostream& out, int64_t done, int64_t total) {
  constexpr int kWidth = 40;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  out << "\r  [" << std::string(static_cast<std::size_t>(filled), '#')
      << std::string(static_cast<std::size_t>(kWidth - filled), '.') << "] " << done << "/" << total
      << " rounds" << std::flush;
}

}  // namespace

namespace {

// The option that sized the run, with its value, for a refusal: "--trace PATH" or "--requests N".
std::string run_size_option(const SimulateOptions& o, int num_requests) {
  if (!o.trace_path.empty()) return "--trace " + o.trace_path;
  return "--requests " + std::to_string(num_requests);
}

// A CPU run holds at once one strategy's pool (--strategy both runs them in turn), --check's
// reference committed state, the input sets and the core outputs. The pool refuses only what the
// machine's physical memory cannot hold: a run within that, with the simulator's own buffers, could
// still take all the memory there is (--requests 4096 --window 1024 of the tiny model: 23.6 GB of
// pool and 5 GB of buffers on a 24 GB machine; Linux overcommits, so no std::bad_alloc came, the
// machine ran out). Refused as a usage error naming --trace or --requests when past the memory
// available now.
void check_host_memory(const SimulateOptions& o, const ModelConfig& config, const LayerShape& sh,
                       const std::vector<Strategy>& strategies, int num_requests, int max_window) {
  const StateBytes b = state_bytes(config, max_window);
  const double requests = num_requests, tokens = requests * max_window;
  const double committed = requests * static_cast<double>(b.committed_per_request);
  // One strategy's pool at a time (--strategy both runs them in turn), and --check's reference.
  double workspace = 0;
  for (Strategy s : strategies) {
    workspace =
        std::max(workspace, static_cast<double>(workspace_bytes(b, s, num_requests, num_requests)));
  }
  // --check's reference pool: its committed state and its one-row snapshot scratch (about one
  // more request's state).
  double bytes = committed + workspace + (o.check ? committed + b.committed_per_request : 0.0);
  const double es = static_cast<double>(dtype_size(sh.act));
  const double input_cols = static_cast<double>(sh.D + sh.a_cols + sh.b_cols);
  bytes += 4.0 * tokens * input_cols * es;  // kInputSets input sets
  bytes += (o.check ? config.num_layers : 1) * tokens * static_cast<double>(sh.heads) *
           static_cast<double>(sh.head_dim) * es;  // core outputs
  // The synthetic weights (f32, run_simulation): conv weight [D, W], A_log, dt_bias (KDA: a K
  // vector a head), the conv bias and D where the model has them; a CPU pool's copy besides the
  // host one (memory.place). A huge --conv-width passed the check without them and needed 2.3x
  // the estimate.
  const double HV = static_cast<double>(sh.heads), D = static_cast<double>(sh.D);
  const auto layer_floats = [&](double W) {
    return D * W + HV + HV * static_cast<double>(sh.kda ? sh.K : 1) + (sh.conv_bias ? D : 0.0) +
           (sh.d_skip ? HV : 0.0);
  };
  const double weight_floats = layer_floats(static_cast<double>(sh.W));
  // Besides the floats, each layer's bookkeeping: its LayerWeightsHost and about 64 bytes of
  // allocator overhead per buffer (5 buffers; a CPU pool's copies besides). At 262144 layers of
  // the tiny model this was a third of the run's memory, and not counted.
  const double layer_overhead =
      static_cast<double>(sizeof(LayerWeightsHost)) + 64.0 * 5 * (o.backend == "cpu" ? 2.0 : 1.0);
  const double weights =
      config.num_layers * (weight_floats * 4.0 * (o.backend == "cpu" ? 2.0 : 1.0) + layer_overhead);
  bytes += weights;
  const double available = available_host_bytes();
  if (available > 0 && bytes > available) {
    const bool traced = !o.trace_path.empty();
    char sizes[160];
    std::snprintf(sizes, sizeof(sizes),
                  "the run needs about %.3g GB of host memory (pools, the model's weights: %.3g "
                  "GB, and the simulator's buffers), %.3g GB are available",
                  bytes / 1e9, weights / 1e9, available / 1e9);
    const std::string text = sizes;
    // Blamed on the model where its weights are most of it (fewer requests would not help):
    // on --conv-width or --layers, whichever given grew the weights more against the model's
    // own value (a huge --layers beside --conv-width 4 is the layers' fault), else on the model.
    if (weights >= bytes / 2) {
      const ModelPreset own = resolve_model(o.model, o.model_file, ModelDims{});
      const double own_w = static_cast<double>(layer_shape(own.config).W);
      const double conv_growth = o.dims.conv_width > 0 ? weight_floats / layer_floats(own_w) : 0.0;
      const double layer_growth =
          o.dims.layers > 0 ? static_cast<double>(config.num_layers) / own.config.num_layers : 0.0;
      const std::string option = conv_growth > 1 || layer_growth > 1
                                     ? (conv_growth >= layer_growth ? "--conv-width" : "--layers")
                                 : !o.model_file.empty() ? "--model-file"
                                                         : "--model";
      const std::string value = option == "--conv-width"   ? std::to_string(o.dims.conv_width)
                                : option == "--layers"     ? std::to_string(o.dims.layers)
                                : option == "--model-file" ? o.model_file
                                                           : o.model;
      throw CLI::ValidationError(option, option + " " + value + ": " + text + " (a smaller model)");
    }
    // Nearly every term grows with the layers: where --layers grew them past the model's own
    // count and the model's own count would fit, --layers is what to change (fewer requests
    // would not help: --requests 1 was blamed).
    const ModelPreset own = resolve_model(o.model, o.model_file, ModelDims{});
    if (o.dims.layers > 0 && config.num_layers > own.config.num_layers &&
        bytes * own.config.num_layers / config.num_layers <= available) {
      throw CLI::ValidationError("--layers", "--layers " + std::to_string(o.dims.layers) + ": " +
                                                 text + " (fewer --layers)");
    }
    throw CLI::ValidationError(traced ? "--trace" : "--requests",
                               run_size_option(o, num_requests) + ": " + text +
                                   (traced ? " (a trace of fewer requests or smaller windows)"
                                           : " (fewer --requests, a smaller --window or model)"));
  }
}

// The option a run that the machine cannot hold is blamed on, with its value ("--layers 10000"),
// and the advice that goes with it; set once the run's size is known.
struct SizeBlame {
  std::string option, prefix, advice;
};

Json simulate(const SimulateOptions& o, std::ostream* progress, SizeBlame& blame) {
  const auto wall_start = Clock::now();
  if (o.backend != "cpu" && o.backend != "cuda") {
    throw CLI::ValidationError("--backend", "--backend " + o.backend + " must be cpu or cuda");
  }
  // --strategy both: the same trace, weights and inputs through a snapshot pool, then through a
  // replay pool (one pool alive at a time).
  std::vector<Strategy> strategies;
  if (o.strategy == "both") {
    strategies = {Strategy::kSnapshot, Strategy::kReplay};
  } else if (o.strategy == "snapshot" || o.strategy == "replay") {
    strategies = {parse_strategy(o.strategy, "--strategy")};
  } else {
    throw CLI::ValidationError("--strategy",
                               "--strategy " + o.strategy + " must be snapshot, replay or both");
  }
  if (o.packing != "padded" && o.packing != "variable") {
    throw CLI::ValidationError("--packing",
                               "--packing " + o.packing + " must be padded or variable");
  }
  const bool both = strategies.size() == 2;
  // A report or plot that cannot be written fails now, not after the run.
  if (!o.out.empty()) {
    check_writable(o.out, "--out");
    check_writable(svg_path_for(o.out), "--out");
  }
  if (!o.save_trace.empty()) check_writable(o.save_trace, "--save-trace");  // (written at the end)
  const bool cuda = o.backend == "cuda";
  if (cuda && !kHaveCuda) {
    throw CLI::ValidationError("--backend",
                               "--backend cuda: this build of specstate has no CUDA backend");
  }
  const ModelPreset preset = resolve_model(o.model, o.model_file, o.dims);
  const ModelConfig config = apply_tp(preset, o.tp);
  config.validate();
  const LayerShape sh = layer_shape(config);
  std::string source;
  const spec::Trace trace = make_trace(o, source);
  const int64_t num_rounds = trace.num_rounds();
  const int num_requests = static_cast<int>(trace.requests.size());
  const int max_window = trace.max_window();

  PoolOptions options;
  options.num_slots = num_requests;
  options.max_rows = num_requests;
  options.max_window = max_window;
  options.backend = cuda ? Backend::kCuda : Backend::kCpu;
  // A pool of these options (the run's, or --check's reference), a refusal of the machine or the
  // backend as a usage error naming the option that sized it, with its value: --layers where it
  // grew the layers past the model's own count at least as much as the requests grew the pool
  // (--requests 1 was blamed for --layers 100000), else --requests or --trace.
  {
    const int own_layers = resolve_model(o.model, o.model_file, ModelDims{}).config.num_layers;
    const bool traced = !o.trace_path.empty();
    if (o.dims.layers > 0 && own_layers > 0 &&
        static_cast<double>(config.num_layers) / own_layers >= num_requests) {
      blame = {"--layers", "--layers " + std::to_string(o.dims.layers), " (fewer --layers)"};
    } else {
      blame = {traced ? "--trace" : "--requests", run_size_option(o, num_requests),
               traced ? " (a trace of fewer requests or smaller windows, or a smaller model)"
                      : " (fewer --requests, a smaller --window or model)"};
    }
  }
  const auto make_pool_of = [&](const PoolOptions& po) {
    try {
      return std::make_unique<StatePool>(config, po);
    } catch (const Error& e) {
      if (e.status() == Status::kNotSupported) {
        throw CLI::ValidationError(po.strategy == Strategy::kReplay ? "--strategy" : "--backend",
                                   e.what());
      }
      if (e.status() == Status::kResourceExhausted) {  // the machine cannot hold the pool
        throw CLI::ValidationError(blame.option, blame.prefix + ": " + e.what() + blame.advice);
      }
      throw;
    }
  };
  const auto make_pool = [&](Strategy strategy) {
    PoolOptions po = options;
    po.strategy = strategy;
    return make_pool_of(po);
  };
  // Refuse a run the host cannot hold before anything is allocated (the trial pools below
  // allocate and zero their whole state), then an impossible pool (or strategy).
  if (!cuda) check_host_memory(o, config, sh, strategies, num_requests, max_window);
  for (Strategy strategy : strategies) make_pool(strategy).reset();

  Memory memory(cuda);

  // Weights shaped like real ones: A = exp(A_log) in [1, 16], dt = softplus(dt_bias) in
  // [1e-3, 1e-1] log-uniform, conv taps ~ N(0, 0.5^2).
  std::mt19937_64 rng(o.seed ^ 0x5eedf00dull);
  // (V is the core output's head dimension: GDN V, Mamba2 P; HV its heads.)
  const int64_t D = sh.D, W = sh.W, HV = sh.heads, V = sh.head_dim;
  const int L = config.num_layers;
  std::vector<LayerWeightsHost> weights(static_cast<std::size_t>(L));
  for (auto& w : weights) {
    w.conv_weight = HostBuffer(DType::kF32, D * W);
    w.A_log = HostBuffer(DType::kF32, HV);
    const int64_t dt_cols = sh.kda ? sh.K : 1;  // KDA: one dt_bias per key channel
    w.dt_bias = HostBuffer(DType::kF32, HV * dt_cols);
    for (int64_t i = 0; i < D * W; ++i) w.conv_weight.set(i, 0.5f * normal(rng));
    for (int64_t h = 0; h < HV; ++h) {
      w.A_log.set(h, static_cast<float>(std::log(1.0 + 15.0 * uniform01(rng))));
      for (int64_t i = 0; i < dt_cols; ++i) {
        const double dt = std::exp(std::log(1e-3) + uniform01(rng) * std::log(100.0));
        w.dt_bias.set(h * dt_cols + i, static_cast<float>(std::log(std::expm1(dt))));
      }
    }
    if (sh.conv_bias) {
      w.conv_bias = HostBuffer(DType::kF32, D);
      for (int64_t i = 0; i < D; ++i) w.conv_bias.set(i, 0.1f * normal(rng));
    }
    if (sh.d_skip) {
      w.d_skip = HostBuffer(DType::kF32, HV);
      for (int64_t h = 0; h < HV; ++h) w.d_skip.set(h, 1.0f + 0.1f * normal(rng));
    }
    const auto host = [&](HostBuffer& b, std::initializer_list<int64_t> shape) {
      return b.numel() == 0 ? TensorView{} : TensorView::contiguous(b.data(), DType::kF32, shape);
    };
    const auto placed = [&](HostBuffer& b, std::initializer_list<int64_t> shape) {
      return b.numel() == 0
                 ? TensorView{}
                 : TensorView::contiguous(memory.place(b), DType::kF32, shape, memory.device());
    };
    w.host = GdnWeights{host(w.conv_weight, {D, W}), host(w.conv_bias, {D}), host(w.A_log, {HV}),
                        host(w.dt_bias, {HV})};
    w.pool = GdnWeights{placed(w.conv_weight, {D, W}), placed(w.conv_bias, {D}),
                        placed(w.A_log, {HV}), placed(w.dt_bias, {HV})};
    w.m2_host = Mamba2Weights{w.host.conv_weight, w.host.conv_bias, w.host.A_log, w.host.dt_bias,
                              host(w.d_skip, {HV})};
    w.m2_pool = Mamba2Weights{w.pool.conv_weight, w.pool.conv_bias, w.pool.A_log, w.pool.dt_bias,
                              placed(w.d_skip, {HV})};
    if (sh.kda) {
      w.kda_host = KdaWeights{w.host.conv_weight, w.host.conv_bias, w.host.A_log,
                              host(w.dt_bias, {HV, sh.K})};
      w.kda_pool = KdaWeights{w.pool.conv_weight, w.pool.conv_bias, w.pool.A_log,
                              placed(w.dt_bias, {HV, sh.K})};
      w.host.dt_bias = w.pool.dt_bias = TensorView{};  // GDN's [HV] view does not fit
    }
  }
  // A few input sets, cycled over (round, layer): generating inputs stays out of the timing.
  constexpr int kInputSets = 4;
  const int64_t max_tokens = int64_t{num_requests} * max_window;
  std::vector<InputSet> inputs(kInputSets);
  for (auto& in : inputs) {
    in.qkv = HostBuffer(sh.act, max_tokens * D);
    in.a = HostBuffer(sh.act, max_tokens * sh.a_cols);
    in.b = HostBuffer(sh.act, max_tokens * sh.b_cols);
    for (int64_t i = 0; i < in.qkv.numel(); ++i) in.qkv.set(i, normal(rng));
    for (int64_t i = 0; i < in.a.numel(); ++i) in.a.set(i, normal(rng));
    for (int64_t i = 0; i < in.b.numel(); ++i) in.b.set(i, normal(rng));
    in.qkv_pool = memory.place(in.qkv);
    in.a_pool = memory.place(in.a);
    in.b_pool = in.b.numel() ? memory.place(in.b) : nullptr;
  }
  const auto input_set = [&](int64_t round, int layer) -> const InputSet& {
    return inputs[static_cast<std::size_t>((round * L + layer) % kInputSets)];
  };
  // The core output of verify: one buffer, or with --check one per layer, so that every layer's
  // output can be read after the round, outside the timing.
  const std::size_t es = dtype_size(sh.act);
  std::vector<HostBuffer> core_out_host(o.check ? static_cast<std::size_t>(L) : 1);
  std::vector<void*> core_out;
  for (auto& buffer : core_out_host) {
    buffer = HostBuffer(sh.act, max_tokens * HV * V);
    core_out.push_back(memory.place(buffer));
  }
  const auto core_out_of = [&](int layer) { return core_out[o.check ? layer : 0]; };

  std::vector<std::vector<const spec::TraceRecord*>> by_round(static_cast<std::size_t>(num_rounds));
  for (const auto& rec : trace.records)
    by_round[static_cast<std::size_t>(rec.round)].push_back(&rec);
  const auto buckets = spec::VerifyBatchBuilder::power_of_two_buckets(num_requests);
  const auto plan_of = [&](int64_t round, const std::map<int64_t, SlotHandle>& handles) {
    spec::VerifyBatchBuilder builder(
        buckets, o.packing == "variable" ? spec::Packing::kVariable : spec::Packing::kPadded);
    for (const auto* rec : by_round[static_cast<std::size_t>(round)]) {
      builder.add(handles.at(rec->request), rec->window);
    }
    return builder.build();
  };

  // --check: the accepted tokens of every round through plain prefill on a CPU snapshot pool,
  // once; every strategy's committed states are compared with it.
  std::unique_ptr<StatePool> reference;
  std::map<int64_t, SlotHandle> reference_handle_of;
  if (o.check) {
    PoolOptions ref_options = options;
    ref_options.backend = Backend::kCpu;
    ref_options.strategy = Strategy::kSnapshot;
    ref_options.max_rows = 1;
    ref_options.max_window = 1;
    reference = make_pool_of(ref_options);  // (a refusal exited 1, not as a usage error)
    for (int64_t id : trace.requests) reference_handle_of[id] = reference->acquire();
    for (int64_t round = 0; round < num_rounds; ++round) {
      const auto& records = by_round[static_cast<std::size_t>(round)];
      if (records.empty()) continue;
      const spec::BatchPlan ref_plan = plan_of(round, reference_handle_of);
      // Row i of the round's batch is records[i] (live rows first, in add() order).
      for (std::size_t i = 0; i < records.size(); ++i) {
        const auto& path = records[i]->path;
        if (path.empty()) continue;
        const int64_t n = static_cast<int64_t>(path.size());
        for (int layer = 0; layer < L; ++layer) {
          const InputSet& in = input_set(round, layer);
          const int64_t A = sh.a_cols, Bc = sh.b_cols;
          HostBuffer qkv(sh.act, n * D), a(sh.act, n * A), b(sh.act, n * Bc),
              out(sh.act, n * HV * V);
          for (int64_t j = 0; j < n; ++j) {
            const int64_t token =
                ref_plan.token_offsets[i] + static_cast<int64_t>(path[static_cast<std::size_t>(j)]);
            std::memcpy(static_cast<uint8_t*>(qkv.data()) + j * D * es,
                        static_cast<const uint8_t*>(in.qkv.data()) + token * D * es, D * es);
            std::memcpy(static_cast<uint8_t*>(a.data()) + j * A * es,
                        static_cast<const uint8_t*>(in.a.data()) + token * A * es, A * es);
            if (Bc > 0) {
              std::memcpy(static_cast<uint8_t*>(b.data()) + j * Bc * es,
                          static_cast<const uint8_t*>(in.b.data()) + token * Bc * es, Bc * es);
            }
          }
          const SlotHandle h = reference_handle_of.at(records[i]->request);
          layer_call(*reference, sh, layer, weights[static_cast<std::size_t>(layer)], false,
                     qkv.data(), a.data(), Bc > 0 ? b.data() : nullptr, out.data(), n, Device::kCpu,
                     &h);
        }
      }
    }
  }

  const StateBytes sb = state_bytes(config, max_window);
  const int64_t state_layer_bytes = sb.conv_per_layer + sb.ssm_per_layer;
  const int64_t total_rounds_drawn = num_rounds * static_cast<int64_t>(strategies.size());
  int64_t rounds_drawn = 0;
  const bool draw = progress != nullptr;

  // One strategy's run: warm-up, the timed rounds, the final materialize and the check.
  struct Fingerprints {
    std::vector<uint64_t> outputs;  // per timed round: the live rows' core outputs, all layers
    std::vector<uint64_t> states;   // per request (trace order): its committed bytes, all layers
  };
  int64_t tokens_total = 0;
  const auto run_strategy = [&](Strategy strategy, Fingerprints& prints) {
    const bool replay = strategy == Strategy::kReplay;
    std::unique_ptr<StatePool> pool = make_pool(strategy);
    std::map<int64_t, SlotHandle> handle_of;
    for (int64_t id : trace.requests) handle_of[id] = pool->acquire();
    const auto verify_all_layers = [&](int64_t round, int64_t tokens) {
      for (int layer = 0; layer < L; ++layer) {
        const InputSet& in = input_set(round, layer);
        layer_call(*pool, sh, layer, weights[static_cast<std::size_t>(layer)], true, in.qkv_pool,
                   in.a_pool, in.b_pool, core_out_of(layer), tokens, memory.device(), nullptr);
      }
    };

    // Warm-up rounds (first-touch of the workspace, kernel loading, allocator): the first
    // round's batch verified on every layer, then committed with "keep" for every row, which
    // leaves every committed state bit-identical (DESIGN.md section 5) -- --check verifies that.
    for (int w = 0; w < o.warmup && num_rounds > 0; ++w) {
      if (by_round.front().empty()) break;
      const spec::BatchPlan plan = plan_of(0, handle_of);
      pool->begin_verify(plan.batch);
      verify_all_layers(0, plan.num_tokens());
      pool->commit(
          std::vector<int32_t>(static_cast<std::size_t>(plan.rows()), plan.is_tree() ? -1 : 0));
      memory.synchronize();
    }

    Json rounds = Json::array();
    std::vector<double> verify_times, commit_times;
    double verify_total = 0, commit_total = 0;
    int64_t verify_bytes_total = 0, commit_bytes_total = 0, padding_rows_total = 0;
    tokens_total = 0;
    // Replay v2 (DESIGN.md sections 6 and 8), per request: h, the factor records applied since
    // the checkpoint, and the pending conv steps (the last commit's accepted steps), as the
    // slot's cursor and pending count hold them. A verify folds iff h > L, the round's fold limit
    // (replay_fold_limit of its rows: R - 2 T_max from default_replay_fold_rows(kind) rows on,
    // 8, or 1 for Mamba2).
    struct ReplayCursor {
      int64_t history = 0, pending = 0;
    };
    std::map<int64_t, ReplayCursor> cursor;
    for (int64_t round = 0; round < num_rounds; ++round) {
      const auto& records = by_round[static_cast<std::size_t>(round)];
      if (records.empty()) continue;
      const spec::BatchPlan plan = plan_of(round, handle_of);
      std::vector<spec::Acceptance> accepted;
      for (const auto* rec : records) accepted.push_back(spec::Acceptance{rec->path, -1});
      const std::vector<int32_t> commit_values = plan.commit_values(accepted);
      const int64_t tokens = plan.num_tokens();
      const int64_t fold_limit =
          sb.ring > 0 ? replay_fold_limit(max_window, static_cast<int>(sb.ring), plan.rows(),
                                          default_replay_fold_rows(config.kind))
                      : 0;

      const auto verify_start = Clock::now();
      pool->begin_verify(plan.batch);
      verify_all_layers(round, tokens);
      memory.synchronize();
      const double verify_s = seconds_since(verify_start);
      const auto commit_start = Clock::now();
      pool->commit(commit_values);
      memory.synchronize();
      const double commit_s = seconds_since(commit_start);

      // Bytes the strategy must move at least (DESIGN.md section 8; docs/simulate.md):
      // snapshot: verify reads the state and writes T states per live row-layer, commit reads
      // and writes one per advancing row-layer; replay: verify reads the checkpoint (conv window
      // + SSM state) once per live row-layer, reads back its h history factor records and its
      // pending conv records, writes the conv window when it had pending steps and the SSM
      // checkpoint only when it folds, and writes a conv and a factor record per window token;
      // commit moves no state (cursor arithmetic).
      int64_t round_tokens = 0, advancing = 0, history_records = 0, pending_steps = 0;
      int64_t conv_writes = 0, folds = 0;
      for (const auto* rec : records) {
        const int64_t a = rec->accepted_length();
        round_tokens += a;
        advancing += a > 0 ? 1 : 0;
        ReplayCursor& c = cursor[rec->request];
        history_records += c.history;
        pending_steps += c.pending;
        conv_writes += c.pending > 0 ? 1 : 0;
        const bool fold = c.history > fold_limit;
        folds += fold ? 1 : 0;
        c.history = (fold ? 0 : c.history) + a;  // commit: settle, then h += a
        c.pending = a;
      }
      const int64_t live_layers = int64_t{plan.live_rows} * L;
      // The live rows' verified tokens: T each when padded (filler included), their own
      // window's under variable packing.
      const int64_t live_tokens =
          o.packing == "variable" ? plan.num_tokens() : int64_t{plan.live_rows} * plan.window();
      int64_t vbytes = 0, cbytes = 0;
      if (replay) {
        vbytes = live_layers * state_layer_bytes +
                 (conv_writes * sb.conv_per_layer + folds * sb.ssm_per_layer) * L +
                 live_tokens * L * sb.record_per_token +
                 (history_records * sb.factor_record_per_token +
                  pending_steps * sb.conv_record_per_token) *
                     L;
      } else {
        vbytes = (live_layers + live_tokens * L) * state_layer_bytes;
        cbytes = advancing * L * state_layer_bytes * 2;
      }
      verify_times.push_back(verify_s);
      commit_times.push_back(commit_s);
      verify_total += verify_s;
      commit_total += commit_s;
      verify_bytes_total += vbytes;
      commit_bytes_total += cbytes;
      tokens_total += round_tokens;
      padding_rows_total += plan.rows() - plan.live_rows;
      Json r;
      r["round"] = round;
      r["live_rows"] = plan.live_rows;
      r["rows"] = plan.rows();
      r["window"] = plan.window();
      r["tokens"] = round_tokens;
      r["verified_tokens"] = plan.num_tokens();
      r["verify_seconds"] = verify_s;
      r["commit_seconds"] = commit_s;
      r["verify_bytes"] = vbytes;
      r["commit_bytes"] = cbytes;
      rounds.push_back(std::move(r));

      if (o.check) {
        // The live rows' outputs of every layer (padding rows' tokens are nobody's).
        uint64_t h = kFnvOffset;
        // (Live rows come first: their tokens are the first token_offsets[live_rows].)
        const std::size_t token_bytes = static_cast<std::size_t>(HV * V) * es;
        std::vector<uint8_t> bytes(token_bytes *
                                   static_cast<std::size_t>(plan.token_offsets[plan.live_rows]));
        for (int layer = 0; layer < L; ++layer) {
          memory.download(bytes.data(), core_out_of(layer), bytes.size());
          h = fnv1a(h, bytes.data(), bytes.size());
        }
        prints.outputs.push_back(h);
      }
      if (draw) draw_progress(*progress, ++rounds_drawn, total_rounds_drawn);
    }
    // What replay still owes at the end, brought into committed memory by materialize: per
    // slot-layer with history or pending conv steps, the state read once, the h factor records
    // and the pending conv records read, the conv window written when it had pending steps and
    // the SSM state when it had history.
    int64_t owed_bytes = 0;
    for (const auto& [request, c] : cursor) {
      if (c.history == 0 && c.pending == 0) continue;
      owed_bytes += state_layer_bytes + (c.pending > 0 ? sb.conv_per_layer : 0) +
                    (c.history > 0 ? sb.ssm_per_layer : 0) +
                    c.history * sb.factor_record_per_token + c.pending * sb.conv_record_per_token;
    }
    const auto materialize_start = Clock::now();
    pool->materialize();
    memory.synchronize();
    const double materialize_s = seconds_since(materialize_start);
    const int64_t materialize_bytes = replay ? owed_bytes * L : 0;

    Json check;
    check["ran"] = o.check;
    if (reference) {
      double max_abs = 0, max_ref = 0;
      bool identical = true;
      int64_t compared = 0;
      for (int64_t id : trace.requests) {
        const int slot = pool->slot_index(handle_of.at(id));
        const int ref_slot = reference->slot_index(reference_handle_of.at(id));
        uint64_t h = kFnvOffset;
        for (int layer = 0; layer < L; ++layer) {
          for (int kind = 0; kind < 2; ++kind) {
            // The views materialize (replay) before they are read.
            const TensorView got = kind == 0 ? pool->conv_state(layer) : pool->ssm_state(layer);
            const TensorView want =
                kind == 0 ? reference->conv_state(layer) : reference->ssm_state(layer);
            const int64_t elems = kind == 0 ? config.conv_state_elems() : config.ssm_state_elems();
            const std::size_t ses = dtype_size(got.dtype);
            std::vector<uint8_t> a(static_cast<std::size_t>(elems) * ses), b(a.size());
            memory.synchronize();
            memory.download(a.data(),
                            static_cast<const uint8_t*>(got.data) + slot * got.stride[0] * ses,
                            a.size());
            std::memcpy(b.data(),
                        static_cast<const uint8_t*>(want.data) + ref_slot * want.stride[0] * ses,
                        b.size());
            h = fnv1a(h, a.data(), a.size());
            identical = identical && a == b;
            for (int64_t e = 0; e < elems; ++e) {
              const float x = element(a.data(), got.dtype, e), y = element(b.data(), want.dtype, e);
              max_abs = std::max(max_abs, static_cast<double>(std::fabs(x - y)));
              max_ref = std::max(max_ref, static_cast<double>(std::fabs(y)));
            }
            compared += static_cast<int64_t>(a.size());
          }
        }
        prints.states.push_back(h);
      }
      // CPU is bit-exact by contract. A device backend sums in another order: fp32 relative
      // error <= 1e-5 (DESIGN.md section 7); with bf16 activations or SSM state a rounding that
      // lands on the other side of a tie moves an element by a bf16 ulp, so the tolerance is
      // 2e-2 there (the GPU test suite uses the same rule).
      const double rel = max_ref > 0 ? max_abs / max_ref : max_abs;
      const bool bf16 = sh.act == DType::kBF16 || config.ssm_state_dtype() == DType::kBF16;
      const double tolerance = cuda ? (bf16 ? 2e-2 : 1e-5) : 0.0;
      check["bit_identical"] = identical;
      check["max_abs_error"] = max_abs;
      check["max_rel_error"] = rel;
      check["tolerance"] = tolerance;
      check["compared_bytes"] = compared;
      check["state_norm_nonzero"] = max_ref > 0;
      // All-zero states pass only when no token was accepted (then zero is the right answer);
      // otherwise they would mean nothing was written, in both pools alike.
      const bool zero_fails = max_ref == 0 && tokens_total > 0;
      check["passed"] = (cuda ? rel <= tolerance : identical) && !zero_fails;
      if (zero_fails) {
        check["reason"] = "every committed state is zero although the trace accepted tokens";
      }
    }

    Json section;
    section["strategy"] = strategy_name(strategy);
    Json mem;
    // Where the committed state really lives (the pool's own view of it), not the option asked.
    mem["state_device"] = pool->conv_state(0).device == Device::kCuda ? "cuda" : "cpu";
    mem["committed_bytes"] = pool->committed_bytes();
    mem["workspace_bytes"] = pool->workspace_bytes();
    mem["scratch_bytes"] = pool->scratch_bytes();
    mem["committed_bytes_per_request"] = sb.committed_per_request;
    mem["scratch_bytes_per_row"] = replay ? 0 : sb.scratch_per_row;
    mem["records_bytes_per_slot"] = replay ? sb.records_per_slot : 0;
    section["memory"] = mem;
    for (int64_t id : trace.requests) pool->release(handle_of.at(id));
    pool.reset();

    Json timing;
    timing["verify_seconds"] = verify_total;
    timing["commit_seconds"] = commit_total;
    timing["verify_seconds_per_round"] = percentiles(verify_times);
    timing["commit_seconds_per_round"] = percentiles(commit_times);
    timing["materialize_seconds"] = materialize_s;
    section["timing"] = timing;
    Json bytes;
    bytes["model"] = replay
                         ? "replay: verify reads the checkpoint per live row-layer + its h "
                           "history factor records and pending conv records, writes the conv "
                           "window after pending steps, the SSM state only when it folds (h > L, "
                           "the round's fold limit: replay_fold_limit) and a conv + factor "
                           "record per window token; commit 0"
                         : "snapshot: verify (1 + T) states per live row-layer; commit 2 "
                           "states per advancing row-layer";
    bytes["verify_bytes"] = verify_bytes_total;
    bytes["commit_bytes"] = commit_bytes_total;
    bytes["verify_bytes_per_round"] =
        rounds.empty() ? 0.0 : double(verify_bytes_total) / rounds.size();
    bytes["commit_bytes_per_round"] =
        rounds.empty() ? 0.0 : double(commit_bytes_total) / rounds.size();
    bytes["verify_gb_per_s"] = verify_total > 0 ? verify_bytes_total / verify_total / 1e9 : 0.0;
    bytes["commit_gb_per_s"] = commit_total > 0 ? commit_bytes_total / commit_total / 1e9 : 0.0;
    bytes["materialize_bytes"] = materialize_bytes;
    bytes["padding_rows"] = padding_rows_total;
    section["bytes"] = bytes;
    section["check"] = check;
    section["rounds"] = std::move(rounds);
    return section;
  };

  std::vector<Json> sections;
  std::vector<Fingerprints> prints(strategies.size());
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    sections.push_back(run_strategy(strategies[i], prints[i]));
  }
  if (draw) *progress << "\n";
  // The run has completed (a --check that fails included): the trace is saved now. A run refused
  // at any allocation (the weights, the inputs, --check's reference pool, either strategy's pool)
  // writes nothing; the trial pools above were made with nothing else in memory, so they alone
  // could not say that.
  blame = SizeBlame{};  // (what follows is the report: a failure there is not the run's size)
  if (!o.save_trace.empty()) {
    try {
      spec::write_trace_file(o.save_trace, trace);
    } catch (const Error& e) {
      throw CLI::ValidationError("--save-trace", e.what());
    }
  }

  Json report;
  report["tool"] = "specstate simulate";
  report["report_version"] = 1;
  report["specstate_version"] = version();
  Json opts;
  opts["model"] = o.model_file.empty() ? Json(o.model) : Json(nullptr);  // a file names the model
  opts["model_file"] = o.model_file.empty() ? Json(nullptr) : Json(o.model_file);
  opts["tp"] = o.tp;
  opts["backend"] = o.backend;
  opts["strategy"] = o.strategy;
  opts["packing"] = o.packing;
  opts["seed"] = o.seed;
  opts["warmup"] = o.warmup;
  opts["trace"] = o.trace_path.empty() ? Json(nullptr) : Json(o.trace_path);
  report["options"] = opts;
  Json model;
  model["name"] = preset.name;
  describe_model(preset, config, model);
  report["model"] = model;
  Json tr;
  tr["source"] = source;
  tr["requests"] = num_requests;
  tr["rounds"] = num_rounds;
  tr["max_window"] = max_window;
  tr["records"] = trace.records.size();
  tr["meta"] = Json::parse(trace.meta_json);
  tr["saved_to"] = o.save_trace.empty() ? Json(nullptr) : Json(o.save_trace);
  report["trace"] = tr;
  Json acc;
  const std::size_t timed_rounds = sections.front()["rounds"].size();
  acc["mean_accepted_length"] = trace.mean_accepted_length();
  acc["tokens_per_round"] =
      timed_rounds == 0 ? 0.0 : static_cast<double>(tokens_total) / timed_rounds;
  acc["tokens_total"] = tokens_total;
  // Only the accepted lengths a window can reach: a tree of depth d accepts at most d tokens.
  int reachable = 0;
  bool one_window = true;
  for (const auto& rec : trace.records) {
    reachable = std::max(reachable, rec.window.max_depth());
    one_window = one_window && rec.window == trace.records.front().window;
  }
  std::vector<int64_t> histogram = trace.accepted_histogram();
  histogram.resize(static_cast<std::size_t>(reachable) + 1, 0);
  acc["histogram"] = histogram;
  acc["max_accepted_length"] = reachable;
  // What the acceptance came from, for the plot's title.
  // (Whole: a fixed buffer cut a long --trace path or --histogram, inside a UTF-8 sequence too.)
  std::string label;
  if (source == "geometric") {
    char alpha[32];
    std::snprintf(alpha, sizeof(alpha), "%.2f", o.accept_rate);
    label = std::string("geometric, alpha ") + alpha;
  } else if (source == "fixed") {
    label = "fixed a = " + std::to_string(o.fixed);
  } else if (source == "empirical") {
    label = "empirical " + o.histogram;
  } else {
    label = "trace " + source;
  }
  acc["source"] = label;
  report["acceptance"] = acc;
  report["trace"]["window"] = one_window && !trace.records.empty()
                                  ? trace.records.front().window.describe()
                                  : "windows up to T = " + std::to_string(max_window);
  if (!both) {
    // One strategy: the sections' keys at the top level, as before --strategy existed.
    Json& s = sections.front();
    report["memory"] = std::move(s["memory"]);
    report["timing"] = std::move(s["timing"]);
    report["timing"]["wall_seconds"] = seconds_since(wall_start);
    report["bytes"] = std::move(s["bytes"]);
    report["check"] = std::move(s["check"]);
    report["rounds"] = std::move(s["rounds"]);
    return report;
  }
  Json by_strategy;
  for (Json& s : sections) {
    const std::string name = s["strategy"].get<std::string>();
    s.erase("strategy");
    by_strategy[name] = std::move(s);
  }
  report["strategies"] = std::move(by_strategy);
  report["timing"] = Json{{"wall_seconds", seconds_since(wall_start)}};
  Json check;
  check["ran"] = o.check;
  if (o.check) {
    // Each strategy against plain prefill, and the two against each other, bit for bit (the
    // strategy-equivalence invariant, DESIGN.md section 7, holds on every backend).
    const Fingerprints &x = prints[0], &y = prints[1];
    std::string difference;
    for (std::size_t i = 0; i < x.outputs.size() && difference.empty(); ++i) {
      if (i >= y.outputs.size() || x.outputs[i] != y.outputs[i]) {
        difference = "outputs of timed round " + std::to_string(i) + " differ";
      }
    }
    for (std::size_t i = 0; i < x.states.size() && difference.empty(); ++i) {
      if (i >= y.states.size() || x.states[i] != y.states[i]) {
        difference = "committed state of request " + std::to_string(trace.requests[i]) + " differs";
      }
    }
    const bool outputs_identical = x.outputs == y.outputs;
    const bool states_identical = x.states == y.states && !x.states.empty();
    bool each = true;
    for (const auto& [name, s] : report["strategies"].items()) {
      each = each && s["check"]["passed"].get<bool>();
    }
    check["strategies_passed"] = each;
    check["outputs_identical"] = outputs_identical;
    check["committed_states_identical"] = states_identical;
    check["compared_rounds"] = x.outputs.size();
    check["compared_requests"] = x.states.size();
    check["difference"] = difference.empty() ? Json(nullptr) : Json(difference);
    check["passed"] = each && outputs_identical && states_identical;
  }
  report["check"] = check;
  return report;
}

}  // namespace

// A run past the machine's memory is a usage error naming the option that sized it, wherever its
// allocation failed: the pools are refused up front (kResourceExhausted), but the weights, the
// input sets, the outputs or --check's reference prefill could still run out (exit 1, "out of
// memory", at address-space limits a few MB wide between the pools' and the run's needs).
Json run_simulation(const SimulateOptions& o, std::ostream* progress) {
  SizeBlame blame;
  try {
    return simulate(o, progress, blame);
  } catch (const std::bad_alloc&) {
    if (blame.option.empty()) throw;
    throw CLI::ValidationError(blame.option, blame.prefix +
                                                 ": out of memory for the run's buffers (the "
                                                 "model's weights, the inputs and outputs)" +
                                                 blame.advice);
  }
}

}  // namespace specstate::cli
