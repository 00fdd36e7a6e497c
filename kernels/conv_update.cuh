// Kernel of launch_conv_update (see conv_update.h). DESIGN.md section 3, causal conv1d update:
//   win = [s_0 .. s_{W-2}, x_t];  y_t = silu(bias + sum_j w[j] win[j]);  s <- win[1:]
// In a tree the window of token t is the last W inputs of (start history, ancestors of t, t), the
// start history being the committed window after any replayed steps (DESIGN.md section 6).
#pragma once

#include <type_traits>

#include "common.cuh"
#include "conv_update.h"

namespace specstate::kernels {

inline constexpr int kConvChannels = 8;  // channels per thread (16-byte bf16 vectors)
inline constexpr int kConvThreads = 64;
// Window tokens of a chain whose inputs the narrow token loop loads together
// (conv_update_kernel).
inline constexpr int kConvBatch = 4;

// N channels of one token's row (channel stride `stride_c`; a partial group, nc < N, reads
// zeros past nc and writes nothing there), as 16-byte vectors where the layout allows.
template <typename Act, int N>
__device__ __forceinline__ void load_row(const Act* ptr, int64_t stride_c, bool full, int nc,
                                         float (&out)[N]) {
  if (full && stride_c == 1 && aligned_vec<Act, N>(ptr)) {
    load_n<Act, N>(ptr, out, true);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = k < nc ? to_float<Act>(ptr[k * stride_c]) : 0.0f;
  }
}

template <typename Act, int N>
__device__ __forceinline__ void store_row(Act* ptr, int64_t stride_c, bool full, int nc,
                                          const float (&in)[N]) {
  if (full && stride_c == 1 && aligned_vec<Act, N>(ptr)) {
    store_n<Act, N>(ptr, in, true);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k < nc) ptr[k * stride_c] = from_float<Act>(in[k]);
    }
  }
}

// A channel group's conv window, s[i * H + k] = channel c0 + i, column k, in a window of the
// launch's element order (ConvUpdateParams::channels_last): channels first, the group's C x H
// elements are contiguous at `st`; channels last, its column k is C contiguous channels at
// st + k * conv_dim. `st` is the group's first element (conv_group_offset); a partial group
// (nc < C) reads zeros past nc and writes nothing there.
template <int H>
__device__ __forceinline__ int64_t conv_group_offset(int c0, bool last) {
  return last ? int64_t{c0} : int64_t{c0} * H;
}

template <typename St, int C, int H>
__device__ __forceinline__ void load_window(const St* st, bool last, int64_t conv_dim, bool full,
                                            int nc, float (&s)[C * H]) {
  if (!last) {
    if (full) {
      load_n<St, C * H>(st, s, aligned_vec<St, C * H>(st));
    } else {
#pragma unroll
      for (int i = 0; i < C * H; ++i) s[i] = i < nc * H ? to_float<St>(st[i]) : 0.0f;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < H; ++k) {
    float col[C];
    load_row<St, C>(st + k * conv_dim, 1, full, nc, col);  // column k: C contiguous channels
#pragma unroll
    for (int i = 0; i < C; ++i) s[i * H + k] = col[i];
  }
}

template <typename St, int C, int H>
__device__ __forceinline__ void store_window(St* st, bool last, int64_t conv_dim, bool full, int nc,
                                             const float (&s)[C * H]) {
  if (!last) {
    if (full) {
      store_n<St, C * H>(st, s, aligned_vec<St, C * H>(st));
    } else {
#pragma unroll
      for (int i = 0; i < C * H; ++i) {
        if (i < nc * H) st[i] = from_float<St>(s[i]);
      }
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < H; ++k) {
    float col[C];
#pragma unroll
    for (int i = 0; i < C; ++i) col[i] = s[i * H + k];
    store_row<St, C>(st + k * conv_dim, 1, full, nc, col);
  }
}

// The conv weights [C][W] and bias [C] of channels c0 .. c0 + nc (a partial group repeats
// channel c0), in float, whatever their dtype and strides.
template <int W, int C = kConvChannels>
__device__ __forceinline__ void load_conv_weights(const ConvUpdateParams& p, int c0, int nc,
                                                  float (&w)[C][W], float (&bias)[C]) {
  if (p.weight == nullptr) {
    // A materialize: pending conv steps only shift the window; no output, no weights.
#pragma unroll
    for (int i = 0; i < C; ++i) {
      bias[i] = 0.0f;
#pragma unroll
      for (int j = 0; j < W; ++j) w[i][j] = 0.0f;
    }
    return;
  }
  const bool full = nc == C;
  float wf[C * W];
  const bool w_contig = full && p.weight_stride_tap == 1 && p.weight_stride_c == W;
  if (w_contig && p.weight_dtype == ElemType::kBF16 &&
      aligned_vec<bf16, C * W>(static_cast<const bf16*>(p.weight) + int64_t{c0} * W)) {
    load_n<bf16, C * W>(static_cast<const bf16*>(p.weight) + int64_t{c0} * W, wf, true);
  } else if (w_contig && p.weight_dtype == ElemType::kF32 &&
             aligned_vec<float, C * W>(static_cast<const float*>(p.weight) + int64_t{c0} * W)) {
    load_n<float, C * W>(static_cast<const float*>(p.weight) + int64_t{c0} * W, wf, true);
  } else {
    // Any layout, element by element: a loop per dtype, not load_any's two loads per element
    // (both issued, one kept), whose 2 C W registers set the launch's peak (the fused kernel's
    // prologue spilled on them).
    const auto strided = [&](const auto* wp) {
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int c = i < nc ? c0 + i : c0;
#pragma unroll
        for (int j = 0; j < W; ++j) {
          wf[i * W + j] = to_float(wp[c * p.weight_stride_c + j * p.weight_stride_tap]);
        }
      }
    };
    if (p.weight_dtype == ElemType::kBF16) {
      strided(static_cast<const bf16*>(p.weight));
    } else {
      strided(static_cast<const float*>(p.weight));
    }
  }
#pragma unroll
  for (int i = 0; i < C; ++i) {
#pragma unroll
    for (int j = 0; j < W; ++j) w[i][j] = wf[i * W + j];
  }
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = i < nc ? c0 + i : c0;
    bias[i] = p.has_bias ? load_any(p.bias, p.bias_dtype, c * p.bias_stride) : 0.0f;
  }
}

