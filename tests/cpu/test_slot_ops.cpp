// Slot operations (issue 10 section 3, docs/lifecycle.md) on the CPU oracle, for both layer kinds
// and both strategies, bit-exact: fork then diverge equals two independent runs; copy_slot
// replaces the destination and drops its pending steps; reset equals a fresh slot; export ->
// import round trips across strategies through buffers of every dtype and through safetensors
// files; the export layout is per layer conv then SSM; per-slot views; and every bad argument is
// rejected naming it, with nothing changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/expect.h"
#include "common/pool_rounds.h"
#include "common/slot_cases.h"
#include "specstate/safetensors.h"

namespace specstate::test {
namespace {

const std::vector<SlotCase>& cases() {
  static const std::vector<SlotCase> all = {
      {"gdn_f32_chain_snapshot", "small_f32", Strategy::kSnapshot, false},
      {"gdn_f32_tree_replay", "small_f32", Strategy::kReplay, true},
      {"gdn_bf16_tree_snapshot", "small_bf16", Strategy::kSnapshot, true},
      {"gdn_bf16_chain_replay", "small_bf16", Strategy::kReplay, false},
      {"m2_f32_tree_snapshot", "m2_small_f32", Strategy::kSnapshot, true},
      {"m2_f32_chain_replay", "m2_small_f32", Strategy::kReplay, false},
      {"m2_bf16_chain_snapshot", "m2_small_bf16", Strategy::kSnapshot, false},
      {"m2_bf16_tree_replay", "m2_small_bf16", Strategy::kReplay, true},
      {"kda_f32_tree_snapshot", "kda_small_f32", Strategy::kSnapshot, true},
      {"kda_f32_chain_replay", "kda_small_f32", Strategy::kReplay, false},
      {"kda_bf16_chain_snapshot", "kda_small_bf16", Strategy::kSnapshot, false},
      {"kda_lb_bf16_tree_replay", "kda_lb_all_bf16", Strategy::kReplay, true},
  };
  return all;
}

constexpr int kLayers = 3;
constexpr int kT = kRoundT;

// Every slot's committed bytes of the pool (through the views: materializes).
std::vector<uint8_t> pool_bytes(const StatePool& pool) { return committed_bytes(pool); }

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "specstate_slot_ops_" + name + ".safetensors";
}

class SlotOps : public ::testing::TestWithParam<SlotCase> {};

TEST_P(SlotOps, ForkThenDivergeEqualsTwoIndependentRuns) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 201);
    StatePool p = r.pool(c.strategy), one = r.pool(c.strategy), two = r.pool(c.strategy);
    const SlotHandle a = p.acquire(), a1 = one.acquire(), b1 = two.acquire();
    const auto x = r.inputs(5), y = r.inputs(kT);
    for (auto [pool, h] : {std::pair{&p, a}, std::pair{&one, a1}, std::pair{&two, b1}}) {
      r.prefill(*pool, h, x);
      r.round(*pool, batch_of(c, {h}), y, accept(c, {2}));  // replay: 2 steps pending
    }
    const SlotHandle f = p.fork(a);
    EXPECT_NE(f.slot, a.slot);
    EXPECT_EQ(exported(p, f), exported(p, a));
    expect_nonzero(exported(p, f), "the fork");
    // Diverge: two rounds of different inputs and accepted lengths; the reference runs each
    // request alone in its own pool.
    const auto z = r.inputs(2 * kT), w = r.inputs(2 * kT);
    const auto oz = r.round(p, batch_of(c, {a, f}), z, accept(c, {3, 1}));
    const auto oz1 = r.round_with(
        one, batch_of(c, {a1}), [&](int l) { return z[l].rows(0, kT); }, accept(c, {3}));
    const auto oz2 = r.round_with(
        two, batch_of(c, {b1}), [&](int l) { return z[l].rows(kT, kT); }, accept(c, {1}));
    const auto ow = r.round(p, batch_of(c, {f, a}), w, accept(c, {2, 4}));
    const auto ow1 = r.round_with(
        one, batch_of(c, {a1}), [&](int l) { return w[l].rows(kT, kT); }, accept(c, {4}));
    const auto ow2 = r.round_with(
        two, batch_of(c, {b1}), [&](int l) { return w[l].rows(0, kT); }, accept(c, {2}));
    EXPECT_EQ(r.output_bytes(oz, 0, kT), r.output_bytes(oz1, 0, kT));
    EXPECT_EQ(r.output_bytes(oz, kT, kT), r.output_bytes(oz2, 0, kT));
    EXPECT_EQ(r.output_bytes(ow, kT, kT), r.output_bytes(ow1, 0, kT));
    EXPECT_EQ(r.output_bytes(ow, 0, kT), r.output_bytes(ow2, 0, kT));
    EXPECT_EQ(exported(p, a), exported(one, a1));
    EXPECT_EQ(exported(p, f), exported(two, b1));
    EXPECT_NE(exported(p, a), exported(p, f));
  });
}

