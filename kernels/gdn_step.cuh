// The GDN token step of the CUDA backend, shared by every launch of gdn_recurrence_kernel
// (decode, prefill, verify of both strategies): the staging of a chunk of tokens in shared
// memory, the replay history records (staged or prefetched with cp.async), the state update of
// one token (gdn_update, also the history records' application) and the step itself.
// DESIGN.md section 3, GDN step:
//   q~ = q / sqrt(sum q^2 + 1e-6) * scale;  k^ = k / sqrt(sum k^2 + 1e-6)
//   g = -exp(A_log) softplus(a + dt_bias);  beta = sigmoid(b)
//   S = e^g S;  u = beta (v - S k^);  S += u k^T;  o = S q~
// computed as  sk = S k^, sq = S q~ (old S), u = beta (v - e^g sk), S = e^g S + u k^T,
// o = e^g sq + u (k^ . q~): one pass over S per token.
// KDA (kKda: the chunk's gate is a K-vector, DESIGN.md section 3, KDA step): the decay is per key
// channel, S[v][i] = e^g[i] S[v][i]; the step decays S in place while it forms sk = S k^ and
// sq = S q~ (of the decayed S), then u = beta (v - sk), S = S + u k^T, o = sq + u (k^ . q~). A
// record's application is the same decay and the same multiply-add (kda_decay, gdn_rank1).
//
// Work split: a CTA owns 4 * 32/LANES rows of V for one (row, value head) and all K columns. A
// warp holds 32/LANES V rows; the LANES lanes of a V row hold K/LANES columns each as float4 at
// k = i*4*LANES + lane%LANES*4, so every 16-byte store of a warp covers whole 128-byte lines.
// LANES = 8: 16 state floats per thread, 8 CTAs per SM. The state stays in registers across the
// window; each token's state is stored once (snapshot) with vector stores. Rows of S are
// independent in the delta rule given k^, q~, so splitting V over CTAs needs no communication.
#pragma once

#include <cstddef>

#include "common.cuh"
#include "gdn_recurrence.h"

namespace specstate::kernels {

inline constexpr int kGdnThreads = 128;

template <int LANES>
__host__ __device__ constexpr int gdn_rows_per_cta() {
  return kGdnThreads / LANES;
}

// KDA's decay per (token, key channel) in a chunk; GDN's chunk has none (an empty base, so GDN's
// shared-memory layout is the one it had before KDA: measured on the H200, 16 bytes of offset
// in front of eg / v / next_state made the GDN replay verify 3-5% slower at B >= 32).
template <int K, int kChunk, bool kKda>
struct GdnChunkGate {
  __align__(16) float egk[kChunk][K];
};
template <int K, int kChunk>
struct GdnChunkGate<K, kChunk, false> {};

// Shared-memory staging of a chunk of tokens: normalised q~ and k^, the gates, k^.q~ and this
// CTA's v rows. kKda: the decay per key channel (egk, GdnChunkGate) instead of per head (eg).
template <int K, int kRows, int kChunk, bool kKda = false>
struct GdnChunk : GdnChunkGate<K, kChunk, kKda> {
  __align__(16) float q[kChunk][K];
  __align__(16) float k[kChunk][K];
  float eg[kChunk];
  float beta[kChunk];
  float kq[kChunk];
  __align__(16) float v[kChunk][kRows];
};
// GDN's chunk carries nothing of KDA's (GdnChunkGate): its gates follow q and k directly.
using GdnChunkQwen3Next = GdnChunk<128, 16, 16>;
static_assert(offsetof(GdnChunkQwen3Next, eg) == 2 * 16 * 128 * sizeof(float),
              "GDN's chunk layout is the one measured (no KDA member in front of the gates)");

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

// A row's window inputs for one CTA, resolved once per row: token t's q and k of key head h at
// q + t * st, k + t * st (channel stride sc), this CTA's first v row at v + t * st, the gates of
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
  int v_rows;  // rows of this CTA inside V
  bool vec;
};

