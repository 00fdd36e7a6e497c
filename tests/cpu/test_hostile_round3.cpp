// Regression tests for issue 20 (hostile input, round 3). Each test fails on the code before its
// fix and covers both strategies and both layer kinds where the defect applies:
//   a. materialize({h, h}): a repeated handle is rejected, naming the index, changing nothing.
//   b. a caller-owned pool's release() materializes the slot, so the caller's memory holds the
//      committed state; adopt() drops the bookkeeping of the slot's previous life.
//   c. a rejected export_slot(h, path) (unwritable path) changes no byte and no bookkeeping.
//   d. fork on a full pool reports StatePool::fork; import_slot(path)'s file errors name
//      StatePool::import_slot.
//   e. a pool of num_slots = INT_MAX is refused quickly, without building per-slot structures.
//   f. views that break their dtype's alignment are rejected, naming the view.
//   h. (item 4) the weights of a prefill / decode may be freed after the call: a later
//      materialize re-runs pending steps with the last verify's weights, never reads them.
//   g. caller-owned views in vLLM v1's hybrid layout (conv and SSM state of a slot interleaved in
//      one page) are accepted and bit-identical to an owning pool; truly overlapping views are
//      still rejected.
// The fixes live in lib/pool.cpp, lib/pool_bind.cpp, lib/pool_checks.cpp, lib/pool_slots.cpp,
// lib/slot_allocator.cpp, lib/validate.cpp.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/caller_owned.h"
#include "common/expect.h"
#include "common/layer_kinds.h"
#include "common/pool_rounds.h"
#include "common/presets.h"
#include "common/slot_cases.h"
#include "common/strategy_equivalence.h"

namespace specstate::test {
namespace {

constexpr int kLayers = 2;
constexpr int kSlots = 4;
constexpr int kRows = 3;

// Layer kind x strategy. The presets keep realistic dtypes: bf16 activations and conv state, f32
// SSM state (Qwen3-Next, Nemotron-H).
struct Case {
  const char* name;
  const char* preset;
  Strategy strategy;
};

const Case kCases[] = {
    {"gdn_snapshot", "small_bf16", Strategy::kSnapshot},
    {"gdn_replay", "small_bf16", Strategy::kReplay},
    {"m2_snapshot", "m2_small_bf16", Strategy::kSnapshot},
    {"m2_replay", "m2_small_bf16", Strategy::kReplay},
    {"kda_snapshot", "kda_small_bf16", Strategy::kSnapshot},
    {"kda_replay", "kda_small_bf16", Strategy::kReplay},
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class HostileRound3 : public ::testing::TestWithParam<Case> {};

// The caller's bytes of `slot` in the export layout (per layer: conv window, then SSM state),
// read straight from the caller's buffers (no pool call, so nothing is materialized).
std::vector<uint8_t> caller_slot(Memory& mem, const CallerMemory& cm, int layers, int slots,
                                 int slot) {
  const std::vector<uint8_t> conv = mem.bytes(cm.conv_buffer), ssm = mem.bytes(cm.ssm_buffer);
  std::vector<uint8_t> out;
  for (int l = 0; l < layers; ++l) {
    const auto co =
        static_cast<std::size_t>(cm.conv_offset[static_cast<std::size_t>(l * slots + slot)]);
    const auto so =
        static_cast<std::size_t>(cm.ssm_offset[static_cast<std::size_t>(l * slots + slot)]);
    out.insert(out.end(), conv.begin() + co, conv.begin() + co + cm.conv_state_bytes);
    out.insert(out.end(), ssm.begin() + so, ssm.begin() + so + cm.ssm_state_bytes);
  }
  return out;
}

// Every byte of the caller's buffers.
std::vector<uint8_t> caller_bytes(Memory& mem, const CallerMemory& cm) {
  std::vector<uint8_t> out = mem.bytes(cm.conv_buffer);
  const std::vector<uint8_t> ssm = mem.bytes(cm.ssm_buffer);
  out.insert(out.end(), ssm.begin(), ssm.end());
  return out;
}

// A slot state (export bytes) as an i32 view for import_slot.
struct StateBuffer {
  std::vector<int32_t> words;
  explicit StateBuffer(const std::vector<uint8_t>& bytes) : words((bytes.size() + 3) / 4, 0) {
    std::memcpy(words.data(), bytes.data(), bytes.size());
  }
  TensorView view() {
    return TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())});
  }
};

