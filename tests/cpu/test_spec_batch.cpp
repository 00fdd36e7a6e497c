// spec::VerifyBatchBuilder: rows -> slots, window size, per-row trees with filler nodes, token
// offsets, padding to CUDA-graph buckets; and the plan driving a real StatePool round.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>

#include "common/gdn_data.h"
#include "specstate/spec/verify_batch.h"

namespace specstate::spec {
namespace {

SlotHandle handle(int slot) { return SlotHandle{slot, 1, 42}; }

TEST(SpecBatch, PowerOfTwoBuckets) {
  EXPECT_EQ(VerifyBatchBuilder::power_of_two_buckets(1), (std::vector<int>{1}));
  EXPECT_EQ(VerifyBatchBuilder::power_of_two_buckets(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(VerifyBatchBuilder::power_of_two_buckets(6), (std::vector<int>{1, 2, 4, 6}));
  EXPECT_THROW(VerifyBatchBuilder::power_of_two_buckets(0), Error);
  EXPECT_THROW(VerifyBatchBuilder({2, 2}), Error);
  EXPECT_THROW(VerifyBatchBuilder({0, 1}), Error);
}

TEST(SpecBatch, ChainsPadToTheNextBucket) {
  VerifyBatchBuilder builder({1, 2, 4, 8});
  for (int s = 0; s < 3; ++s) EXPECT_EQ(builder.add(handle(s * 2), Window::chain(4)), s);
  const BatchPlan plan = builder.build();
  EXPECT_EQ(plan.rows(), 4);
  EXPECT_EQ(plan.live_rows, 3);
  EXPECT_EQ(plan.window(), 4);
  EXPECT_FALSE(plan.is_tree());
  EXPECT_TRUE(plan.batch.parents.empty());
  EXPECT_EQ(plan.batch.rows[1], handle(2));
  EXPECT_TRUE(plan.batch.rows[3].is_padding());
  EXPECT_EQ(plan.token_offsets, (std::vector<int32_t>{0, 4, 8, 12, 16}));
  EXPECT_EQ(plan.num_tokens(), 16);
  EXPECT_EQ(plan.commit_lengths({4, 0, 2}), (std::vector<int32_t>{4, 0, 2, 0}));
  EXPECT_THROW(plan.commit_lengths({5, 0, 2}), Error);
  EXPECT_THROW(plan.commit_lengths({1, 1}), Error);
}

TEST(SpecBatch, VariablePackingHasNoFiller) {
  VerifyBatchBuilder builder({1, 2, 4}, Packing::kVariable);
  builder.add(handle(0), Window::chain(4));
  builder.add(handle(2), Window::from_parents({-1, 0, 0}));
  builder.add(handle(4), Window::chain(1));
  const BatchPlan plan = builder.build();
  EXPECT_EQ(plan.rows(), 4);
  EXPECT_EQ(plan.window(), 4);
  EXPECT_EQ(plan.batch.lengths, (std::vector<int32_t>{4, 3, 1, 0}));
  EXPECT_EQ(plan.token_offsets, (std::vector<int32_t>{0, 4, 7, 8, 8}));
  EXPECT_EQ(plan.num_tokens(), 8);
  // Trees packed at the same offsets (the chains' parents too).
  EXPECT_EQ(plan.batch.parents, (std::vector<int32_t>{-1, 0, 1, 2, -1, 0, 0, -1}));
  // Greedy acceptance reads each row at its offset.
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 1, 2, 3};
  const std::vector<int32_t> target = {6, 7, 0, 0, 2, 0, 0, 4};
  const std::vector<Acceptance> acc = plan.accept_greedy(tokens, target);
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_EQ(acc[0].path.size(), 3u);          // 5 -> 6 -> 7 accepted, 8 rejected
  EXPECT_EQ(plan.commit_values(acc)[3], -1);  // the padding row keeps
}

TEST(SpecBatch, NoBucketsNoPadding) {
  VerifyBatchBuilder builder;
  builder.add(handle(0), Window::chain(2));
  builder.add(handle(1), Window::chain(2));
  builder.add(handle(5), Window::chain(2));
  EXPECT_EQ(builder.build().rows(), 3);
}

TEST(SpecBatch, RejectsPaddingDuplicatesOverflowAndEmpty) {
  VerifyBatchBuilder builder({1, 2});
  EXPECT_THROW(builder.build(), Error);
  EXPECT_THROW(builder.add(SlotHandle::padding(), Window::chain(2)), Error);
  builder.add(handle(3), Window::chain(2));
  try {
    builder.add(SlotHandle{3, 9, 42}, Window::chain(2));
    ADD_FAILURE() << "duplicate slot accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already row 0"), std::string::npos) << e.what();
  }
  builder.add(handle(4), Window::chain(2));
  try {
    builder.add(handle(5), Window::chain(2));
    ADD_FAILURE() << "overflow accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kOutOfRange);
  }
  EXPECT_EQ(builder.size(), 2);  // the rejected adds changed nothing
  builder.clear();
  EXPECT_EQ(builder.size(), 0);
  EXPECT_EQ(builder.add(handle(3), Window::chain(2)), 0);  // clear() forgot the slots too
  EXPECT_EQ(builder.add(SlotHandle{4, 1, 43}, Window::chain(2)), 1);  // another pool's slot 4
  EXPECT_THROW(builder.add(handle(3), Window::chain(1)), Error);
}

// A plan's fields are public: a plan changed after build() so that they disagree is refused by
// each method, naming the field, instead of indexing past its vectors (from Python, where the
// fields were writable, a changed token_offsets crashed accept_greedy and a changed live_rows
// corrupted the heap in commit_values).
TEST(SpecBatch, PlanFieldsThatDisagreeAreRefused) {
  VerifyBatchBuilder builder({}, Packing::kVariable);
  builder.add(handle(1), Window::chain(2));
  builder.add(handle(2), Window::from_parents({-1, 0, 0}));
  const BatchPlan good = builder.build();
  const std::vector<int32_t> tokens(5, 1);
  ASSERT_EQ(good.accept_greedy(tokens, tokens).size(), 2u);
  const auto refused = [&](const BatchPlan& plan, const char* field) {
    for (int m = 0; m < 3; ++m) {
      const char* fn = m == 0 ? "accept_greedy" : m == 1 ? "commit_values" : "commit_lengths";
      try {
        if (m == 0) plan.accept_greedy(tokens, tokens);
        if (m == 1) plan.commit_values({Acceptance{}, Acceptance{}});
        if (m == 2) plan.commit_lengths({1, 1});
        ADD_FAILURE() << fn << " took a plan whose " << field << " disagrees";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::kFailedPrecondition) << e.what();
        EXPECT_NE(std::string(e.what()).find(fn), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      }
    }
  };
  BatchPlan p = good;
  p.live_rows = 50;
  refused(p, "live_rows = 50");
  p = good;
  p.live_rows = -1;
  refused(p, "live_rows = -1");
  p = good;
  p.token_offsets = {0, 1000000000, 5};
  refused(p, "row 1");
  p = good;
  p.token_offsets = {0, 1, 5};  // row 0's window of 2 in one token
  refused(p, "row 0");
  p = good;
  p.token_offsets.pop_back();
  refused(p, "token_offsets has 2 entries");
  p = good;
  p.windows.pop_back();
  refused(p, "windows has 1 entries");
  p = good;
  p.windows[0] = Window::chain(4);  // longer than T = 3
  refused(p, "row 0");
}

// Batch sizes are bounded (kMaxBatchRows rows, kMaxBatchTokens tokens): power_of_two_buckets(2^31
// - 1) overflowed its loop and grew until std::bad_alloc, a bucket of 2^31 - 1 rows made build()
// allocate 16 GB of handles, and 65536 rows x 65536 tokens overflowed the int token offsets
// (num_tokens() == 0); a packing that is none was taken as kPadded.
// add() grows its arrays geometrically: reserve(size + 1) reallocated and moved every row on
// each add (160,000 adds took 115 s).
TEST(SpecBatch, ManyAddsTakeLinearTime) {
  VerifyBatchBuilder b({}, Packing::kVariable);
  const Window w = Window::chain(2);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 200000; ++r) b.add(handle(r), w);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(b.size(), 200000);
}

