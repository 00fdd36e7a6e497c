// Random device data for the benchmarks (cuRAND Philox, deterministic per seed).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace specstate::bench {

// n elements, uniform in [-scale, scale): bf16 (bf16 = true) or f32.
cudaError_t fill_random(void* data, std::size_t n, bool bf16, float scale, uint64_t seed,
                        cudaStream_t stream);

}  // namespace specstate::bench