// Bit-for-bit equality of two byte strings; on failure, where they first differ (not the bytes).
::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got,
                                      const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " bytes, expected " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "byte " << i << " of " << got.size() << " is "
                                           << int{got[i]} << ", expected " << int{want[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

// Two requests of a caller-owned pool of `strategy` and of an owning snapshot pool (the
// reference), prefilled alike and advanced by `rounds` committed rounds in which every row
// accepts at least one token (so a replay pool's memory lags its committed state).
template <typename Kind>
struct TwoPools {
  PoolRounds<Kind> m;
  std::unique_ptr<Memory> mem = host_memory();
  PoolOptions o;
  CallerMemory cm;
  StatePool subject, ref;
  std::vector<SlotHandle> hs, hr;  // the same requests in subject / ref

  TwoPools(const typename Kind::Config& g, Strategy strategy, uint64_t seed)
      : m(g, kLayers, seed),
        o(m.options(strategy, kSlots, kRows, kRoundT)),
        cm(make_caller_memory(m.model(), o, CallerLayout::kOneTensor, *mem, seed ^ 0x77)),
        subject(m.model(), o, cm.views),
        ref(m.pool(Strategy::kSnapshot, kSlots, kRows, kRoundT)) {
    for (int i = 0; i < 2; ++i) {
      hs.push_back(subject.acquire());
      hr.push_back(ref.acquire());
      const auto in = m.inputs(3 + i);
      m.prefill(subject, hs.back(), in);
      m.prefill(ref, hr.back(), in);
    }
  }

  // One round over the rows (`rows` indexes hs / hr) in both pools; the outputs must agree.
  void round(const std::vector<int>& rows, const std::vector<int>& steps, bool tree = false) {
    VerifyBatch bs = round_batch(tree, {}), br = round_batch(tree, {});
    for (int i : rows) {
      bs.rows.push_back(hs[static_cast<std::size_t>(i)]);
      br.rows.push_back(hr[static_cast<std::size_t>(i)]);
    }
    const int64_t n = static_cast<int64_t>(rows.size()) * kRoundT;
    const auto in = m.inputs(n);
    const auto accepted = round_accept(tree, steps);
    const auto out_s = m.round(subject, bs, in, accepted);
    const auto out_r = m.round(ref, br, in, accepted);
    ASSERT_TRUE(same_bytes(PoolRounds<Kind>::output_bytes(out_s, 0, n),
                           PoolRounds<Kind>::output_bytes(out_r, 0, n)))
        << "verify outputs differ from the snapshot reference";
  }

  void rounds(int count) {
    for (int r = 0; r < count; ++r) {
      round({0, 1}, {1 + r % kRoundT, kRoundT - r % 2}, r % 2 == 1);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  std::vector<uint8_t> caller_slot_bytes(int slot) {
    return caller_slot(*mem, cm, kLayers, kSlots, slot);
  }
};

template <typename F>
void for_case(const Case& c, F&& f) {
  for_kind(c.preset, [&](auto kind, const auto& g) { f(kind, g); });
}

// --- a. materialize with a repeated handle -----------------------------------------------------

TEST_P(HostileRound3, MaterializeRejectsARepeatedHandleNamingItsIndex) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    TwoPools<Kind> t(g, c.strategy, 0xA1);
    t.rounds(3);
    if (HasFatalFailure()) return;
    const std::vector<uint8_t> before = caller_bytes(*t.mem, t.cm);
    const SlotHandle h = t.hs[0], other = t.hs[1];
    expect_rejected(
        [&] {
          t.subject.materialize({h, h});
        },
        Status::kInvalidArgument,
        {"StatePool::materialize", "handles[1] = {slot " + std::to_string(h.slot),
         "repeats handles[0]"});
    expect_rejected(
        [&] {
          t.subject.materialize({h, other, h});
        },
        Status::kInvalidArgument, {"handles[2]", "repeats handles[0]"});
    // Nothing changed: not even the replay pool's deferred work ran.
    EXPECT_TRUE(same_bytes(caller_bytes(*t.mem, t.cm), before))
        << "a rejected materialize wrote the pool";
    // The pool still works and agrees with the reference.
    t.subject.materialize({h, other});
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(same_bytes(exported(t.subject, t.hs[i]), exported(t.ref, t.hr[i])))
          << "request " << i;
    }
  });
}

// --- h. freed decode weights are never read by a later materialize (issue 20.4) ----------------

// A copy of a host view's bytes in memory the test owns (and can poison).
struct OwnedView {
  std::vector<uint8_t> bytes;
  TensorView view;
  explicit OwnedView(const TensorView& v) {
    if (v.empty()) return;
    // The view's span (any strides), copied; the copy keeps the strides.
    int64_t span = 1;
    for (int i = 0; i < v.ndim; ++i) span += (v.shape[i] - 1) * v.stride[i];
    const std::size_t n = static_cast<std::size_t>(span) * dtype_size(v.dtype);
    bytes.assign(static_cast<const uint8_t*>(v.data), static_cast<const uint8_t*>(v.data) + n);
    view = v;
    view.data = bytes.data();
  }
  // NaN in every element (0xFF bytes: a NaN in f32 and in bf16).
  void poison() { std::fill(bytes.begin(), bytes.end(), uint8_t{0xFF}); }
};

struct OwnedWeights {
  std::vector<OwnedView> parts;
  GdnWeights gdn;
  Mamba2Weights m2;
  KdaWeights kda;
  explicit OwnedWeights(const GdnWeights& w) {
    for (const TensorView* v : {&w.conv_weight, &w.conv_bias, &w.A_log, &w.dt_bias}) {
      parts.emplace_back(*v);
    }
    gdn = GdnWeights{parts[0].view, parts[1].view, parts[2].view, parts[3].view};
  }
  explicit OwnedWeights(const Mamba2Weights& w) {
    for (const TensorView* v : {&w.conv_weight, &w.conv_bias, &w.A_log, &w.dt_bias, &w.D}) {
      parts.emplace_back(*v);
    }
    m2 = Mamba2Weights{parts[0].view, parts[1].view, parts[2].view, parts[3].view, parts[4].view};
  }
  explicit OwnedWeights(const KdaWeights& w) {
    for (const TensorView* v : {&w.conv_weight, &w.conv_bias, &w.A_log, &w.dt_bias}) {
      parts.emplace_back(*v);
    }
    kda = KdaWeights{parts[0].view, parts[1].view, parts[2].view, parts[3].view};
  }
  const GdnWeights& get(const GdnWeights&) const { return gdn; }
  const Mamba2Weights& get(const Mamba2Weights&) const { return m2; }
  const KdaWeights& get(const KdaWeights&) const { return kda; }
  void poison() {
    for (OwnedView& p : parts) p.poison();
  }
};