TEST(SpecBatch, SizesAreBounded) {
  const auto error_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto has = [](const std::string& s, const char* needle) {
    return s.find(needle) != std::string::npos;
  };
  EXPECT_TRUE(has(error_of([] { VerifyBatchBuilder::power_of_two_buckets(2147483647); }),
                  "max_rows = 2147483647 must be in [1, 1048576]"));
  EXPECT_EQ(VerifyBatchBuilder::power_of_two_buckets(kMaxBatchRows).back(), kMaxBatchRows);
  EXPECT_TRUE(has(error_of([] {
                    VerifyBatchBuilder({1, 2147483647});
                  }),
                  "buckets[1] = 2147483647"));
  EXPECT_TRUE(has(error_of([] { VerifyBatchBuilder({}, static_cast<Packing>(42)); }),
                  "packing = 42 is none"));
  VerifyBatchBuilder wide({65536});
  wide.add(handle(0), Window::chain(kMaxWindowNodes));
  EXPECT_TRUE(has(error_of([&] { wide.build(); }),
                  "65536 rows x a window of 65536 tokens = 4294967296, more than kMaxBatchTokens"));
  VerifyBatchBuilder fits({1024});
  fits.add(handle(0), Window::chain(kMaxWindowNodes));
  EXPECT_EQ(fits.build().num_tokens(), int64_t{1024} * kMaxWindowNodes);  // exactly the bound
  // add() held every window until build() refused the total: 8192 rows of a 65536-node window
  // were 4 GB of windows. The 1025th row of such a window is refused at add(), nothing added.
  VerifyBatchBuilder growing;
  const Window widest = Window::chain(kMaxWindowNodes);
  for (int r = 0; r < 1024; ++r) growing.add(handle(r), widest);
  EXPECT_TRUE(has(error_of([&] { growing.add(handle(1024), widest); }),
                  "would make the batch 67174400 tokens (1025 rows), past kMaxBatchTokens"));
  EXPECT_EQ(growing.size(), 1024);
  EXPECT_EQ(growing.build().num_tokens(), kMaxBatchTokens);
  // Padded: rows x the largest window, so one wide row after many short ones counts them all.
  VerifyBatchBuilder late;
  for (int r = 0; r < 1024; ++r) late.add(handle(r), Window::chain(1));
  EXPECT_TRUE(has(error_of([&] { late.add(handle(1024), widest); }), "(1025 rows)"));
  // Variable packing too (build() refuses rows x the largest window past the bound whatever the
  // packing, and no pool runs such a round): add() accepted the 1025th row, after which every
  // build() threw.
  VerifyBatchBuilder variable({}, Packing::kVariable);
  for (int r = 0; r < 1024; ++r) variable.add(handle(r), Window::chain(1));
  EXPECT_TRUE(has(error_of([&] { variable.add(handle(1024), widest); }),
                  "would make the batch 67174400 tokens (1025 rows)"));
  EXPECT_EQ(variable.size(), 1024);
  EXPECT_EQ(variable.build().live_rows, 1024);
  growing.clear();
  growing.add(handle(0), widest);  // clear() forgets the windows' sizes
  EXPECT_EQ(growing.size(), 1);
}

