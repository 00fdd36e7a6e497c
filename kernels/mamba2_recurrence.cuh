// Kernel of launch_mamba2_recurrence (see mamba2_recurrence.h) and its launchers, DESIGN.md
// section 3. The work split, the staging and the token step shared by every launch:
// mamba2_step.cuh.
#pragma once

#include "mamba2_step.cuh"

namespace specstate::kernels {

// The shared memory of one CTA. Merged history records (replay chains), as the records hold
// them: not where the static shared memory would pass 48 KiB (kMerge false: the history is then
// staged before the wait in a chunk of its own). A tree without snapshots restarts branches from
// the row's start state (post history): in shared memory, or in registers for N = 256 (the chunk
// fills shared memory there). next_state (kMulti): the next channel block's state. RPT: channels
// a thread (mamba2_chain_rows), the CTA's channels kRows = mamba2_rows<N>() * RPT.
template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree, bool kMulti,
          int RPT = 1>
struct Mamba2Shared {
  static constexpr int kRows = mamba2_rows<N>() * RPT;
  static constexpr bool kMerge = kReplay && !kTree &&
                                 sizeof(Mamba2Chunk<N, kChunk, kRows>) +
                                         sizeof(Mamba2RawHistory<Act, N, kChunk, kRows>) +
                                         (kMulti ? kRows * N * sizeof(St) : 0) <=
                                     44 * 1024;
  static constexpr bool kStartInRegs = N > 128;
  Mamba2Chunk<N, kChunk, kRows> chunk;
  Mamba2RawHistory<Act, N, kMerge ? kChunk : 1, kRows> hist_raw;
  __align__(16) float start_state[kReplay && kTree && !kStartInRegs ? kRows * N : 4];
  __align__(16) St next_state[kMulti ? kRows * N : 4];
  // kMulti: the next channel block's x (history records, then the window) and gate input as
  // the records and the inputs hold them (act dtype), copied while the current block computes
  // (mamba2_copy_rows) and converted into the chunk between the blocks.
  __align__(16) Act x_next[kMulti ? kChunk : 1][kMulti ? kRows : 8];
  __align__(16) Act z_next[kMulti ? kChunk : 1][kMulti ? kRows : 8];
};

// Copies rows [t0, t0 + n) of a channel block's kRows act values into dst[t0 .. t0 + n): row tt
// from src(tt) (channel stride 1 where `vec`, else `stride_c`). `vec`: every row is a 16-byte
// aligned, whole run (cp.async, completed by the caller's cp.async.wait_all); otherwise plain
// loads, channels from `valid` on read as zero.
template <typename Act, int kRows, int kChunk, typename Src>
__device__ __forceinline__ void mamba2_copy_rows(Act (&dst)[kChunk][kRows], int t0, int n,
                                                 const Src& src, bool vec, int64_t stride_c,
                                                 int valid) {
  static_assert((kRows * sizeof(Act)) % 16 == 0, "16-byte parts of a row");
  constexpr int kParts = static_cast<int>(kRows * sizeof(Act) / 16);
  if (vec) {
    for (int i = threadIdx.x; i < n * kParts; i += kMamba2Threads) {
      const int tt = t0 + i / kParts, part = i % kParts;
      cp_async<16>(reinterpret_cast<char*>(&dst[tt][0]) + part * 16,
                   reinterpret_cast<const char*>(src(tt)) + part * 16);
    }
  } else {
    for (int i = threadIdx.x; i < n * kRows; i += kMamba2Threads) {
      const int tt = t0 + i / kRows, r = i % kRows;
      dst[tt][r] = r < valid ? src(tt)[r * stride_c] : from_float<Act>(0.0f);
    }
  }
}

// One (row, head, channel block) of the launch: channels [vblock * kRows, +kRows) of head h,
// with the layer's gate parameters already loaded.
// kBatched / kVecBC: the staging's variant (mamba2_stage): the per-block kernels take the vector
// B and C, the several-blocks kernel's fallback the batched staging of its own chain where that
// leaves one staging body with fewer spills (ptxas: f32 states from N = 128, 96 -> 88 bytes; at
// N = 32 / 64 and with bf16 states it spilled more, so the element loop stays there).
template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree, bool kBatched,
          bool kVecBC, typename Shared>
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
  const int row = rr;
  const int slot = p.slots ? p.slots[row] : p.slot_inline[rr];
  if (slot < 0) {
    // A padding row: no state read, nothing written (uniform over the CTA). It still waits for
    // the grid before it, so that this grid never completes before that one (common.cuh).
    grid_dependency_wait();
    return;
  }
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
      const int count = row_tokens(p.varlen, row, p.tokens).count;
      const ReplayCursor cur = replay_cursor(p, slot, count);
      const int base = cur.base;
      int hist = cur.hist;
      wpos = cur.wpos;
      const bool store = cur.store;
      const char* ring = p.factors + slot * p.factor_stride_slot;
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
    sink.b_writer = vblock == 0 && mamba2_group_leader(p, h);
  }
  for (int c0 = 0; c0 < rt.count;) {
    // A tree without snapshots needs its whole window in one chunk (tokens <= kChunk).
    const int m = min(kChunk, rt.count - c0);
    const int off = c0 == 0 ? merged_hist : 0;  // history slots before the window's
    mamba2_stage<Act, N, kChunk, kBatched, kVecBC>(chunk, p, row_token0, h, vblock, c0, m, A,
                                                   dt_bias, sink, off, off > 0);
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
        y = mamba2_output(p, chunk, off + tt, r, y, D);
        out[(row_token0 + t) * p.out_stride_token + h * p.out_stride_h + ch * p.out_stride_p] =
            from_float<Act>(y);
      }
    }
    __syncthreads();  // the next chunk's staging overwrites the shared arrays
    c0 += m;
  }
  if (p.store_final && rt.count > 0 && ok) mamba2_store<St, NK, LANES>(committed, S, kl, false);
}

