// Slot operations and the round lifecycle on the CUDA backend (issue 10 sections 1 and 3), for
// both layer kinds and both strategies:
//   - export -> import round trips bit for bit CPU -> CUDA -> CUDA (other strategy) -> CPU,
//     through host and device buffers and a safetensors file, and an imported request goes on
//     exactly like the CUDA pool that ran it;
//   - copy_slot / fork / reset on the device (one strided copy per buffer);
//   - a row released mid-round becomes padding: a device-valued commit skips it (its value is
//     not keep) and the other rows commit; a host commit that advances it is rejected;
//   - abort_round then a new round equals never having started the first.
// Every test calls SPECSTATE_REQUIRE_GPU() and skips visibly without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "common/pool_rounds.h"
#include "common/slot_cases.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

const std::vector<SlotCase>& cases() {
  static const std::vector<SlotCase> all = {
      {"gdn_k32_chain_snapshot", "gpu_k32", Strategy::kSnapshot, false},
      {"gdn_k32_tree_replay", "gpu_k32", Strategy::kReplay, true},
      {"gdn_f32_tree_snapshot", "gpu_f32", Strategy::kSnapshot, true},
      {"gdn_f32_chain_replay", "gpu_f32", Strategy::kReplay, false},
      {"m2_g1_tree_snapshot", "m2_g1", Strategy::kSnapshot, true},
      {"m2_g1_chain_replay", "m2_g1", Strategy::kReplay, false},
  };
  return all;
}

constexpr int kLayers = 3;
constexpr int kT = kRoundT;

// Device copies of host buffers, alive until the test ends (the pools run asynchronously).
struct DeviceStore {
  std::deque<DeviceTensor> tensors;
  PutBuffer put() {
    return [this](const Buffer& b) {
      tensors.emplace_back(b);
      return tensors.back().view();
    };
  }
};

// A device byte buffer of the export size, as an i32 view.
struct DeviceBytes {
  DeviceTensor t;
  int64_t n;
  explicit DeviceBytes(int64_t bytes) : n((bytes + 3) / 4) {
    Buffer host(DType::kI32, {n});
    t = DeviceTensor(host);
  }
  TensorView view() const { return t.view(); }
};

StatePool cuda_pool(const ModelConfig& model, PoolOptions o, cudaStream_t stream) {
  o.backend = Backend::kCuda;
  o.device = 0;
  o.stream = stream;
  return StatePool(model, o);
}

class SlotOpsGpu : public ::testing::TestWithParam<SlotCase> {};

TEST_P(SlotOpsGpu, ExportImportRoundTripsCpuCudaCpuAcrossStrategies) {
  SPECSTATE_REQUIRE_GPU();
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    CudaStream stream(cudaStreamNonBlocking);
    ASSERT_NE(stream.get(), nullptr);
    DeviceStore store;
    PoolRounds<Kind> host(layer, kLayers, 401);
    PoolRounds<Kind> dev(layer, kLayers, 402, store.put());
    StatePool cpu = host.pool(c.strategy);
    StatePool g1 = cuda_pool(dev.model(), dev.options(c.strategy), stream.get());
    StatePool g2 = cuda_pool(dev.model(), dev.options(other(c.strategy)), stream.get());
    StatePool back = host.pool(other(c.strategy));
    const SlotHandle a = cpu.acquire(), b1 = g1.acquire(), b2 = g2.acquire();
    g2.acquire();  // another slot index on g2
    const SlotHandle b2b = g2.acquire(), z = back.acquire();
    host.prefill(cpu, a, host.inputs(5));
    host.round(cpu, batch_of(c, {a}), accept(c, {3}));  // replay: pending when exported
    const std::vector<uint8_t> want = exported(cpu, a);
    expect_nonzero(want, "the CPU export");
    // CPU (host buffer) -> CUDA.
    // The export buffer holds the header too: slot_state_bytes(), not the state bytes.
    std::vector<int32_t> words((cpu.slot_state_bytes() + 3) / 4);
    cpu.export_slot(
        a, TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())}));
    g1.import_slot(b1, TensorView::contiguous(words.data(), DType::kI32,
                                              {static_cast<int64_t>(words.size())}));
    EXPECT_EQ(exported(g1, b1), want);
    // CUDA -> CUDA of the other strategy through a device buffer.
    DeviceBytes dbuf(g1.slot_state_bytes());
    g1.export_slot(b1, dbuf.view());
    g2.import_slot(b2, dbuf.view());
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream.get()));
    EXPECT_EQ(exported(g2, b2), want);
    // ... and through a file.
    const std::string path = ::testing::TempDir() + "specstate_gpu_" + c.name + ".safetensors";
    g2.export_slot(b2, path);
    g2.import_slot(b2b, path);
    std::remove(path.c_str());
    EXPECT_EQ(exported(g2, b2b), want);
    // CUDA -> CPU.
    std::fill(words.begin(), words.end(), 0);
    g2.export_slot(b2b, TensorView::contiguous(words.data(), DType::kI32,
                                               {static_cast<int64_t>(words.size())}));
    back.import_slot(
        z, TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())}));
    EXPECT_EQ(exported(back, z), want);
    // The imported requests go on alike in both CUDA pools (the strategies are bit-identical on
    // one backend), and the export materializes replay's pending steps first.
    const auto in = dev.inputs(kT);
    dev.round(g1, batch_of(c, {b1}), in, accept(c, {2}));
    dev.round(g2, batch_of(c, {b2}), in, accept(c, {2}));
    const auto after = exported(g1, b1);
    EXPECT_EQ(exported(g2, b2), after);
    EXPECT_NE(after, want);
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_EQ(g1.conv_state(l, b1).device, Device::kCuda);
      EXPECT_EQ(g1.ssm_state(l, b1).shape[0], g1.ssm_state(l).shape[1]);
    }
  });
}

