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
//
// Every warp is independent: no shared memory and no barrier on the token path. The LANES lanes
// of a V row hold all K columns of the row between them, so each row group loads its columns of
// q and k itself and normalises them with a LANES-lane butterfly (every row group of every CTA
// computes the same sums in the same order: the result does not depend on the CTA, the strategy
// or the batch). The gates are computed one token per lane and broadcast with a shuffle.
#pragma once

#include "common.cuh"
#include "gdn_recurrence.h"

namespace specstate::kernels {

inline constexpr int kGdnThreads = 128;
#ifndef SPECSTATE_GDN_REPLAY_CTAS
#define SPECSTATE_GDN_REPLAY_CTAS 6
#endif
// CTAs per SM the replay instantiation is compiled for (registers: 65536 / (128 x this)).
inline constexpr int kGdnReplayCtasPerSm = SPECSTATE_GDN_REPLAY_CTAS;

template <int LANES>
__host__ __device__ constexpr int gdn_rows_per_cta() {
  return kGdnThreads / LANES;
}

// A row's window inputs for one CTA, resolved once per row: token t's q and k of key head h at
// q + t * st, k + t * st (channel stride sc), value row v at v + t * st + v * sc, the gates of
// value head hv at a + t * a_st, b + t * b_st. `vec`: q and k of every token are 16-byte aligned
// runs (sc == 1), loaded as vectors.
template <typename Act>
struct GdnRowInputs {
  const Act* q;
  const Act* k;
  const Act* v;
  const Act* a;
  const Act* b;
  int64_t st, sc, a_st, b_st;
  bool vec;
};

template <typename Act, int K>
__device__ __forceinline__ GdnRowInputs<Act> gdn_row_inputs(const GdnRecurrenceParams& p,
                                                            int64_t tok0, int h, int hv) {
  GdnRowInputs<Act> in;
  in.st = p.qkv_stride_token;
  in.sc = p.qkv_stride_c;
  const Act* row = static_cast<const Act*>(p.qkv) + tok0 * in.st;
  in.q = row + int64_t{h} * K * in.sc;
  in.k = row + (int64_t{p.num_k_heads} + h) * K * in.sc;
  in.v = row + (2 * int64_t{p.num_k_heads} * K + int64_t{hv} * p.head_v_dim) * in.sc;
  in.a_st = p.a_stride_token;
  in.b_st = p.b_stride_token;
  in.a = static_cast<const Act*>(p.a) + tok0 * in.a_st + hv * p.a_stride_h;
  in.b = static_cast<const Act*>(p.b) + tok0 * in.b_st + hv * p.b_stride_h;
  // A thread's float4 of columns starts at a multiple of 4 elements: one 4-element load when
  // every token's q and k start at a multiple of 4 elements too.
  const auto aligned4 = [](const Act* ptr) {
    return reinterpret_cast<uintptr_t>(ptr) % (4 * sizeof(Act)) == 0;
  };
  in.vec = in.sc == 1 && in.st % 4 == 0 && aligned4(in.q) && aligned4(in.k);
  return in;
}

// Where a row's factor records go (replay): the slot's ring, window token t at ring position
// (wpos + t) % R; `k_writer`: this CTA writes the key head's k and kf, `eg_writer` e^g.
struct GdnFactorSink {
  char* ring = nullptr;  // the slot's records, or null: none written
  int wpos = 0;
  bool k_writer = false;
  bool eg_writer = false;
  __device__ __forceinline__ char* record(const GdnRecurrenceParams& p, int t) const {
    int pos = wpos + t;  // wpos < R and the window fits the ring
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  }
};

// This thread's columns of a K-vector: float4 i at element i * 4 * LANES + kl * 4.
template <typename T, int NK, int LANES>
__device__ __forceinline__ void load_cols(const T* p, int64_t stride, bool vec, int kl,
                                          float4 (&out)[NK]) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    const int e = i * 4 * LANES + kl * 4;
    if (vec) {
      out[i] = load4<T>(p + e);
    } else {
      out[i] = make_float4(to_float<T>(p[e * stride]), to_float<T>(p[(e + 1) * stride]),
                           to_float<T>(p[(e + 2) * stride]), to_float<T>(p[(e + 3) * stride]));
    }
  }
}

