// tp_verify_loop's tensor-parallel GDN layer model (the host side of one rank): device buffers,
// the ShardedGdn layer (its shard of the weights, shard_gather of the inputs, the pool call and the
// ncclAllGather of the core output) and the shard of a TP1 export. The loop, the acceptance and the
// checks are main.cpp.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hybrid_model.h"

namespace tp_verify_loop {

namespace dvl = draft_verify_loop;
using specstate::Device;
using specstate::DType;
using specstate::GdnInputs;
using specstate::GdnOutputs;
using specstate::GdnWeights;
using specstate::ModelConfig;
using specstate::ShardMap;
using specstate::SlotHandle;
using specstate::StatePool;
using specstate::TensorView;

inline constexpr int kExitSkip = 77;

inline void cuda_check(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA error at line ") + std::to_string(line) + ": " +
                             what + ": " + cudaGetErrorString(e));
  }
}
inline void nccl_check(ncclResult_t e, const char* what, int line) {
  if (e != ncclSuccess) {
    throw std::runtime_error(std::string("NCCL error at line ") + std::to_string(line) + ": " +
                             what + ": " + ncclGetErrorString(e));
  }
}
#define CUDA_OK(expr) cuda_check((expr), #expr, __LINE__)
#define NCCL_OK(expr) nccl_check((expr), #expr, __LINE__)

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::size_t count = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : count(n) {
    if (n > 0) CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), count(o.count) { o.ptr = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(count, o.count);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
};

template <typename T>
struct PinnedBuffer {
  T* ptr = nullptr;
  explicit PinnedBuffer(std::size_t n) {
    if (n > 0) CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&ptr), n * sizeof(T)));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr) cudaFreeHost(ptr);
  }
};

struct EventPair {
  cudaEvent_t begin = nullptr, end = nullptr;
  EventPair() {
    CUDA_OK(cudaEventCreate(&begin));
    CUDA_OK(cudaEventCreate(&end));
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
  }
  float ms() const {
    float t = 0;
    CUDA_OK(cudaEventElapsedTime(&t, begin, end));
    return t;
  }
};

// One rank's GDN layers: its shard of the weights on its device, and the per-call path host TP1
// inputs -> its columns (shard_gather) -> device -> pool op -> ncclAllGather of the core output
// (comm null: tp = 1, no collective) -> host TP1 core output. Every rank ends a call with the same
// host core output (all heads), so the host model stays replicated bit for bit.
class ShardedGdn {
 public:
  using Op = std::function<void(int, const GdnWeights&, const GdnInputs&, const GdnOutputs&)>;

