#include "common/caller_owned.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "common/layer_kinds.h"
#include "common/pool_rounds.h"

namespace specstate::test {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Shapes and inner strides (the element order) of one slot's state, from an owning pool of the
// model with `options`' layouts (the pool is the authority).
struct StateShapes {
  std::vector<int64_t> conv, ssm;                // without the slot dimension
  std::vector<int64_t> conv_stride, ssm_stride;  // likewise
  DType conv_dtype, ssm_dtype;
};

StateShapes state_shapes(const ModelConfig& model, const PoolOptions& options) {
  PoolOptions o;
  o.num_slots = 1;
  o.max_rows = 1;
  o.max_window = 1;
  o.conv_layout = options.conv_layout;
  o.ssm_layout = options.ssm_layout;
  StatePool probe(model, o);
  StateShapes s;
  const TensorView c = probe.conv_state(0), m = probe.ssm_state(0);
  for (int d = 1; d < c.ndim; ++d) {
    s.conv.push_back(c.shape[d]);
    s.conv_stride.push_back(c.stride[d]);
  }
  for (int d = 1; d < m.ndim; ++d) {
    s.ssm.push_back(m.shape[d]);
    s.ssm_stride.push_back(m.stride[d]);
  }
  s.conv_dtype = c.dtype;
  s.ssm_dtype = m.dtype;
  return s;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

TensorView state_view(char* base, DType dtype, int slots, const std::vector<int64_t>& inner,
                      const std::vector<int64_t>& inner_stride, int64_t slot_stride_elems,
                      Device device) {
  TensorView v;
  v.data = base;
  v.dtype = dtype;
  v.device = device;
  v.ndim = 1 + static_cast<int>(inner.size());
  v.shape[0] = slots;
  v.stride[0] = slot_stride_elems;
  for (int d = v.ndim - 1; d >= 1; --d) {
    v.shape[d] = inner[static_cast<std::size_t>(d - 1)];
    v.stride[d] = inner_stride[static_cast<std::size_t>(d - 1)];
  }
  return v;
}

}  // namespace

CallerMemory make_caller_memory(const ModelConfig& model, const PoolOptions& options,
                                CallerLayout layout, Memory& mem, uint64_t seed) {
  const StateShapes sh = state_shapes(model, options);
  const int L = model.num_layers, S = options.num_slots;
  CallerMemory cm;
  auto region = [&](const std::vector<int64_t>& inner, const std::vector<int64_t>& inner_stride,
                    DType dtype, int64_t* state_bytes, std::vector<int64_t>* offsets,
                    TensorView* buffer, std::vector<TensorView>* views) {
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    *state_bytes = product(inner) * elem;
    // A padded slot stride (16-byte multiple, at least 16 bytes of padding between slots).
    const int64_t slot_bytes = round_up(*state_bytes + 16, 16);
    std::vector<int64_t> layer_at(static_cast<std::size_t>(L));
    int64_t at = 32;  // padding before the first layer too
    for (int l = 0; l < L; ++l) {
      layer_at[static_cast<std::size_t>(l)] = at;
      at += S * slot_bytes + (layout == CallerLayout::kPerLayer ? 16 * (l + 1) * (l + 1) : 0);
    }
    const int64_t total = round_up(at + 32, 16);
    Buffer host(DType::kI32, {total / 4});
    std::mt19937_64 rng(seed);
    auto* bytes = static_cast<uint8_t*>(host.data());
    for (int64_t i = 0; i < total; ++i) bytes[i] = static_cast<uint8_t>(rng() | 1);  // nonzero
    *buffer = mem.put(host, /*persistent=*/true);
    char* base = static_cast<char*>(buffer->data);
    for (int l = 0; l < L; ++l) {
      const int64_t off = layer_at[static_cast<std::size_t>(l)];
      views->push_back(state_view(base + off, dtype, S, inner, inner_stride, slot_bytes / elem,
                                  mem.backend() == Backend::kCuda ? Device::kCuda : Device::kCpu));
      for (int s = 0; s < S; ++s) offsets->push_back(off + s * slot_bytes);
    }
  };
  region(sh.conv, sh.conv_stride, sh.conv_dtype, &cm.conv_state_bytes, &cm.conv_offset,
         &cm.conv_buffer, &cm.views.conv);
  region(sh.ssm, sh.ssm_stride, sh.ssm_dtype, &cm.ssm_state_bytes, &cm.ssm_offset, &cm.ssm_buffer,
         &cm.views.ssm);
  return cm;
}

namespace {

template <typename Kind>
void run(const typename Kind::Config& g, Strategy strategy, bool tree, CallerLayout layout,
         Memory& mem, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int L = 3;
  // Every buffer persistent: the weights' views must outlive the rounds.
  PoolRounds<Kind> m(g, L, seed, [&](const Buffer& b) { return mem.put(b, true); });
  PoolOptions o = m.options(strategy, /*slots=*/6, /*rows=*/4, /*window=*/kRoundT);
  o.backend = mem.backend();
  o.stream = mem.stream();
  if (layout == CallerLayout::kVllm) o = vllm_layout_options(o, m.model().kind);
  CallerMemory cm = make_caller_memory(m.model(), o, layout, mem, seed ^ 0x5A5A);
  const std::vector<uint8_t> conv0 = mem.bytes(cm.conv_buffer), ssm0 = mem.bytes(cm.ssm_buffer);
  StatePool own(m.model(), o), caller(m.model(), o, cm.views);
  std::mt19937_64 rng(seed);

  // Which bytes of the caller's buffers belong to some slot's state (the rest is padding).
  std::vector<bool> conv_slot_byte(conv0.size(), false), ssm_slot_byte(ssm0.size(), false);
  for (int64_t off : cm.conv_offset) {
    for (int64_t b = 0; b < cm.conv_state_bytes; ++b) conv_slot_byte[off + b] = true;
  }
  for (int64_t off : cm.ssm_offset) {
    for (int64_t b = 0; b < cm.ssm_state_bytes; ++b) ssm_slot_byte[off + b] = true;
  }
  std::vector<SlotHandle> ho, hc;  // live requests (the pools allocate identically)
  auto arrive = [&] {
    ho.push_back(own.acquire());
    hc.push_back(caller.acquire());
    ASSERT_EQ(own.slot_index(ho.back()), caller.slot_index(hc.back()));
    const auto in = m.inputs(1 + static_cast<int64_t>(rng() % 3));
    m.prefill(own, ho.back(), in);
    m.prefill(caller, hc.back(), in);
  };
  // The caller pool's memory: every live slot equals the owning pool's state (export bytes,
  // read straight from the caller's buffers), every other byte is the sentinel.
  auto check_memory = [&](const std::string& what) {
    caller.materialize();  // replay: the memory holds the committed state once materialized
    const std::vector<uint8_t> conv = mem.bytes(cm.conv_buffer), ssm = mem.bytes(cm.ssm_buffer);
    for (std::size_t i = 0; i < ho.size(); ++i) {
      const int slot = own.slot_index(ho[i]);
      const std::vector<uint8_t> want = exported(own, ho[i]);
      const std::vector<uint8_t> got = exported(caller, hc[i]);
      std::size_t first = 0;
      while (first < got.size() && got[first] == want[first]) ++first;
      ASSERT_EQ(got, want) << what << ": request " << i << " export differs from byte " << first
                           << " of " << got.size();
      std::size_t at = 0;
      for (int l = 0; l < L; ++l) {
        const auto co = static_cast<std::size_t>(cm.conv_offset[l * 6 + slot]);
        const auto so = static_cast<std::size_t>(cm.ssm_offset[l * 6 + slot]);
        ASSERT_EQ(0, std::memcmp(conv.data() + co, want.data() + at, cm.conv_state_bytes))
            << what << ": request " << i << " layer " << l << " conv state in caller memory";
        at += static_cast<std::size_t>(cm.conv_state_bytes);
        ASSERT_EQ(0, std::memcmp(ssm.data() + so, want.data() + at, cm.ssm_state_bytes))
            << what << ": request " << i << " layer " << l << " SSM state in caller memory";
        at += static_cast<std::size_t>(cm.ssm_state_bytes);
      }
    }
    // Slots that were acquired once and released keep what they last held (zeroed or a
    // state); only bytes outside every slot's state must be the sentinel.
    for (std::size_t i = 0; i < conv.size(); ++i) {
      if (!conv_slot_byte[i]) {
        ASSERT_EQ(conv[i], conv0[i]) << what << ": conv padding byte " << i << " was written";
      }
    }
    for (std::size_t i = 0; i < ssm.size(); ++i) {
      if (!ssm_slot_byte[i]) {
        ASSERT_EQ(ssm[i], ssm0[i]) << what << ": SSM padding byte " << i << " was written";
      }
    }
  };

  for (int i = 0; i < 3; ++i) arrive();
  check_memory("after the prefills");
  // Slot 5 is never acquired (the forks take slot 4): its bytes must stay the sentinel (checked at
  // the end).
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Rows: the live requests in random order, padding rows in between.
    std::vector<int> order(ho.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::shuffle(order.begin(), order.end(), rng);
    VerifyBatch bo = round_batch(tree, {}), bc = round_batch(tree, {});
    std::vector<int> steps;
    for (int i : order) {
      if (bo.rows.size() + 1 < 4 && rng() % 3 == 0) {
        bo.rows.push_back(SlotHandle::padding());
        bc.rows.push_back(SlotHandle::padding());
        steps.push_back(0);
      }
      if (bo.rows.size() >= 4) break;
      bo.rows.push_back(ho[static_cast<std::size_t>(i)]);
      bc.rows.push_back(hc[static_cast<std::size_t>(i)]);
      steps.push_back(static_cast<int>(rng() % (kRoundT + 1)));
    }
    const std::vector<int32_t> accepted = round_accept(tree, steps);
    const auto in = m.inputs(static_cast<int64_t>(bo.rows.size()) * kRoundT);
    if (mem.backend() == Backend::kCuda && round % 2 == 1) {
      // Device-resident accepted values (the graph path).
      Buffer acc(DType::kI32, {static_cast<int64_t>(accepted.size())});
      for (std::size_t r = 0; r < accepted.size(); ++r) {
        acc.set(static_cast<int64_t>(r), static_cast<float>(accepted[r]));
      }
      const TensorView dev = mem.put(acc);
      for (StatePool* p : {&own, &caller}) {
        auto out = m.outputs(static_cast<int64_t>(bo.rows.size()) * kRoundT);
        p->begin_verify(p == &own ? bo : bc);
        m.verify(*p, in, out, 0, L);
        p->commit(dev);
        // (A refused round commits nothing in either pool: equal states would not show it.)
        EXPECT_EQ(p->last_commit_status(), Status::kSuccess);
      }
    } else {
      // (The outputs stay in the Memory's copies; the states are what this test compares.)
      m.round(own, bo, in, accepted);
      m.round(caller, bc, in, accepted);
    }
    // Slot operations between rounds.
    switch (round % 5) {
      case 1: {  // fork (parallel sampling)
        ho.push_back(own.fork(ho[0]));
        hc.push_back(caller.fork(hc[0]));
        break;
      }
      case 2: {  // a request leaves, another arrives
        own.release(ho[1]);
        caller.release(hc[1]);
        ho.erase(ho.begin() + 1);
        hc.erase(hc.begin() + 1);
        arrive();
        break;
      }
      case 3: {  // export -> import into another request (hand-off)
        const std::vector<uint8_t> bytes = export_image(own, ho[0]);
        const int64_t n = (own.slot_state_bytes() + 3) / 4;
        std::vector<int32_t> words(static_cast<std::size_t>(n));
        std::memcpy(words.data(), bytes.data(), bytes.size());
        const TensorView v = TensorView::contiguous(words.data(), DType::kI32, {n});
        own.import_slot(ho.back(), v);
        caller.import_slot(hc.back(), v);
        break;
      }
      case 4: {
        own.reset(ho.back());
        caller.reset(hc.back());
        break;
      }
      default:
        break;
    }
    check_memory("after round");
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_LE(ho.size(), 5u);
  // Slot 5 was never handed out: all its bytes are the sentinel, in every layer.
  const std::vector<uint8_t> conv = mem.bytes(cm.conv_buffer), ssm = mem.bytes(cm.ssm_buffer);
  for (int l = 0; l < L; ++l) {
    const auto co = static_cast<std::size_t>(cm.conv_offset[l * 6 + 5]);
    const auto so = static_cast<std::size_t>(cm.ssm_offset[l * 6 + 5]);
    ASSERT_EQ(0, std::memcmp(conv.data() + co, conv0.data() + co, cm.conv_state_bytes))
        << "slot 5 (never acquired) was written, layer " << l;
    ASSERT_EQ(0, std::memcmp(ssm.data() + so, ssm0.data() + so, cm.ssm_state_bytes))
        << "slot 5 (never acquired) was written, layer " << l;
  }
  int64_t nonzero = 0;
  for (uint8_t b : exported(caller, hc[0])) nonzero += b != 0;
  EXPECT_GT(nonzero, 0) << "the committed state is all zeros";

  // The pool's end: one more round, not materialized (replay: steps pending in every live slot),
  // then another pool moved onto it. Its live slots are materialized into the caller's memory
  // on the way out (lib/pool.cpp, Impl::close: the destructor's path too), so the memory holds
  // every request's committed state, as release() leaves one slot's.
  VerifyBatch bo = round_batch(tree, {}), bc = round_batch(tree, {});
  std::vector<int> steps;
  for (std::size_t i = 0; i < ho.size() && bo.rows.size() < 4; ++i) {
    bo.rows.push_back(ho[i]);
    bc.rows.push_back(hc[i]);
    steps.push_back(2);
  }
  const std::vector<int32_t> accepted = round_accept(tree, steps);
  const auto in = m.inputs(static_cast<int64_t>(bo.rows.size()) * kRoundT);
  m.round(own, bo, in, accepted);
  m.round(caller, bc, in, accepted);
  std::vector<int> slot_of;
  for (const SlotHandle& h : hc) slot_of.push_back(caller.slot_index(h));
  caller = StatePool(m.model(), o);
  const std::vector<uint8_t> conv_end = mem.bytes(cm.conv_buffer);
  const std::vector<uint8_t> ssm_end = mem.bytes(cm.ssm_buffer);
  for (std::size_t i = 0; i < ho.size(); ++i) {
    const std::vector<uint8_t> want = exported(own, ho[i]);
    const auto slot = static_cast<std::size_t>(slot_of[i]);
    std::size_t at = 0;
    for (int l = 0; l < L; ++l) {
      const auto co = static_cast<std::size_t>(cm.conv_offset[l * 6 + slot]);
      const auto so = static_cast<std::size_t>(cm.ssm_offset[l * 6 + slot]);
      ASSERT_EQ(0, std::memcmp(conv_end.data() + co, want.data() + at, cm.conv_state_bytes))
          << "after the pool's end: request " << i << " layer " << l
          << " conv state in caller memory";
      at += static_cast<std::size_t>(cm.conv_state_bytes);
      ASSERT_EQ(0, std::memcmp(ssm_end.data() + so, want.data() + at, cm.ssm_state_bytes))
          << "after the pool's end: request " << i << " layer " << l
          << " SSM state in caller memory";
      at += static_cast<std::size_t>(cm.ssm_state_bytes);
    }
  }
}

}  // namespace

void run_caller_owned(const char* preset, Strategy strategy, bool tree, CallerLayout layout,
                      Memory& mem, uint64_t seed) {
  for_kind(preset, [&](auto kind, const auto& layer) {
    run<decltype(kind)>(layer, strategy, tree, layout, mem, seed);
  });
}

}  // namespace specstate::test
