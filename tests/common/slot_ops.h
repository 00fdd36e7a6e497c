// The slot-operation suite (issue 10 sections 1 and 3, docs/lifecycle.md), one suite over both
// backends: every layer kind and both strategies, bit-exact: fork then diverge equals two
// independent runs; copy_slot replaces the destination and drops its pending steps; reset equals
// a fresh slot; export -> import round trips across strategies through buffers of every dtype and
// through safetensors files; the export layout is per layer conv then SSM; per-slot views;
// copy_slot / fork / reset on the pool's device (one strided copy per buffer on CUDA);
// abort_round then a new round equals never having started the first.
//
// The tests are defined here and instantiated by one file of each test binary, with the cases of
// its backend and how it opens that backend's memory: tests/cpu/test_slot_ops.cpp (the CPU
// oracle, host memory) and tests/gpu/test_slot_ops_gpu.cpp (CUDA, device memory on a stream of
// its own; every test skips visibly without a device). Include it from one file per binary.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/expect.h"
#include "common/pool_rounds.h"
#include "common/slot_cases.h"
#include "common/strategy_equivalence.h"
#include "specstate/safetensors.h"

namespace specstate::test {

// The memory of one test on its case's backend; null where that backend cannot run here (no
// device): the test skips.
using OpenMemory = std::unique_ptr<Memory> (*)();

struct SlotOpsParam {
  SlotCase c;
  OpenMemory open;
};

inline void PrintTo(const SlotOpsParam& p, std::ostream* out) { *out << p.c.name; }

inline std::vector<SlotOpsParam> slot_ops_params(Backend backend, OpenMemory open) {
  std::vector<SlotOpsParam> out;
  for (const SlotCase& c : slot_cases(backend)) out.push_back({c, open});
  return out;
}

inline std::string slot_ops_name(const ::testing::TestParamInfo<SlotOpsParam>& info) {
  return info.param.c.name;
}

namespace {

constexpr int kLayers = 3;
constexpr int kT = kRoundT;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "specstate_slot_ops_" + name + ".safetensors";
}

// Requests acquired in `p`, then request i prefilled with tokens[i] tokens.
template <typename Rounds>
std::vector<SlotHandle> prefilled(Rounds& r, StatePool& p, const std::vector<int>& tokens) {
  std::vector<SlotHandle> h;
  for (std::size_t i = 0; i < tokens.size(); ++i) h.push_back(p.acquire());
  for (std::size_t i = 0; i < tokens.size(); ++i) r.prefill(p, h[i], r.inputs(tokens[i]));
  return h;
}

class SlotOps : public ::testing::TestWithParam<SlotOpsParam> {
 protected:
  void SetUp() override {
    mem_ = GetParam().open();
    if (!mem_) GTEST_SKIP() << "no CUDA device";
  }

  // Runs body(rounds): PoolRounds of the case's layer kind seeded with `seed`, whose buffers
  // and pools are on the case's backend.
  template <typename Body>
  void with_rounds(uint64_t seed, Body&& body) {
    for_kind(c.preset, [&](auto kind, const auto& layer) {
      PoolRounds<decltype(kind)> r(layer, kLayers, seed, *mem_);
      body(r);
    });
  }

  // body(rounds, pool, a, b): a pool of the case's strategy whose requests a and b were
  // prefilled with tokens[0] and tokens[1] tokens, then one round over them (b first when
  // `b_first`) committed `steps` (replay: pending steps).
  template <typename Body>
  void with_two_requests(uint64_t seed, std::vector<int> tokens, bool b_first,
                         std::vector<int> steps, Body&& body) {
    with_rounds(seed, [&](auto& r) {
      StatePool p = r.pool(c.strategy);
      const auto h = prefilled(r, p, tokens);
      r.round(p, batch_of(c, b_first ? std::vector{h[1], h[0]} : h), accept(c, steps));
      body(r, p, h[0], h[1]);
    });
  }

