// Device helpers shared by the kernels: dtype conversion, vector loads/stores, warp reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernel_types.h"

namespace specstate::kernels {

using bf16 = __nv_bfloat16;

// The shared memory an SM of the architecture being compiled gives CTAs (smem_per_sm_of); the
// host pass, which only needs a constant for the kernels' declarations and the launchers' wave
// arithmetic, takes sm_90's (the build's default architecture).
#if defined(__CUDA_ARCH__)
inline constexpr int64_t kSmemPerSm = smem_per_sm_of(__CUDA_ARCH__ / 10);
#else
inline constexpr int64_t kSmemPerSm = smem_per_sm_of(90);
#endif

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<bf16>(bf16 v) {
  return __bfloat162float(v);
}

// Round to nearest even, as specstate::bf16_from_float (NaN stays NaN).
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

// A value of T as 32 bits, held in a register until it is needed, and back to float (exact).
__device__ __forceinline__ uint32_t act_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t act_bits(bf16 v) { return __bfloat16_as_ushort(v); }
template <typename T>
__device__ __forceinline__ float float_from_act_bits(uint32_t bits);
template <>
__device__ __forceinline__ float float_from_act_bits<float>(uint32_t bits) {
  return __uint_as_float(bits);
}
template <>
__device__ __forceinline__ float float_from_act_bits<bf16>(uint32_t bits) {
  return __uint_as_float(bits << 16);  // a bf16 is the high half of its float
}

// The value `v` takes after a round trip through T.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_float<T>(from_float<T>(v));
}

// An asynchronous copy of kBytes (4, 8 or 16) from global to shared memory (cp.async; 16 bytes
// bypass L1). Completes at cp.async.wait_all after cp.async.commit_group.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(gmem), "n"(kBytes)
                 : "memory");
  }
}

// A scalar of run-time dtype (weights, gate parameters: small, cached, any float dtype).
__device__ __forceinline__ float load_any(const void* p, ElemType t, int64_t i) {
  return t == ElemType::kBF16 ? __bfloat162float(static_cast<const bf16*>(p)[i])
                              : static_cast<const float*>(p)[i];
}

