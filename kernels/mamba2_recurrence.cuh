// Kernel of launch_mamba2_recurrence (see mamba2_recurrence.h), DESIGN.md section 3.
//
// Work split (as the GDN recurrence): a CTA owns 16 channels p of one (row, head) and all N
// states (32 channels and 4 lanes for N = 16); 8 lanes per channel hold N/8 states each as
// float4 at n = i*32 + lane%8*4, so every
// 16-byte store of a warp covers whole 128-byte lines. The state stays in registers across the
// window; B, C (the head's group), x, dt and the gate of a chunk of tokens are staged in shared
// memory. Channels are independent given the token's B, C and dt, so splitting P over CTAs needs
// no communication.
#pragma once

#include "common.cuh"
#include "mamba2_recurrence.h"

namespace specstate::kernels {

inline constexpr int kMamba2Threads = 128;

// Lanes per channel: 8 (N >= 32: float4 slices of N/8), 4 for N = 16 (one float4 each).
template <int N>
__host__ __device__ constexpr int mamba2_lanes() {
  return N >= 32 ? 8 : 4;
}
template <int N>
__host__ __device__ constexpr int mamba2_rows() {  // channels per CTA
  return kMamba2Threads / mamba2_lanes<N>();
}

template <int N, int kChunk>
struct Mamba2Chunk {
  __align__(16) float B[kChunk][N];  // B[g][n] * dt (the step's dB)
  __align__(16) float C[kChunk][N];
  float x[kChunk][mamba2_rows<N>()];
  float z[kChunk][mamba2_rows<N>()];  // silu(z) (gate), or 1
  float dA[kChunk];
};

template <typename Act>
struct Mamba2Source {
  const Act* xbc;
  int64_t xbc_stride_token, xbc_stride_c;
  const Act* dt;
  int64_t dt_stride_token, dt_stride_h;
  int64_t tok0;
};

// Stages virtual tokens [c0, c0 + n): token i of `first` for i < n_first (replayed steps, no
// gate needed), token i - n_first of `second` otherwise. Ends with __syncthreads().
template <typename Act, int N, int kChunk, bool kTwoSources>
__device__ __forceinline__ void mamba2_stage(Mamba2Chunk<N, kChunk>& c,
                                             const Mamba2Source<Act>& first, int n_first,
                                             const Mamba2Source<Act>& second,
                                             const Mamba2RecurrenceParams& p, int h, int c0, int n,
                                             float A, float dt_bias) {
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = h / (p.num_heads / p.n_groups);
  const int64_t b_off = int64_t{p.num_heads} * P + int64_t{g} * N;
  const int64_t c_off = b_off + int64_t{p.n_groups} * N;
  // dt and dA of each token first (thread tt), then B * dt and C.
  __shared__ float dt_s[kChunk];
  if (tid < n) {
    const int vt = c0 + tid;
    const bool f = kTwoSources && vt < n_first;
    const Mamba2Source<Act>& s = f ? first : second;
    const int64_t tok = f ? first.tok0 + vt : second.tok0 + vt - n_first;
    const Act* dtp = f ? first.dt : second.dt;
    const int64_t dts = f ? first.dt_stride_token : second.dt_stride_token;
    const int64_t dth = f ? first.dt_stride_h : second.dt_stride_h;
    (void)s;
    float dt = softplus(to_float<Act>(dtp[tok * dts + h * dth]) + dt_bias);
    if (p.has_dt_min) dt = fmaxf(dt, p.dt_min);
    if (p.has_dt_max) dt = fminf(dt, p.dt_max);
    dt_s[tid] = dt;
    c.dA[tid] = expf(A * dt);
  }
  __syncthreads();
  for (int i = tid; i < n * N; i += kMamba2Threads) {
    const int tt = i / N, k = i % N;
    const int vt = c0 + tt;
    const bool f = kTwoSources && vt < n_first;
    const Act* xbc = f ? first.xbc : second.xbc;
    const int64_t st = f ? first.xbc_stride_token : second.xbc_stride_token;
    const int64_t sc = f ? first.xbc_stride_c : second.xbc_stride_c;
    const int64_t tok = f ? first.tok0 + vt : second.tok0 + vt - n_first;
    const Act* base = xbc + tok * st;
    c.B[tt][k] = to_float<Act>(base[(b_off + k) * sc]) * dt_s[tt];
    c.C[tt][k] = to_float<Act>(base[(c_off + k) * sc]);
  }
  constexpr int kRows = mamba2_rows<N>();
  for (int i = tid; i < n * kRows; i += kMamba2Threads) {
    const int tt = i / kRows, r = i % kRows;
    const int ch = blockIdx.x * kRows + r;
    const int vt = c0 + tt;
    const bool f = kTwoSources && vt < n_first;
    const Act* xbc = f ? first.xbc : second.xbc;
    const int64_t st = f ? first.xbc_stride_token : second.xbc_stride_token;
    const int64_t sc = f ? first.xbc_stride_c : second.xbc_stride_c;
    const int64_t tok = f ? first.tok0 + vt : second.tok0 + vt - n_first;
    float xv = 0.0f, zv = 1.0f;
    if (ch < P) {
      xv = to_float<Act>(xbc[tok * st + (int64_t{h} * P + ch) * sc]);
      if (p.gate && !f) {
        const float zz = to_float<Act>(
            static_cast<const Act*>(p.z)[(second.tok0 + vt - n_first) * p.z_stride_token +
                                         (int64_t{h} * P + ch) * p.z_stride_c]);
        zv = zz * sigmoid(zz);
      }
    }
    c.x[tt][r] = xv;
    c.z[tt][r] = zv;
  }
  __syncthreads();
}

// One token step on this thread's slice of the state (staged token tt); returns y for its
// channel (before D skip and gate) when kOutput.
template <typename St, int N, int kChunk, bool kOutput>
__device__ __forceinline__ float mamba2_step(float4 (&S)[N / (4 * mamba2_lanes<N>())],
                                             const Mamba2Chunk<N, kChunk>& c, int tt, int kl,
                                             int r) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  const float dA = c.dA[tt];
  const float xp = c.x[tt][r];
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    const int n = i * 4 * LANES + kl * 4;
    const float4 b = *reinterpret_cast<const float4*>(&c.B[tt][n]);
    S[i].x = round_to<St>(fmaf(b.x, xp, S[i].x * dA));
    S[i].y = round_to<St>(fmaf(b.y, xp, S[i].y * dA));
    S[i].z = round_to<St>(fmaf(b.z, xp, S[i].z * dA));
    S[i].w = round_to<St>(fmaf(b.w, xp, S[i].w * dA));
    if constexpr (kOutput) {
      const float4 cc = *reinterpret_cast<const float4*>(&c.C[tt][n]);
      acc += S[i].x * cc.x + S[i].y * cc.y + S[i].z * cc.z + S[i].w * cc.w;
    }
  }
  if constexpr (kOutput) {
#pragma unroll
    for (int m = LANES / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  }
  return acc;
}