// The conv output of one token from its window (oldest first; DESIGN.md section 3):
// y = silu(bias + sum_j w[j] win[j]), the one arithmetic of every conv kernel (per channel: the
// same whatever the channels per thread C).
template <int W, int C = kConvChannels>
__device__ __forceinline__ void conv_window_output(const float (&w)[C][W], const float (&bias)[C],
                                                   const float (&win)[W][C], float (&y)[C]) {
#pragma unroll
  for (int i = 0; i < C; ++i) {
    float acc = bias[i];
#pragma unroll
    for (int j = 0; j < W; ++j) acc += w[i][j] * win[j][i];
    y[i] = silu(acc);
  }
}

// Prefetches a row's window inputs of channels [c0, c0 + C) into L1 (the token loop's).
template <typename Act>
__device__ __forceinline__ void prefetch_window_inputs(const ConvUpdateParams& p, int row, int c0) {
  const RowTokens ahead = row_tokens(p.varlen, row, p.tokens);
  for (int t = 0; t < ahead.count; ++t) {
    prefetch_l1(static_cast<const Act*>(p.x) + (ahead.begin + t) * p.x_stride_token +
                c0 * p.x_stride_c);
  }
}

// kRecords: the instantiation that reads or writes replay records (the snapshot and plain advance
// instantiation carries none of that code: at small batches every instruction before the loads
// is latency).
// kLast: the windows are channels last (p.channels_last), an instantiation of its own so that the
// default order's code is what it was.
// C: channels per thread (kConvChannels; 4 for token loops of many rows, conv_narrow_choice: half
// the registers, twice the threads in flight, measured in docs/cuda.md).
// kChain: the token loop of chains (no parents) with its inputs loaded in batches (the narrow
// kernel's instantiation for chains; trees walk their ancestors).
template <typename Act, typename St, int W, bool kRecords, bool kLast, int C = kConvChannels,
          bool kChain = false>
