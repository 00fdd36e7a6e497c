// Kernel of launch_gdn_fused (see gdn_fused.h): a GDN or KDA replay verify of a chain as one
// launch per layer, for small batches. Each CTA (row, value head, V block) first computes the
// conv outputs of the channels it reads (q and k of its key head, its own v rows) from the
// slot's committed window, its pending steps' records and the window's inputs (staged once per
// channel group in shared memory, as conv_replay_small_kernel does; conv_window_output), straight
// into the chunk the token step reads; then it runs the recurrence as gdn_row_block's merged replay
// path does (history prefetched with cp.async, gdn_stage, gdn_apply_raw, gdn_step). Conv outputs
// pass through the act dtype as they do through conv_out in the two-kernel path, so the results are
// the same bits.
#pragma once

#include "conv_update.cuh"
#include "gdn_fused.h"
#include "gdn_recurrence.cuh"

namespace specstate::kernels {

template <typename Act, int K, bool kKda, int W>
struct GdnFusedShared {
  static constexpr int kRows = gdn_rows_per_cta<8>();
  static constexpr int kQK = K / kConvChannels;                    // channel groups of q (and of k)
  static constexpr int kGroups = 2 * kQK + kRows / kConvChannels;  // q, k, then this block's v
  // A group's input history: the committed window (W-1 columns), the pending steps' records and
  // the window's inputs; pending + window <= 2 max_window <= ring <= kGdnChunk (gdn_fused_chosen,
  // PoolOptions' ring check). In the act dtype (= the conv state dtype here): every element is
  // exact in it.
  static constexpr int kElems = W - 1 + kGdnChunk;
  GdnChunk<K, kRows, kGdnChunk, kKda> chunk;
  float hist_kf[kGdnChunk];
  __align__(16) Act seq[kGroups][kElems][kConvChannels];
  // Each group's conv weights and bias in float (load_conv_weights), loaded before the grid
  // dependency wait: the conv's arithmetic after it reads them from here, not from global memory.
  // [C][W] weights then [C] bias a group, read as float4 (kWts floats, a multiple of 4).
  static constexpr int kWts = kConvChannels * (W + 1);
  static_assert(kWts % 4 == 0, "a group's weights and bias are whole float4");
  __align__(16) float wts[kGroups][kWts];
  int last;  // this CTA is the last of its key head to have read q's and k's conv state
};

// Channel group g of the CTA (q's groups, k's, then V rows v0 ..): its first channel in the
// conv's [q | k | v] and its channels (*nc; 0 past the head's V rows).
template <int K, int kRows>
__device__ __forceinline__ int fused_group_channel(const GdnRecurrenceParams& p, int g, int h,
                                                   int hv, int v0, int* nc) {
  constexpr int C = kConvChannels, kQK = K / C;
  if (g < 2 * kQK) {
    *nc = C;
    return g < kQK ? h * K + g * C : (p.num_k_heads + h) * K + (g - kQK) * C;
  }
  const int r = (g - 2 * kQK) * C;
  *nc = max(0, min(C, p.head_v_dim - v0 - r));
  return 2 * p.num_k_heads * K + hv * p.head_v_dim + v0 + r;
}

// The conv of the CTA's channels for the row's window tokens into chunk rows off + t (q and k
// raw, v), then the conv state writes: the window after the pending steps (where the conv kernel
// stores it) and each window token's record. Each group's input history is staged once in
// sm.seq (conv_replay_small_kernel's scheme: an element per thread, loads issued together), then
// each (group, token) computes from it. This CTA's v channels are written by it after its
// reads; q's and k's by the key head's last CTA to arrive (gdn_fused.h). The chunk rows are
// complete at its second barrier. Conv state dtype = Act (gdn_fused_chosen).
template <typename Act, int K, int kRows, bool kKda, int W, typename Shared>
__device__ __forceinline__ void gdn_fused_conv(Shared& sm, const GdnFusedParams& fp, int r,
                                               int slot, const RowTokens& rt, int h, int hv,
                                               int vblock, int off, const GdnRowInputs<Act>& in) {
  using St = Act;
  constexpr int C = kConvChannels, H = W - 1, kQK = Shared::kQK, kGroups = Shared::kGroups;
  const ConvUpdateParams& cp = fp.conv;
  const GdnRecurrenceParams& p = fp.rec;
  const int v0 = vblock * kRows;
  const int n = cp.pending[slot];
  const Act* const x = static_cast<const Act*>(cp.x);
  Act* const rec0 = static_cast<Act*>(cp.records) + slot * cp.record_stride_slot;
  St* const st0 = static_cast<St*>(cp.state) + slot * cp.state_stride_slot;
  const int32_t* const path = cp.path + slot * cp.path_stride_slot;
  const auto put = [&](int g, int k, const float(&v)[C]) {
    store_n<Act, C>(&sm.seq[g][k][0], v, true);
  };
  // Stage: each group's committed window (its W-1 columns; threads 0 .. kGroups-1), then item
  // (g, e), element H + e (pending step e's record, then window input e - n), two items a thread
  // at a time so that their loads are in flight together.
  // Only E[n ..] is read (conv_first_kept): the committed window only where n < H, the pending
  // steps from n - H on.
  const int e_first = conv_first_kept(n, H);
  if (threadIdx.x < kGroups && n < H) {
    const int g = threadIdx.x;
    int nc = 0;
    const int c0 = fused_group_channel<K, kRows>(p, g, h, hv, v0, &nc);
    if (nc > 0) {
      float w[C * H];
      load_window<St, C, H>(st0 + int64_t{c0} * H, false, 0, nc == C, nc, w);
#pragma unroll
      for (int k = 0; k < H; ++k) {
        float col[C];
#pragma unroll
        for (int c = 0; c < C; ++c) col[c] = w[c * H + k];
        put(g, k, col);
      }
    }
  }
  // Elements [e_lo, e_hi) of every group: two items a thread at a time, each loaded as the bits it
  // holds (ActBits: no conversion, and none is needed, sm.seq is in the act dtype) so that both
  // loads are in flight before either is stored.
  const auto stage = [&](int e_lo, int e_hi) {
    const int items = kGroups * (e_hi - e_lo);
    for (int i0 = threadIdx.x; i0 < items; i0 += 2 * kGdnThreads) {
      ActBits<Act, C> v[2];
      int gs[2], es[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int i = i0 + q * kGdnThreads;
        gs[q] = i % kGroups;
        es[q] = i < items ? e_lo + i / kGroups : -1;
        int nc = 0;
        const int c0 = fused_group_channel<K, kRows>(p, gs[q], h, hv, v0, &nc);
        if (nc == 0) es[q] = -1;  // no channels: nothing read (the compute writes zeros)
        if (es[q] < 0) continue;
        const int e = es[q];
        if (e < n) {
          v[q].load(rec0 + c0 + path[e] * cp.record_stride_t, 1, nc == C, nc);
        } else {
          v[q].load(x + (rt.begin + e - n) * cp.x_stride_token + c0 * cp.x_stride_c, cp.x_stride_c,
                    nc == C, nc);
        }
      }
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        if (es[q] >= 0) v[q].store(&sm.seq[gs[q]][H + es[q]][0]);
      }
    }
  };
  // A programmatic dependent of the previous layer's kernel (fp.programmatic) stages the pending
  // steps' records and the weights, then waits for that kernel, then stages the window's inputs
  // (x); otherwise the records with the inputs (the wait is then a no-op).
  const int e_split = fp.programmatic ? n : e_first;
  stage(e_first, e_split);
  // The weights of group g by thread kWeightThread0 + g (threads other than the committed
  // windows' 0 .. kGroups-1). Nobody writes them in the round.
  constexpr int kWeightThread0 = kGdnThreads - kGroups;
  static_assert(kWeightThread0 >= kGroups, "the weights' threads are not the windows'");
  if (threadIdx.x >= kWeightThread0) {
    const int g = threadIdx.x - kWeightThread0;
    int nc = 0;
    const int c0 = fused_group_channel<K, kRows>(p, g, h, hv, v0, &nc);
    if (nc > 0) {
      float w[C][W], bias[C];
      load_conv_weights<W>(cp, c0, nc, w, bias);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        sm.wts[g][C * W + c] = bias[c];
#pragma unroll
        for (int j = 0; j < W; ++j) sm.wts[g][c * W + j] = w[c][j];
      }
    }
  }
  // This CTA has read its key head's q and k conv state (the committed windows and the pending
  // steps' records) once every read is above: its arrival. Counted before the wait where the
  // launch is programmatic (the records were staged above; the counters are not the previous fused
  // launch's, gdn_fused.h), else after the inputs' barrier below; either way its round trip
  // overlaps other work and its result is read after the conv's arithmetic.
  bool last = false;
  const auto arrive = [&] {
    if (threadIdx.x == 0) {
      const int readers = p.v_per_k * ((p.head_v_dim + kRows - 1) / kRows);
      int32_t* const counter = fp.counters + int64_t{r} * p.num_k_heads + h;
      __threadfence();
      last = atomicAdd(counter, 1) == readers - 1;
    }
  };
  if (fp.programmatic) {
    __syncthreads();
    arrive();
  }
  grid_dependency_wait();
  // The window's raw gates (gdn_stage<kStaged> finishes them from the chunk; the mapping of
  // gdn_stage: GDN a token a thread, KDA a (token, key channel) item a thread, beta a token a
  // thread; T <= kGdnChunk / 2 here), loaded as their bits before the inputs and converted only
  // after the inputs' barrier: every load of this chain is in flight at once, where converting
  // each as it arrived made them round trips one after the other (KDA: one a token).
  static_assert(!kKda || K == kGdnThreads, "KDA: token q's gate of channel tid is item q");
  constexpr int kGatePre = kKda ? kGdnChunk / 2 : 1;
  static_assert(kGdnChunk / 2 <= kGdnThreads, "a token's gates a thread");
  uint32_t gbits[kGatePre], bbits = 0u;
  const int tid = threadIdx.x;