TEST_P(SlotOpsGpu, CopyForkAndResetOnTheDevice) {
  SPECSTATE_REQUIRE_GPU();
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    CudaStream stream(cudaStreamNonBlocking);
    DeviceStore store;
    PoolRounds<Kind> dev(layer, kLayers, 403, store.put());
    StatePool g = cuda_pool(dev.model(), dev.options(c.strategy), stream.get());
    const SlotHandle src = g.acquire(), dst = g.acquire();
    dev.prefill(g, src, dev.inputs(3));
    dev.prefill(g, dst, dev.inputs(5));
    dev.round(g, batch_of(c, {src, dst}), accept(c, {2, 3}));  // both pending under replay
    g.copy_slot(src, dst);
    EXPECT_EQ(exported(g, dst), exported(g, src));
    const SlotHandle f = g.fork(src);
    EXPECT_EQ(exported(g, f), exported(g, src));
    expect_nonzero(exported(g, f), "the fork");
    // The same round on each: dst replays nothing of its own old steps.
    const auto in = dev.inputs(kT);
    dev.round(g, batch_of(c, {src}), in, accept(c, {3}));
    dev.round(g, batch_of(c, {dst}), in, accept(c, {3}));
    dev.round(g, batch_of(c, {f}), in, accept(c, {3}));
    EXPECT_EQ(exported(g, dst), exported(g, src));
    EXPECT_EQ(exported(g, f), exported(g, src));
    g.reset(f);
    for (uint8_t byte : exported(g, f)) ASSERT_EQ(byte, 0);
    expect_nonzero(exported(g, src), "src after the reset of its fork");
  });
}

