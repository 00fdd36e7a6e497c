// Gate parameters in dtypes of their own, as engines hold them (issue 17.3): vLLM and SGLang keep
// Nemotron-H's Mamba2 A_log in f32 while dt_bias and D are bf16; SGLang's Qwen3-Next keeps GDN's
// A_log f32 and dt_bias bf16 (KDA: the same pair, dt_bias per value head and key channel). Each
// of A_log, dt_bias (and D) is validated and read through its own view's dtype:
//   - every combination of f32 / bf16 over the gate parameters is accepted by verify;
//   - a pool fed A_log f32 + dt_bias (+ D) bf16 gives, under both strategies, outputs and
//     committed states bit-identical to a pool fed f32 views of the same numbers (a bf16 value
//     converts to f32 exactly, so any difference would be a parameter read in the wrong dtype);
//   - against the all-f32 run with the unrounded values the difference is of bf16 size (at
//     most 1e-2 relative, and not 0: the rounding is there), and the results are not all zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/layer_kinds.h"
#include "specstate/specstate.h"

namespace specstate::test {
namespace {

constexpr int kLayers = 2, kSlots = 4, kRows = 4, kT = 4, kRounds = 3;
constexpr uint64_t kSeed = 0x17031703ull;

// A copy of `b` in `dtype`; `round` first rounds every value to bf16 (what a bf16 checkpoint
// holds).
Buffer converted(const Buffer& b, DType dtype, bool round) {
  Buffer out(dtype, b.shape());
  for (int64_t i = 0; i < b.numel(); ++i) {
    out.set(i, round ? round_to_bf16(b.get(i)) : b.get(i));
  }
  return out;
}

// The gate parameters of a layer's weights: {name, buffer}.
std::vector<std::pair<const char*, Buffer*>> gate_params(LayerWeights& w) {
  return {{"A_log", &w.A_log}, {"dt_bias", &w.dt_bias}};
}
std::vector<std::pair<const char*, Buffer*>> gate_params(Mamba2LayerWeights& w) {
  return {{"A_log", &w.A_log}, {"dt_bias", &w.dt_bias}, {"D", &w.D}};
}
std::vector<std::pair<const char*, Buffer*>> gate_params(KdaLayerWeights& w) {
  return {{"A_log", &w.A_log}, {"dt_bias", &w.dt_bias}};  // dt_bias [HV, K]
}

Mamba2Config test_config(Mamba2Kind) { return small_mamba2_config(); }  // f32, D, z gate
GdnConfig test_config(GdnKind) { return small_config(); }               // f32, conv bias
KdaConfig test_config(KdaKind) { return small_kda_config(); }           // f32, no conv bias

// Host views of host buffers (a CPU pool reads them in place).
TensorView host_view(const Buffer& b) { return b.view(); }
const PutBuffer kHost = host_view;

// The elements of a host view of any strides, in row-major order, as floats.
std::vector<float> floats_of(const TensorView& v) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(v.numel()));
  std::array<int64_t, TensorView::kMaxDims> index{};
  for (int64_t n = 0; n < v.numel(); ++n) {
    int64_t offset = 0;
    for (int d = 0; d < v.ndim; ++d) offset += index[d] * v.stride[d];
    out.push_back(v.dtype == DType::kBF16
                      ? float_from_bf16(static_cast<const uint16_t*>(v.data)[offset])
                      : static_cast<const float*>(v.data)[offset]);
    for (int d = v.ndim - 1; d >= 0 && ++index[d] == v.shape[d]; --d) index[d] = 0;
  }
  return out;
}

int64_t tokens_of(const TokenInputs& in) { return in.mixed_qkv.shape()[0]; }
int64_t tokens_of(const Mamba2TokenInputs& in) { return in.xBC.shape()[0]; }
int64_t tokens_of(const KdaTokenInputs& in) { return in.mixed_qkv.shape()[0]; }

// How the gate parameters are passed: A_log f32 and the others bf16 (`mixed`), or all f32 with
// the others' values rounded to bf16 (`rounded`), or all f32 unrounded (`exact`).
enum class Params { kMixed, kRounded, kExact };