#pragma unroll
  for (int q = 0; q < kGatePre; ++q) {
    gbits[q] = 0u;
    if (kKda ? q < rt.count : tid < rt.count)
      gbits[q] = act_bits(in.a[kKda ? q * in.a_st + tid * p.a_stride_k : tid * in.a_st]);
  }
  if (tid < rt.count) bbits = act_bits(in.b[tid * in.b_st]);
  stage(e_split, n + rt.count);
  __syncthreads();  // every read of this CTA's committed windows and records is above
  // The gates to the chunk (gdn_stage reads them after the next barrier): loaded with the inputs,
  // they are here.
#pragma unroll
  for (int q = 0; q < kGatePre; ++q) {
    if constexpr (kKda) {
      if (q < rt.count) sm.chunk.egk[off + q][tid] = float_from_act_bits<Act>(gbits[q]);
    } else {
      if (tid < rt.count) sm.chunk.eg[off + tid] = float_from_act_bits<Act>(gbits[q]);
    }
  }
  if (tid < rt.count) sm.chunk.beta[off + tid] = float_from_act_bits<Act>(bbits);
  if (!fp.programmatic) arrive();
  // conv_out (where asked): v by each CTA, q and k by the key head's designated CTA.
  const bool qk_out = fp.write_conv_out && vblock == 0 && hv == h * p.v_per_k;
  for (int i = threadIdx.x; i < kGroups * rt.count; i += kGdnThreads) {
    const int g = i % kGroups, t = i / kGroups;
    int nc = 0;
    const int c0 = fused_group_channel<K, kRows>(p, g, h, hv, v0, &nc);
    float* const dst = g < kQK       ? &sm.chunk.q[off + t][g * C]
                       : g < 2 * kQK ? &sm.chunk.k[off + t][(g - kQK) * C]
                                     : &sm.chunk.v[off + t][(g - 2 * kQK) * C];
    if (nc == 0) {
#pragma unroll
      for (int j = 0; j < C; ++j) dst[j] = 0.0f;
      continue;
    }
    const bool full = nc == C;
    float w[C][W];
    float bias[C];
    {
      float wf[Shared::kWts];
#pragma unroll
      for (int e = 0; e < Shared::kWts; e += 4) {
        const float4 f = *reinterpret_cast<const float4*>(&sm.wts[g][e]);
        wf[e] = f.x;
        wf[e + 1] = f.y;
        wf[e + 2] = f.z;
        wf[e + 3] = f.w;
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        bias[c] = wf[C * W + c];
#pragma unroll
        for (int j = 0; j < W; ++j) w[c][j] = wf[c * W + j];
      }
    }
    float win[W][C];  // E[n + t .. n + t + W-1], oldest first
#pragma unroll
    for (int j = 0; j < W; ++j) load_n<Act, C>(&sm.seq[g][n + t + j][0], win[j], true);
    float y[C];
    conv_window_output<W>(w, bias, win, y);
    // The value the recurrence reads back from conv_out in the two-kernel path.
#pragma unroll
    for (int j = 0; j < C; ++j) dst[j] = j < nc ? to_float<Act>(from_float<Act>(y[j])) : 0.0f;
    if (fp.write_conv_out && (g >= 2 * kQK || qk_out)) {
      store_row<Act, C>(
          static_cast<Act*>(cp.out) + (rt.begin + t) * cp.out_stride_token + c0 * cp.out_stride_c,
          cp.out_stride_c, full, nc, y);
    }
  }
  if (threadIdx.x == 0) {
    if (last) {
      // Every reader has arrived: zero for the launch after next, the next user of this set
      // (gdn_fused.h). No fence: that launch counts only after the launch between has passed its
      // grid-dependency wait, which returns once this grid has completed and its writes are
      // visible; a fence here only held the head's last CTA (the latest) at the barrier below.
      atomicExch(fp.counters + int64_t{r} * p.num_k_heads + h, 0);
    }
    sm.last = last;
  }
  __syncthreads();
  const bool qk_writer = sm.last != 0;
  const bool store_window = n > 0 && (cp.store_replayed || (cp.store_final && rt.count == 0));
  const bool write_records = cp.write_records && rt.count > 0;
  // Writes: item (g, t): t = 0 also the window after the pending steps (E[n .. n + H - 1]), each
  // t its record (its own input E[H + n + t], exact in the act dtype: the conv kernels' rule).
  const int writes = kGroups * max(rt.count, 1);
  for (int i = threadIdx.x; i < writes; i += kGdnThreads) {
    const int g = i % kGroups, t = i / kGroups;
    if (g < 2 * kQK && !qk_writer) continue;
    int nc = 0;
    const int c0 = fused_group_channel<K, kRows>(p, g, h, hv, v0, &nc);
    if (nc == 0) continue;
    const bool full = nc == C;
    if (t == 0 && store_window) {
      St* const st = st0 + int64_t{c0} * H;
      float s[C * H];
#pragma unroll
      for (int k = 0; k < H; ++k) {
        float col[C];
        load_n<Act, C>(&sm.seq[g][n + k][0], col, true);
#pragma unroll
        for (int c = 0; c < C; ++c) s[c * H + k] = col[c];
      }
      if (full) {
        store_n<St, C * H>(st, s, aligned16(st));
      } else {
#pragma unroll
        for (int e = 0; e < C * H; ++e) {
          if (e < nc * H) st[e] = from_float<St>(s[e]);
        }
      }
    }
    if (write_records) {
      float xin[C];
      load_n<Act, C>(&sm.seq[g][H + n + t][0], xin, true);
      store_row<Act, C>(rec0 + c0 + t * cp.record_stride_t, 1, full, nc, xin);
    }
  }
}