TEST_P(HostileRound3, FreedDecodeWeightsAreNeverReadByALaterMaterialize) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    TwoPools<Kind> t(g, c.strategy, 0xB4);
    t.rounds(3);  // both requests hold pending steps under replay
    if (HasFatalFailure()) return;
    // Request 1 decodes one token with a temporary copy of the layer weights (the same numbers),
    // which the caller then frees (poisons with NaN).
    std::vector<OwnedWeights> temp;
    for (int l = 0; l < kLayers; ++l) temp.emplace_back(t.m.weights(l));
    const auto in = t.m.inputs(1);
    for (int l = 0; l < kLayers; ++l) {
      const auto& w = temp[static_cast<std::size_t>(l)].get(t.m.weights(l));
      const auto out_s = t.m.outputs(1), out_r = t.m.outputs(1);
      t.subject.decode(l, {t.hs[1]}, w, Kind::put(in[l], t.m.put()),
                       Kind::put(out_s[l], t.m.put()));
      t.ref.decode(l, {t.hr[1]}, t.m.weights(l), Kind::put(in[l], t.m.put()),
                   Kind::put(out_r[l], t.m.put()));
    }
    for (OwnedWeights& w : temp) w.poison();
    // Request 0's pending steps are re-run now, with the last verify's weights.
    t.subject.materialize({t.hs[0]});
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(same_bytes(exported(t.subject, t.hs[i]), exported(t.ref, t.hr[i])))
          << "request " << i << ": a freed decode weight was read";
    }
  });
}

// --- b. caller-owned release materializes; adopt drops the previous life ------------------------

TEST_P(HostileRound3, CallerOwnedReleaseLeavesTheCommittedStateInTheCallersMemory) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    TwoPools<Kind> t(g, c.strategy, 0xB2);
    t.rounds(3);
    if (HasFatalFailure()) return;
    const int slot = t.subject.slot_index(t.hs[0]);
    ASSERT_EQ(slot, t.ref.slot_index(t.hr[0]));
    const std::vector<uint8_t> want = exported(t.ref, t.hr[0]);  // snapshot: exact, no work
    t.subject.release(t.hs[0]);                                  // no materialize before it
    const std::vector<uint8_t> got = t.caller_slot_bytes(slot);
    ASSERT_TRUE(same_bytes(got, want))
        << "the caller's memory of released slot " << slot << " is not the committed state";
    // The engine adopts the slot again (a preempted request resumes): the same state, and the
    // next rounds agree with the reference bit for bit.
    t.ref.release(t.hr[0]);
    t.hs[0] = t.subject.adopt(slot);
    t.hr[0] = t.ref.adopt(slot);
    EXPECT_TRUE(same_bytes(exported(t.subject, t.hs[0]), want));
    t.rounds(2);
    if (HasFatalFailure()) return;
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(same_bytes(exported(t.subject, t.hs[i]), exported(t.ref, t.hr[i])))
          << "request " << i;
    }
  });
}

// adopt() on a released slot (release materializes, so its memory is the committed state): the
// slot's memory, as it is, is the new request's state, and nothing of the old
// request's pending steps may be applied to it later. This pins the contract, not one line: on
// the CPU backend release() itself clears the slot's cursor and pending steps (its materialize and
// reset_slot), so adopt's own clearing (pool_slots.cpp) runs on clean bookkeeping here and this
// test fails only if both lose it.
TEST_P(HostileRound3, AdoptDropsThePendingWorkOfTheSlotsPreviousLife) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    PoolRounds<Kind> m(g, kLayers, 0xB3);
    StatePool p = m.pool(c.strategy, kSlots, kRows, kRoundT);
    StatePool ref = m.pool(Strategy::kSnapshot, kSlots, kRows, kRoundT);
    const SlotHandle h = p.acquire();
    m.prefill(p, h, m.inputs(4));
    for (int r = 0; r < 3; ++r) {
      m.round(p, round_batch(false, {h}), round_accept(false, {2 + r % 2}));
    }
    const int slot = p.slot_index(h);
    p.release(h);  // the memory holds the committed state (release materializes)
    const std::vector<uint8_t> memory = slot_bytes(p, slot);
    expect_nonzero(memory, "the released slot's memory");  // zeros on both sides prove nothing
    const SlotHandle a = p.adopt(slot);
    ASSERT_TRUE(same_bytes(exported(p, a), memory))
        << "adopt must keep the slot's memory as its state";
    // The reference: a snapshot pool given exactly that state.
    const SlotHandle r = ref.acquire();
    std::vector<uint8_t> image = export_image(ref, r);  // the header of ref's config
    image.resize(StatePool::kSlotStateHeaderBytes);
    image.insert(image.end(), memory.begin(), memory.end());
    StateBuffer state(image);
    ref.import_slot(r, state.view());
    const auto in = m.inputs(kRoundT);
    const auto out_p = m.round(p, round_batch(false, {a}), in, round_accept(false, {3}));
    const auto out_r = m.round(ref, round_batch(false, {r}), in, round_accept(false, {3}));
    EXPECT_TRUE(same_bytes(PoolRounds<Kind>::output_bytes(out_p, 0, kRoundT),
                           PoolRounds<Kind>::output_bytes(out_r, 0, kRoundT)))
        << "the adopted slot's verify applied steps of its previous life";
    EXPECT_TRUE(same_bytes(exported(p, a), exported(ref, r))) << "the committed state";
  });
}

