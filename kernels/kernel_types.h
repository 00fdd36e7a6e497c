// Host-safe types shared by the kernels' launcher declarations (no CUDA device code here).
#pragma once

#include <cstdint>

namespace specstate::kernels {

// Element types the kernels read and write. Values match specstate::DType (the host side
// converts explicitly; kernels/ does not include the public API).
enum class ElemType : int32_t { kF32 = 0, kBF16 = 1 };

// Largest number of values one upload launch carries in its parameters (4 KiB parameter
// budget of a classic launch), and of arrays it writes.
inline constexpr int kUploadChunk = 960;
inline constexpr int kUploadSpans = 4;

// An int32 array to upload: n values from host memory `values` to device memory `dst`.
struct UploadSpan {
  int32_t* dst = nullptr;
  const int32_t* values = nullptr;
  int n = 0;
};

// One upload launch's parameters: array s is values[begin[s], begin[s + 1]) -> dst[s].
struct UploadBatch {
  int spans = 0;
  int32_t* dst[kUploadSpans] = {};
  int begin[kUploadSpans + 1] = {};
  int32_t values[kUploadChunk] = {};
};

// Packs `spans` in order into as few batches as kUploadSpans arrays and kUploadChunk values a
// batch allow (an array longer than a batch's room continues in the next), calling
// launch(const UploadBatch&) for each; stops at and returns launch's first non-zero result (0:
// all launched). Shared by launch_upload_i32 and its host test.
template <typename Launch>
int pack_upload(const UploadSpan* spans, int count, Launch&& launch) {
  UploadBatch b;
  const auto flush = [&]() {
    if (b.spans == 0) return 0;
    const int err = static_cast<int>(launch(static_cast<const UploadBatch&>(b)));
    b = UploadBatch{};
    return err;
  };
  for (int s = 0; s < count; ++s) {
    for (int done = 0; done < spans[s].n;) {
      if (b.spans == kUploadSpans || b.begin[b.spans] == kUploadChunk) {
        if (const int err = flush()) return err;
      }
      const int at = b.begin[b.spans];
      const int n = spans[s].n - done < kUploadChunk - at ? spans[s].n - done : kUploadChunk - at;
      for (int i = 0; i < n; ++i) b.values[at + i] = spans[s].values[done + i];
      b.dst[b.spans] = spans[s].dst + done;
      b.begin[++b.spans] = at + n;
      done += n;
    }
  }
  return flush();
}

// Variable windows (DESIGN.md section 2): the tokens of a launch's rows, packed by cumulative
// offsets. `cu` is [rows + 1] int32 device memory (the pool's uploaded offsets, or
// the caller's device cu_seqlens read at execution time): row r's tokens are [cu[r], cu[r+1])
// of the inputs. Null: every row has `tokens` tokens at r * tokens. A row whose range is
// malformed (cu[r] < 0, cu[r+1] < cu[r], more than `tokens` tokens, or past `capacity`) runs
// no token: its inputs are read by nobody and no output or state of it is written.
struct RowTokensParams {
  const int32_t* cu = nullptr;
  int64_t capacity = 0;  // tokens the inputs hold (with cu)
};

// The device commit's reading of `accepted` (kernels/commit.h).
enum class CommitMode : int32_t {
  kAcceptedLength = 0,  // chain: a in [0, T]; 0 = keep; the snapshot of token a-1 commits
  kNode = 1,            // tree (or resolved steps): node in [-1, T-1]; -1 = keep
};

// Bits of the commit's error flag (OR-ed over rows). A round with any flagged row commits nothing.
inline constexpr int32_t kCommitErrorLengthAboveWindow = 1;  // chain a > T
inline constexpr int32_t kCommitErrorLengthNegative = 2;     // chain a < 0
inline constexpr int32_t kCommitErrorNodeOutOfRange = 4;     // tree node outside [-1, T-1]
inline constexpr int32_t kCommitErrorBadLengths = 8;         // the row's token range is malformed

// The window of `row` in a commit (T, or T_r under variable windows, read from v.cu); a malformed
// range (cu[r] < 0, cu[r+1] < cu[r], more than T tokens, or past v.capacity) sets *error to
// kCommitErrorBadLengths and returns -1. The device commit's check (commit.cu), host-safe.
constexpr int row_window(const RowTokensParams& v, int row, int window, int32_t* error) {
  if (v.cu == nullptr) return window;
  const int64_t b = v.cu[row], e = v.cu[row + 1];
  if (b < 0 || e < b || e - b > window || e > v.capacity) {
    *error = kCommitErrorBadLengths;
    return -1;
  }
  return static_cast<int>(e - b);
}

// The last accepted window index of a row (-1 = keep) from its raw `value` under `mode` and its
// window (row_window's: < 0, the row is already flagged); an out-of-range value sets *error to
// its bit and keeps the row. The device commit's check (commit.cu), host-safe.
constexpr int commit_step(CommitMode mode, int value, int window, int32_t* error) {
  if (window < 0) return -1;
  if (mode == CommitMode::kAcceptedLength) {
    if (value > window) {
      *error = kCommitErrorLengthAboveWindow;
    } else if (value < 0) {
      *error = kCommitErrorLengthNegative;
    } else {
      return value - 1;
    }
    return -1;
  }
  if (value < -1 || value >= window) {
    *error = kCommitErrorNodeOutOfRange;
    return -1;
  }
  return value;
}

// Replay factor records (DESIGN.md sections 4 and 6): one token's rank-1 factors, so that applying
// an accepted token is one multiply-add per state element. Byte offsets inside a record; the
// record is padded to 16 bytes. Shared by the CPU oracle and the kernels (host-safe, pure).
//   GDN:    u f32 [HV][V] (beta (v - e^g S k^)), e^g f32 [HV], kf f32 [H] (1 / |k|), k act [H][K]
//           (the conv output as the step read it; k^ = k * kf, recomputed bit for bit)
//   Mamba2: dt f32 [nheads], dA f32 [nheads], x act [nheads][P], B act [G][N]
//           (dB = B * dt recomputed bit for bit; S = S * dA + dB x^T)
//   KDA:    u f32 [HV][V], e^g f32 [HV][K] (the decay per key channel, DESIGN.md section 3),
//           kf f32 [H], k act [H][K] (as GDN's); every part 16-byte aligned
//           (S[v][i] = e^g[i] S[v][i] + u[v] k^[i])
struct GdnFactorLayout {
  int64_t u = 0, eg = 0, kf = 0, k = 0, bytes = 0;
};
constexpr int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// The sum of kParts partial sums v[0 .. kParts) in the order of the token steps' shuffle butterfly
// (__shfl_xor_sync at distances LANES / 2, ..., 1): given the values its distances from LANES / 2
// down to kParts left (lane kl's at index kl % kParts), at distance m lane i adds lane i ^ m's
// value to its own, and a float sum is the same bits in either order, so v[i] += v[i + m] for
// i < m is lane i's sum. kernels::lanes_sum (GDN's window outputs formed at a block's flush)
// adds staged partials with it; tests/cpu/test_replay_blocks.cpp checks it against a simulated
// butterfly, tests/gpu/test_kernel_helpers.cu against the shuffles.
template <int kParts>
constexpr float butterfly_sum(const float (&part)[kParts]) {
  static_assert(kParts > 0 && (kParts & (kParts - 1)) == 0, "a power of two");
  float v[kParts] = {};
  for (int i = 0; i < kParts; ++i) v[i] = part[i];
  for (int m = kParts / 2; m > 0; m >>= 1) {
    for (int i = 0; i < m; ++i) v[i] += v[i + m];
  }
  return v[0];
}

#ifndef SPECSTATE_MAMBA2_Y_HALVES
// 1: several channels a thread reduce their outputs' y = S.C by halves (kernels::mamba2_step_rows);
// 0: a whole butterfly per channel (the A/B of docs/cuda.md's thirty-eighth session).
#define SPECSTATE_MAMBA2_Y_HALVES 1
#endif
// The channel (of a thread's RPT, a power of two) lane kl of a channel group of LANES lanes keeps
// when mamba2_step_rows reduces y by halves: at each of the butterfly's first log2(RPT)
// distances, LANES / 2 first, a lane keeps the half of its remaining channels that distance's bit
// of kl names (the upper half where it is set) and sends its partner its partials of the other
// half; the kept sum then runs the remaining distances. Every addition is the butterfly's,
// operand for operand, so lane kl ends with the bits of channel mamba2_y_kept(kl)'s butterfly sum
// (tests/cpu/test_replay_blocks.cpp simulates both).
template <int LANES, int RPT>
constexpr int mamba2_y_kept(int kl) {
  static_assert(RPT >= 1 && RPT <= LANES && (RPT & (RPT - 1)) == 0, "a power of two <= LANES");
  int kept = 0;
  for (int half = RPT / 2, d = LANES / 2; half >= 1; half /= 2, d /= 2) {
    if ((kl & d) != 0) kept += half;
  }
  return kept;
}
// The lane of a channel group that ends mamba2_step_rows holding channel j's y (of RPT), and so
// stores its output: the lowest lane that keeps channel j where the reduction runs by halves
// (mamba2_y_kept: lane 0 for channel 0, LANES / 2 for channel 1 of two; 0, LANES / 4, LANES / 2
// and 3 LANES / 4 for four), else lane j (the butterfly leaves every channel's y in every lane).
template <int LANES, int RPT>
constexpr int mamba2_y_lane(int j) {
  if (!(RPT >= 2 && SPECSTATE_MAMBA2_Y_HALVES)) return j;
  int lane = 0;
  for (int half = RPT / 2, d = LANES / 2; half >= 1; half /= 2, d /= 2) {
    if ((j & half) != 0) lane += d;
  }
  return lane;
}

// Head h's group where a group holds n heads (Mamba2: the group of B and C; GDN and KDA: the key
// head of value head h, n value heads a key head), from the launcher's reciprocal inv = 1.0f / n:
// h / n without an integer division (about 20 instructions on a kernel's prologue, before the
// loads that need the group). Exact wherever h + 0.5 and the head count are below 2^22:
// (h + 0.5) / n is at least 0.5 / n from an integer, and the float reciprocal and product are
// within (heads / n) * 2^-23 of it (tests/cpu/test_replay_blocks.cpp checks every h of every head
// count to 2048 and every group size of it).
constexpr int head_group(int h, float inv) {
  return static_cast<int>((static_cast<float>(h) + 0.5f) * inv);
}

// A CUDA grid's y and z extents are at most 65535. The launches put a round's rows there (every
// verify, prefill and decode launch), the heads (the recurrences' y: GDN's and KDA's value heads,
// Mamba2's heads) and the layers (the commit's grid); a window's tokens (the small-batch conv's
// z) fall back to the conv's token loop instead. A pool whose rows, heads or layers pass the
// limit could not run a round: CudaBackend::can_implement refuses it, naming the first one
// (`heads_name`: the config's field) and its value (what = nullptr: every one fits).
inline constexpr int64_t kMaxGridYZ = 65535;
struct GridExtent {
  const char* what;
  int64_t value;
};
constexpr GridExtent cuda_grid_limit_exceeded(int64_t max_rows, int64_t heads,
                                              const char* heads_name, int64_t layers) {
  return max_rows > kMaxGridYZ ? GridExtent{"max_rows", max_rows}
         : heads > kMaxGridYZ  ? GridExtent{heads_name, heads}
         : layers > kMaxGridYZ ? GridExtent{"num_layers", layers}
                               : GridExtent{nullptr, 0};
}
constexpr GdnFactorLayout gdn_factor_layout(int64_t H, int64_t HV, int64_t K, int64_t V,
                                            int64_t act_bytes) {
  GdnFactorLayout l;
  l.u = 0;
  l.eg = l.u + 4 * HV * V;
  l.kf = l.eg + 4 * HV;
  l.k = round_up16(l.kf + 4 * H);
  l.bytes = round_up16(l.k + act_bytes * H * K);
  return l;
}
struct Mamba2FactorLayout {
  int64_t dt = 0, dA = 0, x = 0, B = 0, bytes = 0;
};
constexpr Mamba2FactorLayout mamba2_factor_layout(int64_t nheads, int64_t P, int64_t G, int64_t N,
                                                  int64_t act_bytes) {
  Mamba2FactorLayout l;
  l.dt = 0;
  l.dA = 4 * nheads;
  l.x = round_up16(l.dA + 4 * nheads);
  l.B = round_up16(l.x + act_bytes * nheads * P);
  l.bytes = round_up16(l.B + act_bytes * G * N);
  return l;
}

struct KdaFactorLayout {
  int64_t u = 0, eg = 0, kf = 0, k = 0, bytes = 0;
};
constexpr KdaFactorLayout kda_factor_layout(int64_t H, int64_t HV, int64_t K, int64_t V,
                                            int64_t act_bytes) {
  KdaFactorLayout l;
  l.u = 0;
  l.eg = round_up16(l.u + 4 * HV * V);
  l.kf = round_up16(l.eg + 4 * HV * K);
  l.k = round_up16(l.kf + 4 * H);
  l.bytes = round_up16(l.k + act_bytes * H * K);
  return l;
}

// Tokens the GDN / KDA verify stages in shared memory at a time (launch_gdn_recurrence): a replay
// chain applies history plus window within one chunk on its fast paths.
inline constexpr int kGdnChunk = 16;
// Tokens the Mamba2 verify stages in shared memory at a time (launch_mamba2_recurrence; also the
// longest tree window it recomputes without snapshots). Here, host-safe, so that the pool's
// default ring (default_replay_ring) can check that its longest replay fits.
inline constexpr int kMamba2Chunk = 16;

// The fold predicate (DESIGN.md section 6): a verify whose slot has h history records folds
// (stores the post-history state as the new checkpoint) iff h > L, the round's fold limit. Any
// L <= R - 2 * T_max keeps the window's records and the next commit inside the ring, and a fold
// changes no bits (it stores the state the history gives), so L is a free choice per round:
// replay_fold_limit. A pure function of (h, L): verify, commit, discard and materialize of a
// round evaluate it with the round's L alike, with no host sync.
constexpr bool replay_folds(int h, int fold_limit) { return h > fold_limit; }

// A cursor (base, h) consumed: its h history records are in the checkpoint now (a fold, an
// accepted path committed in place, a discard that materialized them).
constexpr void consume_cursor(int& base, int& h, int ring) {
  base = (base + h) % ring;
  h = 0;
}
// A cursor settled after a round with fold limit L: consumed iff the round's verify folded it.
constexpr void settle_cursor(int& base, int& h, int ring, int fold_limit) {
  if (replay_folds(h, fold_limit)) consume_cursor(base, h, ring);
}

// The fold limit of a round of `rows` verify rows on a ring of R records and windows of up to
// T_max tokens: R - 2 T_max (the most history the ring allows) from `full_rows` rows on
// (PoolOptions::replay_fold_rows; 0: kFoldFullRows); below, at most max(2 T_max, 6) -
// 2 T_max, what the smallest default ring allows. Measured on the H200
// (Qwen3-Next-80B TP1 replay rounds, T = 4, R = 12 against R = 8): B = 1 1.018 (latency-bound:
// each history record adds a dependent step), B = 16 / 32 / 64 / 128 0.985 / 0.966 / 0.933 /
// 0.929 (fewer state writes): docs/cuda.md, "Two rows a thread at B = 8, the ring at T = 4 and
// the per-round fold limit"; B = 8, once it ran two rows a thread, 0.971 (the whole ring against
// the small limit; B = 1 1.020): "Stall reasons, the prefetch knobs measured and removed". So
// rounds below 8 rows fold as a ring of 2T would, larger ones use the whole ring.
inline constexpr int kFoldFullRows = 8;
constexpr int replay_fold_limit(int max_window, int ring, int rows, int full_rows = 0) {
  if (full_rows <= 0) full_rows = kFoldFullRows;
  const int full = ring - 2 * max_window;
  const int small = (2 * max_window > 6 ? 2 * max_window : 6) - 2 * max_window;
  return rows >= full_rows || full <= small ? full : small;
}

// Blocks (of V rows, or channels) of one (row, head) per CTA of a replay chain launch: the most
// of 1, 2, 4 or 8 (at most `blocks`, the head's blocks) whose CTAs, rows * heads * ceil(blocks /
// n), still number at least `min_per_sm` per SM on `sms` SMs; `forced` (1, 2, 4 or 8, capped at
// `blocks`) overrides, anything else is ignored. kernels/common.cuh's replay_vblocks_for supplies
// the device's SM count and the environment's override.
constexpr int replay_blocks_per_cta(int64_t rows, int64_t heads, int blocks, int min_per_sm,
                                    int sms, int forced = 0) {
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) {
    return forced < blocks ? forced : (blocks > 0 ? blocks : 1);
  }
  const int64_t slots = int64_t{sms} * min_per_sm;
  int vb = 1;
  while (vb * 2 <= blocks && vb < 8 && rows * heads * ((blocks + vb * 2 - 1) / (vb * 2)) >= slots) {
    vb *= 2;
  }
  return vb;
}