template <typename Act, int K, int kRows>
__device__ __forceinline__ GdnRowInputs<Act> gdn_row_inputs(const GdnRecurrenceParams& p,
                                                            int64_t tok0, int h, int hv,
                                                            int vblock) {
  GdnRowInputs<Act> in;
  in.st = p.qkv_stride_token;
  in.sc = p.qkv_stride_c;
  const Act* row = static_cast<const Act*>(p.qkv) + tok0 * in.st;
  in.q = row + int64_t{h} * K * in.sc;
  in.k = row + (int64_t{p.num_k_heads} + h) * K * in.sc;
  const int v0 = vblock * kRows;
  in.v = row + (2 * int64_t{p.num_k_heads} * K + int64_t{hv} * p.head_v_dim + v0) * in.sc;
  in.v_rows = min(kRows, p.head_v_dim - v0);
  in.a_st = p.a_stride_token;
  in.b_st = p.b_stride_token;
  in.a = static_cast<const Act*>(p.a) + tok0 * in.a_st + hv * p.a_stride_h;
  in.b = static_cast<const Act*>(p.b) + tok0 * in.b_st + hv * p.b_stride_h;
  in.vec = in.sc == 1 && aligned16(in.q) && aligned16(in.k) &&
           (in.st * static_cast<int64_t>(sizeof(Act))) % 16 == 0;
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

// The layer's dt_bias as gdn_stage takes it: GDN's value head's; KDA's (a K-vector per value head)
// the channel of this thread's gates, tid % K (gdn_stage's mapping). Nobody writes it in the
// round, so every kernel loads it first, before its grid-dependency wait: its latency is then off
// the chain after the wait (KDA's fused launch: docs/cuda.md, eleventh session).
template <bool kKda, int K>
__device__ __forceinline__ float gdn_dt_bias(const GdnRecurrenceParams& p, int hv) {
  if constexpr (kKda) {
    return load_any_or_zero(p.dt_bias, p.dt_bias_dtype,
                            hv * p.dt_bias_stride + (threadIdx.x % K) * p.dt_bias_stride_k);
  } else {
    return load_any_or_zero(p.dt_bias, p.dt_bias_dtype, hv * p.dt_bias_stride);
  }
}

// Stages window tokens [c0, c0 + n) of the row for value head hv (key head h) at chunk slots
// off + i; writes their factor records' k, kf and e^g when `sink` says so. The gates are one
// token per thread; q and k are normalised one token per warp. Every thread of the CTA calls it;
// it ends with __syncthreads(). kStaged (the fused conv + recurrence launch, gdn_fused.cuh): the
// conv outputs of these tokens are already in the chunk (q and k raw, as the act dtype holds
// them, at rows off + i; v likewise) and so are the raw gates (a in eg, KDA's in egk, b in beta,
// each where this function's thread for it reads it back), so q and k are normalised and the
// gates finished in place.
template <typename Act, int K, int kRows, int kChunk, bool kKda, bool kStaged = false>
__device__ __forceinline__ void gdn_stage(GdnChunk<K, kRows, kChunk, kKda>& c,
                                          const GdnRecurrenceParams& p, const GdnRowInputs<Act>& in,
                                          int h, int hv, int c0, int n, float A, float dt_bias,
                                          const GdnFactorSink& sink, int off = 0,
                                          bool wait_async = false) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // KDA: a thread's gates are tokens tid / K, + kTokStep, ... (one key channel, tid % K); their
  // raw values are loaded kBatch at a time, as bits, before any is used (one round trip a batch,
  // not one a token), and the first batch before v's loads below, so that the two overlap.
  constexpr int kTokStep = kGdnThreads / K, kBatch = kStaged ? 1 : 2;
  uint32_t graw[kBatch];
  const auto load_gates = [&](int tt0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int tt = tt0 + j * kTokStep;
      graw[j] = 0u;
      if (!kStaged && tt < n) {
        graw[j] = act_bits(in.a[(c0 + tt) * in.a_st + (tid % K) * p.a_stride_k]);
      }
    }
  };
  if constexpr (kKda) load_gates(tid / K);
  // v of this CTA's rows for the chunk, staged in shared memory (registers are the limit).
  for (int i = tid; !kStaged && i < n * kRows; i += kGdnThreads) {
    const int tt = i / kRows, r = i % kRows;
    c.v[off + tt][r] = r < in.v_rows ? to_float<Act>(in.v[(c0 + tt) * in.st + r * in.sc]) : 0.0f;
  }
  if constexpr (kKda) {
    // The decay per key channel (DESIGN.md section 3, KDA step), one (token, channel) per thread:
    // x = g_raw + dt_bias[hv][i]; g = A softplus(x), A = -exp(A_log), or with fla's lower bound
    // g = lower_bound sigmoid(exp(A_log) x). kGdnThreads is a multiple of K: a thread's channel
    // is the same for every token, its dt_bias loaded once.
    // `dt_bias` is that channel's (gdn_dt_bias, loaded by the kernel before its wait).
    static_assert(kGdnThreads % K == 0, "one key channel per thread");
    const int e = tid % K;
    const float bias = dt_bias;
    for (int tt0 = tid / K; tt0 < n; tt0 += kBatch * kTokStep) {
      if (tt0 != tid / K) load_gates(tt0);  // the first batch is in flight since the start
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int tt = tt0 + j * kTokStep;
        if (tt >= n) break;
        const float x = (kStaged ? c.egk[off + tt][e] : float_from_act_bits<Act>(graw[j])) + bias;
        const float g = p.has_lower_bound ? p.lower_bound * sigmoid(-A * x) : A * softplus(x);
        const float eg = expf(g);
        c.egk[off + tt][e] = eg;
        if (sink.ring != nullptr && sink.eg_writer) {
          reinterpret_cast<float*>(sink.record(p, c0 + tt) + p.f_eg)[int64_t{hv} * K + e] = eg;
        }
      }
    }
    for (int tt = tid; tt < n; tt += kGdnThreads) {
      c.beta[off + tt] =
          sigmoid(kStaged ? c.beta[off + tt] : to_float<Act>(in.b[(c0 + tt) * in.b_st]));
    }
  } else {
    // The gates, one token per thread.
    for (int tt = tid; tt < n; tt += kGdnThreads) {
      const int64_t t = c0 + tt;
      const float a = kStaged ? c.eg[off + tt] : to_float<Act>(in.a[t * in.a_st]);
      const float eg = expf(A * softplus(a + dt_bias));
      c.eg[off + tt] = eg;
      c.beta[off + tt] = sigmoid(kStaged ? c.beta[off + tt] : to_float<Act>(in.b[t * in.b_st]));
      if (sink.ring != nullptr && sink.eg_writer) {
        reinterpret_cast<float*>(sink.record(p, c0 + tt) + p.f_eg)[hv] = eg;
      }
    }
  }
  // Warp w normalises q and k of tokens w, w+4, ...
  for (int tt = warp; tt < n; tt += kGdnThreads / 32) {
    const int64_t t = c0 + tt;
    constexpr int KQ = K / 32;  // q/k elements per lane in the prologue
    float qv[KQ], kv[KQ];
    // Contiguous channels (the usual case): lane l holds elements [l*KQ, l*KQ + KQ) and loads
    // them as one vector; otherwise element i*32 + l, strided.
    if constexpr (kStaged) {
#pragma unroll
      for (int i = 0; i < KQ; ++i) {
        qv[i] = c.q[off + tt][lane * KQ + i];
        kv[i] = c.k[off + tt][lane * KQ + i];
      }
    } else if (in.vec) {
      load_lane_elems<Act, KQ>(in.q + t * in.st + lane * KQ, qv);
      load_lane_elems<Act, KQ>(in.k + t * in.st + lane * KQ, kv);
    } else {
#pragma unroll
      for (int i = 0; i < KQ; ++i) {
        qv[i] = to_float<Act>(in.q[t * in.st + (i * 32 + lane) * in.sc]);
        kv[i] = to_float<Act>(in.k[t * in.st + (i * 32 + lane) * in.sc]);
      }
    }
    float sq = 0.f, sk = 0.f;
#pragma unroll
    for (int i = 0; i < KQ; ++i) {
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
    char* rec = sink.ring != nullptr && sink.k_writer ? sink.record(p, c0 + tt) : nullptr;
    float kq = 0.f;
#pragma unroll
    for (int i = 0; i < KQ; ++i) {
      const float qn = qv[i] * qf, kn = kv[i] * kf;
      const int e = kStaged || in.vec ? lane * KQ + i : i * 32 + lane;
      c.q[off + tt][e] = qn;
      c.k[off + tt][e] = kn;
      kq += qn * kn;
      // The key as the step read it (exact in the act dtype); k^ = k * kf is recomputed.
      if (rec != nullptr)
        reinterpret_cast<Act*>(rec + p.f_k)[int64_t{h} * K + e] = from_float<Act>(kv[i]);
    }
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) kq += __shfl_xor_sync(0xffffffffu, kq, m);
    if (lane == 0) {
      c.kq[off + tt] = kq;
      if (rec != nullptr) reinterpret_cast<float*>(rec + p.f_kf)[h] = kf;
    }
  }
  // History records prefetched with cp.async (gdn_prefetch_history) land before the barrier.
  if (wait_async) asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
}