TEST(SpecBatch, SharedTreeAndPerRowTrees) {
  const Window tree = Window::from_parents({-1, 0, 0, 1});
  VerifyBatchBuilder same({4});
  same.add(handle(0), tree);
  same.add(handle(1), tree);
  const BatchPlan shared = same.build();
  EXPECT_EQ(shared.rows(), 4);
  EXPECT_EQ(shared.batch.parents, tree.parents());  // [T], shared by every row

  VerifyBatchBuilder mixed({4});
  mixed.add(handle(0), tree);
  mixed.add(handle(1), Window::chain(2));
  mixed.add(handle(2), Window::from_parents({-1, 0, 0}));
  const BatchPlan plan = mixed.build();
  EXPECT_TRUE(plan.is_tree());
  EXPECT_EQ(plan.window(), 4);
  // [rows * T]: real parents, then filler nodes chained after them; padding rows are chains.
  EXPECT_EQ(plan.batch.parents, (std::vector<int32_t>{-1, 0, 0, 1,  //
                                                      -1, 0, 1, 2,  //
                                                      -1, 0, 0, 2,  //
                                                      -1, 0, 1, 2}));
  std::vector<Acceptance> acc(3);
  acc[0].path = {0, 1, 3};
  acc[1].path = {0, 1};
  acc[2].path = {0, 2};
  EXPECT_EQ(plan.commit_values(acc), (std::vector<int32_t>{3, 1, 2, -1}));
  acc[1].path = {0, 1, 2};  // node 2 of row 1 is filler: not a node of its chain(2)
  EXPECT_THROW(plan.commit_values(acc), Error);
  acc[1].path = {};
  EXPECT_EQ(plan.commit_values(acc)[1], -1);
  EXPECT_THROW(plan.commit_values({}), Error);
}

TEST(SpecBatch, AcceptGreedyUsesEachRowsOwnWindow) {
  VerifyBatchBuilder builder({2});
  builder.add(handle(0), Window::chain(3));
  builder.add(handle(1), Window::chain(2));
  const BatchPlan plan = builder.build();  // T = 3; row 1 has a filler token at index 2
  // Row 0: root 7, drafts 1, 2; target agrees with both. Row 1: root 7, draft 1; target agrees,
  // and the filler token 2 would match too, but is not part of the row's window.
  const std::vector<int32_t> tokens{7, 1, 2, 7, 1, 2}, target{1, 2, 5, 1, 2, 6};
  const auto acc = plan.accept_greedy(tokens, target);
  ASSERT_EQ(acc.size(), 2u);
  EXPECT_EQ(acc[0].accepted_length(), 3);
  EXPECT_EQ(acc[0].bonus_token, 5);
  EXPECT_EQ(acc[1].accepted_length(), 2);
  EXPECT_EQ(acc[1].bonus_token, 2);
  EXPECT_THROW(plan.accept_greedy({1, 2}, target), Error);
}

