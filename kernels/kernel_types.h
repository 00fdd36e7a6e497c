// Host-safe types shared by the kernels' launcher declarations (no CUDA device code here).
#pragma once

#include <cstdint>

namespace specstate::kernels {

// Element types the kernels read and write. Values match specstate::DType (the host side
// converts explicitly; kernels/ does not include the public API).
enum class ElemType : int32_t { kF32 = 0, kBF16 = 1 };

// Largest number of values one upload launch carries in its parameters (4 KiB parameter
// budget of a classic launch).
inline constexpr int kUploadChunk = 960;

}  // namespace specstate::kernels
