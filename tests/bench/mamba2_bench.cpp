// Mamba2 benchmarks at Nemotron-H-8B TP1 shapes (128 heads, P=64, N=128, G=8, W=4, conv bias,
// D skip, no gate, bf16 activations and conv state, fp32 SSM state [slots, H, P, N]: 4 MiB per
// row and layer, 24 Mamba2 layers), T in {2,4,8}, B in {1,8,32,128}: whole rounds as SGLang's
// were measured for the replay comparison (a CUDA graph of 4 consecutive rounds: begin_verify,
// 24 verifies, commit with device accepted lengths that differ per round; L2 flushed; median / 4)
// for the snapshot and the replay strategy, against the floor (read + write every row's state
// once per layer at the copy bandwidth this binary measures) and SGLang's Mamba2 snapshot path
// (shared/baseline/MAMBA2_AND_REPLAY.md part 1: roundEst = 24 x (convG + ssuG) + cmtF).
//
// One pool at a time (the snapshot scratch at T=8, B=128 is 96 GiB).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bench_fill.h"
#include "bench_util.h"
#include "kernels/conv_update.h"
#include "kernels/mamba2_recurrence.h"
#include "lib/cuda/launch.h"
#include "lib/pool_access.h"
#include "specstate/specstate.h"

namespace specstate::bench {
namespace {

constexpr int kH = 128, kP = 64, kN = 128, kG = 8, kW = 4;
// Nemotron-H-8B's 24 Mamba2 layers, or fewer under SPECSTATE_BENCH_LAYERS (bench_util.h).
const int kLayers = bench_layers(24);
constexpr int kConvDim = kH * kP + 2 * kG * kN;  // 10240
constexpr int kMaxB = 128;
constexpr std::size_t kFlushBytes = 256u << 20;
constexpr double kStateBytes = double(kH) * kP * kN * 4;  // 4 MiB

// SGLang's Mamba2 snapshot path on the H200 (roundEst, us) and the floor it quotes.
// Per layer inside a graph of all 24 layers: conv_us (convG), ssu_us (ssuG); shared/baseline/
// MAMBA2_AND_REPLAY.md part 1.
struct SglangM2 {
  int T, B;
  double round_est_us, floor_us, conv_us, ssu_us;
};
constexpr SglangM2 kSglang[] = {
    {2, 1, 348.1, 46.9, 2.8, 9.1},        {2, 8, 1519.1, 375.0, 3.1, 42.2},
    {2, 32, 5364.9, 1500.0, 5.5, 147.9},  {2, 128, 21114.4, 6000.0, 16.1, 584.7},
    {4, 1, 496.2, 46.9, 2.7, 15.3},       {4, 8, 2237.6, 375.0, 3.2, 72.0},
    {4, 32, 7702.7, 1500.0, 6.1, 244.6},  {4, 128, 30728.7, 6000.0, 19.2, 982.9},
    {8, 1, 791.2, 46.9, 3.2, 27.1},       {8, 8, 3736.8, 375.0, 4.1, 133.5},
    {8, 32, 12670.1, 1500.0, 8.8, 449.1}, {8, 128, 54859.4, 6000.0, 27.4, 1979.4},
};
const SglangM2* find_sglang(int T, int B) {
  for (const SglangM2& r : kSglang) {
    if (r.T == T && r.B == B) return &r;
  }
  return nullptr;
}
const SglangM2& sglang(int T, int B) {
  if (const SglangM2* r = find_sglang(T, B)) return *r;
  throw std::runtime_error("no SGLang row");
}

// Mamba2Config's defaults are Nemotron-H-8B at TP1 (include/specstate/config.h: conv bias, D
// skip, no gate); the constants above name its dimensions for the byte counts.
Mamba2Config nemotron_h_8b() {
  Mamba2Config m;
  set_engine_dtypes(m);
  if (m.num_heads != kH || m.head_dim != kP || m.d_state != kN || m.n_groups != kG ||
      m.conv_width != kW || !m.conv_bias || !m.d_skip || m.gate) {
    throw std::logic_error("Mamba2Config's defaults are no longer Nemotron-H-8B's shape");
  }
  return m;
}

struct World : RoundsWorld {
  std::vector<void*> xbc, dt, conv_out, y, conv_w, conv_b, A_log, dt_bias, D;
  int32_t* slots = nullptr;  // [kMaxB] the slots of handles 0.. for direct kernel launches