// mamba2_row_block for a replay chain with RPT channels a thread (2 or 4: channels r,
// r + mamba2_rows<N>(), ... of the block): each staged B and C load (mamba2_step_rows) and each
// merged history record's B * dt (mamba2_apply_raw_rows) serve every channel of the thread; per
// channel the same operations in the same order (bit-identical). Decode, prefill and verify chains;
// no trees, no snapshots (the launcher's kernels::mamba2_rpt path). A function of its own rather
// than an RPT parameter of mamba2_row_block: that one, written over arrays of RPT channels, was
// 1-2% slower at one channel a thread (H100, Nemotron-H rounds at every batch; its scheduling and
// spills moved).
//
// kLaneStore (the one-block kernel's): a token's outputs are stored by lane mamba2_y_lane(j) of
// each channel group, channel j (the lane mamba2_step_rows leaves channel j's y in), one predicated
// store a token from an address formed once a chunk, and the token loop is unrolled by two. The
// per-token 64-bit address arithmetic of lane 0's two stores was about 40 of the loop's
// instructions. Measured on an H100 (Nemotron-H-8B replay rounds; this kernel runs below 24
// CTAs an SM, B <= 24 at 128 heads: T = 4 / 8, B = 8 0.965 / 0.961; T = 8, B = 1 0.949; T = 2,
// B = 1 1.023). The
// several-blocks kernel (mamba2_replay_vblocks) stores the same way, its address formed every
// token instead (held across its blocks, it spilled at the 128-register cap and cost 5.5-7%):
// B >= 32 0.95-0.99x (docs/cuda.md, twenty-second and twenty-third sessions).
template <typename Act, typename St, int N, int kChunk, int RPT, bool kLaneStore = false,
          typename Shared>