// The replay verify conv's small-batch kernel (conv_replay_small_kernel: a channel group's input
// history staged in shared memory, a thread per window token) for a launch of `rows` rows of
// `tokens` window tokens whose pending steps are at most `max_window`: its virtual tokens per
// channel group (8 where pending + window fit in 8, else 16), or 0 for the token loop. Per kind
// (ConvUpdateParams::small_rows_lo / hi / short_hi): T >= 8, rows <= max(8, rows_hi); T in 4..7,
// rows in [rows_lo, rows_hi]; T in 2..3, rows in [rows_lo, short_hi] (short_hi 0: never); T = 1
// never. GDN 2..8 (kGdnConvSmallRows*), Mamba2 1..8 and 1..4 at T < 4, KDA 1..6
// (kKdaConvSmallRowsHi) and 1..4. `forced` (0 or 1; -1 none) overrides where the kernel applies
// (rows <= 16, pending + window <= 16). Measured on the H200: docs/cuda.md, "Replay conv at small
// batches: the input history in shared memory"; Mamba2's and KDA's T < 4 on the H100 ("Replay rings
// of Mamba2 and KDA"; rounds at T = 2, the token loop -> this kernel): Nemotron-H B = 1 / 2 / 4 / 8
// / 16 0.809 / 0.851 / 0.894 / 1.008 / 1.064, Kimi-Linear B = 4 / 8 0.954 / 1.099 (B <= 2: the
// fused launch). kernels/conv_update.cuh calls it with SPECSTATE_CONV_SMALL. kConvSmallRows*: the
// default row ranges (ConvUpdateParams; Mamba2's, and KDA's but rows_hi). The lean kernel takes
// chains from ConvUpdateParams::lean_rows rows on, before this rule (conv_lean_choice: 8 rows for
// GDN and Mamba2, 4 for KDA), so these ranges now serve the rows below that.
inline constexpr int kConvSmallRowsLo = 1, kConvSmallRowsHi = 8, kConvSmallRowsShortHi = 4;
// KDA's rows_hi (lib/cuda/delta_launch.cpp; its lo and short_hi are the defaults): at T in 4..7
// up to 6 rows. Measured on the H100 with the replay conv reading only the kept pending steps
// (docs/cuda.md, twenty-fourth session; Kimi-Linear-48B TP1 replay rounds, the small kernel ->
// the token loop, SPECSTATE_CONV_SMALL 1 -> 0): T = 4, B = 1 / 2 / 4 / 8 0.997 / 0.999 / 1.070 /
// 0.963 (twice: 0.966); T = 8 (up to 8 rows either way) B = 4 1.088, B = 8 0.999. The crossover
// between 4 and 8 rows is interpolated (B = 5..7 not measured).
inline constexpr int kKdaConvSmallRowsHi = 6;
// GDN's rows (lib/cuda/delta_launch.cpp): 2..8 at every T >= 2. The H200 had chosen 2..16 at
// T >= 4 and 2..8 at T < 4; with the replay conv reading only the kept pending steps (3669f5c)
// the token loop wins at 16 rows (H100, twenty-fifth session; Qwen3-Next-80B TP1 replay rounds, the
// small kernel -> the token loop, SPECSTATE_CONV_SMALL 1 -> 0): B = 16 T = 2 / 4 / 8 0.888 /
// 0.908 / 0.902, B = 8 1.060 / 1.112 / 1.054, B = 4 1.083 / 1.200 / 1.224. B = 9..15 are
// interpolated, not measured.
inline constexpr int kGdnConvSmallRowsLo = 2, kGdnConvSmallRowsHi = 8, kGdnConvSmallRowsShortHi = 8;
constexpr int conv_small_vt(int rows, int tokens, int max_window, int rows_lo, int rows_hi,
                            int short_hi, int forced = -1) {
  if (rows > 16 || max_window + tokens > 16) return 0;
  const bool small = forced >= 0   ? forced == 1
                     : tokens >= 8 ? rows <= (rows_hi > 8 ? rows_hi : 8)
                     : tokens >= 4 ? rows >= rows_lo && rows <= rows_hi
                     : tokens >= 2 ? rows >= rows_lo && rows <= short_hi
                                   : false;
  return small ? (max_window + tokens <= 8 ? 8 : 16) : 0;
}