__global__ void __launch_bounds__(kConvThreads, C < kConvChannels ? 12 : 1)
    conv_update_kernel(const __grid_constant__ ConvUpdateParams p, bool token_loop) {
  constexpr int H = W - 1;
  // Lets the recurrence kernel that follows (launched with programmatic stream serialization)
  // start its conv-independent prologue now; it waits for this grid before reading conv_out.
  launch_dependents();
  const int groups = (p.conv_dim + C - 1) / C;
  const bool has_records = kRecords && p.records != nullptr;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  const int row = r;
  if (g >= groups) return;
  const int c0 = g * C;
  const int nc = min(C, p.conv_dim - c0);
  const bool full = nc == C;

  // Weights and bias first: they do not depend on the slot, so their loads overlap its load.
  float w[C][W];
  float bias[C];
  load_conv_weights<W, C>(p, c0, nc, w, bias);

  const int slot = p.slots ? p.slots[row] : p.slot_inline[r];
  if (slot < 0) {
    // A padding row: nothing read, nothing written; after waiting for the grid before it, so that
    // this grid never completes before that one (common.cuh).
    grid_dependency_wait();
    return;
  }

  // Committed window of these channels, s[i * H + k] whatever the element order. Replay: of the
  // slot's n pending steps only the last H inputs stay in the window (kernels::conv_first_kept), so
  // the committed window is read only where n < H and the records from n - H on.
  constexpr bool last = kLast;
  St* st = static_cast<St*>(p.state) + slot * p.state_stride_slot + conv_group_offset<H>(c0, last);
  const int pending = kRecords && p.pending != nullptr ? p.pending[slot] : 0;
  const int first_kept = conv_first_kept(pending, H);
  float s[C * H];
  if (pending < H) {
    load_window<St, C, H>(st, last, p.conv_dim, full, nc, s);
  } else {
#pragma unroll
    for (int i = 0; i < C * H; ++i) s[i] = 0.0f;  // every column is replaced below
  }

  Act* rec =
      has_records ? static_cast<Act*>(p.records) + slot * p.record_stride_slot + c0 : nullptr;
  if (kRecords && token_loop) {
    // One thread walks the pending steps and then the window tokens; each step's input load
    // would be a round trip on that path (the stores between steps keep the compiler from
    // hoisting the next load). Fetch them all into L1 now, at once: at small batches this
    // latency is the kernel's time.
    if (p.pending != nullptr && rec != nullptr) {
      for (int i = first_kept; i < pending; ++i) {
        prefetch_l1(rec + p.path[slot * p.path_stride_slot + i] * p.record_stride_t);
      }
    }
    // The window's inputs too, unless this launch is a programmatic dependent of the previous
    // layer's kernel: then x (that kernel's successor's output, in an engine) is read only after
    // the wait below.
    if (!p.programmatic) prefetch_window_inputs<Act>(p, row, c0);
  }
  if (kRecords && p.pending != nullptr) {
    // Replay (token_loop): the slot's pending steps, in order, from the committed window: each
    // shifts its recorded input into the window (their conv outputs are not needed: the
    // recurrence applies factor records). The window then starts from the result. A step whose
    // input is shifted out again by H later ones changes nothing: the walk starts at first_kept.
    for (int i = first_kept; i < pending; ++i) {
      const int t = p.path[slot * p.path_stride_slot + i];
      float xin[C];
      load_row<Act, C>(rec + t * p.record_stride_t, 1, full, nc, xin);
      // Shift: the input joins the window in the conv state dtype, as a committed window holds
      // it.
#pragma unroll
      for (int k = 0; k < C; ++k) {
#pragma unroll
        for (int j = 0; j + 1 < H; ++j) s[k * H + j] = s[k * H + j + 1];
        s[k * H + H - 1] = round_to<St>(xin[k]);
      }
    }
  }
  // Everything above reads only this layer's weights, committed window and records and the
  // slots: a kernel before this one in the stream writes none of them (the backend asks for the
  // programmatic edge only then). The inputs, conv_out and every write come after the wait.
  grid_dependency_wait();
  // (kChain loads its inputs in batches right away, below: no prefetch.)
  if (kRecords && token_loop && p.programmatic && !kChain) {
    prefetch_window_inputs<Act>(p, row, c0);
  }
  if (kRecords && p.pending != nullptr) {
    if (pending > 0 &&
        (p.store_replayed || (p.store_final && row_tokens(p.varlen, row, p.tokens).count == 0))) {
      store_window<St, C, H>(st, last, p.conv_dim, full, nc, s);
    }
  }

  const Act* x = static_cast<const Act*>(p.x);
  // token_loop: one thread walks every token of its row (weights and window loaded once; large
  // batches); otherwise one token per thread (grid z = token; small batches need the threads).
  // The row's tokens, computed here so that nothing of them is live across the replay above.
  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  const int t_begin = token_loop ? 0 : blockIdx.z;
  const int t_end = token_loop ? rt.count : min(static_cast<int>(blockIdx.z) + 1, rt.count);
  const int64_t row_token0 = rt.begin;                  // inputs and outputs
  const int64_t row_parent0 = int64_t{row} * p.tokens;  // parents: [rows, tokens]
  if constexpr (kChain) {
    // A chain (token_loop, no parents): token t's window is the committed window
    // shifted by tokens 0 .. t-1, so each input is loaded once, kConvBatch tokens' loads
    // issued together before any of their stores (one round trip a batch instead of one a
    // token; held as their bits until used), and the window slides in registers. The values
    // are the tree walk's below: an earlier input rounded to St, the token's own exact.
    for (int t0 = 0; t0 < rt.count; t0 += kConvBatch) {
      ActBits<Act, C> xb[kConvBatch];
#pragma unroll
      for (int i = 0; i < kConvBatch; ++i) {
        if (t0 + i < rt.count) {
          xb[i].load(x + (row_token0 + t0 + i) * p.x_stride_token + c0 * p.x_stride_c, p.x_stride_c,
                     full, nc);
        }
      }
#pragma unroll
      for (int i = 0; i < kConvBatch; ++i) {
        const int t = t0 + i;
        if (t >= rt.count) break;
        float win[W][C];
#pragma unroll
        for (int c = 0; c < C; ++c) {
#pragma unroll
          for (int j = 0; j < H; ++j) win[j][c] = s[c * H + j];
          win[W - 1][c] = xb[i].get(c);
        }
        if (kRecords && rec != nullptr && p.write_records) {
          store_row<Act, C>(rec + t * p.record_stride_t, 1, full, nc, win[W - 1]);
        }
        float y[C];
        conv_window_output<W, C>(w, bias, win, y);
        store_row<Act, C>(
            static_cast<Act*>(p.out) + (row_token0 + t) * p.out_stride_token + c0 * p.out_stride_c,
            p.out_stride_c, full, nc, y);
#pragma unroll
        for (int c = 0; c < C; ++c) {
#pragma unroll
          for (int j = 0; j + 1 < H; ++j) s[c * H + j] = s[c * H + j + 1];
          s[c * H + H - 1] = round_to<St>(win[W - 1][c]);
        }
        St* dst = nullptr;
        if (p.snap != nullptr) {
          dst = static_cast<St*>(p.snap) + row * p.snap_stride_row + t * p.snap_stride_t +
                conv_group_offset<H>(c0, last);
        } else if (p.store_final && t == rt.count - 1) {
          dst = st;  // every read of the committed window happened above (registers)
        }
        if (dst) store_window<St, C, H>(dst, last, p.conv_dim, full, nc, s);
      }
    }
  } else {
    for (int t = t_begin; t < t_end; ++t) {
      // Window of token t: walk its ancestor path back from t, then the committed window.
      float win[W][C];
      int node = t;
      int depth = 0;
#pragma unroll
      for (int j = W - 1; j >= 0; --j) {
        if (node >= 0) {
          load_row<Act, C>(x + (row_token0 + node) * p.x_stride_token + c0 * p.x_stride_c,
                           p.x_stride_c, full, nc, win[j]);
          if (j < W - 1) {
            // An earlier input of the window: the oracle keeps it in the conv state dtype, so it
            // is seen rounded to St (a no-op when St is the activation dtype or wider).
#pragma unroll
            for (int i = 0; i < C; ++i) win[j][i] = round_to<St>(win[j][i]);
          }
          node = p.parents ? p.parents[row_parent0 + node] : node - 1;
          ++depth;
        } else {
          // Path exhausted after `depth` inputs: win[j] = s[j + depth - 1] (selected by an
          // unrolled compare so that s stays in registers).
          const int src = j + depth - 1;
#pragma unroll
          for (int k = 0; k < H; ++k) {
            if (k == src) {
#pragma unroll
              for (int i = 0; i < C; ++i) win[j][i] = s[i * H + k];
            }
          }
        }
      }
      if (kRecords && rec != nullptr && p.write_records) {
        // The token's own input (exact in the act dtype) is its record.
        store_row<Act, C>(rec + t * p.record_stride_t, 1, full, nc, win[W - 1]);
      }
      float y[C];
      conv_window_output<W, C>(w, bias, win, y);
      store_row<Act, C>(
          static_cast<Act*>(p.out) + (row_token0 + t) * p.out_stride_token + c0 * p.out_stride_c,
          p.out_stride_c, full, nc, y);
      float next[C * H];
#pragma unroll
      for (int i = 0; i < C; ++i) {
#pragma unroll
        for (int j = 0; j < H; ++j) next[i * H + j] = win[j + 1][i];
      }
      St* dst = nullptr;
      if (p.snap != nullptr) {
        dst = static_cast<St*>(p.snap) + row * p.snap_stride_row + t * p.snap_stride_t +
              conv_group_offset<H>(c0, last);
      } else if (p.store_final && t == rt.count - 1) {
        dst = st;  // every read of the committed window happened above (registers)
      }
      if (dst) store_window<St, C, H>(dst, last, p.conv_dim, full, nc, next);
    }
  }
}

