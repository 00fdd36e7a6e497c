// Outputs that share memory with a layer call's inputs (issue 17), for every layer kind and both
// strategies: prefill (single and batched), decode and verify reject an output over one of their
// inputs, their weights or their other output, and an input or a weight over the pool's own
// memory, naming the views, and change nothing (bit-exact against a twin pool that never saw the
// calls); views that interleave token by token in one
// buffer share no byte and are accepted, bit-identical to separate buffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/expect.h"
#include "common/kind_cases.h"
#include "common/pool_rounds.h"
#include "common/slot_cases.h"
#include "common/twin_pools.h"

namespace specstate::test {
namespace {

using CheckCase = KindCase;

const std::vector<KindCase>& cases() { return kind_dtype_strategy_cases(); }

constexpr int kLayers = 2;
constexpr int kT = kRoundT;

// Per kind: the token input whose rows are the tokens and the main output, with their names.
TensorView& main_input(GdnInputs& in) { return in.mixed_qkv; }
TensorView& main_input(Mamba2Inputs& in) { return in.xBC; }
TensorView& main_output(GdnOutputs& out) { return out.core_out; }
TensorView& main_output(Mamba2Outputs& out) { return out.y; }
const char* main_input_name(GdnKind) { return "inputs.mixed_qkv"; }
const char* main_input_name(Mamba2Kind) { return "inputs.xBC"; }
const char* main_output_name(GdnKind) { return "outputs.core_out"; }
const char* main_output_name(Mamba2Kind) { return "outputs.y"; }
TensorView& main_input(KdaInputs& in) { return in.mixed_qkv; }
TensorView& main_output(KdaOutputs& out) { return out.core_out; }
const char* main_input_name(KdaKind) { return "inputs.mixed_qkv"; }
const char* main_output_name(KdaKind) { return "outputs.core_out"; }

// A view of `like`'s shape and dtype (contiguous) laid over `at`'s memory.
TensorView over(const TensorView& at, const TensorView& like) {
  TensorView v = like;
  v.data = at.data;
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.stride[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

class OutputOverlap : public ::testing::TestWithParam<CheckCase> {};

// Each layer call with an output over an input, over a weight and over its other output: all
// rejected (naming both views), nothing changed, the open round still verifies and commits.
TEST_P(OutputOverlap, PrefillDecodeAndVerifyRejectOutputsSharingMemoryWithTheirInputs) {
  const CheckCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1702);
    Twins<Kind> twins(r, c, 1);
    StatePool& p = twins.p;
    const SlotHandle h = twins.hp[0];

    const char* in_name = main_input_name(Kind{});
    const char* out_name = main_output_name(Kind{});
    // Runs `call(inputs, outputs)` with each overlapping variant of n tokens' views.
    auto each_overlap =
        [&](const char* fn, int64_t n,
            const std::function<void(const typename Kind::Inputs&, const typename Kind::Outputs&)>&
                call) {
          const auto in = r.inputs(n);
          auto host_out = r.outputs(n);
          const typename Kind::Inputs iv = Kind::put(in[0], host_put);
          const typename Kind::Outputs ov = Kind::put(host_out[0], host_put);
          typename Kind::Inputs iv_copy = iv;
          {  // conv_out is the input itself (same shape and dtype)
            typename Kind::Outputs o = ov;
            o.conv_out = main_input(iv_copy);
            expect_rejected([&] { call(iv, o); }, Status::kInvalidArgument,
                            {fn, "outputs.conv_out", std::string("overlaps ") + in_name});
          }
          {  // the main output laid over the input's first bytes
            typename Kind::Outputs o = ov;
            main_output(o) = over(main_input(iv_copy), main_output(o));
            expect_rejected([&] { call(iv, o); }, Status::kInvalidArgument,
                            {fn, out_name, std::string("overlaps ") + in_name});
          }
          {  // the main output over the conv weights every token reads
            typename Kind::Outputs o = ov;
            main_output(o) = over(r.weights(0).conv_weight, main_output(o));
            expect_rejected([&] { call(iv, o); }, Status::kInvalidArgument,
                            {fn, out_name, "overlaps weights.conv_weight"});
          }
          {  // the main output broadcast along its heads (stride 0): its own elements overlap
            typename Kind::Outputs o = ov;
            main_output(o).stride[1] = 0;
            expect_rejected(
                [&] { call(iv, o); }, Status::kInvalidArgument,
                {fn, out_name, "stride 1 = 0 along", "an output's elements must not share memory"});
          }
          {  // the main output over too little memory (torch's / numpy's as_strided): its heads'
             // rows one element apart, so head h's element v is head h + 1's element v - 1
            typename Kind::Outputs o = ov;
            main_output(o).stride[1] = 1;
            expect_rejected([&] { call(iv, o); }, Status::kInvalidArgument,
                            {fn, out_name, "stride 1 = 1 is less than the",
                             "an output's elements must not share memory"});
          }
          {  // the two outputs over each other
            typename Kind::Outputs o = ov;
            main_output(o) = over(o.conv_out, main_output(o));
            expect_rejected([&] { call(iv, o); }, Status::kInvalidArgument,
                            {fn, "outputs.conv_out", std::string("overlaps ") + out_name});
          }
          {  // the main input over the pool's committed conv state (a row's advance would rewrite
             // what a later row reads)
            typename Kind::Inputs i = iv;
            main_input(i) = over(p.conv_state(0), main_input(i));
            expect_rejected([&] { call(i, ov); }, Status::kInvalidArgument,
                            {fn, in_name, "overlaps the pool's", "must be the caller's own"});
          }
        };
    each_overlap("StatePool::prefill", 3,
                 [&](const auto& in, const auto& out) { p.prefill(0, h, r.weights(0), in, out); });
    each_overlap("StatePool::prefill", 3, [&](const auto& in, const auto& out) {
      p.prefill(0, std::vector<SlotHandle>{h}, std::vector<int32_t>{3}, r.weights(0), in, out);
    });
    each_overlap("StatePool::decode", 1,
                 [&](const auto& in, const auto& out) { p.decode(0, {h}, r.weights(0), in, out); });
    {  // a weight over the pool's committed SSM state
      const auto in1 = r.inputs(1);
      auto out1 = r.outputs(1);
      auto w = r.weights(0);
      w.conv_weight = over(p.ssm_state(0), w.conv_weight);
      expect_rejected(
          [&] { p.decode(0, {h}, w, Kind::put(in1[0], host_put), Kind::put(out1[0], host_put)); },
          Status::kInvalidArgument,
          {"StatePool::decode", "weights.conv_weight", "overlaps the pool's"});
    }
    const auto in = r.inputs(kT);
    p.begin_verify(round_batch(false, {h}));
    each_overlap("StatePool::verify", kT,
                 [&](const auto& vin, const auto& out) { p.verify(0, r.weights(0), vin, out); });
    twins.expect_same_state("after the rejected calls");
    // The round is still open and unverified: it verifies and commits like the twin's.
    auto out_p = r.outputs(kT);
    r.verify(p, in, out_p, 0, kLayers);
    p.commit(round_accept(false, {3}));
    twins.expect_same_round(in, out_p, {3});
  });
}

// An input's columns and an output's columns of one token-major buffer: the spans overlap, the
// bytes do not, so prefill and verify accept them and compute what separate buffers give.
TEST_P(OutputOverlap, ViewsInterleavedTokenByTokenInOneBufferAreAccepted) {
  const CheckCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1703);
    StatePool p = r.pool(c.strategy), ref = r.pool(c.strategy);
    const SlotHandle h = p.acquire(), hr = ref.acquire();
    // Per layer: [n, in_cols + out_cols] with the main input first and the main output after.
    auto packed_call = [&](int64_t n, const std::vector<typename Kind::HostInputs>& in,
                           const std::function<void(int, const typename Kind::Inputs&,
                                                    const typename Kind::Outputs&)>& call) {
      std::vector<typename Kind::HostOutputs> got = r.outputs(n);
      for (int l = 0; l < kLayers; ++l) {
        typename Kind::Inputs iv = Kind::put(in[l], host_put);
        typename Kind::Outputs ov = Kind::put(got[l], host_put);
        const TensorView x = main_input(iv), y = main_output(ov);
        const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
        const int64_t in_cols = x.shape[1], out_cols = y.numel() / n, cols = in_cols + out_cols;
        std::vector<uint8_t> packed(static_cast<std::size_t>(n * cols * es), 0);
        for (int64_t t = 0; t < n; ++t) {
          std::memcpy(packed.data() + t * cols * es,
                      static_cast<const uint8_t*>(x.data) + t * in_cols * es,
                      static_cast<std::size_t>(in_cols * es));
        }
        main_input(iv) = TensorView::strided(packed.data(), x.dtype, {n, in_cols}, {cols, 1});
        TensorView py = y;
        py.data = packed.data() + in_cols * es;
        py.stride[0] = cols;
        main_output(ov) = py;
        call(l, iv, ov);
        for (int64_t t = 0; t < n; ++t) {  // the main output back into the host buffer
          std::memcpy(static_cast<uint8_t*>(y.data) + t * out_cols * es,
                      packed.data() + (t * cols + in_cols) * es,
                      static_cast<std::size_t>(out_cols * es));
        }
      }
      return got;
    };
    const auto pre = r.inputs(3);
    const auto got_pre = packed_call(3, pre, [&](int l, const auto& iv, const auto& ov) {
      p.prefill(l, h, r.weights(l), iv, ov);
    });
    std::vector<typename Kind::HostOutputs> want_pre = r.outputs(3);
    for (int l = 0; l < kLayers; ++l) {
      ref.prefill(l, hr, r.weights(l), Kind::put(pre[l], host_put),
                  Kind::put(want_pre[l], host_put));
    }
    expect_same_outputs(PoolRounds<Kind>::output_bytes(got_pre, 0, 3),
                        PoolRounds<Kind>::output_bytes(want_pre, 0, 3), "the prefill's outputs");
    const auto in = r.inputs(kT);
    p.begin_verify(round_batch(false, {h}));
    const auto got = packed_call(
        kT, in, [&](int l, const auto& iv, const auto& ov) { p.verify(l, r.weights(l), iv, ov); });
    p.commit(round_accept(false, {3}));
    const auto want = r.round(ref, round_batch(false, {hr}), in, round_accept(false, {3}));
    expect_same_outputs(PoolRounds<Kind>::output_bytes(got, 0, kT),
                        PoolRounds<Kind>::output_bytes(want, 0, kT), "the verify's outputs");
    EXPECT_EQ(exported(p, h), exported(ref, hr));
    expect_nonzero(exported(ref, hr), "the committed state");
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, OutputOverlap, ::testing::ValuesIn(cases()), kind_case_name);

}  // namespace
}  // namespace specstate::test
