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

template <int LANES>
__host__ __device__ constexpr int gdn_rows_per_cta() {
  return kGdnThreads / LANES;
}

// Shared-memory staging of a chunk of tokens: normalised q~ and k^, the gates, k^.q~ and this
// CTA's v rows.
template <int K, int kRows, int kChunk>
struct GdnChunk {
  __align__(16) float q[kChunk][K];
  __align__(16) float k[kChunk][K];
  float eg[kChunk];
  float beta[kChunk];
  float kq[kChunk];
  float v[kChunk][kRows];
};

// Where a chunk's token inputs come from: the window (the conv output and the caller's gates) or
// the replayed steps (the conv kernel's replay buffers). Token i of the source at tok0 + i.
template <typename Act>
struct GdnSource {
  const Act* qkv;
  int64_t qkv_stride_token, qkv_stride_c;
  const Act* a;
  int64_t a_stride_token, a_stride_h;
  const Act* b;
  int64_t b_stride_token, b_stride_h;
  int64_t tok0;
};

// KQ consecutive elements (16-byte aligned run start) as one vector load where it fits.
template <typename Act, int KQ>
__device__ __forceinline__ void load_lane_elems(const Act* p, float (&out)[KQ]) {
  if constexpr (KQ == 4) {
    const float4 v = load4<Act>(p);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
  } else {
#pragma unroll
    for (int i = 0; i < KQ; ++i) out[i] = to_float<Act>(p[i]);
  }
}

// Stages virtual tokens [c0, c0 + n) for value head hv (key head h): virtual token i is token i
// of `first` for i < n_first (the replayed steps), token i - n_first of `second` otherwise (the
// window). Every thread of the CTA calls it; it ends with __syncthreads().
template <typename Act, int K, int kRows, int kChunk, bool kTwoSources>
__device__ __forceinline__ void gdn_stage(GdnChunk<K, kRows, kChunk>& c,
                                          const GdnSource<Act>& first, int n_first,
                                          const GdnSource<Act>& second,
                                          const GdnRecurrenceParams& p, int h, int hv, int c0,
                                          int n, float A, float dt_bias) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int V = p.head_v_dim;
  // v of this CTA's rows for the chunk, staged in shared memory (registers are the limit).
  for (int i = tid; i < n * kRows; i += kGdnThreads) {
    const int tt = i / kRows, vr = blockIdx.x * kRows + i % kRows;
    const int vt = c0 + tt;
    const bool f = kTwoSources && vt < n_first;
    const Act* qkv = f ? first.qkv : second.qkv;
    const int64_t st = f ? first.qkv_stride_token : second.qkv_stride_token;
    const int64_t sc = f ? first.qkv_stride_c : second.qkv_stride_c;
    const int64_t tok = f ? first.tok0 + vt : second.tok0 + vt - n_first;
    c.v[tt][i % kRows] =
        vr < V ? to_float<Act>(
                     qkv[tok * st + (2 * int64_t{p.num_k_heads} * K + int64_t{hv} * V + vr) * sc])
               : 0.0f;
  }
  // Warp w normalises q and k of tokens w, w+4, ...; lane 0 computes the gates.
  for (int tt = warp; tt < n; tt += kGdnThreads / 32) {
    const int vt = c0 + tt;
    const bool f = kTwoSources && vt < n_first;
    const int64_t tok = f ? first.tok0 + vt : second.tok0 + vt - n_first;
    const int64_t sc = f ? first.qkv_stride_c : second.qkv_stride_c;
    const int64_t q_off = int64_t{h} * K * sc;
    const int64_t k_off = (int64_t{p.num_k_heads} + h) * K * sc;
    const Act* base =
        (f ? first.qkv : second.qkv) + tok * (f ? first.qkv_stride_token : second.qkv_stride_token);
    constexpr int KQ = K / 32;  // q/k elements per lane in the prologue
    float qv[KQ], kv[KQ];
    // Contiguous channels (the usual case): lane l holds elements [l*KQ, l*KQ + KQ) and loads
    // them as one vector; otherwise element i*32 + l, strided.
    const bool vec = sc == 1 && aligned16(base + q_off) && aligned16(base + k_off);
    if (vec) {
      if (!f) load_lane_elems<Act, KQ>(base + q_off + lane * KQ, qv);
      load_lane_elems<Act, KQ>(base + k_off + lane * KQ, kv);
    } else {
#pragma unroll
      for (int i = 0; i < KQ; ++i) {
        if (!f) qv[i] = to_float<Act>(base[q_off + (i * 32 + lane) * sc]);
        kv[i] = to_float<Act>(base[k_off + (i * 32 + lane) * sc]);
      }
    }
    float sq = 0.f, sk = 0.f;
#pragma unroll
    for (int i = 0; i < KQ; ++i) {
      // A replayed step produces no output: its q is not needed (nor read).
      if (f) qv[i] = 0.0f;
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
      const int e = vec ? lane * KQ + i : i * 32 + lane;
      c.q[tt][e] = qn;
      c.k[tt][e] = kn;
      kq += qn * kn;
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) kq += __shfl_xor_sync(0xffffffffu, kq, m);
    if (lane == 0) {
      const float a =
          f ? to_float<Act>(first.a[tok * first.a_stride_token + hv * first.a_stride_h])
            : to_float<Act>(second.a[tok * second.a_stride_token + hv * second.a_stride_h]);
      const float b =
          f ? to_float<Act>(first.b[tok * first.b_stride_token + hv * first.b_stride_h])
            : to_float<Act>(second.b[tok * second.b_stride_token + hv * second.b_stride_h]);
      c.eg[tt] = expf(A * softplus(a + dt_bias));
      c.beta[tt] = sigmoid(b);
      c.kq[tt] = kq;
    }
  }
  __syncthreads();
}

