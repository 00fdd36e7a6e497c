// Helpers the GPU benchmark binaries share: error checks, device allocation, medians and the
// device copy bandwidth every figure is reported against (METHOD: measured by the same binary).
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_fill.h"
#include "kernels/kernel_types.h"
#include "lib/backend.h"
#include "specstate/config.h"
#include "specstate/pool.h"

namespace specstate::bench {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

template <typename T>
T* device_alloc(std::size_t count) {
  void* p = nullptr;
  check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

// The dtypes engines run both benchmarked models in: bf16 activations and conv state, f32 SSM
// state.
template <typename LayerConfig>
void set_engine_dtypes(LayerConfig& c) {
  c.act_dtype = DType::kBF16;
  c.conv_state_dtype = DType::kBF16;
  c.ssm_state_dtype = DType::kF32;
}

// Layer l's committed states of `pool` filled with random values: the SSM state (f32, scale
// 0.05) from `ssm_seed`, the conv windows (bf16, scale 1) from `conv_seed`.
inline void fill_layer_states(StatePool& pool, int l, uint64_t ssm_seed, uint64_t conv_seed,
                              cudaStream_t stream) {
  const TensorView ssm = pool.ssm_state(l), conv = pool.conv_state(l);
  check(fill_random(ssm.data, ssm.numel(), false, 0.05f, ssm_seed, stream), "fill");
  check(fill_random(conv.data, conv.numel(), true, 1.0f, conv_seed, stream), "fill");
}

// The fold limit a verify of B rows gets in service (the pool's begin_verify: RoundPlan::
// fold_limit), from the pool's layout: the library's own rule (detail::round_fold_limit).
template <typename Storage>
int round_fold_limit(const Storage& storage, int B) {
  return detail::round_fold_limit(storage.layout, B);
}

// What both kinds' launch arguments (detail::cuda::GdnLaunchArgs, Mamba2LaunchArgs) of a bench
// round hold alike: the pool's storage, layer l, B rows of T tokens on the bench's device slot
// list, and the state I/O of snapshot (per-token stores) or replay (pending steps re-run,
// committed state stored at the round's fold limit, records). (The fold limit was left 0 once:
// every replay folded, while the bytes counted the ring model's fold rate.)
template <typename LaunchArgs, typename Storage>
void set_round_args(LaunchArgs& a, const Storage* storage, int l, int B, int T, bool replay,
                    const int32_t* device_slots) {
  a.storage = storage;
  a.layer = l;
  a.rows = B;
  a.tokens = T;
  if (replay) {
    a.io.conv_pending = a.io.history = a.io.fold = a.io.store_replayed = true;
    a.io.write_records = true;
    a.io.fold_limit = round_fold_limit(*storage, B);
  } else {
    a.io.store_tokens = true;
  }
  a.device_slots = device_slots;
}

// What a per-kernel replay bench's graph does to history: it holds no commit, so every replay
// applies the history the priming rounds left in the rows' cursors and folds the rows whose
// history passes the round's fold limit, the same each time. Its bytes are these (read back from
// the device), not the ring model's (which describes a stream of committed rounds).
struct PrimedHistory {
  double fold_rate = 0;     // of (layer, row) pairs
  double mean_history = 0;  // records a row applies, mean over (layer, row)
};
template <typename Storage>
PrimedHistory primed_history(const Storage& storage, int layers, const std::vector<int>& slots,
                             int fold_limit) {
  PrimedHistory out;
  if (storage.base(detail::Buf::kCursor) == nullptr || slots.empty()) return out;
  for (int l = 0; l < layers; ++l) {
    for (int slot : slots) {
      int32_t cursor[2] = {0, 0};  // base, history
      check(cudaMemcpy(cursor, storage.cursor(l, slot), sizeof(cursor), cudaMemcpyDeviceToHost),
            "reading a replay cursor");
      out.mean_history += cursor[1];
      out.fold_rate += kernels::replay_folds(cursor[1], fold_limit) ? 1 : 0;
    }
  }
  const double n = double(layers) * slots.size();
  out.fold_rate /= n;
  out.mean_history /= n;
  return out;
}

// The accepted length of row r in round k of a (T, B) benchmark, in [1, T]: splitmix64 of
// (1000 T + B, k, r). tools/sglang_ring_bench.py draws the same lengths with the same formula
// (bench_accepted there), so that both sides of a comparison replay the same histories: each
// side's own generator drew different lengths, and with 4 rounds a graph a few draws set the
// work (T = 4, B = 1: a mean of 2.00 accepted here against 3.25 there).
inline int32_t bench_accepted(int T, int B, int k, int r) {
  uint64_t x = (static_cast<uint64_t>(1000 * T + B) << 32) ^ (static_cast<uint64_t>(k) << 20) ^
               static_cast<uint64_t>(r);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return 1 + static_cast<int32_t>(x % static_cast<uint64_t>(T));
}

// 0 .. n-1 shuffled by `rng`: the order in which a round takes the pool's handles (its first B).
inline std::vector<int> shuffled_order(int n, std::mt19937_64& rng) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// The current device's name, and whether it is an H200: SGLang's and the other recorded peer
// figures (tests/bench/sglang_baseline.h, ../shared/baseline) are the H200's, so a ratio to them
// is printed only on one (an H100's 70% of the bandwidth made them read worse than they are).
inline std::string device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "unknown device";
  return prop.name;
}
inline bool on_h200() {
  static const bool yes = device_name().find("H200") != std::string::npos;
  return yes;
}
// `us` where this run may be set against an H200 figure, else 0 (no comparison).
inline double h200_figure(double us) { return on_h200() ? us : 0.0; }

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;  // (of two samples: their mean)
}