  // The case's backend memory (the rounds' buffers live in it).
  Memory& mem() { return *mem_; }

  const SlotCase& c = GetParam().c;

 private:
  std::unique_ptr<Memory> mem_;  // outlives the pools of a test body
};

// `n` requests in each of two pools, request i prefilled alike with 2 + i tokens in both.
template <typename Rounds>
std::pair<std::vector<SlotHandle>, std::vector<SlotHandle>> alike_requests(Rounds& r, StatePool& p,
                                                                           StatePool& ref, int n) {
  std::vector<SlotHandle> hp, hr;
  for (int i = 0; i < n; ++i) {
    hp.push_back(p.acquire());
    hr.push_back(ref.acquire());
    const auto in = r.inputs(2 + i);
    r.prefill(p, hp[i], in);
    r.prefill(ref, hr[i], in);
  }
  return {hp, hr};
}

TEST_P(SlotOps, ForkThenDivergeEqualsTwoIndependentRuns) {
  with_rounds(201, [&](auto& r) {
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
        one, batch_of(c, {a1}), [&](int l) { return r.put_rows(z[l], 0, kT); }, accept(c, {3}));
    const auto oz2 = r.round_with(
        two, batch_of(c, {b1}), [&](int l) { return r.put_rows(z[l], kT, kT); }, accept(c, {1}));
    const auto ow = r.round(p, batch_of(c, {f, a}), w, accept(c, {2, 4}));
    const auto ow1 = r.round_with(
        one, batch_of(c, {a1}), [&](int l) { return r.put_rows(w[l], kT, kT); }, accept(c, {4}));
    const auto ow2 = r.round_with(
        two, batch_of(c, {b1}), [&](int l) { return r.put_rows(w[l], 0, kT); }, accept(c, {2}));
    expect_same_outputs(r.output_bytes(oz, 0, kT), r.output_bytes(oz1, 0, kT), "outputs");
    expect_same_outputs(r.output_bytes(oz, kT, kT), r.output_bytes(oz2, 0, kT), "outputs");
    expect_same_outputs(r.output_bytes(ow, kT, kT), r.output_bytes(ow1, 0, kT), "outputs");
    expect_same_outputs(r.output_bytes(ow, 0, kT), r.output_bytes(ow2, 0, kT), "outputs");
    EXPECT_EQ(exported(p, a), exported(one, a1));
    EXPECT_EQ(exported(p, f), exported(two, b1));
    EXPECT_NE(exported(p, a), exported(p, f));
  });
}

TEST_P(SlotOps, CopySlotReplacesTheDestinationAndDropsItsPendingSteps) {
  // Both have pending steps under replay (accepted lengths differ).
  with_two_requests(202, {3, 6}, false, {2, 3}, [&](auto& r, auto& p, auto src, auto dst) {
    p.copy_slot(src, dst);
    EXPECT_EQ(exported(p, dst), exported(p, src));
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_EQ(r.bytes(p.conv_state(l, dst)), r.bytes(p.conv_state(l, src)));
      EXPECT_EQ(r.bytes(p.ssm_state(l, dst)), r.bytes(p.ssm_state(l, src)));
    }
    // The same round on each gives the same outputs and states: dst replays
    // nothing of its own old steps.
    const auto in = r.inputs(kT);
    const auto os = r.round(p, batch_of(c, {src}), in, accept(c, {3}));
    const auto od = r.round(p, batch_of(c, {dst}), in, accept(c, {3}));
    expect_same_outputs(r.output_bytes(os, 0, kT), r.output_bytes(od, 0, kT), "outputs");
    EXPECT_EQ(exported(p, dst), exported(p, src));
    expect_nonzero(exported(p, dst), "the copy");
  });
}

