// The CUDA backend: device memory and the launches of kernels/ for advance, verify and commit.
// Every call is asynchronous on the pool's stream with no host synchronisation, so a round can be
// one CUDA graph; slots and parents live in fixed device buffers written by begin_round.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "../backend.h"
#include "../logging.h"
#include "kernels/commit.h"
#include "kernels/conv_update.h"
#include "kernels/gdn_fused.h"
#include "kernels/gdn_recurrence.h"
#include "kernels/mamba2_recurrence.h"
#include "launch.h"
#include "layer_copy.h"
#include "specstate/status.h"

namespace specstate::detail {
namespace {

namespace k = specstate::kernels;

using cuda::check;
using cuda::export_ptrs;
using cuda::slot_ptrs;

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

class CudaBackend final : public BackendImpl {
 public:
  explicit CudaBackend(const PoolOptions& options)
      : device_(options.device),
        stream_(static_cast<cudaStream_t>(options.stream)),
        overlap_(overlap_mode()),
        layer_copy_(options.device, static_cast<cudaStream_t>(options.stream)) {
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
    // A device the build has no code for: the pool was built and acquire worked (memsets), and
    // the first prefill, decode or verify failed as a backend error (an A100 under the default
    // CMAKE_CUDA_ARCHITECTURES 90). Refused here, naming the compute capability.
    {
      const DeviceGuard guard(device_);
      int major = 0, minor = 0;
      check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_),
            "cudaDeviceGetAttribute");
      check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_),
            "cudaDeviceGetAttribute");
      const std::string cc = std::to_string(major) + "." + std::to_string(minor);
      if (major < 8) {
        throw Error(Status::kNotSupported,
                    "StatePool: options.device = " + std::to_string(device_) +
                        " has compute capability " + cc +
                        "; the cuda backend needs 8.0 or newer (Ampere, Hopper, Blackwell)");
      }
      const cudaError_t image = k::kernel_image_status();
      if (image != cudaSuccess) {
        cudaGetLastError();  // reported here, not left on the thread
        throw Error(Status::kNotSupported,
                    "StatePool: options.device = " + std::to_string(device_) +
                        " has compute capability " + cc +
                        " and this build holds no kernel for it (" + cudaGetErrorName(image) +
                        "): build with CMAKE_CUDA_ARCHITECTURES including " +
                        std::to_string(major) + std::to_string(minor));
      }
    }
    // A stream of another GPU: every kernel launch on it would fail (its copies would not), with
    // an error that names no option. The special handles (null, legacy, per-thread) are the
    // current device's, which every call makes options.device. (cudaStreamGetDevice: CUDA 12.8.)
#if CUDART_VERSION >= 12080
    if (stream_ != nullptr && stream_ != cudaStreamLegacy && stream_ != cudaStreamPerThread) {
      int stream_device = -1;
      const cudaError_t e = cudaStreamGetDevice(stream_, &stream_device);
      if (e != cudaSuccess) {
        cudaGetLastError();  // reported here, not left on the thread
        throw Error(Status::kInvalidArgument,
                    std::string("StatePool: options.stream is not a usable stream (") +
                        cudaGetErrorName(e) + ")");
      }
      if (stream_device != device_) {
        throw Error(Status::kInvalidArgument,
                    "StatePool: options.stream belongs to cuda:" + std::to_string(stream_device) +
                        ", options.device = " + std::to_string(device_));
      }
    }