// Of a slot's n pending conv steps (replay), the first whose input is still in the window after
// all n, for a window of H = W-1 inputs: each step before n - H is shifted out again by later
// ones and changes nothing, and from n = H on the committed window is replaced entirely. The
// replay conv kernels (conv_update_kernel, conv_replay_small_kernel, the fused GDN/KDA launch)
// read the pending records from here and the committed window only where n < H: the same window
// bit for bit, from fewer bytes (at T = 4 with ring 12 the pending steps average about 5).
constexpr int conv_first_kept(int n, int H) { return n > H ? n - H : 0; }

// Whether a conv launch runs four channels a thread instead of kConvChannels (conv_update_kernel's
// C): its token loop (`loop`: one thread walks a row's tokens) of `rows` rows, replay or not;
// `forced` (0 or 1; -1 none) overrides (SPECSTATE_CONV_NARROW). Eight channels a thread hold 128
// registers (16 warps an SM at 64-thread CTAs), four hold 79 (24 warps, and twice the threads).
// Measured on the H200 (docs/cuda.md, "The conv's token loop at four channels a thread"; rounds,
// eight -> four): Qwen3-Next replay T = 2, B = 16 0.966, B = 32 / 128 0.978-0.987 at T = 2 / 4 /
// 8, snapshot B = 128 0.991-0.993; Nemotron-H replay B = 32 / 128 0.987-0.994, snapshot B = 128
// 0.990-0.993 (snapshot verifies of 32 rows run a thread per token: unchanged).
inline constexpr int kConvNarrowRows = 16;
constexpr bool conv_narrow_choice(bool loop, int rows, int forced = -1) {
  if (!loop) return false;
  if (forced >= 0) return forced == 1;
  return rows >= kConvNarrowRows;
}

