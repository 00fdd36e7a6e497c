// GPU benchmarks at Qwen3-Next-80B TP1 shapes (H=16, HV=32, K=V=128, W=4, conv_dim 8192,
// 36 GDN layers, bf16 activations and conv state, fp32 SSM state), T in {2,4,8}, B in
// {1,8,32,128}: verify conv per layer, verify recurrence per layer (snapshot and replay),
// commit over 36 layers, the whole round (36 layers verify + commit in one CUDA graph), and
// rounds as SGLang's replay figures were measured: a graph of 4 consecutive rounds (begin_verify,
// 36 verifies, commit with device accepted lengths that differ per round), median / 4, for both
// strategies, against the floor (read + write every row's state once per layer at the copy
// bandwidth this binary measures).
//
// Method (METHOD.md): random data; slots shuffled; accepted lengths random in [1, T]; every
// measured region is a CUDA graph replay timed with CUDA events (manual time), the L2 flushed
// (a 256 MiB memset) before each replay; medians. Each row prints the median time, the minimum
// bytes our data flow moves, the fraction of the copy bandwidth this binary measures, SGLang's
// figure for the same shape (sglang_baseline.h) and the ratio ours / SGLang.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_fill.h"
#include "bench_util.h"
#include "kernels/conv_update.h"
#include "kernels/gdn_recurrence.h"
#include "lib/cuda/launch.h"
#include "lib/pool_access.h"
#include "sglang_baseline.h"
#include "specstate/specstate.h"

namespace specstate::bench {
namespace {

namespace k = specstate::kernels;

constexpr int kH = 16, kHV = 32, kK = 128, kV = 128, kW = 4;
// Qwen3-Next-80B's 36 GDN layers, or fewer under SPECSTATE_BENCH_LAYERS (bench_layers).
const int kLayers = bench_layers(36);
constexpr int kConvDim = 2 * kH * kK + kHV * kV;  // 8192
constexpr int kMaxB = 128, kMaxT = 8;
constexpr std::size_t kFlushBytes = 256u << 20;

// Everything the benchmarks share: one pool sized for the largest shape, per-layer inputs.
struct World {
  cudaStream_t stream = nullptr;
  double copy_gbps = 0;
  std::unique_ptr<StatePool> pool;  // snapshot, max_window = snap_T
  int snap_T = kMaxT;  // smaller where the device's memory does not hold kMaxT (skip_snapshot)
  std::unique_ptr<StatePool> rpool;  // replay, max_window = rpool_T (replay_pool)
  int rpool_T = 0;
  int ring = 0;  // PoolOptions::replay_ring of the replay pools (SPECSTATE_BENCH_RING, 0: default)
  std::vector<SlotHandle> handles, rhandles;
  detail::cuda::GdnScratch replay_scratch;  // the bench's own replay scratch for kernel launches
  int32_t* accepted4 = nullptr;             // [4][kMaxB] accepted lengths of 4 consecutive rounds
  GdnConfig g;
  std::vector<void*> qkv, a, b, conv_out, core_out, conv_w, A_log, dt_bias;
  int32_t* slots = nullptr;     // [kMaxB] bench-owned slot list for direct kernel launches
  int32_t* accepted = nullptr;  // [kMaxB]
  void* flush = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;