TEST_P(SlotOps, CopyIntoARowOfTheOpenRoundIsRejectedFromOneIsAllowed) {
  with_rounds(203, [&](auto& r) {
    StatePool p = r.pool(c.strategy, 4), ref = r.pool(c.strategy, 4);
    std::vector<SlotHandle> hp, hr;
    std::tie(hp, hr) = alike_requests(r, p, ref, 3);
    const auto hist = r.inputs(2 * kT);
    r.round(p, batch_of(c, {hp[0], hp[1]}), hist, accept(c, {2, 1}));
    r.round(ref, batch_of(c, {hr[0], hr[1]}), hist, accept(c, {2, 1}));
    const auto in = r.inputs(2 * kT);
    auto out = r.outputs(2 * kT);
    p.begin_verify(batch_of(c, {hp[0], hp[1]}));
    r.verify(p, in, out, 0, 1);
    const auto before = r.pool_bytes(p);
    const auto pre0 = exported(p, hp[0]), pre1 = exported(p, hp[1]);
    expect_rejected([&] { p.copy_slot(hp[2], hp[1]); }, Status::kFailedPrecondition,
                    {"StatePool::copy_slot", "dst = slot 1", "row 1 of the open verify round"});
    expect_rejected([&] { p.import_slot(hp[0], TensorView{}); }, Status::kFailedPrecondition,
                    {"StatePool::import_slot", "handle = slot 0", "row 0"});
    expect_rejected([&] { p.reset(hp[1]); }, Status::kFailedPrecondition,
                    {"StatePool::reset", "row 1"});
    EXPECT_EQ(r.pool_bytes(p), before);
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
  with_rounds(204, [&](auto& r) {
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
    expect_same_outputs(r.output_bytes(o, 0, kT), r.output_bytes(orf, 0, kT), "outputs");
    EXPECT_EQ(exported(p, h), exported(ref, fresh));
  });
}

TEST_P(SlotOps, ExportLayoutIsEachLayersConvThenSsmAndPerSlotViewsMatchThePool) {
  with_two_requests(205, {2, 3}, true, {1, 3}, [&](auto& r, auto& p, auto a, auto b) {
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
        const auto vb = r.bytes(v);
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
  with_rounds(206, [&](auto& r) {
    StatePool src = r.pool(c.strategy), dst = r.pool(other(c.strategy));
    const SlotHandle a = src.acquire();
    const SlotHandle filler = dst.acquire(), b = dst.acquire();
    r.prefill(src, a, r.inputs(5));
    r.round(src, batch_of(c, {a}), accept(c, {3}));  // replay: pending when exported
    r.prefill(dst, b, r.inputs(2));
    const std::vector<uint8_t> want = exported(src, a);
    expect_nonzero(want, "the export");
    for (DType dt : {DType::kI32, DType::kF32, DType::kBF16}) {
      // b holds a state of its own before every import, with pending steps under replay (which
      // the import must drop): each dtype's import is checked, not only the first one's.
      r.round(dst, batch_of(c, {b}), accept(c, {2}));
      ASSERT_NE(exported(dst, b), want);
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
    expect_same_outputs(r.output_bytes(o1, 0, kT), r.output_bytes(o2, 0, kT), "outputs");
    EXPECT_EQ(exported(src, a), exported(dst, b));
  });
}

TEST_P(SlotOps, FileRoundTripsAcrossStrategies) {
  with_rounds(207, [&](auto& r) {
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
      const auto cb = r.bytes(src.conv_state(l, a)), sb = r.bytes(src.ssm_state(l, a));
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

TEST_P(SlotOps, CopyForkAndResetOnTheDevice) {
  // Both pending under replay.
  with_two_requests(403, {3, 5}, false, {2, 3}, [&](auto& dev, auto& g, auto src, auto dst) {
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

TEST_P(SlotOps, AbortRoundThenANewRoundEqualsNeverStartingTheFirst) {
  with_rounds(405, [&](auto& dev) {
    StatePool g = dev.pool(c.strategy), ref = dev.pool(c.strategy);
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

}  // namespace
}  // namespace specstate::test