// Small batches under replay (verify): a channel group's input history staged once in shared
// memory, then one thread per window token. A group (8 channels) of a row has the sequence
//   E = [committed columns 0 .. W-2 | pending steps' records (path order) | window inputs],
// H + n + T elements of 8 channels. The group's VT threads (VT = 8 or 16, the fewest that hold
// n + T) each load one element (record or window input; thread 0 also the committed window, as
// vectors), into shared memory; after a barrier thread t computes window token t from
// E[n + t .. n + t + W-1] (a chain) or its ancestors over E (a tree), thread 0 stores the
// committed window advanced by the pending steps (E[n .. n + W-2]) if asked. Each element is
// loaded once per group instead of once per token that uses it, and no thread walks a history
// (measured on the H200: docs/cuda.md). The arithmetic is conv_update_kernel's (records and
// earlier inputs rounded to the conv state dtype, conv_window_output), so are the results.
inline constexpr int kReplaySmallThreads = 64;

// Whether every activation value is exact in the conv state dtype St (then rounding to St is the
// identity and is skipped).
template <typename Act, typename St>
inline constexpr bool kActExactInState =
    std::is_same<St, float>::value || std::is_same<St, Act>::value;

template <typename St, typename Act>
__device__ __forceinline__ float round_act_to(float v) {
  if constexpr (kActExactInState<Act, St>) {
    return v;
  } else {
    return round_to<St>(v);
  }
}

