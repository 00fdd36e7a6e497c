// Host-safe types shared by the kernels' launcher declarations (no CUDA device code here).
#pragma once

#include <cstdint>

namespace specstate::kernels {

// Element types the kernels read and write. Values match specstate::DType (the host side
// converts explicitly; kernels/ does not include the public API).
enum class ElemType : int32_t { kF32 = 0, kBF16 = 1 };

// Largest number of values one upload launch carries in its parameters (4 KiB parameter
// budget of a classic launch).
inline constexpr int kUploadChunk = 960;

// Variable windows (DESIGN.md section 2): the tokens of a launch's rows, packed by cumulative
// offsets. `cu` is [row_begin + rows + 1] int32 device memory (the pool's uploaded offsets, or
// the caller's device cu_seqlens read at execution time): row r's tokens are [cu[r], cu[r+1])
// of the inputs. Null: every row has `tokens` tokens at r * tokens. A row whose range is
// malformed (cu[r] < 0, cu[r+1] < cu[r], more than `tokens` tokens, or past `capacity`) runs
// no token: its inputs are read by nobody and no output or state of it is written.
struct RowTokensParams {
  const int32_t* cu = nullptr;
  int64_t capacity = 0;  // tokens the inputs hold (with cu)
};

}  // namespace specstate::kernels
