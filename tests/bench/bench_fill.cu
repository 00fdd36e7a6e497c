// Random benchmark data from cuRAND (Philox), mapped to [-scale, scale) and converted to the
// storage dtype with Thrust, all on the caller's stream.
#include <cuda_bf16.h>
#include <curand.h>
#include <thrust/device_ptr.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform.h>

#include "bench_fill.h"

namespace specstate::bench {
namespace {

struct ToBf16 {
  float scale;
  __device__ __nv_bfloat16 operator()(float u) const {
    return __float2bfloat16_rn(scale * (2.0f * u - 1.0f));
  }
};

struct Rescale {
  float scale;
  __device__ float operator()(float u) const { return scale * (2.0f * u - 1.0f); }
};

cudaError_t from_curand(curandStatus_t status) {
  return status == CURAND_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace

cudaError_t fill_random(void* data, std::size_t n, bool bf16, float scale, uint64_t seed,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  curandGenerator_t gen = nullptr;
  cudaError_t err = from_curand(curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  if (err != cudaSuccess) return err;
  float* uniform = static_cast<float*>(data);
  if (bf16) err = cudaMallocAsync(reinterpret_cast<void**>(&uniform), n * sizeof(float), stream);
  if (err == cudaSuccess) err = from_curand(curandSetStream(gen, stream));
  if (err == cudaSuccess) err = from_curand(curandSetPseudoRandomGeneratorSeed(gen, seed));
  if (err == cudaSuccess) err = from_curand(curandGenerateUniform(gen, uniform, n));
  if (err == cudaSuccess) {
    const auto policy = thrust::cuda::par_nosync.on(stream);
    thrust::device_ptr<float> u(uniform);
    if (bf16) {
      thrust::transform(policy, u, u + n,
                        thrust::device_ptr<__nv_bfloat16>(static_cast<__nv_bfloat16*>(data)),
                        ToBf16{scale});
    } else {
      thrust::transform(policy, u, u + n, u, Rescale{scale});
    }
    err = cudaGetLastError();
  }
  if (bf16 && uniform != data) {
    const cudaError_t freed = cudaFreeAsync(uniform, stream);
    if (err == cudaSuccess) err = freed;
  }
  curandDestroyGenerator(gen);
  return err;
}

}  // namespace specstate::bench
