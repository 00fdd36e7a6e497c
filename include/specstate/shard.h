// Tensor-parallel shards: rank r of a TP group of `tp` ranks holds the heads [r*n/tp, (r+1)*n/tp)
// of every layer (GDN and KDA: key and value heads; Mamba2: heads and B/C groups), so its pool is
// an ordinary pool of the sharded config. ShardMap says which columns of a TP1 tensor belong to the
// shard, and shard_gather copies them (host memory), so an engine, a test or a hand-off can map a
// TP1 layer's weights, inputs, outputs and states to rank r's and back. Each head's arithmetic
// does not depend on the other heads, so the shards' results are bit-identical to the TP1 pool's.
#pragma once

#include <cstdint>
#include <vector>

#include "specstate/config.h"
#include "specstate/tensor_view.h"

namespace specstate {

// A run of columns [begin, begin + count) of a TP1 tensor's sharded dimension.
struct ColumnRange {
  int64_t begin = 0;
  int64_t count = 0;
};

struct ShardMap {
  int tp = 1;
  int rank = 0;
  ModelConfig config;                 // the shard's model: heads (and groups) divided by tp
                                      // (Mamba2's single group: copied, n_groups stays 1)
  std::vector<ColumnRange> conv;      // channels of conv_dim (mixed_qkv / xBC, conv weights,
                                      // conv_out, the conv state), in the shard's order
  ColumnRange heads;                  // value heads (GDN, KDA) / heads (Mamba2): gates, A_log,
                                      // dt_bias, D, the core output and the SSM state
  int64_t head_elems = 0;             // elements per head of the outputs (V or P)
  int64_t conv_dim() const noexcept;  // the shard's channels (sum of `conv`)
};

// Throws Error(kInvalidArgument) naming the field when tp does not divide the heads (or groups)
// or rank is outside [0, tp). A Mamba2 model of one B/C group (Granite-4.0-H, Falcon-H1) is
// sharded at any tp that divides its heads: every rank holds a copy of the group (its conv
// channels and conv state), as vLLM shards it.
ShardMap shard_map(const ModelConfig& tp1, int tp, int rank);

// Copies the columns `ranges` of dimension `dim` of `src` (host memory, any strides) into `dst`
// (host memory; the same shape except dim, whose extent is the ranges' total), in order.
// Throws Error(kInvalidArgument) naming the argument on a shape, dtype or device mismatch, and
// for a dst whose elements share memory or that overlaps src, where each index of a view's first
// dimension counts as its whole byte span (the rule of the layer calls' views): a dst that
// interleaves with src inside one row (src the even columns of a buffer, dst the odd ones) is
// refused too. Pass other memory.
void shard_gather(const TensorView& src, int dim, const std::vector<ColumnRange>& ranges,
                  const TensorView& dst);

}  // namespace specstate