// Whether a narrow conv launch (conv_narrow_choice) runs its chain instantiation (kChain: four
// window inputs loaded at once, the window sliding in registers) rather than the per-token
// ancestor walk: every chain launch (`chain`: no parents), unless `forced` is 0
// (SPECSTATE_CONV_BATCH=0; 1 or -1 take it where it applies). Trees always walk. Measured on the
// H200 (docs/cuda.md, "The conv's chain loop: window inputs loaded four at a time"; walk ->
// batched): the replay conv at T = 4 27.5 -> 22.4 us at B = 128, Qwen3-Next replay rounds
// 0.97-0.99x at B = 32 / 128.
constexpr bool conv_chain_choice(bool narrow, bool chain, int forced = -1) {
  return narrow && chain && forced != 0;
}

// Whether a replay chain conv launch's token loop (`loop`, with records, conv width 4, bf16
// activations: `applies`) runs two channels a thread (four times the threads of eight: a
// latency-bound small batch, a dependent chain of loads a thread): up to kConvTwoRows rows;
// `forced` (0 or 1; -1 none) overrides (SPECSTATE_CONV_TWO). Measured on the H100 (docs/cuda.md,
// "The nineteenth session's experiments measured"; one run, rounds, eight -> two, A-A spread
// 0.2%): Kimi-Linear T = 2, B = 8 0.981, Nemotron-H T = 2, B = 8 0.966, B = 16 1.039.
inline constexpr int kConvTwoRows = 8;
constexpr bool conv_two_choice(bool applies, bool loop, int rows, int forced = -1) {
  if (!applies || !loop) return false;
  if (forced >= 0) return forced == 1;
  return rows <= kConvTwoRows;
}

