// CUDA graphs: verify of every layer plus the commit (accepted lengths in device memory) are
// captured once in one graph (static shapes, padding rows, no host sync inside), then replayed
// for many rounds with new inputs and new accepted values written into the same device buffers.
// Every replay must match the CPU oracle running the same rounds eagerly.
// Each case runs twice: the CUDA pool in the default element order, and in vLLM's (channels-last
// conv windows, [HV][K][V] states) against the oracle in the default order, compared logically.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "common/presets.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

// params: tree window; the CUDA pool in vLLM's element order (the oracle in the default one)
class CudaGraph : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(CudaGraph, CaptureOnceReplayWithNewInputsAndAcceptedLengths) {
  SPECSTATE_REQUIRE_GPU();
  const bool tree = std::get<0>(GetParam()), vllm = std::get<1>(GetParam());
  const uint64_t seed = (tree ? 4242 : 4141) + (vllm ? 7 : 0);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = gdn_preset("gpu_k64_f32");
  const int L = 3, requests = 4, T = 4, rounds = 8;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions options = test_pool_options(requests + 1, requests + 1, T);
  CudaStream owned_stream(cudaStreamNonBlocking);
  cudaStream_t stream = owned_stream.get();
  ASSERT_NE(stream, nullptr);
  const PoolOptions gpu_options =
      vllm ? vllm_layout_options(options, LayerKind::kGatedDeltaNet) : options;
  OraclePools p(model, options, gpu_options, stream, requests);
  const RandomLayers w(g, L, rng);
  // Some history first, so that the committed state is not zero.
  ASSERT_NO_FATAL_FAILURE(prefill_history(p, w, g, 3, rng, stream));
  SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));

  // The fixed batch of the graph: rows 0..B-1 with a padding row at index 2.
  const int B = requests + 1, pad_row = 2;
  VerifyBatch cb = padded_batch(p.ch, pad_row, T), gb = padded_batch(p.gh, pad_row, T);
  if (tree) {
    cb.parents = {-1, 0, 0, 1};  // one tree for every row
    gb.parents = cb.parents;
  }

  // Fixed device buffers the graph reads and writes.
  std::vector<DeviceInputs> din;
  std::vector<DeviceOutputs> dout;
  std::vector<TokenOutputs> host_out;
  for (int l = 0; l < L; ++l) {
    din.emplace_back(random_inputs(g, int64_t{B} * T, rng), 0);
    host_out.push_back(make_outputs(g, int64_t{B} * T));
    dout.emplace_back(host_out.back(), 0, true);
  }
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * B));
  SPECSTATE_CUDA_OK(cudaMemset(d_accepted, 0, sizeof(int32_t) * B));

  p.gpu.begin_verify(gb);
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < L; ++l) p.gpu.verify(l, w.dweights[l].view(), din[l].view(), dout[l].view());
  p.gpu.commit(TensorView::contiguous(d_accepted, DType::kI32, {B}, Device::kCuda));
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SPECSTATE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  size_t nodes = 0;
  SPECSTATE_CUDA_OK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_GE(nodes, static_cast<size_t>(2 * L + 1)) << "the graph holds every layer and the commit";

  int accepted_total = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<TokenInputs> in;
    std::vector<TokenOutputs> ref;
    for (int l = 0; l < L; ++l) {
      in.push_back(random_inputs(g, int64_t{B} * T, rng));
      din[l].mixed_qkv.upload(in[l].mixed_qkv);
      din[l].a.upload(in[l].a);
      din[l].b.upload(in[l].b);
      ref.push_back(make_outputs(g, int64_t{B} * T));
    }
    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      accepted[r] = r == pad_row
                        ? (tree ? -1 : 0)
                        : std::uniform_int_distribution<int>(tree ? -1 : 0, tree ? T - 1 : T)(rng);
      accepted_total += accepted[r] > 0;
    }
    SPECSTATE_CUDA_OK(
        cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));
    p.cpu.begin_verify(cb);
    for (int l = 0; l < L; ++l) p.cpu.verify(l, w.weights[l].view(), in[l].view(), ref[l].view());
    p.cpu.commit(accepted);

    p.gpu.begin_verify(gb);  // uploads the (same) plan outside the graph
    SPECSTATE_CUDA_OK(cudaGraphLaunch(exec, stream));
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(p.gpu.last_commit_status(), Status::kSuccess);
    for (int l = 0; l < L; ++l) {
      dout[l].download(host_out[l]);
      for (int r = 0; r < B; ++r) {
        if (r == pad_row) continue;
        const std::string what = "layer " + std::to_string(l) + " row " + std::to_string(r);
        expect_close(rows_to_floats(ref[l].core_out.view(), int64_t{r} * T, T),
                     rows_to_floats(host_out[l].core_out.view(), int64_t{r} * T, T),
                     output_tolerance(g), what + ": core_out");
      }
      expect_close(to_floats(p.cpu.ssm_state(l)), to_floats(p.gpu.ssm_state(l)), state_tolerance(g),
                   "committed ssm, layer " + std::to_string(l));
      expect_close(to_floats(p.cpu.conv_state(l)), to_floats(p.gpu.conv_state(l)),
                   state_tolerance(g), "committed conv, layer " + std::to_string(l));
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(accepted_total, rounds) << "the trace committed almost nothing";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d_accepted);
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudaGraph, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         graph_case_name);

}  // namespace
}  // namespace specstate::test