// One token step on this thread's slice of S (staged token tt); returns o for this V row.
// kOutput = false (a replayed step): S q~ and the output are not computed; the state update is
// the same arithmetic, so the states stay bit-identical.
template <typename St, int K, int LANES, int kRows, int kChunk, bool kOutput = true>
__device__ __forceinline__ float gdn_step(float4 (&S)[K / (4 * LANES)],
                                          const GdnChunk<K, kRows, kChunk>& c, int tt, int kl,
                                          int vrow) {
  constexpr int NK = K / (4 * LANES);
  float4 kn[NK];
  float sk = 0.f, sq = 0.f;
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    kn[i] = *reinterpret_cast<const float4*>(&c.k[tt][i * 4 * LANES + kl * 4]);
    sk += S[i].x * kn[i].x + S[i].y * kn[i].y + S[i].z * kn[i].z + S[i].w * kn[i].w;
    if constexpr (kOutput) {
      const float4 qn = *reinterpret_cast<const float4*>(&c.q[tt][i * 4 * LANES + kl * 4]);
      sq += S[i].x * qn.x + S[i].y * qn.y + S[i].z * qn.z + S[i].w * qn.w;
    }
  }
#pragma unroll
  for (int m = LANES / 2; m > 0; m >>= 1) {
    sk += __shfl_xor_sync(0xffffffffu, sk, m);
    if constexpr (kOutput) sq += __shfl_xor_sync(0xffffffffu, sq, m);
  }
  const float eg = c.eg[tt];
  const float u = c.beta[tt] * (c.v[tt][vrow] - eg * sk);
  const float o = eg * sq + u * c.kq[tt];
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    S[i].x = round_to<St>(fmaf(u, kn[i].x, eg * S[i].x));
    S[i].y = round_to<St>(fmaf(u, kn[i].y, eg * S[i].y));
    S[i].z = round_to<St>(fmaf(u, kn[i].z, eg * S[i].z));
    S[i].w = round_to<St>(fmaf(u, kn[i].w, eg * S[i].w));
  }
  return o;
}

template <typename St, int NK, int LANES>
__device__ __forceinline__ void gdn_store_state(St* dst, const float4 (&S)[NK], int kl,
                                                bool stream) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    if (stream) {
      store4_stream<St>(dst + i * 4 * LANES + kl * 4, S[i]);
    } else {
      store4<St>(dst + i * 4 * LANES + kl * 4, S[i]);
    }
  }
}