__device__ __forceinline__ void mamba2_chain_rows(const Mamba2RecurrenceParams& p, Shared& sm,
                                                  int vblock, float a_log, float dt_bias, float D) {
  constexpr int LANES = mamba2_lanes<N>();
  constexpr int NK = N / (4 * LANES);
  constexpr int kRowsBase = mamba2_rows<N>();
  constexpr int kRows = kRowsBase * RPT;
  static_assert(Shared::kRows == kRows, "the shared arrays' channels");
  constexpr bool kMerge = Shared::kMerge;
  auto& chunk = sm.chunk;
  auto& hist_raw = sm.hist_raw;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kl = lane % LANES;
  const int P = p.head_dim;
  int r[RPT], ch[RPT];
  bool ok[RPT];
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    r[j] = warp * (32 / LANES) + lane / LANES + j * kRowsBase;
    ch[j] = vblock * kRows + r[j];
    ok[j] = ch[j] < P;
  }
  const int h = blockIdx.y;
  const int row = blockIdx.z;
  const int slot = p.slots ? p.slots[row] : p.slot_inline[row];
  if (slot < 0) {
    grid_dependency_wait();  // a padding row (mamba2_row_block)
    return;
  }
  St* committed[RPT];
  float4 S[RPT][NK];
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    committed[j] = static_cast<St*>(p.state) + slot * p.state_stride_slot +
                   (int64_t{h} * P + (ok[j] ? ch[j] : 0)) * N;
    mamba2_load<St, NK, LANES>(S[j], committed[j], kl, ok[j]);
  }
  const auto store_all = [&] {
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      if (ok[j]) mamba2_store<St, NK, LANES>(committed[j], S[j], kl, false);
    }
  };

  // Replay history before the wait for the conv grid, merged with the window where both fit a
  // chunk (mamba2_row_block).
  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  int wpos = 0, merged_hist = 0;
  bool merged_store = false;
  if (p.cursor != nullptr) {
    const ReplayCursor cur = replay_cursor(p, slot, rt.count);
    const int base = cur.base;
    int hist = cur.hist;
    wpos = cur.wpos;
    const char* ring = p.factors + slot * p.factor_stride_slot;
    if (kMerge && hist > 0 && rt.count > 0 && hist + rt.count <= kChunk) {
      merged_hist = hist;
      merged_store = cur.store;
      if constexpr (kMerge) {
        mamba2_prefetch_history<Act, N, kChunk>(hist_raw, chunk, p, ring, base, h, vblock, hist);
      }
      hist = 0;
    }
    for (int c0 = 0; c0 < hist; c0 += kChunk) {
      const int m = min(kChunk, hist - c0);
      mamba2_stage_history<Act, N, kChunk>(chunk, p, ring, base, h, vblock, c0, m);
      float unused[RPT];
      for (int tt = 0; tt < m; ++tt) {
        mamba2_step_rows<St, N, kChunk, false, RPT>(S, chunk, tt, kl, r, unused);
      }
      __syncthreads();
    }
    if (cur.store && merged_hist == 0) store_all();
  }

  grid_dependency_wait();
  if (p.tokens == 0) return;  // materialize: history only
  const float A = p.A_log ? -expf(a_log) : 0.0f;
  Act* out = static_cast<Act*>(p.out);
  // kLaneStore: the lane's channel (the one of its RPT it stores), and token 0's output address for
  // it (indexed by the token; stepped a token at a time instead, as mamba2_replay_vblocks does, the
  // rounds at T = 4, B = 8 were 1.038x slower: H100, thirty-seventh session).
  int jm = 0;  // the channel this lane stores (of its RPT; lane mamba2_y_lane(jm))
#pragma unroll
  for (int j = 1; j < RPT; ++j) {
    if (kl == mamba2_y_lane<LANES, RPT>(j)) jm = j;
  }
  const auto mine = [&](const auto& a) {  // a[jm] without indexing the array by a variable
    auto v = a[0];
#pragma unroll
    for (int j = 1; j < RPT; ++j) {
      if (jm == j) v = a[j];
    }
    return v;
  };
  const int rm = mine(r);
  const bool store_mine = (kl == 0 || jm != 0) && mine(ok);
  Act* const out_mine =
      out + rt.begin * p.out_stride_token + h * p.out_stride_h + int64_t{mine(ch)} * p.out_stride_p;
  Mamba2FactorSink sink;
  if (p.write_factors && p.factors != nullptr) {
    sink.ring = p.factors + slot * p.factor_stride_slot;
    sink.wpos = wpos;
    sink.head_writer = vblock == 0;
    sink.b_writer = vblock == 0 && mamba2_group_leader(p, h);
  }
  for (int c0 = 0; c0 < rt.count;) {
    const int m = min(kChunk, rt.count - c0);
    const int off = c0 == 0 ? merged_hist : 0;  // history slots before the window's
    mamba2_stage<Act, N, kChunk, false, true>(chunk, p, rt.begin, h, vblock, c0, m, A, dt_bias,
                                              sink, off, off > 0);
    if constexpr (kMerge) {
      for (int tt = 0; tt < off; ++tt) {
        mamba2_apply_raw_rows<Act, St, N, kChunk, RPT>(S, hist_raw, chunk, tt, kl, r);
      }
    }
    if (off > 0 && merged_store) store_all();
    if constexpr (kLaneStore) {
#pragma unroll 2
      for (int tt = 0; tt < m; ++tt) {
        float y[RPT];
        mamba2_step_rows<St, N, kChunk, true, RPT>(S, chunk, off + tt, kl, r, y);
        if (store_mine) {
          const float ym = mamba2_output(p, chunk, off + tt, rm, mine(y), D);
          out_mine[(c0 + tt) * p.out_stride_token] = from_float<Act>(ym);
        }
      }
    } else {
      for (int tt = 0; tt < m; ++tt) {
        const int t = c0 + tt;
        float y[RPT];
        mamba2_step_rows<St, N, kChunk, true, RPT>(S, chunk, off + tt, kl, r, y);
#pragma unroll
        for (int j = 0; j < RPT; ++j) {
          if (kl == mamba2_y_lane<LANES, RPT>(j) && ok[j]) {
            const float yj = mamba2_output(p, chunk, off + tt, r[j], y[j], D);
            out[(rt.begin + t) * p.out_stride_token + h * p.out_stride_h + ch[j] * p.out_stride_p] =
                from_float<Act>(yj);
          }
        }
      }
    }
    __syncthreads();  // the next chunk's staging overwrites the shared arrays
    c0 += m;
  }
  if (p.store_final && rt.count > 0) store_all();
}