template <typename Kind>
typename Kind::HostWeights params_as(typename Kind::HostWeights w, Params params) {
  for (auto& [name, buffer] : gate_params(w)) {
    if (buffer->numel() == 0 || std::string(name) == "A_log") continue;  // A_log stays f32
    if (params == Params::kMixed) *buffer = converted(*buffer, DType::kBF16, false);
    if (params == Params::kRounded) *buffer = converted(*buffer, DType::kF32, true);
  }
  return w;
}

struct Run {
  std::vector<float> outputs;  // every round's main output (core_out / y), all layers
  std::vector<float> states;   // the committed conv and SSM states after the last round
};

template <typename Kind>
Run run(Strategy strategy, Params params) {
  using Config = typename Kind::Config;
  const Config layer = test_config(Kind{});
  std::mt19937_64 rng(kSeed);
  std::vector<typename Kind::HostWeights> weights;
  for (int l = 0; l < kLayers; ++l) {
    weights.push_back(params_as<Kind>(random_weights(layer, rng), params));
  }
  // The premise: A_log holds values bf16 cannot (a reader that applied the others' dtype to it
  // would have to refuse or round them).
  bool a_log_needs_f32 = false;
  for (int64_t h = 0; h < weights[0].A_log.numel(); ++h) {
    a_log_needs_f32 |= round_to_bf16(weights[0].A_log.get(h)) != weights[0].A_log.get(h);
  }
  EXPECT_TRUE(a_log_needs_f32);
  EXPECT_EQ(weights[0].A_log.dtype(), DType::kF32);
  EXPECT_EQ(weights[0].dt_bias.dtype(), params == Params::kMixed ? DType::kBF16 : DType::kF32);

  PoolOptions options;
  options.num_slots = kSlots;
  options.max_rows = kRows;
  options.max_window = kT;
  options.strategy = strategy;
  StatePool pool(Kind::model(kLayers, layer), options);
  std::vector<SlotHandle> slots;
  for (int s = 0; s < 3; ++s) slots.push_back(pool.acquire());
  Run out;
  for (int round = 0; round < kRounds; ++round) {
    VerifyBatch batch;
    batch.window = kT;
    batch.rows = {slots[0], slots[1], SlotHandle::padding(), slots[2]};
    const std::vector<int32_t> accepted = {1 + round % kT, kT, 0, 2};
    std::vector<typename Kind::HostInputs> in;
    std::vector<typename Kind::HostOutputs> result;
    for (int l = 0; l < kLayers; ++l) {
      in.push_back(random_inputs(layer, int64_t{kRows} * kT, rng));
      result.push_back(make_outputs(layer, tokens_of(in.back())));
    }
    pool.begin_verify(batch);
    for (int l = 0; l < kLayers; ++l) {
      pool.verify(l, Kind::put(weights[l], kHost), Kind::put(in[l], kHost),
                  Kind::put(result[l], kHost));
    }
    pool.commit(accepted);
    for (auto& r : result) {
      const std::vector<float> main = floats_of(Kind::tensors(Kind::put(r, kHost)).front().second);
      const std::size_t per_row = main.size() / kRows;
      for (std::size_t row : {0, 1, 3}) {  // the padding row's outputs are nobody's
        out.outputs.insert(out.outputs.end(), main.begin() + row * per_row,
                           main.begin() + (row + 1) * per_row);
      }
    }
  }
  for (int l = 0; l < kLayers; ++l) {
    for (const TensorView& v : {pool.conv_state(l), pool.ssm_state(l)}) {  // replay materializes
      const std::vector<float> state = floats_of(v);
      out.states.insert(out.states.end(), state.begin(), state.end());
    }
  }
  return out;
}

