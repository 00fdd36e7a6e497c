// Kernel of launch_gdn_recurrence (see gdn_recurrence.h) and its launchers. The math (DESIGN.md
// section 3), the work split and the token step shared by every launch: gdn_step.cuh.
#pragma once

#include <type_traits>

#include "gdn_step.cuh"

namespace specstate::kernels {

// The shared memory of one CTA. next_state: the next item's state (kItems = 2: the next row's;
// kMulti, a replay chain over several V blocks: the next block's).
template <typename St, int K, int kRows, int kItems, int kChunk, bool kReplay, bool kTree,
          bool kMulti, bool kKda, bool kKV = false, int kOutParts = 1>
struct GdnShared {
  static constexpr int kParts = kMulti ? kOutParts : 1;
  static constexpr bool kIsKda = kKda;
  static_assert(kParts == 1 || !kKda, "deferred outputs: GDN's (gdn_flush_block)");
  // (kMulti with kKV: the next block's state lands in kv_tile instead.)
  static constexpr bool kNext = kItems > 1 || (kMulti && !kKV);
  GdnChunk<K, kRows, kChunk, kKda> chunk;
  // Merged history records' key factors (replay; their keys wait in the chunk: gdn_raw_key).
  float hist_kf[kReplay ? kChunk : 1];
  __align__(16) St next_state[kNext ? kRows * K : 4];
  // A tree without snapshots restarts branches from the row's start state (post history).
  __align__(16) float start_state[kReplay && kTree ? kRows * K : 4];
  // kMulti: a block's per-token outputs and u records, written by each V row's lanes after its
  // step and stored to global memory once per block (gdn_flush_block). kParts > 1: each of a
  // row's kParts lanes' partial S q~ instead of the output (row r's at [r * kParts, +kParts)).
  __align__(16) float out_rows[kMulti ? kChunk : 1][kMulti ? kRows * kParts : 1];
  float u_rows[kMulti ? kChunk : 1][kMulti ? kRows : 1];
  // kKV: the CTA's V rows of a [K][V] state on their way to or from global memory (gdn_kv_load /
  // gdn_kv_store; kMulti: also the next block's state, gdn_kv_tile_fill_async); a row is K + 1
  // floats so that neither side's accesses meet in a bank.
  float kv_tile[kKV ? kRows : 1][kKV ? K + 1 : 1];
};

// [K][V] states (PoolOptions::ssm_layout = kKV, GdnRecurrenceParams::state_kv): the CTA's V rows
// [v0, v0 + kRows) of one head are loaded and stored through the shared tile, so that global
// memory sees whole sectors along V (the state's contiguous axis: runs of 4 V elements per
// thread; fp32 loads, gdn_kv_tile_fill_async, an element per thread, consecutive threads on
// consecutive V), while each thread keeps its row's K elements in registers as for [V][K]
// states. `head`: the head's state ([K][V], row k at head + k * V). Every thread of the CTA
// calls these (they hold barriers); rows past V read zeros and write nothing. The global side
// is not inlined: its address arithmetic then costs the token loop no registers (inlined, it
// made the replay kernel spill 56 bytes there).
template <typename St, int K, int kRows>
__device__ __noinline__ void gdn_kv_tile_from_global(const St* head, int V, int v0, float* tile) {
  static_assert(kRows % 4 == 0, "runs of 4 V elements");
  constexpr int Q = kRows / 4;
  const bool vec = V % 4 == 0 && reinterpret_cast<uintptr_t>(head) % (4 * sizeof(St)) == 0;
  for (int idx = threadIdx.x; idx < K * Q; idx += kGdnThreads) {
    const int k = idx / Q, q = idx % Q, v = v0 + 4 * q;
    const St* src = head + int64_t{k} * V + v;
    float4 x;
    if (vec && v + 4 <= V) {
      x = load4<St>(src);
    } else {
      x.x = v < V ? to_float<St>(src[0]) : 0.0f;
      x.y = v + 1 < V ? to_float<St>(src[1]) : 0.0f;
      x.z = v + 2 < V ? to_float<St>(src[2]) : 0.0f;
      x.w = v + 3 < V ? to_float<St>(src[3]) : 0.0f;
    }
    float* col = tile + 4 * q * (K + 1) + k;
    col[0] = x.x;
    col[K + 1] = x.y;
    col[2 * (K + 1)] = x.z;
    col[3 * (K + 1)] = x.w;
  }
  __syncthreads();
}

template <typename St, int K, int kRows>
__device__ __noinline__ void gdn_kv_tile_to_global(St* head, int V, int v0, const float* tile,
                                                   bool stream) {
  constexpr int Q = kRows / 4;
  __syncthreads();
  const bool vec = V % 4 == 0 && reinterpret_cast<uintptr_t>(head) % (4 * sizeof(St)) == 0;
  for (int idx = threadIdx.x; idx < K * Q; idx += kGdnThreads) {
    const int k = idx / Q, q = idx % Q, v = v0 + 4 * q;
    St* dst = head + int64_t{k} * V + v;
    const float* col = tile + 4 * q * (K + 1) + k;
    const float4 x = make_float4(col[0], col[K + 1], col[2 * (K + 1)], col[3 * (K + 1)]);
    if (vec && v + 4 <= V) {
      if (stream) {
        store4_stream<St>(dst, x);
      } else {
        store4<St>(dst, x);
      }
    } else {
      if (v < V) dst[0] = from_float<St>(x.x);
      if (v + 1 < V) dst[1] = from_float<St>(x.y);
      if (v + 2 < V) dst[2] = from_float<St>(x.z);
      if (v + 3 < V) dst[3] = from_float<St>(x.w);
    }
  }
  __syncthreads();  // the tile is reused
}

// fp32 [K][V] states: the tile filled by cp.async, an element per copy placed at its transposed
// position (consecutive threads on consecutive V elements: whole sectors in global memory), all
// of a thread's copies in flight at once (the synchronous fill waited for each 16-byte load
// before the next), without waiting: gdn_kv_tile_finish completes it. gdn_kv_load completes it
// at once; the several-blocks path after the current block's tokens, so that the next block's
// copy overlaps them. Rows past V are zeros. Every thread of the CTA calls it.
template <int K, int kRows>
__device__ __noinline__ void gdn_kv_tile_fill_async(const float* head, int V, int v0, float* tile) {
  for (int idx = threadIdx.x; idx < K * kRows; idx += kGdnThreads) {
    const int k = idx / kRows, r = idx % kRows, v = v0 + r;
    float* dst = tile + r * (K + 1) + k;
    if (v < V) {
      cp_async<4>(dst, head + int64_t{k} * V + v);
    } else {
      *dst = 0.0f;
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Each thread's elements of its V rows from the tile into registers, then a barrier (the tile
// is reused).
template <int K, int kRows, int NK, int LANES, int RPT>
__device__ __forceinline__ void gdn_kv_tile_read(const float (&tile)[kRows][K + 1],
                                                 float4 (&S)[RPT][NK], const GdnRows<RPT>& rows,
                                                 int kl) {
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    const float* row = tile[rows.vrow[j]];
#pragma unroll
    for (int i = 0; i < NK; ++i) {
      const int k = i * 4 * LANES + kl * 4;
      S[j][i] = rows.ok[j] ? make_float4(row[k], row[k + 1], row[k + 2], row[k + 3])
                           : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  __syncthreads();
}

// Completes gdn_kv_tile_fill_async (and every cp.async this thread issued before it).
template <int K, int kRows, int NK, int LANES, int RPT>
__device__ __forceinline__ void gdn_kv_tile_finish(const float (&tile)[kRows][K + 1],
                                                   float4 (&S)[RPT][NK], const GdnRows<RPT>& rows,
                                                   int kl) {
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  gdn_kv_tile_read<K, kRows, NK, LANES, RPT>(tile, S, rows, kl);
}

template <typename St, int K, int kRows, int NK, int LANES, int RPT>
__device__ __forceinline__ void gdn_kv_load(const St* head, int V, int v0,
                                            float (&tile)[kRows][K + 1], float4 (&S)[RPT][NK],
                                            const GdnRows<RPT>& rows, int kl) {
  if constexpr (sizeof(St) == 4) {
    gdn_kv_tile_fill_async<K, kRows>(reinterpret_cast<const float*>(head), V, v0, &tile[0][0]);
    gdn_kv_tile_finish<K, kRows, NK, LANES, RPT>(tile, S, rows, kl);
  } else {
    gdn_kv_tile_from_global<St, K, kRows>(head, V, v0, &tile[0][0]);
    gdn_kv_tile_read<K, kRows, NK, LANES, RPT>(tile, S, rows, kl);
  }
}

template <typename St, int K, int kRows, int NK, int LANES, int RPT>
__device__ __forceinline__ void gdn_kv_store(St* head, int V, int v0, float (&tile)[kRows][K + 1],
                                             const float4 (&S)[RPT][NK], const GdnRows<RPT>& rows,
                                             int kl, bool stream) {
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    float* row = tile[rows.vrow[j]];
#pragma unroll
    for (int i = 0; i < NK; ++i) {
      const int k = i * 4 * LANES + kl * 4;
      row[k] = S[j][i].x;
      row[k + 1] = S[j][i].y;
      row[k + 2] = S[j][i].z;
      row[k + 3] = S[j][i].w;
    }
  }
  gdn_kv_tile_to_global<St, K, kRows>(head, V, v0, &tile[0][0], stream);
}

// A thread's elements of V row v of a [K][V] state stored directly (4-byte stores, V apart):
// for the rare stores that cannot use the tile (kMulti: store_final while the next block's copy
// into the tile is in flight). No barrier.
template <typename St, int K, int NK, int LANES>
__device__ __forceinline__ void gdn_kv_store_direct(St* head, int V, int v, const float4 (&S)[NK],
                                                    int kl, bool ok) {
  if (!ok) return;
#pragma unroll
  for (int i = 0; i < NK; ++i) {
    St* dst = head + int64_t{i * 4 * LANES + kl * 4} * V + v;
    dst[0] = from_float<St>(S[i].x);
    dst[V] = from_float<St>(S[i].y);
    dst[2 * V] = from_float<St>(S[i].z);
    dst[3 * V] = from_float<St>(S[i].w);
  }
}

// Stores a block's staged outputs and u records (GdnShared::out_rows / u_rows of window tokens
// [0, count), rows [v0, v0 + kRows) of the head): a thread per (token, row), consecutive threads
// on consecutive V rows, so each token's rows are one contiguous run where the output's V stride
// is 1. `u_rec`: the head's u in ring record 0 (null: no records), record t at ring position
// (wpos + t) mod R. kParts > 1: out_rows holds each row's kParts lanes' partial S q~, and the
// output is formed here as the step forms it (lanes_sum, gdn_token_output; GDN only): `c` the
// chunk, window token t at chunk token hist + t.
template <typename Act, int kRows, int kChunk, int kParts, typename Chunk>
__device__ __forceinline__ void gdn_flush_block(const GdnRecurrenceParams& p,
                                                const float (&out_rows)[kChunk][kRows * kParts],
                                                const float (&u_rows)[kChunk][kRows], Act* out_v,
                                                float* u_rec, int wpos, int count, int v0,
                                                const Chunk& c, int hist) {
  const int64_t u_stride = p.factor_bytes / 4;  // a ring may pass 8 GiB (R up to 2^30)
  for (int i = threadIdx.x; i < count * kRows; i += kGdnThreads) {
    const int t = i / kRows, r = i % kRows, v = v0 + r;
    if (v >= p.head_v_dim) continue;
    float o;
    if constexpr (kParts > 1) {
      o = gdn_token_output<false>(lanes_sum<kParts>(&out_rows[t][r * kParts]), c.eg[hist + t],
                                  u_rows[t][r], c.kq[hist + t]);
    } else {
      o = out_rows[t][r];
    }
    out_v[t * p.out_stride_token + v * p.out_stride_v] = from_float<Act>(o);
    if (u_rec != nullptr) {
      int pos = wpos + t;  // wpos < R, t < T <= R
      if (pos >= p.ring) pos -= p.ring;
      u_rec[pos * u_stride + v] = u_rows[t][r];
    }
  }
}

// One (row, value head, V block) of the launch: V rows [vblock * kRows, +kRows) of value head hv
// (key head h), with the layer's gate parameters a_log and dt_bias already loaded.
// kKV: the state is [K][V] (p.state_kv): its loads and stores go through sm.kv_tile.
template <typename Act, typename St, int K, int LANES, int kItems, int kChunk, bool kReplay,
          bool kTree, int RPT, bool kKV, typename Shared>
__device__ __forceinline__ void gdn_row_block(const GdnRecurrenceParams& p, Shared& sm, int vblock,
                                              int h, int hv, float a_log, float dt_bias) {
  static_assert(kItems == 1 || kItems == 2, "one or two rows per CTA");
  static_assert(!kKV || kItems == 1, "two rows per CTA stage [V][K] rows only");
  static_assert(!kReplay || kItems == 1, "the replay instantiation handles one row per CTA");
  static_assert(RPT == 1 || kItems == 1, "several V rows per thread: one batch row per CTA");
  constexpr int NK = K / (4 * LANES);  // float4 per thread and V row
  constexpr int kRowsPerWarp = 32 / LANES;
  static_assert(NK >= 1 && K % (4 * LANES) == 0, "K must be a multiple of 4 * LANES");
  constexpr int kRowsBase = gdn_rows_per_cta<LANES>();
  constexpr int kRows = kRowsBase * RPT;
  auto& chunk = sm.chunk;
  float* const hist_kf = sm.hist_kf;
  St* const next_state = sm.next_state;
  float* const start_state = sm.start_state;
  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int kl = lane % LANES;
  const int V = p.head_v_dim;
  GdnRows<RPT> rows;
#pragma unroll
  for (int j = 0; j < RPT; ++j) {
    rows.vrow[j] = j * kRowsBase + warp * kRowsPerWarp + lane / LANES;
    rows.v[j] = vblock * kRows + rows.vrow[j];
    rows.ok[j] = rows.v[j] < V;
  }
  // Row j's state at head_off + row_off(j) (a slot's or a snapshot's head block).
  const int64_t head_off = int64_t{hv} * V * K;
  const auto row_off = [&](int j) { return int64_t{rows.ok[j] ? rows.v[j] : 0} * K; };
  // Rows of this launch handled by this CTA: blockIdx.z and blockIdx.z + gridDim.z.
  const int r0 = blockIdx.z, r1 = blockIdx.z + gridDim.z;
  const int slot0 = p.slots ? p.slots[r0] : p.slot_inline[r0];
  const int slot1 = kItems > 1 && r1 < p.rows ? (p.slots ? p.slots[r1] : p.slot_inline[r1]) : -1;
  St* next_mine = next_state + (kItems > 1 ? rows.vrow[0] * K : 0);
  St* const state = static_cast<St*>(p.state);

  float4 S[RPT][NK];
  // Row j's state from / to a head block (a slot's or a snapshot's), in the launch's order.
  const auto load_rows = [&](const St* from) {
    if constexpr (kKV) {
      gdn_kv_load<St, K, kRows, NK, LANES, RPT>(from, V, vblock * kRows, sm.kv_tile, S, rows, kl);
    } else {
#pragma unroll
      for (int j = 0; j < RPT; ++j)
        gdn_load_state<St, NK, LANES>(from + row_off(j), S[j], kl, rows.ok[j]);
    }
  };
  if (slot0 >= 0) load_rows(state + slot0 * p.state_stride_slot + head_off);
  if constexpr (kItems > 1) {
    if (slot1 >= 0 && rows.ok[0]) {
      const St* committed1 = state + slot1 * p.state_stride_slot + head_off + row_off(0);
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
  const auto store_rows = [&](St* dst, bool stream) {
    if constexpr (kKV) {
      gdn_kv_store<St, K, kRows, NK, LANES, RPT>(dst, V, vblock * kRows, sm.kv_tile, S, rows, kl,
                                                 stream);
    } else {
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
        if (rows.ok[j]) gdn_store_state<St, NK, LANES>(dst + row_off(j), S[j], kl, stream);
      }
    }
  };

  // Replay history (DESIGN.md section 6): the cursor, the factor records and the committed
  // checkpoint are not written by the preceding conv kernel, so the history is applied (and a
  // fold stored) before the wait for that grid: at small batches it overlaps the conv.
  int wpos = 0;  // ring position of window token 0 (base + h)
  // A chain whose history and window fit one chunk stages both at once after the wait (one
  // prologue and one barrier pair, as a plain verify): `merged` records what is left to apply.
  int merged_hist = 0;
  bool merged_store = false;
  if constexpr (kReplay) {
    if (p.cursor != nullptr && slot0 >= 0) {
      const int count = row_tokens(p.varlen, r0, p.tokens).count;
      const ReplayCursor cur = replay_cursor(p, slot0, count);
      const int base = cur.base;
      int hist = cur.hist;
      wpos = cur.wpos;
      const bool store = cur.store;
      const char* ring = p.factors + slot0 * p.factor_stride_slot;
      if (p.parents == nullptr && hist > 0 && count > 0 && hist + count <= kChunk) {
        merged_hist = hist;
        merged_store = store;
        gdn_prefetch_history<Act, K, kRows, kChunk>(chunk, hist_kf, p, ring, base, h, hv, hist,
                                                    vblock);
        hist = 0;
      }
      for (int c0 = 0; c0 < hist; c0 += kChunk) {
        const int m = min(kChunk, hist - c0);
        gdn_stage_history<Act, K, kRows, kChunk>(chunk, p, ring, base, h, hv, c0, m, vblock);
        for (int tt = 0; tt < m; ++tt)
          gdn_apply<St, K, LANES, RPT, kRows, kChunk>(S, chunk, tt, kl, rows);
        __syncthreads();  // the next chunk overwrites the shared arrays
      }
      if (store && merged_hist == 0)
        store_rows(state + slot0 * p.state_stride_slot + head_off, false);
    }
  }

  // Everything above reads only what the preceding conv kernel does not write (slots, the
  // committed state, the records). With programmatic dependent launch it overlaps that kernel;
  // the conv outputs are read only after this wait for the preceding grid.
  grid_dependency_wait();
  if (p.tokens == 0) return;  // materialize: history only

  const float A = p.A_log ? -expf(a_log) : 0.0f;
  Act* out = static_cast<Act*>(p.out);
  // A tree without snapshots recomputes a branch's start state from the row's start state.
  const bool recompute = kReplay && kTree && p.parents != nullptr && p.snap == nullptr;

#pragma unroll 1
  for (int item = 0; item < kItems; ++item) {
    const int slot = item == 0 ? slot0 : slot1;
    if (slot < 0) continue;  // padding row or none (uniform over the CTA)
    const int row = (item == 0 ? r0 : r1);
    St* committed = state + slot * p.state_stride_slot + head_off;
    St* snap_row = p.snap ? static_cast<St*>(p.snap) + row * p.snap_stride_row + head_off : nullptr;
    if constexpr (kItems > 1) {
      if (item > 0) {
        asm volatile("cp.async.wait_all;" ::: "memory");  // this thread's own elements
        gdn_load_state<St, NK, LANES>(next_mine, S[0], kl, rows.ok[0]);
      }
    }
    if (recompute) {
      // This thread's own elements: read back by this thread only.
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
#pragma unroll
        for (int i = 0; i < NK; ++i) {
          *reinterpret_cast<float4*>(start_state + rows.vrow[j] * K + i * 4 * LANES + kl * 4) =
              S[j][i];
        }
      }
    }
    const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
    const int64_t row_token0 = rt.begin;                  // inputs and outputs
    const int64_t row_parent0 = int64_t{row} * p.tokens;  // parents: [rows, tokens]
    GdnFactorSink sink;
    if (kReplay && p.write_factors && p.factors != nullptr) {
      sink.ring = p.factors + slot * p.factor_stride_slot;
      sink.wpos = wpos;
      sink.eg_writer = vblock == 0;
      sink.k_writer = vblock == 0 && hv == h * p.v_per_k;
    }
    // Row j's output and u record of window token t: out_v + v_j * out_stride_v + t *
    // out_stride_token and u_rec + v_j + ring position * u_stride (lane 0 of the row writes both).
    const bool writer = kl == 0;
    float* u_rec = sink.ring != nullptr && writer
                       ? reinterpret_cast<float*>(sink.ring + p.f_u) + int64_t{hv} * V
                       : nullptr;
    const int64_t u_stride = p.factor_bytes / 4;  // int64: a ring may pass 8 GiB
    Act* out_v = out + row_token0 * p.out_stride_token + hv * p.out_stride_h;
    const GdnRowInputs<Act> in = gdn_row_inputs<Act, K, kRows>(p, row_token0, h, hv, vblock);
    for (int c0 = 0; c0 < rt.count;) {
      // A tree without snapshots needs its whole window staged in one chunk (tokens <= kChunk).
      const int m = min(kChunk, rt.count - c0);
      const int off = c0 == 0 ? merged_hist : 0;  // history slots before the window's
      gdn_stage<Act, K, kRows, kChunk>(chunk, p, in, h, hv, c0, m, A, dt_bias, sink, off, off > 0);
      if (off > 0) {
        for (int tt = 0; tt < off; ++tt) {
          gdn_apply_raw<Act, St, K, LANES, RPT, kRows, kChunk>(S, chunk, hist_kf, tt, kl, rows);
        }
        if (merged_store) store_rows(committed, false);
      }
      for (int tt = 0; tt < m; ++tt) {
        const int t = c0 + tt;
        if (p.parents != nullptr && t > 0) {
          const int parent = p.parents[row_parent0 + t];
          if (parent != t - 1) {
            if (!recompute) {
              // The parent's snapshot was written by this thread (by this CTA: kKV).
              load_rows(snap_row + parent * p.snap_stride_t);
            } else {
              // The parent's state: the row's start state advanced along root..parent, all
              // staged in this chunk. The path's indices increase from the root (parents[t] <
              // t): a bit mask of them, walked from the lowest bit, is the path in order
              // (windows <= 32 tokens here).
              uint32_t path = 0;
              for (int a = parent; a >= 0; a = p.parents[row_parent0 + a]) path |= 1u << a;
#pragma unroll
              for (int j = 0; j < RPT; ++j) {
#pragma unroll
                for (int i = 0; i < NK; ++i) {
                  S[j][i] = *reinterpret_cast<const float4*>(start_state + rows.vrow[j] * K +
                                                             i * 4 * LANES + kl * 4);
                }
              }
              while (path != 0) {
                const int a = __ffs(path) - 1;
                path &= path - 1;
                float u_unused[RPT], o_unused[RPT];
                gdn_step<St, K, LANES, RPT, kRows, kChunk, false>(S, chunk, off + a - c0, kl, rows,
                                                                  u_unused, o_unused);
              }
            }
          }
        }
        float u[RPT], o[RPT];
        // The state after the row's last token is read only by a snapshot or store_final (a
        // tree branch restarts from a snapshot or from start_state, never from S).
        gdn_step<St, K, LANES, RPT, kRows, kChunk>(
            S, chunk, off + tt, kl, rows, u, o,
            t + 1 < rt.count || snap_row != nullptr || p.store_final || p.last_state);
        if (u_rec != nullptr) {
          int pos = wpos + t;  // wpos < R, t < T <= R
          if (pos >= p.ring) pos -= p.ring;
#pragma unroll
          for (int j = 0; j < RPT; ++j) {
            if (rows.ok[j]) u_rec[pos * u_stride + rows.v[j]] = u[j];
          }
        }
        if (snap_row != nullptr) store_rows(snap_row + t * p.snap_stride_t, true);
        if (writer) {
#pragma unroll
          for (int j = 0; j < RPT; ++j) {
            if (rows.ok[j]) {
              out_v[t * p.out_stride_token + rows.v[j] * p.out_stride_v] = from_float<Act>(o[j]);
            }
          }
        }
      }
      __syncthreads();  // the next chunk's prologue overwrites the shared arrays
      c0 += m;
    }
    if (p.store_final && rt.count > 0) store_rows(committed, false);
  }
}

// A replay chain row over several V blocks of one value head (p.vblocks > 1, chosen by the
// launcher where the batch fills the GPU several times over): the window's q/k normalisation,
// gates and factor-record keys are staged once and serve every block, the history keys are
// converted to k^ once, and the next block's state is copied into shared memory (cp.async) while
// the current one is computed. Every block's arithmetic is gdn_row_block's (gdn_apply, gdn_step,
// the same order), so the results are bit-identical. Returns false, having written nothing, where
// the row does not fit this path (no cursor, a padding row, snapshots, no window, or history
// plus window longer than a chunk): the caller then runs gdn_row_block per block.
template <typename Act, typename St, int K, int LANES, int kChunk, bool kKV, int RPT,
          typename Shared>
__device__ __forceinline__ bool gdn_replay_vblocks(const GdnRecurrenceParams& p, Shared& sm, int h,
                                                   int hv, float a_log, float dt_bias) {
  static_assert(RPT == 1 || !kKV, "several V rows a thread: [V][K] states");
  constexpr int NK = K / (4 * LANES);
  constexpr int kRowsBase = gdn_rows_per_cta<LANES>();
  constexpr int kRows = kRowsBase * RPT;  // a block: RPT rows a thread (GdnRows)
  constexpr int kRowsPerWarp = 32 / LANES;
  constexpr int kPre = 2 * RPT;  // staged v/u elements per thread of the next block
  // Deferred outputs: the lanes' partial S q~ staged, the outputs formed at the block's flush.
  constexpr int kParts = Shared::kParts;
  static_assert(kParts == 1 || (kParts < LANES && LANES % kParts == 0), "a row's lanes' partials");
  static_assert(kChunk * kRows <= kPre * kGdnThreads, "a block's staged rows: kPre per thread");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, kl = lane % LANES;
  const int V = p.head_v_dim;
  ReplayBlocks b;
  if (!replay_blocks<kChunk>(p, (V + kRows - 1) / kRows, b)) return false;
  const int vb0 = b.vb0, nvb = b.nvb, slot = b.slot;
  const RowTokens rt = b.rt;
  const int base = b.cur.base, hist = b.cur.hist, wpos = b.cur.wpos;
  const bool store = b.cur.store;
  const char* ring = p.factors + slot * p.factor_stride_slot;
  St* const committed =
      static_cast<St*>(p.state) + slot * p.state_stride_slot + int64_t{hv} * V * K;
  GdnRows<RPT> rows;
#pragma unroll
  for (int j = 0; j < RPT; ++j) rows.vrow[j] = j * kRowsBase + warp * kRowsPerWarp + lane / LANES;
  const auto set_rows = [&](int vb) {
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      rows.v[j] = vb * kRows + rows.vrow[j];
      rows.ok[j] = rows.v[j] < V;
    }
  };
  set_rows(vb0);
  const auto record = [&](int tt) {
    int pos = base + tt;
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  if (hist > 0) {
    gdn_prefetch_history<Act, K, kRows, kChunk>(sm.chunk, sm.hist_kf, p, ring, base, h, hv, hist,
                                                vb0);
  }
  float4 S[RPT][NK];
  if constexpr (kKV) {
    // [K][V] states: every transfer of a block's state goes through sm.kv_tile (the first load,
    // the fold, the next block's copy), except store_final (gdn_kv_store_direct).
    gdn_kv_load<St, K, kRows, NK, LANES, 1>(committed, V, vb0 * kRows, sm.kv_tile, S, rows, kl);
  } else {
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      gdn_load_state<St, NK, LANES>(committed + int64_t{rows.ok[j] ? rows.v[j] : 0} * K, S[j], kl);
    }
  }
  grid_dependency_wait();

  const float A = p.A_log ? -expf(a_log) : 0.0f;
  const GdnRowInputs<Act> in = gdn_row_inputs<Act, K, kRows>(p, rt.begin, h, hv, vb0);
  GdnFactorSink sink;
  if (p.write_factors && p.factors != nullptr) {
    sink.ring = p.factors + slot * p.factor_stride_slot;
    sink.wpos = wpos;
    sink.eg_writer = vb0 == 0;
    sink.k_writer = vb0 == 0 && hv == h * p.v_per_k;
  }
  gdn_stage<Act, K, kRows, kChunk>(sm.chunk, p, in, h, hv, 0, rt.count, A, dt_bias, sink, hist,
                                   hist > 0);
  if (hist > 0) {
    // k^ = k * kf of every history record, once (gdn_apply_raw's product, for gdn_apply), in
    // place: the raw key in the tail of chunk row tt (gdn_raw_key) becomes the row's fp32 k^.
    scale_raw_rows<Act, K, kGdnThreads>(
        hist, [&](int tt) { return gdn_raw_key<Act>(sm.chunk, tt); },
        [&](int tt) { return sm.hist_kf[tt]; }, [&](int tt) { return &sm.chunk.k[tt][0]; });
    __syncthreads();
  }

  float* const u_rec = sink.ring != nullptr
                           ? reinterpret_cast<float*>(sink.ring + p.f_u) + int64_t{hv} * V
                           : nullptr;
  Act* const out_v = static_cast<Act*>(p.out) + rt.begin * p.out_stride_token + hv * p.out_stride_h;
  const int nv = (hist + rt.count) * kRows;  // staged rows of a block: u history, then v
  const auto next_mine = [&](int j) { return sm.next_state + rows.vrow[j] * K; };
#pragma unroll 1
  for (int j = 0; j < nvb; ++j) {
    const int vb = vb0 + j;
    const bool more = j + 1 < nvb;
    // The next block's staged rows, held as loaded (the bits of u of the history, or of v of the
    // window in the act dtype) until they are stored after this block's tokens: no instruction
    // here waits for the loads.
    uint32_t pre[kPre] = {};
    for (int tt = 0; tt < hist; ++tt) {
      gdn_apply<St, K, LANES, RPT, kRows, kChunk>(S, sm.chunk, tt, kl, rows);
    }
    if constexpr (kKV) {
      if (store)
        gdn_kv_store<St, K, kRows, NK, LANES, 1>(committed, V, vb * kRows, sm.kv_tile, S, rows, kl,
                                                 false);
    } else if (store) {
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
        if (rows.ok[j])
          gdn_store_state<St, NK, LANES>(committed + int64_t{rows.v[j]} * K, S[j], kl, false);
      }
    }
    if (more) {
      // The next block's staged rows (u history, then v) into registers while this one computes.
#pragma unroll
      for (int q = 0; q < kPre; ++q) {
        const int i = tid + q * kGdnThreads;
        if (i < nv) {
          const int tt = i / kRows, r = i % kRows, vr = (vb + 1) * kRows + r;
          if (vr < V && tt < hist) {
            pre[q] = reinterpret_cast<const uint32_t*>(record(tt) + p.f_u)[int64_t{hv} * V + vr];
          } else if (vr < V) {
            pre[q] = act_bits(in.v[(tt - hist) * in.st + (vr - vb0 * kRows) * in.sc]);
          }
        }
      }
    }
    // Window token t: its step (`update`: whether the state after it is formed; a compile-time
    // constant where the caller passes one), at t == 0 the next block's state copy, then its
    // output and u record into shared memory.
    const auto window_token = [&](int t, auto update) {
      float u[RPT], o[RPT];
      gdn_step<St, K, LANES, RPT, kRows, kChunk, true, Shared::kIsKda, kParts>(
          S, sm.chunk, hist + t, kl, rows, u, o, static_cast<bool>(update));
      if (kKV && t == 0 && more) {
        // The next block's state into the tile (cooperative: read back after a barrier); the
        // tile's last reads (the fold's store, the previous block's load) ended in barriers.
        gdn_kv_tile_fill_async<K, kRows>(reinterpret_cast<const float*>(committed), V,
                                         (vb + 1) * kRows, &sm.kv_tile[0][0]);
      } else if (t == 0 && more) {
        // The next block's state into shared memory (this thread's own elements, read back by
        // this thread only) while this block computes; issued after a step has consumed S, so
        // the shared next_state it overwrites has been read.
#pragma unroll
        for (int j = 0; j < RPT; ++j) {
          const int vn = (vb + 1) * kRows + rows.vrow[j];
          if (vn < V) {
            const St* src = committed + int64_t{vn} * K;
#pragma unroll
            for (int i = 0; i < NK; ++i) {
              cp_async<4 * sizeof(St)>(next_mine(j) + i * 4 * LANES + kl * 4,
                                       src + i * 4 * LANES + kl * 4);
            }
          }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
      }
      // The row's output (kParts > 1: this lane's partial S q~) and u record, stored with the
      // block's others after its tokens (gdn_flush_block): no per-token global addressing in this
      // loop. Every lane of a row holds the same u (the butterfly's sums are the same bits on
      // every lane) and stores it to the same word: no branch around a writer lane.
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
        if constexpr (kParts > 1) {
          // Lanes kl and kl + kParts hold the same partial: the same bits to the same word.
          sm.out_rows[t][rows.vrow[j] * kParts + kl % kParts] = o[j];
        } else {
          sm.out_rows[t][rows.vrow[j]] = o[j];
        }
        sm.u_rows[t][rows.vrow[j]] = u[j];
      }
    };
    // The state after the window's last token is read only where it is stored (store_final).
    // Token 0 (with the copy) and the last token are peeled, so that the tokens between them are
    // one straight-line body with the update a constant, unrolled by two: a token's key and
    // query loads may then be issued while the token before it waits for its reduction.
    const bool last_update = p.store_final || p.last_state;
    window_token(0, rt.count > 1 || last_update);
#pragma unroll 2
    for (int t = 1; t + 1 < rt.count; ++t) window_token(t, std::true_type{});
    if (rt.count > 1) {
      if (last_update) {
        window_token(rt.count - 1, std::true_type{});
      } else {
        window_token(rt.count - 1, std::false_type{});
      }
    }
    if constexpr (kKV) {
      if (p.store_final)
        gdn_kv_store_direct<St, K, NK, LANES>(committed, V, rows.v[0], S[0], kl, rows.ok[0]);
    } else if (p.store_final) {
#pragma unroll
      for (int j = 0; j < RPT; ++j) {
        if (rows.ok[j])
          gdn_store_state<St, NK, LANES>(committed + int64_t{rows.v[j]} * K, S[j], kl, false);
      }
    }
    // Every thread is done with this block's staged rows, and its outputs are in shared memory.
    __syncthreads();
    gdn_flush_block<Act, kRows, kChunk, kParts>(p, sm.out_rows, sm.u_rows, out_v, u_rec, wpos,
                                                rt.count, vb * kRows, sm.chunk, hist);
    if (more) {
#pragma unroll
      for (int q = 0; q < kPre; ++q) {
        const int i = tid + q * kGdnThreads;
        if (i < nv) {
          const int tt = i / kRows;
          sm.chunk.v[tt][i % kRows] =
              tt < hist ? __uint_as_float(pre[q]) : float_from_act_bits<Act>(pre[q]);
        }
      }
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncthreads();
      set_rows(vb + 1);
      if constexpr (kKV) {
        gdn_kv_tile_read<K, kRows, NK, LANES, 1>(sm.kv_tile, S, rows, kl);
      } else {
#pragma unroll
        for (int j = 0; j < RPT; ++j) gdn_load_state<St, NK, LANES>(next_mine(j), S[j], kl);
      }
    }
  }
  return true;
}

// The kernel. K: head_k_dim; LANES: lanes per V row; RPT: V rows per thread (GdnRows; 2 only in
// replay chains over several V blocks of long windows, kernels::gdn_multi_rpt; elsewhere 2 was
// measured within +-2% and dropped, docs/cuda.md). Snapshots are stored with an
// evict-first hint (written once, read back at most once by commit); 8 CTAs per SM for LANES = 8
// (measured: +10% BW). Measured and dropped (H200, B=128): an L2 prefetch of the state one wave of
// CTAs ahead (-4%), and the state in shared memory via cp.async at 10 CTAs/SM instead of registers
// (-5 to -9%). kItems: rows of the batch one CTA handles in turn (same V slice and head): the next
// row's committed state lands in shared memory (cp.async) while the current row is computed, so
// only the first read of a CTA has its latency exposed. kChunk: tokens staged at a time. kReplay:
// the instantiation that may apply history records (replay, DESIGN.md section 6) or recompute tree
// states (the snapshot and advance instantiation carries none of that code). kMulti: a replay chain
// over p.vblocks V blocks per CTA (gdn_replay_vblocks). kKda: the KDA layer (the gate per key
// channel; launch_kda_recurrence).
#ifndef SPECSTATE_GDN_MULTI_MIN_CTAS
#define SPECSTATE_GDN_MULTI_MIN_CTAS 8  // CTAs per SM the kMulti instantiation is compiled for
#endif
#ifndef SPECSTATE_GDN_MULTI2_MIN_CTAS
#define SPECSTATE_GDN_MULTI2_MIN_CTAS 4  // ... and its two-rows-a-thread one (128 registers)
#endif
#ifndef SPECSTATE_GDN_DEFER_OUT
#define SPECSTATE_GDN_DEFER_OUT 1
#endif
// Partial sums a window output is staged as (GdnShared::kParts): GDN's two-rows chain over several
// V blocks stages each row's partial S q~ after the query's first butterfly distance (LANES / 2
// partials a row) and forms the outputs at the block's flush (gdn_flush_block): the token step
// loses two of the query's three shuffle-and-add levels and the output. The buffer (8 KiB at
// Qwen3-Next's shape) keeps the CTA's static shared memory under 48 KiB and its 4 CTAs an SM.
// Elsewhere 1 (the one-row chain's 8 CTAs an SM and KDA's 4 would not hold the buffer). Every
// lane's partial instead (LANES a row, the step without the query's last level; 16 KiB, the
// CTA's arrays as dynamic shared memory, still 4 CTAs an SM) measured slower on an H100: Qwen3-Next
// rounds 1.003-1.013x (thirty-eighth session, 0727505, reverted).
template <bool kKda, int LANES, int RPT, bool kMulti, bool kKV>
constexpr int gdn_out_parts() {
  return SPECSTATE_GDN_DEFER_OUT && kMulti && RPT == 2 && !kKda && !kKV ? LANES / 2 : 1;
}
// CTAs an SM an instantiation is compiled for: the count its path wants, capped at what its
// shared memory lets an SM hold (ctas_per_sm_bound; KDA's larger chunk leaves 4 CTAs of its
// two-rows-a-thread chain, 6 of its other replay paths). The launcher's wave arithmetic uses it.
template <typename St, bool kKda, int K, int LANES, int kItems, int kChunk, bool kReplay,
          bool kTree, int RPT, bool kMulti, bool kKV>
constexpr int gdn_ctas_per_sm() {
  constexpr int wanted = kMulti && RPT > 1 ? SPECSTATE_GDN_MULTI2_MIN_CTAS
                         : RPT > 1         ? 4
                         : kMulti          ? SPECSTATE_GDN_MULTI_MIN_CTAS
                         : LANES == 8      ? 8
                                           : 1;
  using Shared = GdnShared<St, K, gdn_rows_per_cta<LANES>() * RPT, kItems, kChunk, kReplay, kTree,
                           kMulti, kKda, kKV, gdn_out_parts<kKda, LANES, RPT, kMulti, kKV>()>;
  return ctas_per_sm_bound(wanted, sizeof(Shared), kSmemPerSm);
}

template <typename Act, typename St, bool kKda, int K, int LANES, int kItems, int kChunk,
          bool kReplay, bool kTree = false, int RPT = 1, bool kMulti = false, bool kKV = false>
__global__ void __launch_bounds__(
    kGdnThreads,
    gdn_ctas_per_sm<St, kKda, K, LANES, kItems, kChunk, kReplay, kTree, RPT, kMulti, kKV>())
    gdn_recurrence_kernel(const __grid_constant__ GdnRecurrenceParams p) {
  static_assert(!kMulti || (kReplay && !kTree && kItems == 1 && (!kKV || sizeof(St) == 4) &&
                            (RPT == 1 || !kKV)),
                "a replay chain ([K][V] states: fp32, one row a thread, the next block copied by "
                "cp.async)");
  constexpr int kRows = gdn_rows_per_cta<LANES>() * RPT;
  __shared__ GdnShared<St, K, kRows, kItems, kChunk, kReplay, kTree, kMulti, kKda, kKV,
                       gdn_out_parts<kKda, LANES, RPT, kMulti, kKV>()>
      sm;
  const int hv = blockIdx.y;
  // hv / v_per_k exactly (small non-negative integers; the launcher sets the reciprocal).
  const int h = head_group(hv, p.inv_v_per_k);
  // The layer's gate parameters: written by nobody in the round and independent of the slot, so
  // their loads are issued first (their latency overlaps the slot's and the state's).
  const float a_log = load_any_or_zero(p.A_log, p.a_log_dtype, hv * p.a_log_stride);
  const float dt_bias = gdn_dt_bias<kKda, K>(p, hv);  // KDA: this thread's key channel's
  if constexpr (kMulti) {
    // A replay chain, p.vblocks V blocks per CTA.
    if (gdn_replay_vblocks<Act, St, K, LANES, kChunk, kKV, RPT>(p, sm, h, hv, a_log, dt_bias))
      return;
    const int nblk = (p.head_v_dim + kRows - 1) / kRows;
    const int vb0 = blockIdx.x * p.vblocks;
    const int nvb = min(p.vblocks, nblk - vb0);
#pragma unroll 1
    for (int j = 0; j < nvb; ++j) {
      if (j > 0) __syncthreads();  // the shared arrays are reused
      gdn_row_block<Act, St, K, LANES, kItems, kChunk, kReplay, kTree, RPT, kKV>(
          p, sm, vb0 + j, h, hv, a_log, dt_bias);
    }
  } else {
    gdn_row_block<Act, St, K, LANES, kItems, kChunk, kReplay, kTree, RPT, kKV>(p, sm, blockIdx.x, h,
                                                                               hv, a_log, dt_bias);
  }
}

template <typename Act, typename St, bool kKda, int K, int LANES, int kItems, int kChunk,
          bool kReplay, bool kTree = false, int RPT = 1, bool kMulti = false, bool kKV = false>
cudaError_t launch_gdn_shape(const GdnRecurrenceParams& p, cudaStream_t stream) {
  constexpr int rows_per_cta = gdn_rows_per_cta<LANES>() * RPT;
  const int nblk = (p.head_v_dim + rows_per_cta - 1) / rows_per_cta;
  const int vblocks = kMulti ? p.vblocks : 1;
  return launch_after_conv(
      gdn_recurrence_kernel<Act, St, kKda, K, LANES, kItems, kChunk, kReplay, kTree, RPT, kMulti,
                            kKV>,
      dim3((nblk + vblocks - 1) / vblocks, p.num_v_heads, (p.rows + kItems - 1) / kItems),
      dim3(kGdnThreads), p, stream);
}

template <typename Act, typename St, bool kKda, int K>
cudaError_t launch_gdn_k(const GdnRecurrenceParams& p, cudaStream_t stream) {
  if (p.state_kv) {
    // [K][V] states (PoolOptions::ssm_layout = kKV): the state through the shared tile
    // (gdn_kv_load / gdn_kv_store); one row and one V block per CTA, except fp32 replay chains
    // (several blocks, as below); the same arithmetic.
    if (p.cursor != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
      if (p.parents != nullptr)
        return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, true, 1, false, true>(p, stream);
      if constexpr (sizeof(St) == 4) {
        // fp32 states: several V blocks per CTA where the batch fills the GPU several times
        // over, as for [V][K] states (the same rule and override).
        GdnRecurrenceParams q = p;
        q.vblocks =
            replay_vblocks_for(p.rows, p.num_v_heads,
                               (p.head_v_dim + gdn_rows_per_cta<8>() - 1) / gdn_rows_per_cta<8>(),
                               6, "SPECSTATE_GDN_VBLOCKS");
        if (q.vblocks > 1) {
          return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, false, 1, true, true>(q,
                                                                                          stream);
        }
      }
      return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, false, 1, false, true>(p, stream);
    }
    return launch_gdn_shape<Act, St, kKda, K, 8, 1, 8, false, false, 1, false, true>(p, stream);
  }
  // Two rows per CTA from 16 rows on when the window is short (the state read is then a large
  // share of the traffic and its latency is exposed once per CTA). Measured on H200, Qwen3-Next,
  // B=128: T=2 74% -> 80% of copy BW; T=4/8 87% -> 85-86% (hence one row per CTA there).
  if (p.cursor != nullptr || (p.parents != nullptr && p.snap == nullptr)) {
    // Replay (history records, or tree windows without snapshots): one row per CTA. Trees get
    // their own instantiation: only they keep the start state in shared memory (8 KiB a CTA that
    // a chain's CTAs leave to L1).
    if (p.parents != nullptr)
      return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, true>(p, stream);
    GdnRecurrenceParams q = p;
    // Two V rows a thread: each staged key and query value serves both (half the shared-memory
    // loads a state element), where a CTA then still runs several V blocks.
    if (gdn_multi_rpt(p.rows, p.tokens, kKda, std::getenv("SPECSTATE_GDN_RPT")) == 2) {
      constexpr int kRows2 = 2 * gdn_rows_per_cta<8>();
      q.vblocks =
          replay_vblocks_for(p.rows, p.num_v_heads, (p.head_v_dim + kRows2 - 1) / kRows2,
                             gdn_ctas_per_sm<St, kKda, K, 8, 1, 16, true, false, 2, true, false>(),
                             "SPECSTATE_GDN_VBLOCKS");
      q.vblocks = rpt2_vblocks(q.vblocks, p.rows, std::getenv("SPECSTATE_GDN_VBLOCKS") != nullptr);
      if (q.vblocks > 1)
        return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, false, 2, true>(q, stream);
    }
    q.vblocks = replay_vblocks_for(
        p.rows, p.num_v_heads, (p.head_v_dim + gdn_rows_per_cta<8>() - 1) / gdn_rows_per_cta<8>(),
        6, "SPECSTATE_GDN_VBLOCKS");
    if (q.vblocks > 1)
      return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, false, 1, true>(q, stream);
    return launch_gdn_shape<Act, St, kKda, K, 8, 1, 16, true, false>(p, stream);
  }
  const bool two = p.rows >= 16 && p.tokens <= 3;
  return two ? launch_gdn_shape<Act, St, kKda, K, 8, 2, 8, false>(p, stream)
             : launch_gdn_shape<Act, St, kKda, K, 8, 1, 8, false>(p, stream);
}

// kKda: the KDA layer (launch_kda_recurrence), instantiated in kda_recurrence_<act>.cu.
template <typename Act, typename St, bool kKda = false>
cudaError_t launch_gdn_recurrence_typed(const GdnRecurrenceParams& p0, cudaStream_t stream) {
  bool skip = false;
  const cudaError_t bad = check_recurrence_launch(p0, kGdnChunk, &skip);
  if (bad != cudaSuccess || skip) return bad;
  if (p0.num_k_heads <= 0 || p0.num_v_heads % p0.num_k_heads != 0) return cudaErrorInvalidValue;
  GdnRecurrenceParams p = p0;
  p.last_state = env_flag("SPECSTATE_GDN_LAST_STATE");
  p.v_per_k = p0.num_v_heads / p0.num_k_heads;
  p.inv_v_per_k = 1.0f / static_cast<float>(p.v_per_k);
  // LANES = 8 everywhere: the 32-lane split (4x the CTAs at B = 1) was measured slower (every
  // CTA repeats the q/k prologue): B=1,T=4 10.1 us vs 7.3 us per layer.
  switch (p.head_k_dim) {
    case 32:
      return launch_gdn_k<Act, St, kKda, 32>(p, stream);
    case 64:
      return launch_gdn_k<Act, St, kKda, 64>(p, stream);
    case 128:
      return launch_gdn_k<Act, St, kKda, 128>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace specstate::kernels