// A plan of rows with different windows (padded to T with filler tokens, padded to a bucket with
// padding rows) drives a real pool: the committed state of each row equals a plain prefill of
// its accepted path, bit for bit, so filler tokens and padding rows change nothing.
TEST(SpecBatch, PlanDrivesAPoolRoundBitExactly) {
  const uint64_t seed = 0xba7c4;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = test::small_config(DType::kF32, DType::kBF16, DType::kF32, true);
  const int layers = 2;
  const ModelConfig model = ModelConfig::gated_delta_net(layers, g);
  PoolOptions options;
  options.num_slots = 4;
  options.max_rows = 4;
  options.max_window = 5;
  StatePool pool(model, options), reference(model, options);
  std::vector<test::LayerWeights> weights;
  for (int l = 0; l < layers; ++l) weights.push_back(test::random_weights(g, rng));

  const std::vector<Window> windows{Window::chain(5), Window::chain(2),
                                    Window::from_parents({-1, 0, 0, 1, 2})};
  std::vector<SlotHandle> slots, ref_slots;
  VerifyBatchBuilder builder({1, 2, 4});
  for (std::size_t r = 0; r < windows.size(); ++r) {
    slots.push_back(pool.acquire());
    ref_slots.push_back(reference.acquire());
    // A short history first, identical in both pools.
    for (int l = 0; l < layers; ++l) {
      const test::TokenInputs history = test::random_inputs(g, 3, rng);
      test::TokenOutputs out = test::make_outputs(g, 3);
      pool.prefill(l, slots.back(), weights[l].view(), history.view(), out.view());
      reference.prefill(l, ref_slots.back(), weights[l].view(), history.view(), out.view());
    }
    builder.add(slots.back(), windows[r]);
  }
  const BatchPlan plan = builder.build();
  ASSERT_EQ(plan.rows(), 4);
  ASSERT_EQ(plan.window(), 5);
  ASSERT_TRUE(plan.is_tree());

  std::vector<test::TokenInputs> inputs;
  pool.begin_verify(plan.batch);
  for (int l = 0; l < layers; ++l) {
    inputs.push_back(test::random_inputs(g, plan.num_tokens(), rng));
    test::TokenOutputs out = test::make_outputs(g, plan.num_tokens());
    pool.verify(l, weights[l].view(), inputs.back().view(), out.view());
  }
  std::vector<Acceptance> accepted(3);
  accepted[0].path = {0, 1, 2};
  accepted[1].path = {0, 1};
  accepted[2].path = {0, 2, 4};
  pool.commit(plan.commit_values(accepted));

  for (std::size_t r = 0; r < windows.size(); ++r) {
    const auto& path = accepted[r].path;
    const int64_t n = static_cast<int64_t>(path.size());
    for (int l = 0; l < layers; ++l) {
      test::TokenInputs gathered;
      gathered.mixed_qkv = test::Buffer(g.act_dtype, {n, g.conv_dim()});
      gathered.a = test::Buffer(g.act_dtype, {n, g.num_v_heads});
      gathered.b = test::Buffer(g.act_dtype, {n, g.num_v_heads});
      for (int64_t j = 0; j < n; ++j) {
        const int64_t token = plan.token_offsets[r] + path[static_cast<std::size_t>(j)];
        for (int64_t c = 0; c < g.conv_dim(); ++c) {
          gathered.mixed_qkv.set(j * g.conv_dim() + c,
                                 inputs[l].mixed_qkv.get(token * g.conv_dim() + c));
        }
        for (int64_t h = 0; h < g.num_v_heads; ++h) {
          gathered.a.set(j * g.num_v_heads + h, inputs[l].a.get(token * g.num_v_heads + h));
          gathered.b.set(j * g.num_v_heads + h, inputs[l].b.get(token * g.num_v_heads + h));
        }
      }
      test::TokenOutputs out = test::make_outputs(g, n);
      reference.prefill(l, ref_slots[r], weights[l].view(), gathered.view(), out.view());
    }
    SCOPED_TRACE("row " + std::to_string(r) + " " + windows[r].describe());
    const auto got = test::slot_bytes(pool, pool.slot_index(slots[r]));
    const auto want = test::slot_bytes(reference, reference.slot_index(ref_slots[r]));
    EXPECT_TRUE(got == want);
  }
  EXPECT_GT(test::sum_squares(pool.ssm_state(0)), 0.0);
}

}  // namespace
}  // namespace specstate::spec
