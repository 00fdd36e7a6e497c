// specstate::vllm (include/specstate/vllm.h): a caller-owned pool over tensors shaped as vLLM
// allocates its hybrid models' cache, every layer kind, in vLLM's element order of today
// ([HV][V][K] for both delta-rule kinds) and of before its PR #33291 ([HV][K][V]). The pool reads
// the engine's tensors in place in that order (each logical element is the vLLM tensor's
// element, or its transpose), writes into them in place (acquire zeroes exactly its slot), and
// any count or shape that is not vLLM's for the model is refused naming the tensor, with no pool
// built.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/expect.h"
#include "common/gdn_data.h"
#include "common/presets.h"
#include "common/speculative_equivalence.h"
#include "specstate/specstate.h"

namespace specstate::test {
namespace {

// Element `idx` of a host view through its strides.
float at(const TensorView& v, std::initializer_list<int64_t> idx) {
  int64_t i = 0, d = 0;
  for (int64_t x : idx) i += x * v.stride[static_cast<std::size_t>(d++)];
  return host_element(v, i);
}

// vLLM-shaped tensors of random nonzero values, one per layer.
std::vector<Buffer> random_tensors(DType dtype, const std::vector<int64_t>& shape, int layers,
                                   std::mt19937& rng) {
  std::vector<Buffer> out;
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (int l = 0; l < layers; ++l) {
    Buffer b(dtype, shape);
    for (int64_t i = 0; i < b.numel(); ++i) b.set(i, u(rng));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<TensorView> views_of(const std::vector<Buffer>& buffers) {
  std::vector<TensorView> out;
  for (const Buffer& b : buffers) out.push_back(b.view());
  return out;
}

struct VllmCase {
  const char* preset;
  SsmLayout order;
};

class VllmViews : public ::testing::TestWithParam<VllmCase> {};

TEST_P(VllmViews, ThePoolReadsAndWritesTheEngineTensorsInPlaceInVllmOrder) {
  const int L = 2, S = 3;
  const ModelConfig model = preset_model(GetParam().preset, L);
  const SsmLayout order = GetParam().order;
  std::mt19937 rng(42);
  const std::vector<int64_t> cs = vllm::conv_shape(model, S);
  const std::vector<int64_t> rs = vllm::recurrent_shape(model, S, order);
  ASSERT_EQ(cs, (std::vector<int64_t>{S, model.conv_width() - 1, model.conv_dim()}));
  std::vector<Buffer> conv = random_tensors(model.conv_state_dtype(), cs, L, rng);
  std::vector<Buffer> rec = random_tensors(model.ssm_state_dtype(), rs, L, rng);
  PoolOptions o;
  o.num_slots = S;
  o.max_rows = 2;
  o.max_window = 4;
  o = vllm::layout_options(o, model, order);
  EXPECT_EQ(o.conv_layout, ConvLayout::kChannelsLast);
  EXPECT_EQ(o.ssm_layout, order);
  StatePool pool(model, o, vllm::committed_views(model, views_of(conv), views_of(rec), order));

  // Slot 1 adopted as the engine wrote it: logical (c, k) of the conv window is vLLM's [k][c];
  // the state's logical (a, b, c) is vLLM's [a][b][c], or [a][c][b] in the order before PR
  // #33291 ([HV][K][V]).
  const SlotHandle h = pool.adopt(1);
  const bool kv = order == SsmLayout::kKV;
  int64_t nonzero = 0;
  for (int l = 0; l < L; ++l) {
    const TensorView c = pool.conv_state(l, h), s = pool.ssm_state(l, h);
    const TensorView vc = conv[static_cast<std::size_t>(l)].view();
    const TensorView vs = rec[static_cast<std::size_t>(l)].view();
    for (int64_t ch = 0; ch < model.conv_dim(); ++ch) {
      for (int64_t k = 0; k + 1 < model.conv_width(); ++k) {
        ASSERT_EQ(at(c, {ch, k}), at(vc, {1, k, ch}))
            << "layer " << l << " (" << ch << ", " << k << ")";
      }
    }
    ASSERT_EQ(s.ndim, 3);
    for (int64_t a = 0; a < s.shape[0]; ++a) {
      for (int64_t b = 0; b < s.shape[1]; ++b) {
        for (int64_t e = 0; e < s.shape[2]; ++e) {
          const float want = kv ? at(vs, {1, a, e, b}) : at(vs, {1, a, b, e});
          ASSERT_EQ(at(s, {a, b, e}), want)
              << "layer " << l << " (" << a << ", " << b << ", " << e << ")";
          nonzero += want != 0.0f;
        }
      }
    }
  }
  EXPECT_GT(nonzero, 0);

  // acquire() zeroes its slot in the engine's tensors, every layer, and nothing else.
  const SlotHandle z = pool.acquire();
  const int zs = pool.slot_index(z);
  for (int l = 0; l < L; ++l) {
    for (const Buffer* b :
         {&conv[static_cast<std::size_t>(l)], &rec[static_cast<std::size_t>(l)]}) {
      const int64_t per_slot = b->numel() / S;
      for (int64_t i = 0; i < b->numel(); ++i) {
        if (i / per_slot == zs) {
          ASSERT_EQ(b->get(i), 0.0f) << "layer " << l << " element " << i;
        } else {
          ASSERT_NE(b->get(i), 0.0f) << "layer " << l << " element " << i;
        }
      }
    }
  }
}

TEST_P(VllmViews, ShapesThatAreNotVllmsAreRefusedNamingTheTensor) {
  const int L = 2, S = 3;
  const ModelConfig model = preset_model(GetParam().preset, L);
  const SsmLayout order = GetParam().order;
  std::mt19937 rng(7);
  const std::vector<int64_t> cs = vllm::conv_shape(model, S);
  const std::vector<int64_t> rs = vllm::recurrent_shape(model, S, order);
  const std::vector<Buffer> conv = random_tensors(model.conv_state_dtype(), cs, L, rng);
  const std::vector<Buffer> rec = random_tensors(model.ssm_state_dtype(), rs, L, rng);
  const auto refused = [&](const std::vector<TensorView>& c, const std::vector<TensorView>& r,
                           const std::string& names) {
    try {
      vllm::committed_views(model, c, r, order);
      ADD_FAILURE() << "accepted; expected a refusal naming " << names;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  // One layer short.
  refused({conv[0].view()}, views_of(rec), "conv_states has 1 tensors, the model has 2");
  refused(views_of(conv), {rec[0].view()}, "recurrent_states has 1 tensors");
  // vLLM's W-1+num_spec conv columns (num_spec = 2).
  const Buffer wide(model.conv_state_dtype(), {S, model.conv_width() + 1, model.conv_dim()});
  refused({conv[0].view(), wide.view()}, views_of(rec), "conv_states[1] has shape");
  // The state's last two axes the other way round (K != V in these presets).
  std::vector<int64_t> swapped = rs;
  std::swap(swapped[2], swapped[3]);
  ASSERT_NE(swapped, rs);
  const Buffer other(model.ssm_state_dtype(), swapped);
  refused(views_of(conv), {other.view(), rec[1].view()}, "recurrent_states[0] has shape");
  // Layers with different slot counts.
  const Buffer fewer(model.conv_state_dtype(), vllm::conv_shape(model, S - 1));
  refused({conv[0].view(), fewer.view()}, views_of(rec), "conv_states[1] has 2 slots");
  // Slots below zero, named as the caller passed them (the pool's refusal named the swapped view,
  // committed.conv[0] with its axes exchanged).
  TensorView minus = conv[0].view();
  minus.shape[0] = -1;
  refused({minus, conv[1].view()}, views_of(rec), "conv_states[0] has shape (-1, ");
  refused({minus, conv[1].view()}, views_of(rec), "slots = -1 must be >= 0");
  // A hand-filled view claiming 4000 dims: the message printed 4000 shape entries of a 6-entry
  // array (a read past it under ASan); now refused before any entry is read.
  TensorView many = conv[1].view();
  many.ndim = 4000;
  refused({conv[0].view(), many}, views_of(rec), "conv_states[1] has ndim = 4000, outside [1, 6]");
  // The model itself is validated (no layers, a kind that is none were taken for GDN).
  ModelConfig none = model;
  none.kind = static_cast<LayerKind>(7);
  try {
    vllm::committed_views(none, views_of(conv), views_of(rec), order);
    ADD_FAILURE() << "a kind that is none accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kind = 7 is not a layer kind"), std::string::npos)
        << e.what();
  }
  ModelConfig empty = model;
  empty.num_layers = 0;
  EXPECT_THROW(vllm::committed_views(empty, {}, {}, order), Error);
}

// vLLM keeps KDA's recurrent state as Gated DeltaNet's, [HV][V][K] (PR #33291 changed both from
// [HV][K][V]; KDA's prefill output kernel followed in #40956): the default shape and order.
// specstate's helpers had kept KDA at [HV][K][V] and read vLLM's state transposed (K = V at
// Kimi-Linear, so no shape told). Mamba2 has one order; any other is refused by name.
TEST(VllmOrder, TheDefaultIsVllmsOrderOfTodayForBothDeltaRuleKinds) {
  const ModelConfig kda = preset_model("kda_gpu_lb_f32", 1), gdn = preset_model("gpu_k128_v72", 1);
  const KdaConfig& k = kda.kda_layer;
  EXPECT_EQ(vllm::recurrent_shape(kda, 2),
            (std::vector<int64_t>{2, k.num_v_heads, k.head_v_dim, k.head_k_dim}));
  EXPECT_EQ(vllm::recurrent_shape(kda, 2, SsmLayout::kKV),
            (std::vector<int64_t>{2, k.num_v_heads, k.head_k_dim, k.head_v_dim}));
  const GdnConfig& g = gdn.gdn;
  EXPECT_EQ(vllm::recurrent_shape(gdn, 2),
            (std::vector<int64_t>{2, g.num_v_heads, g.head_v_dim, g.head_k_dim}));
  for (const ModelConfig* m : {&kda, &gdn}) {
    EXPECT_EQ(vllm::layout_options(PoolOptions{}, *m).ssm_layout, SsmLayout::kVK);
    EXPECT_EQ(vllm::layout_options(PoolOptions{}, *m, SsmLayout::kKV).ssm_layout, SsmLayout::kKV);
  }
  // layout_options validates the model first, as recurrent_shape does: a config that does not
  // validate is refused naming its field (it returned options, and with kKV its factor-record
  // layout overflowed 64 bits).
  {
    ModelConfig bad = gdn;
    bad.num_layers = -3;
    expect_rejected([&] { vllm::layout_options(PoolOptions{}, bad); }, Status::kInvalidArgument,
                    {"num_layers = -3"});
    ModelConfig huge = gdn;
    huge.gdn.num_k_heads = 1;
    huge.gdn.head_k_dim = 1;
    huge.gdn.num_v_heads = std::numeric_limits<int>::max();
    huge.gdn.head_v_dim = std::numeric_limits<int>::max();
    expect_rejected([&] { vllm::layout_options(PoolOptions{}, huge, SsmLayout::kKV); },
                    Status::kInvalidArgument, {"does not fit in 32 bits"});
  }
  const ModelConfig m2 = preset_model("m2_gpu_f32", 1);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { vllm::recurrent_shape(m2, 1, SsmLayout::kKV); },
           [&] { vllm::layout_options(PoolOptions{}, m2, SsmLayout::kKV); },
           [&] { vllm::committed_views(m2, {}, {}, SsmLayout::kKV); },
           [&] { vllm::recurrent_shape(kda, 1, static_cast<SsmLayout>(5)); }}) {
    try {
      call();
      ADD_FAILURE() << "an order that is not vLLM's for the kind was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_TRUE(what.find("order = kv is for the delta-rule kinds") != std::string::npos ||
                  what.find("order = 5 is not an SsmLayout") != std::string::npos)
          << what;
    }
  }
}

// K != V (or P != N) in each, so a swapped state shape is detectable.
INSTANTIATE_TEST_SUITE_P(Cpu, VllmViews,
                         ::testing::Values(VllmCase{"gpu_k128_v72", SsmLayout::kVK},
                                           VllmCase{"gpu_k128_v72", SsmLayout::kKV},
                                           VllmCase{"m2_gpu_f32", SsmLayout::kVK},
                                           VllmCase{"kda_gpu_lb_f32", SsmLayout::kVK},
                                           VllmCase{"kda_gpu_lb_f32", SsmLayout::kKV}),
                         [](const ::testing::TestParamInfo<VllmCase>& info) {
                           return std::string(info.param.preset) +
                                  (info.param.order == SsmLayout::kKV ? "_kv" : "_vk");
                         });

// A shape's slot count below 0 (it was returned as a negative dimension) and a config that does
// not validate (whose sizes may not fit: an unvalidated config's conv_dim wrapped) are refused.
TEST(VllmShapes, NegativeSlotsAndConfigsThatDoNotValidateAreRefused) {
  const ModelConfig kda = preset_model("kda_gpu_lb_f32", 1);
  EXPECT_EQ(vllm::conv_shape(kda, 0)[0], 0);
  expect_rejected([&] { vllm::conv_shape(kda, -1); }, Status::kInvalidArgument,
                  {"vllm::conv_shape", "slots = -1 must be >= 0"});
  expect_rejected([&] { vllm::recurrent_shape(kda, -1); }, Status::kInvalidArgument,
                  {"vllm::recurrent_shape", "slots = -1 must be >= 0"});
  ModelConfig bad = kda;
  bad.kda_layer.num_k_heads = 0;
  expect_rejected([&] { vllm::conv_shape(bad, 1); }, Status::kInvalidArgument, {"ModelConfig"});
  expect_rejected([&] { vllm::recurrent_shape(bad, 1); }, Status::kInvalidArgument,
                  {"ModelConfig"});
}

}  // namespace
}  // namespace specstate::test