template <typename Act, typename St, int W, int VT, bool kLast>
__global__ void __launch_bounds__(kReplaySmallThreads)
    conv_replay_small_kernel(const __grid_constant__ ConvUpdateParams p, int channel_ctas) {
  constexpr int C = kConvChannels;
  constexpr int H = W - 1;
  constexpr int kGroups = kReplaySmallThreads / VT;
  constexpr int kElems = H + VT;  // n + T <= VT (conv_small_vt)
  __shared__ __align__(16) float seq[kGroups][kElems][C];
  launch_dependents();
  (void)channel_ctas;
  const int r = blockIdx.y;
  const int row = r;
  const int groups = (p.conv_dim + C - 1) / C;
  const int gl = threadIdx.x;
  const int g = blockIdx.x * kGroups + gl;
  const int v = threadIdx.y;
  const bool in_group = g < groups;
  const int c0 = g * C;
  const int nc = in_group ? min(C, p.conv_dim - c0) : C;
  const bool full = nc == C;
  // Weights first: they depend on neither the slot nor the pending count (a thread that turns out
  // to have no token loads them for nothing; at these batches the latency is the cost).
  float w[C][W];
  float bias[C];
  if (in_group && v < p.tokens) load_conv_weights<W>(p, c0, nc, w, bias);

  const int slot = p.slots ? p.slots[row] : p.slot_inline[r];
  if (slot < 0) {
    // A padding row (uniform over the CTA): nothing read, nothing written; after waiting for the
    // grid before it, so that this grid never completes before that one (common.cuh).
    grid_dependency_wait();
    return;
  }
  const int n = p.pending[slot];
  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  Act* rec = static_cast<Act*>(p.records) + slot * p.record_stride_slot + c0;
  St* st = static_cast<St*>(p.state) + slot * p.state_stride_slot + conv_group_offset<H>(c0, kLast);
  float(&e)[kElems][C] = seq[gl];
  const auto put = [&](int k, const float(&x)[C]) {
    *reinterpret_cast<float4*>(&e[k][0]) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4*>(&e[k][4]) = make_float4(x[4], x[5], x[6], x[7]);
  };
  // Window input v - n, exact (a token's own input is used unrounded).
  const auto put_input = [&] {
    float x[C];
    load_row<Act, C>(
        static_cast<const Act*>(p.x) + (rt.begin + v - n) * p.x_stride_token + c0 * p.x_stride_c,
        p.x_stride_c, full, nc, x);
    put(H + v, x);
  };
  // Only E[n ..] is read below: pending steps before n - H and, from n = H on, the committed
  // window are not loaded (conv_first_kept).
  if (in_group) {
    if (v < n) {
      // Pending step v's input, from its record, as a committed window holds it.
      if (v >= conv_first_kept(n, H)) {
        float x[C];
        load_row<Act, C>(rec + p.path[slot * p.path_stride_slot + v] * p.record_stride_t, 1, full,
                         nc, x);
#pragma unroll
        for (int i = 0; i < C; ++i) x[i] = round_act_to<St, Act>(x[i]);
        put(H + v, x);
      }
    } else if (v < n + rt.count && !p.programmatic) {
      put_input();
    }
    if (v == 0 && n < H) {
      float s[C * H];
      load_window<St, C, H>(st, kLast, p.conv_dim, full, nc, s);
#pragma unroll
      for (int k = 0; k < H; ++k) {
        float col[C];
#pragma unroll
        for (int i = 0; i < C; ++i) col[i] = s[i * H + k];
        put(k, col);
      }
    }
  }
  // Everything above reads only this layer's weights, committed window and records and the
  // slots (conv_update_kernel's wait); a programmatic dependent reads x after the wait.
  grid_dependency_wait();
  if (in_group && p.programmatic && v >= n && v < n + rt.count) put_input();
  // Every read of the records and of the committed window is above this line.
  __syncthreads();
  if (!in_group) return;
  if (v == 0 && n > 0 && p.store_replayed) {
    // The committed window after the pending steps: E[n .. n + H - 1].
    float s[C * H];
#pragma unroll
    for (int k = 0; k < H; ++k) {
#pragma unroll
      for (int i = 0; i < C; ++i) s[i * H + k] = e[n + k][i];
    }
    store_window<St, C, H>(st, kLast, p.conv_dim, full, nc, s);
  }
  if (v >= rt.count) return;
  const int t = v;
  float win[W][C];  // oldest first; win[W-1] is the token's own input
  const auto take = [&](int j, int k) {
#pragma unroll
    for (int i = 0; i < C; ++i) {
      win[j][i] = j < W - 1 && k >= H + n ? round_act_to<St, Act>(e[k][i]) : e[k][i];
    }
  };
  if (p.parents == nullptr) {
#pragma unroll
    for (int j = 0; j < W; ++j) take(j, n + t + j);
  } else {
    // A tree: the token's ancestors in the window, then the start window E[n + j + depth - 1].
    const int64_t row_parent0 = int64_t{row} * p.tokens;
    int node = t;
    int depth = 0;
#pragma unroll
    for (int j = W - 1; j >= 0; --j) {
      if (node >= 0) {
        take(j, H + n + node);
        node = p.parents[row_parent0 + node];
        ++depth;
      } else {
        take(j, n + j + depth - 1);
      }
    }
  }
  float y[C];
  conv_window_output<W>(w, bias, win, y);
  store_row<Act, C>(
      static_cast<Act*>(p.out) + (rt.begin + t) * p.out_stride_token + c0 * p.out_stride_c,
      p.out_stride_c, full, nc, y);
  // The token's own input, exact in the act dtype, is its record.
  if (p.write_records) store_row<Act, C>(rec + t * p.record_stride_t, 1, full, nc, win[W - 1]);
}