// Device copy bandwidth (bytes read + written) of a 1 GiB and a 4 GiB cudaMemcpy, the larger.
inline double measure_copy_gbps(cudaStream_t stream) {
  double best = 0;
  for (std::size_t bytes : {std::size_t{1} << 30, std::size_t{4} << 30}) {
    char* a = device_alloc<char>(bytes);
    char* b = device_alloc<char>(bytes);
    check(fill_random(a, bytes / 4, false, 1.0f, 7, stream), "fill");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> ms;
    for (int i = 0; i < 12; ++i) {
      cudaEventRecord(e0, stream);
      cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(e1, stream);
      check(cudaEventSynchronize(e1), "copy");
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      if (i >= 2) ms.push_back(t);
    }
    const double gbps = 2.0 * bytes / (median(ms) * 1e-3) / 1e9;
    // stderr: stdout stays the benchmark's own output (--benchmark_format=json parses).
    std::fprintf(stderr, "copy bandwidth (%zu MiB, read + write): %.1f GB/s\n", bytes >> 20, gbps);
    best = std::max(best, gbps);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
  }
  return best;
}

// Captures what `body` enqueues on `stream` into an executable graph.
template <typename Fn>
cudaGraphExec_t capture_graph(cudaStream_t stream, Fn&& body) {
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
  body();
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaGraphDestroy(graph);
  return exec;
}

// Replays `exec` (two warm-up launches, then kReplaysPerIteration per benchmark iteration) with
// `flush_bytes` of `flush` rewritten before each replay (the L2 flushed), each replay timed by
// events e0 / e1 on `stream`; returns the median replay time in us. Several replays an iteration:
// Google Benchmark stops at MinTime (0.05 s), which a graph of 4 rounds at B = 128 (20-150 ms)
// passes in one iteration, so one replay an iteration made the "median" of 1 to 4 samples; 7 an
// iteration still left the large shapes (the ones issue 16's targets name) a median of 7 where
// the SGLang and fla tools take 20: 21, at least as many as theirs.
inline constexpr int kReplaysPerIteration = 21;
inline double time_graph(cudaGraphExec_t exec, cudaStream_t stream, void* flush,
                         std::size_t flush_bytes, cudaEvent_t e0, cudaEvent_t e1,
                         benchmark::State& state) {
  for (int i = 0; i < 2; ++i) check(cudaGraphLaunch(exec, stream), "warm-up");
  check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> us;
  int i = 0;
  for (auto _ : state) {
    double iteration_ms = 0;
    for (int k = 0; k < kReplaysPerIteration; ++k) {
      check(cudaMemsetAsync(flush, i++ & 0xff, flush_bytes, stream), "flush");
      check(cudaEventRecord(e0, stream), "event");
      check(cudaGraphLaunch(exec, stream), "replay");
      check(cudaEventRecord(e1, stream), "event");
      check(cudaEventSynchronize(e1), "sync");
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      iteration_ms += ms;
      us.push_back(ms * 1e3);
    }
    // An iteration's time is its replays' (so MinTime counts the device time it took); the
    // figures the benches report are the counters, from the median below.
    state.SetIterationTime(iteration_ms * 1e-3);
  }
  state.counters["samples"] = static_cast<double>(us.size());
  return median(us);
}

// The shapes every rounds and per-layer benchmark runs: T in {2, 4, 8} x B in {1, 8, 32, 128},
// manual (event) time in us.
// SPECSTATE_BENCH_RING: PoolOptions::replay_ring of the benchmarks' replay pools (0 or unset:
// the default ring, default_replay_ring(kind, T)).
inline int bench_ring() {
  const char* r = std::getenv("SPECSTATE_BENCH_RING");
  return r ? std::atoi(r) : 0;
}