// Where a prefetched history record's key (the act dtype, as the record holds it) waits in shared
// memory: the tail of the chunk's key row tt, which the window (staged from row hist on) leaves
// free in the merged case; k^ = k * kf is formed from it (gdn_apply_raw, or once in place).
template <typename Act, int K, int kRows, int kChunk, bool kKda>
__device__ __forceinline__ Act* gdn_raw_key(GdnChunk<K, kRows, kChunk, kKda>& c, int tt) {
  static_assert(sizeof(float) % sizeof(Act) == 0, "the raw key fits a float row");
  return reinterpret_cast<Act*>(&c.k[tt][0]) + K * (sizeof(float) / sizeof(Act) - 1);
}
template <typename Act, int K, int kRows, int kChunk, bool kKda>
__device__ __forceinline__ const Act* gdn_raw_key(const GdnChunk<K, kRows, kChunk, kKda>& c,
                                                  int tt) {
  return reinterpret_cast<const Act*>(&c.k[tt][0]) + K * (sizeof(float) / sizeof(Act) - 1);
}

// Starts copying history records [0, n) of a slot (record i at ring position (base + i) mod R)
// into shared memory with cp.async, issued before the wait for the conv kernel so that their
// latency overlaps the state load and the window's loads: the key as the record holds it (act
// dtype) into gdn_raw_key(c, i) and its factor into hkf, this CTA's rows of u into c.v, e^g into
// c.eg. The
// copies complete at gdn_stage(..., wait_async = true); gdn_apply_raw applies them.
template <typename Act, int K, int kRows, int kChunk, bool kKda>
__device__ __forceinline__ void gdn_prefetch_history(GdnChunk<K, kRows, kChunk, kKda>& c,
                                                     float* hkf, const GdnRecurrenceParams& p,
                                                     const char* ring, int base, int h, int hv,
                                                     int n, int vblock) {
  static_assert((K * sizeof(Act)) % 16 == 0 && kRows % 4 == 0, "16-byte copies");
  constexpr int kKParts = static_cast<int>(K * sizeof(Act) / 16);  // 16-byte parts of a key
  constexpr int kUParts = kRows / 4;                               // 4-row parts of u
  const int tid = threadIdx.x;
  const int V = p.head_v_dim;
  const int v0 = vblock * kRows;
  const auto record = [&](int tt) {
    int pos = base + tt;
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  for (int i = tid; i < n * kKParts; i += kGdnThreads) {
    const int tt = i / kKParts, part = i % kKParts;
    cp_async<16>(reinterpret_cast<char*>(gdn_raw_key<Act>(c, tt)) + part * 16,
                 record(tt) + p.f_k + int64_t{h} * K * sizeof(Act) + part * 16);
  }
  const bool u_vec = V % 4 == 0 && v0 + kRows <= V;
  for (int i = tid; i < n * kUParts; i += kGdnThreads) {
    const int tt = i / kUParts, r = (i % kUParts) * 4;
    const float* u = reinterpret_cast<const float*>(record(tt) + p.f_u) + int64_t{hv} * V + v0 + r;
    if (u_vec) {
      cp_async<16>(&c.v[tt][r], u);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) c.v[tt][r + j] = v0 + r + j < V ? u[j] : 0.0f;
    }
  }
  if constexpr (kKda) {
    constexpr int kEParts = K / 4;  // 16-byte parts of a record's e^g vector
    for (int i = tid; i < n * kEParts; i += kGdnThreads) {
      const int tt = i / kEParts, part = i % kEParts;
      cp_async<16>(&c.egk[tt][part * 4], record(tt) + p.f_eg + (int64_t{hv} * K + part * 4) * 4);
    }
  }
  for (int tt = tid; tt < n; tt += kGdnThreads) {
    if constexpr (!kKda) cp_async<4>(&c.eg[tt], record(tt) + p.f_eg + int64_t{hv} * 4);
    cp_async<4>(&hkf[tt], record(tt) + p.f_kf + int64_t{h} * 4);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Stages history factor records [c0, c0 + n) of a slot (record i at ring position
// (base + i) mod R, with base < R and i < R): k^ = k * kf as the step computed it, e^g and this
// CTA's rows of u (in the v array). Vectorised: a thread stages 8 elements of one record's key
// (one 16-byte load of bf16, two of f32) or 4 rows of u; staging costs a few instructions per
// record and CTA instead of one element per thread. Ends with __syncthreads().
template <typename Act, int K, int kRows, int kChunk, bool kKda>
__device__ __forceinline__ void gdn_stage_history(GdnChunk<K, kRows, kChunk, kKda>& c,
                                                  const GdnRecurrenceParams& p, const char* ring,
                                                  int base, int h, int hv, int c0, int n,
                                                  int vblock) {
  static_assert(K % 8 == 0 && kRows % 4 == 0, "vector staging");
  constexpr int kParts = K / 8;       // 8-element parts of a key
  constexpr int kUParts = kRows / 4;  // 4-row parts of u
  const int tid = threadIdx.x;
  const int V = p.head_v_dim;
  const auto record = [&](int tt) {
    int pos = base + c0 + tt;
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  for (int i = tid; i < n * kParts; i += kGdnThreads) {
    const int tt = i / kParts, e = (i % kParts) * 8;
    const char* rec = record(tt);
    const float kf = reinterpret_cast<const float*>(rec + p.f_kf)[h];
    float k8[8];
    load_n<Act, 8>(reinterpret_cast<const Act*>(rec + p.f_k) + int64_t{h} * K + e, k8, true);
#pragma unroll
    for (int j = 0; j < 8; ++j) k8[j] *= kf;
    *reinterpret_cast<float4*>(&c.k[tt][e]) = make_float4(k8[0], k8[1], k8[2], k8[3]);
    *reinterpret_cast<float4*>(&c.k[tt][e + 4]) = make_float4(k8[4], k8[5], k8[6], k8[7]);
  }
  const bool u_vec = V % 4 == 0;
  for (int i = tid; i < n * kUParts; i += kGdnThreads) {
    const int tt = i / kUParts, r = (i % kUParts) * 4, vr = vblock * kRows + r;
    const float* u = reinterpret_cast<const float*>(record(tt) + p.f_u) + int64_t{hv} * V + vr;
    if (u_vec && vr + 4 <= V) {
      const float4 x = *reinterpret_cast<const float4*>(u);
      c.v[tt][r] = x.x;
      c.v[tt][r + 1] = x.y;
      c.v[tt][r + 2] = x.z;
      c.v[tt][r + 3] = x.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) c.v[tt][r + j] = vr + j < V ? u[j] : 0.0f;
    }
  }
  if constexpr (kKda) {
    for (int i = tid; i < n * K; i += kGdnThreads) {
      const int tt = i / K, e = i % K;
      c.egk[tt][e] = reinterpret_cast<const float*>(record(tt) + p.f_eg)[int64_t{hv} * K + e];
    }
  } else {
    for (int tt = tid; tt < n; tt += kGdnThreads) {
      c.eg[tt] = reinterpret_cast<const float*>(record(tt) + p.f_eg)[hv];
    }
  }
  __syncthreads();
}

// The state update of one token, in two parts that the step and the records' application share:
// the decay (GDN: S = e^g S, one product per element, kept in fp32; KDA: per key channel,
// S[v][i] = e^g[i] S[v][i]), then S = S + u k^T, one fused multiply-add per element, rounded to
// the state dtype after the token as decode stores it. Every path calls these: the replay strategy
// is bit-exact by construction. The step forms the decay right after its dot products have read
// S (KDA: before them), so that the products need not wait for u.
__device__ __forceinline__ void gdn_decay(float4& s, float eg) {
  s.x = eg * s.x;
  s.y = eg * s.y;
  s.z = eg * s.z;
  s.w = eg * s.w;
}
__device__ __forceinline__ void kda_decay(float4& s, const float4& e) {
  s.x *= e.x;
  s.y *= e.y;
  s.z *= e.z;
  s.w *= e.w;
}
template <typename St, int NK>
__device__ __forceinline__ void gdn_rank1(float4 (&S)[NK], const float4 (&kn)[NK], float u) {
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    S[i].x = round_to<St>(fmaf(u, kn[i].x, S[i].x));
    S[i].y = round_to<St>(fmaf(u, kn[i].y, S[i].y));
    S[i].z = round_to<St>(fmaf(u, kn[i].z, S[i].z));
    S[i].w = round_to<St>(fmaf(u, kn[i].w, S[i].w));
  }
}
// GDN's whole update, S = e^g S + u k^T (a history record's application).
template <typename St, int NK>
__device__ __forceinline__ void gdn_update(float4 (&S)[NK], const float4 (&kn)[NK], float u,
                                           float eg) {
#pragma unroll
  for (int i = 0; i < NK; ++i) gdn_decay(S[i], eg);
  gdn_rank1<St, NK>(S, kn, u);
}

// A record's decay and update of this thread's rows (either kind): GDN S = e^g S + u k^T (one
// multiply-add per element), KDA the per-channel decay then the same multiply-add.
template <typename St, int K, int LANES, int RPT, int kRows, int kChunk, bool kKda, typename Rows>
__device__ __forceinline__ void gdn_apply_kn(float4 (&S)[RPT][K / (4 * LANES)],
                                             const float4 (&kn)[K / (4 * LANES)],
                                             const GdnChunk<K, kRows, kChunk, kKda>& c, int tt,
                                             int kl, const Rows& rows) {
  constexpr int NK = K / (4 * LANES);
  if constexpr (kKda) {
#pragma unroll
    for (int i = 0; i < NK; ++i) {
      const float4 e = *reinterpret_cast<const float4*>(&c.egk[tt][i * 4 * LANES + kl * 4]);
#pragma unroll
      for (int j = 0; j < RPT; ++j) kda_decay(S[j][i], e);
    }
#pragma unroll
    for (int j = 0; j < RPT; ++j) gdn_rank1<St, NK>(S[j], kn, c.v[tt][rows.vrow[j]]);
  } else {
    const float eg = c.eg[tt];
#pragma unroll
    for (int j = 0; j < RPT; ++j) gdn_update<St, NK>(S[j], kn, c.v[tt][rows.vrow[j]], eg);
  }
}

// A thread's V rows: RPT rows (row j at j * kRowsBase + vrow0 inside the CTA), each with the same
// K columns. Every row's arithmetic is the one-row arithmetic (same order, same reduction), so
// the result does not depend on RPT; RPT > 1 reuses each staged key and query value for RPT
// rows (the shared-memory traffic per state element is 1/RPT).
template <int RPT>
struct GdnRows {
  int vrow[RPT];  // inside the CTA (index of the staged v / u)
  int v[RPT];     // inside the head
  bool ok[RPT];   // v < V
};

// Applies staged history record tt to this thread's rows of S.
template <typename St, int K, int LANES, int RPT, int kRows, int kChunk, bool kKda>
__device__ __forceinline__ void gdn_apply(float4 (&S)[RPT][K / (4 * LANES)],
                                          const GdnChunk<K, kRows, kChunk, kKda>& c, int tt, int kl,
                                          const GdnRows<RPT>& rows) {
  constexpr int NK = K / (4 * LANES);
  float4 kn[NK];
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    kn[i] = *reinterpret_cast<const float4*>(&c.k[tt][i * 4 * LANES + kl * 4]);
  }
  gdn_apply_kn<St, K, LANES, RPT>(S, kn, c, tt, kl, rows);
}

// Applies prefetched history record tt (gdn_prefetch_history: the key in the act dtype and its
// factor) to this thread's rows of S: k^ = k * kf, the product the step computed.
template <typename Act, typename St, int K, int LANES, int RPT, int kRows, int kChunk, bool kKda>
__device__ __forceinline__ void gdn_apply_raw(float4 (&S)[RPT][K / (4 * LANES)],
                                              const GdnChunk<K, kRows, kChunk, kKda>& c,
                                              const float* hkf, int tt, int kl,
                                              const GdnRows<RPT>& rows) {
  constexpr int NK = K / (4 * LANES);
  const float kf = hkf[tt];
  float4 kn[NK];
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    kn[i] = load4<Act>(gdn_raw_key<Act>(c, tt) + i * 4 * LANES + kl * 4);
    kn[i].x *= kf;
    kn[i].y *= kf;
    kn[i].z *= kf;
    kn[i].w *= kf;
  }
  gdn_apply_kn<St, K, LANES, RPT>(S, kn, c, tt, kl, rows);
}