// The replay verify conv of chains from ConvUpdateParams::lean_rows rows (conv_lean_choice): the
// chain token loop of conv_update_kernel (kChain) for the layouts an engine uses
// (conv_lean_applies: channels-first windows, unit channel strides, no partial channel group,
// vector-aligned rows), with its dependent loads regrouped. conv_update_kernel waits for the slot's
// pending count, then for each kept pending step's path entry, then for its record: a round trip
// each. Here the count and the slot's first kConvLeanPath path entries are loaded together, then
// the committed window (where n < W-1) and the kept records together; the whole chain before the
// grid-dependency wait is slot -> (count, path) -> (window, records), and after it the window's
// inputs, loaded kConvBatch at a time. Every value and every operation is conv_update_kernel's
// (records and earlier inputs rounded to St as they join the window, conv_window_output), so are
// the results; a record holds its input's bits as loaded (conv_update_kernel's round trip through
// float may give a NaN input another NaN's bits: no other value changes).
inline constexpr int kConvLeanThreads = 128;
inline constexpr int kConvLeanPath = 8;  // path entries loaded with the pending count

template <typename Act, typename St, int W, int C>
__global__ void __launch_bounds__(kConvLeanThreads)
    conv_lean_kernel(const __grid_constant__ ConvUpdateParams p) {
  constexpr int H = W - 1;
  launch_dependents();
  const int g = blockIdx.x * kConvLeanThreads + threadIdx.x;
  const int row = blockIdx.y;
  const int c0 = g * C;
  if (c0 >= p.conv_dim) return;  // conv_dim % C == 0: a thread's group is whole

  float w[C][W];
  float bias[C];
  load_conv_weights<W, C>(p, c0, C, w, bias);
  const int slot = p.slots ? p.slots[row] : p.slot_inline[row];
  if (slot < 0) {
    // A padding row: nothing read, nothing written (conv_update_kernel's order).
    grid_dependency_wait();
    return;
  }
  const int n = p.pending[slot];
  const int32_t* const path = p.path + slot * p.path_stride_slot;
  int pv[kConvLeanPath];
#pragma unroll
  for (int i = 0; i < kConvLeanPath; ++i) pv[i] = i < p.path_stride_slot ? path[i] : 0;

  // The committed window after the pending steps: the walk of conv_update_kernel, of whose steps
  // only the last H change the window (conv_first_kept): pending step i = n - H + k, where
  // i >= 0, shifts its record (rounded to St) in. The records' loads are issued together first.
  St* const st = static_cast<St*>(p.state) + slot * p.state_stride_slot + int64_t{c0} * H;
  Act* const rec = static_cast<Act*>(p.records) + slot * p.record_stride_slot + c0;
  float s[C * H];
  if (n < H) {
    load_n<St, C * H>(st, s, true);
  } else {
#pragma unroll
    for (int i = 0; i < C * H; ++i) s[i] = 0.0f;  // every column is replaced below
  }
  ActBits<Act, C> rb[H];
#pragma unroll
  for (int k = 0; k < H; ++k) {
    const int i = n - H + k;
    if (i >= 0) {
      int t = 0;
      if (i < kConvLeanPath) {
#pragma unroll
        for (int q = 0; q < kConvLeanPath; ++q) t = q == i ? pv[q] : t;
      } else {
        t = path[i];
      }
      rb[k].load_vec(rec + t * p.record_stride_t);  // aligned: conv_lean_applies
    }
  }
#pragma unroll
  for (int k = 0; k < H; ++k) {
    if (n - H + k >= 0) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int j = 0; j + 1 < H; ++j) s[c * H + j] = s[c * H + j + 1];
        s[c * H + H - 1] = round_to<St>(rb[k].get(c));
      }
    }
  }
  float e[H][C];  // the window, oldest first
#pragma unroll
  for (int k = 0; k < H; ++k) {
#pragma unroll
    for (int c = 0; c < C; ++c) e[k][c] = s[c * H + k];
  }
  // Everything above reads this layer's weights, committed window, pending counts, path and
  // records and the slots (conv_update_kernel's wait); the inputs and every write come after.
  grid_dependency_wait();
  if (n > 0 && p.store_replayed) {
    float sw[C * H];
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int k = 0; k < H; ++k) sw[c * H + k] = e[k][c];
    }
    store_n<St, C * H>(st, sw, true);
  }
  const RowTokens rt = row_tokens(p.varlen, row, p.tokens);
  const Act* const x = static_cast<const Act*>(p.x) + rt.begin * p.x_stride_token + c0;
  Act* const out = static_cast<Act*>(p.out) + rt.begin * p.out_stride_token + c0;
  for (int t0 = 0; t0 < rt.count; t0 += kConvBatch) {
    ActBits<Act, C> xb[kConvBatch];
#pragma unroll
    for (int i = 0; i < kConvBatch; ++i) {
      if (t0 + i < rt.count) xb[i].load_vec(x + (t0 + i) * p.x_stride_token);
    }
#pragma unroll
    for (int i = 0; i < kConvBatch; ++i) {
      const int t = t0 + i;
      if (t >= rt.count) break;
      float win[W][C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int j = 0; j < H; ++j) win[j][c] = e[j][c];
        win[W - 1][c] = xb[i].get(c);
      }
      if (p.write_records) xb[i].store_vec(rec + t * p.record_stride_t);
      float y[C];
      conv_window_output<W, C>(w, bias, win, y);
      store_n<Act, C>(out + t * p.out_stride_token, y, true);
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int j = 0; j + 1 < H; ++j) e[j][c] = e[j + 1][c];
        e[H - 1][c] = round_to<St>(win[W - 1][c]);
      }
    }
  }
}

