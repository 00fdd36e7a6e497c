// Slot lifetimes: acquire zeroes, release frees, handles carry generations and pool ids.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "common/expect.h"
#include "common/gdn_data.h"

namespace specstate::test {
namespace {

StatePool make_pool(int slots, int layers = 2) {
  PoolOptions options;
  options.num_slots = slots;
  options.max_rows = slots;
  options.max_window = 4;
  return StatePool(ModelConfig::gated_delta_net(layers, small_config()), options);
}

TEST(PoolSlots, AcquireHandsOutLowestFreeSlot) {
  StatePool pool = make_pool(3);
  SlotHandle a = pool.acquire(), b = pool.acquire(), c = pool.acquire();
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(b.slot, 1);
  EXPECT_EQ(c.slot, 2);
  EXPECT_EQ(pool.free_slots(), 0);
  pool.release(b);
  EXPECT_EQ(pool.free_slots(), 1);
  SlotHandle d = pool.acquire();
  EXPECT_EQ(d.slot, 1);
  EXPECT_NE(d.generation, b.generation);
  EXPECT_TRUE(pool.is_live(d));
  EXPECT_FALSE(pool.is_live(b));
}

// A moved-from pool (an engine keeping pools in a vector or an optional moves them): its calls
// threw nothing and dereferenced a null state (a segmentation fault, from the noexcept getters
// too). Now they throw kFailedPrecondition naming the move, the getters return empty values, and
// the pool can be assigned to again.
TEST(PoolSlots, AMovedFromPoolRefusesEveryCallAndCanBeAssignedAgain) {
  StatePool pool = make_pool(3);
  const SlotHandle h = pool.acquire();
  StatePool moved(std::move(pool));
  EXPECT_TRUE(moved.is_live(h));
  EXPECT_EQ(moved.free_slots(), 2);
  // (The moved-from object is used on purpose here.)
  EXPECT_FALSE(pool.is_live(h));  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(pool.free_slots(), 0);
  EXPECT_FALSE(pool.round_open());
  EXPECT_EQ(pool.committed_bytes(), 0);
  EXPECT_EQ(pool.workspace_bytes(), 0);
  EXPECT_EQ(pool.slot_state_bytes(), 0);
  EXPECT_TRUE(pool.current_batch().rows.empty());
  EXPECT_EQ(pool.options().num_slots, PoolOptions{}.num_slots);
  const std::vector<std::function<void()>> calls = {
      [&] { pool.acquire(); },
      [&] { pool.release(h); },
      [&] { pool.slot_index(h); },
      [&] { pool.conv_state(0); },
      [&] { pool.ssm_state(0, h); },
      [&] { pool.materialize({}); },
      [&] {
        VerifyBatch b;
        b.rows = {h};
        b.window = 2;
        pool.begin_verify(b);
      },
      [&] { pool.commit(std::vector<int32_t>{1}); },
      [&] { pool.abort_round(); },
      [&] { pool.fork(h); },
  };
  for (const auto& call : calls) {
    expect_rejected(call, Status::kFailedPrecondition, {"moved from"});
  }
  pool = make_pool(2);  // assigned again: a working pool
  EXPECT_EQ(pool.free_slots(), 2);
  EXPECT_TRUE(pool.is_live(pool.acquire()));
  EXPECT_TRUE(moved.is_live(h));  // the other pool is untouched
}

TEST(PoolSlots, AcquireZeroesTheSlotInEveryLayer) {
  std::mt19937_64 rng(11);
  StatePool pool = make_pool(2);
  const GdnConfig& g = pool.config().gdn;
  SlotHandle h = pool.acquire();
  LayerWeights w = random_weights(g, rng);
  for (int l = 0; l < 2; ++l) {
    TokenInputs in = random_inputs(g, 3, rng);
    TokenOutputs out = make_outputs(g, 3);
    pool.prefill(l, h, w.view(), in.view(), out.view());
  }
  std::vector<uint8_t> dirty = slot_bytes(pool, h.slot);
  double norm = 0;
  for (uint8_t byte : dirty) norm += byte;
  ASSERT_GT(norm, 0) << "prefill left the slot all zero";
  pool.release(h);
  SlotHandle again = pool.acquire();
  ASSERT_EQ(again.slot, h.slot);
  for (uint8_t byte : slot_bytes(pool, again.slot)) ASSERT_EQ(byte, 0);
}

TEST(PoolSlots, ExhaustedPoolThrowsResourceExhausted) {
  StatePool pool = make_pool(2);
  pool.acquire();
  pool.acquire();
  try {
    pool.acquire();
    FAIL() << "acquire on a full pool did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("num_slots = 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.free_slots(), 0);
}

TEST(PoolSlots, DoubleReleaseIsRejected) {
  StatePool pool = make_pool(2);
  SlotHandle h = pool.acquire();
  pool.release(h);
  try {
    pool.release(h);
    FAIL() << "double release did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("handle"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.free_slots(), 2);
}

TEST(PoolSlots, StaleHandleIsRejectedAfterReuse) {
  StatePool pool = make_pool(1);
  SlotHandle old = pool.acquire();
  pool.release(old);
  SlotHandle fresh = pool.acquire();
  ASSERT_EQ(fresh.slot, old.slot);
  try {
    pool.release(old);
    FAIL() << "stale release did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("stale"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(pool.is_live(fresh));
  EXPECT_THROW(pool.slot_index(old), Error);
  EXPECT_EQ(pool.slot_index(fresh), 0);
}

TEST(PoolSlots, ForeignHandleIsRejected) {
  StatePool a = make_pool(2), b = make_pool(2);
  SlotHandle from_a = a.acquire();
  b.acquire();
  try {
    b.release(from_a);
    FAIL() << "foreign handle accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("another pool"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(b.is_live(from_a));
  EXPECT_TRUE(a.is_live(from_a));
}

TEST(PoolSlots, MemoryAccountingMatchesTheLayout) {
  GdnConfig g;  // Qwen3-Next-80B at TP1: HV=32, H=16, K=V=128, W=4, bf16 conv, f32 SSM
  const ModelConfig model = ModelConfig::gated_delta_net(36, g);
  EXPECT_EQ(model.slot_bytes(), 77266944);  // 73.7 MiB per request
  PoolOptions options;
  options.num_slots = 1;
  options.max_rows = 1;
  options.max_window = 2;
  StatePool pool(model, options);
  EXPECT_EQ(pool.committed_bytes(), 77266944);
  EXPECT_EQ(pool.scratch_bytes(), 2 * 77266944);
}

TEST(PoolSlots, InvalidConfigAndOptionsNameTheField) {
  PoolOptions options;
  GdnConfig g = small_config();
  g.num_v_heads = 3;  // not a multiple of H = 2
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, g), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("num_v_heads = 3"), std::string::npos) << e.what();
  }
  options.num_slots = 0;
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, small_config()), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_slots = 0"), std::string::npos) << e.what();
  }
  options.num_slots = 1;
  options.backend = Backend::kCuda;
#ifdef SPECSTATE_TEST_HAVE_CUDA
  // Built with the CUDA backend (tests/CMakeLists.txt defines this then): a CUDA pool, or
  // kNotSupported naming the missing device where none is usable, never a CPU pool in disguise.
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, small_config()), options);
    EXPECT_EQ(pool.options().backend, Backend::kCuda);
    EXPECT_EQ(pool.conv_state(0).device, Device::kCuda);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device is usable"), std::string::npos)
        << e.what();
  }
#else
  // A CPU-only build must refuse Backend::kCuda, naming it, instead of handing back a CPU pool.
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, small_config()), options);
    FAIL() << "a build without the CUDA backend built a pool for Backend::kCuda";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA backend"), std::string::npos) << e.what();
  }
#endif
}

TEST(PoolSlots, Bf16RoundingIsNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(bf16_from_float(1.00390625f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
  EXPECT_EQ(bf16_from_float(1.01171875f), 0x3f82);
  EXPECT_EQ(float_from_bf16(bf16_from_float(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(float_from_bf16(bf16_from_float(std::nanf("")))));
}

}  // namespace
}  // namespace specstate::test
