// Helpers both GPU benchmark binaries share: error checks, device allocation, medians and the
// device copy bandwidth every figure is reported against (METHOD: measured by the same binary).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_fill.h"

namespace specstate::bench {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

template <typename T>
T* device_alloc(std::size_t count) {
  void* p = nullptr;
  check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Device copy bandwidth (bytes read + written) of a 1 GiB and a 4 GiB cudaMemcpy, the larger.
inline double measure_copy_gbps(cudaStream_t stream) {
  double best = 0;
  for (std::size_t bytes : {std::size_t{1} << 30, std::size_t{4} << 30}) {
    char* a = device_alloc<char>(bytes);
    char* b = device_alloc<char>(bytes);
    check(fill_random(a, bytes / 4, false, 1.0f, 7, stream), "fill");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> ms;
    for (int i = 0; i < 12; ++i) {
      cudaEventRecord(e0, stream);
      cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream);
      cudaEventRecord(e1, stream);
      check(cudaEventSynchronize(e1), "copy");
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      if (i >= 2) ms.push_back(t);
    }
    const double gbps = 2.0 * bytes / (median(ms) * 1e-3) / 1e9;
    std::printf("copy bandwidth (%zu MiB, read + write): %.1f GB/s\n", bytes >> 20, gbps);
    best = std::max(best, gbps);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
  }
  return best;
}

}  // namespace specstate::bench