#ifndef SPECSTATE_GDN_FUSED_MIN_CTAS
#define SPECSTATE_GDN_FUSED_MIN_CTAS 4
#endif
// The kernel: grid (V blocks, value heads, rows), 128 threads, one V block of 16 rows per CTA;
// K = 128 (gdn_fused_chosen), f32 SSM state.
template <typename Act, bool kKda, int K, int W>
__global__ void __launch_bounds__(kGdnThreads, SPECSTATE_GDN_FUSED_MIN_CTAS)
    gdn_fused_kernel(const __grid_constant__ GdnFusedParams fp) {
  using St = float;
  constexpr int LANES = 8;
  constexpr int NK = K / (4 * LANES);
  constexpr int kRows = gdn_rows_per_cta<LANES>();
  constexpr int kRowsPerWarp = 32 / LANES;
  constexpr int kChunk = kGdnChunk;
  __shared__ GdnFusedShared<Act, K, kKda, W> sm;
  const GdnRecurrenceParams& p = fp.rec;
  const int vblock = blockIdx.x, hv = blockIdx.y, r = blockIdx.z;
  const int h = head_group(hv, p.inv_v_per_k);
  // The layer's gate parameters first (gdn_recurrence_kernel's order).
  const float a_log = load_any_or_zero(p.A_log, p.a_log_dtype, hv * p.a_log_stride);
  const float dt_bias = gdn_dt_bias<kKda, K>(p, hv);  // KDA: this thread's key channel's
  const int row = r;
  const int slot = p.slots[row];
  if (slot < 0) {
    // A padding row: every CTA of the row returns, nothing read or written; after waiting for
    // the grid before it, so that this grid never completes before that one (common.cuh).
    grid_dependency_wait();
    return;
  }
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, kl = lane % LANES;
  const int V = p.head_v_dim;
  GdnRows<1> rows;
  rows.vrow[0] = warp * kRowsPerWarp + lane / LANES;
  rows.v[0] = vblock * kRows + rows.vrow[0];
  rows.ok[0] = rows.v[0] < V;
  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  const ReplayCursor cur = replay_cursor(p, slot, rt.count);
  const char* const ring = p.factors + slot * p.factor_stride_slot;
  if (cur.hist > 0) {
    gdn_prefetch_history<Act, K, kRows, kChunk>(sm.chunk, sm.hist_kf, p, ring, cur.base, h, hv,
                                                cur.hist, vblock);
  }
  St* const committed =
      static_cast<St*>(p.state) + slot * p.state_stride_slot + int64_t{hv} * V * K;
  float4 S[1][NK];
  gdn_load_state<St, NK, LANES>(committed + int64_t{rows.ok[0] ? rows.v[0] : 0} * K, S[0], kl,
                                rows.ok[0]);
  const GdnRowInputs<Act> in = gdn_row_inputs<Act, K, kRows>(p, rt.begin, h, hv, vblock);
  // The window's conv outputs land at chunk rows hist .., after the history's (ring <= kChunk).
  gdn_fused_conv<Act, K, kRows, kKda, W>(sm, fp, r, slot, rt, h, hv, vblock, cur.hist, in);

  const float A = p.A_log ? -expf(a_log) : 0.0f;
  GdnFactorSink sink;
  if (p.write_factors && p.factors != nullptr) {
    sink.ring = p.factors + slot * p.factor_stride_slot;
    sink.wpos = cur.wpos;
    sink.eg_writer = vblock == 0;
    sink.k_writer = vblock == 0 && hv == h * p.v_per_k;
  }
  gdn_stage<Act, K, kRows, kChunk, kKda, true>(sm.chunk, p, in, h, hv, 0, rt.count, A, dt_bias,
                                               sink, cur.hist, cur.hist > 0);
  for (int tt = 0; tt < cur.hist; ++tt) {
    gdn_apply_raw<Act, St, K, LANES, 1, kRows, kChunk>(S, sm.chunk, sm.hist_kf, tt, kl, rows);
  }
  if (cur.store && rows.ok[0]) {
    gdn_store_state<St, NK, LANES>(committed + int64_t{rows.v[0]} * K, S[0], kl, false);
  }
  const bool writer = kl == 0;
  float* const u_row =
      sink.ring != nullptr && writer && rows.ok[0]
          ? reinterpret_cast<float*>(sink.ring + p.f_u) + int64_t{hv} * V + rows.v[0]
          : nullptr;
  const int64_t u_stride = p.factor_bytes / 4;  // a ring may pass 8 GiB (R up to 2^30)
  Act* const o_row = writer && rows.ok[0]
                         ? static_cast<Act*>(p.out) + rt.begin * p.out_stride_token +
                               hv * p.out_stride_h + rows.v[0] * p.out_stride_v
                         : nullptr;
  for (int t = 0; t < rt.count; ++t) {
    float u[1], o[1];
    // The state after the window's last token is never read (no snapshots, nothing stored).
    gdn_step<St, K, LANES, 1, kRows, kChunk>(S, sm.chunk, cur.hist + t, kl, rows, u, o,
                                             t + 1 < rt.count || p.last_state);
    if (u_row != nullptr) {
      int pos = cur.wpos + t;  // wpos < R, t < T <= R
      if (pos >= p.ring) pos -= p.ring;
      u_row[pos * u_stride] = u[0];
    }
    if (o_row != nullptr) o_row[t * p.out_stride_token] = from_float<Act>(o[0]);
  }
}

}  // namespace specstate::kernels