TEST_P(SlotOps, CopySlotReplacesTheDestinationAndDropsItsPendingSteps) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 202);
    StatePool p = r.pool(c.strategy);
    const SlotHandle src = p.acquire(), dst = p.acquire();
    r.prefill(p, src, r.inputs(3));
    r.prefill(p, dst, r.inputs(6));
    // Both have pending steps under replay (accepted lengths differ).
    r.round(p, batch_of(c, {src, dst}), accept(c, {2, 3}));
    p.copy_slot(src, dst);
    EXPECT_EQ(exported(p, dst), exported(p, src));
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_EQ(view_bytes(p.conv_state(l, dst)), view_bytes(p.conv_state(l, src)));
      EXPECT_EQ(view_bytes(p.ssm_state(l, dst)), view_bytes(p.ssm_state(l, src)));
    }
    // The same round on each gives the same outputs and states: dst replays nothing of its
    // own old steps.
    const auto in = r.inputs(kT);
    const auto os = r.round(p, batch_of(c, {src}), in, accept(c, {3}));
    const auto od = r.round(p, batch_of(c, {dst}), in, accept(c, {3}));
    EXPECT_EQ(r.output_bytes(os, 0, kT), r.output_bytes(od, 0, kT));
    EXPECT_EQ(exported(p, dst), exported(p, src));
    expect_nonzero(exported(p, dst), "the copy");
  });
}

TEST_P(SlotOps, CopyIntoARowOfTheOpenRoundIsRejectedFromOneIsAllowed) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 203);
    StatePool p = r.pool(c.strategy, 4), ref = r.pool(c.strategy, 4);
    std::vector<SlotHandle> hp, hr;
    for (int i = 0; i < 3; ++i) {
      hp.push_back(p.acquire());
      hr.push_back(ref.acquire());
      const auto in = r.inputs(2 + i);
      r.prefill(p, hp[i], in);
      r.prefill(ref, hr[i], in);
    }
    const auto hist = r.inputs(2 * kT);
    r.round(p, batch_of(c, {hp[0], hp[1]}), hist, accept(c, {2, 1}));
    r.round(ref, batch_of(c, {hr[0], hr[1]}), hist, accept(c, {2, 1}));
    const auto in = r.inputs(2 * kT);
    auto out = r.outputs(2 * kT);
    p.begin_verify(batch_of(c, {hp[0], hp[1]}));
    r.verify(p, in, out, 0, 1);
    const auto before = pool_bytes(p);
    const auto pre0 = exported(p, hp[0]), pre1 = exported(p, hp[1]);
    expect_rejected([&] { p.copy_slot(hp[2], hp[1]); }, Status::kFailedPrecondition,
                    {"StatePool::copy_slot", "dst = slot 1", "row 1 of the open verify round"});
    expect_rejected([&] { p.import_slot(hp[0], TensorView{}); }, Status::kFailedPrecondition,
                    {"StatePool::import_slot", "handle = slot 0", "row 0"});
    expect_rejected([&] { p.reset(hp[1]); }, Status::kFailedPrecondition,
                    {"StatePool::reset", "row 1"});
    EXPECT_EQ(pool_bytes(p), before);
    // A row of the round may be the source (its committed state, not the window's).
    p.copy_slot(hp[0], hp[2]);
    const SlotHandle forked = p.fork(hp[1]);
    r.verify(p, in, out, 1, kLayers);
    p.commit(accept(c, {3, 4}));
    r.round(ref, batch_of(c, {hr[0], hr[1]}), in, accept(c, {3, 4}));
    EXPECT_EQ(exported(p, hp[0]), exported(ref, hr[0]));
    EXPECT_EQ(exported(p, hp[1]), exported(ref, hr[1]));
    // The copies hold the committed states of before the round.
    EXPECT_EQ(exported(p, hp[2]), pre0);
    EXPECT_EQ(exported(p, forked), pre1);
    EXPECT_NE(exported(p, hp[2]), exported(p, hp[0]));
    expect_nonzero(pre1, "the fork of a row");
  });
}

