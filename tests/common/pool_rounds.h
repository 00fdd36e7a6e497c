// Test helper of the lifecycle and slot-operation suites (tests/cpu/test_lifecycle.cpp,
// tests/cpu/test_slot_ops.cpp, tests/gpu/test_slot_ops_gpu.cpp): one model of L layers of a
// layer kind (GdnKind / Mamba2Kind) with random weights, random per-layer inputs, and the calls
// of a round (prefill, verify of a layer range) through a PutBuffer, so the same code drives a
// CPU pool (host views) and a CUDA pool (device copies made by the caller's PutBuffer, or by a
// Memory of common/strategy_equivalence.h, which also gives the pools' backend and reads the
// outputs back). Header-only; the state of a slot is read through StatePool::export_slot (host
// bytes).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/layer_kinds.h"
#include "common/presets.h"
#include "common/strategy_equivalence.h"
#include "specstate/specstate.h"

namespace specstate::test {

// The round shape the lifecycle and slot-operation suites share: T = 4 and, for trees, one tree
// {-1, 0, 0, 1} for every row, whose deepest path is 0 -> 1 -> 3.
inline constexpr int kRoundT = 4;

// Runs f(Kind{}, layer config) for a preset's layer kind.
template <typename F>
void for_kind(const char* preset, F&& f) {
  switch (preset_kind(preset)) {
    case LayerKind::kMamba2:
      return f(Mamba2Kind{}, mamba2_preset(preset));
    case LayerKind::kKda:
      return f(KdaKind{}, kda_preset(preset));
    case LayerKind::kGatedDeltaNet:
      break;
  }
  f(GdnKind{}, gdn_preset(preset));
}

inline VerifyBatch round_batch(bool tree, std::vector<SlotHandle> rows) {
  VerifyBatch b;
  b.rows = std::move(rows);
  b.window = kRoundT;
  if (tree) b.parents = {-1, 0, 0, 1};
  return b;
}

// Commit values: `steps` accepted tokens per row (0 = keep). A tree accepts the path ending at
// node steps - 1 of the branch 0 -> 1 -> 3; a longer acceptance takes the whole branch.
inline std::vector<int32_t> round_accept(bool tree, const std::vector<int>& steps) {
  static const int32_t kNodes[] = {-1, 0, 1, 3};
  std::vector<int32_t> out;
  for (int s : steps) out.push_back(tree ? kNodes[std::min(s, 3)] : s);
  return out;
}

// Host views of host buffers (the CPU backend's PutBuffer).
inline TensorView host_put(const Buffer& b) { return b.view(); }

// The bytes of a contiguous host view.
inline std::vector<uint8_t> view_bytes(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return std::vector<uint8_t>(p, p + v.numel() * static_cast<int64_t>(dtype_size(v.dtype)));
}

// A slot's whole export buffer (host), any backend: the header, then the state.
inline std::vector<uint8_t> export_image(StatePool& pool, SlotHandle h) {
  std::vector<uint8_t> bytes(static_cast<std::size_t>(pool.slot_state_bytes()));
  const int64_t n = (pool.slot_state_bytes() + 3) / 4;
  std::vector<int32_t> words(static_cast<std::size_t>(n));
  pool.export_slot(h, TensorView::contiguous(words.data(), DType::kI32, {n}));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

// A view's elements in its logical index order (row-major over its shape), as bytes, from `raw`:
// the bytes of its span, numel elements from its first (a compact state in any element order,
// PoolOptions::conv_layout / ssm_layout). States of two orders compare element for element.
inline std::vector<uint8_t> logical_bytes(const std::vector<uint8_t>& raw, const TensorView& v) {
  const std::size_t es = dtype_size(v.dtype);
  std::vector<uint8_t> out(raw.size());
  std::vector<int64_t> idx(static_cast<std::size_t>(v.ndim), 0);
  for (int64_t i = 0; i < v.numel(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < v.ndim; ++d) off += idx[static_cast<std::size_t>(d)] * v.stride[d];
    std::memcpy(out.data() + i * es, raw.data() + off * es, es);
    for (int d = v.ndim - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < v.shape[d]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

// A slot's committed state as exported bytes (host), any backend: the export buffer without
// its header (every layer's conv window, then its SSM state), to compare states with.
inline std::vector<uint8_t> exported(StatePool& pool, SlotHandle h) {
  std::vector<uint8_t> bytes = export_image(pool, h);
  bytes.erase(bytes.begin(), bytes.begin() + StatePool::kSlotStateHeaderBytes);
  return bytes;
}

template <typename Kind>
class PoolRounds {
 public:
  using Config = typename Kind::Config;
  using HostInputs = typename Kind::HostInputs;
  using HostOutputs = typename Kind::HostOutputs;

  PoolRounds(const Config& layer, int layers, uint64_t seed, PutBuffer put = host_put)
      : layer_(layer), layers_(layers), rng_(seed), put_(std::move(put)) {
    for (int l = 0; l < layers; ++l) host_weights_.push_back(random_weights(layer_, rng_));
    for (const auto& w : host_weights_) weights_.push_back(Kind::put(w, put_));
  }
  // Buffers in `mem` (alive as long as `mem`), pools on its backend (CUDA: device 0, mem's
  // stream), each verify's outputs read back into the host buffers.
  PoolRounds(const Config& layer, int layers, uint64_t seed, Memory& mem)
      : PoolRounds(layer, layers, seed, [&mem](const Buffer& b) { return mem.put(b, true); }) {
    mem_ = &mem;
  }

  int layers() const { return layers_; }
  const Config& layer() const { return layer_; }
  ModelConfig model() const { return Kind::model(layers_, layer_); }
  PoolOptions options(Strategy strategy, int slots = 6, int rows = 4, int window = 4) const {
    PoolOptions o;
    o.num_slots = slots;
    o.max_rows = rows;
    o.max_window = window;
    o.strategy = strategy;
    if (mem_ != nullptr && mem_->backend() == Backend::kCuda) {
      o.backend = Backend::kCuda;
      o.device = 0;
      o.stream = mem_->stream();
    }
    return o;
  }
  StatePool pool(Strategy strategy, int slots = 6, int rows = 4, int window = 4) const {
    return StatePool(model(), options(strategy, slots, rows, window));
  }

  // Random inputs of `tokens` tokens for every layer.
  std::vector<HostInputs> inputs(int64_t tokens) {
    std::vector<HostInputs> in;
    for (int l = 0; l < layers_; ++l) in.push_back(random_inputs(layer_, tokens, rng_));
    return in;
  }
  // Output buffers of `tokens` tokens for every layer.
  std::vector<HostOutputs> outputs(int64_t tokens) const {
    std::vector<HostOutputs> out;
    for (int l = 0; l < layers_; ++l) out.push_back(make_outputs(layer_, tokens));
    return out;
  }

  // Prefills every layer of `h` with `in` (one request's tokens).
  void prefill(StatePool& pool, SlotHandle h, const std::vector<HostInputs>& in) {
    for (int l = 0; l < layers_; ++l) {
      HostOutputs out = make_outputs(layer_, tokens(in[l]));
      pool.prefill(l, h, weights_[l], Kind::put(in[l], put_), Kind::put(out, put_));
    }
  }

  // Verifies layers [begin, end) of the open round with `in` (the batch's tokens); the outputs
  // go to `out` (host buffers; on a device PutBuffer they stay in the device copies, from a
  // Memory they are read back).
  void verify(StatePool& pool, const std::vector<HostInputs>& in, std::vector<HostOutputs>& out,
              int begin, int end) {
    for (int l = begin; l < end; ++l) {
      const auto views = Kind::put(out[l], put_);
      pool.verify(l, weights_[l], Kind::put(in[l], put_), views);
      read_back(views, out[l]);
    }
  }
  // begin_verify + verify of every layer + commit.
  std::vector<HostOutputs> round(StatePool& pool, const VerifyBatch& batch,
                                 const std::vector<int32_t>& accepted) {
    const int64_t n = int64_t{static_cast<int64_t>(batch.rows.size())} * batch.window;
    std::vector<HostInputs> in = inputs(n);
    return round(pool, batch, in, accepted);
  }
  std::vector<HostOutputs> round(StatePool& pool, const VerifyBatch& batch,
                                 const std::vector<HostInputs>& in,
                                 const std::vector<int32_t>& accepted) {
    const int64_t n = int64_t{static_cast<int64_t>(batch.rows.size())} * batch.window;
    std::vector<HostOutputs> out = outputs(n);
    pool.begin_verify(batch);
    verify(pool, in, out, 0, layers_);
    pool.commit(accepted);
    return out;
  }

  // The same with each layer's inputs as views: inputs_of(layer) -> Kind::Inputs (views the
  // pool can read, e.g. rows of a larger host batch).
  template <typename InputsOf>
  std::vector<HostOutputs> round_with(StatePool& pool, const VerifyBatch& batch,
                                      InputsOf&& inputs_of, const std::vector<int32_t>& accepted) {
    const int64_t n = int64_t{static_cast<int64_t>(batch.rows.size())} * batch.window;
    std::vector<HostOutputs> out = outputs(n);
    pool.begin_verify(batch);
    for (int l = 0; l < layers_; ++l) {
      const auto views = Kind::put(out[l], put_);
      pool.verify(l, weights_[l], inputs_of(l), views);
      read_back(views, out[l]);
    }
    pool.commit(accepted);
    return out;
  }
  // Tokens [begin, begin + count) of `in` as views the pool reads (one request's rows of a
  // batch's inputs), in the PutBuffer's memory.
  typename Kind::Inputs put_rows(const HostInputs& in, int64_t begin, int64_t count) const {
    return Kind::put(in, [&](const Buffer& b) {
      TensorView v = put_(b);
      v.data = static_cast<char*>(v.data) +
               begin * v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
      v.shape[0] = count;
      return v;
    });
  }

  // The bytes of a contiguous view of the pools' memory (host, or through the Memory).
  std::vector<uint8_t> bytes(const TensorView& v) const {
    return mem_ != nullptr ? mem_->bytes(v) : view_bytes(v);
  }
  // Every slot's committed bytes of a pool (through the views: materializes).
  std::vector<uint8_t> pool_bytes(const StatePool& pool) const {
    std::vector<uint8_t> out;
    for (int l = 0; l < pool.config().num_layers; ++l) {
      for (const TensorView& v : {pool.conv_state(l), pool.ssm_state(l)}) {
        const auto b = bytes(v);
        out.insert(out.end(), b.begin(), b.end());
      }
    }
    return out;
  }

  // Bytes of tokens [begin, begin + count) of every output tensor of every layer (host).
  static std::vector<uint8_t> output_bytes(const std::vector<HostOutputs>& out, int64_t begin,
                                           int64_t count) {
    std::vector<uint8_t> bytes;
    for (const HostOutputs& o : out) {
      for (const auto& named : Kind::tensors(Kind::put(o, host_put))) {
        const TensorView& v = named.second;
        const int64_t row = v.numel() / v.shape[0] * static_cast<int64_t>(dtype_size(v.dtype));
        const auto* p = static_cast<const uint8_t*>(v.data) + begin * row;
        bytes.insert(bytes.end(), p, p + count * row);
      }
    }
    return bytes;
  }

  const typename Kind::Weights& weights(int l) const { return weights_[l]; }
  const PutBuffer& put() const { return put_; }

 private:
  // The outputs a verify wrote into `views` copied into `host` (with a Memory; else they are
  // host's own views already, or stay in the caller's device copies).
  void read_back(const typename Kind::Outputs& views, HostOutputs& host) const {
    if (mem_ == nullptr) return;
    const auto from = Kind::tensors(views);
    const auto to = Kind::tensors(Kind::put(host, host_put));
    for (std::size_t i = 0; i < from.size(); ++i) {
      const TensorView& dst = to[i].second;
      if (dst.data == nullptr || dst.numel() == 0) continue;
      const auto b = mem_->bytes(from[i].second);
      std::memcpy(
          dst.data, b.data(),
          std::min(b.size(), static_cast<std::size_t>(dst.numel()) * dtype_size(dst.dtype)));
    }
  }

  static int64_t tokens(const TokenInputs& in) { return in.mixed_qkv.shape()[0]; }
  static int64_t tokens(const Mamba2TokenInputs& in) { return in.xBC.shape()[0]; }
  static int64_t tokens(const KdaTokenInputs& in) { return in.mixed_qkv.shape()[0]; }

  Config layer_;
  int layers_;
  std::mt19937_64 rng_;
  PutBuffer put_;
  Memory* mem_ = nullptr;
  std::vector<typename Kind::HostWeights> host_weights_;
  std::vector<typename Kind::Weights> weights_;
};

}  // namespace specstate::test
