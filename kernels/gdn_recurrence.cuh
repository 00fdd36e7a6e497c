// Kernel of launch_gdn_recurrence (see gdn_recurrence.h). DESIGN.md section 3, GDN step:
//   q~ = q / sqrt(sum q^2 + 1e-6) * scale;  k^ = k / sqrt(sum k^2 + 1e-6)
//   g = -exp(A_log) softplus(a + dt_bias);  beta = sigmoid(b)
//   S = e^g S;  u = beta (v - S k^);  S += u k^T;  o = S q~
// computed as  sk = S k^, sq = S q~ (old S), u = beta (v - e^g sk), S = e^g S + u k^T,
// o = e^g sq + u (k^ . q~): one pass over S per token.
//
// Work split: a CTA owns 4 * 32/LANES rows of V for one (row, value head) and all K columns. A
// warp holds 32/LANES V rows; the LANES lanes of a V row hold K/LANES columns each as float4 at
// k = i*4*LANES + lane%LANES*4, so every 16-byte store of a warp covers whole 128-byte lines.
// LANES = 8: 16 state floats per thread, 8 CTAs per SM. The state stays in registers across the
// window; each token's state is stored once (snapshot) with vector stores. Rows of S are
// independent in the delta rule given k^, q~, so splitting V over CTAs needs no communication.
#pragma once

#include "common.cuh"
#include "gdn_recurrence.h"