TEST_P(SlotOps, ResetEqualsAFreshSlot) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 204);
    StatePool p = r.pool(c.strategy), ref = r.pool(c.strategy);
    const SlotHandle h = p.acquire(), fresh = ref.acquire();
    r.prefill(p, h, r.inputs(4));
    r.round(p, batch_of(c, {h}), accept(c, {3}));  // replay: pending steps
    expect_nonzero(exported(p, h), "before reset");
    p.reset(h);
    EXPECT_TRUE(p.is_live(h));
    for (uint8_t byte : exported(p, h)) ASSERT_EQ(byte, 0);
    const auto x = r.inputs(3), y = r.inputs(kT);
    r.prefill(p, h, x);
    r.prefill(ref, fresh, x);
    const auto o = r.round(p, batch_of(c, {h}), y, accept(c, {2}));
    const auto orf = r.round(ref, batch_of(c, {fresh}), y, accept(c, {2}));
    EXPECT_EQ(r.output_bytes(o, 0, kT), r.output_bytes(orf, 0, kT));
    EXPECT_EQ(exported(p, h), exported(ref, fresh));
  });
}

TEST_P(SlotOps, ExportLayoutIsEachLayersConvThenSsmAndPerSlotViewsMatchThePool) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 205);
    StatePool p = r.pool(c.strategy);
    const SlotHandle a = p.acquire(), b = p.acquire();
    r.prefill(p, a, r.inputs(2));
    r.prefill(p, b, r.inputs(3));
    r.round(p, batch_of(c, {b, a}), accept(c, {1, 3}));
    std::vector<uint8_t> expected;
    int64_t bytes = 0;
    for (int l = 0; l < kLayers; ++l) {
      const TensorView cv = p.conv_state(l, b), sv = p.ssm_state(l, b);
      const TensorView all_c = p.conv_state(l), all_s = p.ssm_state(l);
      ASSERT_EQ(cv.ndim, 2);
      EXPECT_EQ(cv.shape[0], all_c.shape[1]);
      EXPECT_EQ(cv.shape[1], all_c.shape[2]);
      EXPECT_EQ(cv.dtype, all_c.dtype);
      ASSERT_EQ(sv.ndim, 3);
      for (int d = 0; d < 3; ++d) EXPECT_EQ(sv.shape[d], all_s.shape[d + 1]);
      EXPECT_TRUE(cv.is_contiguous() && sv.is_contiguous());
      const std::size_t es = dtype_size(all_c.dtype), ss = dtype_size(all_s.dtype);
      EXPECT_EQ(cv.data, static_cast<char*>(all_c.data) + b.slot * all_c.stride[0] * es);
      EXPECT_EQ(sv.data, static_cast<char*>(all_s.data) + b.slot * all_s.stride[0] * ss);
      for (const TensorView& v : {cv, sv}) {
        const auto vb = view_bytes(v);
        expected.insert(expected.end(), vb.begin(), vb.end());
        bytes += static_cast<int64_t>(vb.size());
      }
    }
    EXPECT_EQ(p.slot_state_bytes(), StatePool::kSlotStateHeaderBytes + bytes);
    EXPECT_EQ(exported(p, b), expected);
    expect_nonzero(expected, "slot b");
    expect_rejected([&] { p.conv_state(kLayers, a); }, Status::kOutOfRange, {"layer = 3"});
    SlotHandle stale = a;
    p.release(a);
    expect_rejected([&] { p.ssm_state(0, stale); }, Status::kFailedPrecondition,
                    {"StatePool::ssm_state", "handle", "released"});
  });
}

