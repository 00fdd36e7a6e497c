// Caller-owned pools (DESIGN.md section 4) on the CPU oracle: a pool over the caller's committed-
// state tensors (one [L, slots, ...] tensor, or per-layer regions at irregular offsets, padded
// slot strides) is bit-identical to an owning pool, never writes outside live slots' states, and
// rejects views it cannot adopt, naming them, before anything is allocated.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/pool_rounds.h"

namespace specstate::test {
namespace {

struct OwnedCase {
  const char* name;
  const char* preset;
  Strategy strategy;
  bool tree;
  CallerLayout layout;
};
void PrintTo(const OwnedCase& c, std::ostream* out) { *out << c.name; }

class CallerOwned : public ::testing::TestWithParam<OwnedCase> {};

TEST_P(CallerOwned, BitIdenticalToAnOwningPoolAndWritesOnlyLiveSlots) {
  const OwnedCase& c = GetParam();
  auto mem = host_memory();
  run_caller_owned(c.preset, c.strategy, c.tree, c.layout, *mem, 0xC0FFEE + c.tree);
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, CallerOwned,
    ::testing::Values(OwnedCase{"gdn_chain_snapshot_one_tensor", "small_f32", Strategy::kSnapshot,
                                false, CallerLayout::kOneTensor},
                      OwnedCase{"gdn_tree_replay_per_layer", "small_bf16", Strategy::kReplay, true,
                                CallerLayout::kPerLayer},
                      OwnedCase{"gdn_tree_snapshot_per_layer", "small_bf16_conv",
                                Strategy::kSnapshot, true, CallerLayout::kPerLayer},
                      OwnedCase{"gdn_chain_replay_one_tensor", "small_all_bf16", Strategy::kReplay,
                                false, CallerLayout::kOneTensor},
                      OwnedCase{"m2_chain_snapshot_per_layer", "m2_small_f32", Strategy::kSnapshot,
                                false, CallerLayout::kPerLayer},
                      OwnedCase{"m2_tree_replay_one_tensor", "m2_small_bf16", Strategy::kReplay,
                                true, CallerLayout::kOneTensor}),
    [](const ::testing::TestParamInfo<OwnedCase>& info) { return std::string(info.param.name); });

TEST(CallerOwnedBadInput, ViewsThePoolCannotAdoptAreRejectedNamingThem) {
  auto mem = host_memory();
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig model = ModelConfig::gated_delta_net(2, g);
  PoolOptions o;
  o.num_slots = 3;
  o.max_rows = 2;
  o.max_window = 2;
  const CallerMemory cm = make_caller_memory(model, o, CallerLayout::kOneTensor, *mem, 1);
  auto make = [&](CommittedStateViews v) { StatePool pool(model, o, v); };
  {
    CommittedStateViews v = cm.views;
    v.ssm.pop_back();
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed has 2 conv and 1 ssm views", "expected 2"});
  }
  {
    CommittedStateViews v = cm.views;
    v.conv[1].shape[0] = 2;
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed.conv[1]", "dim 0 = 2", "expected 3"});
  }
  {
    CommittedStateViews v = cm.views;
    v.ssm[0].dtype = DType::kBF16;
    expect_rejected([&] { make(v); }, Status::kInvalidArgument, {"committed.ssm[0]", "dtype"});
  }
  {
    CommittedStateViews v = cm.views;
    v.conv[0].stride[2] = 2;  // a slot's state not contiguous
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed.conv[0]", "stride 2", "contiguous"});
  }
  {
    CommittedStateViews v = cm.views;
    v.ssm[1].stride[0] = 1;  // slots overlap
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed.ssm[1]", "slot stride 1", "overlap"});
  }
  {
    CommittedStateViews v = cm.views;
    v.conv[1].stride[0] += 4;  // another slot stride than layer 0's
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed.conv[1]", "differs from layer 0"});
  }
  {
    CommittedStateViews v = cm.views;
    v.ssm[1] = v.ssm[0];  // two layers in the same memory
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed.ssm[1] overlaps committed.ssm[0]"});
  }
  {
    CommittedStateViews v = cm.views;
    v.conv[0].device = Device::kCuda;
    expect_rejected([&] { make(v); }, Status::kInvalidArgument,
                    {"committed.conv[0]", "lives on cuda"});
  }
  // Outputs overlapping the caller's committed state are rejected like the pool's own memory.
  StatePool pool(model, o, cm.views);
  std::mt19937_64 rng(3);
  const LayerWeights w = random_weights(g, rng);
  const SlotHandle h = pool.acquire();
  const TokenInputs in = random_inputs(g, 1, rng);
  TokenOutputs out = make_outputs(g, 1);
  GdnOutputs bad = out.view();
  bad.core_out.data = cm.views.ssm[1].data;
  try {
    pool.prefill(0, h, w.view(), in.view(), bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlaps the committed SSM state of layer 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(CallerOwnedAdopt, AdoptKeepsTheStateAcquireZeroesIt) {
  auto mem = host_memory();
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig model = ModelConfig::gated_delta_net(2, g);
  PoolOptions o;
  o.num_slots = 3;
  o.max_rows = 2;
  o.max_window = 2;
  const CallerMemory cm = make_caller_memory(model, o, CallerLayout::kPerLayer, *mem, 2);
  StatePool pool(model, o, cm.views);
  // The engine's own state in slot 2 (the sentinel bytes stand for it) is kept by adopt().
  std::vector<uint8_t> engine(
      static_cast<std::size_t>(pool.slot_state_bytes() - StatePool::kSlotStateHeaderBytes));
  {
    std::size_t at = 0;
    const auto& conv = mem->bytes(cm.conv_buffer);
    const auto& ssm = mem->bytes(cm.ssm_buffer);
    for (int l = 0; l < 2; ++l) {
      std::memcpy(engine.data() + at, conv.data() + cm.conv_offset[l * 3 + 2], cm.conv_state_bytes);
      at += cm.conv_state_bytes;
      std::memcpy(engine.data() + at, ssm.data() + cm.ssm_offset[l * 3 + 2], cm.ssm_state_bytes);
      at += cm.ssm_state_bytes;
    }
  }
  const SlotHandle adopted = pool.adopt(2);
  EXPECT_EQ(pool.slot_index(adopted), 2);
  EXPECT_EQ(exported(pool, adopted), engine);
  try {
    pool.adopt(2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kFailedPrecondition);
  }
  try {
    pool.adopt(3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("slot = 3 outside [0, 3)"), std::string::npos);
  }
  const SlotHandle fresh = pool.acquire();  // slot 0, zeroed
  for (uint8_t b : exported(pool, fresh)) ASSERT_EQ(b, 0);
}

}  // namespace
}  // namespace specstate::test