// A token's output from its row's S q~ (the lanes' sum), the token's gates and the row's u: GDN
// o = e^g (S q~) + u (k^.q~), KDA o = S q~ + u (k^.q~) (S already decayed), with the contraction
// written out, so that every caller (the step, gdn_flush_block's deferred outputs) forms the same
// bits.
template <bool kKda>
__device__ __forceinline__ float gdn_token_output(float sq, float eg, float u, float kq) {
  return kKda ? fmaf(u, kq, sq) : fmaf(eg, sq, u * kq);
}

// The sum of a row's kParts partial sums staged at part[0 .. kParts) (16-byte aligned) as the
// step's butterfly leaves it on every lane (kernels::butterfly_sum: lane kl's partial at index
// kl % kParts, after the butterfly's distances from LANES / 2 down to kParts).
template <int kParts>
__device__ __forceinline__ float lanes_sum(const float* part) {
  static_assert(kParts % 4 == 0, "whole float4 loads");
  float v[kParts];
#pragma unroll
  for (int i = 0; i < kParts; i += 4) {
    const float4 q = *reinterpret_cast<const float4*>(part + i);
    v[i] = q.x;
    v[i + 1] = q.y;
    v[i + 2] = q.z;
    v[i + 3] = q.w;
  }
  return butterfly_sum(v);
}