// Whether a replay verify conv of chains (`applies`: conv_lean_applies, the layouts an engine
// uses) of `rows` rows runs the lean kernel (conv_lean_kernel: the slot's pending count, path and
// committed window loaded together, then the kept records together; no run-time strides or
// alignment tests): from `lean_rows` rows (ConvUpdateParams::lean_rows, per kind), over the
// small-batch kernel and the token loops; `forced` (0 or 1; -1 none) overrides
// (SPECSTATE_CONV_LEAN). Measured on an H100 (docs/cuda.md):
// - from 16 rows, the narrow token loop -> lean (thirty-second session, one run, A-A spread
//   <= 0.5%): the conv alone at T = 4, B = 128 19.2 -> 18.4 us; Qwen3-Next replay rounds at B = 16
//   0.964 (T = 4) / 0.955 (T = 8), B = 32 0.980 / 0.978 (T = 2 / 4), B = 64 0.983 / 0.986
//   (T = 4 / 8), B = 128 0.989 / 0.989; Nemotron-H T = 4, B = 32 / 128 0.981 / 0.989;
// - below 16 rows, whatever ran -> lean (thirty-third session, one run, A-A spread <= 0.5%;
//   rounds at T = 2 / 4 / 8): Qwen3-Next B = 8 0.975 / 1.001 / 0.925, B = 4 1.013 / 1.059 / 1.051;
//   Nemotron-H B = 8 0.967 / 0.963 / 0.949, B = 4 0.991 / 0.995 / 1.016, B = 2 0.962 / 1.009 /
//   1.153, B = 1 0.915 / 0.949 / 1.063; Kimi-Linear B = 8 0.915 / 0.892 / 0.887, B = 4 0.914 /
//   0.979 / 0.960 (B <= 2: the fused launch, no conv kernel).
// Hence 8 rows for GDN and Mamba2 (kConvLeanRows), 4 for KDA (kKdaConvLeanRows). Rows 9..15 are
// not measured (the bench has no such batch).
inline constexpr int kConvLeanRows = 8, kKdaConvLeanRows = 4;
constexpr bool conv_lean_choice(bool applies, int rows, int lean_rows, int forced = -1) {
  if (!applies) return false;
  if (forced >= 0) return forced == 1;
  return rows >= lean_rows;
}