// load_any, or 0 where p is null: two predicated loads, one for each dtype width, of which at
// most one runs (the dtype is a run-time value at every call site; with a constant one ptxas may
// turn the predicate back into a branch). The recurrence kernels load their gate parameters this
// way first thing: with a branch around each load (`p ? load_any(...) : 0`), ptxas moved each
// value into a uniform register right after its load, inside the branch, so the loads ran one
// round trip after another before the slot's (ncu by SASS instruction, docs/cuda.md,
// thirty-fourth session).
__device__ __forceinline__ float load_any_or_zero(const void* p, ElemType t, int64_t i) {
  const uint32_t bf = t == ElemType::kBF16 ? 1u : 0u;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(i) * (bf ? 2 : 4);
  uint32_t bits;
  asm("{\n\t"
      ".reg .pred n, b, nb, f;\n\t"
      "setp.ne.u64 n, %1, 0;\n\t"
      "setp.ne.u32 b, %3, 0;\n\t"
      "not.pred nb, b;\n\t"
      "and.pred f, n, nb;\n\t"
      "and.pred b, n, b;\n\t"
      "mov.b32 %0, 0;\n\t"
      "@f ld.global.b32 %0, [%2];\n\t"
      "@b ld.global.u16 %0, [%2];\n\t"
      "}"
      : "=r"(bits)
      : "l"(reinterpret_cast<uintptr_t>(p)), "l"(a), "r"(bf));
  return __uint_as_float(bf ? bits << 16 : bits);
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// The vector width of N contiguous elements of T: 16 bytes where N * sizeof(T) is a multiple of
// 16, else 8 where it is a multiple of 8 (a group of 4 bf16 channels), else 0 (scalar).
template <typename T, int N>
inline constexpr int kVecBytes = (N * sizeof(T)) % 16 == 0  ? 16
                                 : (N * sizeof(T)) % 8 == 0 ? 8
                                                            : 0;

// Whether N contiguous elements of T at p can be moved as kVecBytes vectors.
template <typename T, int N>
__device__ __forceinline__ bool aligned_vec(const void* p) {
  constexpr int kBytes = kVecBytes<T, N>;
  if constexpr (kBytes == 0) {
    return false;
  } else {
    return (reinterpret_cast<uintptr_t>(p) & uintptr_t{kBytes - 1}) == 0;
  }
}

// C consecutive elements (channels of one token's row, a run of a record) held as the bits they
// were loaded with (C * sizeof(Act) bytes, half the registers of floats for bf16) until each is
// read as a float or stored back unchanged: a batch of loads in flight without the registers of
// their conversions, and records copied bit for bit.
template <typename Act, int C>
struct ActBits {
  static_assert((C * sizeof(Act)) % 4 == 0, "whole 32-bit words");
  static constexpr int kWords = static_cast<int>(C * sizeof(Act) / 4);
  static constexpr int kPer = static_cast<int>(4 / sizeof(Act));  // elements a word
  uint32_t w[kWords];
  // As load_row: 16- or 8-byte vectors where the layout allows, else element by element (zeros
  // past nc).
  __device__ __forceinline__ void load(const Act* ptr, int64_t stride_c, bool full, int nc) {
    if constexpr (kVec != 0) {
      if (full && stride_c == 1 && aligned_vec<Act, C>(ptr)) {
        load_vec(ptr);
        return;
      }
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0u;
#pragma unroll
    for (int k = 0; k < C; ++k) {
      if (k < nc) w[k / kPer] |= act_bits(ptr[k * stride_c]) << (32 / kPer * (k % kPer));
    }
  }
  // The bits as loaded, to C contiguous elements at ptr (vectors where aligned).
  __device__ __forceinline__ void store(Act* ptr) const {
    if constexpr (kVec != 0) {
      if (aligned_vec<Act, C>(ptr)) {
        store_vec(ptr);
        return;
      }
    }
#pragma unroll
    for (int k = 0; k < C; ++k) {
      const uint32_t bits = (w[k / kPer] >> (32 / kPer * (k % kPer))) & (kPer == 1 ? ~0u : 0xffffu);
      if constexpr (kPer == 1) {
        ptr[k] = __uint_as_float(bits);
      } else {
        ptr[k] = __ushort_as_bfloat16(static_cast<unsigned short>(bits));
      }
    }
  }
  __device__ __forceinline__ float get(int k) const {
    const uint32_t word = w[k / kPer];
    if constexpr (kPer == 1) {
      return float_from_act_bits<Act>(word);
    } else {
      return float_from_act_bits<Act>((word >> (16 * (k % kPer))) & 0xffffu);
    }
  }
  // The vector moves of load / store, for a ptr the caller knows is kVecBytes-aligned (C
  // contiguous elements): kVecWords words a vector.
  static constexpr int kVec = kVecBytes<Act, C>;
  using Vec = std::conditional_t<kVec == 16, uint4, uint2>;
  static constexpr int kVecWords = kVec / 4;
  __device__ __forceinline__ void load_vec(const Act* ptr) {
    static_assert(kVec != 0, "whole vectors");
#pragma unroll
    for (int i = 0; i < kWords / kVecWords; ++i) {
      const Vec v = reinterpret_cast<const Vec*>(ptr)[i];
      const uint32_t* e = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
      for (int j = 0; j < kVecWords; ++j) w[i * kVecWords + j] = e[j];
    }
  }
  __device__ __forceinline__ void store_vec(Act* ptr) const {
    static_assert(kVec != 0, "whole vectors");
#pragma unroll
    for (int i = 0; i < kWords / kVecWords; ++i) {
      Vec v;
      uint32_t* e = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
      for (int j = 0; j < kVecWords; ++j) e[j] = w[i * kVecWords + j];
      reinterpret_cast<Vec*>(ptr)[i] = v;
    }
  }
};

// N contiguous elements of T -> float. `vec` selects kVecBytes loads (caller checked the
// alignment: aligned_vec, or aligned16); otherwise scalar loads.
template <typename T, int N>
__device__ __forceinline__ void load_n(const T* __restrict__ p, float (&out)[N], bool vec) {
  constexpr int kBytes = kVecBytes<T, N>;
  if constexpr (kBytes != 0) {
    if (vec) {
      using Vec = std::conditional_t<kBytes == 16, uint4, uint2>;
      constexpr int kPer = kBytes / sizeof(T);
#pragma unroll
      for (int i = 0; i < N / kPer; ++i) {
        Vec raw = reinterpret_cast<const Vec*>(p)[i];
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < kPer; ++j) out[i * kPer + j] = to_float<T>(e[j]);
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float<T>(p[i]);
}

template <typename T, int N>
__device__ __forceinline__ void store_n(T* __restrict__ p, const float (&in)[N], bool vec) {
  constexpr int kBytes = kVecBytes<T, N>;
  if constexpr (kBytes != 0) {
    if (vec) {
      using Vec = std::conditional_t<kBytes == 16, uint4, uint2>;
      constexpr int kPer = kBytes / sizeof(T);
#pragma unroll
      for (int i = 0; i < N / kPer; ++i) {
        Vec raw;
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int j = 0; j < kPer; ++j) e[j] = from_float<T>(in[i * kPer + j]);
        reinterpret_cast<Vec*>(p)[i] = raw;
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) p[i] = from_float<T>(in[i]);
}

// Four consecutive elements as float4 (16 bytes f32, 8 bytes bf16); p must be aligned to
// 4 * sizeof(T).
template <typename T>
__device__ __forceinline__ float4 load4(const T* p);
template <>
__device__ __forceinline__ float4 load4<float>(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
template <>
__device__ __forceinline__ float4 load4<bf16>(const bf16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}

template <typename T>
__device__ __forceinline__ void store4(T* p, float4 v);
template <>
__device__ __forceinline__ void store4<float>(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
template <>
__device__ __forceinline__ void store4<bf16>(bf16* p, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<uint32_t*>(&lo);
  raw.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(p) = raw;
}

// store4 with an evict-first (streaming) cache hint: data written once and not read back soon.
template <typename T>
__device__ __forceinline__ void store4_stream(T* p, float4 v);
template <>
__device__ __forceinline__ void store4_stream<float>(float* p, float4 v) {
  __stcs(reinterpret_cast<float4*>(p), v);
}
template <>
__device__ __forceinline__ void store4_stream<bf16>(bf16* p, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<uint32_t*>(&lo);
  raw.y = *reinterpret_cast<uint32_t*>(&hi);
  __stcs(reinterpret_cast<uint2*>(p), raw);
}

// SiLU as engines' Triton kernels compute it: the hardware exponential (ex2.approx) and a fast
// division (a reciprocal and a multiply), about 4 instructions instead of about 25 for expf and an
// IEEE division (23.7% of the conv kernel's instructions at T = 4, B = 128 under ncu). Within a
// few ulp of x / (1 + e^-x) for |x| below ~20 (the CPU oracle's formula; DESIGN.md section 7's
// tolerances); 0 for x below about -87 (e^-x overflows), x for large x. Every CUDA kernel calls
// this one function, so the strategies and paths still agree bit for bit.
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Programmatic dependent launch (compute capability 9.0 and later). A layer's kernels form a
// chain: the conv kernel lets the recurrence after it start (launch_dependents, at its start);
// the recurrence waits for the conv grid (grid_dependency_wait) before reading conv_out. Where the
// backend launches a layer's first kernel (the conv, or the fused kernel) as a programmatic
// dependent of the previous layer's last one (ConvUpdateParams / GdnFusedParams::programmatic),
// that kernel reads what the previous one cannot be writing (its own layer's committed state,
// pending steps and records, its weights, the slots) and only then waits. grid_dependency_wait
// also releases this kernel's own dependents, after the wait: a chain then has at most one kernel
// past its wait and the next ones in their prologues, so a prologue never overlaps a kernel older
// than its predecessor (whose writes would not be visible). On older GPUs (sm_80) all of it is a
// no-op and the kernels run in plain stream order (no launch asks for the programmatic edge).
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The current device's multiprocessor count, asked of the runtime once per device (132 when the
// runtime cannot say).
inline int device_sm_count() {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0: unknown
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  if (device >= 0 && device < kDevices) {
    const int k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k;
  }
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) {
    n = 132;
  }
  if (device >= 0 && device < kDevices) known[device].store(n, std::memory_order_relaxed);
  return n;
}

// A launcher's on / off tuning switch (timing and tests): -1 when the environment variable
// `name` is unset (the measured rule decides), 1 when it starts with '1', else 0.
inline int env_force(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr ? -1 : e[0] == '1' ? 1 : 0;
}
inline bool env_flag(const char* name) { return env_force(name) == 1; }

// Blocks (of V rows, or channels) of one (row, head) per CTA of a replay chain launch: the most
// (1, 2, 4 or 8, at most `blocks`) that still leave `min_per_sm` CTAs per SM; the environment
// variable `env` (1, 2, 4 or 8) overrides, for tuning and tests. Measured on the H200 (rounds of
// T = 2, 4, 8; docs/cuda.md): GDN (Qwen3-Next TP1, 8 V blocks a head) gains from 6 CTAs per SM
// on (B = 8: 2 blocks, B = 32 and 128: 8); Mamba2 (Nemotron-H, 4 channel blocks a head) only
// from about 24 (B = 32 and 128: 4, 0.82-0.99x; B = 8 with 2 or 4 was 1.13-1.28x slower).
inline int replay_vblocks_for(int rows, int heads, int blocks, int min_per_sm, const char* env) {
  const char* e = std::getenv(env);
  return replay_blocks_per_cta(rows, heads, blocks, min_per_sm, device_sm_count(),
                               e ? std::atoi(e) : 0);
}

// Whether the current device runs programmatic dependent launch (compute capability >= 9.0),
// asked of the runtime once per device (every recurrence launch calls this on the host).
inline bool programmatic_launch_supported() {
  constexpr int kDevices = 64;
  static std::atomic<int8_t> known[kDevices] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (device >= 0 && device < kDevices) {
    const int8_t k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  int major = 0;
  const bool yes =
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      major >= 9;
  if (device >= 0 && device < kDevices) {
    known[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  }
  return yes;
}

// Launches a kernel, as a programmatic dependent of the kernel before it in the stream where
// `programmatic` and the device has it (captured as a programmatic edge in CUDA graphs): it may
// start while that kernel runs and waits (grid_dependency_wait) before reading its outputs.
// Returns this launch's error: not cudaGetLastError(), which also returns (and clears) an error an
// earlier call left on the thread, the caller's included, and made a call throw after its kernel
// was queued (a device-valued commit ran while the round stayed open on the host).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block,
                          cudaStream_t stream, const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic && programmatic_launch_supported() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// Launches a recurrence kernel as a programmatic dependent of the conv kernel before it.
template <typename Params>
cudaError_t launch_after_conv(void (*kernel)(Params), dim3 grid, dim3 block, const Params& p,
                              cudaStream_t stream) {
  return launch_kernel(true, kernel, grid, block, stream, p);
}

// The state-I/O checks every recurrence launcher makes: *skip = nothing to run (no rows, or no
// tokens and no replay phase); cudaErrorInvalidValue for a tree without snapshots longer than
// the kernel stages at once (`chunk`).
template <typename Params>
cudaError_t check_recurrence_launch(const Params& p, int chunk, bool* skip) {
  *skip = p.rows <= 0 || p.tokens < 0 || (p.tokens == 0 && p.cursor == nullptr);
  if (!*skip && p.parents != nullptr && p.snap == nullptr && p.tokens > chunk) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// A slot's replay cursor as a recurrence launch sees it (DESIGN.md section 6): the ring position
// `base` of its first history record, the `hist` records to apply (0 where an earlier verify of
// the round folded: `settled`), the ring position `wpos` of window token 0, and whether the
// post-history state is stored (`store`: a fold, or an advance / materialize that asks for it).
// `count`: the row's window tokens. Every kind's kernels read it the same way.
struct ReplayCursor {
  int base = 0, hist = 0, wpos = 0;
  bool store = false;
};
template <typename Params>
__device__ __forceinline__ ReplayCursor replay_cursor(const Params& p, int slot, int count) {
  ReplayCursor c;
  c.base = p.cursor[2 * slot];
  c.hist = p.cursor[2 * slot + 1];
  c.wpos = c.base + c.hist;  // base < R and hist < R
  if (c.wpos >= p.ring) c.wpos -= p.ring;
  const bool folds = p.fold && replay_folds(c.hist, p.fold_limit);
  if (p.settled && folds) c.hist = 0;  // the first verify of the round stored it
  c.store = p.fold ? folds && !p.settled
                   : c.hist > 0 && (p.store_replayed || (p.store_final && count == 0));
  return c;
}

// Rows [0, n) of an fp32 matrix in shared memory whose tails hold raw rows (E values of the act
// dtype each, at raw(tt)): row tt becomes raw * factor(tt), in place, at out(tt). A warp converts
// whole rows (warps take rows in turn, kThreads in the CTA): it reads the raw row, then, after
// __syncwarp (the raw and the float row overlap), writes the float row. The caller publishes the
// rows to the CTA with a barrier.
template <typename Act, int E, int kThreads, typename Raw, typename Factor, typename Out>
__device__ __forceinline__ void scale_raw_rows(int n, Raw raw, Factor factor, Out out) {
  constexpr int kPerLane = (E / 4 + 31) / 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int tt = warp; tt < n; tt += kThreads / 32) {
    const float f = factor(tt);
    float4 v[kPerLane];
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int e = (lane + 32 * q) * 4;
      if (e < E) {
        v[q] = load4<Act>(raw(tt) + e);
        v[q].x *= f;
        v[q].y *= f;
        v[q].z *= f;
        v[q].w *= f;
      }
    }
    __syncwarp();
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int e = (lane + 32 * q) * 4;
      if (e < E) *reinterpret_cast<float4*>(out(tt) + e) = v[q];
    }
  }
}

// A hint that `ptr` will be read soon by this thread: its line is fetched into L1 now.
__device__ __forceinline__ void prefetch_l1(const void* ptr) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(ptr));
}

// The tokens of launch row `row` (see RowTokensParams): [begin, begin + count).
struct RowTokens {
  int64_t begin = 0;
  int count = 0;
};
__device__ __forceinline__ RowTokens row_tokens(const RowTokensParams& v, int row, int tokens) {
  if (v.cu == nullptr) return RowTokens{int64_t{row} * tokens, tokens};
  const int64_t b = v.cu[row], e = v.cu[row + 1];
  if (b < 0 || e < b || e - b > tokens || e > v.capacity) return RowTokens{0, 0};
  return RowTokens{b, static_cast<int>(e - b)};
}

// The row of a replay chain launch that runs several blocks (of V rows, or channels) per CTA
// (p.vblocks; blockIdx.x * p.vblocks is the CTA's first block, blockIdx.z the row): its blocks,
// slot, tokens and cursor. False where the row does not fit that path (no cursor, snapshots, a
// tree, a padding row, no window, or history and window longer than a chunk of kChunk tokens).
struct ReplayBlocks {
  int vb0 = 0, nvb = 0, row = 0, slot = -1;
  RowTokens rt;
  ReplayCursor cur;
};
template <int kChunk, typename Params>
__device__ __forceinline__ bool replay_blocks(const Params& p, int blocks, ReplayBlocks& b) {
  // The slot first, before any branch: its load then leaves with the kernel's gate parameters'.
  const int rr = blockIdx.z;
  b.row = rr;
  b.slot = p.slots ? p.slots[b.row] : p.slot_inline[rr];
  if (p.cursor == nullptr || p.snap != nullptr || p.parents != nullptr) return false;
  b.vb0 = blockIdx.x * p.vblocks;
  b.nvb = min(p.vblocks, blocks - b.vb0);
  if (b.slot < 0) return false;
  b.rt = row_tokens(p.varlen, b.row, p.tokens);
  b.cur = replay_cursor(p, b.slot, b.rt.count);
  return b.rt.count > 0 && b.cur.hist + b.rt.count <= kChunk;
}

// Calls f(Act{}, St{}) with the C++ types of the run-time activation and state dtypes, so that
// every launcher dispatches its four (act, state) instantiations the same way.
template <typename F>
cudaError_t dispatch_act_state(ElemType act, ElemType state, F&& f) {
  const bool st_bf16 = state == ElemType::kBF16;
  if (act == ElemType::kBF16) return st_bf16 ? f(bf16{}, bf16{}) : f(bf16{}, float{});
  return st_bf16 ? f(float{}, bf16{}) : f(float{}, float{});
}

}  // namespace specstate::kernels