  ShardedGdn(const dvl::HybridModel& model, int tp, int rank, ncclComm_t comm, cudaStream_t stream,
             int64_t max_tokens)
      : model_(model), tp_(tp), comm_(comm), stream_(stream), max_tokens_(max_tokens) {
    const ModelConfig tp1 = model.state_config();
    for (int q = 0; q < tp; ++q) maps_.push_back(specstate::shard_map(tp1, tp, q));
    map_ = maps_[static_cast<std::size_t>(rank)];
    const auto& g = model.shape().gdn;
    D_ = g.conv_dim();
    HV_ = g.num_v_heads;
    V_ = g.head_v_dim;
    W_ = g.conv_width;
    Ds_ = map_.conv_dim();
    HVs_ = map_.heads.count;
    for (int l = 0; l < model.num_gdn_layers(); ++l) {
      const dvl::GdnLayer& layer = model.gdn(l);
      std::vector<float> cw(static_cast<std::size_t>(Ds_ * W_)), al(HVs_), db(HVs_);
      specstate::shard_gather(
          TensorView::contiguous(layer.conv_weight.data(), DType::kF32, {D_, W_}), 0, map_.conv,
          TensorView::contiguous(cw.data(), DType::kF32, {Ds_, W_}));
      specstate::shard_gather(TensorView::contiguous(layer.A_log.data(), DType::kF32, {HV_}), 0,
                              {map_.heads}, TensorView::contiguous(al.data(), DType::kF32, {HVs_}));
      specstate::shard_gather(TensorView::contiguous(layer.dt_bias.data(), DType::kF32, {HV_}), 0,
                              {map_.heads}, TensorView::contiguous(db.data(), DType::kF32, {HVs_}));
      Layer dl;
      dl.conv_weight = DeviceBuffer<float>(cw.size());
      dl.A_log = DeviceBuffer<float>(al.size());
      dl.dt_bias = DeviceBuffer<float>(db.size());
      CUDA_OK(cudaMemcpy(dl.conv_weight.ptr, cw.data(), cw.size() * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(dl.A_log.ptr, al.data(), al.size() * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(dl.dt_bias.ptr, db.data(), db.size() * 4, cudaMemcpyHostToDevice));
      layers_.push_back(std::move(dl));
      timing_.emplace_back(new EventPair[2]);
    }
    const auto n = static_cast<std::size_t>(max_tokens);
    in_host_ = std::make_unique<PinnedBuffer<float>>(n * (Ds_ + 2 * HVs_));
    core_host_ = std::make_unique<PinnedBuffer<float>>(n * HV_ * V_);
    qkv_ = DeviceBuffer<float>(n * Ds_);
    a_ = DeviceBuffer<float>(n * HVs_);
    b_ = DeviceBuffer<float>(n * HVs_);
    core_ = DeviceBuffer<float>(n * HVs_ * V_);
    gathered_ = DeviceBuffer<float>(n * HV_ * V_);
  }

  const ShardMap& map() const noexcept { return map_; }

  // One layer call; `timed`: record CUDA events around the pool op and the all-gather.
  void call(int l, const GdnInputs& in, const GdnOutputs& out, const Op& op, bool timed) {
    const int64_t n = in.mixed_qkv.shape[0];
    if (n > max_tokens_) throw std::runtime_error("ShardedGdn: more tokens than sized for");
    float* h_qkv = in_host_->ptr;
    float* h_a = h_qkv + n * Ds_;
    float* h_b = h_a + n * HVs_;
    specstate::shard_gather(in.mixed_qkv, 1, map_.conv,
                            TensorView::contiguous(h_qkv, DType::kF32, {n, Ds_}));
    specstate::shard_gather(in.a, 1, {map_.heads},
                            TensorView::contiguous(h_a, DType::kF32, {n, HVs_}));
    specstate::shard_gather(in.b, 1, {map_.heads},
                            TensorView::contiguous(h_b, DType::kF32, {n, HVs_}));
    CUDA_OK(cudaMemcpyAsync(qkv_.ptr, h_qkv, n * Ds_ * 4, cudaMemcpyHostToDevice, stream_));
    CUDA_OK(cudaMemcpyAsync(a_.ptr, h_a, n * HVs_ * 4, cudaMemcpyHostToDevice, stream_));
    CUDA_OK(cudaMemcpyAsync(b_.ptr, h_b, n * HVs_ * 4, cudaMemcpyHostToDevice, stream_));
    const Layer& w = layers_[static_cast<std::size_t>(l)];
    const GdnWeights dw{
        TensorView::contiguous(w.conv_weight.ptr, DType::kF32, {Ds_, W_}, Device::kCuda),
        {},
        TensorView::contiguous(w.A_log.ptr, DType::kF32, {HVs_}, Device::kCuda),
        TensorView::contiguous(w.dt_bias.ptr, DType::kF32, {HVs_}, Device::kCuda)};
    const GdnInputs din{TensorView::contiguous(qkv_.ptr, DType::kF32, {n, Ds_}, Device::kCuda),
                        TensorView::contiguous(a_.ptr, DType::kF32, {n, HVs_}, Device::kCuda),
                        TensorView::contiguous(b_.ptr, DType::kF32, {n, HVs_}, Device::kCuda)};
    const GdnOutputs dout{
        {}, TensorView::contiguous(core_.ptr, DType::kF32, {n, HVs_, V_}, Device::kCuda)};
    EventPair* ev = timing_[static_cast<std::size_t>(l)].get();
    if (timed) CUDA_OK(cudaEventRecord(ev[0].begin, stream_));
    op(l, dw, din, dout);
    if (timed) CUDA_OK(cudaEventRecord(ev[0].end, stream_));
    const int64_t shard_elems = n * HVs_ * V_;
    if (timed) CUDA_OK(cudaEventRecord(ev[1].begin, stream_));
    if (comm_) {
      // Rank q's block of `gathered` is its core output [n, HVs, V].
      NCCL_OK(ncclAllGather(core_.ptr, gathered_.ptr, static_cast<std::size_t>(shard_elems),
                            ncclFloat, comm_, stream_));
    } else {
      CUDA_OK(cudaMemcpyAsync(gathered_.ptr, core_.ptr, shard_elems * 4, cudaMemcpyDeviceToDevice,
                              stream_));
    }
    if (timed) CUDA_OK(cudaEventRecord(ev[1].end, stream_));
    CUDA_OK(cudaMemcpyAsync(core_host_->ptr, gathered_.ptr, tp_ * shard_elems * 4,
                            cudaMemcpyDeviceToHost, stream_));
    CUDA_OK(cudaStreamSynchronize(stream_));
    if (timed) {
      verify_ms_ += ev[0].ms();
      gather_ms_ += ev[1].ms();
    }
    // [tp][n][HVs][V] -> [n][HV][V]: rank q's heads at maps_[q].heads.
    auto* core = static_cast<float*>(out.core_out.data);
    for (int q = 0; q < tp_; ++q) {
      const ShardMap& m = maps_[static_cast<std::size_t>(q)];
      const int64_t hs = m.heads.count * V_;
      for (int64_t t = 0; t < n; ++t) {
        std::memcpy(core + t * HV_ * V_ + m.heads.begin * V_, core_host_->ptr + (q * n + t) * hs,
                    static_cast<std::size_t>(hs) * 4);
      }
    }
  }

  // Sums of the timed calls since the last reset (ms).
  void reset_timing() { verify_ms_ = gather_ms_ = 0; }
  double verify_ms() const noexcept { return verify_ms_; }
  double gather_ms() const noexcept { return gather_ms_; }

 private:
  struct Layer {
    DeviceBuffer<float> conv_weight, A_log, dt_bias;
  };
  const dvl::HybridModel& model_;
  int tp_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int64_t max_tokens_;
  std::vector<ShardMap> maps_;
  ShardMap map_;
  int64_t D_ = 0, HV_ = 0, V_ = 0, W_ = 0, Ds_ = 0, HVs_ = 0;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<EventPair[]>> timing_;
  std::unique_ptr<PinnedBuffer<float>> in_host_, core_host_;
  DeviceBuffer<float> qkv_, a_, b_, core_, gathered_;
  double verify_ms_ = 0, gather_ms_ = 0;
};

// rank r's part of a TP1 export_slot image: per layer its conv channels, then its SSM heads.
inline std::vector<uint8_t> shard_of_export(const std::vector<uint8_t>& tp1,
                                            const ModelConfig& config, const ShardMap& m) {
  const int64_t D = config.conv_dim(), W1 = config.conv_width() - 1;
  const int64_t HV = config.gdn.num_v_heads, V = config.gdn.head_v_dim, K = config.gdn.head_k_dim;
  const DType cd = config.conv_state_dtype(), sd = config.ssm_state_dtype();
  const int64_t Ds = m.conv_dim(), HVs = m.heads.count;
  const int64_t conv_bytes = D * W1 * static_cast<int64_t>(specstate::dtype_size(cd));
  const int64_t ssm_bytes = HV * V * K * static_cast<int64_t>(specstate::dtype_size(sd));
  const int64_t sconv = Ds * W1 * static_cast<int64_t>(specstate::dtype_size(cd));
  const int64_t sssm = HVs * V * K * static_cast<int64_t>(specstate::dtype_size(sd));
  std::vector<uint8_t> out(static_cast<std::size_t>(config.num_layers * (sconv + sssm)));
  for (int l = 0; l < config.num_layers; ++l) {
    const uint8_t* src = tp1.data() + l * (conv_bytes + ssm_bytes);
    uint8_t* dst = out.data() + l * (sconv + sssm);
    specstate::shard_gather(TensorView::contiguous(src, cd, {D, W1}), 0, m.conv,
                            TensorView::contiguous(dst, cd, {Ds, W1}));
    specstate::shard_gather(TensorView::contiguous(src + conv_bytes, sd, {HV, V, K}), 0, {m.heads},
                            TensorView::contiguous(dst + sconv, sd, {HVs, V, K}));
  }
  return out;
}

}  // namespace tp_verify_loop