template <typename St, int NK, int LANES>
__device__ __forceinline__ void mamba2_store(St* dst, const float4 (&S)[NK], int kl, bool stream) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    if (stream) {
      store4_stream<St>(dst + i * 4 * LANES + kl * 4, S[i]);
    } else {
      store4<St>(dst + i * 4 * LANES + kl * 4, S[i]);
    }
  }
}

template <typename St, int NK, int LANES>
__device__ __forceinline__ void mamba2_load(float4 (&S)[NK], const St* src, int kl, bool ok) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    S[i] = ok ? load4<St>(src + i * 4 * LANES + kl * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// kReplay: the instantiation that may run a replay phase or recompute tree states.
template <typename Act, typename St, int N, int kChunk, bool kReplay>
__global__ void __launch_bounds__(kMamba2Threads, N <= 128 ? 8 : 4)
    mamba2_recurrence_kernel(const __grid_constant__ Mamba2RecurrenceParams p) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  static_assert(NK >= 1 && N % (4 * LANES) == 0, "N must be 16 or a multiple of 32");
  __shared__ Mamba2Chunk<N, kChunk> chunk;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kl = lane % LANES;
  const int r = warp * (32 / LANES) + lane / LANES;  // channel within the CTA
  const int P = p.head_dim;
  const int ch = blockIdx.x * mamba2_rows<N>() + r;
  const bool ok = ch < P;
  const int h = blockIdx.y;
  const int rr = blockIdx.z;
  const int row = p.row_begin + rr;
  const int slot = p.slots ? p.slots[row] : p.slot_inline[rr];
  if (slot < 0) return;  // padding row: nothing read, nothing written (uniform over the CTA)
  const int64_t head_off = (int64_t{h} * P + (ok ? ch : 0)) * N;
  St* committed = static_cast<St*>(p.state) + slot * p.state_stride_slot + head_off;
  float4 S[NK];
  mamba2_load<St, NK, LANES>(S, committed, kl, ok);
  const int n_rep = kReplay && p.pending != nullptr ? p.pending[slot] : 0;

  // The conv outputs are read only after the preceding conv grid completed.
  grid_dependency_wait();

  const float A = -expf(load_any(p.A_log, p.a_log_dtype, h * p.a_log_stride));
  const float dt_bias = load_any(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride);
  const float D = p.d_skip ? load_any(p.D, p.d_dtype, h * p.d_stride) : 0.0f;
  Act* out = static_cast<Act*>(p.out);
  St* snap_row = p.snap ? static_cast<St*>(p.snap) + row * p.snap_stride_row + head_off : nullptr;
  const bool recompute = kReplay && p.parents != nullptr && p.snap == nullptr;

  const Mamba2Source<Act> rep{static_cast<const Act*>(p.replay_xbc) + row * p.replay_xbc_stride_row,
                              p.replay_xbc_stride_t,
                              1,
                              static_cast<const Act*>(p.replay_dt) + row * p.replay_dt_stride_row,
                              p.replay_dt_stride_t,
                              1,
                              0};
  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  const int64_t row_token0 = rt.begin;                  // inputs and outputs
  const int64_t row_parent0 = int64_t{row} * p.tokens;  // parents: [rows, tokens]
  const Mamba2Source<Act> win{static_cast<const Act*>(p.xbc),
                              p.xbc_stride_token,
                              p.xbc_stride_c,
                              static_cast<const Act*>(p.dt),
                              p.dt_stride_token,
                              p.dt_stride_h,
                              row_token0};
  const int total = n_rep + rt.count;  // (the window has tokens iff total > n_rep)
  const bool split = recompute && total > kChunk;
  for (int c0 = 0; c0 < total;) {
    int m = min(kChunk, total - c0);
    if (split && c0 < n_rep) m = min(m, n_rep - c0);
    mamba2_stage<Act, N, kChunk, kReplay>(chunk, rep, n_rep, win, p, h, c0, m, A, dt_bias);
    for (int tt = 0; tt < m; ++tt) {
      const int vt = c0 + tt;
      if (kReplay && vt < n_rep) {
        mamba2_step<St, N, kChunk, false>(S, chunk, tt, kl, r);
        if (vt == n_rep - 1 && ok && (p.store_replayed || (p.store_final && total == n_rep))) {
          mamba2_store<St, NK, LANES>(committed, S, kl, false);
        }
        continue;
      }
      const int t = vt - n_rep;
      if (p.parents != nullptr && t > 0) {
        const int parent = p.parents[row_parent0 + t];
        if (parent != t - 1) {
          if (!recompute) {
            mamba2_load<St, NK, LANES>(S, snap_row + parent * p.snap_stride_t, kl, ok);
          } else {
            // The start state (the committed memory holds it exactly) along root..parent.
            uint32_t path = 0;
            for (int a = parent; a >= 0; a = p.parents[row_parent0 + a]) path |= 1u << a;
            mamba2_load<St, NK, LANES>(S, committed, kl, ok);
            while (path != 0) {
              const int a = __ffs(path) - 1;
              path &= path - 1;
              mamba2_step<St, N, kChunk, false>(S, chunk, n_rep + a - c0, kl, r);
            }
          }
        }
      }
      float y = mamba2_step<St, N, kChunk, true>(S, chunk, tt, kl, r);
      if (snap_row != nullptr && ok) {
        mamba2_store<St, NK, LANES>(snap_row + t * p.snap_stride_t, S, kl, true);
      }
      if (kl == 0 && ok) {
        if (p.d_skip) y += chunk.x[tt][r] * D;
        y *= chunk.z[tt][r];
        out[(row_token0 + t) * p.out_stride_token + h * p.out_stride_h + ch * p.out_stride_p] =
            from_float<Act>(y);
      }
    }
    __syncthreads();  // the next chunk's staging overwrites the shared arrays
    c0 += m;
  }
  if (p.store_final && total > n_rep && ok) mamba2_store<St, NK, LANES>(committed, S, kl, false);
}

