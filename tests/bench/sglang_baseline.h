// SGLang's own Triton kernels on one H200 at Qwen3-Next-80B TP1 shapes (H=16, HV=32, K=V=128,
// W=4, conv_dim 8192, 36 GDN layers, bf16 activations and conv state, fp32 SSM state), copied
// from shared/baseline/sglang_h200.json (medians, microseconds; L2 flushed; CUDA graph of 36
// layers). The anchor every specstate benchmark row is printed next to.
#pragma once

namespace specstate::bench {

// SGLang's measured device copy bandwidth (bytes read + written), 4 GiB copy.
inline constexpr double kSglangCopyGBps = 4295.3;

struct SglangRow {
  int T, B;
  double conv_us, conv_frac;      // verify conv, per layer (convG)
  double rec_us, rec_frac;        // verify recurrence, per layer (sigG)
  double commit_us, commit_frac;  // fused commit over 36 layers (cmtF)
  double step_est_us;             // 36 x (convG + sigG) + cmtF
  double step_at_bw_us;           // SGLang's data flow at copy bandwidth
};

inline constexpr SglangRow kSglang[] = {
    {2, 1, 2.72, 0.021, 7.83, 0.189, 51.7, 0.696, 431.4, 91.2},
    {2, 8, 2.88, 0.122, 18.17, 0.650, 331.4, 0.869, 1089.3, 725.6},
    {2, 32, 5.59, 0.243, 61.66, 0.766, 1303.9, 0.883, 3724.8, 2900.8},
    {2, 128, 13.07, 0.412, 218.58, 0.864, 5167.5, 0.891, 13506.7, 11601.4},
    {4, 1, 2.61, 0.031, 12.59, 0.196, 52.0, 0.692, 599.0, 127.6},
    {4, 8, 3.01, 0.178, 28.08, 0.702, 331.8, 0.867, 1450.8, 1016.7},
    {4, 32, 5.68, 0.368, 97.34, 0.810, 1290.5, 0.892, 4998.9, 4065.3},
    {4, 128, 15.85, 0.525, 358.33, 0.880, 5142.7, 0.895, 18613.2, 16259.4},
    {8, 1, 3.14, 0.040, 22.10, 0.201, 53.1, 0.678, 961.5, 200.4},
    {8, 8, 3.74, 0.241, 46.55, 0.763, 332.2, 0.866, 2142.7, 1599.0},
    {8, 32, 8.30, 0.428, 169.06, 0.840, 1292.2, 0.891, 7677.2, 6394.3},
    {8, 128, 22.36, 0.634, 647.68, 0.878, 5144.7, 0.895, 29265.9, 25575.6},
};

// SGLang's rounds measured as a CUDA graph of 4 consecutive rounds with different accepted
// lengths, L2 flushed, median / 4 (shared/baseline/MAMBA2_AND_REPLAY.md part 2): the snapshot
// path, fold-every-commit, and the ReplaySSM circular rings of 16 and 64 records; floor = read +
// write every row's state once per layer at copy bandwidth (36 x B x 4 MiB). Microseconds.
struct SglangReplayRow {
  int T, B;
  double snapshot_us, fold_us, circ16_us, circ64_us, floor_us;
};

inline constexpr SglangReplayRow kSglangReplay[] = {
    {2, 1, 469.3, 443.9, 510.4, 796.0, 35.2},
    {2, 8, 1124.6, 860.5, 672.4, 1125.6, 281.2},
    {2, 32, 3714.0, 2811.2, 1746.8, 3511.1, 1124.9},
    {2, 128, 13540.2, 10000.4, 5816.1, 11712.1, 4499.5},
    {4, 1, 626.0, 593.7, 530.0, 794.5, 35.2},
    {4, 8, 1485.7, 1086.8, 746.8, 1130.0, 281.2},
    {4, 32, 5019.3, 3621.5, 1984.2, 3589.8, 1124.9},
    {4, 128, 18667.6, 12781.0, 6688.4, 12101.5, 4499.5},
    {8, 1, 984.4, 896.5, 710.3, 923.3, 35.2},
    {8, 8, 2182.2, 1607.9, 1202.5, 1305.7, 281.2},
    {8, 32, 7669.3, 5686.8, 3526.3, 3985.7, 1124.9},
    {8, 128, 29342.4, 20723.6, 12798.5, 14426.2, 4499.5},
};

inline const SglangReplayRow* sglang_replay_row(int T, int B) {
  for (const SglangReplayRow& r : kSglangReplay) {
    if (r.T == T && r.B == B) return &r;
  }
  return nullptr;
}

inline const SglangRow* sglang_row(int T, int B) {
  for (const SglangRow& r : kSglang) {
    if (r.T == T && r.B == B) return &r;
  }
  return nullptr;
}

}  // namespace specstate::bench
