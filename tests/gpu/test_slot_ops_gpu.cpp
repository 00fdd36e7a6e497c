// The slot-operation suite (common/slot_ops.h) on the CUDA backend, both strategies, GDN and
// Mamba2; and what only a device pool does (issue 10 sections 1 and 3):
//   - export -> import round trips bit for bit CPU -> CUDA -> CUDA (other strategy) -> CPU,
//     through host and device buffers and a safetensors file, and an imported request goes on
//     exactly like the CUDA pool that ran it;
//   - a row released mid-round becomes padding: a device-valued commit skips it (its value is
//     not keep) and the other rows commit; a host commit that advances it is rejected.
// Every test skips visibly without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/slot_ops.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

// Device memory on a stream of its own (declared first: it outlives the memory's buffers).
class StreamMemory final : public Memory {
 public:
  Backend backend() const override { return Backend::kCuda; }
  void* stream() const override { return stream_.get(); }
  TensorView put(const Buffer& host, bool persistent) override {
    return mem_.put(host, persistent);
  }
  std::vector<uint8_t> bytes(const TensorView& view) override { return mem_.bytes(view); }
  void clear() override { mem_.clear(); }

 private:
  CudaStream stream_{cudaStreamNonBlocking};
  DeviceMemory mem_{stream_.get()};
};

// The suite's memory: null without a device (its tests skip).
std::unique_ptr<Memory> cuda_memory() {
  if (!has_gpu()) return nullptr;
  return std::make_unique<StreamMemory>();
}

INSTANTIATE_TEST_SUITE_P(Gpu, SlotOps,
                         ::testing::ValuesIn(slot_ops_params(Backend::kCuda, &cuda_memory)),
                         slot_ops_name);

// What only CUDA pools do, on the suite's fixture (its memory, its rounds).
class SlotOpsGpu : public SlotOps {};

TEST_P(SlotOpsGpu, ExportImportRoundTripsCpuCudaCpuAcrossStrategies) {
  with_rounds(402, [&](auto& dev) {
    ASSERT_NE(mem().stream(), nullptr);
    std::decay_t<decltype(dev)> host(dev.layer(), kLayers, 401);
    StatePool cpu = host.pool(c.strategy);
    StatePool g1 = dev.pool(c.strategy), g2 = dev.pool(other(c.strategy));
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
    const TensorView dbuf = mem().put(Buffer(DType::kI32, {(g1.slot_state_bytes() + 3) / 4}), true);
    g1.export_slot(b1, dbuf);
    g2.import_slot(b2, dbuf);
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(static_cast<cudaStream_t>(mem().stream())));
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

TEST_P(SlotOpsGpu, ARowReleasedMidRoundIsSkippedByADeviceCommit) {
  with_rounds(404, [&](auto& dev) {
    StatePool g = dev.pool(c.strategy), ref = dev.pool(c.strategy);
    std::vector<SlotHandle> hg, hr;
    std::tie(hg, hr) = alike_requests(dev, g, ref, 3);
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

INSTANTIATE_TEST_SUITE_P(Gpu, SlotOpsGpu,
                         ::testing::ValuesIn(slot_ops_params(Backend::kCuda, &cuda_memory)),
                         slot_ops_name);

// A pool whose layout fits the device but whose backend scratch does not (the conv-output
// scratch of max_rows * max_window tokens: about 1.1 TB here; the layout, one slot's state and
// records and the replay workspace, about 62 MB) is refused as exhausted memory naming the sizes:
// can_implement counted the layout's buffers only, so cudaMalloc failed later and the pool
// reported a backend error.
TEST(CudaPoolMemory, BackendScratchCountsTowardTheDeviceMemoryCheck) {
  SPECSTATE_REQUIRE_GPU();
  const ModelConfig m = ModelConfig::gated_delta_net(1, GdnConfig{});  // conv_dim 8192, bf16
  PoolOptions o;
  o.backend = Backend::kCuda;
  o.strategy = Strategy::kReplay;
  o.num_slots = 1;
  o.max_rows = 65535;
  o.max_window = 1024;
  try {
    StatePool pool(m, o);
    ADD_FAILURE() << "a pool with a 1.1 TB conv-output scratch was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kResourceExhausted) << e.what();
    EXPECT_NE(std::string(e.what()).find("backend scratch"), std::string::npos) << e.what();
  }
  // The device is left usable: a small pool is built after it.
  o.max_rows = 8;
  o.max_window = 4;
  StatePool small(m, o);
  EXPECT_EQ(small.free_slots(), 1);
}

}  // namespace
}  // namespace specstate::test