// Sum over the LANES lanes of a V row (a butterfly: every lane ends with the same sum).
template <int LANES>
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int m = LANES / 2; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

template <int NK>
__device__ __forceinline__ float dot_cols(const float4 (&a)[NK], const float4 (&b)[NK]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NK; ++i)
    s += a[i].x * b[i].x + a[i].y * b[i].y + a[i].z * b[i].z + a[i].w * b[i].w;
  return s;
}

// Token t's query and key on this thread's columns as the act dtype holds them, and their norm
// factors: q~ = q * qf, k^ = k * kf (every lane of the warp calls it).
template <typename Act, int K, int LANES>
__device__ __forceinline__ void gdn_token_qk(const GdnRowInputs<Act>& in, int64_t t, int kl,
                                             float scale, float4 (&q)[K / (4 * LANES)],
                                             float4 (&k)[K / (4 * LANES)], float& qf, float& kf) {
  constexpr int NK = K / (4 * LANES);
  load_cols<Act, NK, LANES>(in.q + t * in.st, in.sc, in.vec, kl, q);
  load_cols<Act, NK, LANES>(in.k + t * in.st, in.sc, in.vec, kl, k);
  const float sq = row_sum<LANES>(dot_cols<NK>(q, q));
  const float sk = row_sum<LANES>(dot_cols<NK>(k, k));
  qf = scale / sqrtf(sq + 1e-6f);
  kf = 1.0f / sqrtf(sk + 1e-6f);
}

// The state update of one token, S = e^g S + u k^T = e^g S + (u kf) k, one fused multiply-add
// per element (rounded to the state dtype after the token, as decode stores it). The step and
// the history records' application both call it with uk = u * kf and the key as the act dtype
// holds it: the replay strategy is bit-exact by construction.
template <typename St, int NK>
__device__ __forceinline__ void gdn_update(float4 (&S)[NK], const float4 (&k)[NK], float uk,
                                           float eg) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    S[i].x = round_to<St>(fmaf(uk, k[i].x, eg * S[i].x));
    S[i].y = round_to<St>(fmaf(uk, k[i].y, eg * S[i].y));
    S[i].z = round_to<St>(fmaf(uk, k[i].z, eg * S[i].z));
    S[i].w = round_to<St>(fmaf(uk, k[i].w, eg * S[i].w));
  }
}

// Applies the history record at `rec` (k in the act dtype with its factor kf, u of this row,
// e^g) to this thread's slice of S.
template <typename Act, typename St, int K, int LANES>
__device__ __forceinline__ void gdn_apply_record(float4 (&S)[K / (4 * LANES)],
                                                 const GdnRecurrenceParams& p, const char* rec,
                                                 int h, int hv, int v, bool v_ok, int kl) {
  constexpr int NK = K / (4 * LANES);
  float4 k[NK];
  load_cols<Act, NK, LANES>(reinterpret_cast<const Act*>(rec + p.f_k) + int64_t{h} * K, 1, true, kl,
                            k);
  const float kf = reinterpret_cast<const float*>(rec + p.f_kf)[h];
  const float u =
      v_ok ? reinterpret_cast<const float*>(rec + p.f_u)[int64_t{hv} * p.head_v_dim + v] : 0.0f;
  gdn_update<St, NK>(S, k, u * kf, reinterpret_cast<const float*>(rec + p.f_eg)[hv]);
}