// max |x - y| / max |y|, with the index of the largest difference.
struct RelError {
  double rel = 0, max_ref = 0;
  std::size_t where = 0;
};
RelError rel_error(const std::vector<float>& x, const std::vector<float>& y) {
  RelError e;
  double max_diff = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    e.max_ref = std::max(e.max_ref, std::abs(double(y[i])));
    if (std::abs(double(x[i]) - y[i]) > max_diff) {
      max_diff = std::abs(double(x[i]) - y[i]);
      e.where = i;
    }
  }
  e.rel = e.max_ref > 0 ? max_diff / e.max_ref : max_diff;
  return e;
}

template <typename Kind>
class MixedParamDtypes : public ::testing::Test {};
using Kinds = ::testing::Types<GdnKind, Mamba2Kind, KdaKind>;
class KindNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return T::kKind == LayerKind::kMamba2 ? "mamba2" : T::kKind == LayerKind::kKda ? "kda" : "gdn";
  }
};
TYPED_TEST_SUITE(MixedParamDtypes, Kinds, KindNames);

// Every combination of f32 and bf16 over the gate parameters is a valid layer call.
TYPED_TEST(MixedParamDtypes, EveryCombinationOfGateDtypesIsAccepted) {
  using Kind = TypeParam;
  const auto layer = test_config(Kind{});
  std::mt19937_64 rng(kSeed);
  const auto base = random_weights(layer, rng);
  const auto in = random_inputs(layer, kT, rng);
  const int params = Kind::kKind == LayerKind::kMamba2 ? 3 : 2;
  for (int mask = 0; mask < (1 << params); ++mask) {
    auto w = base;
    std::string which;
    int bit = 0;
    for (auto& [name, buffer] : gate_params(w)) {
      const DType dtype = (mask >> bit++) & 1 ? DType::kBF16 : DType::kF32;
      *buffer = converted(*buffer, dtype, false);
      which += std::string(name) + " " + dtype_name(dtype) + " ";
    }
    SCOPED_TRACE(which);
    PoolOptions options;
    options.max_window = kT;
    StatePool pool(Kind::model(1, layer), options);
    VerifyBatch batch;
    batch.window = kT;
    batch.rows = {pool.acquire()};
    auto out = make_outputs(layer, kT);
    pool.begin_verify(batch);
    EXPECT_NO_THROW(
        pool.verify(0, Kind::put(w, kHost), Kind::put(in, kHost), Kind::put(out, kHost)));
    pool.commit(std::vector<int32_t>{kT});
  }
}

TYPED_TEST(MixedParamDtypes, ALogF32OthersBf16EqualTheSameNumbersInF32UnderBothStrategies) {
  using Kind = TypeParam;
  for (Strategy strategy : {Strategy::kSnapshot, Strategy::kReplay}) {
    SCOPED_TRACE(strategy_name(strategy));
    const Run mixed = run<Kind>(strategy, Params::kMixed);
    const Run rounded = run<Kind>(strategy, Params::kRounded);
    const Run exact = run<Kind>(strategy, Params::kExact);
    ASSERT_FALSE(mixed.outputs.empty());
    // Bit for bit: each parameter was read through its own view's dtype.
    EXPECT_EQ(mixed.outputs, rounded.outputs);
    EXPECT_EQ(mixed.states, rounded.states);
    // Against the unrounded f32 parameters: bf16-sized, and not nothing.
    const RelError out = rel_error(mixed.outputs, exact.outputs);
    const RelError st = rel_error(mixed.states, exact.states);
    std::cout << strategy_name(strategy) << ": outputs max rel error " << out.rel << " at "
              << out.where << " (max |ref| " << out.max_ref << "), states " << st.rel << " at "
              << st.where << " (max |ref| " << st.max_ref << ")\n";
    EXPECT_GT(out.max_ref, 0.0) << "all-zero outputs";
    EXPECT_GT(st.max_ref, 0.0) << "all-zero states";
    EXPECT_GT(out.rel, 0.0) << "the bf16 rounding of dt_bias left no trace";
    EXPECT_LE(out.rel, 1e-2) << "index " << out.where;
    EXPECT_LE(st.rel, 1e-2) << "index " << st.where;
  }
}

}  // namespace
}  // namespace specstate::test
