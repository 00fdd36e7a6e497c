// The CPU backend: the oracle every other backend and strategy is tested against. Memory is
// host memory; verify, advance and commit run on the calling thread.
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "../backend.h"
#include "../logging.h"
#include "cpu_math.h"
#include "specstate/status.h"

namespace specstate::detail {
namespace {

using cpu::load;
using cpu::store;

// What one token's update needs of a layer call, plus per-call work buffers.
class GdnTokenKernel {
 public:
  GdnTokenKernel(const PoolStorage& storage, const GdnWeights& w, const GdnInputs& in,
                 const GdnOutputs& out)
      : g_(storage.config.gdn), w_(w), in_(in), out_(out) {
    const int d = g_.conv_dim();
    hist_ = g_.conv_width - 1;
    x_.resize(d);
    y_.resize(d);
    window_.resize(static_cast<std::size_t>(d) * hist_);
    next_window_.resize(window_.size());
    head_state_.resize(static_cast<std::size_t>(g_.head_v_dim) * g_.head_k_dim);
    head_out_.resize(g_.head_v_dim);
    scale_ = g_.effective_scale();
  }

  // Advances one token: conv window prev_conv -> next_conv, SSM prev_ssm -> next_ssm (storage
  // pointers of one slot/snapshot of this layer; prev and next may be the same memory).
  void step(int64_t token, const void* prev_conv, void* next_conv, const void* prev_ssm,
            void* next_ssm) {
    const int d = g_.conv_dim();
    const DType act = g_.act_dtype;
    for (int c = 0; c < d; ++c) {
      x_[c] = load(in_.mixed_qkv, token * in_.mixed_qkv.stride[0] + c * in_.mixed_qkv.stride[1]);
    }
    cpu::load_array(prev_conv, g_.conv_state_dtype, int64_t{d} * hist_, window_.data());
    cpu::conv_step(window_.data(), x_.data(), w_.conv_weight, w_.conv_bias, d, g_.conv_width,
                   y_.data(), next_window_.data());
    cpu::store_array(next_window_.data(), int64_t{d} * hist_, g_.conv_state_dtype, next_conv);
    // The conv output is stored in the activation dtype, and that rounded value feeds the
    // recurrence, as in the model.
    for (int c = 0; c < d; ++c) {
      y_[c] = cpu::round_to(act, y_[c]);
      if (!out_.conv_out.empty()) {
        store(out_.conv_out, token * out_.conv_out.stride[0] + c * out_.conv_out.stride[1], y_[c]);
      }
    }

    const int H = g_.num_k_heads, HV = g_.num_v_heads, K = g_.head_k_dim, V = g_.head_v_dim;
    const int64_t head_elems = int64_t{V} * K;
    const DType sdt = g_.ssm_state_dtype;
    const std::size_t sbytes = dtype_size(sdt);
    for (int hv = 0; hv < HV; ++hv) {
      const int h = hv / (HV / H);
      cpu::HeadInputs head;
      head.q = y_.data() + int64_t{h} * K;
      head.k = y_.data() + int64_t{H} * K + int64_t{h} * K;
      head.v = y_.data() + 2 * int64_t{H} * K + int64_t{hv} * V;
      head.a = load(in_.a, token * in_.a.stride[0] + hv * in_.a.stride[1]);
      head.b = load(in_.b, token * in_.b.stride[0] + hv * in_.b.stride[1]);
      head.A_log = load(w_.A_log, hv * w_.A_log.stride[0]);
      head.dt_bias = load(w_.dt_bias, hv * w_.dt_bias.stride[0]);
      const auto* src = static_cast<const char*>(prev_ssm) + hv * head_elems * sbytes;
      auto* dst = static_cast<char*>(next_ssm) + hv * head_elems * sbytes;
      cpu::load_array(src, sdt, head_elems, head_state_.data());
      cpu::gdn_head_step(head, scale_, K, V, head_state_.data(), head_out_.data());
      cpu::store_array(head_state_.data(), head_elems, sdt, dst);
      for (int p = 0; p < V; ++p) {
        store(out_.core_out,
              token * out_.core_out.stride[0] + hv * out_.core_out.stride[1] +
                  p * out_.core_out.stride[2],
              head_out_[p]);
      }
    }
  }

 private:
  const GdnConfig& g_;
  const GdnWeights& w_;
  const GdnInputs& in_;
  const GdnOutputs& out_;
  int hist_ = 0;
  float scale_ = 1.0f;
  std::vector<float> x_, y_, window_, next_window_, head_state_, head_out_;
};

class CpuBackend final : public BackendImpl {
 public:
  Backend kind() const noexcept override { return Backend::kCpu; }
  Device device() const noexcept override { return Device::kCpu; }

  void allocate(PoolStorage& s) override {
    s.conv = allocate_zeroed(s.conv_bytes());
    s.ssm = allocate_zeroed(s.ssm_bytes());
    s.snap_conv = allocate_zeroed(s.snap_conv_bytes());
    s.snap_ssm = allocate_zeroed(s.snap_ssm_bytes());
    if (!s.conv || !s.ssm || !s.snap_conv || !s.snap_ssm) {
      free(s);
      throw Error(Status::kResourceExhausted,
                  "StatePool: cannot allocate " +
                      std::to_string(s.conv_bytes() + s.ssm_bytes() + s.snap_conv_bytes() +
                                     s.snap_ssm_bytes()) +
                      " bytes of host memory");
    }
  }

