// Device helpers of kernels/common.cuh and kernels/gdn_step.cuh run on the GPU. load_any_or_zero
// (against the host's reading of the same bytes): the recurrence kernels' gate parameters (A_log,
// dt_bias, D) as one predicated load of the dtype's width, 0 where the pointer is null (its PTX is
// hand-written). lanes_sum (against the token step's shuffle butterfly): GDN's deferred window
// outputs, summed from staged partials at a block's flush, must be the butterfly's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu_util.h"
#include "kernels/common.cuh"
#include "kernels/gdn_step.cuh"

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

// A warp of 4 rows x 8 lanes: each lane's partial sum (in[warp * 32 + lane]); per row the sum as
// gdn_step_body's butterfly leaves it (full[], lane 0's; every lane's is checked equal), the sum
// from the partials after the first distance staged in shared memory and added by lanes_sum<4>
// (staged4[], as gdn_flush_block), from the raw partials by lanes_sum<8> (staged8[]), and in lane
// order (seq[], a different order: the data must tell the orders apart).
__global__ void lanes_sum_kernel(const float* in, float* full, float* staged4, float* staged8,
                                 float* seq, int* lanes_agree) {
  constexpr int LANES = 8;
  __shared__ __align__(16) float part4[4 * 4];
  __shared__ __align__(16) float part8[4 * 8];
  const int lane = threadIdx.x, row = lane / LANES, kl = lane % LANES;
  const int w = blockIdx.x;
  const float x = in[w * 32 + lane];
  part8[row * LANES + kl] = x;
  float sq = x;
#pragma unroll
  for (int m = LANES / 2; m > 0; m >>= 1) {
    sq += __shfl_xor_sync(0xffffffffu, sq, m);
    if (m == LANES / 2) part4[row * 4 + kl % 4] = sq;  // lanes kl and kl + 4: the same bits
  }
  const float lane0 = __shfl_sync(0xffffffffu, sq, row * LANES);
  const unsigned same = __ballot_sync(0xffffffffu, __float_as_uint(sq) == __float_as_uint(lane0));
  __syncwarp();
  if (kl == 0) {
    full[w * 4 + row] = sq;
    staged4[w * 4 + row] = k::lanes_sum<4>(&part4[row * 4]);
    staged8[w * 4 + row] = k::lanes_sum<8>(&part8[row * LANES]);
    float s = 0.0f;
    for (int i = 0; i < LANES; ++i) s += part8[row * LANES + i];
    seq[w * 4 + row] = s;
  }
  if (lane == 0) lanes_agree[w] = same == 0xffffffffu;
}

TEST(LanesSumGpu, StagedPartialsSumToTheButterflysBits) {
  SPECSTATE_REQUIRE_GPU();
  // Partials of mixed signs and magnitudes (2^-20 .. 2^20), so that the order of the additions
  // shows in the rounding.
  constexpr int kWarps = 256, n = kWarps * 32, rows = kWarps * 4;
  std::vector<float> in(n);
  uint32_t state = 12345u;
  for (float& v : in) {
    state = state * 1664525u + 1013904223u;
    const float mant = 1.0f + static_cast<float>(state >> 9) / static_cast<float>(1u << 23);
    const int e = static_cast<int>((state >> 3) % 41) - 20;
    v = std::ldexp((state & 1u) ? -mant : mant, e);
  }
  float *d_in = nullptr, *d_out = nullptr;
  int* d_agree = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, 4 * rows * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_agree, kWarps * sizeof(int)), cudaSuccess);
  cudaMemcpy(d_in, in.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  lanes_sum_kernel<<<kWarps, 32>>>(d_in, d_out, d_out + rows, d_out + 2 * rows, d_out + 3 * rows,
                                   d_agree);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint32_t> out(4 * rows);
  std::vector<int> agree(kWarps);
  cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(agree.data(), d_agree, kWarps * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_agree);
  int nonzero = 0, order_shows = 0;
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(out[rows + r], out[r]) << "lanes_sum<4> of the staged partials, row " << r;
    EXPECT_EQ(out[2 * rows + r], out[r]) << "lanes_sum<8> of the raw partials, row " << r;
    nonzero += out[r] != 0u;
    order_shows += out[3 * rows + r] != out[r];
  }
  for (int w = 0; w < kWarps; ++w) EXPECT_EQ(agree[w], 1) << "the butterfly's lanes, warp " << w;
  EXPECT_GT(nonzero, rows / 2);
  // The data tells orders apart: a sum in lane order differs from the butterfly's somewhere.
  EXPECT_GT(order_shows, 0);
}

}  // namespace
}  // namespace specstate::test