// An owning pool's release() then adopt() of the slot (a preempted request resumed from its slot,
// docs/lifecycle.md) gives the committed state under every strategy: replay's release left the
// last checkpoint without the steps accepted since (the memory lagged), so replay resumed from
// another state than snapshot.
TEST_P(HostileRound3, OwningReleaseThenAdoptResumesTheCommittedState) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    PoolRounds<Kind> m(g, kLayers, 0xB4);
    StatePool p = m.pool(c.strategy, kSlots, kRows, kRoundT);
    StatePool ref = m.pool(Strategy::kSnapshot, kSlots, kRows, kRoundT);
    SlotHandle h = p.acquire(), r = ref.acquire();
    const auto pre = m.inputs(4);
    m.prefill(p, h, pre);
    m.prefill(ref, r, pre);
    for (int k = 0; k < 3; ++k) {
      const auto in = m.inputs(kRoundT);
      m.round(p, round_batch(false, {h}), in, round_accept(false, {2 + k % 2}));
      m.round(ref, round_batch(false, {r}), in, round_accept(false, {2 + k % 2}));
    }
    const std::vector<uint8_t> want = exported(ref, r);
    expect_nonzero(want, "the committed state");  // equal zeros would prove nothing
    const int slot = p.slot_index(h);
    p.release(h);
    ref.release(r);
    EXPECT_TRUE(same_bytes(slot_bytes(p, slot), want)) << "the released slot's memory";
    h = p.adopt(slot);
    r = ref.adopt(slot);
    ASSERT_TRUE(same_bytes(exported(p, h), want)) << "the adopted state";
    const auto in = m.inputs(kRoundT);
    const auto out_p = m.round(p, round_batch(false, {h}), in, round_accept(false, {3}));
    const auto out_r = m.round(ref, round_batch(false, {r}), in, round_accept(false, {3}));
    EXPECT_TRUE(same_bytes(PoolRounds<Kind>::output_bytes(out_p, 0, kRoundT),
                           PoolRounds<Kind>::output_bytes(out_r, 0, kRoundT)));
    expect_nonzero(PoolRounds<Kind>::output_bytes(out_r, 0, kRoundT), "the outputs");
    EXPECT_TRUE(same_bytes(exported(p, h), exported(ref, r)));
  });
}

// A view's device outside the enum is named with its value (it was described as "cpu", and a
// commit's as "cuda"), and the call changes nothing.
TEST(HostileRound3Views, ADeviceOutsideTheEnumIsNamedWithItsValue) {
  PoolRounds<GdnKind> m(gdn_preset("small_f32"), 1, 5);
  StatePool pool = m.pool(Strategy::kReplay);
  const SlotHandle h = pool.acquire();
  const auto in = m.inputs(2);
  const auto out = m.outputs(2);
  GdnWeights w = m.weights(0);
  w.A_log.device = static_cast<Device>(7);
  const std::vector<uint8_t> before = exported(pool, h);
  expect_rejected(
      [&] { pool.prefill(0, h, w, GdnKind::put(in[0], host_put), GdnKind::put(out[0], host_put)); },
      Status::kInvalidArgument, {"weights.A_log.device = 7 is not a device"});
  EXPECT_EQ(exported(pool, h), before);
  pool.begin_verify(round_batch(false, {h}));
  const auto in4 = m.inputs(kRoundT);
  auto out4 = m.outputs(kRoundT);
  pool.verify(0, m.weights(0), GdnKind::put(in4[0], host_put), GdnKind::put(out4[0], host_put));
  std::vector<int32_t> accepted = {2};
  TensorView view = TensorView::contiguous(accepted.data(), DType::kI32, {1});
  view.device = static_cast<Device>(3);
  expect_rejected([&] { pool.commit(view); }, Status::kInvalidArgument,
                  {"accepted.device = 3 is not a device"});
  EXPECT_NE(view.describe().find("device 3"), std::string::npos) << view.describe();
  pool.commit(accepted);  // the round is still open: nothing changed
}

// --- c. a rejected export_slot(path) changes nothing --------------------------------------------

TEST_P(HostileRound3, ExportToAnUnwritablePathChangesNoByte) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    TwoPools<Kind> t(g, c.strategy, 0xC3);
    t.rounds(3);
    if (HasFatalFailure()) return;
    const std::vector<uint8_t> before = caller_bytes(*t.mem, t.cm);
    const std::string path = "/nonexistent_dir/x.bin";
    expect_rejected([&] { t.subject.export_slot(t.hs[0], path); }, Status::kInvalidArgument,
                    {"StatePool::export_slot", path, "cannot write"});
    const std::vector<uint8_t> after = caller_bytes(*t.mem, t.cm);
    EXPECT_TRUE(same_bytes(after, before)) << "a rejected export wrote the pool's memory";
    // No bookkeeping changed either: the rounds go on in step with the reference.
    t.rounds(2);
    if (HasFatalFailure()) return;
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(same_bytes(exported(t.subject, t.hs[i]), exported(t.ref, t.hr[i])))
          << "request " << i;
    }
  });
}

