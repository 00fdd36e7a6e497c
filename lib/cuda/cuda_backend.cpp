// The CUDA backend (snapshot strategy): device memory, and the launches of kernels/ for
// advance (prefill/decode), verify and commit. Every call is asynchronous on the pool's stream
// and free of host synchronisation, so verify of all layers plus commit can be captured in one
// CUDA graph; slots and parents live in fixed device buffers written by begin_round.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../backend.h"
#include "../logging.h"
#include "kernels/commit.h"
#include "kernels/conv_update.h"
#include "kernels/gdn_recurrence.h"
#include "specstate/status.h"

namespace specstate::detail {
namespace {

namespace k = specstate::kernels;

[[noreturn]] void throw_cuda(const char* what, cudaError_t err) {
  throw Error(Status::kBackendError, std::string("cuda backend: ") + what + ": " +
                                         cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                                         ")");
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw_cuda(what, err);
}

k::ElemType elem(DType dtype) {
  return dtype == DType::kBF16 ? k::ElemType::kBF16 : k::ElemType::kF32;
}

// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    device_ = device;
  }
  ~DeviceGuard() noexcept {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = 0;
};

char* offset_bytes(const TensorView& view, int64_t elems) {
  return static_cast<char*>(view.data) + elems * static_cast<int64_t>(dtype_size(view.dtype));
}

class CudaBackend final : public BackendImpl {
 public:
  explicit CudaBackend(const PoolOptions& options)
      : device_(options.device), stream_(static_cast<cudaStream_t>(options.stream)) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky "no device" error of this call
      throw Error(Status::kNotSupported,
                  std::string("StatePool: options.backend = cuda but no CUDA device is usable (") +
                      (err != cudaSuccess ? cudaGetErrorName(err) : "0 devices") + ")");
    }
    if (device_ < 0 || device_ >= count) {
      throw Error(Status::kInvalidArgument,
                  "StatePool: options.device = " + std::to_string(device_) + " outside [0, " +
                      std::to_string(count) + ")");
    }
  }

  Backend kind() const noexcept override { return Backend::kCuda; }
  Device device() const noexcept override { return Device::kCuda; }

  void allocate(PoolStorage& s) override {
    const GdnConfig& g = s.config.gdn;
    const int K = g.head_k_dim;
    if (K != 32 && K != 64 && K != 128) {
      throw Error(Status::kNotSupported, "StatePool: cuda backend: head_k_dim = " +
                                             std::to_string(K) + ", supported: 32, 64, 128");
    }
    if (g.conv_width < 2 || g.conv_width > 4) {
      throw Error(Status::kNotSupported, "StatePool: cuda backend: conv_width = " +
                                             std::to_string(g.conv_width) + ", supported: 2, 3, 4");
    }
    if (s.max_rows > 65535) {
      throw Error(Status::kNotSupported,
                  "StatePool: cuda backend: max_rows = " + std::to_string(s.max_rows) + " > 65535");
    }
    DeviceGuard guard(device_);
    scratch_tokens_ = std::max<int64_t>(int64_t{s.max_rows} * s.max_window, 256);
    const std::size_t act_bytes = dtype_size(g.act_dtype);
    try {
      alloc(&s.conv, s.conv_bytes());
      alloc(&s.ssm, s.ssm_bytes());
      alloc(&s.snap_conv, s.snap_conv_bytes());
      alloc(&s.snap_ssm, s.snap_ssm_bytes());
      alloc(reinterpret_cast<void**>(&slots_), sizeof(int32_t) * s.max_rows);
      alloc(reinterpret_cast<void**>(&parents_),
            sizeof(int32_t) * static_cast<std::size_t>(s.max_rows) * s.max_window);
      alloc(reinterpret_cast<void**>(&steps_), sizeof(int32_t) * s.max_rows);
      alloc(reinterpret_cast<void**>(&error_), sizeof(int32_t));
      alloc(&conv_out_, scratch_tokens_ * g.conv_dim() * act_bytes);
      check(cudaDeviceSynchronize(), "zeroing the pool");
    } catch (...) {
      free(s);
      throw;
    }
    logger().debug("cuda backend: device {}, {} bytes committed, {} bytes scratch", device_,
                   s.conv_bytes() + s.ssm_bytes(), s.snap_conv_bytes() + s.snap_ssm_bytes());
  }

  void free(PoolStorage& s) noexcept override {
    // A device-wide wait: the pool's stream may already be gone (it must outlive the pool, but a
    // destructor should not crash on a caller's mistake).
    if (cudaSetDevice(device_) == cudaSuccess) cudaDeviceSynchronize();
    for (void** p : {&s.conv, &s.ssm, &s.snap_conv, &s.snap_ssm, &conv_out_,
                     reinterpret_cast<void**>(&slots_), reinterpret_cast<void**>(&parents_),
                     reinterpret_cast<void**>(&steps_), reinterpret_cast<void**>(&error_)}) {
      if (*p) cudaFree(*p);
      *p = nullptr;
    }
  }

  void zero_slot(const PoolStorage& s, int slot) override {
    DeviceGuard guard(device_);
    const std::size_t conv = s.conv_elems() * dtype_size(s.config.conv_state_dtype());
    const std::size_t ssm = s.ssm_elems() * dtype_size(s.config.ssm_state_dtype());
    // One strided memset per buffer covers the slot in every layer.
    check(cudaMemset2DAsync(static_cast<char*>(s.conv) + slot * conv, conv * s.num_slots, 0, conv,
                            s.config.num_layers, stream_),
          "zeroing a slot's conv state");
    check(cudaMemset2DAsync(static_cast<char*>(s.ssm) + slot * ssm, ssm * s.num_slots, 0, ssm,
                            s.config.num_layers, stream_),
          "zeroing a slot's SSM state");
  }

  void begin_round(const PoolStorage& s, const RoundPlan& plan) override {
    (void)s;
    DeviceGuard guard(device_);
    check(k::launch_upload_i32(slots_, plan.slots.data(), plan.rows, stream_), "uploading slots");
    if (plan.is_tree) {
      check(k::launch_upload_i32(parents_, plan.parents.data(),
                                 static_cast<int>(plan.parents.size()), stream_),
            "uploading parents");
    }
  }

  void advance_gdn(const PoolStorage& s, const AdvanceWork& work, const GdnWeights& weights,
                   const GdnInputs& inputs, const GdnOutputs& outputs) override {
    DeviceGuard guard(device_);
    const int rows = static_cast<int>(work.slots.size());
    const int n = work.tokens_per_row;
    if (rows == 1 && n > 1) {
      // Prefill: chunks of tokens, each advancing the committed state in place.
      for (int t0 = 0; t0 < n; t0 += static_cast<int>(scratch_tokens_)) {
        const int len = std::min<int>(n - t0, static_cast<int>(scratch_tokens_));
        launch_layer(s, work.layer, /*advance=*/true, 1, len, t0, work.slots.data(), nullptr,
                     weights, inputs, outputs);
      }
      return;
    }
    const int per_launch =
        std::max(1, std::min<int>({k::kConvInlineRows, k::kGdnInlineRows,
                                   static_cast<int>(scratch_tokens_ / std::max(n, 1))}));
    for (int r0 = 0; r0 < rows; r0 += per_launch) {
      const int count = std::min(per_launch, rows - r0);
      launch_layer(s, work.layer, /*advance=*/true, count, n, int64_t{r0} * n,
                   work.slots.data() + r0, nullptr, weights, inputs, outputs);
    }
  }

  void verify_gdn(const PoolStorage& s, int layer, const RoundPlan& plan, const GdnWeights& weights,
                  const GdnInputs& inputs, const GdnOutputs& outputs) override {
    DeviceGuard guard(device_);
    launch_layer(s, layer, /*advance=*/false, plan.rows, plan.window, 0, nullptr, &plan, weights,
                 inputs, outputs);
  }

  void commit(const PoolStorage& s, const CommitWork& work) override {
    DeviceGuard guard(device_);
    const RoundPlan& plan = *work.plan;
    k::CommitParams p;
    p.layers = s.config.num_layers;
    p.rows = plan.rows;
    p.window = plan.window;
    const int64_t conv = s.conv_elems() * dtype_size(s.config.conv_state_dtype());
    const int64_t ssm = s.ssm_elems() * dtype_size(s.config.ssm_state_dtype());
    p.conv_state_bytes = conv;
    p.ssm_state_bytes = ssm;
    p.conv_layer_bytes = conv * s.num_slots;
    p.ssm_layer_bytes = ssm * s.num_slots;
    p.snap_conv_row_bytes = conv * s.max_window;
    p.snap_ssm_row_bytes = ssm * s.max_window;
    p.snap_conv_layer_bytes = p.snap_conv_row_bytes * s.max_rows;
    p.snap_ssm_layer_bytes = p.snap_ssm_row_bytes * s.max_rows;
    p.conv = static_cast<char*>(s.conv);
    p.ssm = static_cast<char*>(s.ssm);
    p.snap_conv = static_cast<const char*>(s.snap_conv);
    p.snap_ssm = static_cast<const char*>(s.snap_ssm);
    p.slots = slots_;
    p.error_flag = error_;
    if (!work.device_accepted.empty()) {
      // Raw values from device memory; the kernel checks each and flags bad rows.
      p.mode = plan.is_tree ? k::CommitMode::kNode : k::CommitMode::kAcceptedLength;
      p.accepted = static_cast<const int32_t*>(work.device_accepted.data);
      p.accepted_stride = work.device_accepted.stride[0];
    } else {
      // Host values, validated and resolved to window steps by the pool.
      check(k::launch_upload_i32(steps_, work.last_step.data(), plan.rows, stream_),
            "uploading commit steps");
      p.mode = k::CommitMode::kNode;
      p.accepted = steps_;
      p.accepted_stride = 1;
    }
    check(cudaMemsetAsync(error_, 0, sizeof(int32_t), stream_), "clearing the commit flag");
    check(k::launch_commit(p, stream_), "commit kernel");
    logger().trace("cuda commit: {} rows x {} layers", plan.rows, p.layers);
  }

  Status last_commit_status() override {
    DeviceGuard guard(device_);
    int32_t flag = 0;
    check(cudaMemcpyAsync(&flag, error_, sizeof(flag), cudaMemcpyDeviceToHost, stream_),
          "reading the commit flag");
    check(cudaStreamSynchronize(stream_), "waiting for the commit");
    if (flag != 0) {
      logger().warn(
          "cuda commit: device-side accepted values out of range (flags {:#x}); those "
          "rows were skipped",
          flag);
      return Status::kOutOfRange;
    }
    return Status::kSuccess;
  }

 private:
  void alloc(void** p, std::size_t bytes) {
    const std::size_t n = std::max<std::size_t>(bytes, 16);
    check(cudaMalloc(p, n), "cudaMalloc");
    check(cudaMemset(*p, 0, n), "cudaMemset");
  }

  // One layer's conv + recurrence over `rows` rows of `tokens` tokens starting at input token
  // `token0`. Advance: slots by value; verify: the round's device buffers.
  void launch_layer(const PoolStorage& s, int layer, bool advance, int rows, int tokens,
                    int64_t token0, const int32_t* inline_slots, const RoundPlan* plan,
                    const GdnWeights& w, const GdnInputs& in, const GdnOutputs& out) {
    const GdnConfig& g = s.config.gdn;
    const int d = g.conv_dim();
    const int hist = g.conv_width - 1;
    const k::ElemType act = elem(g.act_dtype);
    const bool user_conv_out = !out.conv_out.empty();
    void* conv_out =
        user_conv_out ? offset_bytes(out.conv_out, token0 * out.conv_out.stride[0]) : conv_out_;
    const int64_t conv_out_stride_token = user_conv_out ? out.conv_out.stride[0] : d;
    const int64_t conv_out_stride_c = user_conv_out ? out.conv_out.stride[1] : 1;

    k::ConvUpdateParams c;
    c.rows = rows;
    c.tokens = tokens;
    c.conv_dim = d;
    c.width = g.conv_width;
    c.advance = advance;
    c.has_bias = !w.conv_bias.empty();
    c.weight_dtype = elem(w.conv_weight.dtype);
    c.bias_dtype = c.has_bias ? elem(w.conv_bias.dtype) : k::ElemType::kF32;
    c.x_stride_token = in.mixed_qkv.stride[0];
    c.x_stride_c = in.mixed_qkv.stride[1];
    c.out_stride_token = conv_out_stride_token;
    c.out_stride_c = conv_out_stride_c;
    c.weight_stride_c = w.conv_weight.stride[0];
    c.weight_stride_tap = w.conv_weight.stride[1];
    c.bias_stride = c.has_bias ? w.conv_bias.stride[0] : 0;
    c.state_stride_slot = int64_t{d} * hist;
    c.snap_stride_t = int64_t{d} * hist;
    c.snap_stride_row = c.snap_stride_t * s.max_window;
    c.x = offset_bytes(in.mixed_qkv, token0 * in.mixed_qkv.stride[0]);
    c.out = conv_out;
    c.weight = w.conv_weight.data;
    c.bias = c.has_bias ? w.conv_bias.data : nullptr;
    const std::size_t conv_sz = dtype_size(s.config.conv_state_dtype());
    c.state = static_cast<char*>(s.conv) + layer * s.conv_layer_elems() * conv_sz;
    c.snap = static_cast<char*>(s.snap_conv) + layer * s.snap_conv_layer_elems() * conv_sz;

    k::GdnRecurrenceParams r;
    r.rows = rows;
    r.tokens = tokens;
    r.num_k_heads = g.num_k_heads;
    r.num_v_heads = g.num_v_heads;
    r.head_k_dim = g.head_k_dim;
    r.head_v_dim = g.head_v_dim;
    r.scale = g.effective_scale();
    r.advance = advance;
    r.a_log_dtype = elem(w.A_log.dtype);
    r.dt_bias_dtype = elem(w.dt_bias.dtype);
    r.qkv_stride_token = conv_out_stride_token;
    r.qkv_stride_c = conv_out_stride_c;
    r.a_stride_token = in.a.stride[0];
    r.a_stride_h = in.a.stride[1];
    r.b_stride_token = in.b.stride[0];
    r.b_stride_h = in.b.stride[1];
    r.a_log_stride = w.A_log.stride[0];
    r.dt_bias_stride = w.dt_bias.stride[0];
    r.out_stride_token = out.core_out.stride[0];
    r.out_stride_h = out.core_out.stride[1];
    r.out_stride_v = out.core_out.stride[2];
    r.state_stride_slot = s.ssm_elems();
    r.snap_stride_t = s.ssm_elems();
    r.snap_stride_row = s.ssm_elems() * s.max_window;
    r.qkv = conv_out;
    r.a = offset_bytes(in.a, token0 * in.a.stride[0]);
    r.b = offset_bytes(in.b, token0 * in.b.stride[0]);
    r.A_log = w.A_log.data;
    r.dt_bias = w.dt_bias.data;
    r.out = offset_bytes(out.core_out, token0 * out.core_out.stride[0]);
    const std::size_t ssm_sz = dtype_size(s.config.ssm_state_dtype());
    r.state = static_cast<char*>(s.ssm) + layer * s.ssm_layer_elems() * ssm_sz;
    r.snap = static_cast<char*>(s.snap_ssm) + layer * s.snap_ssm_layer_elems() * ssm_sz;

    if (advance) {
      for (int i = 0; i < rows; ++i) c.slot_inline[i] = r.slot_inline[i] = inline_slots[i];
    } else {
      c.slots = r.slots = slots_;
      c.parents = r.parents = plan->is_tree ? parents_ : nullptr;
    }
    check(k::launch_conv_update(c, act, elem(s.config.conv_state_dtype()), stream_),
          advance ? "conv update (advance)" : "conv update (verify)");
    check(k::launch_gdn_recurrence(r, act, elem(s.config.ssm_state_dtype()), stream_),
          advance ? "gdn recurrence (advance)" : "gdn recurrence (verify)");
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  int64_t scratch_tokens_ = 0;
  int32_t* slots_ = nullptr;    // [max_rows] the round's slots (begin_round)
  int32_t* parents_ = nullptr;  // [max_rows, max_window] the round's tree (begin_round)
  int32_t* steps_ = nullptr;    // [max_rows] host-path commit steps
  int32_t* error_ = nullptr;    // commit error flag
  void* conv_out_ = nullptr;    // [scratch_tokens, conv_dim] act: conv output when not given
};

}  // namespace

std::unique_ptr<BackendImpl> make_cuda_backend(const PoolOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace specstate::detail