// One token step on this thread's slice of S given the token's q and k (act values) with their
// norm factors, this row's v and the gates; returns o for this V row and sets `u`. The factors
// multiply the reduced sums: S k^ = kf (S k), S q~ = qf (S q), k^ . q~ = kf qf (k . q).
// kOutput = false (a tree path recomputed): S q~ and the output are not computed; the state
// update is the same arithmetic.
template <typename St, int NK, int LANES, bool kOutput = true>
__device__ __forceinline__ float gdn_step(float4 (&S)[NK], const float4 (&q)[NK],
                                          const float4 (&k)[NK], float qf, float kf, float v,
                                          float eg, float beta, float& u) {
  float sk = 0.f, sq = 0.f, kq = 0.f;
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    sk += S[i].x * k[i].x + S[i].y * k[i].y + S[i].z * k[i].z + S[i].w * k[i].w;
    if constexpr (kOutput) {
      sq += S[i].x * q[i].x + S[i].y * q[i].y + S[i].z * q[i].z + S[i].w * q[i].w;
      kq += k[i].x * q[i].x + k[i].y * q[i].y + k[i].z * q[i].z + k[i].w * q[i].w;
    }
  }
#pragma unroll
  for (int m = LANES / 2; m > 0; m >>= 1) {
    sk += __shfl_xor_sync(0xffffffffu, sk, m);
    if constexpr (kOutput) {
      sq += __shfl_xor_sync(0xffffffffu, sq, m);
      kq += __shfl_xor_sync(0xffffffffu, kq, m);
    }
  }
  u = beta * (v - eg * (kf * sk));
  const float o = eg * (qf * sq) + u * (kf * qf * kq);
  gdn_update<St, NK>(S, k, u * kf, eg);
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

