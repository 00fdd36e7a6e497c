// Speculative equivalence on the device (DESIGN.md section 7), many rounds: after verify +
// commit rounds on one CUDA pool, the committed state equals a second CUDA pool that decodes
// only the accepted tokens one by one, and verify's output for each accepted token equals the
// decode output at that step. Both pools run the same kernels on the same values, so the
// tolerance is far below the GPU-vs-CPU one.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>

#include "common/presets.h"
#include "common/speculative_equivalence.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

// Params: tree, and the verifying pool's strategy (snapshot only, once: the replay strategy's
// verify and commit were set against sequential decode on the device nowhere else).
class DeviceEquivalence : public ::testing::TestWithParam<std::tuple<bool, Strategy>> {};

TEST_P(DeviceEquivalence, VerifyCommitRoundsEqualSequentialDecode) {
  SPECSTATE_REQUIRE_GPU();
  const bool tree = std::get<0>(GetParam());
  const Strategy strategy = std::get<1>(GetParam());
  const uint64_t seed = tree ? 777 : 778;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = gdn_preset("gpu_k128");  // H=4 HV=8 K=128 V=64 W=4, bf16 act/conv
  const int L = 2, requests = 4, T = 5, rounds = 16;
  PoolOptions options = test_pool_options(requests, requests + 1, T);
  options.backend = Backend::kCuda;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions spec_options = options;
  spec_options.strategy = strategy;
  StatePool spec(model, spec_options), ref(model, options);
  std::vector<SlotHandle> sh, rh;
  for (int i = 0; i < requests; ++i) {
    sh.push_back(spec.acquire());
    rh.push_back(ref.acquire());
  }
  const RandomLayers w(g, L, rng);
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(
      cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * (requests + 1)));
  int accepted_tokens = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<int> rows = shuffled_requests(requests, rng);
    rows.insert(rows.begin() + rng() % (requests + 1), -1);  // one padding row
    const int B = requests + 1;
    VerifyBatch batch;
    batch.window = T;
    for (int r = 0; r < B; ++r)
      batch.rows.push_back(rows[r] < 0 ? SlotHandle::padding() : sh[rows[r]]);
    if (tree) batch.parents = random_tree(T, rng);
    spec.begin_verify(batch);
    std::vector<TokenInputs> in;
    std::vector<TokenOutputs> out;
    for (int l = 0; l < L; ++l) {
      in.push_back(random_inputs(g, int64_t{B} * T, rng));
      out.push_back(make_outputs(g, int64_t{B} * T));
      DeviceInputs din(in[l], 0);
      DeviceOutputs dout(out[l], 0, true);
      spec.verify(l, w.dweights[l].view(), din.view(), dout.view());
      SPECSTATE_CUDA_OK(cudaDeviceSynchronize());
      dout.download(out[l]);
    }
    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      const int lo = tree ? -1 : 0, hi = tree ? T - 1 : T;
      accepted[r] = rows[r] < 0 ? lo : std::uniform_int_distribution<int>(lo, hi)(rng);
    }
    SPECSTATE_CUDA_OK(
        cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));
    spec.commit(TensorView::contiguous(d_accepted, DType::kI32, {B}, Device::kCuda));
    ASSERT_EQ(spec.last_commit_status(), Status::kSuccess);

    for (int r = 0; r < B; ++r) {
      if (rows[r] < 0) continue;
      const std::vector<int> path = accepted_path(tree, batch.parents, 0, accepted[r]);
      accepted_tokens += static_cast<int>(path.size());
      for (int l = 0; l < L; ++l) {
        for (int t : path) {
          const int64_t token = int64_t{r} * T + t;
          TokenInputs one;
          one.mixed_qkv = Buffer(g.act_dtype, {1, g.conv_dim()});
          one.a = Buffer(g.act_dtype, {1, g.num_v_heads});
          one.b = Buffer(g.act_dtype, {1, g.num_v_heads});
          for (int c = 0; c < g.conv_dim(); ++c) {
            one.mixed_qkv.set(c, in[l].mixed_qkv.get(token * g.conv_dim() + c));
          }
          for (int h = 0; h < g.num_v_heads; ++h) {
            one.a.set(h, in[l].a.get(token * g.num_v_heads + h));
            one.b.set(h, in[l].b.get(token * g.num_v_heads + h));
          }
          TokenOutputs dec = make_outputs(g, 1);
          DeviceInputs din(one, 0);
          DeviceOutputs dout(dec, 0, true);
          ref.decode(l, {rh[rows[r]]}, w.dweights[l].view(), din.view(), dout.view());
          SPECSTATE_CUDA_OK(cudaDeviceSynchronize());
          dout.download(dec);
          expect_close(rows_to_floats(out[l].core_out.view(), token, 1),
                       rows_to_floats(dec.core_out.view(), 0, 1), 1e-6,
                       "layer " + std::to_string(l) + " row " + std::to_string(r) + " token " +
                           std::to_string(t) + ": verify output vs decode output");
        }
      }
    }
    for (int l = 0; l < L; ++l) {
      expect_close(to_floats(ref.ssm_state(l)), to_floats(spec.ssm_state(l)), 1e-6,
                   "committed ssm vs sequential decode, layer " + std::to_string(l));
      expect_close(to_floats(ref.conv_state(l)), to_floats(spec.conv_state(l)), 0.0,
                   "committed conv vs sequential decode, layer " + std::to_string(l));
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(accepted_tokens, rounds) << "the trace accepted almost nothing";
  cudaFree(d_accepted);
}

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceEquivalence,
                         ::testing::Combine(::testing::Values(false, true),
                                            ::testing::Values(Strategy::kSnapshot,
                                                              Strategy::kReplay)),
                         [](const ::testing::TestParamInfo<std::tuple<bool, Strategy>>& info) {
                           return std::string(std::get<0>(info.param) ? "tree" : "chain") +
                                  (std::get<1>(info.param) == Strategy::kReplay ? "_replay"
                                                                                : "_snapshot");
                         });

}  // namespace
}  // namespace specstate::test