// SPECSTATE_BENCH_LAYERS: the benchmark model's layers (1..all; unset: all), so that a round's
// fixed cost (its uploads and commit) is the intercept of rounds against layers.
inline int bench_layers(int all) {
  const char* r = std::getenv("SPECSTATE_BENCH_LAYERS");
  const int n = r ? std::atoi(r) : all;
  return n >= 1 && n <= all ? n : all;
}

// SPECSTATE_BENCH_FOLD_ROWS: PoolOptions::replay_fold_rows of the replay pools (0 or unset: the
// kind's default, default_replay_fold_rows: 8 rows, Mamba2 1; 1: every round folds at the whole
// ring), for sweeping the fold limit's row
// threshold (docs/strategies.md, "The fold limit is the round's") with one binary.
inline int bench_fold_rows() {
  const char* r = std::getenv("SPECSTATE_BENCH_FOLD_ROWS");
  return r ? std::max(0, std::atoi(r)) : 0;
}

// SPECSTATE_BENCH_LAYOUT: the element order of the benchmarks' pools (PoolOptions::conv_layout /
// ssm_layout): unset or "default", specstate's; "conv_last", channels-last conv windows; "kv",
// [HV][K][V] states (delta-rule kinds); "vllm", both (a Mamba2 pool takes only the conv part):
// vLLM's order before its PR #33291; today's vLLM keeps [HV][V][K] states, i.e. "conv_last".
inline void apply_bench_layout(PoolOptions& o, LayerKind kind) {
  const char* v = std::getenv("SPECSTATE_BENCH_LAYOUT");
  const std::string layout = v ? v : "default";
  if (layout == "conv_last" || layout == "vllm") o.conv_layout = ConvLayout::kChannelsLast;
  if ((layout == "kv" || layout == "vllm") && kind != LayerKind::kMamba2) {
    o.ssm_layout = SsmLayout::kKV;
  }
}

// The options of a benchmark's CUDA pool: `rows` slots and rows, windows up to `max_window`, on
// `stream`; a replay pool takes bench_ring() and bench_fold_rows(); the layout is
// SPECSTATE_BENCH_LAYOUT's.
inline PoolOptions bench_pool_options(int rows, int max_window, cudaStream_t stream,
                                      Strategy strategy = Strategy::kSnapshot,
                                      LayerKind kind = LayerKind::kGatedDeltaNet) {
  PoolOptions o;
  apply_bench_layout(o, kind);
  o.num_slots = rows;
  o.max_rows = rows;
  o.max_window = max_window;
  o.backend = Backend::kCuda;
  o.stream = stream;
  o.strategy = strategy;
  if (strategy == Strategy::kReplay) {
    o.replay_ring = bench_ring();
    o.replay_fold_rows = bench_fold_rows();
  }
  return o;
}

// A benchmark's (T, B) grid, timed manually in microseconds.
inline void shape_grid(benchmark::internal::Benchmark* b, std::initializer_list<int> windows,
                       std::initializer_list<int> batches) {
  for (int T : windows) {
    for (int B : batches) b->Args({T, B});
  }
  b->ArgNames({"T", "B"})->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.05);
}
inline void shapes(benchmark::internal::Benchmark* b) { shape_grid(b, {2, 4, 8}, {1, 8, 32, 128}); }

// Where a benchmark binary times its graphs: its stream, the L2 flush buffer and two events.
struct GraphTimer {
  cudaStream_t stream = nullptr;
  void* flush = nullptr;
  std::size_t flush_bytes = 0;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
};

// What a kind's rounds benchmark holds besides its layers' buffers (the Mamba2 and KDA binaries):
// a stream, the copy bandwidth measured on it, the L2 flush buffer and two events (timer()),
// four rounds' accepted lengths (`accepted4`, [4][max_b]), random device buffers drawn one seed
// after another (random()), and the one live pool, made anew when the strategy or T changes (a
// snapshot pool at T = 8, B = 128 does not fit beside another).
class RoundsWorld {
 public:
  cudaStream_t stream = nullptr;
  double copy_gbps = 0;
  int32_t* accepted4 = nullptr;
  std::unique_ptr<StatePool> pool;
  std::vector<SlotHandle> handles;

  RoundsWorld(int max_b, std::size_t flush_bytes, uint64_t seed)
      : max_b_(max_b), flush_bytes_(flush_bytes), seed_(seed) {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    copy_gbps = measure_copy_gbps(stream);
    check(cudaEventCreate(&e0_), "event");
    check(cudaEventCreate(&e1_), "event");
    accepted4 = device_alloc<int32_t>(4 * static_cast<std::size_t>(max_b));
    flush_ = device_alloc<char>(flush_bytes);
  }