  void free(PoolStorage& s) noexcept override {
    for (void** p : {&s.conv, &s.ssm, &s.snap_conv, &s.snap_ssm}) {
      std::free(*p);
      *p = nullptr;
    }
  }

  void zero_slot(const PoolStorage& s, int slot) override {
    for (int l = 0; l < s.config.num_layers; ++l) {
      std::memset(conv_ptr(s, l, slot), 0, conv_bytes(s));
      std::memset(ssm_ptr(s, l, slot), 0, ssm_bytes(s));
    }
  }

  void advance_gdn(const PoolStorage& s, const AdvanceWork& work, const GdnWeights& weights,
                   const GdnInputs& inputs, const GdnOutputs& outputs) override {
    GdnTokenKernel kernel(s, weights, inputs, outputs);
    for (std::size_t r = 0; r < work.slots.size(); ++r) {
      const int slot = work.slots[r];
      if (slot < 0) continue;
      void* conv = conv_ptr(s, work.layer, slot);
      void* ssm = ssm_ptr(s, work.layer, slot);
      for (int i = 0; i < work.tokens_per_row; ++i) {
        kernel.step(static_cast<int64_t>(r) * work.tokens_per_row + i, conv, conv, ssm, ssm);
      }
    }
  }

  void verify_gdn(const PoolStorage& s, int layer, const RoundPlan& plan, const GdnWeights& weights,
                  const GdnInputs& inputs, const GdnOutputs& outputs) override {
    GdnTokenKernel kernel(s, weights, inputs, outputs);
    for (int r = 0; r < plan.rows; ++r) {
      const int slot = plan.slots[r];
      if (slot < 0) continue;  // padding rows: nothing read, nothing written
      for (int t = 0; t < plan.window; ++t) {
        const int parent = plan.parents[static_cast<std::size_t>(r) * plan.window + t];
        // Token t starts from its parent's saved state; the root from the committed state,
        // which verify only reads.
        const void* prev_conv =
            parent < 0 ? conv_ptr(s, layer, slot) : snap_conv_ptr(s, layer, r, parent);
        const void* prev_ssm =
            parent < 0 ? ssm_ptr(s, layer, slot) : snap_ssm_ptr(s, layer, r, parent);
        kernel.step(static_cast<int64_t>(r) * plan.window + t, prev_conv,
                    snap_conv_ptr(s, layer, r, t), prev_ssm, snap_ssm_ptr(s, layer, r, t));
      }
    }
  }

  void commit(const PoolStorage& s, const CommitWork& work) override {
    if (!work.device_accepted.empty()) {
      throw Error(Status::kInvalidArgument,
                  "StatePool::commit: accepted lives on cuda, the pool's backend is cpu");
    }
    const RoundPlan& plan = *work.plan;
    for (int l = 0; l < s.config.num_layers; ++l) {
      for (int r = 0; r < plan.rows; ++r) {
        const int step = work.last_step[r];
        const int slot = plan.slots[r];
        if (slot < 0 || step < 0) continue;
        std::memcpy(conv_ptr(s, l, slot), snap_conv_ptr(s, l, r, step), conv_bytes(s));
        std::memcpy(ssm_ptr(s, l, slot), snap_ssm_ptr(s, l, r, step), ssm_bytes(s));
      }
    }
    logger().trace("cpu commit: {} rows x {} layers", plan.rows, s.config.num_layers);
  }

 private:
  static void* allocate_zeroed(std::size_t bytes) {
    // 64-byte alignment for the Eigen maps; calloc gives zeroed memory.
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p) std::memset(p, 0, rounded == 0 ? 64 : rounded);
    return p;
  }
  static std::size_t conv_bytes(const PoolStorage& s) {
    return s.conv_elems() * dtype_size(s.config.conv_state_dtype());
  }
  static std::size_t ssm_bytes(const PoolStorage& s) {
    return s.ssm_elems() * dtype_size(s.config.ssm_state_dtype());
  }
  static char* conv_ptr(const PoolStorage& s, int layer, int slot) {
    return static_cast<char*>(s.conv) +
           (static_cast<std::size_t>(layer) * s.num_slots + slot) * conv_bytes(s);
  }
  static char* ssm_ptr(const PoolStorage& s, int layer, int slot) {
    return static_cast<char*>(s.ssm) +
           (static_cast<std::size_t>(layer) * s.num_slots + slot) * ssm_bytes(s);
  }
  static char* snap_conv_ptr(const PoolStorage& s, int layer, int row, int t) {
    const std::size_t index =
        (static_cast<std::size_t>(layer) * s.max_rows + row) * s.max_window + t;
    return static_cast<char*>(s.snap_conv) + index * conv_bytes(s);
  }
  static char* snap_ssm_ptr(const PoolStorage& s, int layer, int row, int t) {
    const std::size_t index =
        (static_cast<std::size_t>(layer) * s.max_rows + row) * s.max_window + t;
    return static_cast<char*>(s.snap_ssm) + index * ssm_bytes(s);
  }
};

}  // namespace

std::unique_ptr<BackendImpl> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace specstate::detail
