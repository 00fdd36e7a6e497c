// Caller-owned pools on the device (DESIGN.md section 4): a CUDA pool over the caller's device
// tensors is bit-identical to an owning CUDA pool and writes only live slots' states (shared
// driver), and a CUDA graph of a round whose padding rows carry NaN inputs and non-zero device
// accepted values never writes a byte of any slot but the live rows' (the graph-padding test:
// padding is skipped inside the kernels, never clamped to a slot).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/pool_rounds.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

struct GpuOwnedCase {
  const char* name;
  const char* preset;
  Strategy strategy;
  bool tree;
  CallerLayout layout;
};
void PrintTo(const GpuOwnedCase& c, std::ostream* out) { *out << c.name; }

class CallerOwnedGpu : public ::testing::TestWithParam<GpuOwnedCase> {};

TEST_P(CallerOwnedGpu, BitIdenticalToAnOwningPoolAndWritesOnlyLiveSlots) {
  SPECSTATE_REQUIRE_GPU();
  const GpuOwnedCase& c = GetParam();
  CudaStream stream(cudaStreamNonBlocking);
  ASSERT_NE(stream.get(), nullptr);
  DeviceMemory mem(stream.get());
  run_caller_owned(c.preset, c.strategy, c.tree, c.layout, mem, 0xBEEF + c.tree);
}

INSTANTIATE_TEST_SUITE_P(
    Gpu, CallerOwnedGpu,
    ::testing::Values(GpuOwnedCase{"k32_chain_snapshot_one_tensor", "gpu_k32", Strategy::kSnapshot,
                                   false, CallerLayout::kOneTensor},
                      GpuOwnedCase{"k32_tree_replay_per_layer", "gpu_k32", Strategy::kReplay, true,
                                   CallerLayout::kPerLayer},
                      GpuOwnedCase{"k128_tree_snapshot_per_layer", "gpu_k128", Strategy::kSnapshot,
                                   true, CallerLayout::kPerLayer},
                      GpuOwnedCase{"k128_chain_replay_one_tensor", "gpu_k128", Strategy::kReplay,
                                   false, CallerLayout::kOneTensor},
                      GpuOwnedCase{"m2_chain_snapshot_per_layer", "m2_gpu_bf16",
                                   Strategy::kSnapshot, false, CallerLayout::kPerLayer},
                      GpuOwnedCase{"m2_tree_replay_one_tensor", "m2_gpu_f32", Strategy::kReplay,
                                   true, CallerLayout::kOneTensor},
                      // vLLM's element order: conv [W-1][conv_dim], delta-rule state [HV][K][V].
                      GpuOwnedCase{"k128_chain_replay_vllm", "gpu_k128", Strategy::kReplay, false,
                                   CallerLayout::kVllm},
                      GpuOwnedCase{"k32_tree_snapshot_vllm", "gpu_k32", Strategy::kSnapshot, true,
                                   CallerLayout::kVllm},
                      GpuOwnedCase{"m2_chain_replay_vllm", "m2_gpu_bf16", Strategy::kReplay, false,
                                   CallerLayout::kVllm},
                      GpuOwnedCase{"kda_tree_replay_vllm", "kda_gpu_k128", Strategy::kReplay, true,
                                   CallerLayout::kVllm}),
    [](const ::testing::TestParamInfo<GpuOwnedCase>& info) {
      return std::string(info.param.name);
    });

