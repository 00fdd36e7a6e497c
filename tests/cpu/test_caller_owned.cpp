// Caller-owned pools (DESIGN.md section 4) on the CPU oracle: a pool over the caller's committed-
// state tensors (one [L, slots, ...] tensor, or per-layer regions at irregular offsets, padded
// slot strides) is bit-identical to an owning pool, never writes outside live slots' states, and
// rejects views it cannot adopt, naming them, before anything is allocated.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/pool_rounds.h"
#include "common/slot_cases.h"

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
                                true, CallerLayout::kOneTensor},
                      OwnedCase{"kda_chain_snapshot_one_tensor", "kda_small_f32",
                                Strategy::kSnapshot, false, CallerLayout::kOneTensor},
                      OwnedCase{"kda_tree_replay_per_layer", "kda_small_bf16", Strategy::kReplay,
                                true, CallerLayout::kPerLayer},
                      // vLLM's element order: conv [W-1][conv_dim], delta-rule state [HV][K][V].
                      OwnedCase{"gdn_tree_replay_vllm", "small_bf16", Strategy::kReplay, true,
                                CallerLayout::kVllm},
                      OwnedCase{"gdn_chain_snapshot_vllm", "small_f32", Strategy::kSnapshot, false,
                                CallerLayout::kVllm},
                      OwnedCase{"m2_chain_replay_vllm", "m2_small_bf16", Strategy::kReplay, false,
                                CallerLayout::kVllm},
                      OwnedCase{"kda_tree_snapshot_vllm", "kda_small_bf16", Strategy::kSnapshot,
                                true, CallerLayout::kVllm},
                      OwnedCase{"kda_chain_replay_vllm", "kda_lb_f32", Strategy::kReplay, false,
                                CallerLayout::kVllm}),
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
    EXPECT_NE(std::string(e.what()).find("overlaps committed.ssm[1], slot 0"), std::string::npos)
        << e.what();
  }
  // And so are inputs (each layer's span is checked where a view falls inside the views' range).
  GdnInputs bad_in = in.view();
  bad_in.mixed_qkv.data = cm.views.conv[1].data;
  expect_rejected([&] { pool.prefill(0, h, w.view(), bad_in, out.view()); },
                  Status::kInvalidArgument,
                  {"inputs.mixed_qkv", "overlaps committed.conv[1], slot 0"});
  pool.prefill(0, h, w.view(), in.view(), out.view());  // the caller's own buffers still pass
}