// A replay chain row over several channel blocks of one head (p.vblocks > 1, as the GDN
// recurrence's gdn_replay_vblocks): dt, dA, B * dt and C of the window are staged once for every
// block, the history's B * dt formed once, the next block's state copied into shared memory
// (cp.async) while the current one computes, and only x and the gate are staged per block. Every
// block's arithmetic is mamba2_row_block's (the same mamba2_step, the same order): bit-identical.
// Returns false, having written nothing, where the row does not fit this path (the caller then
// runs mamba2_row_block per block).
template <typename Act, typename St, int N, int kChunk, int RPT = 1, typename Shared>
__device__ __forceinline__ bool mamba2_replay_vblocks(const Mamba2RecurrenceParams& p, Shared& sm,
                                                      float a_log, float dt_bias, float D) {
  if constexpr (!Shared::kMerge) {
    return false;
  } else {
    constexpr int LANES = mamba2_lanes<N>();
    constexpr int NK = N / (4 * LANES);
    constexpr int kRowsBase = mamba2_rows<N>();
    constexpr int kRows = kRowsBase * RPT;  // channels of a block
    static_assert(Shared::kRows == kRows, "the shared arrays' channels");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kl = lane % LANES;
    int r[RPT];  // this thread's channels within the block
#pragma unroll
    for (int j = 0; j < RPT; ++j) r[j] = warp * (32 / LANES) + lane / LANES + j * kRowsBase;
    const int P = p.head_dim;
    const int h = blockIdx.y;
    ReplayBlocks b;
    if (!replay_blocks<kChunk>(p, (P + kRows - 1) / kRows, b)) return false;
    const int vb0 = b.vb0, nvb = b.nvb, slot = b.slot;
    const RowTokens rt = b.rt;
    const int base = b.cur.base, hist = b.cur.hist, wpos = b.cur.wpos;
    const bool store = b.cur.store;
    const char* ring = p.factors + slot * p.factor_stride_slot;
    St* const head_state =
        static_cast<St*>(p.state) + slot * p.state_stride_slot + int64_t{h} * P * N;
    int ch[RPT];
    bool ok[RPT];
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      ch[j] = vb0 * kRows + r[j];
      ok[j] = ch[j] < P;
    }
    if (hist > 0) {
      mamba2_prefetch_history<Act, N, kChunk>(sm.hist_raw, sm.chunk, p, ring, base, h, vb0, hist);
    }
    // A before the grid-dependency wait (ptxas places it between the state's loads and the
    // wait): formed after the wait, it reused the loads' address registers and waited for the
    // loads to leave (ncu: 9% of the stall samples on its first instruction).
    const float A = p.A_log ? -expf(a_log) : 0.0f;
    float4 S[RPT][NK];
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      mamba2_load<St, NK, LANES>(S[j], head_state + int64_t{ok[j] ? ch[j] : 0} * N, kl, ok[j]);
    }
    grid_dependency_wait();

    Mamba2FactorSink sink;
    if (p.write_factors && p.factors != nullptr) {
      sink.ring = p.factors + slot * p.factor_stride_slot;
      sink.wpos = wpos;
      sink.head_writer = vb0 == 0;
      sink.b_writer = vb0 == 0 && mamba2_group_leader(p, h);
    }
    mamba2_stage<Act, N, kChunk, true>(sm.chunk, p, rt.begin, h, vb0, 0, rt.count, A, dt_bias, sink,
                                       hist, hist > 0);
    const auto record = [&](int tt) {  // history record tt
      int pos = base + tt;
      if (pos >= p.ring) pos -= p.ring;
      return ring + static_cast<int64_t>(pos) * p.factor_bytes;
    };
    if (hist > 0) {
      // dB = B * dt of every history record once (mamba2_apply_raw's product, for mamba2_step),
      // in place in chunk rows [0, hist) (mamba2_raw_b), and x of the first block as a float.
      scale_raw_rows<Act, N, kMamba2Threads>(
          hist, [&](int tt) { return mamba2_raw_b<Act>(sm.chunk, tt); },
          [&](int tt) { return sm.hist_raw.dt[tt]; }, [&](int tt) { return &sm.chunk.B[tt][0]; });
      for (int i = tid; i < hist * kRows; i += kMamba2Threads) {
        sm.chunk.x[i / kRows][i % kRows] = to_float<Act>(sm.hist_raw.x[i / kRows][i % kRows]);
      }
      __syncthreads();
    }

    Act* const out = static_cast<Act*>(p.out);
    const Act* const xbc = static_cast<const Act*>(p.xbc);
    const int nx = (hist + rt.count) * kRows;  // x rows of a block: history, then window
    const int nz = rt.count * kRows;           // gate rows of a block
    St* next_mine[RPT];