  // n random elements (fill_random: uniform in [-scale, scale), bf16 or f32), the next seed.
  void* random(std::size_t n, bool bf16, float scale) {
    void* p = device_alloc<char>(n * (bf16 ? 2 : 4));
    check(fill_random(p, n, bf16, scale, seed_++, stream), "fill");
    return p;
  }

  // The pool of `model` for strategy s and windows up to T, with max_b slots acquired (handles)
  // and every layer's committed states random (layer l: fill_layer_states(ssm_seed + l,
  // conv_seed + l)); *made: whether it was made anew by this call.
  StatePool& pool_for(const ModelConfig& model, LayerKind kind, Strategy s, int T,
                      uint64_t ssm_seed, uint64_t conv_seed, bool* made = nullptr) {
    if (made) *made = false;
    if (pool && pool_strategy_ == s && pool_T_ == T) return *pool;
    pool.reset();
    handles.clear();
    pool = std::make_unique<StatePool>(model, bench_pool_options(max_b_, T, stream, s, kind));
    pool_strategy_ = s;
    pool_T_ = T;
    for (int i = 0; i < max_b_; ++i) handles.push_back(pool->acquire());
    for (int l = 0; l < model.num_layers; ++l) {
      fill_layer_states(*pool, l, ssm_seed + l, conv_seed + l, stream);
    }
    if (made) *made = true;
    return *pool;
  }

  // A benchmark's pool, or null after skipping the benchmark where the device cannot hold it
  // (a snapshot pool of kMaxB rows x long windows on an 80 GB card): the rest of the run goes
  // on, and the skip names the bytes needed and free.
  template <typename Get>
  static StatePool* pool_or_skip(benchmark::State& state, Get&& get) {
    try {
      return &get();
    } catch (const Error& e) {
      if (e.status() != Status::kResourceExhausted) throw;
      state.SkipWithError(e.what());
      return nullptr;
    }
  }

  GraphTimer timer() const { return GraphTimer{stream, flush_, flush_bytes_, e0_, e1_}; }

 private:
  int max_b_;
  std::size_t flush_bytes_;
  uint64_t seed_;
  void* flush_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  Strategy pool_strategy_ = Strategy::kSnapshot;
  int pool_T_ = 0;
};

// Four consecutive rounds of `pool` in one CUDA graph, the median replay / 4 (us): B of `handles`
// in an order shuffled per (T, B), accepted lengths in [1, T] per round and row (bench_accepted;
// written to `accepted4`, device, [4][handles.size()]), `verify(l, tokens)` running layer l's
// verify. One eager round first leaves pending steps for the first captured round (replay). Marks
// the benchmark failed where the last commit was flagged.
template <typename Verify>
double time_rounds4(benchmark::State& state, StatePool& pool,
                    const std::vector<SlotHandle>& handles, int T, int B, int layers,
                    int32_t* accepted4, const GraphTimer& timer, Verify&& verify) {
  const int max_b = static_cast<int>(handles.size());
  std::mt19937_64 rng(1000 * T + B);
  const std::vector<int> order = shuffled_order(max_b, rng);
  VerifyBatch batch;
  batch.window = T;
  for (int r = 0; r < B; ++r) batch.rows.push_back(handles[order[r]]);
  std::vector<int32_t> acc(4 * static_cast<std::size_t>(max_b));
  for (int k = 0; k < 4; ++k) {
    for (int r = 0; r < max_b; ++r) {
      acc[static_cast<std::size_t>(k) * max_b + r] = bench_accepted(T, B, k, r);
    }
  }
  check(cudaMemcpy(accepted4, acc.data(), sizeof(int32_t) * acc.size(), cudaMemcpyHostToDevice),
        "accepted");
  auto round = [&](int k) {
    pool.begin_verify(batch);
    for (int l = 0; l < layers; ++l) verify(l, int64_t{B} * T);
    pool.commit(TensorView::contiguous(accepted4 + k * max_b, DType::kI32, {B}, Device::kCuda));
  };
  round(3);
  cudaGraphExec_t exec = capture_graph(timer.stream, [&] {
    for (int k = 0; k < 4; ++k) round(k);
  });
  const double us =
      time_graph(exec, timer.stream, timer.flush, timer.flush_bytes, timer.e0, timer.e1, state) / 4;
  cudaGraphExecDestroy(exec);
  if (pool.last_commit_status() != Status::kSuccess) state.SkipWithError("commit flagged");
  return us;
}

// main() of a GPU benchmark binary: runs the benchmarks (none without a device, said on stdout),
// then `print_table`.
inline int run_benchmarks(int argc, char** argv, void (*print_table)()) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: GPU benchmarks skipped\n");
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  print_table();
  benchmark::Shutdown();
  return 0;
}

}  // namespace specstate::bench