  World() : RoundsWorld(kMaxB, kFlushBytes, 11) {
    const std::size_t tokens = std::size_t{kMaxB} * 8;
    for (int l = 0; l < kLayers; ++l) {
      xbc.push_back(random(tokens * kConvDim, true, 1.0f));
      dt.push_back(random(tokens * kH, true, 1.0f));
      conv_out.push_back(random(tokens * kConvDim, true, 1.0f));
      y.push_back(random(tokens * kH * kP, true, 1.0f));
      conv_w.push_back(random(std::size_t{kConvDim} * kW, true, 0.5f));
      conv_b.push_back(random(kConvDim, true, 0.1f));
      A_log.push_back(random(kH, false, 1.0f));
      dt_bias.push_back(random(kH, false, 1.0f));
      D.push_back(random(kH, false, 1.0f));
    }
    slots = device_alloc<int32_t>(kMaxB);
    check(cudaStreamSynchronize(stream), "setup");
  }
  static World& get() {
    static World w;
    return w;
  }

  StatePool& pool_for(Strategy s, int T) {
    bool made = false;
    StatePool& p = RoundsWorld::pool_for(ModelConfig::mamba2(kLayers, nemotron_h_8b()),
                                         LayerKind::kMamba2, s, T, 100, 200, &made);
    if (made) {
      std::vector<int32_t> slot_index(kMaxB);
      for (int i = 0; i < kMaxB; ++i)
        slot_index[i] = static_cast<int32_t>(p.slot_index(handles[i]));
      check(cudaMemcpy(slots, slot_index.data(), sizeof(int32_t) * kMaxB, cudaMemcpyHostToDevice),
            "slots");
    }
    return p;
  }