// One token step on this thread's rows of S (staged token tt); sets o and u (the update) of each
// row. kOutParts > 1: o is this lane's partial S q~ after the butterfly's distances from LANES / 2
// down to kOutParts only, and no output is formed: the caller stages the partials and forms the
// output later (lanes_sum, gdn_token_output: the same bits), so the window's outputs cost the
// token fewer shuffles (gdn_replay_vblocks' two-rows chain). kOutput = false (a tree path
// recomputed): S q~ and the output are not computed; the state update is the same arithmetic.
// kUpdate = false: the state after the token is not formed (GDN leaves S as it was, KDA leaves it
// decayed), for a window's last token whose state nobody reads (a replay verify: its records, not
// its state, carry the window; o and u need only the state before the token). Whether it is formed
// changes no bit of o, u or any state that is read. GDN's decay is formed as each element has been
// read by the dot products: those products do not depend on u, so they fill the wait for the dot
// products' shuffle reduction.
template <typename St, int K, int LANES, int RPT, int kRows, int kChunk, bool kOutput, bool kKda,
          bool kUpdate, int kOutParts = 1>
__device__ __forceinline__ void gdn_step_body(float4 (&S)[RPT][K / (4 * LANES)],
                                              const GdnChunk<K, kRows, kChunk, kKda>& c, int tt,
                                              int kl, const GdnRows<RPT>& rows, float (&u)[RPT],
                                              float (&o)[RPT]) {
  constexpr int NK = K / (4 * LANES);
  float4 kn[NK];
  // Each dot product is one chain of fused multiply-adds, one instruction per element (the
  // issue-bound replay verify's token step has no separate products or partial-sum adds).
  float sk[RPT], sq[RPT];
#pragma unroll
  for (int j = 0; j < RPT; ++j) sk[j] = sq[j] = 0.f;
  const float eg = kKda ? 0.0f : c.eg[tt];
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    kn[i] = *reinterpret_cast<const float4*>(&c.k[tt][i * 4 * LANES + kl * 4]);
    float4 qn;
    if constexpr (kOutput) qn = *reinterpret_cast<const float4*>(&c.q[tt][i * 4 * LANES + kl * 4]);
    float4 e;
    if constexpr (kKda) e = *reinterpret_cast<const float4*>(&c.egk[tt][i * 4 * LANES + kl * 4]);
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      if constexpr (kKda) kda_decay(S[j][i], e);  // KDA: the dot products see the decayed S
      const float4 s = S[j][i];
      sk[j] = fmaf(s.w, kn[i].w, fmaf(s.z, kn[i].z, fmaf(s.y, kn[i].y, fmaf(s.x, kn[i].x, sk[j]))));
      if constexpr (kOutput) {
        sq[j] = fmaf(s.w, qn.w, fmaf(s.z, qn.z, fmaf(s.y, qn.y, fmaf(s.x, qn.x, sq[j]))));
      }
      if constexpr (!kKda && kUpdate) gdn_decay(S[j][i], eg);  // GDN: after the dot products
    }
  }
