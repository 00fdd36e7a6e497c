// The Mamba2 token step of the CUDA backend, shared by every launch of mamba2_recurrence_kernel
// (decode, prefill, verify of both strategies): the staging of a chunk of tokens in shared memory,
// the replay history records (staged, or prefetched raw with cp.async), the step itself and the
// state's loads and stores. DESIGN.md section 3, Mamba2 step.
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

// Head h's group (B and C): h / heads_per_group as a multiply by the launcher's reciprocal
// (head_group; the integer division it replaces was four a warp on the replay verify's prologue).
__device__ __forceinline__ int mamba2_group(const Mamba2RecurrenceParams& p, int h) {
  return head_group(h, p.inv_heads_per_group);
}
// Whether head h is its group's first (the CTA of that head writes the group's B records).
__device__ __forceinline__ bool mamba2_group_leader(const Mamba2RecurrenceParams& p, int h) {
  return h == mamba2_group(p, h) * p.heads_per_group;
}

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

// kRows: the CTA's channels (mamba2_rows<N>() a thread's one channel, twice that with two
// channels a thread: mamba2_chain_rows' RPT).
template <int N, int kChunk, int kRows = mamba2_rows<N>()>
struct Mamba2Chunk {
  __align__(16) float B[kChunk][N];  // B[g][n] * dt (the step's dB)
  __align__(16) float C[kChunk][N];
  float x[kChunk][kRows];
  float z[kChunk][kRows];  // silu(z) (gate), or 1
  float dA[kChunk];
};

// Where a row's factor records go (replay): the slot's ring, window token t at ring position
// (wpos + t) % R; `b_writer`: this CTA writes the group's B, `head_writer` the head's dt and dA.
struct Mamba2FactorSink {
  char* ring = nullptr;  // the slot's records, or null: none written
  int wpos = 0;
  bool b_writer = false;
  bool head_writer = false;
};

// Stages window tokens [c0, c0 + n) of the row (token i at tok0 + i) and writes their factor
// records when `sink` says so. Ends with __syncthreads(). kBatched: every global load of a
// thread's first items is issued before any is used (one round trip instead of one a loop and
// item; the several-blocks replay chain, where it was measured faster: H200, Nemotron-H rounds
// at B = 128 0.86-0.98x); otherwise loop by loop, item by item (the per-block path: there the
// held values spill and rounds at B = 1 and 8 were 1.03-1.10x slower, docs/cuda.md), B and C as
// 8-element vectors where kVecBC (the per-block kernels, and the two-channel several-blocks
// kernel's fallback, mamba2_chain_rows; not in the one-channel several-blocks kernel, whose
// spills it raised).
template <typename Act, int N, int kChunk, bool kBatched = false, bool kVecBC = false,
          int kRowsC = mamba2_rows<N>()>
