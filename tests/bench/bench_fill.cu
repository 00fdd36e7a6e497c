#include <cuda_bf16.h>

#include "bench_fill.h"

namespace specstate::bench {
namespace {

__device__ float hash_uniform(uint64_t i, uint64_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

__global__ void fill_kernel(void* data, std::size_t n, bool bf16, float scale, uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float v = scale * hash_uniform(i, seed);
    if (bf16) {
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(data)[i] = v;
    }
  }
}

}  // namespace

cudaError_t fill_random(void* data, std::size_t n, bool bf16, float scale, uint64_t seed,
                        cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(data, n, bf16, scale, seed);
  return cudaGetLastError();
}

}  // namespace specstate::bench