// K: head_k_dim; LANES: lanes per V row. Snapshots are stored with an evict-first hint (written
// once, read back at most once by commit); 8 CTAs per SM for LANES = 8 (measured: +10% BW).
// Measured and dropped (H200, B=128): an L2 prefetch of the state one wave of CTAs ahead (-4%),
// and the state in shared memory via cp.async at 10 CTAs/SM instead of registers (-5 to -9%).
// kItems: rows of the batch one CTA handles in turn (same V slice and head): the next row's
// committed state lands in shared memory (cp.async) while the current row is computed, so only
// the first read of a CTA has its latency exposed.
// kChunk: tokens staged at a time; the replay instantiation stages 16 so that a round's replayed
// steps and its window usually fit one chunk (one prologue, one barrier pair per row).
// kReplay: the instantiation that may run a replay phase or recompute tree states (the snapshot
// and advance instantiation carries none of that code).
template <typename Act, typename St, int K, int LANES, int kItems, int kChunk, bool kReplay>
__global__ void __launch_bounds__(kGdnThreads, LANES == 8 ? 8 : 1)
    gdn_recurrence_kernel(const __grid_constant__ GdnRecurrenceParams p) {
  static_assert(kItems == 1 || kItems == 2, "one or two rows per CTA");
  constexpr int NK = K / (4 * LANES);  // float4 per thread
  constexpr int kRowsPerWarp = 32 / LANES;
  static_assert(NK >= 1 && K % (4 * LANES) == 0, "K must be a multiple of 4 * LANES");
  constexpr int kRows = gdn_rows_per_cta<LANES>();
  __shared__ GdnChunk<K, kRows, kChunk> chunk;
  __shared__ __align__(16) St next_state[kItems > 1 ? kRows * K : 4];

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int kl = lane % LANES;
  const int V = p.head_v_dim;
  const int vrow = warp * kRowsPerWarp + lane / LANES;  // this thread's V row within the CTA
  const int v = blockIdx.x * kRows + vrow;
  const bool v_ok = v < V;
  const int hv = blockIdx.y;
  const int h = hv / (p.num_v_heads / p.num_k_heads);
  const int64_t head_off = (int64_t{hv} * V + (v_ok ? v : 0)) * K;
  // Rows of this launch handled by this CTA: blockIdx.z and blockIdx.z + gridDim.z.
  const int r0 = blockIdx.z, r1 = blockIdx.z + gridDim.z;
  const int slot0 = p.slots ? p.slots[p.row_begin + r0] : p.slot_inline[r0];
  const int slot1 =
      kItems > 1 && r1 < p.rows ? (p.slots ? p.slots[p.row_begin + r1] : p.slot_inline[r1]) : -1;
  St* next_mine = next_state + (kItems > 1 ? vrow * K : 0);
  // The pending counts do not depend on the preceding conv kernel: read them before the wait.
  const int pend0 = kReplay && p.pending != nullptr && slot0 >= 0 ? p.pending[slot0] : 0;
  const int pend1 = kReplay && p.pending != nullptr && slot1 >= 0 ? p.pending[slot1] : 0;

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
  // outputs (qkv, the replay buffers) are read only after this wait for the preceding grid.
  grid_dependency_wait();

  const float A = -expf(load_any(p.A_log, p.a_log_dtype, hv * p.a_log_stride));
  const float dt_bias = load_any(p.dt_bias, p.dt_bias_dtype, hv * p.dt_bias_stride);
  Act* out = static_cast<Act*>(p.out);
  // A tree without snapshots recomputes a branch's start state from the row's start state.
  const bool recompute = kReplay && p.parents != nullptr && p.snap == nullptr;

#pragma unroll 1
  for (int item = 0; item < kItems; ++item) {
    const int slot = item == 0 ? slot0 : slot1;
    if (slot < 0) continue;  // padding row or none (uniform over the CTA)
    const int row = p.row_begin + (item == 0 ? r0 : r1);
    St* committed = static_cast<St*>(p.state) + slot * p.state_stride_slot + head_off;
    St* snap_row = p.snap ? static_cast<St*>(p.snap) + row * p.snap_stride_row + head_off : nullptr;
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

    // Virtual tokens: the slot's pending steps (replay, DESIGN.md section 6: re-run from the
    // committed state with the same step as the window, no outputs), then the window.
    const int n_rep = item == 0 ? pend0 : pend1;
    const Act* rq = static_cast<const Act*>(p.replay_qkv) + row * p.replay_qkv_stride_row;
    const Act* rg = static_cast<const Act*>(p.replay_gates) + row * p.replay_gates_stride_row;
    const GdnSource<Act> rep{rq,
                             p.replay_qkv_stride_t,
                             1,
                             rg,
                             p.replay_gates_stride_t,
                             1,
                             rg + p.num_v_heads,
                             p.replay_gates_stride_t,
                             1,
                             0};
    const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
    const int64_t row_token0 = rt.begin;                  // inputs and outputs
    const int64_t row_parent0 = int64_t{row} * p.tokens;  // parents: [rows, tokens]
    const GdnSource<Act> win{static_cast<const Act*>(p.qkv),
                             p.qkv_stride_token,
                             p.qkv_stride_c,
                             static_cast<const Act*>(p.a),
                             p.a_stride_token,
                             p.a_stride_h,
                             static_cast<const Act*>(p.b),
                             p.b_stride_token,
                             p.b_stride_h,
                             row_token0};
    const int total = n_rep + rt.count;  // (the window has tokens iff total > n_rep)
    // A tree without snapshots needs its whole window staged in one chunk.
    const bool split = recompute && total > kChunk;
    for (int c0 = 0; c0 < total;) {
      int m = min(kChunk, total - c0);
      if (split && c0 < n_rep) m = min(m, n_rep - c0);
      gdn_stage<Act, K, kRows, kChunk, kReplay>(chunk, rep, n_rep, win, p, h, hv, c0, m, A,
                                                dt_bias);
      for (int tt = 0; tt < m; ++tt) {
        const int vt = c0 + tt;
        if (vt < n_rep) {
          gdn_step<St, K, LANES, kRows, kChunk, false>(S, chunk, tt, kl, vrow);
          if (vt == n_rep - 1 && v_ok && (p.store_replayed || (p.store_final && total == n_rep))) {
            gdn_store_state<St, NK, LANES>(committed, S, kl, false);
          }
          continue;
        }
        const int t = vt - n_rep;
        if (p.parents != nullptr && t > 0) {
          const int parent = p.parents[row_parent0 + t];
          if (parent != t - 1) {
            if (!recompute) {
              // The parent's snapshot was written by this thread.
              const St* from = snap_row + parent * p.snap_stride_t;
#pragma unroll
              for (int i = 0; i < NK; ++i) {
                S[i] = v_ok ? load4<St>(from + i * 4 * LANES + kl * 4)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
              }
            } else {
              // The parent's state: the row's start state (the committed memory, which holds it
              // exactly: written above by this thread after a replay, or untouched) advanced
              // along root..parent, all staged in this chunk.
              // The path's indices increase from the root (parents[t] < t): a bit mask of them,
              // walked from the lowest bit, is the path in order (windows <= 32 tokens here).
              uint32_t path = 0;
              for (int a = parent; a >= 0; a = p.parents[row_parent0 + a]) path |= 1u << a;
#pragma unroll
              for (int i = 0; i < NK; ++i) {
                S[i] = v_ok ? load4<St>(committed + i * 4 * LANES + kl * 4)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
              }
              while (path != 0) {
                const int a = __ffs(path) - 1;
                path &= path - 1;
                gdn_step<St, K, LANES, kRows, kChunk, false>(S, chunk, n_rep + a - c0, kl, vrow);
              }
            }
          }
        }
        const float o = gdn_step<St, K, LANES, kRows, kChunk>(S, chunk, tt, kl, vrow);
        if (snap_row != nullptr && v_ok) {
          gdn_store_state<St, NK, LANES>(snap_row + t * p.snap_stride_t, S, kl, true);
        }
        if (kl == 0 && v_ok) {
          out[(row_token0 + t) * p.out_stride_token + hv * p.out_stride_h + v * p.out_stride_v] =
              from_float<Act>(o);
        }
      }
      __syncthreads();  // the next chunk's prologue overwrites the shared arrays
      c0 += m;
    }
    if (p.store_final && total > n_rep && v_ok) {
      gdn_store_state<St, NK, LANES>(committed, S, kl, false);
    }
  }
}