namespace specstate::kernels {

inline constexpr int kGdnThreads = 128;
inline constexpr int kGdnChunk = 8;  // tokens staged in shared memory at a time

template <int LANES>
__host__ __device__ constexpr int gdn_rows_per_cta() {
  return kGdnThreads / LANES;
}

// K: head_k_dim; LANES: lanes per V row. Snapshots are stored with an evict-first hint (written
// once, read back at most once by commit); 8 CTAs per SM for LANES = 8 (measured: +10% BW).
// Measured and dropped (H200, B=128): an L2 prefetch of the state one wave of CTAs ahead (-4%),
// and the state in shared memory via cp.async at 10 CTAs/SM instead of registers (-5 to -9%).
// kItems: rows of the batch one CTA handles in turn (same V slice and head): the next row's
// committed state lands in shared memory (cp.async) while the current row is computed, so only
// the first read of a CTA has its latency exposed.
template <typename Act, typename St, int K, int LANES, int kItems>
__global__ void __launch_bounds__(kGdnThreads, LANES == 8 ? 8 : 1)
    gdn_recurrence_kernel(const __grid_constant__ GdnRecurrenceParams p) {
  static_assert(kItems == 1 || kItems == 2, "one or two rows per CTA");
  constexpr int NK = K / (4 * LANES);  // float4 per thread
  constexpr int kRowsPerWarp = 32 / LANES;
  static_assert(NK >= 1 && K % (4 * LANES) == 0, "K must be a multiple of 4 * LANES");
  __shared__ __align__(16) float q_s[kGdnChunk][K];
  __shared__ __align__(16) float k_s[kGdnChunk][K];
  __shared__ float eg_s[kGdnChunk];
  __shared__ float beta_s[kGdnChunk];
  __shared__ float kq_s[kGdnChunk];
  constexpr int kRows = gdn_rows_per_cta<LANES>();
  __shared__ float v_s[kGdnChunk][kRows];
  __shared__ __align__(16) St next_state[kItems > 1 ? kRows * K : 4];

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int kl = lane % LANES;
  const int V = p.head_v_dim;
  const int v = blockIdx.x * gdn_rows_per_cta<LANES>() + warp * kRowsPerWarp + lane / LANES;
  const bool v_ok = v < V;
  const int hv = blockIdx.y;
  const int h = hv / (p.num_v_heads / p.num_k_heads);
  const int64_t head_off = (int64_t{hv} * V + (v_ok ? v : 0)) * K;
  // Rows of this launch handled by this CTA: blockIdx.z and blockIdx.z + gridDim.z.
  const int r0 = blockIdx.z, r1 = blockIdx.z + gridDim.z;
  const int slot0 = p.slots ? p.slots[p.row_begin + r0] : p.slot_inline[r0];
  const int slot1 =
      kItems > 1 && r1 < p.rows ? (p.slots ? p.slots[p.row_begin + r1] : p.slot_inline[r1]) : -1;
  St* next_mine = next_state + (kItems > 1 ? (warp * kRowsPerWarp + lane / LANES) * K : 0);

  float4 S[NK];
  if (slot0 >= 0) {
    const St* committed0 = static_cast<const St*>(p.state) + slot0 * p.state_stride_slot + head_off;
#pragma unroll
    for (int i = 0; i < NK; ++i) {
      S[i] =
          v_ok ? load4<St>(committed0 + i * 4 * LANES + kl * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  if constexpr (kItems > 1) {
    if (slot1 >= 0 && v_ok) {
      const St* committed1 =
          static_cast<const St*>(p.state) + slot1 * p.state_stride_slot + head_off;
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(next_mine));
#pragma unroll
      for (int i = 0; i < NK; ++i) {
        const St* src = committed1 + i * 4 * LANES + kl * 4;
        const unsigned d = dst + (i * 4 * LANES + kl * 4) * sizeof(St);
        if constexpr (sizeof(St) == 4) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
        } else {
          asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
        }
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }

  // Everything above reads only what the preceding conv kernel does not write (slots, the
  // committed state). With programmatic dependent launch it overlaps that kernel; the conv
  // output (qkv) is read only after this wait for the preceding grid to complete.
  asm volatile("griddepcontrol.wait;" ::: "memory");

  const Act* qkv = static_cast<const Act*>(p.qkv);
  const float A = -expf(load_any(p.A_log, p.a_log_dtype, hv * p.a_log_stride));
  const float dt_bias = load_any(p.dt_bias, p.dt_bias_dtype, hv * p.dt_bias_stride);
  Act* out = static_cast<Act*>(p.out);
  const int64_t q_off = int64_t{h} * K * p.qkv_stride_c;
  const int64_t k_off = (int64_t{p.num_k_heads} + h) * K * p.qkv_stride_c;

#pragma unroll 1
  for (int item = 0; item < kItems; ++item) {
    const int slot = item == 0 ? slot0 : slot1;
    if (slot < 0) continue;  // padding row or none (uniform over the CTA)
    const int row = p.row_begin + (item == 0 ? r0 : r1);
    St* committed = static_cast<St*>(p.state) + slot * p.state_stride_slot + head_off;
    St* snap_row = static_cast<St*>(p.snap) + row * p.snap_stride_row + head_off;
    if constexpr (kItems > 1) {
      if (item > 0) {
        asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's own elements
#pragma unroll
        for (int i = 0; i < NK; ++i) {
          S[i] = v_ok ? load4<St>(next_mine + i * 4 * LANES + kl * 4)
                      : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
    }
    const int64_t row_token0 = int64_t{row} * p.tokens;
    for (int c0 = 0; c0 < p.tokens; c0 += kGdnChunk) {
      const int n = min(kGdnChunk, p.tokens - c0);
      // v of this CTA's rows for the chunk, staged in shared memory (registers are the limit).
      for (int i = tid; i < n * kRows; i += kGdnThreads) {
        const int tt = i / kRows, vr = blockIdx.x * kRows + i % kRows;
        v_s[tt][i % kRows] =
            vr < V
                ? to_float<Act>(
                      qkv[(row_token0 + c0 + tt) * p.qkv_stride_token +
                          (2 * int64_t{p.num_k_heads} * K + int64_t{hv} * V + vr) * p.qkv_stride_c])
                : 0.0f;
      }
      // Prologue: warp w normalises q and k of tokens w, w+4, ...; lane 0 computes the gates.
      for (int tt = warp; tt < n; tt += kGdnThreads / 32) {
        const int64_t tok = row_token0 + c0 + tt;
        const Act* base = qkv + tok * p.qkv_stride_token;
        constexpr int KQ = K / 32;  // q/k elements per lane in the prologue
        float qv[KQ], kv[KQ];
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int i = 0; i < KQ; ++i) {
          qv[i] = to_float<Act>(base[q_off + (i * 32 + lane) * p.qkv_stride_c]);
          kv[i] = to_float<Act>(base[k_off + (i * 32 + lane) * p.qkv_stride_c]);
          sq += qv[i] * qv[i];
          sk += kv[i] * kv[i];
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) {
          sq += __shfl_xor_sync(0xffffffffu, sq, m);
          sk += __shfl_xor_sync(0xffffffffu, sk, m);
        }
        const float qf = p.scale / sqrtf(sq + 1e-6f);
        const float kf = 1.0f / sqrtf(sk + 1e-6f);
        float kq = 0.f;
#pragma unroll
        for (int i = 0; i < KQ; ++i) {
          const float qn = qv[i] * qf, kn = kv[i] * kf;
          q_s[tt][i * 32 + lane] = qn;
          k_s[tt][i * 32 + lane] = kn;
          kq += qn * kn;
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) kq += __shfl_xor_sync(0xffffffffu, kq, m);
        if (lane == 0) {
          const float a = to_float<Act>(
              static_cast<const Act*>(p.a)[tok * p.a_stride_token + hv * p.a_stride_h]);
          const float b = to_float<Act>(
              static_cast<const Act*>(p.b)[tok * p.b_stride_token + hv * p.b_stride_h]);
          eg_s[tt] = expf(A * softplus(a + dt_bias));
          beta_s[tt] = sigmoid(b);
          kq_s[tt] = kq;
        }
      }
      __syncthreads();

#pragma unroll
      for (int tt = 0; tt < kGdnChunk; ++tt) {
        if (tt < n) {
          const int t = c0 + tt;
          if (p.parents != nullptr && t > 0) {
            // Tree: start from the parent's saved state unless it is the previous token (whose
            // state is in registers). The parent's snapshot was written by this thread.
            const int parent = p.parents[row_token0 + t];
            if (parent != t - 1) {
              const St* src = snap_row + parent * p.snap_stride_t;
#pragma unroll
              for (int i = 0; i < NK; ++i) {
                S[i] = v_ok ? load4<St>(src + i * 4 * LANES + kl * 4)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
              }
            }
          }
          float4 kn[NK], qn[NK];
          float sk = 0.f, sq = 0.f;
#pragma unroll
          for (int i = 0; i < NK; ++i) {
            kn[i] = *reinterpret_cast<const float4*>(&k_s[tt][i * 4 * LANES + kl * 4]);
            qn[i] = *reinterpret_cast<const float4*>(&q_s[tt][i * 4 * LANES + kl * 4]);
            sk += S[i].x * kn[i].x + S[i].y * kn[i].y + S[i].z * kn[i].z + S[i].w * kn[i].w;
            sq += S[i].x * qn[i].x + S[i].y * qn[i].y + S[i].z * qn[i].z + S[i].w * qn[i].w;
          }
#pragma unroll
          for (int m = LANES / 2; m > 0; m >>= 1) {
            sk += __shfl_xor_sync(0xffffffffu, sk, m);
            sq += __shfl_xor_sync(0xffffffffu, sq, m);
          }
          const float eg = eg_s[tt];
          const float u = beta_s[tt] * (v_s[tt][warp * kRowsPerWarp + lane / LANES] - eg * sk);
          const float o = eg * sq + u * kq_s[tt];
#pragma unroll
          for (int i = 0; i < NK; ++i) {
            S[i].x = round_to<St>(fmaf(u, kn[i].x, eg * S[i].x));
            S[i].y = round_to<St>(fmaf(u, kn[i].y, eg * S[i].y));
            S[i].z = round_to<St>(fmaf(u, kn[i].z, eg * S[i].z));
            S[i].w = round_to<St>(fmaf(u, kn[i].w, eg * S[i].w));
          }
          if (!p.advance && v_ok) {
            St* dst = snap_row + t * p.snap_stride_t;
#pragma unroll
            for (int i = 0; i < NK; ++i) {
              store4_stream<St>(dst + i * 4 * LANES + kl * 4, S[i]);
            }
          }
          if (kl == 0 && v_ok) {
            out[(row_token0 + t) * p.out_stride_token + hv * p.out_stride_h + v * p.out_stride_v] =
                from_float<Act>(o);
          }
        }
      }
      __syncthreads();  // the next chunk's prologue overwrites the shared arrays
    }
    if (p.advance && v_ok) {
#pragma unroll
      for (int i = 0; i < NK; ++i) store4<St>(committed + i * 4 * LANES + kl * 4, S[i]);
    }
  }
}

template <typename Act, typename St, int K, int LANES, int kItems>
cudaError_t launch_gdn_shape(const GdnRecurrenceParams& p, cudaStream_t stream) {
  constexpr int rows_per_cta = gdn_rows_per_cta<LANES>();
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((p.head_v_dim + rows_per_cta - 1) / rows_per_cta, p.num_v_heads,
                        (p.rows + kItems - 1) / kItems);
  config.blockDim = dim3(kGdnThreads);
  config.stream = stream;
  // Programmatic dependent launch: the kernel may start while the conv kernel before it runs
  // (captured as a programmatic edge in CUDA graphs); it waits (griddepcontrol.wait) before
  // reading the conv output.
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  const cudaError_t err =
      cudaLaunchKernelEx(&config, gdn_recurrence_kernel<Act, St, K, LANES, kItems>, p);
  return err != cudaSuccess ? err : cudaGetLastError();
}

template <typename Act, typename St, int K>
cudaError_t launch_gdn_k(const GdnRecurrenceParams& p, cudaStream_t stream) {
  // Two rows per CTA from 16 rows on when the window is short (the state read is then a large
  // share of the traffic and its latency is exposed once per CTA). Measured on H200, Qwen3-Next,
  // B=128: T=2 74% -> 80% of copy BW; T=4/8 87% -> 85-86% (hence one row per CTA there).
  const bool two = p.rows >= 16 && p.tokens <= 3;
  return two ? launch_gdn_shape<Act, St, K, 8, 2>(p, stream)
             : launch_gdn_shape<Act, St, K, 8, 1>(p, stream);
}

template <typename Act, typename St>
cudaError_t launch_gdn_recurrence_typed(const GdnRecurrenceParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.tokens <= 0) return cudaSuccess;
  // LANES = 8 everywhere: the 32-lane split (4x the CTAs at B = 1) was measured slower (every
  // CTA repeats the q/k prologue): B=1,T=4 10.1 us vs 7.3 us per layer.
  switch (p.head_k_dim) {
    case 32:
      return launch_gdn_k<Act, St, 32>(p, stream);
    case 64:
      return launch_gdn_k<Act, St, 64>(p, stream);
    case 128:
      return launch_gdn_k<Act, St, 128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace specstate::kernels