TEST_P(SlotOps, ExportImportRoundTripsAcrossStrategiesThroughEveryDtype) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 206);
    StatePool src = r.pool(c.strategy), dst = r.pool(other(c.strategy));
    const SlotHandle a = src.acquire();
    const SlotHandle filler = dst.acquire(), b = dst.acquire();
    r.prefill(src, a, r.inputs(5));
    r.round(src, batch_of(c, {a}), accept(c, {3}));  // replay: pending when exported
    r.prefill(dst, b, r.inputs(2));
    r.round(dst, batch_of(c, {b}), accept(c, {2}));  // b's own pending steps must be dropped
    const std::vector<uint8_t> want = exported(src, a);
    expect_nonzero(want, "the export");
    for (DType dt : {DType::kI32, DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(dtype_name(dt));
      const int64_t es = static_cast<int64_t>(dtype_size(dt));
      const int64_t n = (src.slot_state_bytes() + es - 1) / es;
      std::vector<uint8_t> buf(static_cast<std::size_t>(n * es), 0xab);
      const TensorView v = TensorView::contiguous(buf.data(), dt, {n});
      src.export_slot(a, v);
      EXPECT_TRUE(
          std::equal(want.begin(), want.end(), buf.begin() + StatePool::kSlotStateHeaderBytes));
      dst.import_slot(b, v);
      EXPECT_EQ(exported(dst, b), want);
    }
    for (uint8_t byte : exported(dst, filler)) ASSERT_EQ(byte, 0);
    // The imported request goes on exactly like the original.
    const auto in = r.inputs(kT);
    const auto o1 = r.round(src, batch_of(c, {a}), in, accept(c, {4}));
    const auto o2 = r.round(dst, batch_of(c, {b}), in, accept(c, {4}));
    EXPECT_EQ(r.output_bytes(o1, 0, kT), r.output_bytes(o2, 0, kT));
    EXPECT_EQ(exported(src, a), exported(dst, b));
  });
}

TEST_P(SlotOps, FileRoundTripsAcrossStrategies) {
  const SlotCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 207);
    StatePool src = r.pool(c.strategy), dst = r.pool(other(c.strategy));
    const SlotHandle a = src.acquire(), b = dst.acquire();
    r.prefill(src, a, r.inputs(4));
    r.round(src, batch_of(c, {a}), accept(c, {2}));
    const std::string path = temp_path(c.name);
    src.export_slot(a, path);
    const SafetensorsFile file(path);
    EXPECT_EQ(file.size(), 2u * kLayers);
    EXPECT_EQ(file.metadata_value("format"), "specstate.slot_state");
    EXPECT_EQ(file.metadata_value("kind"), layer_kind_name(src.config().kind));
    EXPECT_EQ(file.metadata_value("num_layers"), std::to_string(kLayers));
    for (int l = 0; l < kLayers; ++l) {
      const std::string conv = "layers." + std::to_string(l) + ".conv_state";
      const std::string ssm = "layers." + std::to_string(l) + ".ssm_state";
      const auto cb = view_bytes(src.conv_state(l, a)), sb = view_bytes(src.ssm_state(l, a));
      ASSERT_TRUE(file.contains(conv) && file.contains(ssm));
      EXPECT_TRUE(std::equal(cb.begin(), cb.end(), file.raw_data(conv)));
      EXPECT_TRUE(std::equal(sb.begin(), sb.end(), file.raw_data(ssm)));
      EXPECT_EQ(file.info(ssm).shape.size(), 3u);
    }
    dst.import_slot(b, path);
    EXPECT_EQ(exported(dst, b), exported(src, a));
    std::remove(path.c_str());
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, SlotOps, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<SlotCase>& info) {
                           return std::string(info.param.name);
                         });

// --- bad arguments: each rejected naming it, nothing changed ----------------------------------