template <typename Act, typename St, int K, int LANES, int kItems, int kChunk, bool kReplay>
cudaError_t launch_gdn_shape(const GdnRecurrenceParams& p, cudaStream_t stream) {
  constexpr int rows_per_cta = gdn_rows_per_cta<LANES>();
  return launch_after_conv(gdn_recurrence_kernel<Act, St, K, LANES, kItems, kChunk, kReplay>,
                           dim3((p.head_v_dim + rows_per_cta - 1) / rows_per_cta, p.num_v_heads,
                                (p.rows + kItems - 1) / kItems),
                           dim3(kGdnThreads), p, stream);
}

template <typename Act, typename St, int K>
cudaError_t launch_gdn_k(const GdnRecurrenceParams& p, cudaStream_t stream) {
  // Two rows per CTA from 16 rows on when the window is short (the state read is then a large
  // share of the traffic and its latency is exposed once per CTA). Measured on H200, Qwen3-Next,
  // B=128: T=2 74% -> 80% of copy BW; T=4/8 87% -> 85-86% (hence one row per CTA there).
  if (p.pending != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
    // One row per CTA: the replay kernel is issue-bound at large batches (measured on H200,
    // Qwen3-Next, T=4, B=128: 74% SM throughput, 29% DRAM), and two rows per CTA were slower
    // (315 vs 295 us per layer).
    const bool two = false;
    return two ? launch_gdn_shape<Act, St, K, 8, 2, 16, true>(p, stream)
               : launch_gdn_shape<Act, St, K, 8, 1, 16, true>(p, stream);
  }
  const bool two = p.rows >= 16 && p.tokens <= 3;
  return two ? launch_gdn_shape<Act, St, K, 8, 2, 8, false>(p, stream)
             : launch_gdn_shape<Act, St, K, 8, 1, 8, false>(p, stream);
}

template <typename Act, typename St>
cudaError_t launch_gdn_recurrence_typed(const GdnRecurrenceParams& p, cudaStream_t stream) {
  bool skip = false;
  const cudaError_t bad = check_recurrence_launch(p, kGdnChunk, &skip);
  if (bad != cudaSuccess || skip) return bad;
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