#pragma unroll
    for (int j = 0; j < RPT; ++j) next_mine[j] = sm.next_state + r[j] * N;
#pragma unroll 1
    for (int j = 0; j < nvb; ++j) {
      const int vb = vb0 + j;
      const bool more = j + 1 < nvb;
      for (int tt = 0; tt < hist; ++tt) {
        if constexpr (RPT == 1) {
          mamba2_step<St, N, kChunk, false>(S[0], sm.chunk, tt, kl, r[0]);
        } else {
          float unused[RPT];
          mamba2_step_rows<St, N, kChunk, false, RPT>(S, sm.chunk, tt, kl, r, unused);
        }
      }
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
        if (store && ok[j]) {
          mamba2_store<St, NK, LANES>(head_state + int64_t{ch[j]} * N, S[j], kl, false);
        }
      }
      if (more) {
        // The next block's x (history records, then the window) and gate input into shared
        // memory with cp.async while this one computes: no registers held across its tokens.
        const int valid = P - (vb + 1) * kRows;
        const bool whole = valid >= kRows;
        const int64_t xoff = int64_t{h} * P + (vb + 1) * kRows;
        mamba2_copy_rows<Act, kRows, kChunk>(
            sm.x_next, 0, hist,
            [&](int tt) { return reinterpret_cast<const Act*>(record(tt) + p.f_x) + xoff; },
            whole && (xoff * static_cast<int64_t>(sizeof(Act))) % 16 == 0, 1, valid);
        const Act* const x_win = xbc + rt.begin * p.xbc_stride_token + xoff * p.xbc_stride_c;
        mamba2_copy_rows<Act, kRows, kChunk>(
            sm.x_next, hist, rt.count,
            [&](int tt) { return x_win + (tt - hist) * p.xbc_stride_token; },
            whole && p.xbc_stride_c == 1 && aligned16(x_win) &&
                (p.xbc_stride_token * static_cast<int64_t>(sizeof(Act))) % 16 == 0,
            p.xbc_stride_c, valid);
        if (p.gate) {
          const Act* const z_win =
              static_cast<const Act*>(p.z) + rt.begin * p.z_stride_token + xoff * p.z_stride_c;
          mamba2_copy_rows<Act, kRows, kChunk>(
              sm.z_next, 0, rt.count, [&](int t) { return z_win + t * p.z_stride_token; },
              whole && p.z_stride_c == 1 && aligned16(z_win) &&
                  (p.z_stride_token * static_cast<int64_t>(sizeof(Act))) % 16 == 0,
              p.z_stride_c, valid);
        }
      }
      static_assert(RPT <= 2 && RPT <= LANES, "a lane per stored channel");