template <typename Kind>
struct BadFixture {
  PoolRounds<Kind> r;
  StatePool p;
  SlotHandle a, b;
  std::vector<uint8_t> before;
  BadFixture(const typename Kind::Config& layer, int slots = 3)
      : r(layer, kLayers, 301), p(r.pool(Strategy::kReplay, slots)) {
    a = p.acquire();
    b = p.acquire();
    r.prefill(p, a, r.inputs(3));
    r.prefill(p, b, r.inputs(2));
    before = pool_bytes(p);
  }
  void unchanged() { EXPECT_EQ(pool_bytes(p), before); }
};

TEST(SlotOpsBadInput, CopyAndForkArguments) {
  BadFixture<GdnKind> f(gdn_preset("small_f32"));
  expect_rejected([&] { f.p.copy_slot(f.a, f.a); }, Status::kInvalidArgument,
                  {"StatePool::copy_slot", "src = dst", "slot 0"});
  SlotHandle foreign = f.b;
  foreign.pool_id += 99;
  expect_rejected([&] { f.p.copy_slot(f.a, foreign); }, Status::kFailedPrecondition,
                  {"dst = ", "another pool"});
  const SlotHandle c = f.p.acquire();
  f.p.release(c);
  expect_rejected([&] { f.p.copy_slot(c, f.a); }, Status::kFailedPrecondition,
                  {"src = ", "released"});
  expect_rejected([&] { f.p.fork(c); }, Status::kFailedPrecondition,
                  {"StatePool::fork", "src = ", "released"});
  EXPECT_EQ(f.p.free_slots(), 1);
  f.unchanged();
  const SlotHandle last = f.p.fork(f.a);  // the pool is full now
  f.before = pool_bytes(f.p);
  expect_rejected([&] { f.p.fork(f.a); }, Status::kResourceExhausted, {"num_slots = 3"});
  expect_rejected([&] { f.p.reset(c); }, Status::kFailedPrecondition,
                  {"StatePool::reset", "released"});
  f.unchanged();
  f.p.release(last);
}

TEST(SlotOpsBadInput, ExportAndImportBuffers) {
  BadFixture<Mamba2Kind> f(mamba2_preset("m2_small_bf16"));
  const int64_t bytes = f.p.slot_state_bytes();
  const int64_t n = (bytes + 3) / 4;
  std::vector<int32_t> buf(static_cast<std::size_t>(2 * n + 8));
  const std::string want = std::to_string(n);
  for (auto* call : {+[](StatePool&p, SlotHandle h, const TensorView&v) { p.export_slot(h, v); },
                     +[](StatePool&p, SlotHandle h, const TensorView&v) { p.import_slot(h, v); }}) {
    expect_rejected(
        [&] { call(f.p, f.a, TensorView::contiguous(buf.data(), DType::kI32, {n - 1})); },
        Status::kInvalidArgument, {"holds " + std::to_string(n - 1), "expected " + want});
    expect_rejected(
        [&] {
          call(f.p, f.a, TensorView::contiguous(buf.data(), DType::kI32, {2, n}));
        },
        Status::kInvalidArgument, {"ndim = 2", "expected 1"});
    expect_rejected([&] { call(f.p, f.a, TensorView::strided(buf.data(), DType::kI32, {n}, {2})); },
                    Status::kInvalidArgument, {"stride 2", "contiguous"});
    expect_rejected(
        [&] {
          call(f.p, f.a, TensorView::contiguous(buf.data(), DType::kI32, {n}, Device::kCuda));
        },
        Status::kInvalidArgument, {"lives on cuda", "the pool's backend is cpu"});
    expect_rejected(
        [&] {
          call(f.p, f.a, TensorView::contiguous(static_cast<void*>(nullptr), DType::kI32, {n}));
        },
        Status::kInvalidArgument, {".data is null"});
    // A view of the pool's own memory.
    const TensorView pool_mem = f.p.ssm_state(0);
    expect_rejected(
        [&] { call(f.p, f.a, TensorView::contiguous(pool_mem.data, DType::kI32, {n})); },
        Status::kInvalidArgument, {"overlaps the pool's"});
  }
  SlotHandle stale = f.b;
  stale.generation += 1;
  expect_rejected(
      [&] { f.p.export_slot(stale, TensorView::contiguous(buf.data(), DType::kI32, {n})); },
      Status::kFailedPrecondition, {"StatePool::export_slot", "handle"});
  f.unchanged();
}