  Mamba2Weights weights(int l) const {
    Mamba2Weights w;
    w.conv_weight = TensorView::contiguous(conv_w[l], DType::kBF16, {kConvDim, kW}, Device::kCuda);
    w.conv_bias = TensorView::contiguous(conv_b[l], DType::kBF16, {kConvDim}, Device::kCuda);
    w.A_log = TensorView::contiguous(A_log[l], DType::kF32, {kH}, Device::kCuda);
    w.dt_bias = TensorView::contiguous(dt_bias[l], DType::kF32, {kH}, Device::kCuda);
    w.D = TensorView::contiguous(D[l], DType::kF32, {kH}, Device::kCuda);
    return w;
  }
  Mamba2Inputs inputs(int l, int64_t tokens) const {
    Mamba2Inputs in;
    in.xBC = TensorView::contiguous(xbc[l], DType::kBF16, {tokens, kConvDim}, Device::kCuda);
    in.dt = TensorView::contiguous(dt[l], DType::kBF16, {tokens, kH}, Device::kCuda);
    return in;
  }
  Mamba2Outputs outputs(int l, int64_t tokens) const {
    Mamba2Outputs out;
    out.conv_out =
        TensorView::contiguous(conv_out[l], DType::kBF16, {tokens, kConvDim}, Device::kCuda);
    out.y = TensorView::contiguous(y[l], DType::kBF16, {tokens, kH, kP}, Device::kCuda);
    return out;
  }
};

std::map<std::tuple<int, int, int>, double>& results() {
  static std::map<std::tuple<int, int, int>, double> r;
  return r;
}

constexpr double kConvStateBytes = double(kConvDim) * (kW - 1) * 2;  // one bf16 window
constexpr double kFactorBytes =
    double(kernels::mamba2_factor_layout(kH, kP, kG, kN, 2).bytes);  // dt, dA, x, B of a token

// The floors of a round of B rows, us at the measured copy bandwidth. read_write: every row's
// state read and written once a layer (the old floor: what v1 replay and a fold at every commit
// pay; snapshot's rounds are set against it). replay: DESIGN.md section 8's, one checkpoint read,
// written at the fold rate f, the factor records (h read, T written) and the conv window read
// and written, with f and h the ring model's under the bench's acceptance draw (uniform in
// [1, T]) for the replay pool's ring and fold rows.
double read_write_floor_us(int B, double copy_gbps) {
  return kLayers * B * 2 * kStateBytes / (copy_gbps * 1e9) * 1e6;
}
double replay_floor_us(int T, int B, double copy_gbps) {
  const int R = bench_ring() > 0 ? bench_ring()
                                 : static_cast<int>(default_replay_ring(LayerKind::kMamba2, T));
  if (R < 2 * T) return 0.0;  // a forced SPECSTATE_BENCH_RING too short for T: no such pool
  const ReplayRingModel m = replay_ring_model(
      T, R, B,
      bench_fold_rows() > 0 ? bench_fold_rows() : default_replay_fold_rows(LayerKind::kMamba2));
  const double bytes =
      double(kLayers) * B *
      (kStateBytes * (1 + m.fold_rate) + 2 * kConvStateBytes + (m.mean_history + T) * kFactorBytes);
  return bytes / (copy_gbps * 1e9) * 1e6;
}

void rounds4(benchmark::State& state, Strategy strategy) {
  const int T = state.range(0), B = state.range(1);
  World& w = World::get();
  StatePool* const pp =
      w.pool_or_skip(state, [&]() -> StatePool& { return w.pool_for(strategy, T); });
  if (pp == nullptr) return;
  StatePool& p = *pp;
  const double t = time_rounds4(
      state, p, w.handles, T, B, kLayers, w.accepted4, w.timer(), [&](int l, int64_t tokens) {
        p.verify(l, w.weights(l), w.inputs(l, tokens), w.outputs(l, tokens));
      });
  results()[{T, B, static_cast<int>(strategy)}] = t;
  state.counters["us"] = t;
  state.counters["x_floor"] = t / read_write_floor_us(B, w.copy_gbps);
  if (strategy == Strategy::kReplay) {
    const double rf = replay_floor_us(T, B, w.copy_gbps);
    if (rf > 0) state.counters["x_replay_floor"] = t / rf;
  }
  // (Batches between the table's have no SGLang figure.)
  // (SGLang's figure is for all 24 layers: no comparison under SPECSTATE_BENCH_LAYERS.)
  const SglangM2* r = kLayers == 24 && on_h200() ? find_sglang(T, B) : nullptr;
  if (r != nullptr) state.counters["sglang_us"] = r->round_est_us;
}

// Per-kernel figures (issue 17.8): one kernel of every layer's verify, a graph of kLayers launches
// built by the backend's own param builder, median / kLayers, L2 flushed. Replay: the rows'
// slots primed by one eager round (as a round after a commit finds them: history records to
// apply, pending conv steps). Bytes (DESIGN.md section 8): conv, the inputs and outputs plus the
// committed windows read (and, snapshot, T windows written; replay, the records written and read);
// recurrence, the state read, written T times (snapshot) or at the fold rate (replay), the
// factor records read (history) and written (window), x / B / C / dt in and y out.
struct M2Kernel {
  double us = 0, bytes = 0, frac = 0, sglang_us = 0;
};
std::map<std::tuple<int, int, bool, bool>, M2Kernel>& kernel_results() {
  static std::map<std::tuple<int, int, bool, bool>, M2Kernel> r;
  return r;
}

void per_layer_kernel(benchmark::State& state, bool conv, Strategy strategy) {
  const int T = state.range(0), B = state.range(1);
  const bool replay = strategy == Strategy::kReplay;
  World& w = World::get();
  StatePool* const pp =
      w.pool_or_skip(state, [&]() -> StatePool& { return w.pool_for(strategy, T); });
  if (pp == nullptr) return;
  StatePool& p = *pp;
  const int64_t tokens = int64_t{B} * T;
  if (replay) {
    VerifyBatch batch;
    batch.window = T;
    for (int r = 0; r < B; ++r) batch.rows.push_back(w.handles[r]);
    std::vector<int32_t> acc(B);
    std::mt19937_64 rng(77 * T + B);
    for (int32_t& a : acc) a = std::uniform_int_distribution<int>(1, T)(rng);
    check(cudaMemcpy(w.accepted4, acc.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice),
          "accepted");
    p.begin_verify(batch);
    for (int l = 0; l < kLayers; ++l)
      p.verify(l, w.weights(l), w.inputs(l, tokens), w.outputs(l, tokens));
    p.commit(TensorView::contiguous(w.accepted4, DType::kI32, {B}, Device::kCuda));
    check(cudaStreamSynchronize(w.stream), "prime");
  }
  std::vector<Mamba2Weights> weights;
  std::vector<Mamba2Inputs> inputs;
  std::vector<Mamba2Outputs> outputs;
  for (int l = 0; l < kLayers; ++l) {
    weights.push_back(w.weights(l));
    inputs.push_back(w.inputs(l, tokens));
    outputs.push_back(w.outputs(l, tokens));
  }
  cudaGraphExec_t exec = capture_graph(w.stream, [&] {
    for (int l = 0; l < kLayers; ++l) {
      detail::cuda::Mamba2LaunchArgs a;
      set_round_args(a, &detail::PoolAccess::storage(p), l, B, T, replay, w.slots);
      a.weights = &weights[l];
      a.inputs = &inputs[l];
      a.outputs = &outputs[l];
      const detail::cuda::Mamba2Launch L = detail::cuda::build_mamba2_launch(a);
      if (conv) {
        check(kernels::launch_conv_update(L.conv, L.act, L.conv_state, w.stream), "conv");
      } else {
        check(kernels::launch_mamba2_recurrence(L.rec, L.act, L.ssm_state, w.stream), "ssu");
      }
    }
  });
  const GraphTimer timer = w.timer();
  const double us =
      time_graph(exec, timer.stream, timer.flush, timer.flush_bytes, timer.e0, timer.e1, state) /
      kLayers;
  cudaGraphExecDestroy(exec);
  // Replay: the history and folds the graph really replays (the priming's cursors at the
  // round's fold limit, bench_util.h primed_history), not the ring model's stream of rounds.
  PrimedHistory primed;
  if (replay) {
    std::vector<int> slots;
    for (int r = 0; r < B; ++r) slots.push_back(p.slot_index(w.handles[r]));
    const auto& s = detail::PoolAccess::storage(p);
    primed = primed_history(s, kLayers, slots, round_fold_limit(s, B));
  }
  const double tok = double(tokens), io = tok * kConvDim * 2;  // one pass of xBC or conv_out
  double bytes = 0;
  if (conv) {
    // Replay: the window's records written, and the pending records read (the last commit's
    // accepted length a row, uniform in [1, T]: (T + 1) / 2 on average), not T of them.
    bytes = 2 * io + B * kConvStateBytes + double(kConvDim) * (kW + 1) * 2 +
            (replay ? io + double(B) * (T + 1) / 2 * kConvDim * 2 : tok * kConvStateBytes);
  } else {
    const double ins = io + tok * kH * 2 + tok * kH * kP * 2;  // xBC, dt in; y out
    bytes = B * kStateBytes * (replay ? 1 + primed.fold_rate : 1 + T) + ins +
            (replay ? (B * primed.mean_history + tok) * kFactorBytes : 0);
  }
  M2Kernel r;
  r.us = us;
  r.bytes = bytes;
  r.frac = bytes / (us * 1e-6) / 1e9 / w.copy_gbps;
  r.sglang_us = h200_figure(conv ? sglang(T, B).conv_us : sglang(T, B).ssu_us);
  kernel_results()[{T, B, conv, replay}] = r;
  state.counters["us"] = us;
  state.counters["MB"] = bytes / 1e6;
  state.counters["frac_copy_bw"] = r.frac;
  state.counters["sglang_us"] = r.sglang_us;
  if (replay) {
    state.counters["fold_rate"] = primed.fold_rate;
    state.counters["history"] = primed.mean_history;
  }
}

void BM_M2VerifyConv(benchmark::State& s) { per_layer_kernel(s, true, Strategy::kSnapshot); }
void BM_M2VerifySsu(benchmark::State& s) { per_layer_kernel(s, false, Strategy::kSnapshot); }
void BM_M2VerifyConvReplay(benchmark::State& s) { per_layer_kernel(s, true, Strategy::kReplay); }
void BM_M2VerifySsuReplay(benchmark::State& s) { per_layer_kernel(s, false, Strategy::kReplay); }

void BM_M2Rounds4Snapshot(benchmark::State& s) { rounds4(s, Strategy::kSnapshot); }
void BM_M2Rounds4Replay(benchmark::State& s) { rounds4(s, Strategy::kReplay); }

BENCHMARK(BM_M2VerifyConv)->Apply(shapes);
BENCHMARK(BM_M2VerifySsu)->Apply(shapes);
BENCHMARK(BM_M2VerifyConvReplay)->Apply(shapes);
BENCHMARK(BM_M2VerifySsuReplay)->Apply(shapes);
BENCHMARK(BM_M2Rounds4Snapshot)->Apply(shapes);
BENCHMARK(BM_M2Rounds4Replay)->Apply(shapes);
// Batches between the table's, for the launchers' row thresholds (the small-batch conv, layers
// overlapping: docs/cuda.md).
void mid_batch_shapes(benchmark::internal::Benchmark* b) {
  shape_grid(b, {2, 4, 8}, {2, 4, 16, 64});
}
BENCHMARK(BM_M2Rounds4Replay)->Apply(mid_batch_shapes);

void print_table() {
  World& w = World::get();
  std::printf(
      "\nMamba2 rounds, Nemotron-H-8B TP1 (%d layers; graph of 4 consecutive rounds, median / 4, "
      "us); floor = %d x B x (read + write of a 4 MiB state) at %.0f GB/s; rfloor = DESIGN.md "
      "section 8's replay floor (checkpoint read, fold writes at the ring model's rate, factor "
      "records, conv window); SGLang = its snapshot path's roundEst (24 layers); this run: %s "
      "(SGLang's figures are an H200's: 0 elsewhere, as is a round that did not run)\n",
      kLayers, kLayers, w.copy_gbps, device_name().c_str());
  std::printf("%2s %4s | %9s %9s | %8s %6s %6s | %8s %7s | %9s %6s %6s\n", "T", "B", "snapshot",
              "replay", "floor", "snap/f", "rep/f", "rfloor", "rep/rf", "SGLang", "snap/S",
              "rep/S");
  for (int T : {2, 4, 8}) {
    for (int B : {1, 8, 32, 128}) {
      auto get = [&](Strategy s) {
        auto it = results().find({T, B, static_cast<int>(s)});
        return it == results().end() ? 0.0 : it->second;
      };
      const double sn = get(Strategy::kSnapshot), rp = get(Strategy::kReplay);
      const double floor_us = read_write_floor_us(B, w.copy_gbps);
      const double rfloor_us = replay_floor_us(T, B, w.copy_gbps);
      const double sg = kLayers == 24 ? h200_figure(sglang(T, B).round_est_us) : 0.0;
      std::printf("%2d %4d | %9.1f %9.1f | %8.1f %6.2f %6.2f | %8.1f %7.2f | %9.1f %6.2f %6.2f\n",
                  T, B, sn, rp, floor_us, sn / floor_us, rp / floor_us, rfloor_us,
                  rfloor_us > 0 ? rp / rfloor_us : 0.0, sg, sg > 0 ? sn / sg : 0.0,
                  sg > 0 ? rp / sg : 0.0);
    }
  }
  if (kernel_results().empty()) return;
  std::printf(
      "\nMamba2 verify kernels per layer (graph of 24 launches, median / 24, us; frac = the "
      "kernel's bytes / time / copy bandwidth; SGLang = convG / ssuG)\n");
  std::printf("%2s %4s | %-6s %-8s | %9s %9s %5s | %9s %6s\n", "T", "B", "kernel", "strategy", "us",
              "MB", "frac", "SGLang", "/SGL");
  for (const auto& [key, r] : kernel_results()) {
    const auto& [T, B, conv, replay] = key;
    std::printf("%2d %4d | %-6s %-8s | %9.1f %9.1f %4.0f%% | %9.1f %6.2f\n", T, B,
                conv ? "conv" : "ssu", replay ? "replay" : "snapshot", r.us, r.bytes / 1e6,
                100 * r.frac, r.sglang_us, r.sglang_us > 0 ? r.us / r.sglang_us : 0.0);
  }
}

}  // namespace
}  // namespace specstate::bench

int main(int argc, char** argv) {
  return specstate::bench::run_benchmarks(argc, argv, specstate::bench::print_table);
}