template <typename Act, typename St, int N, int kChunk, bool kReplay>
cudaError_t launch_mamba2_shape(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  constexpr int kRows = mamba2_rows<N>();
  return launch_after_conv(mamba2_recurrence_kernel<Act, St, N, kChunk, kReplay>,
                           dim3((p.head_dim + kRows - 1) / kRows, p.num_heads, p.rows),
                           dim3(kMamba2Threads), p, stream);
}

template <typename Act, typename St, int N>
cudaError_t launch_mamba2_n(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  if (p.pending != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
    return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true>(p, stream);
  }
  return launch_mamba2_shape<Act, St, N, 8, false>(p, stream);
}

template <typename Act, typename St>
cudaError_t launch_mamba2_recurrence_typed(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  bool skip = false;
  const cudaError_t bad = check_recurrence_launch(p, kMamba2Chunk, &skip);
  if (bad != cudaSuccess || skip) return bad;
  switch (p.d_state) {
    case 16:
      return launch_mamba2_n<Act, St, 16>(p, stream);
    case 32:
      return launch_mamba2_n<Act, St, 32>(p, stream);
    case 64:
      return launch_mamba2_n<Act, St, 64>(p, stream);
    case 128:
      return launch_mamba2_n<Act, St, 128>(p, stream);
    case 256:
      return launch_mamba2_n<Act, St, 256>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace specstate::kernels