#if SPECSTATE_MAMBA2_OUT_STEP
      // The lane that stores (lane mamba2_y_lane(j) of each channel group, channel j) and its
      // output address, formed once a block and stepped a token at a time: formed every token, its
      // 64-bit arithmetic was about 20 of the token loop's 171 instructions a warp (ncu, H100,
      // T = 4, B = 128); held across the blocks instead, it spilled (twenty-second session).
      // Measured on an H100 (Nemotron-H-8B replay rounds, with mamba2_output's skipped gate):
      // T = 4, B = 32 / 128 0.990 / 0.984, T = 8, B = 128 0.976, T = 2, B = 128 0.998.
      const bool store_odd = RPT == 2 && kl == mamba2_y_lane<LANES, RPT>(1);
      const bool store_out = (kl == 0 || store_odd) && (store_odd ? ok[RPT - 1] : ok[0]);
      const int rj = store_odd ? r[RPT - 1] : r[0];
      Act* out_mine = out + rt.begin * p.out_stride_token + h * p.out_stride_h +
                      int64_t{store_out ? (store_odd ? ch[RPT - 1] : ch[0]) : 0} * p.out_stride_p;
#endif
      for (int t = 0; t < rt.count; ++t) {
        float y[RPT];
        if constexpr (RPT == 1) {
          y[0] = mamba2_step<St, N, kChunk, true>(S[0], sm.chunk, hist + t, kl, r[0]);
        } else {
          mamba2_step_rows<St, N, kChunk, true, RPT>(S, sm.chunk, hist + t, kl, r, y);
        }
        if (t == 0 && more) {
          // The next block's state into shared memory (this thread's own elements, read back by
          // this thread only), issued after a step has consumed S (next_state has been read).
#pragma unroll
          for (int j = 0; j < RPT; ++j) {
            const int chn = ch[j] + kRows;
            if (chn < P) {
              const St* src = head_state + int64_t{chn} * N;
#pragma unroll
              for (int i = 0; i < NK; ++i) {
                cp_async<4 * sizeof(St)>(next_mine[j] + i * 4 * LANES + kl * 4,
                                         src + i * 4 * LANES + kl * 4);
              }
            }
          }
          asm volatile("cp.async.commit_group;" ::: "memory");
        }
#if SPECSTATE_MAMBA2_OUT_STEP
        // One predicated store: lane mamba2_y_lane(j) of each channel group stores channel j's
        // output (that lane holds channel j's y) at out_mine, stepped a token at a time.
        if (store_out) {
          *out_mine = from_float<Act>(
              mamba2_output(p, sm.chunk, hist + t, rj, store_odd ? y[RPT - 1] : y[0], D));
          out_mine += p.out_stride_token;
        }
#else
        // One predicated store: lane mamba2_y_lane(j) of each channel group stores channel j's
        // output (that lane holds channel j's y), its address formed here from values the loop
        // holds (held across the block instead, they spilled).
        const bool odd = RPT == 2 && kl == mamba2_y_lane<LANES, RPT>(1);
        if ((kl == 0 || odd) && (odd ? ok[RPT - 1] : ok[0])) {
          const float yj = mamba2_output(p, sm.chunk, hist + t, odd ? r[RPT - 1] : r[0],
                                         odd ? y[RPT - 1] : y[0], D);
          out[(rt.begin + t) * p.out_stride_token + h * p.out_stride_h +
              (odd ? ch[RPT - 1] : ch[0]) * p.out_stride_p] = from_float<Act>(yj);
        }
#endif
      }
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
        if (p.store_final && ok[j]) {
          mamba2_store<St, NK, LANES>(head_state + int64_t{ch[j]} * N, S[j], kl, false);
        }
      }
      if (more) {
        // Every thread is done with this block's staged rows, and its copies (the next block's
        // x, gate and state) have landed: after the barrier, everybody's have.
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        // The next block's x as floats (x = 0 past P) and the window's x into its factor records
        // (as the window's staging does for the first block); the gate as silu(z), or 1.
        const int c0n = (vb + 1) * kRows;
        for (int i = tid; i < nx; i += kMamba2Threads) {
          const int tt = i / kRows, rr = i % kRows;
          float xv = 0.0f;
          if (c0n + rr < P) {
            const Act xraw = sm.x_next[tt][rr];
            xv = to_float<Act>(xraw);
            if (tt >= hist && sink.ring != nullptr) {
              int pos = wpos + tt - hist;  // wpos < R and the window fits the ring
              if (pos >= p.ring) pos -= p.ring;
              reinterpret_cast<Act*>(sink.ring + static_cast<int64_t>(pos) * p.factor_bytes +
                                     p.f_x)[int64_t{h} * P + c0n + rr] = xraw;
            }
          }
          sm.chunk.x[tt][rr] = xv;
        }
        // The next block's gate (without one, mamba2_output reads no z).
        for (int i = tid; (!SPECSTATE_MAMBA2_OUT_STEP || p.gate) && i < nz; i += kMamba2Threads) {
          const int t = i / kRows, rr = i % kRows;
          float zv = 1.0f;
          if (p.gate && c0n + rr < P) {
            const float zz = to_float<Act>(sm.z_next[t][rr]);
            zv = zz * sigmoid(zz);
          }
          sm.chunk.z[hist + t][rr] = zv;
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < RPT; ++j) {
          ch[j] += kRows;
          ok[j] = ch[j] < P;
          mamba2_load<St, NK, LANES>(S[j], next_mine[j], kl, ok[j]);
        }
      }
    }
    return true;
  }
}