// --- d. errors name the function the caller called ----------------------------------------------

TEST_P(HostileRound3, ForkOnAFullPoolAndImportFileErrorsNameTheirFunction) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    PoolRounds<Kind> m(g, kLayers, 0xD4);
    StatePool p = m.pool(c.strategy, kSlots, kRows, kRoundT);
    std::vector<SlotHandle> all;
    for (int i = 0; i < kSlots; ++i) all.push_back(p.acquire());
    m.prefill(p, all[0], m.inputs(2));
    const std::vector<uint8_t> state = exported(p, all[0]);
    expect_rejected([&] { p.fork(all[0]); }, Status::kResourceExhausted,
                    {"StatePool::fork", "src = {slot 0"});
    EXPECT_EQ(p.free_slots(), 0);
    EXPECT_TRUE(same_bytes(exported(p, all[0]), state));

    const std::string missing = "/nonexistent_dir/x.bin";
    expect_rejected([&] { p.import_slot(all[1], missing); }, Status::kInvalidArgument,
                    {"StatePool::import_slot", missing});
    // A file that is not safetensors.
    const std::string junk = ::testing::TempDir() + "specstate_round3_junk.bin";
    std::FILE* f = std::fopen(junk.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("not a safetensors file", f);
    std::fclose(f);
    expect_rejected([&] { p.import_slot(all[1], junk); }, Status::kInvalidArgument,
                    {"StatePool::import_slot", junk});
    std::remove(junk.c_str());
  });
}

// --- e. a pool of INT_MAX slots ------------------------------------------------------------------

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST_P(HostileRound3, PoolOfIntMaxSlotsIsRefusedQuicklyWithoutPerSlotStructures) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    PoolRounds<Kind> m(g, kLayers, 0xE5);
    PoolOptions o = m.options(c.strategy, kSlots, kRows, kRoundT);
    o.num_slots = INT_MAX;
    const long rss0 = peak_rss_kib();
    const auto start = std::chrono::steady_clock::now();
    try {
      StatePool pool(m.model(), o);
      ADD_FAILURE() << "a pool of INT_MAX slots was built";
    } catch (const Error& e) {
      const bool named = std::string(e.what()).find("num_slots") != std::string::npos;
      EXPECT_TRUE(e.status() == Status::kResourceExhausted ||
                  (e.status() == Status::kInvalidArgument && named))
          << e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 0.5) << "refusing the pool took " << seconds << " s";
    const long grown_mib = (peak_rss_kib() - rss0) / 1024;
    EXPECT_LT(grown_mib, 64) << "refusing the pool grew the peak memory by " << grown_mib << " MiB";
  });
}

// A pool's memory and bookkeeping still grow only with the slots it uses: a large pool of a
// tiny state hands out, frees and re-hands slots lowest first, generations intact.
TEST(HostileRound3Allocator, LargePoolHandsOutLowestSlotsAndKeepsGenerations) {
  GdnConfig g = gdn_preset("small_f32");
  PoolOptions o;
  o.num_slots = 1 << 16;
  o.max_rows = 2;
  o.max_window = 2;
  StatePool p(ModelConfig::gated_delta_net(1, g), o);
  EXPECT_EQ(p.free_slots(), 1 << 16);
  const SlotHandle a = p.acquire(), b = p.acquire();
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(b.slot, 1);
  const SlotHandle far = p.adopt(1000);  // slots 2..999 stay free
  EXPECT_EQ(p.free_slots(), (1 << 16) - 3);
  p.release(a);
  EXPECT_EQ(p.acquire().slot, 0);
  EXPECT_FALSE(p.is_live(a));  // the old generation is stale
  EXPECT_EQ(p.acquire().slot, 2);
  p.release(far);
  const SlotHandle again = p.adopt(1000);
  EXPECT_NE(again.generation, far.generation);
  expect_rejected([&] { p.slot_index(far); }, Status::kFailedPrecondition, {"stale"});
  expect_rejected([&] { p.adopt(1000); }, Status::kFailedPrecondition, {"is live"});
  EXPECT_EQ(p.free_slots(), (1 << 16) - 4);
}

// A handle the pool never issued (forged, corrupted) was called released or stale: each reason
// now follows the slot's generation, and every one is kFailedPrecondition naming the argument.
TEST(HostileRound3Allocator, AHandleIsRefusedWithTheReasonItsGenerationGives) {
  PoolOptions o;
  o.num_slots = 4;
  StatePool p(ModelConfig::gated_delta_net(1, gdn_preset("small_f32")), o);
  const SlotHandle a = p.acquire();  // slot 0, generation 1
  const uint64_t id = a.pool_id;
  const auto reason = [&](SlotHandle h, const std::vector<std::string>& want) {
    expect_rejected([&] { p.slot_index(h); }, Status::kFailedPrecondition, want);
    expect_rejected(
        [&] {
          p.begin_verify(VerifyBatch{{h}, 1, {}});
        },
        Status::kFailedPrecondition, {"rows[0]"});
  };
  reason(SlotHandle{3, 0, id},
         {"handle = {slot 3, generation 0", "was never issued", "the slot was never acquired"});
  reason(SlotHandle{3, 1, id}, {"was never issued: the slot was never acquired"});
  reason(SlotHandle{0, 7, id}, {"was never issued: the slot is at generation 1"});
  reason(SlotHandle{0, 0, id}, {"was never issued: the slot is at generation 1"});  // 0: none
  p.release(a);
  reason(a, {"is not live: the slot was released"});
  const SlotHandle b = p.acquire();  // slot 0 again, generation 2
  ASSERT_EQ(b.slot, 0);
  reason(a, {"is stale: the slot was released and acquired again (generation 2)"});
  p.release(b);
  reason(a, {"is stale: the slot was released, acquired again and released (generation 2)"});
  reason(b, {"is not live: the slot was released"});
  EXPECT_FALSE(p.round_open());
}

