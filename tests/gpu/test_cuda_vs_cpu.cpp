// Every CUDA kernel against the CPU oracle (ggml test-backend-ops style) on the same random
// inputs: prefill and decode (advance kernels), verify (conv + recurrence, outputs and every
// snapshot), commit (host and device accepted values), over many rounds of chains and trees with
// padding rows, small dims and Qwen3-Next dims, f32 and bf16 storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "common/presets.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

struct GpuCase {
  const char* name;
  int H, HV, K, V, W;
  bool bias;
  DType act, conv_state, ssm_state;
  bool tree, shared_tree;
  int layers, requests, T, rounds;
  int64_t pad;         // extra elements per input/output row (non-contiguous strides)
  bool with_conv_out;  // false: the backend keeps the conv output in its scratch
  Strategy strategy = Strategy::kSnapshot;
};

std::ostream& operator<<(std::ostream& out, const GpuCase& c) { return out << c.name; }

GdnConfig make_config(const GpuCase& c) {
  GdnConfig g;
  g.num_k_heads = c.H;
  g.num_v_heads = c.HV;
  g.head_k_dim = c.K;
  g.head_v_dim = c.V;
  g.conv_width = c.W;
  g.conv_bias = c.bias;
  g.act_dtype = c.act;
  g.conv_state_dtype = c.conv_state;
  g.ssm_state_dtype = c.ssm_state;
  return g;
}

void compare_committed(const StatePool& cpu, const StatePool& gpu, const GdnConfig& g,
                       const std::string& what) {
  for (int l = 0; l < cpu.config().num_layers; ++l) {
    expect_close(to_floats(cpu.conv_state(l)), to_floats(gpu.conv_state(l)), state_tolerance(g),
                 what + ": committed conv, layer " + std::to_string(l));
    expect_close(to_floats(cpu.ssm_state(l)), to_floats(gpu.ssm_state(l)), state_tolerance(g),
                 what + ": committed ssm, layer " + std::to_string(l));
  }
}

void compare_outputs(const TokenOutputs& ref, const TokenOutputs& got, const GdnConfig& g,
                     int64_t begin, int64_t count, bool with_conv_out, const std::string& what) {
  expect_close(rows_to_floats(ref.core_out.view(), begin, count),
               rows_to_floats(got.core_out.view(), begin, count), output_tolerance(g),
               what + ": core_out");
  if (with_conv_out) {
    expect_close(rows_to_floats(ref.conv_out.view(), begin, count),
                 rows_to_floats(got.conv_out.view(), begin, count), output_tolerance(g),
                 what + ": conv_out");
  }
}

// A padding row is never written (DESIGN.md section 2): its outputs keep DeviceOutputs' poison
// (0xff bytes, NaN), read back by download.
void expect_padding_untouched(const TokenOutputs& got, int64_t begin, int64_t count,
                              bool with_conv_out, const std::string& what) {
  for (float v : rows_to_floats(got.core_out.view(), begin, count)) {
    ASSERT_TRUE(std::isnan(v)) << what << ": core_out of a padding row written";
  }
  if (!with_conv_out) return;
  for (float v : rows_to_floats(got.conv_out.view(), begin, count)) {
    ASSERT_TRUE(std::isnan(v)) << what << ": conv_out of a padding row written";
  }
}

class CudaVsCpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(CudaVsCpu, PrefillDecodeVerifyCommitMatchTheOracle) {
  SPECSTATE_REQUIRE_GPU();
  const GpuCase c = GetParam();
  const uint64_t seed = 0xc0da0000u + std::hash<std::string>{}(c.name) % 100000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = make_config(c);
  const ModelConfig model = ModelConfig::gated_delta_net(c.layers, g);
  PoolOptions options = test_pool_options(c.requests + 2, c.requests + 2, c.T, c.strategy);
  const bool replay = c.strategy == Strategy::kReplay;
  CudaStream owned_stream;
  cudaStream_t stream = owned_stream.get();
  ASSERT_NE(stream, nullptr);
  OraclePools p(model, options, stream, c.requests);
  const RandomLayers w(g, c.layers, rng);
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(
      cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * options.max_rows));

  // 1. Prefill (the advance kernels' token loop), a different length per request.
  for (int req = 0; req < c.requests; ++req) {
    const int n = std::uniform_int_distribution<int>(1, 9)(rng);
    for (int l = 0; l < c.layers; ++l) {
      const TokenInputs in = random_inputs(g, n, rng);
      TokenOutputs ref = make_outputs(g, n), got = make_outputs(g, n);
      p.cpu.prefill(l, p.ch[req], w.weights[l].view(), in.view(), ref.view());
      DeviceInputs din(in, c.pad);
      DeviceOutputs dout(got, c.pad, c.with_conv_out);
      p.gpu.prefill(l, p.gh[req], w.dweights[l].view(), din.view(), dout.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      dout.download(got);
      compare_outputs(ref, got, g, 0, n, c.with_conv_out,
                      "prefill request " + std::to_string(req) + " layer " + std::to_string(l));
    }
  }
  compare_committed(p.cpu, p.gpu, g, "after prefill");

  // 2. Decode: one token per row, a padding row in the middle.
  {
    std::vector<SlotHandle> crow(p.ch), grow(p.gh);
    const int pad_at = c.requests / 2;
    crow.insert(crow.begin() + pad_at, SlotHandle::padding());
    grow.insert(grow.begin() + pad_at, SlotHandle::padding());
    const int rows = static_cast<int>(crow.size());
    for (int l = 0; l < c.layers; ++l) {
      const TokenInputs in = random_inputs(g, rows, rng);
      TokenOutputs ref = make_outputs(g, rows), got = make_outputs(g, rows);
      p.cpu.decode(l, crow, w.weights[l].view(), in.view(), ref.view());
      DeviceInputs din(in, c.pad);
      DeviceOutputs dout(got, c.pad, c.with_conv_out);
      p.gpu.decode(l, grow, w.dweights[l].view(), din.view(), dout.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      dout.download(got);
      for (int r = 0; r < rows; ++r) {
        if (r == pad_at) {
          expect_padding_untouched(got, r, 1, c.with_conv_out, "decode layer " + std::to_string(l));
          continue;
        }
        compare_outputs(ref, got, g, r, 1, c.with_conv_out,
                        "decode row " + std::to_string(r) + " layer " + std::to_string(l));
      }
    }
    compare_committed(p.cpu, p.gpu, g, "after decode");
  }

  // 3. Verify + commit rounds.
  for (int round = 0; round < c.rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<int> order(c.requests);
    for (int i = 0; i < c.requests; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    // Cases with many requests keep >= 64 live rows (the conv kernel's token-loop mode).
    const int live = std::uniform_int_distribution<int>(c.requests >= 64 ? 64 : 1, c.requests)(rng);
    std::vector<int> row_request(order.begin(), order.begin() + live);  // -1 = padding
    while (static_cast<int>(row_request.size()) < options.max_rows && rng() % 2 == 0) {
      row_request.insert(row_request.begin() + rng() % (row_request.size() + 1), -1);
    }
    const int B = static_cast<int>(row_request.size());
    const int T = c.T;
    VerifyBatch cb, gb;
    cb.window = gb.window = T;
    for (int r = 0; r < B; ++r) {
      cb.rows.push_back(row_request[r] < 0 ? SlotHandle::padding() : p.ch[row_request[r]]);
      gb.rows.push_back(row_request[r] < 0 ? SlotHandle::padding() : p.gh[row_request[r]]);
    }
    if (c.tree) {
      const int trees = c.shared_tree ? 1 : B;
      for (int i = 0; i < trees; ++i) {
        const std::vector<int32_t> p = random_tree(T, rng);
        cb.parents.insert(cb.parents.end(), p.begin(), p.end());
      }
      gb.parents = cb.parents;
    }
    p.cpu.begin_verify(cb);
    p.gpu.begin_verify(gb);
    // Under replay a view materializes the slots, so the pending steps would be re-run by the
    // view instead of by verify: look at the memory only on some rounds.
    const bool look = !replay || round % 3 == 2;
    std::vector<std::vector<uint8_t>> before;
    for (int l = 0; l < c.layers && look; ++l) {
      before.push_back(rows_bytes(p.gpu.conv_state(l), 0, options.num_slots));
      before.push_back(rows_bytes(p.gpu.ssm_state(l), 0, options.num_slots));
    }
    for (int l = 0; l < c.layers; ++l) {
      const TokenInputs in = random_inputs(g, int64_t{B} * T, rng);
      TokenOutputs ref = make_outputs(g, int64_t{B} * T), got = make_outputs(g, int64_t{B} * T);
      p.cpu.verify(l, w.weights[l].view(), in.view(), ref.view());
      DeviceInputs din(in, c.pad);
      DeviceOutputs dout(got, c.pad, c.with_conv_out);
      p.gpu.verify(l, w.dweights[l].view(), din.view(), dout.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      dout.download(got);
      for (int r = 0; r < B; ++r) {
        const std::string what = "verify layer " + std::to_string(l) + " row " + std::to_string(r);
        if (row_request[r] < 0) {
          expect_padding_untouched(got, int64_t{r} * T, T, c.with_conv_out, what);
          continue;
        }
        compare_outputs(ref, got, g, int64_t{r} * T, T, c.with_conv_out, what);
        if (replay) continue;
        expect_close(rows_to_floats(p.cpu.snapshot_conv(l), r, 1),
                     rows_to_floats(p.gpu.snapshot_conv(l), r, 1), state_tolerance(g),
                     what + ": conv snapshots");
        expect_close(rows_to_floats(p.cpu.snapshot_ssm(l), r, 1),
                     rows_to_floats(p.gpu.snapshot_ssm(l), r, 1), state_tolerance(g),
                     what + ": ssm snapshots");
      }
    }
    for (int l = 0; l < c.layers && look; ++l) {
      ASSERT_EQ(rows_bytes(p.gpu.conv_state(l), 0, options.num_slots), before[2 * l])
          << "verify wrote the committed conv state, layer " << l;
      ASSERT_EQ(rows_bytes(p.gpu.ssm_state(l), 0, options.num_slots), before[2 * l + 1])
          << "verify wrote the committed SSM state, layer " << l;
    }

    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      const int lo = c.tree ? -1 : 0, hi = c.tree ? T - 1 : T;
      accepted[r] = row_request[r] < 0 ? lo : std::uniform_int_distribution<int>(lo, hi)(rng);
    }
    p.cpu.commit(accepted);
    if (round % 2 == 0) {
      p.gpu.commit(accepted);
    } else {
      SPECSTATE_CUDA_OK(
          cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));
      p.gpu.commit(TensorView::contiguous(d_accepted, DType::kI32, {B}, Device::kCuda));
    }
    EXPECT_EQ(p.gpu.last_commit_status(), Status::kSuccess);
    if (!replay || round % 3 == 1 || round + 1 == c.rounds) {
      compare_committed(p.cpu, p.gpu, g, "after commit, round " + std::to_string(round));
    }
    if (HasFatalFailure() || HasNonfatalFailure()) break;
  }
  cudaFree(d_accepted);
}

constexpr DType kF = DType::kF32;
constexpr DType kB = DType::kBF16;

std::vector<GpuCase> cases(Strategy strategy) {
  // name, H, HV, K, V, W, bias, act, conv, ssm, tree, shared, L, requests, T, rounds, pad, conv_out
  std::vector<GpuCase> all = {// name, H, HV, K, V, W, bias, act, conv, ssm, tree, shared, L,
                              // requests, T, rounds, pad, conv_out
                              GpuCase{"small_f32_chain", 2, 4, 32, 32, 4, true, kF, kF, kF, false,
                                      false, 2, 4, 4, 6, 0, true},
                              GpuCase{"small_f32_tree_padded_strides", 2, 4, 32, 32, 4, true, kF,
                                      kF, kF, true, false, 2, 4, 5, 6, 24, true},
                              GpuCase{"small_bf16_act_tree_shared", 2, 4, 32, 32, 4, false, kB, kB,
                                      kF, true, true, 2, 3, 6, 6, 0, true},
                              GpuCase{"odd_v_k64_w3_bf16_ssm_chain", 1, 3, 64, 40, 3, true, kF, kB,
                                      kB, false, false, 2, 3, 3, 5, 8, false},
                              GpuCase{"k32_v24_w2_all_bf16_tree", 2, 2, 32, 24, 2, false, kB, kB,
                                      kB, true, false, 2, 3, 4, 5, 0, false},
                              GpuCase{"f32_act_bf16_conv_chain_t8", 2, 4, 64, 64, 4, true, kF, kB,
                                      kF, false, false, 2, 5, 8, 5, 0, true},
                              GpuCase{"small_many_rows_tree", 2, 4, 32, 32, 4, true, kB, kB, kF,
                                      true, false, 2, 66, 3, 3, 8, false},
                              GpuCase{"small_many_rows_chain", 2, 4, 64, 32, 3, false, kF, kF, kF,
                                      false, false, 1, 65, 5, 3, 0, true},
                              GpuCase{"qwen3next_chain", 16, 32, 128, 128, 4, false, kB, kB, kF,
                                      false, false, 2, 3, 4, 3, 0, true},
                              GpuCase{"qwen3next_tree", 16, 32, 128, 128, 4, false, kB, kB, kF,
                                      true, false, 2, 3, 6, 2, 0, false},
                              GpuCase{"qwen3next_f32", 16, 32, 128, 128, 4, false, kF, kF, kF,
                                      false, false, 1, 6, 3, 2, 0, true}};
  for (GpuCase& c : all) {
    c.strategy = strategy;
    if (strategy == Strategy::kReplay) c.rounds += 3;  // rounds whose verify replays
  }
  return all;
}

std::string case_name(const ::testing::TestParamInfo<GpuCase>& info) {
  return std::string(info.param.name);
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaVsCpu, ::testing::ValuesIn(cases(Strategy::kSnapshot)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(GpuReplay, CudaVsCpu, ::testing::ValuesIn(cases(Strategy::kReplay)),
                         case_name);

}  // namespace
}  // namespace specstate::test