TEST(SlotOpsBadInput, ImportFilesThatDoNotFitThePool) {
  const std::string path = temp_path("bad");
  BadFixture<GdnKind> f(gdn_preset("small_f32"));
  auto expect_file_rejected = [&](const std::vector<std::string>& words) {
    expect_rejected([&] { f.p.import_slot(f.a, path); }, Status::kInvalidArgument, words);
    f.unchanged();
  };
  {  // other dtypes (bf16 conv state)
    PoolRounds<GdnKind> r(gdn_preset("small_bf16"), kLayers, 1);
    StatePool q = r.pool(Strategy::kSnapshot);
    q.export_slot(q.acquire(), path);
    expect_file_rejected({path, "tensor 'layers.0.conv_state' is BF16[", "expects F32["});
  }
  {  // other shapes (Mamba2 of other heads), and another kind
    PoolRounds<Mamba2Kind> r(mamba2_preset("m2_small_f32"), kLayers, 1);
    StatePool q = r.pool(Strategy::kSnapshot);
    q.export_slot(q.acquire(), path);
    expect_file_rejected({path, "metadata kind = 'mamba2'", "gated_delta_net"});
  }
  {  // fewer layers
    PoolRounds<GdnKind> r(gdn_preset("small_f32"), kLayers - 1, 1);
    StatePool q = r.pool(Strategy::kSnapshot);
    q.export_slot(q.acquire(), path);
    expect_file_rejected({"metadata num_layers = '2'", "'3'"});
  }
  auto write = [&](const std::vector<SafetensorsFile::NewTensor>& tensors) {
    const auto bytes = SafetensorsFile::serialize(tensors, {});
    std::FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    std::fclose(out);
  };
  const GdnConfig g = gdn_preset("small_f32");
  const int64_t conv_bytes = g.conv_dim() * (g.conv_width - 1) * 4;
  const std::vector<int64_t> conv_shape = {g.conv_dim(), g.conv_width - 1};
  const std::vector<int64_t> ssm_shape = {g.num_v_heads, g.head_v_dim, g.head_k_dim};
  const int64_t ssm_bytes = ssm_shape[0] * ssm_shape[1] * ssm_shape[2] * 4;
  std::vector<SafetensorsFile::NewTensor> good;
  for (int l = 0; l < kLayers; ++l) {
    good.push_back({"layers." + std::to_string(l) + ".conv_state", SafetensorsDType::kF32,
                    conv_shape, std::vector<uint8_t>(conv_bytes, 1)});
    good.push_back({"layers." + std::to_string(l) + ".ssm_state", SafetensorsDType::kF32, ssm_shape,
                    std::vector<uint8_t>(ssm_bytes, 1)});
  }
  {
    auto missing = good;
    missing.erase(missing.begin() + 3);
    write(missing);
    expect_file_rejected({"no tensor named 'layers.1.ssm_state'"});
  }
  {
    auto extra = good;
    extra.push_back({"layers.3.conv_state", SafetensorsDType::kF32, conv_shape,
                     std::vector<uint8_t>(conv_bytes, 1)});
    write(extra);
    expect_file_rejected({"tensor 'layers.3.conv_state' is not part of a slot state"});
  }
  {
    auto shape = good;
    shape[1].shape = {ssm_shape[0], ssm_shape[1] * ssm_shape[2]};
    write(shape);
    expect_file_rejected({"tensor 'layers.0.ssm_state' is F32[", "the pool expects F32["});
  }
  {
    write(good);  // metadata-less but well-formed: accepted
    f.p.import_slot(f.a, path);
    f.before = pool_bytes(f.p);
  }
  std::remove(path.c_str());
  expect_file_rejected({path});  // no such file
  expect_rejected([&] { f.p.export_slot(f.a, std::string("/nonexistent-dir/x.safetensors")); },
                  Status::kInvalidArgument, {"/nonexistent-dir/x.safetensors", "cannot write"});
  expect_rejected([&] { f.p.import_slot(f.a, std::string()); }, Status::kInvalidArgument,
                  {"path is empty"});
}

}  // namespace
}  // namespace specstate::test