TEST_P(SlotOpsGpu, ARowReleasedMidRoundIsSkippedByADeviceCommit) {
  SPECSTATE_REQUIRE_GPU();
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    CudaStream stream(cudaStreamNonBlocking);
    DeviceStore store;
    PoolRounds<Kind> dev(layer, kLayers, 404, store.put());
    StatePool g = cuda_pool(dev.model(), dev.options(c.strategy), stream.get());
    StatePool ref = cuda_pool(dev.model(), dev.options(c.strategy), stream.get());
    std::vector<SlotHandle> hg, hr;
    for (int i = 0; i < 3; ++i) {
      hg.push_back(g.acquire());
      hr.push_back(ref.acquire());
      const auto in = dev.inputs(2 + i);
      dev.prefill(g, hg[i], in);
      dev.prefill(ref, hr[i], in);
    }
    const auto hist = dev.inputs(3 * kT);
    dev.round(g, batch_of(c, hg), hist, accept(c, {1, 2, 3}));
    dev.round(ref, batch_of(c, hr), hist, accept(c, {1, 2, 3}));
    const auto in = dev.inputs(3 * kT);
    auto out = dev.outputs(3 * kT);
    g.begin_verify(batch_of(c, hg));
    dev.verify(g, in, out, 0, 1);
    g.release(hg[1]);
    dev.verify(g, in, out, 1, kLayers);
    // A host commit that advances the released row is rejected.
    try {
      g.commit(accept(c, {3, 2, 1}));
      ADD_FAILURE() << "a host commit advancing a released row was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kFailedPrecondition) << e.what();
      EXPECT_NE(std::string(e.what()).find("batch.rows[1]"), std::string::npos) << e.what();
    }
    // A device commit cannot be checked before the launch: the kernel skips the row.
    Buffer values(DType::kI32, {3});
    const auto acc = accept(c, {3, 2, 1});
    for (int r = 0; r < 3; ++r) values.set(r, static_cast<float>(acc[r]));
    DeviceTensor dvalues(values);
    g.commit(dvalues.view());
    EXPECT_EQ(g.last_commit_status(), Status::kSuccess);
    ref.begin_verify(batch_of(c, {hr[0], SlotHandle::padding(), hr[2]}));
    auto out_ref = dev.outputs(3 * kT);
    dev.verify(ref, in, out_ref, 0, kLayers);
    ref.commit(accept(c, {3, 0, 1}));
    EXPECT_EQ(exported(g, hg[0]), exported(ref, hr[0]));
    EXPECT_EQ(exported(g, hg[2]), exported(ref, hr[2]));
    expect_nonzero(exported(g, hg[0]), "row 0");
    // The slot's next occupant starts from zero and replays nothing.
    const SlotHandle next = g.acquire();
    ASSERT_EQ(next.slot, hg[1].slot);
    for (uint8_t byte : exported(g, next)) ASSERT_EQ(byte, 0);
    ref.release(hr[1]);
    const SlotHandle next_ref = ref.acquire();
    const auto fresh = dev.inputs(2), in2 = dev.inputs(kT);
    dev.prefill(g, next, fresh);
    dev.prefill(ref, next_ref, fresh);
    dev.round(g, batch_of(c, {next}), in2, accept(c, {2}));
    dev.round(ref, batch_of(c, {next_ref}), in2, accept(c, {2}));
    EXPECT_EQ(exported(g, next), exported(ref, next_ref));
  });
}

TEST_P(SlotOpsGpu, AbortRoundThenANewRoundEqualsNeverStartingTheFirst) {
  SPECSTATE_REQUIRE_GPU();
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    CudaStream stream(cudaStreamNonBlocking);
    DeviceStore store;
    PoolRounds<Kind> dev(layer, kLayers, 405, store.put());
    StatePool g = cuda_pool(dev.model(), dev.options(c.strategy), stream.get());
    StatePool ref = cuda_pool(dev.model(), dev.options(c.strategy), stream.get());
    const SlotHandle a = g.acquire(), ar = ref.acquire();
    const auto x = dev.inputs(3), y = dev.inputs(kT);
    dev.prefill(g, a, x);
    dev.prefill(ref, ar, x);
    dev.round(g, batch_of(c, {a}), y, accept(c, {3}));
    dev.round(ref, batch_of(c, {ar}), y, accept(c, {3}));
    const auto dropped = dev.inputs(kT);
    auto out = dev.outputs(kT);
    g.begin_verify(batch_of(c, {a}));
    dev.verify(g, dropped, out, 0, 2);
    EXPECT_THROW(g.begin_verify(batch_of(c, {a})), Error);
    g.abort_round();
    const auto in = dev.inputs(kT);
    dev.round(g, batch_of(c, {a}), in, accept(c, {2}));
    dev.round(ref, batch_of(c, {ar}), in, accept(c, {2}));
    EXPECT_EQ(exported(g, a), exported(ref, ar));
    expect_nonzero(exported(g, a), "the state");
  });
}

INSTANTIATE_TEST_SUITE_P(Gpu, SlotOpsGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<SlotCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace specstate::test