// Views that interleave with memory that is no slot's state (vLLM's hybrid pages with spare
// bytes: [conv | ssm | spare] a page): a call's buffer in the spare bytes is the caller's own and
// passes; one in a slot's state is refused naming the view and the slot that holds it. The
// check compared each layer's whole span (slot 0 to the last), so the spare bytes were refused
// and a buffer inside slot 0's SSM state was reported as in the conv state.
TEST(CallerOwnedBadInput, BuffersBetweenInterleavedSlotsAreTheCallersOwn) {
  const GdnConfig g = gdn_preset("small_f32");
  const ModelConfig model = ModelConfig::gated_delta_net(1, g);
  PoolOptions o;
  o.num_slots = 3;
  o.max_rows = 2;
  o.max_window = 4;
  const int64_t conv = model.conv_state_elems(), ssm = model.ssm_state_elems();
  const int64_t spare = 4096;  // floats a page past both states
  const int64_t page = conv + ssm + spare;
  std::vector<float> pages(static_cast<std::size_t>(o.num_slots * page), 0.0f);
  CommittedStateViews views;
  views.conv.push_back(TensorView::strided(pages.data(), DType::kF32,
                                           {o.num_slots, g.conv_dim(), g.conv_width - 1},
                                           {page, g.conv_width - 1, 1}));
  views.ssm.push_back(TensorView::strided(
      pages.data() + conv, DType::kF32, {o.num_slots, g.num_v_heads, g.head_v_dim, g.head_k_dim},
      {page, int64_t{g.head_v_dim} * g.head_k_dim, g.head_k_dim, 1}));
  StatePool pool(model, o, views);
  std::mt19937_64 rng(5);
  const LayerWeights w = random_weights(g, rng);
  const SlotHandle h = pool.acquire();
  const TokenInputs in = random_inputs(g, 1, rng);
  TokenOutputs out = make_outputs(g, 1);
  // The input in page 0's spare bytes (its first row is never a state's byte).
  const int64_t need = int64_t{g.conv_dim()};
  ASSERT_LE(need + 2 * g.num_v_heads, spare);
  std::copy(static_cast<const float*>(in.view().mixed_qkv.data),
            static_cast<const float*>(in.view().mixed_qkv.data) + need, pages.data() + conv + ssm);
  GdnInputs spare_in = in.view();
  spare_in.mixed_qkv.data = pages.data() + conv + ssm;
  EXPECT_NO_THROW(pool.prefill(0, h, w.view(), spare_in, out.view()));
  // An output inside slot 0's SSM state: named as that view and slot.
  GdnOutputs bad = out.view();
  bad.core_out.data = pages.data() + conv + 64;
  expect_rejected([&] { pool.prefill(0, h, w.view(), in.view(), bad); }, Status::kInvalidArgument,
                  {"outputs.core_out", "committed.ssm[0], slot 0"});
  // In slot 2's conv window.
  bad = out.view();
  bad.core_out.data = pages.data() + 2 * page;
  expect_rejected([&] { pool.prefill(0, h, w.view(), in.view(), bad); }, Status::kInvalidArgument,
                  {"outputs.core_out", "committed.conv[0], slot 2"});
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

// The destructor of a caller-owned replay pool materializes its live slots into the caller's
// memory (release()'s rule for one slot): after three rounds of 2 accepted tokens at T = 4
// (one-row rounds fold every round, as R = 2T would: the last round's steps are still pending),
// a new pool over the same memory adopts the slot and holds what an owning snapshot pool holds.
// Without it the memory keeps the last checkpoint, the state after the second round.
TEST(CallerOwnedEnd, TheDestructorLeavesTheCommittedStateForTheNextPool) {
  auto mem = host_memory();
  PoolRounds<GdnKind> m(gdn_preset("small_f32"), 2, 11);
  PoolOptions o = m.options(Strategy::kReplay, /*slots=*/3, /*rows=*/2, kRoundT);
  const CallerMemory cm = make_caller_memory(m.model(), o, CallerLayout::kOneTensor, *mem, 5);
  StatePool ref = m.pool(Strategy::kSnapshot, 3, 2, kRoundT);
  std::optional<StatePool> pool(std::in_place, m.model(), o, cm.views);
  const SlotHandle a = ref.acquire(), b = pool->acquire();
  for (int r = 0; r < 3; ++r) {
    const auto in = m.inputs(kRoundT);
    m.round(ref, round_batch(false, {a}), in, {2});
    m.round(*pool, round_batch(false, {b}), in, {2});
  }
  const int slot = pool->slot_index(b);
  pool.reset();
  o.strategy = Strategy::kSnapshot;  // reads the memory as it is
  StatePool next(m.model(), o, cm.views);
  const SlotHandle c = next.adopt(slot);
  const std::vector<uint8_t> want = exported(ref, a);
  expect_nonzero(want, "the committed state");
  EXPECT_EQ(exported(next, c), want);
}

// discard() ends a caller-owned pool without writing into the caller's memory (the Python
// bindings call it when a torch tensor of the committed state has moved: the destructor's
// materialize wrote freed memory). Under replay the committed rounds' steps are deferred: the
// destructor stores them, discard() leaves the memory as the pool last wrote it; a pool over the
// memory builds afterwards (the claim is released).
TEST(CallerOwnedEnd, DiscardLeavesTheCallersMemoryAsThePoolLastWroteIt) {
  auto mem = host_memory();
  PoolRounds<GdnKind> m(gdn_preset("small_f32"), 2, 12);
  PoolOptions o = m.options(Strategy::kReplay, /*slots=*/3, /*rows=*/2, kRoundT);
  const CallerMemory cm = make_caller_memory(m.model(), o, CallerLayout::kOneTensor, *mem, 6);
  const auto bytes = [&] {
    const auto* ssm = static_cast<const uint8_t*>(cm.ssm_buffer.data);
    return std::vector<uint8_t>(ssm, ssm + cm.ssm_buffer.shape[0]);
  };
  for (const bool discard : {true, false}) {
    std::optional<StatePool> pool(std::in_place, m.model(), o, cm.views);
    const SlotHandle b = pool->acquire();
    for (int r = 0; r < 3; ++r) m.round(*pool, round_batch(false, {b}), m.inputs(kRoundT), {2});
    const std::vector<uint8_t> before = bytes();
    if (discard) {
      pool->discard();
      EXPECT_EQ(bytes(), before) << "discard() wrote the caller's memory";
      EXPECT_THROW(pool->acquire(), Error);  // a moved-from pool
    } else {
      pool.reset();  // the same rounds' deferred steps, stored by the destructor
      expect_nonzero(bytes(), "the materialized state");
      EXPECT_NE(bytes(), before) << "the rounds left no deferred steps to lose";
    }
  }
  StatePool next(m.model(), o, cm.views);  // the memory is free for another pool
  next.discard();
  next.discard();  // a second discard does nothing
}

// Two live pools over the same memory handed out the same bytes as their slots: the second's
// acquire() zeroed the first's live request, silently (a review's repro, from Python). A pool over
// memory another live pool's committed state holds (the same tensors, or that pool's own state
// views) is refused, naming the views and the pool, and the first pool is untouched; once it is
// gone, a pool over the memory builds.
TEST(CallerOwnedEnd, ASecondLivePoolOverTheSameMemoryIsRefused) {
  auto mem = host_memory();
  PoolRounds<GdnKind> m(gdn_preset("small_f32"), 2, 13);
  const PoolOptions o = m.options(Strategy::kReplay, /*slots=*/3, /*rows=*/2, kRoundT);
  const CallerMemory cm = make_caller_memory(m.model(), o, CallerLayout::kOneTensor, *mem, 5);
  std::optional<StatePool> first(std::in_place, m.model(), o, cm.views);
  const SlotHandle a = first->acquire();
  m.round(*first, round_batch(false, {a}), m.inputs(kRoundT), {2});
  const std::vector<uint8_t> before = exported(*first, a);
  expect_nonzero(before, "the first pool's state");
  const auto refused = [&](const CommittedStateViews& views, const char* what) {
    try {
      StatePool second(m.model(), o, views);
      ADD_FAILURE() << what << ": a second pool over live memory was built";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << what << ": " << e.what();
      const std::string msg = e.what();
      EXPECT_NE(msg.find("committed.conv[0] shares bytes with the committed conv[0] of pool"),
                std::string::npos)
          << what << ": " << msg;
      EXPECT_NE(msg.find("which is alive"), std::string::npos) << msg;
    }
  };
  refused(cm.views, "the same views");
  StatePool owning = m.pool(Strategy::kSnapshot, 3, 2, kRoundT);
  CommittedStateViews theirs;
  for (int l = 0; l < m.model().num_layers; ++l) {
    theirs.conv.push_back(owning.conv_state(l));
    theirs.ssm.push_back(owning.ssm_state(l));
  }
  refused(theirs, "another pool's own state views");
  {  // one slot: still named as committed state (a one-row entry was named like a buffer)
    StatePool one = m.pool(Strategy::kSnapshot, 1, 1, kRoundT);
    CommittedStateViews views;
    for (int l = 0; l < m.model().num_layers; ++l) {
      views.conv.push_back(one.conv_state(l));
      views.ssm.push_back(one.ssm_state(l));
    }
    PoolOptions o1 = o;
    o1.num_slots = 1;
    o1.max_rows = 1;
    try {
      StatePool second(m.model(), o1, views);
      ADD_FAILURE() << "a pool over a one-slot pool's views was built";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shares bytes with the committed conv[0] of pool"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(exported(*first, a), before);
  EXPECT_TRUE(first->is_live(a));
  const int slot = first->slot_index(a);
  first.reset();
  StatePool next(m.model(), o, cm.views);  // the memory is free again
  const SlotHandle b = next.adopt(slot);
  EXPECT_EQ(exported(next, b), before);
}

// Building a caller-owned pool compared every view with every earlier one, and every view with
// every live pool's: 64,000 layers took 28 s (owning: 0.02 s). Both are one sweep by address now.
// 40,000 layers of a tiny config, each layer's conv and SSM views side by side in one buffer: a
// pool, a second pool over other memory while the first lives, and one over the first's memory
// (refused), each within a few times an owning pool's build where the pairwise checks took about
// 11 s apiece.
TEST(CallerOwnedManyLayers, BuildingAPoolIsNotQuadraticInTheLayers) {
  const int L = 40000;
  GdnConfig g;
  g.num_k_heads = g.num_v_heads = 1;
  g.head_k_dim = g.head_v_dim = 2;
  g.conv_width = 2;
  g.act_dtype = g.conv_state_dtype = g.ssm_state_dtype = DType::kF32;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions o;
  o.num_slots = 1;
  o.max_rows = 1;
  o.max_window = 1;
  const int64_t conv_elems = model.conv_dim() * (model.conv_width() - 1), ssm_elems = 4;
  const auto views_over = [&](std::vector<float>& mem) {
    CommittedStateViews v;
    for (int l = 0; l < L; ++l) {
      float* base = mem.data() + l * (conv_elems + ssm_elems);
      v.conv.push_back(
          TensorView::contiguous(base, DType::kF32, {1, model.conv_dim(), model.conv_width() - 1}));
      v.ssm.push_back(TensorView::contiguous(base + conv_elems, DType::kF32, {1, 1, 2, 2}));
    }
    return v;
  };
  std::vector<float> mem_a(static_cast<std::size_t>(L * (conv_elems + ssm_elems)));
  std::vector<float> mem_b(mem_a.size());
  const auto seconds_of = [](const auto& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The bound scales with an owning pool of the same layers (linear: 0.02 s in a Release build;
  // slower under sanitizers or on a busy machine, as the pools below are): the quadratic checks
  // were about 500 times that.
  const double t_own = seconds_of([&] { StatePool own(model, o); });
  const double bound = 30.0 * t_own + 1.0;
  std::optional<StatePool> a, b;
  const double t_a = seconds_of([&] { a.emplace(model, o, views_over(mem_a)); });
  const double t_b = seconds_of([&] { b.emplace(model, o, views_over(mem_b)); });
  EXPECT_LT(t_a, bound) << "an owning pool took " << t_own << " s";
  EXPECT_LT(t_b, bound) << "an owning pool took " << t_own << " s";
  const double t_refused = seconds_of([&] {
    try {
      StatePool again(model, o, views_over(mem_a));
      ADD_FAILURE() << "a second pool over live memory was built";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("shares bytes with the committed"), std::string::npos)
          << e.what();
    }
  });
  EXPECT_LT(t_refused, bound) << "an owning pool took " << t_own << " s";
  // Two views of one pool that overlap are still found, wherever they sit among the others.
  CommittedStateViews bad = views_over(mem_a);
  bad.ssm[L - 1] = TensorView::contiguous(mem_a.data() + 7 * (conv_elems + ssm_elems), DType::kF32,
                                          {1, 1, 2, 2});
  a.reset();
  b.reset();
  try {
    StatePool c(model, o, bad);
    ADD_FAILURE() << "overlapping views accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("committed.ssm[39999] overlaps committed.conv[7]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace specstate::test

namespace specstate::test {
namespace {

// Peak resident memory of this process, in bytes (Linux: ru_maxrss is in KiB).
int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t{u.ru_maxrss} * 1024;
}

// A caller-owned pool may describe any number of slots (an engine's whole cache): nothing the
// pool keeps on the host grows with num_slots (the open round's rows are looked up among its
// rows; repeated rows are found in O(rows)). Here the views claim 2^28 slots of a reserved (not
// backed) address range, 4 of them real: two requests verified and committed, a slot op naming a
// row of the open round, a mid-round release, a repeated row; the pool's peak memory stays far
// below one int per slot (1 GiB), which is what it allocated before.
TEST(CallerOwnedHugeSlotCount, NothingOnTheHostGrowsWithNumSlots) {
  const int layers = 2;
  PoolRounds<GdnKind> host(gdn_preset("small_f32"), layers, 77);
  const ModelConfig model = host.model();
  PoolOptions o = host.options(Strategy::kSnapshot, 1 << 28, 2, 2);
  // One page per slot holding every layer's conv and SSM state (vLLM's interleaved pages).
  const int64_t conv_elems = model.conv_state_elems(), ssm_elems = model.ssm_state_elems();
  const int64_t page = layers * (conv_elems + ssm_elems);  // floats
  const std::size_t reserved = static_cast<std::size_t>(o.num_slots) * page * sizeof(float);
  void* va = mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (va == MAP_FAILED) GTEST_SKIP() << "cannot reserve " << reserved << " bytes of address space";
  struct Unmap {
    void* p;
    std::size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{va, reserved};
  const int64_t real_slots = 4;
  const std::size_t real = (real_slots * page * sizeof(float) + 4095) / 4096 * 4096;
  ASSERT_EQ(mprotect(va, real, PROT_READ | PROT_WRITE), 0);
  float* pages = static_cast<float*>(va);
  const GdnConfig& g = model.gdn;
  CommittedStateViews views;
  for (int l = 0; l < layers; ++l) {
    float* base = pages + l * (conv_elems + ssm_elems);
    views.conv.push_back(TensorView::strided(base, DType::kF32,
                                             {o.num_slots, g.conv_dim(), g.conv_width - 1},
                                             {page, g.conv_width - 1, 1}));
    views.ssm.push_back(TensorView::strided(
        base + conv_elems, DType::kF32, {o.num_slots, g.num_v_heads, g.head_v_dim, g.head_k_dim},
        {page, int64_t{g.head_v_dim} * g.head_k_dim, g.head_k_dim, 1}));
  }
  const int64_t before = peak_rss_bytes();
  StatePool pool(model, o, views);
  const SlotHandle a = pool.acquire(), b = pool.acquire();
  ASSERT_LT(b.slot, real_slots);
  host.round(pool, VerifyBatch{{a, b}, 2, {}}, {2, 1});
  double norm = 0;
  for (int64_t i = 0; i < real_slots * page; ++i) norm += double{pages[i]} * pages[i];
  EXPECT_GT(norm, 0.0) << "the round wrote no committed state";
  // Rows of the open round: a slot op on one is refused naming its row; a released row becomes
  // padding.
  const auto in = host.inputs(4);
  auto out = host.outputs(4);
  pool.begin_verify(VerifyBatch{{a, b}, 2, {}});
  host.verify(pool, in, out, 0, layers);
  expect_rejected([&] { pool.reset(b); }, Status::kFailedPrecondition,
                  {"is row 1 of the open verify round"});
  pool.release(b);
  pool.commit(std::vector<int32_t>{1, 0});
  // Repeated rows are still found.
  const SlotHandle c = pool.acquire();
  expect_rejected(
      [&] {
        pool.begin_verify(VerifyBatch{{c, c}, 2, {}});
      },
      Status::kInvalidArgument, {"repeats the slot of rows[0]"});
  EXPECT_LT(peak_rss_bytes() - before, int64_t{256} << 20)
      << "the pool's host memory grew with num_slots = " << o.num_slots;
}

}  // namespace
}  // namespace specstate::test
