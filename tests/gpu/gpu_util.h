// GPU test helpers: device detection (decided once), device copies of host test buffers (with
// optional row padding, so kernels see non-contiguous strides), and tolerance comparisons.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <list>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/gdn_data.h"
#include "common/strategy_equivalence.h"
#include "specstate/specstate.h"

namespace specstate::test {

// True when a CUDA device is usable (cudaGetDeviceCount succeeds with >= 1 device).
bool has_gpu();

#define SPECSTATE_REQUIRE_GPU()                                          \
  do {                                                                   \
    if (!::specstate::test::has_gpu()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

#define SPECSTATE_CUDA_OK(expr)                                                \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// A CUDA stream owned by the test; declare it before the pools that use it, so that it is
// destroyed after them (a pool's stream must outlive the pool).
class CudaStream {
 public:
  explicit CudaStream(unsigned flags = cudaStreamDefault) {
    if (cudaStreamCreateWithFlags(&stream_, flags) != cudaSuccess) stream_ = nullptr;
  }
  ~CudaStream() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A device copy of a host Buffer; rows (leading dim) may be padded by `pad` elements.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(const Buffer& host, int64_t pad = 0);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorView view() const;
  TensorView rows(int64_t begin, int64_t count) const;
  // Copies `host` (same shape) into this tensor (synchronous).
  void upload(const Buffer& host);
  // Copies this tensor back into `host` (same shape; synchronous).
  void download(Buffer& host) const;
  // Fills every byte with 0xff (NaN for f32/bf16) so that unwritten outputs show.
  void poison();

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  int64_t row_elems_ = 0;   // elements of one row (all dims but the first)
  int64_t row_stride_ = 0;  // elements between rows (row_elems_ + pad)
};

struct DeviceWeights {
  DeviceTensor conv_weight, conv_bias, A_log, dt_bias;
  explicit DeviceWeights(const LayerWeights& w);
  GdnWeights view() const;
};

struct DeviceInputs {
  DeviceTensor mixed_qkv, a, b;
  DeviceInputs(const TokenInputs& in, int64_t pad);
  GdnInputs view() const;
  GdnInputs rows(int64_t begin, int64_t count) const;
};

struct DeviceOutputs {
  DeviceTensor conv_out, core_out;
  bool with_conv_out = true;
  DeviceOutputs(const TokenOutputs& out, int64_t pad, bool with_conv_out);
  GdnOutputs view() const;
  GdnOutputs rows(int64_t begin, int64_t count) const;
  void download(TokenOutputs& out) const;
};

// The CPU oracle and a CUDA pool on `stream` of one model and options, with `requests` slots
// acquired in each, in turn: request i is ch[i] in cpu and gh[i] in gpu. Declare the stream
// before them (a pool's stream must outlive the pool).
struct OraclePools {
  StatePool cpu, gpu;
  std::vector<SlotHandle> ch, gh;
  OraclePools(const ModelConfig& model, const PoolOptions& options, cudaStream_t stream,
              int requests);
  // The oracle and the CUDA pool with options of their own (e.g. another element order).
  OraclePools(const ModelConfig& model, const PoolOptions& cpu_options,
              const PoolOptions& gpu_options, cudaStream_t stream, int requests);
};

// `layers` random GDN layer weights drawn from `rng` one after another, with their device copies.
struct RandomLayers {
  std::vector<LayerWeights> weights;
  std::vector<DeviceWeights> dweights;
  RandomLayers(const GdnConfig& g, int layers, std::mt19937_64& rng);
};

// Some history before the rounds under test (the committed state is then not zero): `tokens`
// random tokens prefilled into every request, request after request and layer after layer, the
// same inputs in both pools; waits for `stream` after each layer.
void prefill_history(OraclePools& p, const RandomLayers& w, const GdnConfig& g, int tokens,
                     std::mt19937_64& rng, cudaStream_t stream);

// A verify batch of window `window` (no parents) over `handles` with a padding row inserted at
// index `pad_row`.
VerifyBatch padded_batch(const std::vector<SlotHandle>& handles, int pad_row, int window);

// The test name of a suite whose bool parameter says tree (true) or chain (false) windows.
std::string chain_or_tree(const ::testing::TestParamInfo<bool>& info);
// The test name of a graph suite over (tree window, CUDA pool in vLLM's element order).
std::string graph_case_name(const ::testing::TestParamInfo<std::tuple<bool, bool>>& info);

// All elements of a view (host or device memory; rows compact in any element order) as floats,
// in logical order.
std::vector<float> to_floats(const TensorView& view);
// Elements [begin, begin + count) of the leading dimension of a view, as floats.
std::vector<float> rows_to_floats(const TensorView& view, int64_t begin, int64_t count);
// Raw bytes of rows [begin, begin + count) (host or device).
std::vector<uint8_t> rows_bytes(const TensorView& view, int64_t begin, int64_t count);

// max |got - ref| over max |ref|; fails (with the worst index) above `tol`; also fails when the
// reference is all zeros or anything is NaN.
void expect_close(const std::vector<float>& ref, const std::vector<float>& got, double tol,
                  const std::string& what);

// State tolerance (max-norm relative) and output tolerance for a config's dtypes.
double state_tolerance(const GdnConfig& g);
double output_tolerance(const GdnConfig& g);

// The shared drivers' Memory (common/strategy_equivalence.h) on the device: views of device
// copies, read back in the stream's order.
class DeviceMemory final : public Memory {
 public:
  explicit DeviceMemory(cudaStream_t stream) : stream_(stream) {}
  Backend backend() const override { return Backend::kCuda; }
  void* stream() const override { return stream_; }
  TensorView put(const Buffer& host, bool persistent) override {
    auto& list = persistent ? persistent_ : round_;
    list.emplace_back(host);
    return list.back().view();
  }
  std::vector<uint8_t> bytes(const TensorView& view) override {
    cudaStreamSynchronize(stream_);
    return rows_bytes(view, 0, view.shape[0]);
  }
  void clear() override {
    cudaStreamSynchronize(stream_);
    round_.clear();
  }

 private:
  cudaStream_t stream_;
  std::list<DeviceTensor> persistent_, round_;
};

}  // namespace specstate::test