// --- f. misaligned views --------------------------------------------------------------------

// A copy of `v`'s bytes at `offset` bytes past an aligned address (the view then breaks its
// dtype's alignment for an odd offset); the storage lives in `keep`.
TensorView shifted(const TensorView& v, int offset, std::vector<uint64_t>& keep) {
  const std::size_t bytes = static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype);
  keep.assign(bytes / 8 + 2, 0);
  char* base = reinterpret_cast<char*>(keep.data()) + offset;
  std::memcpy(base, v.data, bytes);
  TensorView out = v;
  out.data = base;
  return out;
}

template <typename Kind>
TensorView& token_input(typename Kind::Inputs& in);
template <>
TensorView& token_input<GdnKind>(GdnInputs& in) {
  return in.mixed_qkv;
}
template <>
TensorView& token_input<Mamba2Kind>(Mamba2Inputs& in) {
  return in.xBC;
}
template <>
TensorView& token_input<KdaKind>(KdaInputs& in) {
  return in.mixed_qkv;
}

template <typename Kind>
TensorView& main_output(typename Kind::Outputs& out);
template <>
TensorView& main_output<GdnKind>(GdnOutputs& out) {
  return out.core_out;
}
template <>
TensorView& main_output<Mamba2Kind>(Mamba2Outputs& out) {
  return out.y;
}
template <>
TensorView& main_output<KdaKind>(KdaOutputs& out) {
  return out.core_out;
}

TEST_P(HostileRound3, MisalignedViewsAreRejectedNamingTheView) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    const bool m2 = Kind::kKind == LayerKind::kMamba2;  // GDN and KDA name theirs alike
    const std::string input_name = m2 ? "inputs.xBC" : "inputs.mixed_qkv";
    const std::string output_name = m2 ? "outputs.y" : "outputs.core_out";
    PoolRounds<Kind> m(g, kLayers, 0xF6);
    StatePool p = m.pool(c.strategy, kSlots, kRows, kRoundT);
    const SlotHandle h = p.acquire();
    m.prefill(p, h, m.inputs(2));
    const std::vector<uint8_t> state = exported(p, h);
    auto host_in = m.inputs(2);
    auto host_out = m.outputs(2);
    typename Kind::Inputs in = Kind::put(host_in[0], host_put);
    typename Kind::Outputs out = Kind::put(host_out[0], host_put);
    std::vector<uint64_t> keep;
    {  // the token input at +1 byte (bf16 activations: 2-byte alignment broken)
      typename Kind::Inputs bad = in;
      TensorView& x = token_input<Kind>(bad);
      x = shifted(x, 1, keep);
      expect_rejected([&] { p.prefill(0, h, m.weights(0), bad, out); }, Status::kInvalidArgument,
                      {"StatePool::prefill", input_name,
                       "% " + std::to_string(dtype_size(x.dtype)) + " = 1", "aligned"});
    }
    {  // the main output at half its element size (f32 at +2, bf16 at +1)
      typename Kind::Outputs bad = out;
      TensorView& y = main_output<Kind>(bad);
      const auto size = static_cast<int>(dtype_size(y.dtype));
      y = shifted(y, size / 2, keep);
      expect_rejected([&] { p.prefill(0, h, m.weights(0), in, bad); }, Status::kInvalidArgument,
                      {output_name, "% " + std::to_string(size) + " = " + std::to_string(size / 2),
                       std::to_string(size) + "-byte aligned"});
    }
    EXPECT_TRUE(same_bytes(exported(p, h), state)) << "a rejected call changed the state";
    {  // an i32 accepted view at +1 byte
      p.begin_verify(round_batch(false, {h}));
      auto vin = m.inputs(kRoundT);
      auto vout = m.outputs(kRoundT);
      m.verify(p, vin, vout, 0, kLayers);
      std::vector<int32_t> accepted = {2};
      const TensorView good = TensorView::contiguous(accepted.data(), DType::kI32, {1});
      const TensorView bad = shifted(good, 1, keep);
      expect_rejected([&] { p.commit(bad); }, Status::kInvalidArgument,
                      {"StatePool::commit", "accepted", "% 4 = 1"});
      EXPECT_TRUE(p.round_open());
      p.commit(good);
    }
  });
}

