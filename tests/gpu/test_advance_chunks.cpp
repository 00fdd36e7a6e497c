// Advance paths that the backend splits into several launches: a decode batch larger than one
// launch carries (256 rows by value), and a prefill longer than the conv-output scratch (the
// backend then advances chunk by chunk in place). Both against the CPU oracle, with and without
// a caller conv_out (the backend's scratch).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/presets.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

class AdvanceChunks : public ::testing::TestWithParam<bool> {};  // param: caller conv_out

TEST_P(AdvanceChunks, LargeDecodeBatchAndLongPrefillMatchTheOracle) {
  SPECSTATE_REQUIRE_GPU();
  const bool with_conv_out = GetParam();
  const uint64_t seed = with_conv_out ? 31 : 32;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = gdn_preset("gpu_h1_f32");
  const int slots = 300, L = 1;
  PoolOptions options =
      test_pool_options(slots, 4, 4);  // conv-output scratch: max(4 * 4, 256) = 256 tokens
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  CudaStream owned_stream;
  OraclePools p(model, options, owned_stream.get(), slots);
  const LayerWeights w = random_weights(g, rng);
  const DeviceWeights dw(w);

  // A prefill of 600 tokens: three chunks of the 256-token scratch.
  {
    const int n = 600;
    const TokenInputs in = random_inputs(g, n, rng);
    TokenOutputs ref = make_outputs(g, n), got = make_outputs(g, n);
    p.cpu.prefill(0, p.ch[7], w.view(), in.view(), ref.view());
    DeviceInputs din(in, 0);
    DeviceOutputs dout(got, 0, with_conv_out);
    p.gpu.prefill(0, p.gh[7], dw.view(), din.view(), dout.view());
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(owned_stream.get()));
    dout.download(got);
    expect_close(to_floats(ref.core_out.view()), to_floats(got.core_out.view()), 1e-5,
                 "prefill core_out");
    if (with_conv_out) {
      expect_close(to_floats(ref.conv_out.view()), to_floats(got.conv_out.view()), 1e-5,
                   "prefill conv_out");
    }
  }
  // Two decode steps over 300 rows + 1 padding row: two launches each.
  for (int step = 0; step < 2; ++step) {
    std::vector<SlotHandle> crow(p.ch), grow(p.gh);
    crow.insert(crow.begin() + 123, SlotHandle::padding());
    grow.insert(grow.begin() + 123, SlotHandle::padding());
    const int rows = static_cast<int>(crow.size());
    const TokenInputs in = random_inputs(g, rows, rng);
    TokenOutputs ref = make_outputs(g, rows), got = make_outputs(g, rows);
    p.cpu.decode(0, crow, w.view(), in.view(), ref.view());
    DeviceInputs din(in, 0);
    DeviceOutputs dout(got, 0, with_conv_out);
    p.gpu.decode(0, grow, dw.view(), din.view(), dout.view());
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(owned_stream.get()));
    dout.download(got);
    expect_close(rows_to_floats(ref.core_out.view(), 0, 123),
                 rows_to_floats(got.core_out.view(), 0, 123), 1e-5, "decode core_out, rows < 123");
    expect_close(rows_to_floats(ref.core_out.view(), 124, rows - 124),
                 rows_to_floats(got.core_out.view(), 124, rows - 124), 1e-5,
                 "decode core_out, rows > 123");
    if (with_conv_out) {  // (the caller's conv_out was asked for and never compared)
      expect_close(rows_to_floats(ref.conv_out.view(), 0, 123),
                   rows_to_floats(got.conv_out.view(), 0, 123), 1e-5,
                   "decode conv_out, rows < 123");
      expect_close(rows_to_floats(ref.conv_out.view(), 124, rows - 124),
                   rows_to_floats(got.conv_out.view(), 124, rows - 124), 1e-5,
                   "decode conv_out, rows > 123");
    }
  }
  expect_close(to_floats(p.cpu.ssm_state(0)), to_floats(p.gpu.ssm_state(0)), 1e-5, "committed ssm");
  expect_close(to_floats(p.cpu.conv_state(0)), to_floats(p.gpu.conv_state(0)), 1e-5,
               "committed conv");
}

INSTANTIATE_TEST_SUITE_P(Gpu, AdvanceChunks, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "caller_conv_out" : "scratch_conv_out");
                         });

}  // namespace
}  // namespace specstate::test