// Per-layer tensors in separate device allocations, as a framework allocates one tensor per
// layer: the slot operations that span the layers (acquire's zeroing, copy_slot, export and
// import) must not issue one 2-D memset or copy across them. Any two allocations are
// "equidistant", and a 2-D call spanning two allocations fails (cudaErrorInvalidValue): seen on
// the H200 through torch's caching allocator (tests/python/test_client.py's CUDA cases over the
// clients' per-layer tensors, 2026-12-04).
TEST(CallerOwnedGpuAllocations, SlotOperationsOverOneAllocationPerLayerTensor) {
  SPECSTATE_REQUIRE_GPU();
  const int L = 2, S = 3;
  const ModelConfig model = ModelConfig::gated_delta_net(L, gdn_preset("gpu_k32"));
  CudaStream stream(cudaStreamNonBlocking);
  ASSERT_NE(stream.get(), nullptr);
  PoolOptions o;
  o.num_slots = S;
  o.max_rows = 2;
  o.max_window = 4;
  o.strategy = Strategy::kReplay;
  o.backend = Backend::kCuda;
  o.device = 0;
  o.stream = stream.get();
  // The views' shapes and strides from an owning pool; each (layer, kind) its own allocation,
  // filled with a sentinel byte.
  constexpr uint8_t kSentinel = 0xAB;
  StatePool own(model, o);
  CommittedStateViews views;
  std::vector<void*> allocations;
  std::vector<int64_t> bytes;
  for (int l = 0; l < L; ++l) {
    for (const bool conv : {true, false}) {
      TensorView v = conv ? own.conv_state(l) : own.ssm_state(l);
      const int64_t n = v.numel() * static_cast<int64_t>(dtype_size(v.dtype));
      void* p = nullptr;
      SPECSTATE_CUDA_OK(cudaMalloc(&p, static_cast<std::size_t>(n)));
      allocations.push_back(p);
      bytes.push_back(n);
      SPECSTATE_CUDA_OK(cudaMemset(p, kSentinel, static_cast<std::size_t>(n)));
      v.data = p;
      (conv ? views.conv : views.ssm).push_back(v);
    }
  }
  // Allocation i's bytes on the host.
  const auto read = [&](std::size_t i) {
    std::vector<uint8_t> h(static_cast<std::size_t>(bytes[i]));
    EXPECT_EQ(cudaMemcpy(h.data(), allocations[i], h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  };
  {
    StatePool pool(model, o, views);
    const SlotHandle a = pool.acquire();
    const SlotHandle b = pool.acquire();
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    // acquire zeroed slots a and b of every layer and nothing else.
    for (std::size_t i = 0; i < allocations.size(); ++i) {
      const std::vector<uint8_t> h = read(i);
      const int64_t slot_bytes = bytes[i] / S;
      for (int s = 0; s < S; ++s) {
        const bool live = s == pool.slot_index(a) || s == pool.slot_index(b);
        for (int64_t k = 0; k < slot_bytes; ++k) {
          ASSERT_EQ(h[static_cast<std::size_t>(s * slot_bytes + k)], live ? 0 : kSentinel)
              << "allocation " << i << " slot " << s << " byte " << k;
        }
      }
    }
    // A state with nonzero bytes into a (import: a header from export, then random payload in
    // the pools' dtypes), copied to b: b's export is a's, byte for byte, in every layer.
    const int64_t n = pool.slot_state_bytes();
    std::vector<int32_t> state(static_cast<std::size_t>((n + 3) / 4));
    const TensorView host =
        TensorView::contiguous(state.data(), DType::kI32, {static_cast<int64_t>(state.size())});
    pool.export_slot(a, host);
    std::mt19937 rng(7);
    auto* payload = reinterpret_cast<uint8_t*>(state.data());
    for (int64_t k = StatePool::kSlotStateHeaderBytes; k < n; ++k) {
      payload[k] = static_cast<uint8_t>(1 + rng() % 100);  // small nonzero bytes: finite values
    }
    pool.import_slot(a, host);
    pool.copy_slot(a, b);
    std::vector<int32_t> back(state.size());
    pool.export_slot(
        b, TensorView::contiguous(back.data(), DType::kI32, {static_cast<int64_t>(back.size())}));
    EXPECT_EQ(0, std::memcmp(back.data(), state.data(), static_cast<std::size_t>(n)));
    // The third slot still holds the sentinel in every layer.
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    const int other = 3 - pool.slot_index(a) - pool.slot_index(b);
    for (std::size_t i = 0; i < allocations.size(); ++i) {
      const std::vector<uint8_t> h = read(i);
      const int64_t slot_bytes = bytes[i] / S;
      for (int64_t k = 0; k < slot_bytes; ++k) {
        ASSERT_EQ(h[static_cast<std::size_t>(other * slot_bytes + k)], kSentinel)
            << "allocation " << i << " byte " << k;
      }
    }
  }
  for (void* p : allocations) cudaFree(p);
}

class GraphPadding : public ::testing::TestWithParam<Strategy> {};

TEST_P(GraphPadding, PaddingRowsNeverWriteAnySlot) {
  SPECSTATE_REQUIRE_GPU();
  std::mt19937_64 rng(77);
  const GdnConfig g = gdn_preset("gpu_k32");
  const int L = 2, T = 4, B = 4;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  CudaStream owned_stream(cudaStreamNonBlocking);
  cudaStream_t stream = owned_stream.get();
  DeviceMemory mem(stream);
  PoolOptions o;
  o.num_slots = 6;
  o.max_rows = B;
  o.max_window = T;
  o.strategy = GetParam();
  o.backend = Backend::kCuda;
  o.stream = stream;
  const CallerMemory cm = make_caller_memory(model, o, CallerLayout::kOneTensor, mem, 9);
  StatePool pool(model, o, cm.views);
  // Live requests at slots 2 and 4; slots 0, 1, 3, 5 are free (0 is where a clamped -1 lands).
  std::vector<SlotHandle> all;
  for (int i = 0; i < 5; ++i) all.push_back(pool.acquire());
  for (int i : {0, 1, 3}) pool.release(all[i]);
  const SlotHandle a = all[2], b = all[4];
  std::vector<LayerWeights> w;
  std::vector<DeviceWeights> dw;
  for (int l = 0; l < L; ++l) {
    w.push_back(random_weights(g, rng));
    dw.emplace_back(w.back());
  }
  for (SlotHandle h : {a, b}) {
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, 3, rng);
      const DeviceInputs din(in, 0);
      DeviceOutputs dout(make_outputs(g, 3), 0, true);
      pool.prefill(l, h, dw[l].view(), din.view(), dout.view());
    }
  }
  pool.materialize();
  SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> conv0 = mem.bytes(cm.conv_buffer), ssm0 = mem.bytes(cm.ssm_buffer);

  // Rows {padding, a, padding, b}; the padding rows' tokens are NaN and their device accepted
  // values are 3 (any value: a padding row is skipped whatever it holds).
  VerifyBatch batch;
  batch.rows = {SlotHandle::padding(), a, SlotHandle::padding(), b};
  batch.window = T;
  std::vector<DeviceInputs> din;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < L; ++l) {
    TokenInputs in = random_inputs(g, int64_t{B} * T, rng);
    for (int r : {0, 2}) {
      for (Buffer* buf : {&in.mixed_qkv, &in.a, &in.b}) {
        const int64_t row = buf->numel() / buf->shape()[0];
        for (int64_t i = r * T * row; i < (r + 1) * T * row; ++i) buf->set(i, std::nanf(""));
      }
    }
    din.emplace_back(in, 0);
    dout.emplace_back(make_outputs(g, int64_t{B} * T), 0, true);
  }
  Buffer acc(DType::kI32, {B});
  acc.set(0, 3);
  acc.set(1, 2);
  acc.set(2, 3);
  acc.set(3, 4);
  const DeviceTensor dacc(acc);
  pool.begin_verify(batch);
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < L; ++l) pool.verify(l, dw[l].view(), din[l].view(), dout[l].view());
  pool.commit(dacc.view());
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SPECSTATE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  SPECSTATE_CUDA_OK(cudaGraphLaunch(exec, stream));
  SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(pool.last_commit_status(), Status::kSuccess);
  pool.materialize();
  SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> conv = mem.bytes(cm.conv_buffer), ssm = mem.bytes(cm.ssm_buffer);
  // Every byte but slots 2 and 4's states is what it was; those changed and hold no NaN.
  std::vector<bool> live_conv(conv.size(), false), live_ssm(ssm.size(), false);
  for (int l = 0; l < L; ++l) {
    for (int s : {2, 4}) {
      for (int64_t i = 0; i < cm.conv_state_bytes; ++i)
        live_conv[cm.conv_offset[l * 6 + s] + i] = true;
      for (int64_t i = 0; i < cm.ssm_state_bytes; ++i)
        live_ssm[cm.ssm_offset[l * 6 + s] + i] = true;
    }
  }
  for (std::size_t i = 0; i < conv.size(); ++i) {
    if (!live_conv[i]) ASSERT_EQ(conv[i], conv0[i]) << "conv byte " << i << " written";
  }
  for (std::size_t i = 0; i < ssm.size(); ++i) {
    if (!live_ssm[i]) ASSERT_EQ(ssm[i], ssm0[i]) << "SSM byte " << i << " written";
  }
  EXPECT_NE(conv, conv0) << "the live rows committed nothing";
  EXPECT_NE(ssm, ssm0) << "the live rows committed nothing";
  // A NaN from a padding row would have reached the live rows' SSM states only through a
  // mis-indexed token: the f32 SSM states hold no NaN.
  for (int l = 0; l < L; ++l) {
    for (float x : to_floats(pool.ssm_state(l, a))) ASSERT_FALSE(std::isnan(x));
    for (float x : to_floats(pool.ssm_state(l, b))) ASSERT_FALSE(std::isnan(x));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

INSTANTIATE_TEST_SUITE_P(Gpu, GraphPadding,
                         ::testing::Values(Strategy::kSnapshot, Strategy::kReplay),
                         strategy_test_name);

}  // namespace
}  // namespace specstate::test