TEST(HostileRound3Views, MisalignedCallerOwnedViewIsRejectedNamingIt) {
  auto mem = host_memory();
  for (const char* preset : {"small_bf16", "m2_small_f32"}) {
    SCOPED_TRACE(preset);
    for_kind(preset, [&](auto kind, const auto& g) {
      using Kind = decltype(kind);
      PoolRounds<Kind> m(g, kLayers, 7);
      const PoolOptions o = m.options(Strategy::kReplay, kSlots, kRows, kRoundT);
      const CallerMemory cm = make_caller_memory(m.model(), o, CallerLayout::kOneTensor, *mem, 3);
      {
        CommittedStateViews v = cm.views;  // inside the padding after each slot: no overlap
        v.conv[1].data = static_cast<char*>(v.conv[1].data) + 1;
        expect_rejected([&] { StatePool pool(m.model(), o, v); }, Status::kInvalidArgument,
                        {"committed.conv[1]", "aligned"});
      }
      {
        CommittedStateViews v = cm.views;
        v.ssm[0].data = static_cast<char*>(v.ssm[0].data) + 2;  // f32 SSM state at +2
        expect_rejected([&] { StatePool pool(m.model(), o, v); }, Status::kInvalidArgument,
                        {"committed.ssm[0]", "% 4 = 2"});
      }
    });
  }
}

// --- g. vLLM v1's hybrid layout: conv and SSM state of a slot interleaved page by page ---------

// One buffer per layer of `slots` pages; page p = [conv state of slot p | pad | SSM state of
// slot p | pad]. Both views of a layer have the page as their slot stride.
struct PagedMemory {
  std::vector<std::vector<uint64_t>> pages;  // [L] buffers
  CommittedStateViews views;
  int64_t page_bytes = 0, ssm_at = 0, conv_bytes = 0, ssm_bytes = 0;

  // `ssm_at` < 0: after the conv state, 16-byte aligned (the real layout); otherwise at that
  // byte of the page (to build overlapping layouts). `ssm_stride_pages`: the SSM view's slot
  // stride in pages.
  PagedMemory(const StatePool& probe, int slots, int64_t ssm_at_bytes = -1,
              int64_t ssm_stride_pages = 1) {
    const TensorView c = probe.conv_state(0), s = probe.ssm_state(0);
    const auto ce = static_cast<int64_t>(dtype_size(c.dtype));
    const auto se = static_cast<int64_t>(dtype_size(s.dtype));
    conv_bytes = c.numel() / c.shape[0] * ce;
    ssm_bytes = s.numel() / s.shape[0] * se;
    auto up = [](int64_t x) { return (x + 15) / 16 * 16; };
    ssm_at = ssm_at_bytes >= 0 ? ssm_at_bytes : up(conv_bytes);
    page_bytes = up(ssm_at + ssm_bytes) + 32;  // padding at the end of every page
    const int layers = probe.config().num_layers;
    std::mt19937_64 rng(11);
    for (int l = 0; l < layers; ++l) {
      const int64_t total = page_bytes * slots * ssm_stride_pages + 64;
      pages.emplace_back(static_cast<std::size_t>(total / 8 + 1));
      for (uint64_t& w : pages.back()) w = rng() | 0x0101010101010101ull;  // a sentinel
      char* base = reinterpret_cast<char*>(pages.back().data());
      TensorView cv = c, sv = s;
      cv.data = base;
      cv.device = sv.device = Device::kCpu;
      cv.shape[0] = sv.shape[0] = slots;
      cv.stride[0] = page_bytes / ce;
      sv.data = base + ssm_at;
      sv.stride[0] = page_bytes * ssm_stride_pages / se;
      views.conv.push_back(cv);
      views.ssm.push_back(sv);
    }
  }

  const uint8_t* page(int layer, int slot) const {
    return reinterpret_cast<const uint8_t*>(pages[static_cast<std::size_t>(layer)].data()) +
           slot * page_bytes;
  }
};

StatePool probe_pool(const ModelConfig& model) {
  PoolOptions o;
  o.num_slots = 1;
  o.max_rows = 1;
  o.max_window = 1;
  return StatePool(model, o);
}

class VllmPaged : public ::testing::TestWithParam<Case> {};

