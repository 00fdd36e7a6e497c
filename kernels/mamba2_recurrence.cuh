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

// Where a row's factor records go (replay): the slot's ring, window token t at ring position
// (wpos + t) % R; `b_writer`: this CTA writes the group's B, `head_writer` the head's dt and dA.
struct Mamba2FactorSink {
  char* ring = nullptr;  // the slot's records, or null: none written
  int wpos = 0;
  bool b_writer = false;
  bool head_writer = false;
};

// Stages window tokens [c0, c0 + n) of the row (token i at tok0 + i) and writes their factor
// records when `sink` says so. Ends with __syncthreads().
template <typename Act, int N, int kChunk>
__device__ __forceinline__ void mamba2_stage(Mamba2Chunk<N, kChunk>& c,
                                             const Mamba2RecurrenceParams& p, int64_t tok0, int h,
                                             int vblock, int c0, int n, float A, float dt_bias,
                                             const Mamba2FactorSink& sink, int off = 0,
                                             bool wait_async = false) {
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = h / (p.num_heads / p.n_groups);
  const int64_t b_off = int64_t{p.num_heads} * P + int64_t{g} * N;
  const int64_t c_off = b_off + int64_t{p.n_groups} * N;
  const Act* xbc = static_cast<const Act*>(p.xbc);
  const int64_t st = p.xbc_stride_token, sc = p.xbc_stride_c;
  const auto record = [&](int tt) {
    int pos = sink.wpos + c0 + tt;  // wpos < R and the window fits the ring
    if (pos >= p.ring) pos -= p.ring;
    return sink.ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  // dt and dA of each token first (thread tt), then B * dt and C.
  __shared__ float dt_s[kChunk];
  if (tid < n) {
    const int64_t tok = tok0 + c0 + tid;
    float dt = softplus(
        to_float<Act>(static_cast<const Act*>(p.dt)[tok * p.dt_stride_token + h * p.dt_stride_h]) +
        dt_bias);
    if (p.has_dt_min) dt = fmaxf(dt, p.dt_min);
    if (p.has_dt_max) dt = fminf(dt, p.dt_max);
    dt_s[tid] = dt;
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
  for (int i = tid; i < n * N; i += kMamba2Threads) {
    const int tt = i / N, k = i % N;
    const Act* base = xbc + (tok0 + c0 + tt) * st;
    const Act braw = base[(b_off + k) * sc];
    c.B[off + tt][k] = to_float<Act>(braw) * dt_s[tt];
    c.C[off + tt][k] = to_float<Act>(base[(c_off + k) * sc]);
    if (sink.ring != nullptr && sink.b_writer) {
      reinterpret_cast<Act*>(record(tt) + p.f_B)[int64_t{g} * N + k] = braw;
    }
  }
  constexpr int kRows = mamba2_rows<N>();
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

// Raw history records in shared memory (replay, a chain whose history and window fit one
// chunk): x of this CTA's channels as the records hold them (act dtype) and dt; B of the head's
// group waits in the tail of the chunk's B row (mamba2_raw_b: the window, staged from row hist
// on, leaves rows [0, hist) free), dA goes to the chunk. Copied with cp.async before the wait
// for the conv kernel.
template <typename Act, int N, int kChunk>
struct Mamba2RawHistory {
  __align__(16) Act x[kChunk][mamba2_rows<N>()];
  float dt[kChunk];
};
template <typename Act, int N, int kChunk>
__device__ __forceinline__ Act* mamba2_raw_b(Mamba2Chunk<N, kChunk>& c, int tt) {
  static_assert(sizeof(float) % sizeof(Act) == 0, "the raw B fits a float row");
  return reinterpret_cast<Act*>(&c.B[tt][0]) + N * (sizeof(float) / sizeof(Act) - 1);
}
template <typename Act, int N, int kChunk>
__device__ __forceinline__ const Act* mamba2_raw_b(const Mamba2Chunk<N, kChunk>& c, int tt) {
  return reinterpret_cast<const Act*>(&c.B[tt][0]) + N * (sizeof(float) / sizeof(Act) - 1);
}

// Starts copying history records [0, n) of a slot (record i at ring position (base + i) mod R)
// into shared memory with cp.async, issued before the wait for the conv kernel so that their
// latency overlaps the state load (as gdn_prefetch_history). The copies complete at
// mamba2_stage(..., wait_async = true); mamba2_apply_raw applies them.
template <typename Act, int N, int kChunk>
__device__ __forceinline__ void mamba2_prefetch_history(Mamba2RawHistory<Act, N, kChunk>& hr,
                                                        Mamba2Chunk<N, kChunk>& c,
                                                        const Mamba2RecurrenceParams& p,
                                                        const char* ring, int base, int h,
                                                        int vblock, int n) {
  constexpr int kRows = mamba2_rows<N>();
  static_assert((N * sizeof(Act)) % 16 == 0, "16-byte copies of B");
  constexpr int kBParts = static_cast<int>(N * sizeof(Act) / 16);
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = h / (p.num_heads / p.n_groups);
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
template <typename Act, int N, int kChunk>
__device__ __forceinline__ void mamba2_stage_history(Mamba2Chunk<N, kChunk>& c,
                                                     const Mamba2RecurrenceParams& p,
                                                     const char* ring, int base, int h, int vblock,
                                                     int c0, int n) {
  constexpr int kRows = mamba2_rows<N>();
  static_assert(N % 8 == 0 && kRows % 8 == 0, "vector staging");
  constexpr int kParts = N / 8;
  constexpr int kXParts = kRows / 8;
  const int tid = threadIdx.x;
  const int P = p.head_dim;
  const int g = h / (p.num_heads / p.n_groups);
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

// Applies prefetched history record tt (mamba2_prefetch_history) to this thread's slice of the
// state: dB = B * dt and x as mamba2_stage_history stages them, the same multiply-add as
// mamba2_step (bit-identical).
template <typename Act, typename St, int N, int kChunk>
__device__ __forceinline__ void mamba2_apply_raw(float4 (&S)[N / (4 * mamba2_lanes<N>())],
                                                 const Mamba2RawHistory<Act, N, kChunk>& hr,
                                                 const Mamba2Chunk<N, kChunk>& c, int tt, int kl,
                                                 int r) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  const float dA = c.dA[tt];
  const float dt = hr.dt[tt];
  const float xp = to_float<Act>(hr.x[tt][r]);
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    const int n = i * 4 * LANES + kl * 4;
    float4 b = load4<Act>(mamba2_raw_b<Act>(c, tt) + n);
    b.x *= dt;
    b.y *= dt;
    b.z *= dt;
    b.w *= dt;
    S[i].x = round_to<St>(fmaf(b.x, xp, S[i].x * dA));
    S[i].y = round_to<St>(fmaf(b.y, xp, S[i].y * dA));
    S[i].z = round_to<St>(fmaf(b.z, xp, S[i].z * dA));
    S[i].w = round_to<St>(fmaf(b.w, xp, S[i].w * dA));
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

// The shared memory of one CTA. Merged history records (replay chains), as the records hold
// them: not where the static shared memory would pass 48 KiB (kMerge false: the history is then
// staged before the wait in a chunk of its own). A tree without snapshots restarts branches from
// the row's start state (post history): in shared memory, or in registers for N = 256 (the chunk
// fills shared memory there). next_state (kMulti): the next channel block's state.
template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree, bool kMulti>
struct Mamba2Shared {
  static constexpr int kRows = mamba2_rows<N>();
  static constexpr bool kMerge = kReplay && !kTree &&
                                 sizeof(Mamba2Chunk<N, kChunk>) +
                                         sizeof(Mamba2RawHistory<Act, N, kChunk>) +
                                         (kMulti ? kRows * N * sizeof(St) : 0) <=
                                     44 * 1024;
  static constexpr bool kStartInRegs = N > 128;
  Mamba2Chunk<N, kChunk> chunk;
  Mamba2RawHistory<Act, N, kMerge ? kChunk : 1> hist_raw;
  __align__(16) float start_state[kReplay && kTree && !kStartInRegs ? kRows * N : 4];
  __align__(16) St next_state[kMulti ? kRows * N : 4];
};

// One (row, head, channel block) of the launch: channels [vblock * kRows, +kRows) of head h,
// with the layer's gate parameters already loaded.
template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree, typename Shared>
__device__ __forceinline__ void mamba2_row_block(const Mamba2RecurrenceParams& p, Shared& sm,
                                                 int vblock, float a_log, float dt_bias, float D) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  static_assert(NK >= 1 && N % (4 * LANES) == 0, "N must be 16 or a multiple of 32");
  constexpr int kRows = mamba2_rows<N>();
  constexpr bool kMerge = Shared::kMerge;
  constexpr bool kStartInRegs = Shared::kStartInRegs;
  auto& chunk = sm.chunk;
  auto& hist_raw = sm.hist_raw;
  float* const start_state = sm.start_state;
  float4 start_regs[kStartInRegs ? NK : 1];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kl = lane % LANES;
  const int r = warp * (32 / LANES) + lane / LANES;  // channel within the CTA
  const int P = p.head_dim;
  const int ch = vblock * kRows + r;
  const bool ok = ch < P;
  const int h = blockIdx.y;
  const int rr = blockIdx.z;
  const int row = p.row_begin + rr;
  const int slot = p.slots ? p.slots[row] : p.slot_inline[rr];
  if (slot < 0) return;  // padding row: no state read, nothing written (uniform over the CTA)
  const int64_t head_off = (int64_t{h} * P + (ok ? ch : 0)) * N;
  St* committed = static_cast<St*>(p.state) + slot * p.state_stride_slot + head_off;
  float4 S[NK];
  mamba2_load<St, NK, LANES>(S, committed, kl, ok);

  // Replay history (DESIGN.md section 6), before the wait for the conv grid (nothing of it is
  // written by the conv kernel).
  int wpos = 0;
  // A chain whose history and window fit one chunk copies its history records into shared memory
  // now (cp.async) and applies them after the wait, staged with the window (one prologue and one
  // barrier pair, as the GDN recurrence does).
  int merged_hist = 0;
  bool merged_store = false;
  if constexpr (kReplay) {
    if (p.cursor != nullptr) {
      const int base = p.cursor[2 * slot];
      int hist = p.cursor[2 * slot + 1];
      wpos = base + hist;  // base < R and hist < R
      if (wpos >= p.ring) wpos -= p.ring;
      const bool folds = p.fold && hist > p.fold_limit;
      if (p.settled && folds) hist = 0;
      const char* ring = p.factors + slot * p.factor_stride_slot;
      const int count = row_tokens(p.varlen, row, p.tokens).count;
      const bool store = p.fold ? folds && !p.settled
                                : hist > 0 && (p.store_replayed || (p.store_final && count == 0));
      if (kMerge && p.parents == nullptr && hist > 0 && count > 0 && hist + count <= kChunk) {
        merged_hist = hist;
        merged_store = store;
        if constexpr (kMerge) {
          mamba2_prefetch_history<Act, N, kChunk>(hist_raw, chunk, p, ring, base, h, vblock, hist);
        }
        hist = 0;
      }
      for (int c0 = 0; c0 < hist; c0 += kChunk) {
        const int m = min(kChunk, hist - c0);
        mamba2_stage_history<Act, N, kChunk>(chunk, p, ring, base, h, vblock, c0, m);
        for (int tt = 0; tt < m; ++tt) mamba2_step<St, N, kChunk, false>(S, chunk, tt, kl, r);
        __syncthreads();
      }
      if (store && merged_hist == 0 && ok) mamba2_store<St, NK, LANES>(committed, S, kl, false);
    }
  }

  // The conv outputs are read only after the preceding conv grid completed.
  grid_dependency_wait();
  if (p.tokens == 0) return;  // materialize: history only
  const float A = p.A_log ? -expf(a_log) : 0.0f;

  Act* out = static_cast<Act*>(p.out);
  St* snap_row = p.snap ? static_cast<St*>(p.snap) + row * p.snap_stride_row + head_off : nullptr;
  const bool recompute = kReplay && kTree && p.parents != nullptr && p.snap == nullptr;
  float* start_mine = start_state + (kReplay && kTree && !kStartInRegs ? r * N : 0);
  if (recompute) {
#pragma unroll
    for (int i = 0; i < NK; ++i) {
      if constexpr (kStartInRegs) {
        start_regs[i] = S[i];
      } else {
        *reinterpret_cast<float4*>(start_mine + i * 4 * LANES + kl * 4) = S[i];
      }
    }
  }

  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  const int64_t row_token0 = rt.begin;                  // inputs and outputs
  const int64_t row_parent0 = int64_t{row} * p.tokens;  // parents: [rows, tokens]
  Mamba2FactorSink sink;
  if (kReplay && p.write_factors && p.factors != nullptr) {
    sink.ring = p.factors + slot * p.factor_stride_slot;
    sink.wpos = wpos;
    sink.head_writer = vblock == 0;
    sink.b_writer = vblock == 0 && h % (p.num_heads / p.n_groups) == 0;
  }
  for (int c0 = 0; c0 < rt.count;) {
    // A tree without snapshots needs its whole window in one chunk (tokens <= kChunk).
    const int m = min(kChunk, rt.count - c0);
    const int off = c0 == 0 ? merged_hist : 0;  // history slots before the window's
    mamba2_stage<Act, N, kChunk>(chunk, p, row_token0, h, vblock, c0, m, A, dt_bias, sink, off,
                                 off > 0);
    if constexpr (kMerge) {
      for (int tt = 0; tt < off; ++tt) {
        mamba2_apply_raw<Act, St, N, kChunk>(S, hist_raw, chunk, tt, kl, r);
      }
    }
    if (off > 0) {
      if (merged_store && ok) mamba2_store<St, NK, LANES>(committed, S, kl, false);
    }
    for (int tt = 0; tt < m; ++tt) {
      const int t = c0 + tt;
      if (p.parents != nullptr && t > 0) {
        const int parent = p.parents[row_parent0 + t];
        if (parent != t - 1) {
          if (!recompute) {
            mamba2_load<St, NK, LANES>(S, snap_row + parent * p.snap_stride_t, kl, ok);
          } else {
            // The row's start state along root..parent.
            uint32_t path = 0;
            for (int a = parent; a >= 0; a = p.parents[row_parent0 + a]) path |= 1u << a;
#pragma unroll
            for (int i = 0; i < NK; ++i) {
              if constexpr (kStartInRegs) {
                S[i] = start_regs[i];
              } else {
                S[i] = *reinterpret_cast<const float4*>(start_mine + i * 4 * LANES + kl * 4);
              }
            }
            while (path != 0) {
              const int a = __ffs(path) - 1;
              path &= path - 1;
              mamba2_step<St, N, kChunk, false>(S, chunk, off + a - c0, kl, r);
            }
          }
        }
      }
      float y = mamba2_step<St, N, kChunk, true>(S, chunk, off + tt, kl, r);
      if (snap_row != nullptr && ok) {
        mamba2_store<St, NK, LANES>(snap_row + t * p.snap_stride_t, S, kl, true);
      }
      if (kl == 0 && ok) {
        if (p.d_skip) y += chunk.x[off + tt][r] * D;
        y *= chunk.z[off + tt][r];
        out[(row_token0 + t) * p.out_stride_token + h * p.out_stride_h + ch * p.out_stride_p] =
            from_float<Act>(y);
      }
    }
    __syncthreads();  // the next chunk's staging overwrites the shared arrays
    c0 += m;
  }
  if (p.store_final && rt.count > 0 && ok) mamba2_store<St, NK, LANES>(committed, S, kl, false);
}

// A replay chain row over several channel blocks of one head (p.vblocks > 1, as the GDN
// recurrence's gdn_replay_vblocks): dt, dA, B * dt and C of the window are staged once for every
// block, the history's B * dt formed once, the next block's state copied into shared memory
// (cp.async) while the current one computes, and only x and the gate are staged per block. Every
// block's arithmetic is mamba2_row_block's (the same mamba2_step, the same order): bit-identical.
// Returns false, having written nothing, where the row does not fit this path (the caller then
// runs mamba2_row_block per block).
template <typename Act, typename St, int N, int kChunk, typename Shared>
__device__ __forceinline__ bool mamba2_replay_vblocks(const Mamba2RecurrenceParams& p, Shared& sm,
                                                      float a_log, float dt_bias, float D) {
  if constexpr (!Shared::kMerge) {
    return false;
  } else {
    constexpr int LANES = mamba2_lanes<N>();
    constexpr int NK = N / (4 * LANES);
    constexpr int kRows = mamba2_rows<N>();
    constexpr int kPre = (2 * kChunk * kRows + kMamba2Threads - 1) / kMamba2Threads;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kl = lane % LANES;
    const int r = warp * (32 / LANES) + lane / LANES;  // channel within the block
    const int P = p.head_dim;
    const int nblk = (P + kRows - 1) / kRows;
    const int vb0 = blockIdx.x * p.vblocks;
    const int nvb = min(p.vblocks, nblk - vb0);
    const int h = blockIdx.y;
    const int rr = blockIdx.z;
    const int row = p.row_begin + rr;
    if (p.cursor == nullptr || p.snap != nullptr || p.parents != nullptr) return false;
    const int slot = p.slots ? p.slots[row] : p.slot_inline[rr];
    if (slot < 0) return false;
    const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
    const int base = p.cursor[2 * slot];
    int hist = p.cursor[2 * slot + 1];
    int wpos = base + hist;  // base < R and hist < R
    if (wpos >= p.ring) wpos -= p.ring;
    const bool folds = p.fold && hist > p.fold_limit;
    if (p.settled && folds) hist = 0;
    if (rt.count <= 0 || hist + rt.count > kChunk) return false;
    // As mamba2_row_block with a window (count > 0).
    const bool store = p.fold ? folds && !p.settled : hist > 0 && p.store_replayed;
    const char* ring = p.factors + slot * p.factor_stride_slot;
    St* const head_state =
        static_cast<St*>(p.state) + slot * p.state_stride_slot + int64_t{h} * P * N;
    int ch = vb0 * kRows + r;
    bool ok = ch < P;
    if (hist > 0) {
      mamba2_prefetch_history<Act, N, kChunk>(sm.hist_raw, sm.chunk, p, ring, base, h, vb0, hist);
    }
    float4 S[NK];
    mamba2_load<St, NK, LANES>(S, head_state + int64_t{ok ? ch : 0} * N, kl, ok);
    grid_dependency_wait();

    const float A = p.A_log ? -expf(a_log) : 0.0f;
    Mamba2FactorSink sink;
    if (p.write_factors && p.factors != nullptr) {
      sink.ring = p.factors + slot * p.factor_stride_slot;
      sink.wpos = wpos;
      sink.head_writer = vb0 == 0;
      sink.b_writer = vb0 == 0 && h % (p.num_heads / p.n_groups) == 0;
    }
    mamba2_stage<Act, N, kChunk>(sm.chunk, p, rt.begin, h, vb0, 0, rt.count, A, dt_bias, sink, hist,
                                 hist > 0);
    const auto record = [&](int tt) {  // history record tt
      int pos = base + tt;
      if (pos >= p.ring) pos -= p.ring;
      return ring + static_cast<int64_t>(pos) * p.factor_bytes;
    };
    if (hist > 0) {
      // dB = B * dt of every history record once (mamba2_apply_raw's product, for mamba2_step),
      // in place in chunk rows [0, hist) (mamba2_raw_b), and x of the first block as a float.
      // A warp converts whole rows: it reads the raw row, then (after __syncwarp, the raw row
      // and the float row overlap) writes the float row.
      constexpr int kParts = N / 4;
      constexpr int kPerLane = (kParts + 31) / 32;
      for (int tt = warp; tt < hist; tt += kMamba2Threads / 32) {
        const float dt = sm.hist_raw.dt[tt];
        float4 b4[kPerLane];
#pragma unroll
        for (int q = 0; q < kPerLane; ++q) {
          const int e = (lane + 32 * q) * 4;
          if (e < N) {
            b4[q] = load4<Act>(mamba2_raw_b<Act>(sm.chunk, tt) + e);
            b4[q].x *= dt;
            b4[q].y *= dt;
            b4[q].z *= dt;
            b4[q].w *= dt;
          }
        }
        __syncwarp();
#pragma unroll
        for (int q = 0; q < kPerLane; ++q) {
          const int e = (lane + 32 * q) * 4;
          if (e < N) *reinterpret_cast<float4*>(&sm.chunk.B[tt][e]) = b4[q];
        }
      }
      for (int i = tid; i < hist * kRows; i += kMamba2Threads) {
        sm.chunk.x[i / kRows][i % kRows] = to_float<Act>(sm.hist_raw.x[i / kRows][i % kRows]);
      }
      __syncthreads();
    }

    Act* const out = static_cast<Act*>(p.out);
    const Act* const xbc = static_cast<const Act*>(p.xbc);
    const int nx = (hist + rt.count) * kRows;  // x rows of a block: history, then window
    const int nz = rt.count * kRows;           // gate rows of a block
    St* const next_mine = sm.next_state + r * N;
#pragma unroll 1
    for (int j = 0; j < nvb; ++j) {
      const int vb = vb0 + j;
      const bool more = j + 1 < nvb;
      float pre[kPre];
      for (int tt = 0; tt < hist; ++tt) mamba2_step<St, N, kChunk, false>(S, sm.chunk, tt, kl, r);
      if (store && ok) mamba2_store<St, NK, LANES>(head_state + int64_t{ch} * N, S, kl, false);
      if (more) {
        // The next block's x (history records, then the window's, whose records this block
        // writes) and gate into registers while this one computes; x = 0 and gate 1 past P.
#pragma unroll
        for (int q = 0; q < kPre; ++q) {
          const int i = tid + q * kMamba2Threads;
          pre[q] = 0.0f;
          if (i < nx) {
            const int tt = i / kRows, chn = (vb + 1) * kRows + i % kRows;
            if (chn < P) {
              if (tt < hist) {
                pre[q] = to_float<Act>(
                    reinterpret_cast<const Act*>(record(tt) + p.f_x)[int64_t{h} * P + chn]);
              } else {
                const int t = tt - hist;
                const Act xraw = xbc[(rt.begin + t) * p.xbc_stride_token +
                                     (int64_t{h} * P + chn) * p.xbc_stride_c];
                pre[q] = to_float<Act>(xraw);
                if (sink.ring != nullptr) {
                  int pos = wpos + t;
                  if (pos >= p.ring) pos -= p.ring;
                  reinterpret_cast<Act*>(sink.ring + static_cast<int64_t>(pos) * p.factor_bytes +
                                         p.f_x)[int64_t{h} * P + chn] = xraw;
                }
              }
            }
          } else if (i < nx + nz) {
            const int t = (i - nx) / kRows, chn = (vb + 1) * kRows + (i - nx) % kRows;
            pre[q] = 1.0f;
            if (chn < P && p.gate) {
              const float zz = to_float<Act>(static_cast<const Act*>(
                  p.z)[(rt.begin + t) * p.z_stride_token + (int64_t{h} * P + chn) * p.z_stride_c]);
              pre[q] = zz * sigmoid(zz);
            }
          }
        }
      }
      for (int t = 0; t < rt.count; ++t) {
        float y = mamba2_step<St, N, kChunk, true>(S, sm.chunk, hist + t, kl, r);
        if (t == 0 && more) {
          // The next block's state into shared memory (this thread's own elements, read back by
          // this thread only), issued after a step has consumed S (next_state has been read).
          const int chn = ch + kRows;
          if (chn < P) {
            const St* src = head_state + int64_t{chn} * N;
#pragma unroll
            for (int i = 0; i < NK; ++i) {
              cp_async<4 * sizeof(St)>(next_mine + i * 4 * LANES + kl * 4,
                                       src + i * 4 * LANES + kl * 4);
            }
          }
          asm volatile("cp.async.commit_group;" ::: "memory");
        }
        if (kl == 0 && ok) {
          if (p.d_skip) y += sm.chunk.x[hist + t][r] * D;
          y *= sm.chunk.z[hist + t][r];
          out[(rt.begin + t) * p.out_stride_token + h * p.out_stride_h + ch * p.out_stride_p] =
              from_float<Act>(y);
        }
      }
      if (p.store_final && ok) {
        mamba2_store<St, NK, LANES>(head_state + int64_t{ch} * N, S, kl, false);
      }
      if (more) {
        __syncthreads();  // every thread is done with this block's staged rows
#pragma unroll
        for (int q = 0; q < kPre; ++q) {
          const int i = tid + q * kMamba2Threads;
          if (i < nx) {
            sm.chunk.x[i / kRows][i % kRows] = pre[q];
          } else if (i < nx + nz) {
            sm.chunk.z[hist + (i - nx) / kRows][(i - nx) % kRows] = pre[q];
          }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        ch += kRows;
        ok = ch < P;
        mamba2_load<St, NK, LANES>(S, next_mine, kl, ok);
      }
    }
    return true;
  }
}

#ifndef SPECSTATE_MAMBA2_MULTI_MIN_CTAS
#define SPECSTATE_MAMBA2_MULTI_MIN_CTAS 7  // CTAs per SM the kMulti instantiation is compiled for
#endif
// kReplay: the instantiation that may apply history records (replay, DESIGN.md section 6) or
// recompute tree states. kMulti: a replay chain over p.vblocks channel blocks per CTA.
template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree = false,
          bool kMulti = false>
__global__ void __launch_bounds__(kMamba2Threads, kMulti     ? SPECSTATE_MAMBA2_MULTI_MIN_CTAS
                                                  : N <= 128 ? 8
                                                             : 4)
    mamba2_recurrence_kernel(const __grid_constant__ Mamba2RecurrenceParams p) {
  static_assert(!kMulti || (kReplay && !kTree), "a replay chain");
  __shared__ Mamba2Shared<Act, St, N, kChunk, kReplay, kTree, kMulti> sm;
  const int h = blockIdx.y;
  // The layer's gate parameters: written by nobody in the round and independent of the slot, so
  // their loads are issued first (their latency overlaps the slot's and the state's).
  const float a_log = p.A_log ? load_any(p.A_log, p.a_log_dtype, h * p.a_log_stride) : 0.0f;
  const float dt_bias =
      p.dt_bias ? load_any(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride) : 0.0f;
  const float D = p.d_skip && p.D ? load_any(p.D, p.d_dtype, h * p.d_stride) : 0.0f;
  if constexpr (kMulti) {
    if (mamba2_replay_vblocks<Act, St, N, kChunk>(p, sm, a_log, dt_bias, D)) return;
    constexpr int kRows = mamba2_rows<N>();
    const int nblk = (p.head_dim + kRows - 1) / kRows;
    const int vb0 = blockIdx.x * p.vblocks;
    const int nvb = min(p.vblocks, nblk - vb0);
#pragma unroll 1
    for (int j = 0; j < nvb; ++j) {
      if (j > 0) __syncthreads();  // the shared arrays are reused
      mamba2_row_block<Act, St, N, kChunk, kReplay, kTree>(p, sm, vb0 + j, a_log, dt_bias, D);
    }
  } else {
    mamba2_row_block<Act, St, N, kChunk, kReplay, kTree>(p, sm, blockIdx.x, a_log, dt_bias, D);
  }
}

template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree = false,
          bool kMulti = false>
cudaError_t launch_mamba2_shape(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  constexpr int kRows = mamba2_rows<N>();
  const int nblk = (p.head_dim + kRows - 1) / kRows;
  const int vblocks = kMulti ? p.vblocks : 1;
  return launch_after_conv(mamba2_recurrence_kernel<Act, St, N, kChunk, kReplay, kTree, kMulti>,
                           dim3((nblk + vblocks - 1) / vblocks, p.num_heads, p.rows),
                           dim3(kMamba2Threads), p, stream);
}

template <typename Act, typename St, int N>
cudaError_t launch_mamba2_n(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  if (p.cursor != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
    if (p.parents != nullptr) {
      return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, true>(p, stream);
    }
    if constexpr (N >= 32 && N <= 128) {
      Mamba2RecurrenceParams q = p;
      q.vblocks = replay_vblocks_for(p.rows, p.num_heads,
                                     (p.head_dim + mamba2_rows<N>() - 1) / mamba2_rows<N>(), 24,
                                     "SPECSTATE_MAMBA2_VBLOCKS");
      if (q.vblocks > 1) {
        return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, false, true>(q, stream);
      }
    }
    return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, false>(p, stream);
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