// CTAs an SM a kernel is compiled for (__launch_bounds__' second argument): `wanted`, capped at
// the CTAs of `smem` bytes of static shared memory that an SM giving CTAs `smem_per_sm` bytes
// holds (the runtime reserves kSmemReservedPerCta of it a CTA), at least 1. A bound above that
// cap only takes registers away, since the CTAs it budgets for never run: KDA's two-rows-a-thread
// replay verify (47,392 bytes, 4 CTAs of sm_90's 228 KiB) compiled for 5 had 96 registers and
// spilled 78 bytes; for 4 it has 128 and spills 4.
inline constexpr int64_t kSmemReservedPerCta = 1024;
constexpr int ctas_per_sm_bound(int wanted, int64_t smem, int64_t smem_per_sm) {
  const int64_t fit = smem_per_sm / (smem + kSmemReservedPerCta);
  const int64_t bound = fit < wanted ? fit : wanted;
  return bound < 1 ? 1 : static_cast<int>(bound);
}

// The shared memory an SM of compute capability `cc` (major * 10 + minor) gives CTAs, in bytes
// (the CUDA C++ Programming Guide's table): 228 KiB on sm_90 and sm_100 / 103, 164 KiB on sm_80 /
// 87, 100 KiB on sm_86 / 89 / 120 / 121 and on any capability not listed (the smallest, so an
// unknown one gets fewer CTAs planned and more registers, never a bound it cannot reach), 64 KiB
// before sm_80.
constexpr int64_t smem_per_sm_of(int cc) {
  return cc == 90 || cc == 100 || cc == 103 ? 228 * 1024
         : cc == 80 || cc == 87             ? 164 * 1024
         : cc < 80                          ? 64 * 1024
                                            : 100 * 1024;
}