#ifndef SPECSTATE_MAMBA2_MULTI_MIN_CTAS
// CTAs per SM the kMulti instantiation is compiled for. Measured on the H200 (Nemotron-H-8B
// replay rounds, T = 4, one call, scripts/bench-macro-sweep.sh): 7 -> 6 at B = 8 / 32 / 128
// 1.000 / 0.988 / 0.966 (at 7, 72 registers and 88 bytes of spills).
#define SPECSTATE_MAMBA2_MULTI_MIN_CTAS 6
#endif
// kReplay: the instantiation that may apply history records (replay, DESIGN.md section 6) or
// recompute tree states. kMulti: a replay chain over p.vblocks channel blocks per CTA.
// CTAs an SM an instantiation is compiled for: the count its path wants, capped at what its
// shared memory lets an SM hold (ctas_per_sm_bound; every instantiation fits its count on sm_90).
#ifndef SPECSTATE_MAMBA2_RPT2_MIN_CTAS
// CTAs per SM the two-channels-a-thread instantiations (RPT = 2) are compiled for: 4, 128
// registers (ptxas, sm_90, N = 128: no spills with bf16 activations; the several-blocks kernel
// with f32 activations spills 16 / 28 bytes with f32 / bf16 states; compiled for 5 the per-block
// kernel spilled 78 bytes; GDN's two rows a thread measured 4 faster than 5 with spills).
#define SPECSTATE_MAMBA2_RPT2_MIN_CTAS 4
#endif
#ifndef SPECSTATE_MAMBA2_RPT4_MIN_CTAS
// CTAs per SM the four-channels-a-thread instantiation (RPT = 4, a whole head of 64 channels a
// CTA at N = 128) is compiled for.
#define SPECSTATE_MAMBA2_RPT4_MIN_CTAS 3
#endif
template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree, bool kMulti,
          int RPT = 1>
constexpr int mamba2_ctas_per_sm() {
  constexpr int wanted = RPT == 4   ? SPECSTATE_MAMBA2_RPT4_MIN_CTAS
                         : RPT == 2 ? SPECSTATE_MAMBA2_RPT2_MIN_CTAS
                         : kMulti   ? SPECSTATE_MAMBA2_MULTI_MIN_CTAS
                         : N <= 128 ? 8
                                    : 4;
  return ctas_per_sm_bound(
      wanted, sizeof(Mamba2Shared<Act, St, N, kChunk, kReplay, kTree, kMulti, RPT>), kSmemPerSm);
}

template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree = false,
          bool kMulti = false, int RPT = 1>