#endif
  }

  Backend kind() const noexcept override { return Backend::kCuda; }
  Device device() const noexcept override { return Device::kCuda; }

  // Tokens of the conv-output scratch (verify's conv_out when the caller asks for none).
  static int64_t conv_out_tokens(const Layout& l) {
    return std::max<int64_t>(int64_t{l.max_rows} * l.max_window, 256);
  }
  // Key heads of the fused delta-rule launch's arrival counters (0: a kind without it).
  static int fused_key_heads(const ModelConfig& c) {
    return c.kind == LayerKind::kGatedDeltaNet ? c.gdn.num_k_heads
           : c.kind == LayerKind::kKda         ? c.kda_layer.num_k_heads
                                               : 0;
  }
  // Device bytes allocate() takes besides the layout's buffers: the committed-state tables, the
  // round's slots / parents / steps / offsets, the conv-output scratch and the fused launch's
  // counters. (can_implement counts them: a pool they do not fit is refused as exhausted
  // memory, naming the sizes, not as a failed allocation.)
  static uint64_t backend_bytes(const Layout& l, const ModelConfig& c) {
    const uint64_t rows = static_cast<uint64_t>(l.max_rows);
    const auto at_least_16 = [](uint64_t bytes) {
      return std::max<uint64_t>(bytes, 16);
    };  // alloc()
    uint64_t b = at_least_16(sizeof(char*) * 2 * static_cast<uint64_t>(l.layers));
    b += at_least_16(4 * rows) + at_least_16(4 * rows * static_cast<uint64_t>(l.max_window)) +
         at_least_16(4 * rows) + at_least_16(4 * (rows + 1)) +
         at_least_16(4 * (k::kConvInlineRows + 1)) + at_least_16(4);
    b += at_least_16(static_cast<uint64_t>(conv_out_tokens(l)) *
                     static_cast<uint64_t>(l.shapes.conv_dim) * dtype_size(l.shapes.act_dtype));
    const uint64_t counters = 2 * 4 * rows * static_cast<uint64_t>(fused_key_heads(c));
    if (counters > 0) b += at_least_16(counters);
    return b;
  }

  Status can_implement(const Layout& layout, const ModelConfig& config,
                       std::string* why) const override {
    const int W = layout.shapes.conv_width;
    if (W < 2 || W > 4) {
      *why = "cuda backend: conv_width = " + std::to_string(W) + ", supported: 2, 3, 4";
      return Status::kNotSupported;
    }
    switch (config.kind) {
      case LayerKind::kGatedDeltaNet:
      case LayerKind::kKda: {
        // One kernel for both delta-rule kinds (KDA: the gate per key channel).
        const int K =
            config.kind == LayerKind::kKda ? config.kda_layer.head_k_dim : config.gdn.head_k_dim;
        if (K != 32 && K != 64 && K != 128) {
          *why = "cuda backend: head_k_dim = " + std::to_string(K) + ", supported: 32, 64, 128";
          return Status::kNotSupported;
        }
        break;
      }
      case LayerKind::kMamba2: {
        const int N = config.mamba.d_state;
        if (N != 16 && N != 32 && N != 64 && N != 128 && N != 256) {
          *why =
              "cuda backend: d_state = " + std::to_string(N) + ", supported: 16, 32, 64, 128, 256";
          return Status::kNotSupported;
        }
        break;
      }
      default: {
        const Status kind_ok = cuda_supports_kind(config, why);
        return kind_ok != Status::kSuccess ? kind_ok : Status::kNotSupported;
      }
    }
    // Rows, heads and layers are grid extents of its launches (kernels::kMaxGridYZ).
    const int64_t heads = config.kind == LayerKind::kMamba2 ? config.mamba.num_heads
                          : config.kind == LayerKind::kKda  ? config.kda_layer.num_v_heads
                                                            : config.gdn.num_v_heads;
    const k::GridExtent past = k::cuda_grid_limit_exceeded(
        layout.max_rows, heads,
        config.kind == LayerKind::kMamba2 ? "mamba.num_heads" : "num_v_heads", config.num_layers);
    if (past.what != nullptr) {
      *why = std::string("cuda backend: ") + past.what + " = " + std::to_string(past.value) +
             " > " + std::to_string(k::kMaxGridYZ) + " (a grid extent of its launches)";
      return Status::kNotSupported;
    }
    size_t free_bytes = 0, total_bytes = 0;
    DeviceGuard guard(device_);
    const uint64_t own = backend_bytes(layout, config);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
        static_cast<uint64_t>(layout.owned_bytes()) + own > free_bytes) {
      *why = "cuda backend: the pool needs " +
             std::to_string(static_cast<uint64_t>(layout.owned_bytes()) + own) +
             " bytes of device memory (" +
             std::to_string(layout.caller_committed ? 0 : layout.committed_bytes()) +
             " committed + " + std::to_string(layout.workspace_bytes()) + " " +
             strategy_name(layout.strategy) + " workspace + " + std::to_string(own) +
             " backend scratch for max_rows * max_window tokens), " + std::to_string(free_bytes) +
             " are free on device " + std::to_string(device_);
      return Status::kResourceExhausted;
    }
    return Status::kSuccess;
  }

  Status can_run_round(const Layout& layout, const RoundPlan& plan,
                       std::string* why) const override {
    static_assert(k::kGdnChunk == k::kMamba2Chunk, "one tree limit for every kind");
    if (plan.is_tree && !layout.has(Buf::kSnapSsm) && plan.window > k::kGdnChunk) {
      *why = "batch.window = " + std::to_string(plan.window) + ": a tree window under the " +
             strategy_name(layout.strategy) + " strategy on cuda holds at most " +
             std::to_string(k::kGdnChunk) + " tokens";
      return Status::kNotSupported;
    }
    return Status::kSuccess;
  }

  void allocate(PoolStorage& s) override {
    break_chain();
    const Layout& l = s.layout;
    DeviceGuard guard(device_);
    scratch_tokens_ = conv_out_tokens(l);
    const std::size_t act_bytes = dtype_size(l.shapes.act_dtype);
    try {
      for (int b = 0; b < static_cast<int>(Buf::kCount); ++b) {
        if (l.owns(static_cast<Buf>(b))) alloc(&s.buffers[b], static_cast<std::size_t>(l.bytes[b]));
      }
      if (!l.caller_committed) s.bind_owned_committed();
      // The commit kernel's per-layer tables of the committed state (conv, then SSM).
      std::vector<char*> table(s.conv_layers);
      table.insert(table.end(), s.ssm_layers.begin(), s.ssm_layers.end());
      alloc(reinterpret_cast<void**>(&layer_table_), sizeof(char*) * table.size());
      check(cudaMemcpy(layer_table_, table.data(), sizeof(char*) * table.size(),
                       cudaMemcpyHostToDevice),
            "uploading the committed-state tables");
      committed_aligned16_ = s.conv_slot_stride % 16 == 0 && s.ssm_slot_stride % 16 == 0;
      for (const char* p : table) {
        committed_aligned16_ = committed_aligned16_ && reinterpret_cast<uintptr_t>(p) % 16 == 0;
      }
      alloc(reinterpret_cast<void**>(&slots_), sizeof(int32_t) * l.max_rows);
      alloc(reinterpret_cast<void**>(&parents_),
            sizeof(int32_t) * static_cast<std::size_t>(l.max_rows) * l.max_window);
      alloc(reinterpret_cast<void**>(&steps_), sizeof(int32_t) * l.max_rows);
      alloc(reinterpret_cast<void**>(&offsets_), sizeof(int32_t) * (l.max_rows + 1));
      alloc(reinterpret_cast<void**>(&advance_offsets_),
            sizeof(int32_t) * (k::kConvInlineRows + 1));
      alloc(reinterpret_cast<void**>(&error_), sizeof(int32_t));
      alloc(&scratch_.conv_out, scratch_tokens_ * l.shapes.conv_dim * act_bytes);
      // The fused delta-rule launch's arrival counters, two sets of [rows, key heads] that
      // consecutive fused launches alternate (kernels/gdn_fused.h).
      const int heads = fused_key_heads(s.config);
      if (heads > 0) {
        fused_counter_set_ = static_cast<std::size_t>(l.max_rows) * heads;
        alloc(reinterpret_cast<void**>(&fused_counters_), 2 * 4 * fused_counter_set_);
      }
      check(cudaDeviceSynchronize(), "zeroing the pool");
    } catch (...) {
      free(s);
      throw;
    }
    logger().debug("cuda backend: device {}, {} bytes committed, {} bytes workspace", device_,
                   l.committed_bytes(), l.workspace_bytes());
  }

  bool settle_for_close() noexcept override {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    bool ok = cudaSetDevice(device_) == cudaSuccess;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (ok && cudaStreamIsCapturing(stream_, &capture) == cudaSuccess &&
        capture != cudaStreamCaptureStatusNone) {
      ok = false;
    }
    if (ok) ok = cudaDeviceSynchronize() == cudaSuccess;
    if (!ok) cudaGetLastError();  // (this close's error: reported by the caller's log line)
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
    return ok;
  }

  bool capturing() const noexcept override {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &capture) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return capture != cudaStreamCaptureStatusNone;
  }

  void free(PoolStorage& s) noexcept override {
    break_chain();
    // The thread's current device is restored at the end (a destructor that left the caller on
    // the pool's GPU moved the caller's next allocations and launches there).
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    // A device-wide wait: the pool's stream may already be gone (it must outlive the pool, but a
    // destructor should not crash on a caller's mistake).
    if (cudaSetDevice(device_) == cudaSuccess) cudaDeviceSynchronize();
    for (void*& p : s.buffers) {
      if (p) cudaFree(p);
      p = nullptr;
    }
    for (void** p :
         {&scratch_.conv_out, reinterpret_cast<void**>(&slots_),
          reinterpret_cast<void**>(&parents_), reinterpret_cast<void**>(&steps_),
          reinterpret_cast<void**>(&error_), reinterpret_cast<void**>(&offsets_),
          reinterpret_cast<void**>(&advance_offsets_), reinterpret_cast<void**>(&layer_table_),
          reinterpret_cast<void**>(&fused_counters_)}) {
      if (*p) cudaFree(*p);
      *p = nullptr;
    }
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  }

  void zero_slot(const PoolStorage& s, int slot) override {
    break_chain();
    DeviceGuard guard(device_);
    const Layout& l = s.layout;
    // One strided memset per buffer covers the slot in every layer (one per layer when the
    // caller owns the layers: LayerPtrs).
    layer_copy_.zero(slot_ptrs(s, s.conv_layers, slot, s.conv_slot_stride), l.conv_bytes,
                     "zeroing a slot's conv state");
    layer_copy_.zero(slot_ptrs(s, s.ssm_layers, slot, s.ssm_slot_stride), l.ssm_bytes,
                     "zeroing a slot's SSM state");
    if (s.pending()) {
      check(cudaMemset2DAsync(s.pending() + slot, sizeof(int32_t) * l.slots, 0, sizeof(int32_t),
                              l.layers, stream_),
            "zeroing a slot's pending steps");
    }
    if (s.base(Buf::kCursor)) {
      check(cudaMemset2DAsync(s.cursor(0, slot), sizeof(int32_t) * 2 * l.slots, 0,
                              sizeof(int32_t) * 2, l.layers, stream_),
            "zeroing a slot's replay cursors");
    }
  }

  void copy_slot(const PoolStorage& s, int src, int dst) override {
    break_chain();
    DeviceGuard guard(device_);
    const Layout& l = s.layout;
    // One strided copy per buffer covers the slot in every layer.
    layer_copy_.copy(slot_ptrs(s, s.conv_layers, dst, s.conv_slot_stride),
                     slot_ptrs(s, s.conv_layers, src, s.conv_slot_stride), l.conv_bytes,
                     cudaMemcpyDeviceToDevice, "copying a slot's conv state");
    layer_copy_.copy(slot_ptrs(s, s.ssm_layers, dst, s.ssm_slot_stride),
                     slot_ptrs(s, s.ssm_layers, src, s.ssm_slot_stride), l.ssm_bytes,
                     cudaMemcpyDeviceToDevice, "copying a slot's SSM state");
  }

  void export_slot(const PoolStorage& s, int slot, void* buffer, Device buffer_device) override {
    break_chain();
    DeviceGuard guard(device_);
    const Layout& l = s.layout;
    const cudaMemcpyKind kind =
        buffer_device == Device::kCuda ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
    // The export layout interleaves the layers' conv windows and SSM states: one strided copy
    // per buffer, the destination pitch being one layer's conv + SSM bytes.
    char* out = static_cast<char*>(buffer);
    try {
      layer_copy_.copy(export_ptrs(s, out, 0),
                       slot_ptrs(s, s.conv_layers, slot, s.conv_slot_stride), l.conv_bytes, kind,
                       "exporting a slot's conv state");
      layer_copy_.copy(export_ptrs(s, out, l.conv_bytes),
                       slot_ptrs(s, s.ssm_layers, slot, s.ssm_slot_stride), l.ssm_bytes, kind,
                       "exporting a slot's SSM state");
    } catch (...) {
      host_copies_done(buffer_device);
      throw;
    }
    if (buffer_device == Device::kCpu) {
      check(cudaStreamSynchronize(stream_), "waiting for a slot export");
    }
  }

  void import_slot(const PoolStorage& s, int slot, const void* buffer,
                   Device buffer_device) override {
    break_chain();
    DeviceGuard guard(device_);
    const Layout& l = s.layout;
    const cudaMemcpyKind kind =
        buffer_device == Device::kCuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    char* in = const_cast<char*>(static_cast<const char*>(buffer));
    try {
      layer_copy_.copy(slot_ptrs(s, s.conv_layers, slot, s.conv_slot_stride), export_ptrs(s, in, 0),
                       l.conv_bytes, kind, "importing a slot's conv state");
      layer_copy_.copy(slot_ptrs(s, s.ssm_layers, slot, s.ssm_slot_stride),
                       export_ptrs(s, in, l.conv_bytes), l.ssm_bytes, kind,
                       "importing a slot's SSM state");
    } catch (...) {
      host_copies_done(buffer_device);
      throw;
    }
    if (buffer_device == Device::kCpu) {
      // The caller may free or reuse its host buffer once the call returns.
      check(cudaStreamSynchronize(stream_), "waiting for a slot import");
    }
  }

  void begin_round(const PoolStorage& /*s*/, const RoundPlan& plan) override {
    break_chain();
    DeviceGuard guard(device_);
    // The round's slots, parents and token offsets in one upload (one node of a captured round
    // where they fit one launch's parameters).
    k::UploadSpan spans[3];
    int n = 0;
    spans[n++] = {slots_, plan.slots.data(), plan.rows};
    if (plan.is_tree) {
      // Trees only: the verify kernels and the commit take no parents for a chain (a chain's
      // upload was one more launch a round, 70 at 2^16 rows of 16 tokens).
      spans[n++] = {parents_, plan.parents.data(), static_cast<int>(plan.parents.size())};
    }
    if (!plan.tokens.offsets.empty()) {
      spans[n++] = {offsets_, plan.tokens.offsets.data(), plan.rows + 1};
    }
    check(k::launch_upload_i32(spans, n, stream_), "uploading the round's slots");
  }

  void run_gdn(const PoolStorage& s, const LayerRun& run, const GdnWeights& weights,
               const GdnInputs& inputs, const GdnOutputs& outputs) override {
    run_layer<cuda::GdnLaunchArgs>(s, run, weights, inputs, outputs,
                                   [&](const cuda::GdnLaunchArgs& a, const char* what) {
                                     launch_delta(s, cuda::build_gdn_launch(a), false, what);
                                   });
  }

  void run_mamba2(const PoolStorage& s, const LayerRun& run, const Mamba2Weights& weights,
                  const Mamba2Inputs& inputs, const Mamba2Outputs& outputs) override {
    run_layer<cuda::Mamba2LaunchArgs>(
        s, run, weights, inputs, outputs, [&](const cuda::Mamba2LaunchArgs& a, const char* what) {
          cuda::Mamba2Launch L = cuda::build_mamba2_launch(a);
          L.conv.programmatic = programmatic_edge(s, L.conv.state, L.conv.varlen);
          try {
            check(k::launch_conv_update(L.conv, L.act, L.conv_state, stream_), what);
            check(k::launch_mamba2_recurrence(L.rec, L.act, L.ssm_state, stream_), what);
          } catch (...) {
            break_chain();  // a retry must not overlap what this call may have queued
            throw;
          }
          set_chain(L.conv.state);
        });
  }

  void run_kda(const PoolStorage& s, const LayerRun& run, const KdaWeights& weights,
               const KdaInputs& inputs, const KdaOutputs& outputs) override {
    run_layer<cuda::KdaLaunchArgs>(s, run, weights, inputs, outputs,
                                   [&](const cuda::KdaLaunchArgs& a, const char* what) {
                                     launch_delta(s, cuda::build_kda_launch(a), true, what);
                                   });
  }

  void commit_copy(const PoolStorage& s, const CommitWork& work) override {
    break_chain();
    DeviceGuard guard(device_);
    const RoundPlan& plan = *work.plan;
    const Layout& l = s.layout;
    k::CommitParams p;
    p.layers = l.layers;
    p.rows = plan.rows;
    p.window = plan.window;
    p.conv_state_bytes = l.conv_bytes;
    p.ssm_state_bytes = l.ssm_bytes;
    p.conv_slot_bytes = s.conv_slot_stride;
    p.ssm_slot_bytes = s.ssm_slot_stride;
    p.committed_aligned16 = committed_aligned16_;
    p.snap_conv_row_bytes = l.conv_bytes * l.max_window;
    p.snap_ssm_row_bytes = l.ssm_bytes * l.max_window;
    p.snap_conv_layer_bytes = p.snap_conv_row_bytes * l.max_rows;
    p.snap_ssm_layer_bytes = p.snap_ssm_row_bytes * l.max_rows;
    p.conv_layers = layer_table_;
    p.ssm_layers = layer_table_ + l.layers;
    p.snap_conv = static_cast<const char*>(s.base(Buf::kSnapConv));
    p.snap_ssm = static_cast<const char*>(s.base(Buf::kSnapSsm));
    p.slots = slots_;
    p.round_error = error_;
    p.varlen = round_varlen(plan);
    const int32_t* accepted = nullptr;
    accepted_source(work, &p.mode, &accepted, &p.accepted_stride);
    p.accepted = accepted;
    check_commit_values(plan, p.mode, accepted, p.accepted_stride, p.varlen);
    check(k::launch_commit(p, stream_), "commit kernel");
    logger().trace("cuda commit (copy): {} rows x {} layers", plan.rows, p.layers);
  }

  void commit_pending(const PoolStorage& s, const CommitWork& work) override {
    break_chain();
    DeviceGuard guard(device_);
    const RoundPlan& plan = *work.plan;
    const Layout& l = s.layout;
    k::CommitPendingParams p;
    p.layers = l.layers;
    p.rows = plan.rows;
    p.window = plan.window;
    p.num_slots = l.slots;
    p.path_stride_slot = l.max_window;
    p.slots = slots_;
    p.parents = plan.is_tree ? parents_ : nullptr;
    p.pending = s.pending();
    p.path = s.path();
    p.round_error = error_;
    p.varlen = round_varlen(plan);
    p.ring = l.ring;
    p.fold_limit = plan.fold_limit;
    p.factor_bytes = l.factor_bytes;
    p.factor_stride_slot = l.factor_bytes * l.ring;
    p.cursor = static_cast<int32_t*>(s.base(Buf::kCursor));
    p.factors = static_cast<char*>(s.base(Buf::kFactors));
    const int32_t* accepted = nullptr;
    accepted_source(work, &p.mode, &accepted, &p.accepted_stride);
    p.accepted = accepted;
    // The values are checked by the commit kernel itself (kernels/commit.h): one node a round.
    check(k::launch_commit_pending(p, stream_), "commit kernel (pending)");
    logger().trace("cuda commit (pending): {} rows", plan.rows);
  }

  void clear_pending(const PoolStorage& s, int layer_begin, int layer_end,
                     const std::vector<int32_t>& slots, Clear how, int fold_limit) override {
    break_chain();
    if (slots.empty() || !s.pending()) return;
    DeviceGuard guard(device_);
    k::ClearPendingArgs a;
    a.pending = s.pending();
    a.cursor = static_cast<int32_t*>(s.base(Buf::kCursor));
    a.num_slots = s.layout.slots;
    a.layer_begin = layer_begin;
    a.layer_end = layer_end;
    a.ring = s.layout.ring;
    a.fold_limit = fold_limit;
    a.settle = how == Clear::kSettled;
    check(k::launch_clear_pending(a, slots.data(), static_cast<int>(slots.size()), stream_),
          "clearing pending steps");
  }

  Status last_commit_status() override {
    break_chain();
    DeviceGuard guard(device_);
    int32_t flag = 0;
    check(cudaMemcpyAsync(&flag, error_, sizeof(flag), cudaMemcpyDeviceToHost, stream_),
          "reading the commit flag");
    check(cudaStreamSynchronize(stream_), "waiting for the commit");
    if (flag != 0) {
      logger().warn(
          "cuda commit: device-side accepted values out of range (flags {:#x}); the round "
          "committed nothing (every row keeps its state)",
          flag);
      return Status::kOutOfRange;
    }
    return Status::kSuccess;
  }

 private:
  // A delta-rule layer's launches (GDN, or KDA: kda): the fused conv + recurrence kernel where it
  // serves the call (kernels/gdn_fused.h: small-batch replay verifies of chains), else the conv
  // and then the recurrence.
  void launch_delta(const PoolStorage& s, cuda::GdnLaunch L, bool kda, const char* what) {
    L.conv.programmatic = programmatic_edge(s, L.conv.state, L.conv.varlen);
    k::GdnFusedParams fused{L.rec, L.conv, fused_counters_, L.user_conv_out};
    fused.programmatic = L.conv.programmatic;
    try {
      if (k::gdn_fused_chosen(fused, L.act, L.conv_state, L.ssm_state)) {
        // The other set than the fused launch before (which may still run while this one
        // counts); flipped once this launch is queued.
        fused.counters += fused_counter_parity_ * fused_counter_set_;
        check(k::launch_gdn_fused(fused, kda, stream_), what);
        fused_counter_parity_ ^= 1;
      } else {
        check(k::launch_conv_update(L.conv, L.act, L.conv_state, stream_), what);
        check(kda ? k::launch_kda_recurrence(L.rec, L.act, L.ssm_state, stream_)
                  : k::launch_gdn_recurrence(L.rec, L.act, L.ssm_state, stream_),
              what);
      }
    } catch (...) {
      break_chain();  // a retry must not overlap what this call may have queued
      throw;
    }
    set_chain(L.conv.state);
  }

  // Layers overlap (programmatic dependent launch, kernels/common.cuh): a layer's first kernel
  // may start while the kernel before it in the stream runs, reading its own layer's state before
  // it waits; asked for only where that kernel cannot be writing it (k::layer_edge_allowed).
  // chain_key_: the conv state of the layer this backend launched last, null after any other
  // operation (break_chain). SPECSTATE_LAYER_OVERLAP=0 turns it off (timing). A chain does not
  // cross a capture's boundary (chain_capture_: the capture its last launch was made in, 0 for
  // none): a layer captured into a graph is not what the stream runs before a later launch
  // outside that capture, nor the other way round (an eager decode after a capture that ended
  // with a layer was made a programmatic dependent of the kernel before the capture, reading
  // what it wrote before waiting for it).
  bool programmatic_edge(const PoolStorage& s, const void* key,
                         const k::RowTokensParams& varlen) const {
    if (chain_key_ != nullptr && chain_capture_ != capture_id()) return false;
    const bool own_offsets =
        varlen.cu == nullptr || varlen.cu == offsets_ || varlen.cu == advance_offsets_;
    return k::layer_edge_allowed(overlap_, chain_key_, key, s.layout.caller_committed, own_offsets);
  }
  void set_chain(const void* key) noexcept {
    chain_key_ = key;
    chain_capture_ = capture_id();
  }
  // The id of the capture the pool's stream is in, 0 when none.
  unsigned long long capture_id() const noexcept {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream_, &status, &id) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return status == cudaStreamCaptureStatusNone ? 0 : id;
  }
  void break_chain() noexcept { chain_key_ = nullptr; }

  // A slot export / import to host memory that throws after queuing some of its copies: waits
  // for them (best effort), so that no DMA reads or writes a pinned host buffer that the caller
  // frees once the call has returned.
  void host_copies_done(Device buffer_device) noexcept {
    if (buffer_device == Device::kCpu) cudaStreamSynchronize(stream_);
  }
  // SPECSTATE_LAYER_OVERLAP: 0 off, else 1: wherever safe (2, once "at any batch", is the same).
  static int overlap_mode() {
    const char* e = std::getenv("SPECSTATE_LAYER_OVERLAP");
    if (e != nullptr && (std::string(e) == "0" || std::string(e) == "2")) return e[0] - '0';
    return 1;
  }

  // One layer call as launches (the same for every kind): verify in one launch over the round's
  // device buffers; prefill in chunks of tokens (the pending steps replayed by the first);
  // decode and materialize in chunks of rows whose slots travel by value.
  template <typename Args, typename Weights, typename Inputs, typename Outputs, typename Launch>
  void run_layer(const PoolStorage& s, const LayerRun& run, const Weights& weights,
                 const Inputs& inputs, const Outputs& outputs, Launch&& launch) {
    DeviceGuard guard(device_);
    Args a;
    a.storage = &s;
    a.layer = run.layer;
    a.io = run.io;
    a.scratch = scratch_;
    a.weights = &weights;
    a.inputs = &inputs;
    a.outputs = &outputs;
    if (run.plan) {
      a.rows = run.plan->rows;
      a.tokens = run.plan->window;
      a.device_slots = slots_;
      a.device_parents = run.plan->is_tree ? parents_ : nullptr;
      a.varlen = round_varlen(*run.plan);
      launch(a, "verify");
      return;
    }
    const int rows = static_cast<int>(run.slots.size());
    const int n = run.tokens_per_row;
    if (!run.offsets.empty()) {
      run_varlen_advance(run, a, launch);
      return;
    }
    if (rows == 1 && n > 1) {
      // int64: n may be 2^31 - 1, and t0 + the scratch past it.
      for (int64_t t0 = 0; t0 < n; t0 += scratch_tokens_) {
        a.rows = 1;
        a.tokens = static_cast<int>(std::min<int64_t>(n - t0, scratch_tokens_));
        a.token0 = t0;
        a.inline_slots = run.slots.data();
        if (t0 > 0) a.io.conv_pending = a.io.history = false;
        launch(a, "prefill");
      }
      return;
    }
    static_assert(k::kGdnInlineRows == k::kMamba2InlineRows, "one inline row limit");
    int per_launch = std::min<int>({k::kConvInlineRows, k::kGdnInlineRows,
                                    static_cast<int>(scratch_tokens_ / std::max(n, 1))});
    per_launch = std::max(1, per_launch);
    for (int r0 = 0; r0 < rows; r0 += per_launch) {
      a.rows = std::min(per_launch, rows - r0);
      a.tokens = n;
      a.token0 = int64_t{r0} * n;
      a.inline_slots = run.slots.data() + r0;
      launch(a, n == 0 ? "materialize" : "decode");
    }
  }

  // The kernels' view of a round's token ranges: the uploaded host offsets, the caller's device
  // cu_seqlens, or none (uniform).
  k::RowTokensParams round_varlen(const RoundPlan& plan) const {
    k::RowTokensParams v;
    if (!plan.tokens.device_offsets.empty()) {
      v.cu = static_cast<const int32_t*>(plan.tokens.device_offsets.data);
    } else if (!plan.tokens.offsets.empty()) {
      v.cu = offsets_;
    }
    v.capacity = plan.num_tokens;
    return v;
  }

  // Batched prefill of rows of different lengths: launches of consecutive rows whose tokens fit
  // the conv-output scratch, each with its offsets (relative to its first token) uploaded; a row
  // longer than the scratch runs alone, in chunks of tokens, as a single prefill does.
  template <typename Args, typename Launch>
  void run_varlen_advance(const LayerRun& run, Args a, Launch& launch) {
    const int rows = static_cast<int>(run.slots.size());
    const int per_launch_max = std::min<int>({k::kConvInlineRows, k::kGdnInlineRows});
    std::vector<int32_t> rel;
    for (int r0 = 0; r0 < rows;) {
      if (run.length(r0) > scratch_tokens_) {
        const int n = run.length(r0);
        for (int64_t t0 = 0; t0 < n; t0 += scratch_tokens_) {  // int64: n may be 2^31 - 1
          Args one = a;
          one.rows = 1;
          one.tokens = static_cast<int>(std::min<int64_t>(n - t0, scratch_tokens_));
          one.token0 = run.token0(r0) + t0;
          one.inline_slots = run.slots.data() + r0;
          if (t0 > 0) one.io.conv_pending = one.io.history = false;
          launch(one, "prefill");
        }
        ++r0;
        continue;
      }
      int r1 = r0;
      int longest = 0;
      while (r1 < rows && r1 - r0 < per_launch_max && run.length(r1) <= scratch_tokens_ &&
             run.token0(r1) + run.length(r1) - run.token0(r0) <= scratch_tokens_) {
        longest = std::max(longest, run.length(r1));
        ++r1;
      }
      rel.assign(static_cast<std::size_t>(r1 - r0 + 1), 0);
      for (int r = r0; r <= r1; ++r) {
        rel[static_cast<std::size_t>(r - r0)] = static_cast<int32_t>(
            (r < r1 ? run.token0(r) : run.token0(r1 - 1) + run.length(r1 - 1)) - run.token0(r0));
      }
      break_chain();  // the next launch reads what this upload writes
      check(k::launch_upload_i32(advance_offsets_, rel.data(), r1 - r0 + 1, stream_),
            "uploading prefill offsets");
      Args chunk = a;
      chunk.rows = r1 - r0;
      chunk.tokens = longest;
      chunk.token0 = run.token0(r0);
      chunk.inline_slots = run.slots.data() + r0;
      chunk.varlen.cu = advance_offsets_;
      chunk.varlen.capacity = rel.back();
      launch(chunk, "prefill");
      r0 = r1;
    }
  }

  void alloc(void** p, std::size_t bytes) {
    const std::size_t n = std::max<std::size_t>(bytes, 16);
    check(cudaMalloc(p, n), "cudaMalloc");
    check(cudaMemset(*p, 0, n), "cudaMemset");
  }

  // The round's accepted values checked on the device before the commit's launch: error_ holds
  // the OR of the rows' error bits, and a raised flag makes the commit keep every row
  // (all-or-nothing, DESIGN.md section 5; kernels/commit.h). Capturable: no host sync.
  void check_commit_values(const RoundPlan& plan, k::CommitMode mode, const int32_t* accepted,
                           int64_t accepted_stride, const k::RowTokensParams& varlen) {
    k::CommitCheckParams c;
    c.rows = plan.rows;
    c.window = plan.window;
    c.mode = mode;
    c.accepted_stride = accepted_stride;
    c.varlen = varlen;
    c.slots = slots_;
    c.accepted = accepted;
    c.error_flag = error_;
    check(k::launch_commit_check(c, stream_), "commit check kernel");
  }

  // Where the commit kernels read accepted values: raw device values (checked on the device) or
  // the pool's host-validated steps, uploaded.
  void accepted_source(const CommitWork& work, k::CommitMode* mode, const int32_t** accepted,
                       int64_t* stride) {
    const RoundPlan& plan = *work.plan;
    if (!work.device_accepted.empty()) {
      *mode = plan.is_tree ? k::CommitMode::kNode : k::CommitMode::kAcceptedLength;
      *accepted = static_cast<const int32_t*>(work.device_accepted.data);
      *stride = work.device_accepted.stride[0];
      return;
    }
    check(k::launch_upload_i32(steps_, work.last_step.data(), plan.rows, stream_),
          "uploading commit steps");
    *mode = k::CommitMode::kNode;
    *accepted = steps_;
    *stride = 1;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  int64_t scratch_tokens_ = 0;
  int32_t* slots_ = nullptr;           // [max_rows] the round's slots (begin_round)
  int32_t* parents_ = nullptr;         // [max_rows, max_window] the round's parents (begin_round)
  int32_t* steps_ = nullptr;           // [max_rows] host-path commit steps
  int32_t* error_ = nullptr;           // commit error flag
  int32_t* fused_counters_ = nullptr;  // [2][max_rows, key heads] kernels/gdn_fused.h, or null
  std::size_t fused_counter_set_ = 0;  // elements of one set
  int fused_counter_parity_ = 0;       // the set the next fused launch counts in
  int32_t* offsets_ = nullptr;    // [max_rows + 1] the round's host token offsets (begin_round)
  char** layer_table_ = nullptr;  // [2L] committed conv then SSM, slot 0 of each layer
  bool committed_aligned16_ = false;
  int32_t* advance_offsets_ = nullptr;  // [kConvInlineRows + 1] one batched-prefill launch's
  cuda::GdnScratch scratch_;
  int overlap_ = 1;                       // SPECSTATE_LAYER_OVERLAP (programmatic_edge)
  const void* chain_key_ = nullptr;       // the layer launched last (programmatic_edge), or null
  unsigned long long chain_capture_ = 0;  // the capture that launch was made in, 0 for none
  cuda::LayerCopy layer_copy_;            // declared last: built from device_ and stream_
};

}  // namespace

std::unique_ptr<BackendImpl> make_cuda_backend(const PoolOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace specstate::detail
