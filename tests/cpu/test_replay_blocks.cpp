// The replay verify kernels' block count per CTA (kernels::replay_blocks_per_cta, which the CUDA
// launchers call with the device's SM count and SPECSTATE_GDN_VBLOCKS / SPECSTATE_MAMBA2_VBLOCKS):
// the choices measured on the H200 (132 SMs; docs/cuda.md, "several blocks of a row per CTA"),
// how they move with the GPU's size, and the override's rules. Host-only arithmetic: runs in CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/kernel_types.h"

namespace specstate::kernels {
namespace {

uint32_t bits_of(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

constexpr int kH200 = 132;
// GDN, Qwen3-Next TP1: 32 value heads of 8 V blocks (128 rows / 16); 6 CTAs per SM.
int gdn(int64_t batch, int sms = kH200, int forced = 0) {
  return replay_blocks_per_cta(batch, 32, 8, 6, sms, forced);
}
// Mamba2, Nemotron-H-8B TP1: 128 heads of 4 channel blocks (64 / 16); 24 CTAs per SM.
int mamba2(int64_t batch, int sms = kH200, int forced = 0) {
  return replay_blocks_per_cta(batch, 128, 4, 24, sms, forced);
}

TEST(ReplayBlocksPerCta, TheChoicesMeasuredOnTheH200) {
  // GDN rounds were fastest with 1 block at B = 1, 2 at B = 8, 8 at B = 32 and 128.
  EXPECT_EQ(gdn(1), 1);
  EXPECT_EQ(gdn(8), 2);
  EXPECT_EQ(gdn(32), 8);
  EXPECT_EQ(gdn(128), 8);
  // Mamba2 lost with any merging at B = 8 and gained with 4 blocks from B = 32 on.
  EXPECT_EQ(mamba2(1), 1);
  EXPECT_EQ(mamba2(8), 1);
  EXPECT_EQ(mamba2(32), 4);
  EXPECT_EQ(mamba2(128), 4);
}

TEST(ReplayBlocksPerCta, NeverMoreThanTheHeadsBlocksOrEightAndAPowerOfTwo) {
  for (int blocks = 1; blocks <= 16; ++blocks) {
    for (int64_t rows : {1, 8, 64, 4096}) {
      const int n = replay_blocks_per_cta(rows, 64, blocks, 1, kH200);
      EXPECT_GE(n, 1);
      EXPECT_LE(n, blocks);
      EXPECT_LE(n, 8);
      EXPECT_EQ(n & (n - 1), 0) << n;
    }
  }
}

TEST(ReplayBlocksPerCta, MoreSmsMergeLess) {
  // A GPU with fewer SMs is filled by fewer CTAs, so it merges earlier.
  EXPECT_EQ(gdn(8, 64), 4);
  EXPECT_EQ(gdn(8, 264), 1);
  EXPECT_EQ(mamba2(8, 40), 4);
  // Monotone in the batch: a larger batch never merges fewer blocks.
  for (int sms : {40, 80, 132, 264}) {
    int last = 1;
    for (int64_t b = 1; b <= 512; b *= 2) {
      EXPECT_GE(gdn(b, sms), last) << "sms " << sms << " batch " << b;
      last = gdn(b, sms);
    }
  }
}

TEST(ReplayBlocksPerCta, TheOverrideTakesOneTwoFourOrEightCappedAtTheBlocks) {
  EXPECT_EQ(gdn(128, kH200, 1), 1);
  EXPECT_EQ(gdn(1, kH200, 8), 8);
  EXPECT_EQ(gdn(8, kH200, 4), 4);
  EXPECT_EQ(replay_blocks_per_cta(4, 4, 5, 6, kH200, 8), 5);  // V = 72: 5 blocks
  EXPECT_EQ(mamba2(1, kH200, 8), 4);
  // Anything else is no override: the heuristic's choice.
  for (int bad : {0, 3, 5, 16, -1}) {
    EXPECT_EQ(gdn(8, kH200, bad), 2) << bad;
    EXPECT_EQ(gdn(128, kH200, bad), 8) << bad;
  }
}

// The replay conv's small-batch kernel (kernels::conv_small_vt): the choices measured on the H200
// (docs/cuda.md, "Replay conv at small batches: the input history in shared memory"), with the
// launch's max_window = T. GDN (2..16, 2..8 at T < 4): T = 4, B = 16 1453.7 -> 1393.7 us a round,
// T = 2, B = 8 779.9 -> 714.4 but B = 16 1076.6 -> 1134.5; Mamba2 (1..8, never at T < 4): T = 4,
// B = 8 1136.6 -> 1076.8, T = 2, B = 1 332.6 -> 350.7 then (the H100 since: below); KDA (the same
// defaults): Kimi-Linear T = 4, B = 8 874.4 -> 840.0, T = 2, B = 8 635.2 -> 651.6.
int gdn_vt(int rows, int T, int forced = -1) { return conv_small_vt(rows, T, T, 2, 16, 8, forced); }
// Mamba2: ConvUpdateParams' defaults (KDA: the same but rows_hi, kda_vt below).
int other_vt(int rows, int T, int forced = -1) {
  return conv_small_vt(rows, T, T, kConvSmallRowsLo, kConvSmallRowsHi, kConvSmallRowsShortHi,
                       forced);
}

TEST(ConvSmallVt, TheChoicesMeasuredOnTheH200) {
  EXPECT_EQ(gdn_vt(1, 4), 0);
  EXPECT_EQ(gdn_vt(2, 4), 8);
  EXPECT_EQ(gdn_vt(8, 4), 8);
  EXPECT_EQ(gdn_vt(16, 4), 8);
  EXPECT_EQ(gdn_vt(16, 8), 16);
  EXPECT_EQ(gdn_vt(17, 4), 0);
  EXPECT_EQ(gdn_vt(1, 2), 0);
  EXPECT_EQ(gdn_vt(4, 2), 8);
  EXPECT_EQ(gdn_vt(8, 2), 8);
  EXPECT_EQ(gdn_vt(9, 2), 0);
  EXPECT_EQ(gdn_vt(8, 1), 0);
  for (int rows : {1, 8}) {
    EXPECT_EQ(other_vt(rows, 4), 8) << rows;
    EXPECT_EQ(other_vt(rows, 8), 16) << rows;
  }
  // Mamba2 and KDA at T < 4: 1..4 rows (H100, seventeenth session: Nemotron-H T = 2 B = 1 / 2 /
  // 4 0.809 / 0.851 / 0.894, B = 8 1.008; Kimi-Linear B = 4 0.954, B = 8 1.099).
  for (int rows : {1, 2, 3, 4}) {
    EXPECT_EQ(other_vt(rows, 2), 8) << rows;
    EXPECT_EQ(other_vt(rows, 3), 8) << rows;
  }
  for (int rows : {5, 8, 16}) EXPECT_EQ(other_vt(rows, 2), 0) << rows;
  EXPECT_EQ(other_vt(4, 1), 0);
  EXPECT_EQ(other_vt(9, 4), 0);
  EXPECT_EQ(other_vt(9, 8), 0);
  EXPECT_EQ(gdn_vt(32, 8), 0);
}

// KDA's rows (kKdaConvSmallRowsHi): the small kernel up to 6 rows at T in 4..7, the token loop
// at 8 (H100, twenty-fourth session: T = 4, B = 8 0.963x with the token loop, B = 4 1.070x), and
// T >= 8 and T < 4 as Mamba2's.
int kda_vt(int rows, int T) {
  return conv_small_vt(rows, T, T, kConvSmallRowsLo, kKdaConvSmallRowsHi, kConvSmallRowsShortHi);
}

TEST(ConvSmallVt, KdaTakesTheTokenLoopFromSevenRowsAtFourToSevenTokens) {
  for (int T : {4, 5, 7}) {
    for (int rows = 1; rows <= 6; ++rows) EXPECT_GT(kda_vt(rows, T), 0) << rows << " " << T;
    for (int rows : {7, 8, 16}) EXPECT_EQ(kda_vt(rows, T), 0) << rows << " " << T;
  }
  for (int rows = 1; rows <= 8; ++rows) {
    EXPECT_EQ(kda_vt(rows, 8), other_vt(rows, 8)) << rows;
    EXPECT_EQ(kda_vt(rows, 2), other_vt(rows, 2)) << rows;
  }
  EXPECT_EQ(kda_vt(9, 8), 0);
}

// GDN's rows (kGdnConvSmallRows*, build_gdn_launch): 2..8 at every T >= 2, the token loop from 9
// rows (H100, twenty-fifth session: B = 16 at T = 2 / 4 / 8 0.888 / 0.908 / 0.902 with the token
// loop, B = 8 1.060 / 1.112 / 1.054 and B = 4 1.083 / 1.200 / 1.224 the other way).
int gdn_rule_vt(int rows, int T) {
  return conv_small_vt(rows, T, T, kGdnConvSmallRowsLo, kGdnConvSmallRowsHi,
                       kGdnConvSmallRowsShortHi);
}

TEST(ConvSmallVt, GdnTakesTheTokenLoopFromNineRowsAtEveryWindow) {
  for (int T : {2, 3, 4, 7, 8}) {
    // One row below 8 tokens: the fused launch (from 8 tokens conv_small_vt takes the small kernel
    // up to max(8, rows_hi) rows, one included, for every kind).
    EXPECT_EQ(gdn_rule_vt(1, T), T >= 8 ? 16 : 0) << T;
    for (int rows = 2; rows <= 8; ++rows) EXPECT_GT(gdn_rule_vt(rows, T), 0) << rows << " " << T;
    for (int rows : {9, 12, 16}) EXPECT_EQ(gdn_rule_vt(rows, T), 0) << rows << " " << T;
  }
  EXPECT_EQ(gdn_rule_vt(8, 1), 0);
}

TEST(ConvSmallVt, VirtualTokensHoldPendingAndWindowAndTheLimitsHold) {
  // VT 8 exactly where the pending steps (at most max_window) and the window fit in 8.
  EXPECT_EQ(conv_small_vt(1, 4, 4, 1, 1, 0), 8);
  EXPECT_EQ(conv_small_vt(1, 4, 5, 1, 1, 0), 16);
  EXPECT_EQ(conv_small_vt(1, 8, 8, 1, 1, 0), 16);
  // Past 16 virtual tokens or 16 rows the kernel does not apply, forced or not.
  EXPECT_EQ(conv_small_vt(1, 8, 9, 1, 1, 0), 0);
  EXPECT_EQ(conv_small_vt(1, 8, 9, 1, 1, 0, 1), 0);
  EXPECT_EQ(conv_small_vt(17, 4, 4, 1, 32, 32, 1), 0);
  // The override: 1 takes it wherever it applies, 0 never.
  EXPECT_EQ(conv_small_vt(16, 2, 2, 1, 1, 0, 1), 8);
  EXPECT_EQ(conv_small_vt(1, 8, 8, 1, 1, 0, 0), 0);
}

// V rows a thread of the GDN / KDA replay verify over several V blocks (kernels::gdn_multi_rpt):
// GDN two from 8 rows and 2 window tokens on, KDA always, measured on the H200 (docs/cuda.md,
// "GDN replay verify: two V rows a thread, compiled for 4 CTAs an SM" and "... at B = 8":
// Qwen3-Next rounds 0.80-0.985x at B = 8, 16, 32, 128 and T = 2, 4, 8; Kimi-Linear 0.60-0.84 at
// B = 16, 32, 128 and T = 2, 4, 8); SPECSTATE_GDN_RPT "1" / "2" forces it, anything else is
// ignored.
TEST(GdnMultiRpt, ManyRowsOfWindowsAndTheOverride) {
  EXPECT_EQ(gdn_multi_rpt(16, 2, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(32, 4, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(128, 8, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(128, 16, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(15, 8, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(8, 2, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(8, 4, false, nullptr), 2);
  EXPECT_EQ(gdn_multi_rpt(7, 8, false, nullptr), 1);
  EXPECT_EQ(gdn_multi_rpt(1, 4, false, nullptr), 1);
  EXPECT_EQ(gdn_multi_rpt(128, 1, false, nullptr), 1);
  for (int rows : {1, 16, 128}) {
    for (int tokens : {1, 2, 4, 8}) EXPECT_EQ(gdn_multi_rpt(rows, tokens, true, nullptr), 2);
  }
  EXPECT_EQ(gdn_multi_rpt(1, 1, false, "2"), 2);
  EXPECT_EQ(gdn_multi_rpt(128, 8, false, "1"), 1);
  EXPECT_EQ(gdn_multi_rpt(128, 8, true, "1"), 1);
  for (const char* ignored : {"", "0", "3", "4", "22", "x"}) {
    EXPECT_EQ(gdn_multi_rpt(128, 8, false, ignored), 2) << ignored;
    EXPECT_EQ(gdn_multi_rpt(7, 8, false, ignored), 1) << ignored;
    EXPECT_EQ(gdn_multi_rpt(8, 2, true, ignored), 2) << ignored;
  }
}

// Channels a thread of the Mamba2 replay verify (kernels::mamba2_rpt), where measured faster on
// the H100: two for windows of 2..16 tokens at any row count (with the default ring of 3T, B = 16
// and from 33 rows too); four instead from kMamba2Rpt4Rows rows where two would run one block a
// CTA at d_state 128; one for windows of one token and for windows longer than 16 (prefill);
// SPECSTATE_MAMBA2_RPT's "1" / "2" / "4" override, anything else is ignored.
TEST(Mamba2Rpt, WhereMeasuredFasterAndTheOverride) {
  for (int tokens : {2, 3, 4, 7, 8, 16}) EXPECT_EQ(mamba2_rpt(tokens, nullptr), 2) << tokens;
  for (int tokens : {-1, 0, 1, 17, 512}) EXPECT_EQ(mamba2_rpt(tokens, nullptr), 1) << tokens;
  EXPECT_EQ(kMamba2Rpt4Rows, 8);
  for (int tokens : {2, 4, 8, 16}) {
    EXPECT_EQ(mamba2_rpt(tokens, nullptr, 8, true, 128), 4) << tokens;
    EXPECT_EQ(mamba2_rpt(tokens, nullptr, 24, true, 128), 4) << tokens;
    EXPECT_EQ(mamba2_rpt(tokens, nullptr, 7, true, 128), 2) << tokens;    // few rows
    EXPECT_EQ(mamba2_rpt(tokens, nullptr, 32, false, 128), 2) << tokens;  // several blocks a CTA
    EXPECT_EQ(mamba2_rpt(tokens, nullptr, 16, true, 64), 2) << tokens;    // another d_state
  }
  for (int tokens : {1, 17}) EXPECT_EQ(mamba2_rpt(tokens, nullptr, 16, true, 128), 1) << tokens;
  EXPECT_EQ(mamba2_rpt(4, "2"), 2);
  EXPECT_EQ(mamba2_rpt(1, "2"), 2);
  EXPECT_EQ(mamba2_rpt(4, "1"), 1);
  EXPECT_EQ(mamba2_rpt(17, "1"), 1);
  EXPECT_EQ(mamba2_rpt(4, "4"), 4);
  EXPECT_EQ(mamba2_rpt(1, "4"), 4);
  EXPECT_EQ(mamba2_rpt(4, "2", 16, true, 128), 2);  // forced two where four is the rule
  EXPECT_EQ(mamba2_rpt(4, "1", 16, true, 128), 1);
  for (const char* ignored : {"", "0", "3", "22", "x"}) {
    EXPECT_EQ(mamba2_rpt(4, ignored), 2) << ignored;
    EXPECT_EQ(mamba2_rpt(1, ignored), 1) << ignored;
    EXPECT_EQ(mamba2_rpt(4, ignored, 16, true, 128), 4) << ignored;
  }
}

// The conv's token loop at four channels a thread (kernels::conv_narrow_choice): from
// kConvNarrowRows rows on, only where the launch loops over tokens; SPECSTATE_CONV_NARROW's 1
// takes it at any batch of a token loop, 0 never. Measured on the H200 (docs/cuda.md, "The
// conv's token loop at four channels a thread"): Qwen3-Next replay rounds T = 2, B = 16 0.966;
// B = 32 and 128 0.978-0.987.
TEST(ConvNarrowChoice, TokenLoopsOfManyRowsAndTheOverride) {
  EXPECT_EQ(kConvNarrowRows, 16);
  EXPECT_FALSE(conv_narrow_choice(true, 8));
  EXPECT_FALSE(conv_narrow_choice(true, 15));
  EXPECT_TRUE(conv_narrow_choice(true, 16));
  EXPECT_TRUE(conv_narrow_choice(true, 128));
  // A thread per token (no loop): never, forced or not.
  EXPECT_FALSE(conv_narrow_choice(false, 128));
  EXPECT_FALSE(conv_narrow_choice(false, 128, 1));
  EXPECT_TRUE(conv_narrow_choice(true, 1, 1));
  EXPECT_FALSE(conv_narrow_choice(true, 128, 0));
}

// The replay chain conv's token loop at two channels a thread (kernels::conv_two_choice): up to
// kConvTwoRows rows where it applies (records, width 4, bf16 activations, a chain) and the launch
// loops over tokens; SPECSTATE_CONV_TWO's 1 takes it at any batch, 0 never. Measured on the H100
// (docs/cuda.md): Kimi-Linear and Nemotron-H T = 2, B = 8 0.981 / 0.966; Nemotron-H B = 16 1.039.
TEST(ConvTwoChoice, SmallBatchTokenLoopsAndTheOverride) {
  EXPECT_EQ(kConvTwoRows, 8);
  EXPECT_TRUE(conv_two_choice(true, true, 1));
  EXPECT_TRUE(conv_two_choice(true, true, 8));
  EXPECT_FALSE(conv_two_choice(true, true, 9));
  EXPECT_FALSE(conv_two_choice(true, true, 16));
  EXPECT_TRUE(conv_two_choice(true, true, 128, 1));
  EXPECT_FALSE(conv_two_choice(true, true, 8, 0));
  // Where it does not apply (a tree, another width or dtype, no records) or no token loop: never.
  EXPECT_FALSE(conv_two_choice(false, true, 8));
  EXPECT_FALSE(conv_two_choice(false, true, 8, 1));
  EXPECT_FALSE(conv_two_choice(true, false, 8));
  EXPECT_FALSE(conv_two_choice(true, false, 8, 1));
}

// The narrow conv's chain instantiation (kernels::conv_chain_choice): every narrow launch over
// chains, never a tree's (its windows follow parents) nor a wide launch's;
// SPECSTATE_CONV_BATCH's 0 keeps the walk, 1 changes nothing where it does not apply.
TEST(ConvChainChoice, NarrowChainsUnlessForcedOff) {
  EXPECT_TRUE(conv_chain_choice(true, true));
  EXPECT_TRUE(conv_chain_choice(true, true, 1));
  EXPECT_FALSE(conv_chain_choice(true, true, 0));
  EXPECT_FALSE(conv_chain_choice(true, false));
  EXPECT_FALSE(conv_chain_choice(true, false, 1));
  EXPECT_FALSE(conv_chain_choice(false, true));
  EXPECT_FALSE(conv_chain_choice(false, true, 1));
}

// kernels::head_group (Mamba2's group of a head as a multiply by the launcher's reciprocal)
// equals the integer division for every head of every head count up to 2048 and every group size
// that divides it, and for large counts at their edges.
TEST(HeadGroup, EqualsTheIntegerDivision) {
  int64_t checked = 0;
  for (int heads = 1; heads <= 2048; ++heads) {
    for (int n = 1; n <= heads; ++n) {
      if (heads % n != 0) continue;
      const float inv = 1.0f / static_cast<float>(n);
      for (int h = 0; h < heads; ++h) {
        ASSERT_EQ(head_group(h, inv), h / n) << "h = " << h << ", heads " << heads << ", n " << n;
        ++checked;
      }
    }
  }
  for (const int heads : {1 << 16, 3 << 16, (1 << 21) + (1 << 20)}) {
    for (const int n : {1, 2, 3, 7, 8, 64, 96, 1 << 12}) {
      if (heads % n != 0) continue;
      const float inv = 1.0f / static_cast<float>(n);
      for (int g = 0; g < heads / n; g += std::max(1, heads / n / 4096)) {
        for (const int h : {g * n, g * n + n / 2, g * n + n - 1}) {
          ASSERT_EQ(head_group(h, inv), g) << "h = " << h << ", heads " << heads << ", n " << n;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000000);
}

// kernels::butterfly_sum, with which GDN's several-blocks verify adds a row's staged partial sums
// at a block's flush, is the token step's shuffle butterfly bit for bit: a butterfly of LANES
// lanes is simulated (at distance m, lane i's value becomes its own plus lane i ^ m's, as
// `x += __shfl_xor_sync(mask, x, m)` makes it), and the sum from the partials it leaves after its
// distances down to kParts (lane kl's at kl % kParts) equals every lane's final value, for 8 and
// 4 lanes from 1 to LANES partials. The partials' signs and magnitudes (2^-20 .. 2^20) make the
// order show: a sum in lane order differs from the butterfly's (checked), so a wrong order fails.
// A simulated shuffle butterfly's distances from `first` down to `last` over LANES lanes: at
// distance m, lane i's value becomes its own plus lane i ^ m's, as
// `x += __shfl_xor_sync(mask, x, m)` makes it.
template <int LANES>
void butterfly_distances(float (&lane)[LANES], int first, int last) {
  for (int m = first; m >= last && m > 0; m >>= 1) {
    float next[LANES];
    for (int i = 0; i < LANES; ++i) next[i] = lane[i] + lane[i ^ m];
    std::copy(next, next + LANES, lane);
  }
}

template <int LANES, int kParts>
void check_butterfly_sum(int rows, uint32_t seed, int* order_shows) {
  uint32_t state = seed;
  for (int row = 0; row < rows; ++row) {
    float lane[LANES];
    for (float& x : lane) {
      state = state * 1664525u + 1013904223u;
      const float mant = 1.0f + static_cast<float>(state >> 9) / static_cast<float>(1u << 23);
      const int e = static_cast<int>((state >> 3) % 41) - 20;
      x = std::ldexp((state & 1u) ? -mant : mant, e);
    }
    float seq = 0.0f;
    for (const float x : lane) seq += x;
    float part[kParts] = {};
    butterfly_distances(lane, LANES / 2, kParts);
    for (int i = 0; i < LANES; ++i) part[i % kParts] = lane[i];  // lanes i, i + kParts: equal
    for (int i = 0; i < LANES; ++i) ASSERT_EQ(part[i % kParts], lane[i]) << "lane " << i;
    butterfly_distances(lane, kParts / 2, 1);  // the butterfly's remaining distances
    const float sum = butterfly_sum(part);
    for (int i = 0; i < LANES; ++i) {
      ASSERT_EQ(bits_of(sum), bits_of(lane[i])) << "row " << row << ", lane " << i << ", " << LANES
                                                << " lanes, " << kParts << " partials";
    }
    *order_shows += bits_of(seq) != bits_of(sum);
  }
}

TEST(ButterflySum, StagedPartialsSumToTheButterflysBits) {
  int order_shows = 0;
  check_butterfly_sum<8, 4>(4096, 1u, &order_shows);
  check_butterfly_sum<8, 8>(4096, 2u, &order_shows);
  check_butterfly_sum<8, 2>(4096, 3u, &order_shows);
  check_butterfly_sum<8, 1>(4096, 4u, &order_shows);
  check_butterfly_sum<4, 4>(4096, 5u, &order_shows);
  check_butterfly_sum<4, 2>(4096, 6u, &order_shows);
  EXPECT_GT(order_shows, 1000);
}

// Mamba2's several channels a thread reduce their outputs' y by halves (kernels::mamba2_y_kept):
// a group of LANES lanes with RPT channels each is simulated as mamba2_step_rows' shuffles run it
// (at each of the first log2(RPT) distances, LANES / 2 first, lane i keeps the half of its
// channels that distance's bit of i names and adds its partner's partials of them, the partner
// sending the half it does not keep; then the butterfly's remaining distances on the kept sum).
// Every lane ends with the bits of its kept channel's whole butterfly (the snapshot path's step),
// and the lane that stores channel j (kernels::mamba2_y_lane) keeps channel j. Partials of mixed
// signs and magnitudes make the order show (a sum in lane order differs: checked), so a wrong
// pairing or a lane that stores another channel fails.
template <int LANES, int RPT>
void check_mamba2_y_halves(int rows, uint32_t seed, int* order_shows) {
  uint32_t state = seed;
  for (int row = 0; row < rows; ++row) {
    float y[RPT][LANES];
    for (auto& ch : y) {
      for (float& x : ch) {
        state = state * 1664525u + 1013904223u;
        const float mant = 1.0f + static_cast<float>(state >> 9) / static_cast<float>(1u << 23);
        const int e = static_cast<int>((state >> 3) % 41) - 20;
        x = std::ldexp((state & 1u) ? -mant : mant, e);
      }
    }
    float full[RPT][LANES];  // each channel's whole butterfly
    for (int j = 0; j < RPT; ++j) {
      std::copy(y[j], y[j] + LANES, full[j]);
      butterfly_distances(full[j], LANES / 2, 1);
    }
    float v[LANES][RPT];  // lane i's values, as the kernel's y[] of that lane
    for (int i = 0; i < LANES; ++i) {
      for (int j = 0; j < RPT; ++j) v[i][j] = y[j][i];
    }
    for (int half = RPT / 2, d = LANES / 2; half >= 1; half /= 2, d /= 2) {
      float next[LANES][RPT];
      for (int i = 0; i < LANES; ++i) {
        const int partner = i ^ d;
        const bool hi = (i & d) != 0, partner_hi = (partner & d) != 0;
        ASSERT_NE(hi, partner_hi) << "lane " << i << " and its partner at distance " << d;
        std::copy(v[i], v[i] + RPT, next[i]);
        for (int k = 0; k < half; ++k) {
          const float keep = hi ? v[i][k + half] : v[i][k];
          const float sent = partner_hi ? v[partner][k] : v[partner][k + half];
          next[i][k] = keep + sent;
        }
      }
      std::copy(&next[0][0], &next[0][0] + LANES * RPT, &v[0][0]);
    }
    float keep[LANES];
    for (int i = 0; i < LANES; ++i) keep[i] = v[i][0];
    butterfly_distances(keep, LANES / (2 * RPT), 1);
    for (int i = 0; i < LANES; ++i) {
      const int kept = mamba2_y_kept<LANES, RPT>(i);
      ASSERT_GE(kept, 0);
      ASSERT_LT(kept, RPT);
      ASSERT_EQ(bits_of(keep[i]), bits_of(full[kept][i]))
          << "row " << row << ", lane " << i << ", " << LANES << " lanes, " << RPT << " channels";
    }
    for (int j = 0; j < RPT; ++j) {
      const int lane = mamba2_y_lane<LANES, RPT>(j);
      ASSERT_GE(lane, 0);
      ASSERT_LT(lane, LANES);
      ASSERT_EQ((mamba2_y_kept<LANES, RPT>(lane)), j) << "the lane that stores channel " << j;
      float seq = 0.0f;
      for (const float x : y[j]) seq += x;
      *order_shows += bits_of(seq) != bits_of(keep[lane]);
    }
  }
}

TEST(Mamba2YHalves, EveryLaneKeepsItsChannelsButterflyBits) {
  if (!SPECSTATE_MAMBA2_Y_HALVES) GTEST_SKIP() << "built with SPECSTATE_MAMBA2_Y_HALVES=0";
  int order_shows = 0;
  check_mamba2_y_halves<8, 2>(8192, 7u, &order_shows);
  check_mamba2_y_halves<4, 2>(8192, 8u, &order_shows);
  check_mamba2_y_halves<8, 4>(8192, 9u, &order_shows);
  check_mamba2_y_halves<4, 4>(8192, 10u, &order_shows);
  EXPECT_GT(order_shows, 8000);
  // The storing lanes: lane 0 for channel 0 (and for a thread's one channel); of two, LANES / 2
  // for channel 1; of four, LANES / 4, LANES / 2 and 3 LANES / 4 for channels 1, 2 and 3.
  EXPECT_EQ((mamba2_y_lane<8, 1>(0)), 0);
  EXPECT_EQ((mamba2_y_lane<8, 2>(1)), 4);
  EXPECT_EQ((mamba2_y_lane<4, 2>(1)), 2);
  EXPECT_EQ((mamba2_y_lane<8, 4>(1)), 2);
  EXPECT_EQ((mamba2_y_lane<8, 4>(2)), 4);
  EXPECT_EQ((mamba2_y_lane<8, 4>(3)), 6);
  EXPECT_EQ((mamba2_y_lane<4, 4>(3)), 3);
}

// The lean replay conv of chains (kernels::conv_lean_choice): from its kind's rows
// (ConvUpdateParams::lean_rows: 8 for GDN and Mamba2, 4 for KDA) where it applies
// (conv_lean_applies), never where it does not; SPECSTATE_CONV_LEAN's 0 / 1 force it off / on
// wherever it applies.
TEST(ConvLeanChoice, FromItsRowsWhereItApplies) {
  EXPECT_EQ(kConvLeanRows, 8);
  EXPECT_EQ(kKdaConvLeanRows, 4);
  for (const int lean_rows : {kConvLeanRows, kKdaConvLeanRows}) {
    EXPECT_TRUE(conv_lean_choice(true, lean_rows, lean_rows));
    EXPECT_TRUE(conv_lean_choice(true, 128, lean_rows));
    EXPECT_FALSE(conv_lean_choice(true, lean_rows - 1, lean_rows));
    EXPECT_TRUE(conv_lean_choice(true, 1, lean_rows, 1));
    EXPECT_FALSE(conv_lean_choice(true, 128, lean_rows, 0));
    EXPECT_FALSE(conv_lean_choice(false, 128, lean_rows));
    EXPECT_FALSE(conv_lean_choice(false, 128, lean_rows, 1));
  }
}

// The fused small-batch launch of GDN / KDA replay verifies (kernels::gdn_fused_choice): up to
// kGdnFusedMaxRows rows where it can serve the launch, never where it cannot (forced or not);
// SPECSTATE_GDN_FUSED's 1 takes it at any batch, 0 never.
TEST(GdnFusedChoice, SmallBatchesWhereItAppliesAndTheOverride) {
  EXPECT_TRUE(gdn_fused_choice(true, 1));
  EXPECT_TRUE(gdn_fused_choice(true, kGdnFusedMaxRows));
  EXPECT_FALSE(gdn_fused_choice(true, kGdnFusedMaxRows + 1));
  // The H200's measured rule: fused at B = 1 and 2, two launches from B = 4 on.
  EXPECT_TRUE(gdn_fused_choice(true, 2));
  EXPECT_FALSE(gdn_fused_choice(true, 4));
  EXPECT_FALSE(gdn_fused_choice(true, 8));
  EXPECT_FALSE(gdn_fused_choice(false, 1));
  EXPECT_FALSE(gdn_fused_choice(false, 1, 1));
  EXPECT_TRUE(gdn_fused_choice(true, 128, 1));
  EXPECT_FALSE(gdn_fused_choice(true, 1, 0));
}

// The CUDA backend's rule for overlapping layers (programmatic dependent launch): wherever it is
// safe (only after a launch of another layer of the pool's own state, with the backend's own
// token offsets), whatever the rows, the window and the kind, in modes 1 (the default) and 2;
// never in mode 0. (Until 2026-12-06 mode 1 also asked for a row count and window measured on the
// H200 with older kernels; the H100's rounds at the current kernels gained or tied at every row
// count, docs/cuda.md twenty-third session.)
TEST(LayerEdgeAllowed, WhereverSafeInModesOneAndTwo) {
  int a = 0, b = 0;
  for (const int mode : {1, 2}) {
    EXPECT_TRUE(layer_edge_allowed(mode, &a, &b, false, true));
    EXPECT_FALSE(layer_edge_allowed(mode, nullptr, &b, false, true));  // after an upload
    EXPECT_FALSE(layer_edge_allowed(mode, &b, &b, false, true));       // the same layer
    EXPECT_FALSE(layer_edge_allowed(mode, &a, &b, true, true));        // a caller's state
    EXPECT_FALSE(layer_edge_allowed(mode, &a, &b, false, false));      // caller's cu_seqlens
  }
  EXPECT_FALSE(layer_edge_allowed(0, &a, &b, false, true));  // off
}

// Two rows a thread (GDN and KDA): at least two blocks a CTA from 8 rows on, unless forced.
TEST(Rpt2Vblocks, TwoBlocksFromEightRowsUnlessForced) {
  EXPECT_EQ(rpt2_vblocks(1, 8, false), 2);
  EXPECT_EQ(rpt2_vblocks(1, 7, false), 1);
  EXPECT_EQ(rpt2_vblocks(1, 8, true), 1);     // SPECSTATE_GDN_VBLOCKS=1 stays 1
  EXPECT_EQ(rpt2_vblocks(4, 128, false), 4);  // the CTAs-an-SM rule's choice otherwise
}

// The CTAs an SM a kernel is compiled for (kernels::ctas_per_sm_bound): the wanted count where
// its shared memory lets an SM hold that many, else as many as fit (1 KiB reserved a CTA), never
// below 1; the shared memory per SM by compute capability (smem_per_sm_of).
TEST(CtasPerSmBound, CappedByTheSharedMemoryAnSmHolds) {
  constexpr int64_t kSm90 = 228 * 1024;
  EXPECT_EQ(smem_per_sm_of(90), kSm90);
  EXPECT_EQ(smem_per_sm_of(80), 164 * 1024);
  EXPECT_EQ(smem_per_sm_of(89), 100 * 1024);
  EXPECT_EQ(smem_per_sm_of(120), 100 * 1024);
  EXPECT_EQ(smem_per_sm_of(75), 64 * 1024);
  // The recurrence kernels' shared memory as ptxas reports it for sm_90.
  EXPECT_EQ(ctas_per_sm_bound(5, 47392, kSm90), 4);  // KDA, two rows a thread
  EXPECT_EQ(ctas_per_sm_bound(8, 36128, kSm90), 6);  // KDA, one row a thread
  EXPECT_EQ(ctas_per_sm_bound(5, 39200, kSm90), 5);  // GDN, two rows a thread
  EXPECT_EQ(ctas_per_sm_bound(8, 27936, kSm90), 8);  // GDN, one row a thread
  EXPECT_EQ(ctas_per_sm_bound(7, 28368, kSm90), 7);  // Mamba2, several blocks
  // Exactly at the edge: 8 CTAs of (kSm90 / 8 - 1 KiB) bytes fit, one byte more does not.
  EXPECT_EQ(ctas_per_sm_bound(8, kSm90 / 8 - kSmemReservedPerCta, kSm90), 8);
  EXPECT_EQ(ctas_per_sm_bound(8, kSm90 / 8 - kSmemReservedPerCta + 1, kSm90), 7);
  EXPECT_EQ(ctas_per_sm_bound(1, 0, kSm90), 1);
  EXPECT_EQ(ctas_per_sm_bound(4, kSm90, kSm90), 1);  // more than an SM holds: still 1
}

// Rows, heads and layers are grid y / z extents of the CUDA launches (at most 65535): a pool
// past one was built and then every launch of a round failed (heads: after the conv had
// advanced the slot's window). can_implement refuses it with the first such dimension.
TEST(CudaGridLimit, RowsHeadsAndLayersPastTheGridExtentAreNamed) {
  using kernels::cuda_grid_limit_exceeded;
  using kernels::kMaxGridYZ;
  EXPECT_EQ(cuda_grid_limit_exceeded(kMaxGridYZ, kMaxGridYZ, "h", kMaxGridYZ).what, nullptr);
  const kernels::GridExtent rows = cuda_grid_limit_exceeded(kMaxGridYZ + 1, 1, "h", 1);
  EXPECT_STREQ(rows.what, "max_rows");
  EXPECT_EQ(rows.value, 65536);
  const kernels::GridExtent heads = cuda_grid_limit_exceeded(8, 70000, "num_v_heads", 1);
  EXPECT_STREQ(heads.what, "num_v_heads");
  EXPECT_EQ(heads.value, 70000);
  const kernels::GridExtent layers = cuda_grid_limit_exceeded(8, 32, "h", int64_t{1} << 20);
  EXPECT_STREQ(layers.what, "num_layers");
  EXPECT_EQ(layers.value, int64_t{1} << 20);
}

}  // namespace
}  // namespace specstate::kernels

// The replay conv kernels walk a slot's pending steps from kernels::conv_first_kept(n, H) and read
// the committed window only where n < H: the window that results must be the one the whole walk
// from the committed window gives, for every n and window width.
TEST(ConvFirstKept, TheKeptStepsGiveTheWholeWalksWindow) {
  for (int H = 1; H <= 3; ++H) {
    for (int n = 0; n <= 12; ++n) {
      // The committed window holds -1 .. -H (oldest first); pending step i's input is i.
      std::vector<int> whole(H), kept(H, 1000);
      for (int k = 0; k < H; ++k) whole[k] = -(H - k);
      const auto shift = [&](std::vector<int>& w, int x) {
        w.erase(w.begin());
        w.push_back(x);
      };
      for (int i = 0; i < n; ++i) shift(whole, i);
      const int first = specstate::kernels::conv_first_kept(n, H);
      if (n < H) {
        EXPECT_EQ(first, 0) << "H " << H << " n " << n;
        for (int k = 0; k < H; ++k) kept[k] = -(H - k);  // read only here
      }
      for (int i = first; i < n; ++i) shift(kept, i);
      EXPECT_EQ(kept, whole) << "H " << H << " n " << n;
      // No step that stays in the window is skipped, and none shifted out is read.
      EXPECT_EQ(n - first, n < H ? n : H) << "H " << H << " n " << n;
    }
  }
}