// Whether conv_lean_kernel can serve a launch: a replay verify of chains (pending steps and
// records, window tokens, no parents, snapshots or final store) of width 4 in the channels-first
// order, unit channel strides, conv_dim a multiple of C, and every row it moves (inputs,
// outputs, records, committed windows) aligned for C-channel vectors.
template <typename Act, typename St, int C>
bool conv_lean_applies(const ConvUpdateParams& p) {
  const auto aligned = [](const void* ptr, int64_t stride_elems, int64_t elem, int64_t vec) {
    return reinterpret_cast<uintptr_t>(ptr) % vec == 0 && (stride_elems * elem) % vec == 0;
  };
  constexpr int64_t kAct = sizeof(Act), kSt = sizeof(St);
  constexpr int64_t va = kVecBytes<Act, C>, vs = kVecBytes<St, C * 3>;
  if constexpr (va == 0 || vs == 0) {
    return false;
  } else {
    return p.pending != nullptr && p.records != nullptr && p.path != nullptr &&
           p.weight != nullptr && p.parents == nullptr && p.snap == nullptr && !p.store_final &&
           !p.channels_last && p.width == 4 && p.tokens > 0 && p.conv_dim % C == 0 &&
           p.x_stride_c == 1 && p.out_stride_c == 1 && aligned(p.x, p.x_stride_token, kAct, va) &&
           aligned(p.out, p.out_stride_token, kAct, va) &&
           aligned(p.records, p.record_stride_slot, kAct, va) &&
           (p.record_stride_t * kAct) % va == 0 && aligned(p.state, p.state_stride_slot, kSt, vs);
  }
}

