#include "specstate/shard.h"

#include <cstring>
#include <string>
#include <utility>

#include "specstate/status.h"
#include "validate.h"

namespace specstate {

namespace {
// A refusal naming the function the caller called.
[[noreturn]] void bad(const char* fn, const std::string& what) {
  throw Error(Status::kInvalidArgument, std::string(fn) + ": " + what);
}
ColumnRange part(int64_t total, int tp, int rank) {
  return ColumnRange{total / tp * rank, total / tp};
}
}  // namespace

int64_t ShardMap::conv_dim() const noexcept {
  int64_t n = 0;
  for (const ColumnRange& r : conv) n += r.count;
  return n;
}

ShardMap shard_map(const ModelConfig& tp1, int tp, int rank) {
  tp1.validate();
  if (tp < 1) bad("shard_map", "tp = " + std::to_string(tp) + " must be positive");
  if (rank < 0 || rank >= tp) {
    bad("shard_map", "rank = " + std::to_string(rank) + " outside [0, " + std::to_string(tp) + ")");
  }
  ShardMap m;
  m.tp = tp;
  m.rank = rank;
  m.config = tp1;
  if (tp1.kind == LayerKind::kMamba2) {
    const Mamba2Config& c = tp1.mamba;
    if (c.num_heads % tp != 0) {
      bad("shard_map", "mamba.num_heads = " + std::to_string(c.num_heads) +
                           " is not a multiple of tp = " + std::to_string(tp));
    }
    // One group that tp does not divide (Granite-4.0-H, Falcon-H1: n_groups = 1) is copied to
    // every rank, as vLLM shards it (extra_groups_for_head_shards): each rank's heads read the
    // same B and C as at TP1, so the shard is still exact. Other groups must divide.
    const bool copy_group = c.n_groups == 1;
    if (c.n_groups % tp != 0 && !copy_group) {
      bad("shard_map", "mamba.n_groups = " + std::to_string(c.n_groups) +
                           " is not a multiple of tp = " + std::to_string(tp) +
                           " (and not 1, which every rank would copy)");
    }
    m.config.mamba.num_heads = c.num_heads / tp;
    m.config.mamba.n_groups = copy_group ? 1 : c.n_groups / tp;
    const int64_t x = int64_t{c.num_heads} * c.head_dim, bc = int64_t{c.n_groups} * c.d_state;
    const ColumnRange groups = copy_group ? ColumnRange{0, bc} : part(bc, tp, rank);
    // xBC = [x: heads * P | B: groups * N | C: groups * N]
    m.conv = {
        part(x, tp, rank), {x + groups.begin, groups.count}, {x + bc + groups.begin, groups.count}};
    m.heads = part(c.num_heads, tp, rank);
    m.head_elems = c.head_dim;
    return m;
  }
  // GDN and KDA: the same heads, the same mixed_qkv = [q: H * K | k: H * K | v: HV * V] (KDA's
  // gate g [tokens, HV, K] and dt_bias [HV, K] split by value heads, as its b and A_log).
  const bool kda = tp1.kind == LayerKind::kKda;
  const char* prefix = kda ? "kda." : "gdn.";
  const int H = kda ? tp1.kda_layer.num_k_heads : tp1.gdn.num_k_heads;
  const int HV = kda ? tp1.kda_layer.num_v_heads : tp1.gdn.num_v_heads;
  const int K = kda ? tp1.kda_layer.head_k_dim : tp1.gdn.head_k_dim;
  const int V = kda ? tp1.kda_layer.head_v_dim : tp1.gdn.head_v_dim;
  if (H % tp != 0) {
    bad("shard_map", std::string(prefix) + "num_k_heads = " + std::to_string(H) +
                         " is not a multiple of tp = " + std::to_string(tp));
  }
  if (HV % tp != 0) {
    bad("shard_map", std::string(prefix) + "num_v_heads = " + std::to_string(HV) +
                         " is not a multiple of tp = " + std::to_string(tp));
  }
  if (kda) {
    m.config.kda_layer.num_k_heads = H / tp;
    m.config.kda_layer.num_v_heads = HV / tp;
  } else {
    m.config.gdn.num_k_heads = H / tp;
    m.config.gdn.num_v_heads = HV / tp;
  }
  const int64_t qk = int64_t{H} * K;
  const int64_t v = int64_t{HV} * V;
  m.conv = {part(qk, tp, rank),
            {qk + part(qk, tp, rank).begin, qk / tp},
            {2 * qk + part(v, tp, rank).begin, v / tp}};
  m.heads = part(HV, tp, rank);
  m.head_elems = V;
  return m;
}

void shard_gather(const TensorView& src, int dim, const std::vector<ColumnRange>& ranges,
                  const TensorView& dst) {
  // Each refusal names the view and its value (it said "src and dst ..." for either).
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"src", &src},
                                   std::pair<const char*, const TensorView*>{"dst", &dst}}) {
    if (view->empty()) {
      bad("shard_gather", std::string(name) + " (" + view->describe() +
                              ") is empty: it needs data and at least one dimension");
    }
    if (view->device != Device::kCpu) {
      bad("shard_gather",
          std::string(name) + ".device = " +
              (view->device == Device::kCuda
                   ? std::string("cuda")
                   : std::to_string(static_cast<int>(view->device)) + " (not a device)") +
              ": src and dst must be host memory (copy device tensors with cudaMemcpy2D per "
              "range)");
    }
    if (view->dtype != DType::kF32 && view->dtype != DType::kBF16 && view->dtype != DType::kI32) {
      bad("shard_gather", std::string(name) + ".dtype = " + detail::dtype_value_text(view->dtype));
    }
  }
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"src", &src},
                                   std::pair<const char*, const TensorView*>{"dst", &dst}}) {
    if (view->ndim < 1 || view->ndim > TensorView::kMaxDims) {
      bad("shard_gather", std::string(name) + ".ndim = " + std::to_string(view->ndim) +
                              " outside [1, " + std::to_string(TensorView::kMaxDims) + "]");
    }
  }
  if (src.ndim != dst.ndim) {
    bad("shard_gather", "src.ndim = " + std::to_string(src.ndim) +
                            " and dst.ndim = " + std::to_string(dst.ndim) + " differ");
  }
  if (dim < 0 || dim >= src.ndim) {
    bad("shard_gather",
        "dim = " + std::to_string(dim) + " outside [0, ndim = " + std::to_string(src.ndim) + ")");
  }
  if (src.dtype != dst.dtype) {
    bad("shard_gather", "src.dtype = " + detail::dtype_value_text(src.dtype) +
                            " and dst.dtype = " + detail::dtype_value_text(dst.dtype) +
                            " differ: the copy does not convert");
  }
  // Extents and strides >= 0, spans within 2^48 bytes: every offset below is exact.
  detail::check_strided("shard_gather", "src", src);
  detail::check_strided("shard_gather", "dst", dst);
  int64_t total = 0;
  for (const ColumnRange& r : ranges) {
    if (r.begin < 0 || r.count < 0 || r.begin > src.shape[dim] ||
        r.count > src.shape[dim] - r.begin) {
      bad("shard_gather", "range {begin " + std::to_string(r.begin) + ", count " +
                              std::to_string(r.count) + "} outside src dim " + std::to_string(dim) +
                              " = " + std::to_string(src.shape[dim]));
    }
    if (__builtin_add_overflow(total, r.count, &total) || total > dst.shape[dim]) {
      bad("shard_gather", "the ranges hold more than dst dim " + std::to_string(dim) + " = " +
                              std::to_string(dst.shape[dim]) + " columns");
    }
  }
  for (int d = 0; d < src.ndim; ++d) {
    const int64_t want = d == dim ? total : src.shape[d];
    if (dst.shape[d] != want) {
      bad("shard_gather", "dst dim " + std::to_string(d) + " = " + std::to_string(dst.shape[d]) +
                              ", expected " + std::to_string(want));
    }
  }
  const std::size_t es = dtype_size(src.dtype);
  // The copy's work is dst's elements: bounded as a buffer of 2^48 bytes would be (a stride-0
  // view may claim any extent).
  int64_t n = 1;
  for (int d = 0; d < dst.ndim; ++d) {
    if (__builtin_mul_overflow(n, dst.shape[d], &n) ||
        n > (int64_t{1} << 48) / static_cast<int64_t>(es)) {
      bad("shard_gather",
          "dst holds more than 2^48 bytes of elements (shape " + dst.describe() + ")");
    }
  }
  if (n == 0) return;  // nothing to copy (and no column map to build)
  // dst is written while src is read: neither may share a byte with dst, nor dst's own elements
  // one another (a stride-0 or overlapping view kept only the last write).
  detail::check_no_self_overlap("shard_gather", "dst", dst);
  if (detail::span_bytes(src) > 0) {
    int64_t i = 0, j = 0;
    if (detail::rows_overlap(detail::byte_rows(dst), detail::byte_rows(src), &i, &j)) {
      bad("shard_gather",
          "dst (" + dst.describe() + ") overlaps src (" + src.describe() + "): index " +
              std::to_string(i) + " of dst lies within the byte span of index " +
              std::to_string(j) +
              " of src (each index of the first dimension counts as its whole span); dst must be "
              "other memory");
    }
  }
  // Walk every element of dst; map its index along `dim` to src through the ranges.
  std::vector<int64_t> map;
  map.reserve(static_cast<std::size_t>(total));
  for (const ColumnRange& r : ranges) {
    for (int64_t i = 0; i < r.count; ++i) map.push_back(r.begin + i);
  }
  std::vector<int64_t> idx(static_cast<std::size_t>(dst.ndim), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t so = 0, doff = 0;
    for (int d = 0; d < dst.ndim; ++d) {
      so += (d == dim ? map[idx[d]] : idx[d]) * src.stride[d];
      doff += idx[d] * dst.stride[d];
    }
    std::memcpy(static_cast<char*>(dst.data) + doff * es,
                static_cast<const char*>(src.data) + so * es, es);
    for (int d = dst.ndim - 1; d >= 0; --d) {
      if (++idx[d] < dst.shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace specstate
