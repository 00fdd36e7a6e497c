// The GDN replay verify as a persistent kernel (part of gdn_recurrence.cuh, included there after
// the kernel of every other launch): where a replay chain launch is several waves of CTAs (large
// batches), each CTA runs items (row, value head) in turn, gridDim.x apart, every V block of an
// item (two V rows a thread, gdn_replay_vblocks' loop), and copies the next item's inputs into
// shared memory while the current item's last V block computes: its first block's committed
// state, its history records and its window's q, k and v (cp.async), its gates (loads into
// registers after the block's tokens). A CTA of the several-blocks launch instead waits for all of
// that at its start: measured with ncu on the H100 (Qwen3-Next T = 4, B = 128, 4096 CTAs), a
// quarter of the kernel's warp stall samples sat in that prologue while the SM's other three CTAs
// could not fill the issue slots (61% busy, DRAM 61%).
//
// Every item's arithmetic is gdn_replay_vblocks' (the same staging, gdn_stage's normalisation of
// the same values, gdn_apply, gdn_step, the same order): bit-identical. An item that does not fit
// (a padding row, no window, history and window longer than a chunk) runs gdn_row_block per V
// block, as the several-blocks kernel's fallback does. The launcher takes this kernel for bf16
// activations, K = 128, [V][K] states, V a multiple of 32 and 16-byte aligned inputs only.
#pragma once

#include <atomic>
#include <cstdio>