// One element order's kernels (kLast: channels-last windows).
template <typename Act, typename St, bool kLast>
cudaError_t launch_conv_update_order(const ConvUpdateParams& p, cudaStream_t stream) {
  const int groups = (p.conv_dim + kConvChannels - 1) / kConvChannels;
  // A final store and a replay must loop (the committed window is read, then updated in place;
  // the pending records are read before the same thread overwrites them). Otherwise loop from 64
  // rows on: measured on H200 (Qwen3-Next, T = 2/4/8), the token loop is 1.2-1.5x faster at
  // B = 128 and 1.1-1.2x slower at B = 32 than one token per thread.
  // (A window past the grid's z extent, kMaxGridYZ, takes the token loop too.)
  const bool loop = p.store_final || p.pending != nullptr || p.tokens == 0 || p.rows >= 64 ||
                    p.tokens > kMaxGridYZ;
  const bool records = p.records != nullptr || p.pending != nullptr;
  // Small replay verifies: a channel group's input history in shared memory, a thread per window
  // token. Measured on the H200 (docs/cuda.md, "Replay conv at small batches: the input history
  // in shared memory"; rounds of 36 GDN / 24 Mamba2 layers, token loop -> this kernel, us):
  // Qwen3-Next T = 2: B = 4 583.1 -> 544.0, B = 8 779.9 -> 714.4, B = 16 1076.6 -> 1134.5; T = 4:
  // B = 4 795.6 -> 641.8, B = 8 1032.9 -> 852.6, B = 16 1453.7 -> 1393.7; T = 8: B = 16 2338.9 ->
  // 2280.0. Nemotron-H T = 2: B = 1 332.6 -> 350.7, B = 8 897.0 -> 913.6; T = 4: B = 1 447.8 ->
  // 399.4, B = 8 1136.6 -> 1076.8. Hence the per-kind row ranges (small_rows_lo / hi /
  // short_hi, kernels::conv_small_vt). The pending steps are at most path_stride_slot.
  // SPECSTATE_CONV_SMALL=0 / 1 forces the choice where the path applies (tuning and tests).
  const int vt =
      conv_small_vt(p.rows, p.tokens, p.path_stride_slot, p.small_rows_lo, p.small_rows_hi,
                    p.small_rows_short_hi, env_force("SPECSTATE_CONV_SMALL"));
  const bool small =
      vt > 0 && p.pending != nullptr && p.records != nullptr && !p.store_final && p.snap == nullptr;
  // The replay verify of chains from p.lean_rows rows: the lean kernel where the layout allows
  // (conv_lean_applies), over the small-batch kernel; SPECSTATE_CONV_LEAN=0 / 1 forces the choice
  // (tuning and tests). Another conv switch forced (SPECSTATE_CONV_SMALL, _NARROW, _BATCH, _TWO)
  // keeps its kernel unless lean is forced too.
  if constexpr (!kLast) {
    constexpr int kLeanC = 4;
    const int lean_forced = env_force("SPECSTATE_CONV_LEAN");
    const auto other_forced = [] {
      return env_force("SPECSTATE_CONV_SMALL") >= 0 || env_force("SPECSTATE_CONV_NARROW") >= 0 ||
             env_force("SPECSTATE_CONV_BATCH") >= 0 || env_force("SPECSTATE_CONV_TWO") >= 0;
    };
    if (conv_lean_choice(conv_lean_applies<Act, St, kLeanC>(p), p.rows, p.lean_rows, lean_forced) &&
        (lean_forced == 1 || !other_forced())) {
      const dim3 grid((p.conv_dim / kLeanC + kConvLeanThreads - 1) / kConvLeanThreads, p.rows);
      const cudaError_t e = launch_kernel(p.programmatic, conv_lean_kernel<Act, St, 4, kLeanC>,
                                          grid, dim3(kConvLeanThreads), stream, p);
      if (e == cudaSuccess) count_conv_lean_launch();
      return e;
    }
  }
  if (small) {
    const int per_cta = kReplaySmallThreads / vt;  // channel groups of a CTA
    const int channel_ctas = (groups + per_cta - 1) / per_cta;
    const dim3 small_grid(channel_ctas, p.rows);
    const dim3 block(per_cta, vt);
    const auto launch = [&](auto kernel) {
      return launch_kernel(p.programmatic, kernel, small_grid, block, stream, p, channel_ctas);
    };
    switch (p.width * 2 + (vt == 8 ? 0 : 1)) {
      case 4:
        return launch(conv_replay_small_kernel<Act, St, 2, 8, kLast>);
      case 5:
        return launch(conv_replay_small_kernel<Act, St, 2, 16, kLast>);
      case 6:
        return launch(conv_replay_small_kernel<Act, St, 3, 8, kLast>);
      case 7:
        return launch(conv_replay_small_kernel<Act, St, 3, 16, kLast>);
      case 8:
        return launch(conv_replay_small_kernel<Act, St, 4, 8, kLast>);
      case 9:
        return launch(conv_replay_small_kernel<Act, St, 4, 16, kLast>);
      default:
        return cudaErrorInvalidValue;
    }
  }
  // Four channels a thread (half the registers, twice the threads) for token loops of many rows:
  // SPECSTATE_CONV_NARROW=0 / 1 forces the choice (tuning and tests).
  const bool narrow = conv_narrow_choice(loop, p.rows, env_force("SPECSTATE_CONV_NARROW"));
  const auto run = [&](auto kernel, int channels) {
    const int g = (p.conv_dim + channels - 1) / channels;
    const dim3 grid_c((g + kConvThreads - 1) / kConvThreads, p.rows, loop ? 1 : p.tokens);
    return launch_kernel(p.programmatic, kernel, grid_c, dim3(kConvThreads), stream, p, loop);
  };
  // Width x records (replay or not) x channels a thread (x chain: the narrow kernel's token
  // loop over chains loads a batch of inputs at once, kChain).
  const auto dispatch = [&](auto channels, auto chain) {
    constexpr int C = decltype(channels)::value;
    constexpr bool kChain = decltype(chain)::value;
    switch (p.width * 2 + (records ? 1 : 0)) {
      case 4:
        return run(conv_update_kernel<Act, St, 2, false, kLast, C, kChain>, C);
      case 5:
        return run(conv_update_kernel<Act, St, 2, true, kLast, C, kChain>, C);
      case 6:
        return run(conv_update_kernel<Act, St, 3, false, kLast, C, kChain>, C);
      case 7:
        return run(conv_update_kernel<Act, St, 3, true, kLast, C, kChain>, C);
      case 8:
        return run(conv_update_kernel<Act, St, 4, false, kLast, C, kChain>, C);
      case 9:
        return run(conv_update_kernel<Act, St, 4, true, kLast, C, kChain>, C);
      default:
        return cudaErrorInvalidValue;
    }
  };
  // Two channels a thread (four times the threads of eight) for a replay chain's token loop of
  // width 4 with bf16 activations, up to kConvTwoRows rows (conv_two_choice; SPECSTATE_CONV_TWO=0
  // / 1 forces the choice).
  if constexpr (std::is_same_v<Act, bf16>) {
    if (conv_two_choice(records && p.width == 4 && p.parents == nullptr, loop, p.rows,
                        env_force("SPECSTATE_CONV_TWO"))) {
      return run(conv_update_kernel<Act, St, 4, true, kLast, 2, true>, 2);
    }
  }
  if (!narrow) {
    return dispatch(std::integral_constant<int, kConvChannels>{}, std::false_type{});
  }
  // SPECSTATE_CONV_BATCH=0 keeps the narrow chain on the token-by-token walk (A/B and tests).
  return conv_chain_choice(narrow, p.parents == nullptr, env_force("SPECSTATE_CONV_BATCH"))
             ? dispatch(std::integral_constant<int, 4>{}, std::true_type{})
             : dispatch(std::integral_constant<int, 4>{}, std::false_type{});
}

template <typename Act, typename St>
cudaError_t launch_conv_update_typed(const ConvUpdateParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.tokens < 0) return cudaSuccess;
  if (p.tokens == 0 && p.pending == nullptr) return cudaSuccess;
  return p.channels_last ? launch_conv_update_order<Act, St, true>(p, stream)
                         : launch_conv_update_order<Act, St, false>(p, stream);
}

}  // namespace specstate::kernels