  World() {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    copy_gbps = measure_copy_gbps(stream);
    g.num_k_heads = kH;
    g.num_v_heads = kHV;
    g.head_k_dim = kK;
    g.head_v_dim = kV;
    g.conv_width = kW;
    set_engine_dtypes(g);
    // The snapshot workspace of kMaxB rows x kMaxT tokens is 79 GB (89 GB with the committed
    // state): more than an H100 holds, so the largest window that fits (the snapshot benches of
    // longer windows skip, naming it; the replay pools are apart).
    for (;; snap_T /= 2) {
      try {
        pool = std::make_unique<StatePool>(ModelConfig::gated_delta_net(kLayers, g),
                                           bench_pool_options(kMaxB, snap_T, stream));
        break;
      } catch (const Error& e) {
        if (e.status() != Status::kResourceExhausted || snap_T == 1) throw;
      }
    }
    if (snap_T < kMaxT) {
      std::fprintf(stderr,
                   "snapshot pool: windows up to %d tokens (T = %d does not fit this device)\n",
                   snap_T, kMaxT);
    }
    ring = bench_ring();
    for (int i = 0; i < kMaxB; ++i) handles.push_back(pool->acquire());
    uint64_t seed = 1;
    for (int l = 0; l < kLayers; ++l) {
      fill_layer_states(*pool, l, seed, seed + 1, stream);
      seed += 2;
      const std::size_t tokens = kMaxB * kMaxT;
      auto make = [&](std::size_t n, bool bf16, float scale) {
        void* p = bf16 ? static_cast<void*>(device_alloc<uint16_t>(n))
                       : static_cast<void*>(device_alloc<float>(n));
        check(fill_random(p, n, bf16, scale, seed++, stream), "fill");
        return p;
      };
      qkv.push_back(make(tokens * kConvDim, true, 1.0f));
      a.push_back(make(tokens * kHV, true, 1.0f));
      b.push_back(make(tokens * kHV, true, 1.0f));
      conv_out.push_back(make(tokens * kConvDim, true, 1.0f));
      core_out.push_back(make(tokens * kHV * kV, true, 1.0f));
      conv_w.push_back(make(std::size_t{kConvDim} * kW, true, 0.5f));
      A_log.push_back(make(kHV, false, 1.0f));  // A = e^A_log in (e^-1, e)
      dt_bias.push_back(make(kHV, false, 1.0f));
    }
    slots = device_alloc<int32_t>(kMaxB);
    accepted = device_alloc<int32_t>(kMaxB);
    accepted4 = device_alloc<int32_t>(4 * kMaxB);
    flush = device_alloc<char>(kFlushBytes);
    check(cudaEventCreate(&e0), "event");
    check(cudaEventCreate(&e1), "event");
    check(cudaStreamSynchronize(stream), "setup");
  }

  // The replay pool of windows up to T (an engine sizes max_window to its T: the fold predicate
  // h > R - 2 max_window depends on it), made anew when T changes, its states random.
  StatePool& replay_pool(int T) {
    if (rpool && rpool_T == T) return *rpool;
    rpool.reset();
    rhandles.clear();
    rpool = std::make_unique<StatePool>(ModelConfig::gated_delta_net(kLayers, g),
                                        bench_pool_options(kMaxB, T, stream, Strategy::kReplay));
    rpool_T = T;
    for (int i = 0; i < kMaxB; ++i) rhandles.push_back(rpool->acquire());
    uint64_t seed = 1000 + T;
    for (int l = 0; l < kLayers; ++l) {
      fill_layer_states(*rpool, l, seed, seed + 1, stream);
      seed += 2;
    }
    check(cudaStreamSynchronize(stream), "replay pool");
    return *rpool;
  }
  int ring_of(int T) const {
    return ring > 0 ? ring : static_cast<int>(default_replay_ring(LayerKind::kGatedDeltaNet, T));
  }

  static World& get() {
    static World world;
    return world;
  }
  // Whether a snapshot benchmark of window T skips (the snapshot pool's windows are shorter).
  bool skip_snapshot(benchmark::State& state, int T) const {
    if (T <= snap_T) return false;
    state.SkipWithError(("the snapshot pool holds windows up to " + std::to_string(snap_T) +
                         " tokens on this device")
                            .c_str());
    return true;
  }

  GdnWeights weights(int l) const {
    GdnWeights w;
    w.conv_weight = TensorView::contiguous(conv_w[l], DType::kBF16, {kConvDim, kW}, Device::kCuda);
    w.A_log = TensorView::contiguous(A_log[l], DType::kF32, {kHV}, Device::kCuda);
    w.dt_bias = TensorView::contiguous(dt_bias[l], DType::kF32, {kHV}, Device::kCuda);
    return w;
  }
  GdnInputs inputs(int l, int64_t tokens) const {
    return GdnInputs{
        TensorView::contiguous(qkv[l], DType::kBF16, {tokens, kConvDim}, Device::kCuda),
        TensorView::contiguous(a[l], DType::kBF16, {tokens, kHV}, Device::kCuda),
        TensorView::contiguous(b[l], DType::kBF16, {tokens, kHV}, Device::kCuda)};
  }
  GdnOutputs outputs(int l, int64_t tokens) const {
    return GdnOutputs{
        TensorView::contiguous(conv_out[l], DType::kBF16, {tokens, kConvDim}, Device::kCuda),
        TensorView::contiguous(core_out[l], DType::kBF16, {tokens, kHV, kV}, Device::kCuda)};
  }

