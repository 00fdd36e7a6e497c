// Device helpers of kernels/common.cuh run on the GPU against the host's reading of the same
// bytes. load_any_or_zero: the recurrence kernels' gate parameters (A_log, dt_bias, D) as one
// predicated load of the dtype's width, 0 where the pointer is null (its PTX is hand-written).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_util.h"
#include "kernels/common.cuh"

namespace specstate::test {
namespace {

namespace k = specstate::kernels;

__global__ void load_any_or_zero_kernel(const void* p, k::ElemType t, const int64_t* idx, int n,
                                        float* out) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = k::load_any_or_zero(p, t, idx[i]);
}

// The kernel's value of element idx[i] of a device copy of `bytes` host bytes (a null pointer
// where `host` is null), read as dtype t, as bit patterns.
std::vector<uint32_t> device_loads(const void* host, size_t bytes, k::ElemType t,
                                   const std::vector<int64_t>& idx) {
  const int n = static_cast<int>(idx.size());
  void* dev = nullptr;
  int64_t* d_idx = nullptr;
  float* d_out = nullptr;
  std::vector<uint32_t> bits(idx.size(), 0xdeadbeefu);
  if ((host != nullptr && cudaMalloc(&dev, bytes) != cudaSuccess) ||
      cudaMalloc(&d_idx, n * sizeof(int64_t)) != cudaSuccess ||
      cudaMalloc(&d_out, n * sizeof(float)) != cudaSuccess) {
    ADD_FAILURE() << "cudaMalloc";
  } else {
    if (host != nullptr) cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(d_idx, idx.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice);
    cudaMemset(d_out, 0xff, n * sizeof(float));  // a value no load returns here
    load_any_or_zero_kernel<<<(n + 127) / 128, 128>>>(dev, t, d_idx, n, d_out);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(bits.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
  }
  cudaFree(dev);
  cudaFree(d_idx);
  cudaFree(d_out);
  return bits;
}

// Each load against the expected bits of its element (`want[e]`), and not every load zero.
void expect_loads(const std::vector<uint32_t>& got, const std::vector<int64_t>& idx,
                  const std::vector<uint32_t>& want, const char* what) {
  int nonzero = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    EXPECT_EQ(got[i], want[idx[i]]) << what << " element " << idx[i];
    nonzero += got[i] != 0u;
  }
  EXPECT_GT(nonzero, 0) << what;
}

// Values with every kind of bit pattern a gate parameter may hold: signs, -0, a subnormal, large
// magnitudes, and a NaN (loaded as its bits, never compared as a float).
std::vector<float> gate_values(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i % 2 ? -1.0f : 1.0f) * (0.37f + 1.9f * i);
  v[1] = -0.0f;
  v[2] = 1e-40f;
  v[3] = 3.0e38f;
  uint32_t nan_bits = 0x7fc00123u;
  std::memcpy(&v[4], &nan_bits, 4);
  return v;
}

// Every index, then a strided and a reversed walk: bf16 loads at odd indices (2-byte but not
// 4-byte aligned addresses).
std::vector<int64_t> walk(int n) {
  std::vector<int64_t> idx;
  for (int i = 0; i < n; ++i) idx.push_back(i);
  for (int i = 1; i < n; i += 3) idx.push_back(i);
  for (int i = n - 1; i >= 0; --i) idx.push_back(i);
  return idx;
}

TEST(LoadAnyOrZeroGpu, FloatParametersLoadTheirBits) {
  SPECSTATE_REQUIRE_GPU();
  const int n = 37;
  const std::vector<float> host = gate_values(n);
  std::vector<uint32_t> want(n);
  std::memcpy(want.data(), host.data(), n * sizeof(float));
  const std::vector<int64_t> idx = walk(n);
  expect_loads(device_loads(host.data(), n * sizeof(float), k::ElemType::kF32, idx), idx, want,
               "f32");
}

TEST(LoadAnyOrZeroGpu, Bf16ParametersLoadAsTheirFloat) {
  SPECSTATE_REQUIRE_GPU();
  const int n = 37;
  const std::vector<float> values = gate_values(n);
  std::vector<uint16_t> host(n);
  std::vector<uint32_t> want(n);
  for (int i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &values[i], 4);
    host[i] = static_cast<uint16_t>(b >> 16);  // the top half: a bf16 (truncated)
    want[i] = static_cast<uint32_t>(host[i]) << 16;
  }
  const std::vector<int64_t> idx = walk(n);
  expect_loads(device_loads(host.data(), n * sizeof(uint16_t), k::ElemType::kBF16, idx), idx, want,
               "bf16");
}

TEST(LoadAnyOrZeroGpu, ANullParameterReadsNothingAndIsZero) {
  SPECSTATE_REQUIRE_GPU();
  // Any index: nothing is read where the pointer is null (a read would fault the launch).
  const std::vector<int64_t> idx = {0, 1, 7, 1 << 20, int64_t{1} << 40};
  for (const k::ElemType t : {k::ElemType::kF32, k::ElemType::kBF16}) {
    const std::vector<uint32_t> got = device_loads(nullptr, 0, t, idx);
    for (size_t i = 0; i < idx.size(); ++i) {
      EXPECT_EQ(got[i], 0u) << "dtype " << static_cast<int>(t) << " index " << idx[i];
    }
  }
}

}  // namespace
}  // namespace specstate::test