namespace specstate::kernels {

// Items one CTA resolves at its start (slot, tokens, cursor and gate parameters, in shared
// memory); the launcher sizes the grid so that no CTA has more.
inline constexpr int kGdnPersistMaxItems = 32;
inline constexpr int kGdnPersistCtas = 4;  // CTAs an SM (two rows a thread: 128 registers)

// One item (row, value head) as its CTA resolved it before the wait for the conv grid.
struct GdnPersistItem {
  int64_t begin;  // the row's first token
  int slot;       // -1: a padding row
  int count;      // window tokens
  int base, hist, wpos;
  int store;  // the post-history state is stored (a fold)
  float a_log, dt_bias;
};

template <typename Act, typename St, int K, int kRows, int kChunk>
struct GdnPersistShared {
  // The several-blocks kernel's arrays (chunk, next_state, out_rows, u_rows), also what
  // gdn_row_block uses for an item that does not fit.
  GdnShared<St, K, kRows, 1, kChunk, true, false, true, false, false> base;
  // The next item's inputs as loaded: history keys at rows [0, hist) and window keys at
  // [hist, hist + count) of pf_k, window queries at the same rows of pf_q, its first block's
  // window v and history u, the history's key factors and e^g.
  __align__(16) Act pf_k[kChunk][K];
  __align__(16) Act pf_q[kChunk][K];
  __align__(16) Act pf_v[kChunk][kRows];
  __align__(16) float pf_u[kChunk][kRows];
  float pf_kf[kChunk];
  float pf_eg[kChunk];
  GdnPersistItem items[kGdnPersistMaxItems];
};

template <typename Act, typename St, int K>
using GdnPersistSharedOf = GdnPersistShared<Act, St, K, 2 * gdn_rows_per_cta<8>(), kGdnChunk>;

// An item that does not fit the persistent loop, V block by V block on gdn_row_block (the
// several-blocks kernel's fallback). Not inlined: inlined, its registers made the persistent
// kernel's own loops spill twice as much (ptxas, sm_90).
template <typename Act, typename St, int K, typename Shared>
__device__ __noinline__ void gdn_persistent_fallback(const GdnRecurrenceParams& p, Shared& sm,
                                                     int nblk, int h, int hv, float a_log,
                                                     float dt_bias, int row) {
#pragma unroll 1
  for (int vb = 0; vb < nblk; ++vb) {
    if (vb > 0) __syncthreads();
    gdn_row_block<Act, St, K, 8, 1, kGdnChunk, true, false, 2, false>(p, sm, vb, h, hv, a_log,
                                                                      dt_bias, row);
  }
}

template <typename Act, typename St, int K>
__global__ void __launch_bounds__(kGdnThreads, kGdnPersistCtas)
    gdn_persistent_kernel(const __grid_constant__ GdnRecurrenceParams p) {
  constexpr int LANES = 8, RPT = 2, kChunk = kGdnChunk;
  constexpr int NK = K / (4 * LANES);
  constexpr int kRowsBase = gdn_rows_per_cta<LANES>();
  constexpr int kRows = kRowsBase * RPT;
  constexpr int kRowsPerWarp = 32 / LANES;
  constexpr int kPre = 2 * RPT;
  constexpr int kE = static_cast<int>(16 / sizeof(Act));  // act elements a 16-byte copy
  constexpr int kKParts = K / kE, kVParts = kRows / kE, kUParts = kRows / 4;
  static_assert(K % kE == 0 && kRows % kE == 0, "16-byte copies of keys and v rows");
  static_assert(kChunk * kRows <= kPre * kGdnThreads, "a block's staged rows: kPre per thread");
  using Shared = GdnPersistShared<Act, St, K, kRows, kChunk>;
  extern __shared__ __align__(16) unsigned char gdn_persist_smem[];
  Shared& sm = *reinterpret_cast<Shared*>(gdn_persist_smem);
  auto& c = sm.base.chunk;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, kl = lane % LANES;
  const int V = p.head_v_dim, HV = p.num_v_heads;
  const int nblk = V / kRows;  // the launcher: V % kRows == 0
  const int64_t n_items = int64_t{p.rows} * HV;
  const int first = blockIdx.x, stride = gridDim.x;
  const int mine = first < n_items ? static_cast<int>((n_items - 1 - first) / stride) + 1 : 0;

  // Every item of this CTA resolved once: slot, tokens, cursor and the head's gate parameters
  // (nothing of it is written by the conv grid).
  for (int j = tid; j < mine; j += kGdnThreads) {
    const int64_t item = first + int64_t{j} * stride;
    const int row = static_cast<int>(item / HV), hv = static_cast<int>(item % HV);
    GdnPersistItem d{};
    d.slot = p.slots ? p.slots[row] : p.slot_inline[row];
    d.a_log = p.A_log ? load_any(p.A_log, p.a_log_dtype, hv * p.a_log_stride) : 0.0f;
    d.dt_bias = p.dt_bias ? load_any(p.dt_bias, p.dt_bias_dtype, hv * p.dt_bias_stride) : 0.0f;
    if (d.slot >= 0) {
      const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
      d.begin = rt.begin;
      d.count = rt.count;
      const ReplayCursor cur = replay_cursor(p, d.slot, rt.count);
      d.base = cur.base;
      d.hist = cur.hist;
      d.wpos = cur.wpos;
      d.store = cur.store ? 1 : 0;
    }
    sm.items[j] = d;
  }
  __syncthreads();

  const auto fits = [&](int j) {
    const GdnPersistItem& d = sm.items[j];
    return d.slot >= 0 && d.count > 0 && d.hist + d.count <= kChunk;
  };
  // Item j's launch row, value head and key head.
  const auto item_heads = [&](int j, int& row, int& hv, int& h) {
    const int64_t item = first + int64_t{j} * stride;
    row = static_cast<int>(item / HV);
    hv = static_cast<int>(item % HV);
    h = static_cast<int>((hv + 0.5f) * p.inv_v_per_k);
  };
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
  const auto next_mine = [&](int j) { return sm.base.next_state + rows.vrow[j] * K; };
  const auto record_at = [&](const char* ring, int base, int tt) {
    int pos = base + tt;
    if (pos >= p.ring) pos -= p.ring;
    return ring + static_cast<int64_t>(pos) * p.factor_bytes;
  };
  // The copies of item j's first block's state (this thread's own elements, into next_state) and
  // history records (nothing of them is written by the conv grid); with `window`, also its
  // window's q, k and first block's v (after the wait for the conv grid). Everything of the item
  // is read from shared memory here (nothing of it stays in registers across the token loop).
  const auto copy_item = [&](int j, bool history, bool window) {
    int row, hv, h;
    item_heads(j, row, hv, h);
    const GdnPersistItem& d = sm.items[j];
    const int hist = d.hist;
    if (history) {
      const St* committed =
          static_cast<const St*>(p.state) + d.slot * p.state_stride_slot + int64_t{hv} * V * K;
#pragma unroll
      for (int q = 0; q < RPT; ++q) {
        const St* src = committed + int64_t{rows.vrow[q]} * K;  // block 0: vrow < kRows <= V
#pragma unroll
        for (int i = 0; i < NK; ++i) {
          cp_async<4 * sizeof(St)>(next_mine(q) + i * 4 * LANES + kl * 4,
                                   src + i * 4 * LANES + kl * 4);
        }
      }
      const char* ring = p.factors + d.slot * p.factor_stride_slot;
      const int base = d.base;
      for (int i = tid; i < hist * kKParts; i += kGdnThreads) {
        const int tt = i / kKParts, part = i % kKParts;
        cp_async<16>(&sm.pf_k[tt][part * kE],
                     record_at(ring, base, tt) + p.f_k + int64_t{h} * K * sizeof(Act) + part * 16);
      }
      for (int i = tid; i < hist * kUParts; i += kGdnThreads) {
        const int tt = i / kUParts, r = (i % kUParts) * 4;
        cp_async<16>(&sm.pf_u[tt][r],
                     record_at(ring, base, tt) + p.f_u + (int64_t{hv} * V + r) * sizeof(float));
      }
      for (int tt = tid; tt < hist; tt += kGdnThreads) {
        cp_async<4>(&sm.pf_eg[tt], record_at(ring, base, tt) + p.f_eg + int64_t{hv} * 4);
        cp_async<4>(&sm.pf_kf[tt], record_at(ring, base, tt) + p.f_kf + int64_t{h} * 4);
      }
    }
    if (window) {
      const int64_t st = p.qkv_stride_token;
      const Act* in = static_cast<const Act*>(p.qkv) + d.begin * st;
      const int count = d.count;
      for (int i = tid; i < count * kKParts; i += kGdnThreads) {
        const int tt = i / kKParts, e = (i % kKParts) * kE;
        cp_async<16>(&sm.pf_q[hist + tt][e], in + tt * st + int64_t{h} * K + e);
        cp_async<16>(&sm.pf_k[hist + tt][e], in + tt * st + (int64_t{p.num_k_heads} + h) * K + e);
      }
      for (int i = tid; i < count * kVParts; i += kGdnThreads) {
        const int tt = i / kVParts, e = (i % kVParts) * kE;
        cp_async<16>(&sm.pf_v[hist + tt][e],
                     in + tt * st + 2 * int64_t{p.num_k_heads} * K + int64_t{hv} * V + e);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  // Item j's gates as loaded (thread tt < count: token tt's a and b), after the wait.
  uint32_t ga = 0u, gb = 0u;
  const auto load_gates = [&](int j) {
    int row, hv, h;
    item_heads(j, row, hv, h);
    const GdnPersistItem& d = sm.items[j];
    if (tid < d.count) {
      const int64_t t = d.begin + tid;
      ga = act_bits(static_cast<const Act*>(p.a)[t * p.a_stride_token + hv * p.a_stride_h]);
      gb = act_bits(static_cast<const Act*>(p.b)[t * p.b_stride_token + hv * p.b_stride_h]);
    }
  };

  if (mine > 0 && fits(0)) copy_item(0, true, false);
  grid_dependency_wait();
  if (mine > 0 && fits(0)) {
    copy_item(0, false, true);
    load_gates(0);
  }

#pragma unroll 1
  for (int j = 0; j < mine; ++j) {
    int row, hv, h;
    item_heads(j, row, hv, h);
    if (!fits(j)) {
      // The per-block path (a padding row, no window, or a long history), then the next item's
      // copies with nothing to overlap.
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncthreads();
      gdn_persistent_fallback<Act, St, K>(p, sm.base, nblk, h, hv, sm.items[j].a_log,
                                          sm.items[j].dt_bias, row);
      __syncthreads();
      if (j + 1 < mine && fits(j + 1)) {
        copy_item(j + 1, true, true);
        load_gates(j + 1);
      }
      continue;
    }
    const int hist = sm.items[j].hist, count = sm.items[j].count;
    // The item's copies landed (every thread's): its inputs into the chunk as gdn_stage's
    // staged launch takes them (raw q, k, v and gates as floats at rows hist + tt), its history
    // as gdn_replay_vblocks stages it (k^ = k * kf, scale_raw_rows' product; u; e^g).
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    for (int i = tid; i < count * (K / 4); i += kGdnThreads) {
      const int tt = hist + i / (K / 4), e = (i % (K / 4)) * 4;
      *reinterpret_cast<float4*>(&c.q[tt][e]) = load4<Act>(&sm.pf_q[tt][e]);
      *reinterpret_cast<float4*>(&c.k[tt][e]) = load4<Act>(&sm.pf_k[tt][e]);
    }
    for (int i = tid; i < count * kRows; i += kGdnThreads) {
      const int tt = hist + i / kRows, r = i % kRows;
      c.v[tt][r] = to_float<Act>(sm.pf_v[tt][r]);
    }
    if (tid < count) {
      c.eg[hist + tid] = float_from_act_bits<Act>(ga);
      c.beta[hist + tid] = float_from_act_bits<Act>(gb);
    }
    for (int i = tid; i < hist * (K / 4); i += kGdnThreads) {
      const int tt = i / (K / 4), e = (i % (K / 4)) * 4;
      float4 x = load4<Act>(&sm.pf_k[tt][e]);
      const float f = sm.pf_kf[tt];
      x.x *= f;
      x.y *= f;
      x.z *= f;
      x.w *= f;
      *reinterpret_cast<float4*>(&c.k[tt][e]) = x;
    }
    for (int i = tid; i < hist * kRows; i += kGdnThreads) {
      const int tt = i / kRows, r = i % kRows;
      c.v[tt][r] = sm.pf_u[tt][r];
    }
    if (tid < hist) c.eg[tid] = sm.pf_eg[tid];
    __syncthreads();
    const int slot = sm.items[j].slot;
    const int64_t begin = sm.items[j].begin;
    const GdnRowInputs<Act> in = gdn_row_inputs<Act, K, kRows>(p, begin, h, hv, 0);
    GdnFactorSink sink;
    if (p.write_factors && p.factors != nullptr) {
      sink.ring = p.factors + slot * p.factor_stride_slot;
      sink.wpos = sm.items[j].wpos;
      sink.eg_writer = true;
      sink.k_writer = hv == h * p.v_per_k;
    }
    {
      const float A = p.A_log ? -expf(sm.items[j].a_log) : 0.0f;
      gdn_stage<Act, K, kRows, kChunk, false, true>(c, p, in, h, hv, 0, count, A,
                                                    sm.items[j].dt_bias, sink, hist, false);
    }
    set_rows(0);
    float4 S[RPT][NK];
#pragma unroll
    for (int q = 0; q < RPT; ++q) gdn_load_state<St, NK, LANES>(next_mine(q), S[q], kl, rows.ok[q]);

    St* const committed =
        static_cast<St*>(p.state) + slot * p.state_stride_slot + int64_t{hv} * V * K;
    const char* const ring = p.factors + slot * p.factor_stride_slot;
    const bool writer = kl == 0;
    float* const u_rec = sink.ring != nullptr
                             ? reinterpret_cast<float*>(sink.ring + p.f_u) + int64_t{hv} * V
                             : nullptr;
    Act* const out_v = static_cast<Act*>(p.out) + begin * p.out_stride_token + hv * p.out_stride_h;
    const int nv = (hist + count) * kRows;  // staged rows of a block: u history, then v
#pragma unroll 1
    for (int vb = 0; vb < nblk; ++vb) {
      const bool more = vb + 1 < nblk;
      const bool copy_next = !more && j + 1 < mine && fits(j + 1);
      uint32_t pre[kPre] = {};
      for (int tt = 0; tt < hist; ++tt) {
        gdn_apply<St, K, LANES, RPT, kRows, kChunk>(S, c, tt, kl, rows);
      }
      if (sm.items[j].store) {
#pragma unroll
        for (int q = 0; q < RPT; ++q) {
          if (rows.ok[q])
            gdn_store_state<St, NK, LANES>(committed + rows.v[q] * K, S[q], kl, false);
        }
      }
      if (more) {
        // The next block's staged rows (u history, then v) into registers while this one
        // computes.
        const int base = sm.items[j].base;
#pragma unroll
        for (int q = 0; q < kPre; ++q) {
          const int i = tid + q * kGdnThreads;
          if (i < nv) {
            const int tt = i / kRows, r = i % kRows, vr = (vb + 1) * kRows + r;
            if (tt < hist) {
              pre[q] = reinterpret_cast<const uint32_t*>(record_at(ring, base, tt) +
                                                         p.f_u)[int64_t{hv} * V + vr];
            } else {
              pre[q] = act_bits(in.v[(tt - hist) * in.st + vr * in.sc]);
            }
          }
        }
      }
      // Window token t: the step, its output and u record into the block's rows.
      const auto token = [&](int t) {
        float u[RPT], o[RPT];
        gdn_step<St, K, LANES, RPT, kRows, kChunk>(S, c, hist + t, kl, rows, u, o,
                                                   t + 1 < count || p.store_final || p.last_state);
        if (writer) {
#pragma unroll
          for (int q = 0; q < RPT; ++q) {
            sm.base.out_rows[t][rows.vrow[q]] = o[q];
            sm.base.u_rows[t][rows.vrow[q]] = u[q];
          }
        }
      };
      // Token 0 peeled: the copies it is followed by are tested once a block, not once a token
      // (their predicates were reloaded from local memory every token).
      token(0);
      if (more) {
        // The next block's state into shared memory (this thread's own elements), issued after a
        // step has consumed S.
#pragma unroll
        for (int q = 0; q < RPT; ++q) {
          const St* src = committed + int64_t{(vb + 1) * kRows + rows.vrow[q]} * K;
#pragma unroll
          for (int i = 0; i < NK; ++i) {
            cp_async<4 * sizeof(St)>(next_mine(q) + i * 4 * LANES + kl * 4,
                                     src + i * 4 * LANES + kl * 4);
          }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
      } else if (copy_next) {
        // The last block: the next item's copies (its first block's state into next_state, read
        // back after this item; its records and window into the pf arrays, read by nobody until
        // the next item's staging).
        copy_item(j + 1, true, true);
      }
#pragma unroll 1
      for (int t = 1; t < count; ++t) token(t);
      if (p.store_final) {
#pragma unroll
        for (int q = 0; q < RPT; ++q) {
          if (rows.ok[q])
            gdn_store_state<St, NK, LANES>(committed + rows.v[q] * K, S[q], kl, false);
        }
      }
      if (copy_next) load_gates(j + 1);
      // Every thread is done with this block's staged rows, and its outputs are in shared memory.
      __syncthreads();
      gdn_flush_block<Act, kRows, kChunk>(p, sm.base.out_rows, sm.base.u_rows, out_v, u_rec,
                                          sm.items[j].wpos, count, vb * kRows);
      if (more) {
#pragma unroll
        for (int q = 0; q < kPre; ++q) {
          const int i = tid + q * kGdnThreads;
          if (i < nv) {
            const int tt = i / kRows;
            c.v[tt][i % kRows] =
                tt < hist ? __uint_as_float(pre[q]) : float_from_act_bits<Act>(pre[q]);
          }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        set_rows(vb + 1);
#pragma unroll
        for (int q = 0; q < RPT; ++q)
          gdn_load_state<St, NK, LANES>(next_mine(q), S[q], kl, rows.ok[q]);
      }
    }
  }
}

// Whether a GDN replay verify launch can take the persistent kernel (see above): bf16
// activations (the shared memory of four CTAs an SM), K = 128, [V][K] states, a chain with
// records and a cursor, V a multiple of a block's 32 rows, every q, k and v run 16-byte aligned.
template <typename Act, int K>
bool gdn_persistent_fits(const GdnRecurrenceParams& p) {
  if constexpr (sizeof(Act) != 2 || K != 128) {
    return false;
  } else {
    constexpr int kRows = 2 * gdn_rows_per_cta<8>();
    const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    return p.cursor != nullptr && p.parents == nullptr && p.snap == nullptr && !p.state_kv &&
           p.tokens > 0 && p.tokens <= kGdnChunk && p.head_v_dim > 0 && p.head_v_dim % kRows == 0 &&
           p.qkv_stride_c == 1 && (p.qkv_stride_token * 2) % 16 == 0 && aligned(p.qkv) &&
           p.factors != nullptr && aligned(p.factors) && p.factor_bytes % 16 == 0 &&
           p.factor_stride_slot % 16 == 0 && p.f_k % 16 == 0 && p.f_u % 16 == 0 &&
           p.f_eg % 4 == 0 && p.f_kf % 4 == 0;
  }
}

// The kernel's CTAs an SM on the current device: its attributes set (its shared memory is
// dynamic, over 48 KiB, with the largest shared-memory carveout; every launch, as a device reset
// clears them), then the occupancy the runtime reports, asked once a device: a persistent grid
// sized for more CTAs than fit runs its last ones as a second wave, each with a full share of
// items.
template <typename Act, typename St, int K>
cudaError_t gdn_persistent_ctas_per_sm(int* out) {
  const auto kernel = gdn_persistent_kernel<Act, St, K>;
  constexpr int kSmem = static_cast<int>(sizeof(GdnPersistSharedOf<Act, St, K>));
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
  }
  int device = 0;
  if (err == cudaSuccess) err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0: unknown
  if (device >= 0 && device < kDevices && (*out = known[device].load()) > 0) return cudaSuccess;
  int n = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kGdnThreads, kSmem);
  if (err != cudaSuccess) return err;
  *out = n > 0 ? n : 1;
  if (device >= 0 && device < kDevices) known[device].store(*out);
  return cudaSuccess;
}

// The launch: a grid of as many CTAs as the GPU holds at once (fewer where the items are fewer,
// more where a CTA would otherwise resolve more than kGdnPersistMaxItems);
// SPECSTATE_GDN_PERSIST_CTAS caps it (tests: many items a CTA at small batches).
template <typename Act, typename St, int K>
cudaError_t launch_gdn_persistent(const GdnRecurrenceParams& p, cudaStream_t stream) {
  int per_sm = 0;
  const cudaError_t occ = gdn_persistent_ctas_per_sm<Act, St, K>(&per_sm);
  if (occ != cudaSuccess) return occ;
  const int64_t items = int64_t{p.rows} * p.num_v_heads;
  int64_t grid = std::min<int64_t>(items, int64_t{device_sm_count()} * per_sm);
  if (const char* e = std::getenv("SPECSTATE_GDN_PERSIST_CTAS")) {
    const int64_t cap = std::atoll(e);
    if (cap > 0) grid = std::min(grid, cap);
  }
  grid = std::max(grid, (items + kGdnPersistMaxItems - 1) / kGdnPersistMaxItems);
  if (env_flag("SPECSTATE_GDN_PERSIST_LOG")) {
    std::fprintf(stderr, "gdn_persistent: %d CTAs an SM, grid %lld, items %lld\n", per_sm,
                 static_cast<long long>(grid), static_cast<long long>(items));
  }
  return launch_kernel_smem(true, sizeof(GdnPersistSharedOf<Act, St, K>),
                            gdn_persistent_kernel<Act, St, K>, dim3(static_cast<unsigned>(grid)),
                            dim3(kGdnThreads), stream, p);
}

}  // namespace specstate::kernels