  // A round's batch: B handles in shuffled order (the same slots in both pools); accepted lengths
  // in [1, T] (device; bench_accepted, as tools/sglang_ring_bench.py draws them), and four
  // rounds' worth in accepted4.
  VerifyBatch batch(int T, int B) {
    std::mt19937_64 rng(1000 * T + B);
    const std::vector<int> order = shuffled_order(kMaxB, rng);
    VerifyBatch batch;
    batch.window = T;
    std::vector<int32_t> slot_index(B), acc(B), acc4(4 * kMaxB);
    for (int r = 0; r < B; ++r) {
      batch.rows.push_back(handles[order[r]]);
      slot_index[r] = pool->slot_index(handles[order[r]]);
      acc[r] = bench_accepted(T, B, 0, r);
    }
    for (int k = 0; k < 4; ++k) {
      for (int r = 0; r < kMaxB; ++r) acc4[k * kMaxB + r] = bench_accepted(T, B, k, r);
    }
    check(cudaMemcpy(accepted4, acc4.data(), sizeof(int32_t) * acc4.size(), cudaMemcpyHostToDevice),
          "accepted4");
    check(cudaMemcpy(slots, slot_index.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice),
          "slots");
    check(cudaMemcpy(accepted, acc.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice),
          "accepted");
    return batch;
  }

  // The batch of `pool`'s handles matching batch(T, B)'s rows (the same slot indices).
  VerifyBatch batch_of(const StatePool& p, const VerifyBatch& b) const {
    VerifyBatch out = b;
    const std::vector<SlotHandle>& hs = &p == pool.get() ? handles : rhandles;
    for (SlotHandle& h : out.rows) h = hs[pool->slot_index(h)];
    return out;
  }

  // One eager replay round with the batch's accepted lengths: the rows' slots then hold pending
  // steps, which the replay kernels re-run (as in service, where every round's verify does).
  void prime_replay(const VerifyBatch& b, int T, int B) {
    replay_pool(T);
    // SPECSTATE_BENCH_NO_PRIME: the per-kernel replay benchmarks then run with no history.
    if (std::getenv("SPECSTATE_BENCH_NO_PRIME") != nullptr) return;
    rpool->begin_verify(batch_of(*rpool, b));
    for (int l = 0; l < kLayers; ++l) {
      rpool->verify(l, weights(l), inputs(l, int64_t{B} * T), outputs(l, int64_t{B} * T));
    }
    rpool->commit(TensorView::contiguous(accepted, DType::kI32, {B}, Device::kCuda));
    check(cudaStreamSynchronize(stream), "prime");
  }