template <typename St, int NK, int LANES>
__device__ __forceinline__ void gdn_load_state(const St* src, float4 (&S)[NK], int kl, bool ok) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    S[i] = ok ? load4<St>(src + i * 4 * LANES + kl * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// K: head_k_dim; LANES: lanes per V row. Snapshots are stored with an evict-first hint (written
// once, read back at most once by commit); 8 CTAs per SM for LANES = 8 (measured: +10% BW).
// Measured and dropped (H200, B=128): an L2 prefetch of the state one wave of CTAs ahead (-4%),
// and the state in shared memory via cp.async at 10 CTAs/SM instead of registers (-5 to -9%).
// kItems: rows of the batch one CTA handles in turn (same V slice and head): the next row's
// committed state lands in shared memory (cp.async) while the current row is computed, so only
// the first read of a CTA has its latency exposed.
// kReplay: the instantiation that may apply history records (replay, DESIGN.md section 6) or
// recompute tree states (the snapshot and advance instantiation carries none of that code).
template <typename Act, typename St, int K, int LANES, int kItems, bool kReplay, bool kTree = false>
__global__ void __launch_bounds__(kGdnThreads, LANES != 8 ? 1
                                               : kReplay  ? kGdnReplayCtasPerSm
                                                          : 8)
    gdn_recurrence_kernel(const __grid_constant__ GdnRecurrenceParams p) {
  static_assert(kItems == 1 || kItems == 2, "one or two rows per CTA");
  static_assert(!kReplay || kItems == 1, "the replay instantiation handles one row per CTA");
  constexpr int NK = K / (4 * LANES);  // float4 per thread
  constexpr int kRowsPerWarp = 32 / LANES;
  static_assert(NK >= 1 && K % (4 * LANES) == 0, "K must be a multiple of 4 * LANES");
  constexpr int kRows = gdn_rows_per_cta<LANES>();
  __shared__ __align__(16) St next_state[kItems > 1 ? kRows * K : 4];
  // A tree without snapshots restarts branches from the row's start state (post history).
  __shared__ __align__(16) float start_state[kReplay && kTree ? kRows * K : 4];

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int kl = lane % LANES;
  const int V = p.head_v_dim;
  const int vrow = warp * kRowsPerWarp + lane / LANES;  // this thread's V row within the CTA
  const int v = blockIdx.x * kRows + vrow;
  const bool v_ok = v < V;
  const int hv = blockIdx.y;
  // hv / v_per_k exactly (small non-negative integers; the launcher sets the reciprocal).
  const int h = static_cast<int>((hv + 0.5f) * p.inv_v_per_k);
  const int64_t head_off = (int64_t{hv} * V + (v_ok ? v : 0)) * K;
  // Rows of this launch handled by this CTA: blockIdx.z and blockIdx.z + gridDim.z.
  const int r0 = blockIdx.z, r1 = blockIdx.z + gridDim.z;
  const int slot0 = p.slots ? p.slots[p.row_begin + r0] : p.slot_inline[r0];
  const int slot1 =
      kItems > 1 && r1 < p.rows ? (p.slots ? p.slots[p.row_begin + r1] : p.slot_inline[r1]) : -1;
  St* next_mine = next_state + (kItems > 1 ? vrow * K : 0);
  St* const state = static_cast<St*>(p.state);

  float4 S[NK];
  if (slot0 >= 0) {
    gdn_load_state<St, NK, LANES>(state + slot0 * p.state_stride_slot + head_off, S, kl, v_ok);
  }
  if constexpr (kItems > 1) {
    if (slot1 >= 0 && v_ok) {
      const St* committed1 = state + slot1 * p.state_stride_slot + head_off;
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

  // Replay history (DESIGN.md section 6): the cursor, the factor records and the committed
  // checkpoint are not written by the preceding conv kernel, so the history is applied (and a
  // fold stored) before the wait for that grid: at small batches it overlaps the conv.
  int wpos = 0;  // ring position of window token 0 (base + h)
  if constexpr (kReplay) {
    if (p.cursor != nullptr && slot0 >= 0) {
      const int base = p.cursor[2 * slot0];
      int hist = p.cursor[2 * slot0 + 1];
      wpos = base + hist;  // base < R and hist < R
      if (wpos >= p.ring) wpos -= p.ring;
      const bool folds = p.fold && hist > p.fold_limit;
      if (p.settled && folds) hist = 0;  // the first verify of the round stored it
      const char* ring = p.factors + slot0 * p.factor_stride_slot;
      const int count = row_tokens(p.varlen, p.row_begin + r0, p.tokens).count;
      const bool store = p.fold ? folds && !p.settled
                                : hist > 0 && (p.store_replayed || (p.store_final && count == 0));
      int pos = base;
#pragma unroll 1
      for (int i = 0; i < hist; ++i) {
        gdn_apply_record<Act, St, K, LANES>(S, p, ring + static_cast<int64_t>(pos) * p.factor_bytes,
                                            h, hv, v, v_ok, kl);
        if (++pos == p.ring) pos = 0;
      }
      if (store && v_ok) {
        gdn_store_state<St, NK, LANES>(state + slot0 * p.state_stride_slot + head_off, S, kl,
                                       false);
      }
    }
  }

  // Everything above reads only what the preceding conv kernel does not write (slots, the
  // committed state, the records). With programmatic dependent launch it overlaps that kernel;
  // the conv outputs are read only after this wait for the preceding grid.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (p.tokens == 0) return;  // materialize: history only

  const float A = p.A_log ? -expf(load_any(p.A_log, p.a_log_dtype, hv * p.a_log_stride)) : 0.0f;
  const float dt_bias =
      p.dt_bias ? load_any(p.dt_bias, p.dt_bias_dtype, hv * p.dt_bias_stride) : 0.0f;
  Act* out = static_cast<Act*>(p.out);
  // A tree without snapshots recomputes a branch's start state from the row's start state.
  const bool recompute = kReplay && kTree && p.parents != nullptr && p.snap == nullptr;
  float* start_mine = start_state + (kReplay && kTree ? vrow * K : 0);

#pragma unroll 1
  for (int item = 0; item < kItems; ++item) {
    const int slot = item == 0 ? slot0 : slot1;
    if (slot < 0) continue;  // padding row or none (uniform over the CTA)
    const int row = p.row_begin + (item == 0 ? r0 : r1);
    St* committed = state + slot * p.state_stride_slot + head_off;
    St* snap_row = p.snap ? static_cast<St*>(p.snap) + row * p.snap_stride_row + head_off : nullptr;
    if constexpr (kItems > 1) {
      if (item > 0) {
        asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's own elements
        gdn_load_state<St, NK, LANES>(next_mine, S, kl, v_ok);
      }
    }
    if (recompute) {
      // This thread's own elements: read back by this thread only.
#pragma unroll
      for (int i = 0; i < NK; ++i) {
        *reinterpret_cast<float4*>(start_mine + i * 4 * LANES + kl * 4) = S[i];
      }
    }
    const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
    const int64_t row_token0 = rt.begin;                  // inputs and outputs
    const int64_t row_parent0 = int64_t{row} * p.tokens;  // parents: [rows, tokens]
    GdnFactorSink sink;
    if (kReplay && p.write_factors && p.factors != nullptr) {
      sink.ring = p.factors + slot * p.factor_stride_slot;
      sink.wpos = wpos;
      sink.eg_writer = blockIdx.x == 0 && warp == 0;  // lane l: e^g of its token
      // The key head's k and kf: the first V row group of the CTA of V rows 0.. of the key
      // head's first value head (its lanes hold every column).
      sink.k_writer = blockIdx.x == 0 && hv == h * p.v_per_k && tid < LANES;
    }
    // This thread's output and u record of window token t: out_v[t * out_stride_token] and
    // u_rec[ring position * u_stride] (lane 0 of the V row writes both).
    const bool writer = kl == 0 && v_ok;
    float* u_rec = sink.ring != nullptr && writer
                       ? reinterpret_cast<float*>(sink.ring + p.f_u) + int64_t{hv} * V + v
                       : nullptr;
    const int u_stride = static_cast<int>(p.factor_bytes / 4);
    Act* out_v = out + row_token0 * p.out_stride_token + hv * p.out_stride_h + v * p.out_stride_v;
    const GdnRowInputs<Act> in = gdn_row_inputs<Act, K>(p, row_token0, h, hv);
    const Act* v_in = in.v + int64_t{v_ok ? v : 0} * in.sc;
    for (int c0 = 0; c0 < rt.count; c0 += 32) {
      // The gates of tokens c0 .. c0 + 31, token c0 + l on lane l.
      float eg_l = 1.0f, beta_l = 0.0f;
      if (c0 + lane < rt.count) {
        const int64_t t = c0 + lane;
        eg_l = expf(A * softplus(to_float<Act>(in.a[t * in.a_st]) + dt_bias));
        beta_l = sigmoid(to_float<Act>(in.b[t * in.b_st]));
        if (sink.eg_writer) reinterpret_cast<float*>(sink.record(p, c0 + lane) + p.f_eg)[hv] = eg_l;
      }
      const int m = min(32, rt.count - c0);
      for (int tt = 0; tt < m; ++tt) {
        const int t = c0 + tt;
        if (p.parents != nullptr && t > 0) {
          const int parent = p.parents[row_parent0 + t];
          if (parent != t - 1) {
            if (!recompute) {
              // The parent's snapshot was written by this thread.
              gdn_load_state<St, NK, LANES>(snap_row + parent * p.snap_stride_t, S, kl, v_ok);
            } else {
              // The parent's state: the row's start state advanced along root..parent. The
              // path's indices increase from the root (parents[t] < t): a bit mask of them,
              // walked from the lowest bit, is the path in order (windows <= 32 tokens here, so
              // the path's gates are on this block's lanes).
              uint32_t path = 0;
              for (int a = parent; a >= 0; a = p.parents[row_parent0 + a]) path |= 1u << a;
#pragma unroll
              for (int i = 0; i < NK; ++i) {
                S[i] = *reinterpret_cast<const float4*>(start_mine + i * 4 * LANES + kl * 4);
              }
              while (path != 0) {
                const int a = __ffs(path) - 1;
                path &= path - 1;
                float4 qa[NK], ka[NK];
                float qfa, kfa, u_unused;
                gdn_token_qk<Act, K, LANES>(in, a, kl, p.scale, qa, ka, qfa, kfa);
                const float va = v_ok ? to_float<Act>(v_in[a * in.st]) : 0.0f;
                gdn_step<St, NK, LANES, false>(S, qa, ka, qfa, kfa, va,
                                               __shfl_sync(0xffffffffu, eg_l, a),
                                               __shfl_sync(0xffffffffu, beta_l, a), u_unused);
              }
            }
          }
        }
        float4 qn[NK], kn[NK];
        float qf, kf;
        gdn_token_qk<Act, K, LANES>(in, t, kl, p.scale, qn, kn, qf, kf);
        const float vt = v_ok ? to_float<Act>(v_in[t * in.st]) : 0.0f;
        const float eg = __shfl_sync(0xffffffffu, eg_l, tt);
        const float beta = __shfl_sync(0xffffffffu, beta_l, tt);
        if (sink.k_writer) {
          // The key as the step read it (exact in the act dtype) and its factor.
          char* rec = sink.record(p, t);
          Act* kd = reinterpret_cast<Act*>(rec + p.f_k) + int64_t{h} * K;
#pragma unroll
          for (int i = 0; i < NK; ++i) store4<Act>(kd + i * 4 * LANES + kl * 4, kn[i]);
          if (kl == 0) reinterpret_cast<float*>(rec + p.f_kf)[h] = kf;
        }
        float u;
        const float o = gdn_step<St, NK, LANES>(S, qn, kn, qf, kf, vt, eg, beta, u);
        if (u_rec != nullptr) {
          int pos = wpos + t;  // wpos < R, t < T <= R
          if (pos >= p.ring) pos -= p.ring;
          u_rec[pos * u_stride] = u;
        }
        if (snap_row != nullptr && v_ok) {
          gdn_store_state<St, NK, LANES>(snap_row + t * p.snap_stride_t, S, kl, true);
        }
        if (writer) out_v[t * p.out_stride_token] = from_float<Act>(o);
      }
    }
    if (p.store_final && rt.count > 0 && v_ok) {
      gdn_store_state<St, NK, LANES>(committed, S, kl, false);
    }
  }
}

template <typename Act, typename St, int K, int LANES, int kItems, bool kReplay, bool kTree = false>
cudaError_t launch_gdn_shape(const GdnRecurrenceParams& p, cudaStream_t stream) {
  constexpr int rows_per_cta = gdn_rows_per_cta<LANES>();
  return launch_after_conv(gdn_recurrence_kernel<Act, St, K, LANES, kItems, kReplay, kTree>,
                           dim3((p.head_v_dim + rows_per_cta - 1) / rows_per_cta, p.num_v_heads,
                                (p.rows + kItems - 1) / kItems),
                           dim3(kGdnThreads), p, stream);
}

template <typename Act, typename St, int K>
cudaError_t launch_gdn_k(const GdnRecurrenceParams& p, cudaStream_t stream) {
  // Two rows per CTA from 16 rows on when the window is short (the state read is then a large
  // share of the traffic and its latency is exposed once per CTA). Measured on H200, Qwen3-Next,
  // B=128: T=2 74% -> 80% of copy BW; T=4/8 87% -> 85-86% (hence one row per CTA there).
  if (p.cursor != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
    // Replay (history records, or tree windows without snapshots): one row per CTA.
    // Trees get their own instantiation: only they keep the start state in shared memory.
    return p.parents != nullptr ? launch_gdn_shape<Act, St, K, 8, 1, true, true>(p, stream)
                                : launch_gdn_shape<Act, St, K, 8, 1, true, false>(p, stream);
  }
  const bool two = p.rows >= 16 && p.tokens <= 3;
  return two ? launch_gdn_shape<Act, St, K, 8, 2, false>(p, stream)
             : launch_gdn_shape<Act, St, K, 8, 1, false>(p, stream);
}

template <typename Act, typename St>
cudaError_t launch_gdn_recurrence_typed(const GdnRecurrenceParams& p0, cudaStream_t stream) {
  bool skip = false;
  const cudaError_t bad = check_recurrence_launch(p0, kGdnChunk, &skip);
  if (bad != cudaSuccess || skip) return bad;
  if (p0.num_k_heads <= 0 || p0.num_v_heads % p0.num_k_heads != 0) return cudaErrorInvalidValue;
  GdnRecurrenceParams p = p0;
  p.v_per_k = p0.num_v_heads / p0.num_k_heads;
  p.inv_v_per_k = 1.0f / static_cast<float>(p.v_per_k);
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