#pragma unroll
  for (int m = LANES / 2; m > 0; m >>= 1) {
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      sk[j] += __shfl_xor_sync(0xffffffffu, sk[j], m);
      if (kOutput && m >= kOutParts) sq[j] += __shfl_xor_sync(0xffffffffu, sq[j], m);
    }
  }
  const float beta = c.beta[tt], kq = c.kq[tt];
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    if constexpr (kKda) {
      u[j] = beta * (c.v[tt][rows.vrow[j]] - sk[j]);
    } else {
      u[j] = beta * (c.v[tt][rows.vrow[j]] - eg * sk[j]);
    }
    o[j] = kOutParts > 1 ? sq[j] : gdn_token_output<kKda>(sq[j], eg, u[j], kq);
    if constexpr (kUpdate) gdn_rank1<St, NK>(S[j], kn, u[j]);
  }
}

// gdn_step_body with the state update chosen at run time (`update`, uniform across the CTA): a
// branch between two instantiations, each with its own schedule.
template <typename St, int K, int LANES, int RPT, int kRows, int kChunk, bool kOutput = true,
          bool kKda = false, int kOutParts = 1>
__device__ __forceinline__ void gdn_step(float4 (&S)[RPT][K / (4 * LANES)],
                                         const GdnChunk<K, kRows, kChunk, kKda>& c, int tt, int kl,
                                         const GdnRows<RPT>& rows, float (&u)[RPT], float (&o)[RPT],
                                         bool update = true) {
  if (update) {
    gdn_step_body<St, K, LANES, RPT, kRows, kChunk, kOutput, kKda, true, kOutParts>(S, c, tt, kl,
                                                                                    rows, u, o);
  } else {
    gdn_step_body<St, K, LANES, RPT, kRows, kChunk, kOutput, kKda, false, kOutParts>(S, c, tt, kl,
                                                                                     rows, u, o);
  }
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
// The same load where `src` is readable for every row, a row past V included (its values are
// then never stored: a row past V only feeds its own outputs, which nobody writes): no select.
template <typename St, int NK, int LANES>
__device__ __forceinline__ void gdn_load_state(const St* src, float4 (&S)[NK], int kl) {
#pragma unroll
  for (int i = 0; i < NK; ++i) S[i] = load4<St>(src + i * 4 * LANES + kl * 4);
}

}  // namespace specstate::kernels
