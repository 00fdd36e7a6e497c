// Caller-owned pools (DESIGN.md section 4): a StatePool that adopts an engine's own committed-
// state tensors is bit-identical to an owning pool over the same calls (rounds with padding rows,
// chains and trees, host and device accepted values, fork / copy / reset / export / import,
// release and re-acquire), and never writes a byte of the caller's memory that is not a live
// slot's state: the padding between slots and between layers and every slot no request holds
// keep the sentinel they were filled with. One driver for every backend (`Memory` as in
// strategy_equivalence.h).
#pragma once

#include <cstdint>
#include <vector>

#include "common/strategy_equivalence.h"
#include "specstate/specstate.h"

namespace specstate::test {

enum class CallerLayout {
  kOneTensor,  // one [L, slots, padded state] tensor per kind: equidistant layers
  kPerLayer,   // per-layer regions at irregular offsets: no common layer pitch
  kVllm,       // kOneTensor in vLLM's element order before its PR #33291 (both pools:
               // vllm_layout_options): each slot's conv window [W-1][conv_dim], the delta-rule
               // kinds' state [HV][K][V]
};

// The caller's memory of one pool: a buffer per kind, the views handed to the pool, and where
// each (layer, slot) state lies in the buffer.
struct CallerMemory {
  TensorView conv_buffer, ssm_buffer;  // u8 views of the whole regions (backend memory)
  CommittedStateViews views;
  int64_t conv_state_bytes = 0, ssm_state_bytes = 0;
  std::vector<int64_t> conv_offset, ssm_offset;  // [L * slots] byte offsets in the buffers
};

// Allocates (through `mem`, persistent) and fills with a sentinel the caller memory of a pool
// of `model` / `options` in `layout` (the views in options' element order).
CallerMemory make_caller_memory(const ModelConfig& model, const PoolOptions& options,
                                CallerLayout layout, Memory& mem, uint64_t seed);

// Runs the equivalence on `mem`'s backend for a preset's layer kind.
void run_caller_owned(const char* preset, Strategy strategy, bool tree, CallerLayout layout,
                      Memory& mem, uint64_t seed);

}  // namespace specstate::test
