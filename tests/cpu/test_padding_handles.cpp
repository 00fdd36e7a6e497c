// Padding handles (issue 17): SlotHandle::padding() given to a call that takes one request's
// handle is named as such ("handle is a padding handle: prefill needs a live request"), not as a
// handle of another pool, for every layer kind and both strategies; each rejected call changes
// nothing (bit-exact against a twin pool that never saw it).
#include <gtest/gtest.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/expect.h"
#include "common/kind_cases.h"
#include "common/pool_rounds.h"
#include "common/twin_pools.h"

namespace specstate::test {
namespace {

using CheckCase = KindCase;

const std::vector<KindCase>& cases() { return kind_dtype_strategy_cases(); }

constexpr int kLayers = 2;
constexpr int kT = kRoundT;

class PaddingHandle : public ::testing::TestWithParam<CheckCase> {};

TEST_P(PaddingHandle, IsNamedAsPaddingByEveryCallThatTakesOneRequest) {
  const CheckCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1701);
    // Replay: one committed round leaves pending steps, which a wrongly accepted call would run.
    Twins<Kind> twins(r, c, 1);
    StatePool& p = twins.p;
    const SlotHandle h = twins.hp[0];

    const int64_t words = (p.slot_state_bytes() + 3) / 4;
    std::vector<int32_t> buf(static_cast<std::size_t>(words));
    const TensorView bv = TensorView::contiguous(buf.data(), DType::kI32, {words});
    const std::string path = ::testing::TempDir() + "specstate_padding_" + c.name + ".safetensors";
    std::remove(path.c_str());
    const auto one = r.inputs(1);
    auto outs = r.outputs(1);
    // Both spellings of a padding handle: the default one (pool id 0) and slot -1 carrying this
    // pool's id.
    SlotHandle own_padding = SlotHandle::padding();
    own_padding.pool_id = h.pool_id;
    for (const SlotHandle pad : {SlotHandle::padding(), own_padding}) {
      SCOPED_TRACE("pool id " + std::to_string(pad.pool_id));
      const std::vector<std::pair<std::string, std::function<void()>>> calls = {
          {"handle is a padding handle: prefill needs a live request",
           [&] {
             p.prefill(0, pad, r.weights(0), Kind::put(one[0], host_put),
                       Kind::put(outs[0], host_put));
           }},
          {"handle is a padding handle: release needs a live request", [&] { p.release(pad); }},
          {"handle is a padding handle: slot_index needs a live request",
           [&] { p.slot_index(pad); }},
          {"handle is a padding handle: conv_state needs a live request",
           [&] { p.conv_state(0, pad); }},
          {"handle is a padding handle: ssm_state needs a live request",
           [&] { p.ssm_state(1, pad); }},
          {"src is a padding handle: copy_slot needs a live request", [&] { p.copy_slot(pad, h); }},
          {"dst is a padding handle: copy_slot needs a live request", [&] { p.copy_slot(h, pad); }},
          {"src is a padding handle: fork needs a live request", [&] { p.fork(pad); }},
          {"handle is a padding handle: reset needs a live request", [&] { p.reset(pad); }},
          {"handle is a padding handle: export_slot needs a live request",
           [&] { p.export_slot(pad, bv); }},
          {"handle is a padding handle: import_slot needs a live request",
           [&] { p.import_slot(pad, bv); }},
          {"handle is a padding handle: export_slot needs a live request",
           [&] { p.export_slot(pad, path); }},
          {"handle is a padding handle: import_slot needs a live request",
           [&] { p.import_slot(pad, path); }},
          {"handles[1] is a padding handle: materialize needs a live request",
           [&] {
             p.materialize({h, pad});
           }},
      };
      for (const auto& call : calls) {
        SCOPED_TRACE(call.first);
        expect_rejected(call.second, Status::kInvalidArgument, {"StatePool::", call.first});
      }
    }
    EXPECT_FALSE(std::ifstream(path).good()) << "export_slot(padding, path) wrote " << path;
    EXPECT_EQ(p.free_slots(), twins.ref.free_slots());
    EXPECT_TRUE(p.is_live(h));
    twins.expect_same_state("after the rejected calls");
    // The request goes on exactly like its twin.
    twins.expect_same_next_round({3});
  });
}

// Only slot -1 is padding: a batch row of another negative slot (a corrupted handle) was taken as
// padding, so decode skipped the row and left its output unwritten, and begin_verify opened a
// round with the row sitting out. It is now rejected by name, changing nothing.
TEST_P(PaddingHandle, ANegativeSlotOtherThanMinusOneIsACorruptHandleNotPadding) {
  const CheckCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1702);
    Twins<Kind> twins(r, c, 1);
    StatePool& p = twins.p;
    const SlotHandle h = twins.hp[0];
    for (const int32_t slot : {-7, -2, INT32_MIN}) {
      const SlotHandle bad{slot, 3, h.pool_id};
      SCOPED_TRACE("slot " + std::to_string(slot));
      EXPECT_FALSE(bad.is_padding());
      const auto two = r.inputs(2);
      auto outs = r.outputs(2);
      expect_rejected(
          [&] {
            p.decode(0, {h, bad}, r.weights(0), Kind::put(two[0], host_put),
                     Kind::put(outs[0], host_put));
          },
          Status::kOutOfRange, {"StatePool::decode", "rows[1] = ", "slot outside [0, "});
      expect_rejected(
          [&] {
            p.begin_verify(twins.batch({bad, h}));
          },
          Status::kOutOfRange, {"StatePool::begin_verify", "rows[0] = ", "slot outside [0, "});
      expect_rejected([&] { p.release(bad); }, Status::kOutOfRange,
                      {"StatePool::release", "slot outside [0, "});
    }
    EXPECT_TRUE((SlotHandle{-1, 5, h.pool_id}.is_padding()));
    EXPECT_FALSE(p.round_open());
    twins.expect_same_state("after the rejected calls");
    twins.expect_same_next_round({2});
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, PaddingHandle, ::testing::ValuesIn(cases()), kind_case_name);

}  // namespace
}  // namespace specstate::test