__global__ void __launch_bounds__(
    kMamba2Threads, mamba2_ctas_per_sm<Act, St, N, kChunk, kReplay, kTree, kMulti, RPT>())
    mamba2_recurrence_kernel(const __grid_constant__ Mamba2RecurrenceParams p) {
  static_assert(!kMulti || (kReplay && !kTree), "a replay chain");
  static_assert(RPT == 1 || (kReplay && !kTree), "several channels a thread: chains");
  __shared__ Mamba2Shared<Act, St, N, kChunk, kReplay, kTree, kMulti, RPT> sm;
  const int h = blockIdx.y;
  // The layer's gate parameters: written by nobody in the round and independent of the slot, so
  // their loads are issued first (their latency overlaps the slot's and the state's).
  const float a_log = load_any_or_zero(p.A_log, p.a_log_dtype, h * p.a_log_stride);
  const float dt_bias = load_any_or_zero(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride);
  const float D = load_any_or_zero(p.d_skip ? p.D : nullptr, p.d_dtype, h * p.d_stride);
  if constexpr (kMulti) {
    if (mamba2_replay_vblocks<Act, St, N, kChunk, RPT>(p, sm, a_log, dt_bias, D)) return;
    constexpr int kRows = mamba2_rows<N>() * RPT;
    const int nblk = (p.head_dim + kRows - 1) / kRows;
    const int vb0 = blockIdx.x * p.vblocks;
    const int nvb = min(p.vblocks, nblk - vb0);
#pragma unroll 1
    for (int j = 0; j < nvb; ++j) {
      if (j > 0) __syncthreads();  // the shared arrays are reused
      if constexpr (RPT > 1) {
        mamba2_chain_rows<Act, St, N, kChunk, RPT>(p, sm, vb0 + j, a_log, dt_bias, D);
      } else {
        mamba2_row_block<Act, St, N, kChunk, kReplay, kTree, (N >= 128 && sizeof(St) == 4), false>(
            p, sm, vb0 + j, a_log, dt_bias, D);
      }
    }
  } else {
    if constexpr (RPT > 1) {
      mamba2_chain_rows<Act, St, N, kChunk, RPT, true>(p, sm, blockIdx.x, a_log, dt_bias, D);
    } else {
      mamba2_row_block<Act, St, N, kChunk, kReplay, kTree, false, true>(p, sm, blockIdx.x, a_log,
                                                                        dt_bias, D);
    }
  }
}

template <typename Act, typename St, int N, int kChunk, bool kReplay, bool kTree = false,
          bool kMulti = false, int RPT = 1>
cudaError_t launch_mamba2_shape(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  // Several channels a thread run chains only (mamba2_chain_rows ignores parents and snapshots).
  if (RPT > 1 && (p.parents != nullptr || p.snap != nullptr)) return cudaErrorInvalidValue;
  constexpr int kRows = mamba2_rows<N>() * RPT;
  const int nblk = (p.head_dim + kRows - 1) / kRows;
  const int vblocks = kMulti ? p.vblocks : 1;
  return launch_after_conv(
      mamba2_recurrence_kernel<Act, St, N, kChunk, kReplay, kTree, kMulti, RPT>,
      dim3((nblk + vblocks - 1) / vblocks, p.num_heads, p.rows), dim3(kMamba2Threads), p, stream);
}

template <typename Act, typename St, int N>
cudaError_t launch_mamba2_n(const Mamba2RecurrenceParams& p, cudaStream_t stream) {
  if (p.cursor != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
    if (p.parents != nullptr) {
      return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, true>(p, stream);
    }
    if constexpr (N >= 32 && N <= 128) {
      Mamba2RecurrenceParams q = p;
      // Two channels a thread (blocks of twice the channels), or four, where kernels::mamba2_rpt
      // takes them; several blocks a CTA where kernels::replay_blocks_per_cta asks for them.
      constexpr int kRows2 = 2 * mamba2_rows<N>();
      const int vblocks2 = replay_vblocks_for(
          p.rows, p.num_heads, (p.head_dim + kRows2 - 1) / kRows2, 24, "SPECSTATE_MAMBA2_VBLOCKS");
      const int rpt = p.snap == nullptr ? mamba2_rpt(p.tokens, std::getenv("SPECSTATE_MAMBA2_RPT"),
                                                     p.rows, vblocks2 == 1, N)
                                        : 1;
      if constexpr (N == 128) {
        // Four channels a thread, one block of 64 channels a CTA (no several-blocks kernel).
        if (rpt == 4)
          return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, false, false, 4>(p, stream);
      }
      if (rpt >= 2) {  // two (four forced at another d_state: two)
        q.vblocks = vblocks2;
        if (q.vblocks > 1) {
          return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, false, true, 2>(q, stream);
        }
        return launch_mamba2_shape<Act, St, N, kMamba2Chunk, true, false, false, 2>(p, stream);
      }
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
cudaError_t launch_mamba2_recurrence_typed(const Mamba2RecurrenceParams& p0, cudaStream_t stream) {
  bool skip = false;
  const cudaError_t bad = check_recurrence_launch(p0, kMamba2Chunk, &skip);
  if (bad != cudaSuccess || skip) return bad;
  if (p0.n_groups <= 0 || p0.num_heads % p0.n_groups != 0) return cudaErrorInvalidValue;
  Mamba2RecurrenceParams p = p0;
  p.heads_per_group = p0.num_heads / p0.n_groups;
  p.inv_heads_per_group = 1.0f / static_cast<float>(p.heads_per_group);
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