  // The kernels of one verify layer call, built by the backend's own param builder: snapshot
  // (per-token stores) or replay (pending steps re-run, committed state stored once, records).
  detail::cuda::GdnLaunch launch_params(int l, int T, int B, bool replay) const {
    detail::cuda::GdnLaunchArgs a;
    set_round_args(a, &detail::PoolAccess::storage(replay ? *rpool : *pool), l, B, T, replay,
                   slots);
    const GdnWeights w = weights(l);
    const GdnInputs in = inputs(l, int64_t{B} * T);
    const GdnOutputs out = outputs(l, int64_t{B} * T);
    a.weights = &w;
    a.inputs = &in;
    a.outputs = &out;
    return detail::cuda::build_gdn_launch(a);
  }
};

// Minimum bytes of our data flow.
constexpr double kSsmBytes = double(kHV) * kV * kK * 4;              // one fp32 state, 2 MiB
constexpr double kConvStateBytes = double(kConvDim) * (kW - 1) * 2;  // one bf16 window
double conv_bytes(int T, int B) {
  const double tokens = double(B) * T;
  return tokens * kConvDim * 2 * 2 + B * kConvStateBytes + kConvDim * kW * 2 +
         tokens * kConvStateBytes;
}
double gdn_bytes(int T, int B) {
  const double tokens = double(B) * T;
  return B * kSsmBytes * (1 + T) + tokens * kConvDim * 2 + tokens * kHV * 2 * 2 +
         tokens * kHV * kV * 2;
}
// Replay verify recurrence, one layer (DESIGN.md section 8): the checkpoint read once, written
// at the fold rate f, the history factor records read (h per row, the bench's mean), the window's
// inputs, outputs and factor records written.
constexpr double kFactorBytes = 20672;  // u (HV x V f32), e^g, kf, k (H x K bf16), padded
double gdn_replay_bytes(int T, int B, double f, double h) {
  const double tokens = double(B) * T;
  return B * kSsmBytes * (1 + f) + B * h * kFactorBytes + tokens * kFactorBytes +
         tokens * kConvDim * 2 + tokens * kHV * 2 * 2 + tokens * kHV * kV * 2;
}
// Replay verify conv, one layer: the snapshot conv's inputs and outputs without the T windows,
// plus the conv records written (window) and read (pending), one window store.
double conv_replay_bytes(int T, int B) {
  const double tokens = double(B) * T, pending = double(B) * (T + 1) / 2;
  const double record = kConvDim * 2.0;
  return tokens * kConvDim * 2 * 2 + 2 * B * kConvStateBytes + kConvDim * kW * 2 + tokens * record +
         pending * record;
}
// The fold rate and mean history of the ring under the bench's acceptance draw (uniform in
// [1, T] per row and round, rounds of B rows): the library's exact model of the cursor
// (replay_ring_model).
// NaN where a forced SPECSTATE_BENCH_RING is too short for T (no pool of that T is made).
std::pair<double, double> fold_rate(int T, int B, int ring) {
  if (ring < 2 * T) return {std::nan(""), std::nan("")};
  const ReplayRingModel m = replay_ring_model(
      T, ring, B,
      bench_fold_rows() > 0 ? bench_fold_rows()
                            : default_replay_fold_rows(LayerKind::kGatedDeltaNet));
  return {m.fold_rate, m.mean_history};
}
// The replay floor of a round: per row and layer one checkpoint read, f writes, the conv window
// read and written, and the factor records (h read, T written).
double replay_floor_bytes(int T, int B, int ring) {
  const auto [f, h] = fold_rate(T, B, ring);
  return double(kLayers) * B * (kSsmBytes * (1 + f) + 2 * kConvStateBytes + (h + T) * kFactorBytes);
}
// The floor of a round: every row's state read and written once per layer.
double floor_bytes(int B) { return double(kLayers) * B * 2 * (kSsmBytes + kConvStateBytes); }
double commit_bytes(int B) { return double(kLayers) * B * 2 * (kSsmBytes + kConvStateBytes); }

struct Result {
  double us = 0, bytes = 0, frac = 0, sglang_us = 0, ratio = 0;
};
std::map<std::tuple<int, int, std::string>, Result>& results() {
  static std::map<std::tuple<int, int, std::string>, Result> r;
  return r;
}

double time_graph(World& w, cudaGraphExec_t exec, benchmark::State& state) {
  return bench::time_graph(exec, w.stream, w.flush, kFlushBytes, w.e0, w.e1, state);
}

template <typename Fn>
cudaGraphExec_t capture(World& w, Fn&& body) {
  return capture_graph(w.stream, std::forward<Fn>(body));
}

// SGLang's figure for a whole round or commit (36 layers, H200) where this run's model has its 36
// layers; 0 (no comparison) under SPECSTATE_BENCH_LAYERS < 36, e.g. on an H100, whose memory does
// not hold 36 layers at B = 128: a ratio of 24 layers to 36 would flatter ours by 1.5x.
// (And only on an H200: h200_figure.)
double sglang_whole(double us) { return kLayers == 36 ? h200_figure(us) : 0.0; }

void report(benchmark::State& state, World& w, int T, int B, const std::string& what, double us,
            double bytes, double sglang_us) {
  Result r;
  r.us = us;
  r.bytes = bytes;
  r.frac = bytes / (us * 1e-6) / 1e9 / w.copy_gbps;
  r.sglang_us = sglang_us;
  r.ratio = sglang_us > 0 ? us / sglang_us : 0;
  results()[{T, B, what}] = r;
  state.counters["us"] = us;
  state.counters["MB"] = bytes / 1e6;
  state.counters["frac_copy_bw"] = r.frac;
  state.counters["sglang_us"] = sglang_us;
  state.counters["ratio"] = r.ratio;
  state.counters["layers"] = kLayers;  // scripts/bench_json.py ring checks it against SGLang's
}

// One kernel of every layer's verify, a graph of kLayers launches, median / kLayers: the conv
// (Kernel::kConv) or the GDN recurrence (Kernel::kGdn), of the snapshot or the replay strategy
// (replay: the slots primed with pending steps, as a round after a commit finds them).
enum class Kernel { kConv, kGdn };

void per_layer_kernel(benchmark::State& state, Kernel kernel, bool replay) {
  const int T = state.range(0), B = state.range(1);
  World& w = World::get();
  if (!replay && w.skip_snapshot(state, T)) return;
  const VerifyBatch batch = w.batch(T, B);
  if (replay) w.prime_replay(batch, T, B);
  const bool conv = kernel == Kernel::kConv;
  cudaGraphExec_t exec = capture(w, [&] {
    for (int l = 0; l < kLayers; ++l) {
      const auto L = w.launch_params(l, T, B, replay);
      if (conv) {
        check(k::launch_conv_update(L.conv, L.act, L.conv_state, w.stream), "conv");
      } else {
        check(k::launch_gdn_recurrence(L.rec, L.act, L.ssm_state, w.stream), "gdn");
      }
    }
  });
  const double us = time_graph(w, exec, state) / kLayers;
  // Replay: the history and folds the graph really replays (the priming's cursors at the
  // round's fold limit, bench_util.h primed_history), not the ring model's stream of rounds.
  PrimedHistory primed;
  if (replay) {
    std::vector<int> slots;
    for (const SlotHandle& h : batch.rows) slots.push_back(w.pool->slot_index(h));
    const auto& s = detail::PoolAccess::storage(*w.rpool);
    primed = primed_history(s, kLayers, slots, round_fold_limit(s, B));
  }
  const double bytes = conv
                           ? (replay ? conv_replay_bytes(T, B) : conv_bytes(T, B))
                           : (replay ? gdn_replay_bytes(T, B, primed.fold_rate, primed.mean_history)
                                     : gdn_bytes(T, B));
  const SglangRow* s = sglang_row(T, B);
  report(state, w, T, B, std::string(conv ? "conv" : "gdn") + (replay ? "_replay" : ""), us, bytes,
         h200_figure(conv ? s->conv_us : s->rec_us));
  if (replay) {
    state.counters["fold_rate"] = primed.fold_rate;
    state.counters["history"] = primed.mean_history;
  }
  cudaGraphExecDestroy(exec);
}

void BM_VerifyConv(benchmark::State& state) { per_layer_kernel(state, Kernel::kConv, false); }
void BM_VerifyGdn(benchmark::State& state) { per_layer_kernel(state, Kernel::kGdn, false); }
void BM_VerifyConvReplay(benchmark::State& state) { per_layer_kernel(state, Kernel::kConv, true); }
void BM_VerifyGdnReplay(benchmark::State& state) { per_layer_kernel(state, Kernel::kGdn, true); }

void BM_Commit36(benchmark::State& state) {
  const int T = state.range(0), B = state.range(1);
  World& w = World::get();
  if (w.skip_snapshot(state, T)) return;
  const VerifyBatch batch = w.batch(T, B);
  w.pool->begin_verify(batch);
  for (int l = 0; l < kLayers; ++l) {
    w.pool->verify(l, w.weights(l), w.inputs(l, int64_t{B} * T), w.outputs(l, int64_t{B} * T));
  }
  cudaGraphExec_t exec = capture(w, [&] {
    w.pool->commit(TensorView::contiguous(w.accepted, DType::kI32, {B}, Device::kCuda));
  });
  const double us = time_graph(w, exec, state);
  if (w.pool->last_commit_status() != Status::kSuccess) state.SkipWithError("commit flagged");
  report(state, w, T, B, "commit", us, commit_bytes(B), sglang_whole(sglang_row(T, B)->commit_us));
  cudaGraphExecDestroy(exec);
}

void BM_Round(benchmark::State& state) {
  const int T = state.range(0), B = state.range(1);
  World& w = World::get();
  if (w.skip_snapshot(state, T)) return;
  const VerifyBatch batch = w.batch(T, B);
  // The whole round in the graph: begin_verify's upload of the round's slots too.
  cudaGraphExec_t exec = capture(w, [&] {
    w.pool->begin_verify(batch);
    for (int l = 0; l < kLayers; ++l) {
      w.pool->verify(l, w.weights(l), w.inputs(l, int64_t{B} * T), w.outputs(l, int64_t{B} * T));
    }
    w.pool->commit(TensorView::contiguous(w.accepted, DType::kI32, {B}, Device::kCuda));
  });
  const double us = time_graph(w, exec, state);
  if (w.pool->last_commit_status() != Status::kSuccess) state.SkipWithError("commit flagged");
  const double bytes = kLayers * (conv_bytes(T, B) + gdn_bytes(T, B)) + commit_bytes(B);
  report(state, w, T, B, "round", us, bytes, sglang_whole(sglang_row(T, B)->step_est_us));
  cudaGraphExecDestroy(exec);
}

// Four consecutive rounds in one graph, median / 4. Uniform windows: every row verifies T tokens
// and accepts random lengths in [1, T] (World::batch's accepted4, different per round and row).
// Variable windows (DESIGN.md section 2): row r verifies 1 + (3r mod T) tokens (mean (T+1)/2),
// packed with no filler, and accepts 1 + (r + k) mod T_r in round k; its floor is the state
// traffic of the padded round (it does not depend on the tokens).
void rounds4(benchmark::State& state, bool replay, bool variable) {
  const int T = state.range(0), B = state.range(1);
  World& w = World::get();
  if (!replay && w.skip_snapshot(state, T)) return;
  StatePool& p = replay ? w.replay_pool(T) : *w.pool;
  VerifyBatch batch = w.batch_of(p, w.batch(T, B));
  int64_t tokens = int64_t{B} * T;
  int32_t* accepted = w.accepted4;
  int64_t accepted_stride = kMaxB;
  int32_t* dacc = nullptr;
  if (variable) {
    batch.lengths.resize(static_cast<std::size_t>(B));
    tokens = 0;
    for (int r = 0; r < B; ++r) tokens += batch.lengths[r] = 1 + (3 * r) % T;
    std::vector<int32_t> acc(4 * static_cast<std::size_t>(B));
    for (int k = 0; k < 4; ++k) {
      for (int r = 0; r < B; ++r) acc[k * B + r] = 1 + (r + k) % batch.lengths[r];
    }
    dacc = device_alloc<int32_t>(acc.size());
    check(cudaMemcpy(dacc, acc.data(), sizeof(int32_t) * acc.size(), cudaMemcpyHostToDevice),
          "accepted");
    accepted = dacc;
    accepted_stride = B;
  }
  auto round = [&](int k) {
    p.begin_verify(batch);
    for (int l = 0; l < kLayers; ++l) {
      p.verify(l, w.weights(l), w.inputs(l, tokens), w.outputs(l, tokens));
    }
    p.commit(
        TensorView::contiguous(accepted + k * accepted_stride, DType::kI32, {B}, Device::kCuda));
  };
  round(3);  // leaves pending steps for the first captured round to replay
  cudaGraphExec_t exec = capture(w, [&] {
    for (int k = 0; k < 4; ++k) round(k);
  });
  const double us = time_graph(w, exec, state) / 4;
  if (p.last_commit_status() != Status::kSuccess) state.SkipWithError("commit flagged");
  const SglangReplayRow* s = sglang_replay_row(T, B);
  const auto [f, h] = fold_rate(T, B, w.ring_of(T));
  // Variable windows have no byte model here (the formulas take B x T tokens and the uniform
  // acceptance draw): MB and frac_copy_bw are 0 for them, not the padded round's (which read as
  // 124% of copy bandwidth at snapshot T = 8, B = 128).
  const double bytes = variable ? 0.0
                       : replay ? kLayers * (conv_replay_bytes(T, B) + gdn_replay_bytes(T, B, f, h))
                                : kLayers * (conv_bytes(T, B) + gdn_bytes(T, B)) + commit_bytes(B);
  if (variable) state.counters["tokens"] = static_cast<double>(tokens);
  const char* what = variable ? (replay ? "rounds4_var_replay" : "rounds4_var_snapshot")
                              : (replay ? "rounds4_replay" : "rounds4_snapshot");
  report(state, w, T, B, what, us, bytes,
         sglang_whole(s == nullptr ? 0.0
                      : replay     ? s->circ16_us
                                   : s->snapshot_us));
  cudaGraphExecDestroy(exec);
  if (dacc != nullptr) cudaFree(dacc);
}

void BM_Rounds4Snapshot(benchmark::State& state) { rounds4(state, false, false); }
void BM_Rounds4Replay(benchmark::State& state) { rounds4(state, true, false); }
void BM_Rounds4VariableSnapshot(benchmark::State& state) { rounds4(state, false, true); }
void BM_Rounds4VariableReplay(benchmark::State& state) { rounds4(state, true, true); }

void variable_shapes(benchmark::internal::Benchmark* b) { shape_grid(b, {4, 8}, {8, 32, 128}); }

BENCHMARK(BM_VerifyConv)->Apply(shapes);
BENCHMARK(BM_VerifyGdn)->Apply(shapes);
BENCHMARK(BM_Commit36)->Apply(shapes);
BENCHMARK(BM_Round)->Apply(shapes);
BENCHMARK(BM_VerifyConvReplay)->Apply(shapes);
BENCHMARK(BM_VerifyGdnReplay)->Apply(shapes);
BENCHMARK(BM_Rounds4Snapshot)->Apply(shapes);
BENCHMARK(BM_Rounds4Replay)->Apply(shapes);
// B = 2, 4 and 16 (no SGLang figure recorded for them): where the fused small-batch launch and the
// small-batch replay conv stop paying (kernels::gdn_fused_choice, conv_small_vt; sweep
// SPECSTATE_GDN_FUSED or SPECSTATE_CONV_SMALL = 0 / 1 with bench-sweep.sh); 24, 48 and 64: where
// layers overlapping was measured (kernels::layer_edge_allowed; SPECSTATE_LAYER_OVERLAP 0 / 1).
void small_batch_shapes(benchmark::internal::Benchmark* b) {
  shape_grid(b, {2, 4, 8}, {2, 4, 16, 24, 48, 64});
}
BENCHMARK(BM_Rounds4Replay)->Apply(small_batch_shapes);
BENCHMARK(BM_Rounds4VariableSnapshot)->Apply(variable_shapes);
BENCHMARK(BM_Rounds4VariableReplay)->Apply(variable_shapes);

void print_table() {
  World& w = World::get();
  std::printf(
      "\nthis run: %s (SGLang's figures are an H200's: no ratio elsewhere)\n"
      "specstate CUDA vs SGLang (H200, Qwen3-Next-80B TP1; medians, us; frac = bytes/s "
      "over measured copy BW %.0f GB/s; ratio = ours / SGLang)\n",
      device_name().c_str(), w.copy_gbps);
  std::printf("%2s %4s | %-28s | %-28s | %-30s | %-29s\n", "T", "B", "verify conv /layer (SGL)",
              "verify GDN /layer (SGL)", "commit 36 layers (SGL)", "round (SGL stepEst)");
  for (int T : {2, 4, 8}) {
    for (int B : {1, 8, 32, 128}) {
      auto get = [&](const char* what) {
        auto it = results().find({T, B, what});
        return it == results().end() ? Result{} : it->second;
      };
      const Result c = get("conv"), g = get("gdn"), m = get("commit"), r = get("round");
      std::printf(
          "%2d %4d | %6.2f %3.0f%% (%5.2f) x%.2f | %7.2f %3.0f%% (%6.2f) x%.2f | %8.1f %3.0f%% "
          "(%7.1f) x%.2f | %8.1f %3.0f%% (%8.1f) x%.2f\n",
          T, B, c.us, 100 * c.frac, c.sglang_us, c.ratio, g.us, 100 * g.frac, g.sglang_us, g.ratio,
          m.us, 100 * m.frac, m.sglang_us, m.ratio, r.us, 100 * r.frac, r.sglang_us, r.ratio);
    }
  }
  std::printf(
      "\nreplay strategy, per layer: verify conv and GDN recurrence (%% of copy BW) [SGLang's "
      "snapshot kernels]\n");
  std::printf("%2s %4s | %-24s | %-26s\n", "T", "B", "conv replay /layer (SGL)",
              "GDN replay /layer (SGL)");
  for (int T : {2, 4, 8}) {
    for (int B : {1, 8, 32, 128}) {
      auto it_c = results().find({T, B, "conv_replay"});
      auto it_g = results().find({T, B, "gdn_replay"});
      const Result c = it_c == results().end() ? Result{} : it_c->second;
      const Result g = it_g == results().end() ? Result{} : it_g->second;
      std::printf("%2d %4d | %6.2f %3.0f%% (%5.2f) x%.2f | %7.2f %3.0f%% (%6.2f) x%.2f\n", T, B,
                  c.us, 100 * c.frac, c.sglang_us, c.ratio, g.us, 100 * g.frac, g.sglang_us,
                  g.ratio);
    }
  }
  std::printf(
      "\nrounds (%d layers; graph of 4 consecutive rounds, median / 4, us): floor2 = %d x B x "
      "(read + write of one state) at %.0f GB/s (v1 / SGLang fold); floor = the replay v2 floor "
      "(DESIGN.md section 8: one read, a write at the fold rate f of ring R, the factor records); "
      "SGLang (36 layers): snapshot, fold-every-commit, ReplaySSM ring of 16%s\n",
      kLayers, kLayers, w.copy_gbps,
      kLayers == 36 ? "" : " (not compared: this run has fewer layers, its columns read 0)");
  std::printf("%2s %4s | %9s %9s | %3s %5s %8s %8s %6s | %9s %9s %9s | %6s %6s %6s | %5s\n", "T",
              "B", "snapshot", "replay", "R", "f", "floor2", "floor", "x flr", "SGL snap",
              "SGL fold", "SGL ring", "/snap", "/fold", "/ring", "%BW");
  for (int T : {2, 4, 8}) {
    for (int B : {1, 8, 32, 128}) {
      auto get = [&](const char* what) {
        auto it = results().find({T, B, what});
        return it == results().end() ? Result{} : it->second;
      };
      const Result sn = get("rounds4_snapshot"), rp = get("rounds4_replay");
      const SglangReplayRow* row = sglang_replay_row(T, B);
      SglangReplayRow s_all = *row;
      s_all.snapshot_us = sglang_whole(row->snapshot_us);
      s_all.fold_us = sglang_whole(row->fold_us);
      s_all.circ16_us = sglang_whole(row->circ16_us);
      const SglangReplayRow* s = &s_all;
      const auto per = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      const int R = w.ring_of(T);
      const double f = fold_rate(T, B, R).first;
      const double floor2_us = floor_bytes(B) / (w.copy_gbps * 1e9) * 1e6;
      const double floor_b = replay_floor_bytes(T, B, R);
      const double floor_us = floor_b / (w.copy_gbps * 1e9) * 1e6;
      std::printf(
          "%2d %4d | %9.1f %9.1f | %3d %5.2f %8.1f %8.1f %6.2f | %9.1f %9.1f %9.1f | %6.2f %6.2f "
          "%6.2f | %4.0f%%\n",
          T, B, sn.us, rp.us, R, f, floor2_us, floor_us, rp.us / floor_us, s->snapshot_us,
          s->fold_us, s->circ16_us, per(rp.us, s->snapshot_us), per(rp.us, s->fold_us),
          per(rp.us, s->circ16_us), 100 * floor_b / (rp.us * 1e-6) / 1e9 / w.copy_gbps);
    }
  }
  std::printf(
      "\nvariable windows (rows of 1..T tokens, mean (T+1)/2, packed, no filler) vs the same "
      "rounds padded to T (graph of 4 rounds, median / 4, us)\n");
  std::printf("%2s %4s | %6s | %9s %9s %6s | %9s %9s %6s | %8s %6s\n", "T", "B", "tokens",
              "snap pad", "snap var", "var/pd", "repl pad", "repl var", "var/pd", "floor", "x flr");
  for (int T : {4, 8}) {
    for (int B : {8, 32, 128}) {
      auto get = [&](const char* what) {
        auto it = results().find({T, B, what});
        return it == results().end() ? Result{} : it->second;
      };
      const Result sp = get("rounds4_snapshot"), sv = get("rounds4_var_snapshot");
      const Result rp = get("rounds4_replay"), rv = get("rounds4_var_replay");
      int tokens = 0;
      for (int r = 0; r < B; ++r) tokens += 1 + (3 * r) % T;
      const double floor_us = floor_bytes(B) / (w.copy_gbps * 1e9) * 1e6;
      std::printf("%2d %4d | %6d | %9.1f %9.1f %6.2f | %9.1f %9.1f %6.2f | %8.1f %6.2f\n", T, B,
                  tokens, sp.us, sv.us, sv.us / sp.us, rp.us, rv.us, rv.us / rp.us, floor_us,
                  rv.us / floor_us);
    }
  }
}

}  // namespace
}  // namespace specstate::bench

int main(int argc, char** argv) {
  return specstate::bench::run_benchmarks(argc, argv, specstate::bench::print_table);
}