// V rows a thread of the GDN / KDA replay verify over several V blocks a CTA (the kMulti
// instantiation over [V][K] states) for a launch of `rows` rows of `tokens` window tokens of the
// kind (`kda`): 1 or 2; `env` (the value of SPECSTATE_GDN_RPT, or null) "1" or "2" overrides. Two
// rows a thread share each staged key, query (and KDA gate) load: half the shared-memory
// wavefronts a state element, at 4 CTAs an SM (128 registers, no spills) instead of 8. The
// launcher takes it from 8 rows on, with at least two blocks a CTA (rpt2_vblocks). Measured on
// the H200 (docs/cuda.md, "GDN replay verify: two V rows a thread", "Launch bounds capped by
// shared memory; GDN's two rows a thread at 4 CTAs an SM" and "Two rows a thread at B = 8, the
// ring at T = 4 and the per-round fold limit"; Qwen3-Next rounds, one -> two, compiled for 4
// CTAs): T = 2 / 4 / 8 at B = 8 0.985 / 0.942 / 0.848, B = 16 0.949 / 0.975 / 0.891, B = 32
// 0.971 / 0.933 / 0.804, B = 128 0.973 / 0.922 / 0.859 (compiled for 5, at 96 registers with
// spills, it was 1.03-1.14x slower at B = 8, 16 and 32 for T <= 4): GDN from 8 rows and 2 tokens
// on. Kimi-Linear (KDA, 20 layers) T = 2 / 4 / 8: B = 16 0.75 / 0.71 / 0.67, B = 32 0.68 / 0.64
// / 0.60, B = 128 0.84 / 0.82 / 0.76: KDA always.
inline constexpr int kGdnMultiRptRows = 8, kGdnMultiRptTokens = 2;
inline int gdn_multi_rpt(int rows, int tokens, bool kda, const char* env) {
  if (env != nullptr && (env[0] == '1' || env[0] == '2') && env[1] == '\0') return env[0] - '0';
  if (kda) return 2;
  return rows >= kGdnMultiRptRows && tokens >= kGdnMultiRptTokens ? 2 : 1;
}

// Channels a thread (1, 2 or 4) of a Mamba2 replay verify chain launch of `tokens` window tokens
// over `rows` rows (kernels/mamba2_recurrence.cuh: mamba2_chain_rows where a CTA runs one channel
// block, mamba2_replay_vblocks' RPT where it runs several; d_state 32..128): with two, each staged
// B and C load and each history record's B * dt serve two channels (at one, the per-block token
// loop was 191 instructions for 53 floating point ones: fifteenth session's SASS), at
// SPECSTATE_MAMBA2_RPT2_MIN_CTAS CTAs an SM. Two for windows of kMamba2RptTokens to
// kMamba2RptMaxTokens tokens at every row count. Measured on the H100 (docs/cuda.md, "Mamba2's
// replay verify with two channels a thread" and "Replay rings of Mamba2 and KDA"; Nemotron-H-8B
// rounds, one -> two): with the ring of 2T, B = 1 0.950 / 0.828 / 0.773 (T = 2 / 4 / 8), B = 8
// 0.964 / 0.951 / 0.914, B = 32 0.978 / 0.961 / 0.930, B = 128 1.008 / 1.002 / 0.965, B = 16
// (one block a CTA) 1.025 / 1.026 / 0.923; with the ring of 3T (default_replay_ring), whose
// longer histories two channels amortise better, B = 16 0.984 / 0.954 (T = 2 / 4), B = 64 0.990
// / 0.963, B = 128 0.989 / 0.966. One for windows of one token and windows longer than a
// verify's (prefill): not measured.
// Four (one block of 64 channels a CTA, 168 registers at SPECSTATE_MAMBA2_RPT4_MIN_CTAS = 3 CTAs
// an SM: the whole head of Nemotron-H's P = 64, its 32 KiB of state loaded before the grid wait)
// where two would run one block a CTA (`one_block`: replay_vblocks_for gave 1), d_state is 128
// and the launch has at least kMamba2Rpt4Rows rows. Measured on the H100 (docs/cuda.md, "Mamba2's
// replay verify with four channels a thread"; Nemotron-H-8B rounds, two -> four): B = 8 0.912 /
// 0.955 / 0.958 (T = 2 / 4 / 8), B = 16 0.905 / 0.926 / 1.001; where the several-blocks kernel
// runs two (B >= 32) four lost 1.04-1.15x, at B = 1 1.02-1.12x, at T = 8, B = 2 and 4 1.13-1.14x.
// `env` (SPECSTATE_MAMBA2_RPT) "1" / "2" / "4" overrides (4 only at d_state 128; elsewhere the
// launch runs two), anything else is ignored.
inline constexpr int kMamba2RptTokens = 2, kMamba2RptMaxTokens = 16, kMamba2Rpt4Rows = 8;
inline int mamba2_rpt(int tokens, const char* env, int rows = 0, bool one_block = false,
                      int d_state = 0) {
  if (env != nullptr && (env[0] == '1' || env[0] == '2' || env[0] == '4') && env[1] == '\0') {
    return env[0] - '0';
  }
  if (tokens < kMamba2RptTokens || tokens > kMamba2RptMaxTokens) return 1;
  return one_block && d_state == 128 && rows >= kMamba2Rpt4Rows ? 4 : 2;
}

