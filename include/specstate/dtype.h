// Storage dtypes and the bf16 <-> fp32 conversions every backend uses (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace specstate {

enum class DType : int32_t { kF32 = 0, kBF16 = 1, kI32 = 2 };

const char* dtype_name(DType dtype) noexcept;

constexpr std::size_t dtype_size(DType dtype) noexcept { return dtype == DType::kBF16 ? 2 : 4; }

// fp32 -> bf16 with round-to-nearest-even; NaN stays a (quiet) NaN.
inline uint16_t bf16_from_float(float value) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float float_from_bf16(uint16_t value) noexcept {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// The value `value` takes after a round trip through bf16.
inline float round_to_bf16(float value) noexcept { return float_from_bf16(bf16_from_float(value)); }

}  // namespace specstate
