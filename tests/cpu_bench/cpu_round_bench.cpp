// CPU oracle timing at Qwen3-Next-80B TP1 shapes (HV=32, H=16, K=V=128, W=4, 36 GDN layers,
// bf16 activations and conv state, f32 SSM): one speculative round (begin_verify, verify of all
// layers with T tokens, commit) against T plain decode steps of all layers. The CPU backend is
// the oracle, not the product: this says what a CPU-only round costs, not how fast GPUs are.
#include <benchmark/benchmark.h>

#include <random>

#include "common/gdn_data.h"

namespace specstate::test {
namespace {

constexpr int kLayers = 36;

struct Model {
  GdnConfig g;  // defaults are Qwen3-Next-80B at TP1
  std::vector<LayerWeights> weights;
  std::vector<TokenInputs> inputs;
  std::vector<TokenOutputs> outputs;
  explicit Model(int tokens) {
    std::mt19937_64 rng(42);
    for (int l = 0; l < kLayers; ++l) {
      weights.push_back(random_weights(g, rng));
      inputs.push_back(random_inputs(g, tokens, rng));
      outputs.push_back(make_outputs(g, tokens));
    }
  }
};

void BM_VerifyCommitRound(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), T = static_cast<int>(state.range(1));
  Model model(B * T);
  PoolOptions options;
  options.num_slots = B;
  options.max_rows = B;
  options.max_window = T;
  StatePool pool(ModelConfig::gated_delta_net(kLayers, model.g), options);
  VerifyBatch batch;
  batch.window = T;
  for (int r = 0; r < B; ++r) batch.rows.push_back(pool.acquire());
  std::vector<int32_t> accepted(B, T - 1);
  for (auto _ : state) {
    pool.begin_verify(batch);
    for (int l = 0; l < kLayers; ++l) {
      pool.verify(l, model.weights[l].view(), model.inputs[l].view(), model.outputs[l].view());
    }
    pool.commit(accepted);
  }
  state.counters["layers"] = kLayers;
}

void BM_DecodeSteps(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0)), steps = static_cast<int>(state.range(1));
  Model model(B * steps);
  PoolOptions options;
  options.num_slots = B;
  StatePool pool(ModelConfig::gated_delta_net(kLayers, model.g), options);
  std::vector<SlotHandle> rows;
  for (int r = 0; r < B; ++r) rows.push_back(pool.acquire());
  for (auto _ : state) {
    for (int s = 0; s < steps; ++s) {
      for (int l = 0; l < kLayers; ++l) {
        pool.decode(l, rows, model.weights[l].view(), model.inputs[l].rows(s * B, B),
                    model.outputs[l].rows(s * B, B));
      }
    }
  }
}

BENCHMARK(BM_VerifyCommitRound)->Args({1, 4})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeSteps)->Args({1, 4})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace specstate::test

BENCHMARK_MAIN();