TEST_P(VllmPaged, InterleavedPagesAreAdoptedAndBitIdenticalToAnOwningPool) {
  const Case& c = GetParam();
  for_case(c, [&](auto kind, const auto& g) {
    using Kind = decltype(kind);
    PoolRounds<Kind> m(g, kLayers, 0x9A);
    const PoolOptions o = m.options(c.strategy, kSlots, kRows, kRoundT);
    const StatePool probe = probe_pool(m.model());
    PagedMemory pm(probe, kSlots);
    std::vector<std::vector<uint64_t>> sentinel = pm.pages;
    StatePool paged(m.model(), o, pm.views);  // rejected as "overlaps" before the fix
    StatePool own(m.model(), o);
    std::mt19937_64 rng(0x9A);
    std::vector<SlotHandle> hp, ho;
    auto arrive = [&] {
      hp.push_back(paged.acquire());
      ho.push_back(own.acquire());
      ASSERT_EQ(hp.back().slot, ho.back().slot);
      const auto in = m.inputs(1 + static_cast<int64_t>(rng() % 4));
      m.prefill(paged, hp.back(), in);
      m.prefill(own, ho.back(), in);
    };
    for (int i = 0; i < 3; ++i) arrive();
    for (int round = 0; round < 8; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const bool tree = round % 3 == 2;
      VerifyBatch bp = round_batch(tree, {}), bo = round_batch(tree, {});
      std::vector<int> steps;
      for (std::size_t i = 0; i < hp.size() && bp.rows.size() < kRows; ++i) {
        if (round % 4 == 1 && bp.rows.empty()) {  // a padding row
          bp.rows.push_back(SlotHandle::padding());
          bo.rows.push_back(SlotHandle::padding());
          steps.push_back(0);
        }
        bp.rows.push_back(hp[i]);
        bo.rows.push_back(ho[i]);
        steps.push_back(static_cast<int>(rng() % (kRoundT + 1)));
      }
      const int64_t n = static_cast<int64_t>(bp.rows.size()) * kRoundT;
      const auto in = m.inputs(n);
      const auto accepted = round_accept(tree, steps);
      const auto out_p = m.round(paged, bp, in, accepted);
      const auto out_o = m.round(own, bo, in, accepted);
      ASSERT_TRUE(same_bytes(PoolRounds<Kind>::output_bytes(out_p, 0, n),
                             PoolRounds<Kind>::output_bytes(out_o, 0, n)));
      if (round == 4) {  // a request ends, another arrives in its slot
        paged.release(hp[1]);
        own.release(ho[1]);
        hp.erase(hp.begin() + 1);
        ho.erase(ho.begin() + 1);
        arrive();
      }
    }
    paged.materialize();
    for (std::size_t i = 0; i < hp.size(); ++i) {
      const std::vector<uint8_t> want = exported(own, ho[i]);
      ASSERT_TRUE(same_bytes(exported(paged, hp[i]), want)) << "request " << i;
      // The caller's pages hold exactly that state.
      std::size_t at = 0;
      for (int l = 0; l < kLayers; ++l) {
        const uint8_t* page = pm.page(l, hp[i].slot);
        EXPECT_EQ(0, std::memcmp(page, want.data() + at, pm.conv_bytes))
            << "layer " << l << " slot " << hp[i].slot << " conv state in the page";
        at += static_cast<std::size_t>(pm.conv_bytes);
        EXPECT_EQ(0, std::memcmp(page + pm.ssm_at, want.data() + at, pm.ssm_bytes))
            << "layer " << l << " slot " << hp[i].slot << " SSM state in the page";
        at += static_cast<std::size_t>(pm.ssm_bytes);
      }
    }
    // Bytes of no state (the padding inside and after every page) keep the sentinel.
    for (int l = 0; l < kLayers; ++l) {
      const auto* now = reinterpret_cast<const uint8_t*>(pm.pages[l].data());
      const auto* was = reinterpret_cast<const uint8_t*>(sentinel[l].data());
      for (int64_t b = 0; b < static_cast<int64_t>(pm.pages[l].size() * 8); ++b) {
        const int64_t in_page = b % pm.page_bytes;
        const bool state = b < pm.page_bytes * kSlots &&
                           (in_page < pm.conv_bytes ||
                            (in_page >= pm.ssm_at && in_page < pm.ssm_at + pm.ssm_bytes));
        if (!state) ASSERT_EQ(now[b], was[b]) << "layer " << l << " padding byte " << b;
      }
    }
  });
}

TEST(VllmPagedBadInput, TrulyOverlappingLayoutsAreStillRejected) {
  for (const char* preset : {"small_bf16", "m2_small_bf16"}) {
    SCOPED_TRACE(preset);
    for_kind(preset, [&](auto kind, const auto& g) {
      using Kind = decltype(kind);
      PoolRounds<Kind> m(g, kLayers, 5);
      const PoolOptions o = m.options(Strategy::kReplay, kSlots, kRows, kRoundT);
      const StatePool probe = probe_pool(m.model());
      {  // the SSM state starts 4 bytes before the conv state ends: every page overlaps
        PagedMemory pm(probe, kSlots);
        PagedMemory bad(probe, kSlots, pm.conv_bytes - 4);
        expect_rejected([&] { StatePool pool(m.model(), o, bad.views); }, Status::kInvalidArgument,
                        {"committed.ssm[0] overlaps committed.conv[0]", "slot 0"});
      }
      {  // two layers' views on one buffer of pages
        PagedMemory pm(probe, kSlots);
        CommittedStateViews v = pm.views;
        v.conv[1] = v.conv[0];
        expect_rejected([&] { StatePool pool(m.model(), o, v); }, Status::kInvalidArgument,
                        {"committed.conv[1] overlaps committed.conv[0]"});
      }
      {  // other strides: the SSM view strides two pages from page 1's conv state on
        PagedMemory pm(probe, kSlots, /*ssm_at_bytes=*/-1, /*ssm_stride_pages=*/2);
        CommittedStateViews v = pm.views;
        v.ssm[0].data = static_cast<char*>(v.conv[0].data) + pm.page_bytes;  // page 1's conv
        expect_rejected([&] { StatePool pool(m.model(), o, v); }, Status::kInvalidArgument,
                        {"committed.ssm[0] overlaps committed.conv[0]", "slot 1"});
      }
      {  // other strides, interleaved without a shared byte: accepted
        PagedMemory pm(probe, kSlots, /*ssm_at_bytes=*/-1, /*ssm_stride_pages=*/2);
        StatePool pool(m.model(), o, pm.views);
        EXPECT_EQ(pool.free_slots(), kSlots);
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, HostileRound3, ::testing::ValuesIn(kCases), case_name);
INSTANTIATE_TEST_SUITE_P(Cpu, VllmPaged, ::testing::ValuesIn(kCases), case_name);

}  // namespace
}  // namespace specstate::test