__device__ __forceinline__ void mamba2_stage(Mamba2Chunk<N, kChunk, kRowsC>& c,
                                             const Mamba2RecurrenceParams& p, int64_t tok0, int h,
                                             int vblock, int c0, int n, float A, float dt_bias,
                                             const Mamba2FactorSink& sink, int off = 0,
                                             bool wait_async = false) {
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = mamba2_group(p, h);
  const int64_t b_off = int64_t{p.num_heads} * P + int64_t{g} * N;
  const int64_t c_off = b_off + int64_t{p.n_groups} * N;
  const Act* xbc = static_cast<const Act*>(p.xbc);
  const int64_t st = p.xbc_stride_token, sc = p.xbc_stride_c;
  const auto record = [&](int tt) {
    int pos = sink.wpos + c0 + tt;  // wpos < R and the window fits the ring
    if (pos >= p.ring) pos -= p.ring;
    return sink.ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  // dt and dA of each token (thread tt) into the chunk and the records, then the barrier after
  // which B * dt and C are staged (sm_dt: dt of the chunk's tokens).
  __shared__ float sm_dt[kChunk];
  const auto stage_dt = [&] {
    if (tid < n) {
      const int64_t tok = tok0 + c0 + tid;
      float dt = softplus(to_float<Act>(static_cast<const Act*>(
                              p.dt)[tok * p.dt_stride_token + h * p.dt_stride_h]) +
                          dt_bias);
      if (p.has_dt_min) dt = fmaxf(dt, p.dt_min);
      if (p.has_dt_max) dt = fminf(dt, p.dt_max);
      sm_dt[tid] = dt;
      const float dA = expf(A * dt);
      c.dA[off + tid] = dA;
      if (sink.ring != nullptr && sink.head_writer) {
        char* rec = record(tid);
        reinterpret_cast<float*>(rec + p.f_dt)[h] = dt;
        reinterpret_cast<float*>(rec + p.f_dA)[h] = dA;
      }
    }
    // History records prefetched with cp.async (mamba2_prefetch_history) land before the barrier.
    if (wait_async) asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
  };
  if constexpr (kBatched) {
    constexpr int kRows = kRowsC;
    // Every global load of a thread's first items is issued here, before any of them is used: its
    // token's dt, its first kBC (B, C) pairs and its first (x, z) channel item; one round trip to
    // global memory instead of one per loop and item (the loops below store what was loaded; items
    // past those, long windows, are loaded there).
    constexpr int kBC = 4;
    Act braw[kBC], craw[kBC];
#pragma unroll
    for (int q = 0; q < kBC; ++q) {
      const int i = tid + q * kMamba2Threads;
      if (i < n * N) {
        const int tt = i / N, k = i % N;
        const Act* base = xbc + (tok0 + c0 + tt) * st;
        braw[q] = base[(b_off + k) * sc];
        craw[q] = base[(c_off + k) * sc];
      }
    }
    const auto x_item = [&](int i, Act* xraw, float* zz) {
      const int tt = i / kRows, r = i % kRows;
      const int ch = vblock * kRows + r;
      const int64_t tok = tok0 + c0 + tt;
      if (ch < P) {
        *xraw = xbc[tok * st + (int64_t{h} * P + ch) * sc];
        if (p.gate) {
          *zz = to_float<Act>(static_cast<const Act*>(
              p.z)[tok * p.z_stride_token + (int64_t{h} * P + ch) * p.z_stride_c]);
        }
      }
    };
    const auto x_store = [&](int i, Act xraw, float zz) {
      const int tt = i / kRows, r = i % kRows;
      const int ch = vblock * kRows + r;
      float xv = 0.0f, zv = 1.0f;
      if (ch < P) {
        xv = to_float<Act>(xraw);
        if (sink.ring != nullptr) {
          reinterpret_cast<Act*>(record(tt) + p.f_x)[int64_t{h} * P + ch] = xraw;
        }
        if (p.gate) zv = zz * sigmoid(zz);
      }
      c.x[off + tt][r] = xv;
      c.z[off + tt][r] = zv;
    };
    Act xraw0{};
    float zz0 = 0.0f;
    if (tid < n * kRows) x_item(tid, &xraw0, &zz0);
    stage_dt();
    const auto bc_store = [&](int i, Act b, Act cv) {
      const int tt = i / N, k = i % N;
      c.B[off + tt][k] = to_float<Act>(b) * sm_dt[tt];
      c.C[off + tt][k] = to_float<Act>(cv);
      if (sink.ring != nullptr && sink.b_writer) {
        reinterpret_cast<Act*>(record(tt) + p.f_B)[int64_t{g} * N + k] = b;
      }
    };
#pragma unroll
    for (int q = 0; q < kBC; ++q) {
      const int i = tid + q * kMamba2Threads;
      if (i < n * N) bc_store(i, braw[q], craw[q]);
    }
    for (int i = tid + kBC * kMamba2Threads; i < n * N; i += kMamba2Threads) {
      const Act* base = xbc + (tok0 + c0 + i / N) * st;
      bc_store(i, base[(b_off + i % N) * sc], base[(c_off + i % N) * sc]);
    }
    if (tid < n * kRows) x_store(tid, xraw0, zz0);
    for (int i = tid + kMamba2Threads; i < n * kRows; i += kMamba2Threads) {
      Act xraw{};
      float zz = 0.0f;
      x_item(i, &xraw, &zz);
      x_store(i, xraw, zz);
    }
    __syncthreads();
  } else {
    stage_dt();
    constexpr int kRows = kRowsC;
    // B and C as 8-element vectors (ActBits) where the layout allows, each thread's B / C part
    // and (x, z) item loaded before any of their stores: a thread's stores (the B record, to
    // global memory) would otherwise keep its next load behind them, one round trip per item
    // (four at T = 4, N = 128). The same values as the element loop below, the same record bits.
    // Only from N = 128 (the states measured, Nemotron-H): at smaller N the held vector spilled
    // (ptxas: 0 -> 40-48 bytes) and a thread's items are fewer.
    constexpr int kParts = N / 8;
    const bool bc_vec = N % 8 == 0 && sc == 1 && aligned16(xbc) &&
                        (st * static_cast<int64_t>(sizeof(Act))) % 16 == 0 &&
                        (b_off * static_cast<int64_t>(sizeof(Act))) % 16 == 0 &&
                        (c_off * static_cast<int64_t>(sizeof(Act))) % 16 == 0;
    if constexpr (kVecBC && N >= 128) {
      if (bc_vec) {
        const int bc_items = 2 * n * kParts, x_items = n * kRows;
        for (int i = tid; i < bc_items || i < x_items; i += kMamba2Threads) {
          ActBits<Act, 8> bc;
          const bool is_c = i >= n * kParts;
          const int j = is_c ? i - n * kParts : i;
          const int bt = j / kParts, k = (j % kParts) * 8;
          if (i < bc_items)
            bc.load(xbc + (tok0 + c0 + bt) * st + (is_c ? c_off : b_off) + k, 1, true, 8);
          const int xt = i / kRows, r = i % kRows;
          const int ch = vblock * kRows + r;
          const int64_t xtok = tok0 + c0 + xt;
          const bool x_ok = i < x_items && ch < P;
          Act xraw{};
          float zz = 0.0f;
          if (x_ok) {
            xraw = xbc[xtok * st + int64_t{h} * P + ch];
            if (p.gate) {
              zz = to_float<Act>(static_cast<const Act*>(
                  p.z)[xtok * p.z_stride_token + (int64_t{h} * P + ch) * p.z_stride_c]);
            }
          }
          if (i < bc_items) {
            float* const dst = is_c ? &c.C[off + bt][k] : &c.B[off + bt][k];
            const float dt = is_c ? 1.0f : sm_dt[bt];
#pragma unroll
            for (int e = 0; e < 8; ++e) dst[e] = is_c ? bc.get(e) : bc.get(e) * dt;
            if (!is_c && sink.ring != nullptr && sink.b_writer) {
              bc.store(reinterpret_cast<Act*>(record(bt) + p.f_B) + int64_t{g} * N + k);
            }
          }
          if (i < x_items) {
            float xv = 0.0f, zv = 1.0f;
            if (x_ok) {
              xv = to_float<Act>(xraw);
              if (sink.ring != nullptr) {
                reinterpret_cast<Act*>(record(xt) + p.f_x)[int64_t{h} * P + ch] = xraw;
              }
              if (p.gate) zv = zz * sigmoid(zz);
            }
            c.x[off + xt][r] = xv;
            c.z[off + xt][r] = zv;
          }
        }
        __syncthreads();
        return;
      }
    }
    for (int i = tid; i < n * N; i += kMamba2Threads) {
      const int tt = i / N, k = i % N;
      const Act* base = xbc + (tok0 + c0 + tt) * st;
      const Act braw = base[(b_off + k) * sc];
      c.B[off + tt][k] = to_float<Act>(braw) * sm_dt[tt];
      c.C[off + tt][k] = to_float<Act>(base[(c_off + k) * sc]);
      if (sink.ring != nullptr && sink.b_writer) {
        reinterpret_cast<Act*>(record(tt) + p.f_B)[int64_t{g} * N + k] = braw;
      }
    }
    for (int i = tid; i < n * kRows; i += kMamba2Threads) {
      const int tt = i / kRows, r = i % kRows;
      const int ch = vblock * kRows + r;
      const int64_t tok = tok0 + c0 + tt;
      float xv = 0.0f, zv = 1.0f;
      if (ch < P) {
        const Act xraw = xbc[tok * st + (int64_t{h} * P + ch) * sc];
        xv = to_float<Act>(xraw);
        if (sink.ring != nullptr) {
          reinterpret_cast<Act*>(record(tt) + p.f_x)[int64_t{h} * P + ch] = xraw;
        }
        if (p.gate) {
          const float zz = to_float<Act>(static_cast<const Act*>(
              p.z)[tok * p.z_stride_token + (int64_t{h} * P + ch) * p.z_stride_c]);
          zv = zz * sigmoid(zz);
        }
      }
      c.x[off + tt][r] = xv;
      c.z[off + tt][r] = zv;
    }
    __syncthreads();
  }
}

// Raw history records in shared memory (replay, a chain whose history and window fit one
// chunk): x of this CTA's channels as the records hold them (act dtype) and dt; B of the head's
// group waits in the tail of the chunk's B row (mamba2_raw_b: the window, staged from row hist
// on, leaves rows [0, hist) free), dA goes to the chunk. Copied with cp.async before the wait
// for the conv kernel.
template <typename Act, int N, int kChunk, int kRows = mamba2_rows<N>()>
struct Mamba2RawHistory {
  __align__(16) Act x[kChunk][kRows];
  float dt[kChunk];
};
template <typename Act, int N, int kChunk, int kRows>
__device__ __forceinline__ Act* mamba2_raw_b(Mamba2Chunk<N, kChunk, kRows>& c, int tt) {
  static_assert(sizeof(float) % sizeof(Act) == 0, "the raw B fits a float row");
  return reinterpret_cast<Act*>(&c.B[tt][0]) + N * (sizeof(float) / sizeof(Act) - 1);
}
template <typename Act, int N, int kChunk, int kRows>
__device__ __forceinline__ const Act* mamba2_raw_b(const Mamba2Chunk<N, kChunk, kRows>& c, int tt) {
  return reinterpret_cast<const Act*>(&c.B[tt][0]) + N * (sizeof(float) / sizeof(Act) - 1);
}

// Starts copying history records [0, n) of a slot (record i at ring position (base + i) mod R)
// into shared memory with cp.async, issued before the wait for the conv kernel so that their
// latency overlaps the state load (as gdn_prefetch_history). The copies complete at
// mamba2_stage(..., wait_async = true); mamba2_apply_raw applies them.
template <typename Act, int N, int kChunk, int kRows>
__device__ __forceinline__ void mamba2_prefetch_history(Mamba2RawHistory<Act, N, kChunk, kRows>& hr,
                                                        Mamba2Chunk<N, kChunk, kRows>& c,
                                                        const Mamba2RecurrenceParams& p,
                                                        const char* ring, int base, int h,
                                                        int vblock, int n) {
  static_assert((N * sizeof(Act)) % 16 == 0, "16-byte copies of B");
  constexpr int kBParts = static_cast<int>(N * sizeof(Act) / 16);
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = mamba2_group(p, h);
  const int ch0 = vblock * kRows;
  const auto record = [&](int tt) {
    int pos = base + tt;
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  for (int i = tid; i < n * kBParts; i += kMamba2Threads) {
    const int tt = i / kBParts, part = i % kBParts;
    cp_async<16>(reinterpret_cast<char*>(mamba2_raw_b<Act>(c, tt)) + part * 16,
                 record(tt) + p.f_B + int64_t{g} * N * sizeof(Act) + part * 16);
  }
  // x of this CTA's channels: 16-byte copies where the run is aligned and whole, else plain
  // loads (channels past P read as zero).
  constexpr int kXBytes = static_cast<int>(kRows * sizeof(Act));
  const bool x_vec = kXBytes % 16 == 0 && ch0 + kRows <= P &&
                     ((int64_t{h} * P + ch0) * static_cast<int64_t>(sizeof(Act))) % 16 == 0;
  if (x_vec) {
    constexpr int kXParts = kXBytes / 16;
    for (int i = tid; i < n * kXParts; i += kMamba2Threads) {
      const int tt = i / kXParts, part = i % kXParts;
      cp_async<16>(reinterpret_cast<char*>(&hr.x[tt][0]) + part * 16,
                   record(tt) + p.f_x + (int64_t{h} * P + ch0) * sizeof(Act) + part * 16);
    }
  } else {
    for (int i = tid; i < n * kRows; i += kMamba2Threads) {
      const int tt = i / kRows, r = i % kRows;
      const Act* x = reinterpret_cast<const Act*>(record(tt) + p.f_x) + int64_t{h} * P + ch0 + r;
      hr.x[tt][r] = ch0 + r < P ? *x : from_float<Act>(0.0f);
    }
  }
  for (int tt = tid; tt < n; tt += kMamba2Threads) {
    cp_async<4>(&hr.dt[tt], record(tt) + p.f_dt + int64_t{h} * 4);
    cp_async<4>(&c.dA[tt], record(tt) + p.f_dA + int64_t{h} * 4);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Stages history factor records [c0, c0 + n) of a slot (record i at ring position
// (base + i) mod R): dB = B * dt and dA as the step computed them, and x of this CTA's channels.
// Vectorised as the GDN history (8 elements of B, or of x, per thread). Ends with
// __syncthreads().
template <typename Act, int N, int kChunk, int kRows>
__device__ __forceinline__ void mamba2_stage_history(Mamba2Chunk<N, kChunk, kRows>& c,
                                                     const Mamba2RecurrenceParams& p,
                                                     const char* ring, int base, int h, int vblock,
                                                     int c0, int n) {
  static_assert(N % 8 == 0 && kRows % 8 == 0, "vector staging");
  constexpr int kParts = N / 8;
  constexpr int kXParts = kRows / 8;
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = mamba2_group(p, h);
  const auto record = [&](int tt) {
    int pos = base + c0 + tt;
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  for (int i = tid; i < n * kParts; i += kMamba2Threads) {
    const int tt = i / kParts, k = (i % kParts) * 8;
    const char* rec = record(tt);
    const float dt = reinterpret_cast<const float*>(rec + p.f_dt)[h];
    float b8[8];
    load_n<Act, 8>(reinterpret_cast<const Act*>(rec + p.f_B) + int64_t{g} * N + k, b8, true);
#pragma unroll
    for (int j = 0; j < 8; ++j) b8[j] *= dt;
    *reinterpret_cast<float4*>(&c.B[tt][k]) = make_float4(b8[0], b8[1], b8[2], b8[3]);
    *reinterpret_cast<float4*>(&c.B[tt][k + 4]) = make_float4(b8[4], b8[5], b8[6], b8[7]);
  }
  // x of channels [ch0, ch0 + 8): one 16-byte load where P allows (P % 8 == 0), else scalar.
  const bool x_vec = P % 8 == 0;
  for (int i = tid; i < n * kXParts; i += kMamba2Threads) {
    const int tt = i / kXParts, r = (i % kXParts) * 8, ch = vblock * kRows + r;
    const Act* x = reinterpret_cast<const Act*>(record(tt) + p.f_x) + int64_t{h} * P + ch;
    float x8[8];
    if (x_vec && ch + 8 <= P) {
      load_n<Act, 8>(x, x8, true);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) x8[j] = ch + j < P ? to_float<Act>(x[j]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) c.x[tt][r + j] = x8[j];
  }
  for (int tt = tid; tt < n; tt += kMamba2Threads) {
    c.dA[tt] = reinterpret_cast<const float*>(record(tt) + p.f_dA)[h];
  }
  __syncthreads();
}

// The state update of one token on four state elements, S = fma(dB, x, dA * S), rounded to the
// state dtype: the one definition the step (mamba2_step) and the record application
// (mamba2_apply_raw) share, so replay gives the snapshot strategy's bits by construction.
template <typename St>
__device__ __forceinline__ void mamba2_update(float4& S, const float4& dB, float xp, float dA) {
  S.x = round_to<St>(fmaf(dB.x, xp, S.x * dA));
  S.y = round_to<St>(fmaf(dB.y, xp, S.y * dA));
  S.z = round_to<St>(fmaf(dB.z, xp, S.z * dA));
  S.w = round_to<St>(fmaf(dB.w, xp, S.w * dA));
}

// One token step on this thread's slice of the state (staged token tt); returns y for its
// channel (before D skip and gate) when kOutput.
template <typename St, int N, int kChunk, bool kOutput, int kRows>
__device__ __forceinline__ float mamba2_step(float4 (&S)[N / (4 * mamba2_lanes<N>())],
                                             const Mamba2Chunk<N, kChunk, kRows>& c, int tt, int kl,
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
    mamba2_update<St>(S[i], b, xp, dA);
    if constexpr (kOutput) {
      const float4 cc = *reinterpret_cast<const float4*>(&c.C[tt][n]);
      // y = S C as one chain of fused multiply-adds, one instruction per state element.
      acc = fmaf(S[i].w, cc.w, fmaf(S[i].z, cc.z, fmaf(S[i].y, cc.y, fmaf(S[i].x, cc.x, acc))));
    }
  }
  if constexpr (kOutput) {
#pragma unroll
    for (int m = LANES / 2; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
  }
  return acc;
}

#ifndef SPECSTATE_MAMBA2_OUT_STEP
// 1: the several-blocks replay chain's output address formed once a block and stepped a token
// at a time, and mamba2_output's multiply by a gate of 1 skipped where the layer has no gate; 0:
// the address formed every token and the multiply always run (the A/B of docs/cuda.md's
// thirty-seventh session).
#define SPECSTATE_MAMBA2_OUT_STEP 1
#endif

// Channel r's output of staged token tt from its y = S.C: the D skip, then the gate (silu(z) as
// staged). Without a gate the staging leaves z = 1, and the multiply, y * 1 = y, is skipped.
// Every launch's outputs go through it, so the strategies' outputs share their bits.
template <int N, int kChunk, int kRows>
__device__ __forceinline__ float mamba2_output(const Mamba2RecurrenceParams& p,
                                               const Mamba2Chunk<N, kChunk, kRows>& c, int tt,
                                               int r, float y, float D) {
  if (p.d_skip) y += c.x[tt][r] * D;
  if (!SPECSTATE_MAMBA2_OUT_STEP || p.gate) y *= c.z[tt][r];
  return y;
}

// mamba2_step on RPT channels a thread (r[j]: channel j within the CTA, its state S[j]): each
// staged B and C load serves every channel; per channel the same operations in the same order
// as mamba2_step (bit-identical). y[j]: channel j's S.C when kOutput, in the lanes
// mamba2_y_lane names (every lane where RPT = 1).
template <typename St, int N, int kChunk, bool kOutput, int RPT, int kRows>
__device__ __forceinline__ void mamba2_step_rows(float4 (&S)[RPT][N / (4 * mamba2_lanes<N>())],
                                                 const Mamba2Chunk<N, kChunk, kRows>& c, int tt,
                                                 int kl, const int (&r)[RPT], float (&y)[RPT]) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  const float dA = c.dA[tt];
  float xp[RPT];
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    xp[j] = c.x[tt][r[j]];
    y[j] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    const int n = i * 4 * LANES + kl * 4;
    const float4 b = *reinterpret_cast<const float4*>(&c.B[tt][n]);
    float4 cc;
    if constexpr (kOutput) cc = *reinterpret_cast<const float4*>(&c.C[tt][n]);
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      mamba2_update<St>(S[j][i], b, xp[j], dA);
      if constexpr (kOutput) {
        y[j] = fmaf(S[j][i].w, cc.w,
                    fmaf(S[j][i].z, cc.z, fmaf(S[j][i].y, cc.y, fmaf(S[j][i].x, cc.x, y[j]))));
      }
    }
  }
  if constexpr (kOutput) {
    if constexpr (RPT >= 2 && SPECSTATE_MAMBA2_Y_HALVES) {
      // By halves (a reduce-scatter): at each of the first log2(RPT) distances a lane keeps the
      // half of its channels its bit of that distance names (mamba2_y_kept) and sends its partner
      // its partials of the other half, then the kept sum runs the butterfly's remaining
      // distances. Every addition is the butterfly's, operand for operand (an IEEE sum is the
      // same bits in either order), so the kept y is the bits every lane of the butterfly holds:
      // two channels take 3 shuffles, 3 adds and 2 selects a token instead of 6 and 6, four 4
      // and 4 instead of 12 and 12. y is off the state's chain (the update does not read it).
      // Measured on an H100 (Nemotron-H-8B replay rounds, two channels, against
      // SPECSTATE_MAMBA2_Y_HALVES=0): T = 4, B = 1 / 8 / 32 / 128 0.993 / 0.981 / 0.999 / 0.998;
      // B = 128, T = 2 / 8 0.997 / 0.994.
      if constexpr (RPT == 2) {
        // Written out for two: the loop below compiles to the same operations in another
        // schedule (the SASS of the measured kernels), and this one is what was measured.
        const bool hi = mamba2_y_kept<LANES, RPT>(kl) == 1;
        float keep = hi ? y[1] : y[0];
        keep += __shfl_xor_sync(0xffffffffu, hi ? y[0] : y[1], LANES / 2);
#pragma unroll
        for (int m = LANES / 4; m > 0; m >>= 1) keep += __shfl_xor_sync(0xffffffffu, keep, m);
        y[0] = keep;
        y[1] = keep;
      } else {
#pragma unroll
        for (int half = RPT / 2, d = LANES / 2; half >= 1; half /= 2, d /= 2) {
          const bool hi = (kl & d) != 0;
#pragma unroll
          for (int i = 0; i < half; ++i) {
            const float keep = hi ? y[i + half] : y[i];
            y[i] = keep + __shfl_xor_sync(0xffffffffu, hi ? y[i] : y[i + half], d);
          }
        }
#pragma unroll
        for (int m = LANES / (2 * RPT); m > 0; m >>= 1)
          y[0] += __shfl_xor_sync(0xffffffffu, y[0], m);
#pragma unroll
        for (int j = 1; j < RPT; ++j) y[j] = y[0];
      }
    } else {
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
#pragma unroll
        for (int m = LANES / 2; m > 0; m >>= 1) y[j] += __shfl_xor_sync(0xffffffffu, y[j], m);
      }
    }
  }
}

// History record tt's dB = B * dt at state elements [n, n + 4): its raw B as prefetched into the
// chunk (mamba2_raw_b) times its dt, the product mamba2_stage_history stages.
template <typename Act, int N, int kChunk, int kRows>
__device__ __forceinline__ float4 mamba2_raw_db(const Mamba2Chunk<N, kChunk, kRows>& c, int tt,
                                                int n, float dt) {
  float4 b = load4<Act>(mamba2_raw_b<Act>(c, tt) + n);
  b.x *= dt;
  b.y *= dt;
  b.z *= dt;
  b.w *= dt;
  return b;
}

// Applies prefetched history record tt (mamba2_prefetch_history) to this thread's slice of the
// state: dB = B * dt and x as mamba2_stage_history stages them, then mamba2_update as
// mamba2_step (bit-identical).
template <typename Act, typename St, int N, int kChunk, int kRows>
__device__ __forceinline__ void mamba2_apply_raw(float4 (&S)[N / (4 * mamba2_lanes<N>())],
                                                 const Mamba2RawHistory<Act, N, kChunk, kRows>& hr,
                                                 const Mamba2Chunk<N, kChunk, kRows>& c, int tt,
                                                 int kl, int r) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  const float dA = c.dA[tt];
  const float dt = hr.dt[tt];
  const float xp = to_float<Act>(hr.x[tt][r]);
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    const float4 b = mamba2_raw_db<Act>(c, tt, i * 4 * LANES + kl * 4, dt);
    mamba2_update<St>(S[i], b, xp, dA);
  }
}

// mamba2_apply_raw on RPT channels a thread: each record's B converted and scaled by dt once
// for every channel, then mamba2_update per channel as mamba2_apply_raw (bit-identical).
template <typename Act, typename St, int N, int kChunk, int RPT, int kRows>
__device__ __forceinline__ void mamba2_apply_raw_rows(
    float4 (&S)[RPT][N / (4 * mamba2_lanes<N>())],
    const Mamba2RawHistory<Act, N, kChunk, kRows>& hr, const Mamba2Chunk<N, kChunk, kRows>& c,
    int tt, int kl, const int (&r)[RPT]) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  const float dA = c.dA[tt];
  const float dt = hr.dt[tt];
  float xp[RPT];
#pragma unroll
  for (int j = 0; j < RPT; ++j) xp[j] = to_float<Act>(hr.x[tt][r[j]]);
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    const float4 b = mamba2_raw_db<Act>(c, tt, i * 4 * LANES + kl * 4, dt);
#pragma unroll
    for (int j = 0; j < RPT; ++j) mamba2_update<St>(S[j][i], b, xp[j], dA);
  }
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

}  // namespace specstate::kernels
