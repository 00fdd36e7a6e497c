// Test helpers: owned buffers with views, random GDN weights and inputs shaped like real ones
// (DESIGN.md / golden README distributions), pool snapshots for bit-exact comparisons.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::test {

// A host buffer of f32, bf16 or i32 elements with a row-major shape.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, std::vector<int64_t> shape);

  TensorView view() const;
  // A view of rows [begin, begin + count) of the leading dimension.
  TensorView rows(int64_t begin, int64_t count) const;
  int64_t numel() const noexcept { return numel_; }
  float get(int64_t i) const;
  void set(int64_t i, float value);
  DType dtype() const noexcept { return dtype_; }
  const std::vector<int64_t>& shape() const noexcept { return shape_; }
  void* data() noexcept { return bytes_.data(); }
  const std::vector<uint8_t>& bytes() const noexcept { return bytes_; }

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  mutable std::vector<uint8_t> bytes_;
};

// What a test writes into outputs before a verify whose padding rows must not be written
// (exact in bf16; a zero-filled buffer could not tell a padding row written with zeros).
constexpr float kPaddingMarker = 7.0f;

// Sets every element of a contiguous host view (f32 or bf16) to `value`.
inline void host_fill(const TensorView& v, float value) {
  for (int64_t i = 0; i < v.numel(); ++i) {
    if (v.dtype == DType::kBF16) {
      static_cast<uint16_t*>(v.data)[i] = bf16_from_float(value);
    } else {
      static_cast<float*>(v.data)[i] = value;
    }
  }
}

struct LayerWeights {
  Buffer conv_weight, conv_bias, A_log, dt_bias;
  GdnWeights view() const;
};

// n tokens of one layer's inputs.
struct TokenInputs {
  Buffer mixed_qkv, a, b;
  GdnInputs view() const;
  GdnInputs rows(int64_t begin, int64_t count) const;
};

struct TokenOutputs {
  Buffer conv_out, core_out;
  GdnOutputs view() const;
  GdnOutputs rows(int64_t begin, int64_t count) const;
};

GdnConfig small_config(DType act = DType::kF32, DType conv_state = DType::kF32,
                       DType ssm_state = DType::kF32, bool conv_bias = true);
// H = HV = 1, K = V = 4, W = 2, f32 activations and conv state: the smallest GDN layer.
GdnConfig tiny_config();
LayerWeights random_weights(const GdnConfig& config, std::mt19937_64& rng);
TokenInputs random_inputs(const GdnConfig& config, int64_t tokens, std::mt19937_64& rng);
TokenOutputs make_outputs(const GdnConfig& config, int64_t tokens);
// A random tree of T nodes: parents[0] = -1, parents[t] uniform in [0, t).
std::vector<int32_t> random_tree(int T, std::mt19937_64& rng);

// Copies of the whole pool's committed state (all layers), and of one slot.
std::vector<uint8_t> committed_bytes(const StatePool& pool);
std::vector<uint8_t> slot_bytes(const StatePool& pool, int slot);
// Sum of squares of a host view (any dtype): tests check results are not all zeros.
double sum_squares(const TensorView& view);

}  // namespace specstate::test