// V blocks a CTA of the two-rows-a-thread replay verify (GDN and KDA): `chosen`, the count that
// fills its CTAs an SM (4: kernels::gdn_ctas_per_sm), but at least 2 from kRpt2Rows rows on,
// below a full wave (unless SPECSTATE_GDN_VBLOCKS forces the count: `forced`). Measured on the
// H200 at B = 8 (512 CTAs of two blocks at 4 an SM instead of 1024 CTAs of one row a thread):
// Kimi-Linear-48B TP1 (tools/kda_bench.py) rounds T = 2 / 4 / 8 537.3 -> 375.2, 775.5 -> 497.5,
// 1314.3 -> 793.1 us (replay / fla 1.07 / 0.86 / 0.81 -> 0.75 / 0.55 / 0.49); Qwen3-Next-80B
// TP1 555.9 -> 547.7, 704.8 -> 664.1, 1170.8 -> 992.7 us (it was 1.03-1.09x slower while the
// two-rows kernel spilled at 5 CTAs an SM).
inline constexpr int kRpt2Rows = 8;
inline int rpt2_vblocks(int chosen, int rows, bool forced) {
  return !forced && chosen == 1 && rows >= kRpt2Rows ? 2 : chosen;
}

// Whether a layer's first kernel (the conv, or the fused kernel) is launched as a programmatic
// dependent of the kernel before it in the stream, reading its own layer's committed state,
// records and weights and the slots before it waits for that kernel (kernels/common.cuh; the
// CUDA backend's rule, docs/cuda.md "Layers overlap"). Safe only where that kernel cannot be
// writing any of it: the backend's last operation on the stream launched a layer (`last_layer`,
// that layer's conv state; null after any other operation: uploads, commits, slot copies) other
// than this one (`layer`), the committed state is the pool's own (a caller's kernels may write a
// caller's state between two calls) and the token offsets, if any, are the backend's own uploads
// (not the caller's device cu_seqlens). Wherever it is safe, at every row count and window, every
// kind: measured on the H100 at the kernels of 2026-12-06 (docs/cuda.md, twenty-third session;
// rounds, the old rows rule -> overlap at any rows) it never lost more than noise (<= 1.006) and
// gained where the old rule, measured on the H200 with the kernels of 2026-12-04, had left it
// off: GDN replay 24 / 32 / 48 rows 0.866 / 0.885 / 0.941 at T = 2, 0.896 / 0.898 / 0.938 at
// T = 4, T = 8 48 / 64 / 128 rows 0.949 / 0.983 / 0.988; KDA replay 32 rows 0.936 / 0.940 (T = 2 /
// 4); snapshot rounds 0.985-1.006. `mode` (the value of SPECSTATE_LAYER_OVERLAP): 0 never (timing),
// 1 (the default) wherever safe; 2, the old "whatever the rows", is now the same as 1.
inline bool layer_edge_allowed(int mode, const void* last_layer, const void* layer,
                               bool caller_state, bool own_offsets) {
  const bool safe = last_layer != nullptr && last_layer != layer && !caller_state && own_offsets;
  return safe && mode != 0;
}

// Whether a GDN / KDA replay verify that the fused conv + recurrence launch can serve
// (gdn_fused.h: `applies`) runs it: a launch of `rows` rows; `forced` (0 or 1; -1 none)
// overrides the measured rule (SPECSTATE_GDN_FUSED). The rule is rows <= kGdnFusedMaxRows,
// measured on the H200 (docs/cuda.md, "The fused small-batch launch"; Qwen3-Next TP1 rounds of
// 36 layers, two launches -> fused, one run): B = 1 T = 2 / 4 / 8 421.2 -> 410.2, 577.9 -> 510.2,
// 846.9 -> 671.1 us; B = 2 487.1 -> 452.9, 638.4 -> 581.0, 881.3 -> 774.0; B = 4 1.35-1.47x
// slower and B = 8 1.7-1.9x (every CTA recomputes its key head's q and k conv, 16 times per key
// head, at 4 CTAs an SM), hence two rows.
inline constexpr int kGdnFusedMaxRows = 2;
constexpr bool gdn_fused_choice(bool applies, int rows, int forced = -1) {
  if (!applies) return false;
  return forced >= 0 ? forced == 1 : rows <= kGdnFusedMaxRows;
}

}  // namespace specstate::kernels
