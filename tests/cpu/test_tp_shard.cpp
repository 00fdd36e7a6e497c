// Tensor-parallel shards (issue 12 item 1): running every rank's pool of the sharded config on
// the rank's columns of the TP1 weights and inputs gives, concatenated, bit for bit the TP1 pool's
// outputs and committed states, for both strategies and every layer kind (tp = 2 and 4; chains
// and trees; prefill, then verify + commit rounds).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/gdn_data.h"
#include "common/kda_data.h"
#include "common/mamba2_data.h"

namespace specstate::test {
namespace {

// rank r's copy of a TP1 buffer: columns `ranges` of dimension `dim`.
Buffer gather(const Buffer& src, int dim, const std::vector<ColumnRange>& ranges) {
  if (src.numel() == 0) return Buffer();
  std::vector<int64_t> shape = src.shape();
  int64_t n = 0;
  for (const ColumnRange& r : ranges) n += r.count;
  shape[dim] = n;
  Buffer dst(src.dtype(), shape);
  shard_gather(src.view(), dim, ranges, dst.view());
  return dst;
}
std::vector<uint8_t> gathered_bytes(const TensorView& src, int dim,
                                    const std::vector<ColumnRange>& ranges) {
  std::vector<int64_t> shape(src.shape.begin(), src.shape.begin() + src.ndim);
  int64_t n = 0;
  for (const ColumnRange& r : ranges) n += r.count;
  shape[dim] = n;
  Buffer dst(src.dtype, shape);
  shard_gather(src, dim, ranges, dst.view());
  return dst.bytes();
}
std::vector<uint8_t> bytes_of(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return std::vector<uint8_t>(p, p + v.numel() * dtype_size(v.dtype));
}
ColumnRange times(ColumnRange r, int64_t k) { return ColumnRange{r.begin * k, r.count * k}; }

// Per kind: the TP1 config, its random data, and the shard's copies.
struct GdnSide {
  using W = LayerWeights;
  using In = TokenInputs;
  using Out = TokenOutputs;
  static GdnConfig config(DType act) {
    GdnConfig g = small_config(act, act, DType::kF32, true);
    g.num_k_heads = 4;
    g.num_v_heads = 8;
    return g;
  }
  static ModelConfig model(int L, const GdnConfig& g) { return ModelConfig::gated_delta_net(L, g); }
  static const GdnConfig& layer(const ModelConfig& m) { return m.gdn; }
  static W shard(const ShardMap& m, const W& w) {
    W s;
    s.conv_weight = gather(w.conv_weight, 0, m.conv);
    s.conv_bias = gather(w.conv_bias, 0, m.conv);
    s.A_log = gather(w.A_log, 0, {m.heads});
    s.dt_bias = gather(w.dt_bias, 0, {m.heads});
    return s;
  }
  static In shard(const ShardMap& m, const In& in) {
    In s;
    s.mixed_qkv = gather(in.mixed_qkv, 1, m.conv);
    s.a = gather(in.a, 1, {m.heads});
    s.b = gather(in.b, 1, {m.heads});
    return s;
  }
  static const Buffer& main_out(const Out& o) { return o.core_out; }
};

struct Mamba2Side {
  using W = Mamba2LayerWeights;
  using In = Mamba2TokenInputs;
  using Out = Mamba2TokenOutputs;
  static Mamba2Config config(DType act) {
    Mamba2Config m = small_mamba2_config(act, act, DType::kF32, true, true, true);
    m.num_heads = 8;
    m.head_dim = 4;
    m.n_groups = 4;
    return m;
  }
  static ModelConfig model(int L, const Mamba2Config& m) { return ModelConfig::mamba2(L, m); }
  static const Mamba2Config& layer(const ModelConfig& m) { return m.mamba; }
  static W shard(const ShardMap& m, const W& w) {
    W s;
    s.conv_weight = gather(w.conv_weight, 0, m.conv);
    s.conv_bias = gather(w.conv_bias, 0, m.conv);
    s.A_log = gather(w.A_log, 0, {m.heads});
    s.dt_bias = gather(w.dt_bias, 0, {m.heads});
    s.D = gather(w.D, 0, {m.heads});
    return s;
  }
  static In shard(const ShardMap& m, const In& in) {
    In s;
    s.xBC = gather(in.xBC, 1, m.conv);
    s.dt = gather(in.dt, 1, {m.heads});
    s.z = gather(in.z, 1, {times(m.heads, m.head_elems)});
    return s;
  }
  static const Buffer& main_out(const Out& o) { return o.y; }
};

// KDA: GDN's heads and columns; g [tokens, HV, K] and dt_bias [HV, K] follow the value heads.
struct KdaSide {
  using W = KdaLayerWeights;
  using In = KdaTokenInputs;
  using Out = KdaTokenOutputs;
  static KdaConfig config(DType act) {
    KdaConfig k = small_kda_config(act, act, DType::kF32, true);
    k.num_k_heads = 4;
    k.num_v_heads = 8;
    k.head_v_dim = 6;
    k.lower_bound = -5.0f;
    return k;
  }
  static ModelConfig model(int L, const KdaConfig& k) { return ModelConfig::kda(L, k); }
  static const KdaConfig& layer(const ModelConfig& m) { return m.kda_layer; }
  static W shard(const ShardMap& m, const W& w) {
    W s;
    s.conv_weight = gather(w.conv_weight, 0, m.conv);
    s.conv_bias = gather(w.conv_bias, 0, m.conv);
    s.A_log = gather(w.A_log, 0, {m.heads});
    s.dt_bias = gather(w.dt_bias, 0, {m.heads});
    return s;
  }
  static In shard(const ShardMap& m, const In& in) {
    In s;
    s.mixed_qkv = gather(in.mixed_qkv, 1, m.conv);
    s.g = gather(in.g, 1, {m.heads});
    s.b = gather(in.b, 1, {m.heads});
    return s;
  }
  static const Buffer& main_out(const Out& o) { return o.core_out; }
};

struct ShardCase {
  const char* name;
  bool mamba2;
  int tp;
  bool tree;
  Strategy strategy;
  DType act;
  bool kda = false;
  int m2_groups = 0;  // Mamba2: B/C groups (0: Mamba2Side's 4)
};
void PrintTo(const ShardCase& c, std::ostream* out) { *out << c.name; }

template <typename Side>
void run(const ShardCase& c) {
  const uint64_t seed =
      0x5a4d + c.tp * 10 + c.tree + 100 * static_cast<int>(c.strategy) + (c.kda ? 7 : 0);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int L = 2, requests = 3, T = 4, rounds = 6;
  auto layer = Side::config(c.act);
  if constexpr (std::is_same_v<Side, Mamba2Side>) {
    if (c.m2_groups > 0) layer.n_groups = c.m2_groups;
  }
  const ModelConfig tp1 = Side::model(L, layer);
  PoolOptions o;
  o.num_slots = requests;
  o.max_rows = requests;
  o.max_window = T;
  o.strategy = c.strategy;
  StatePool full(tp1, o);
  std::vector<ShardMap> maps;
  std::vector<StatePool> ranks;
  for (int r = 0; r < c.tp; ++r) {
    maps.push_back(shard_map(tp1, c.tp, r));
    ranks.emplace_back(maps[r].config, o);
  }
  std::vector<SlotHandle> hf;
  std::vector<std::vector<SlotHandle>> hr(c.tp);
  for (int i = 0; i < requests; ++i) {
    hf.push_back(full.acquire());
    for (int r = 0; r < c.tp; ++r) hr[r].push_back(ranks[r].acquire());
  }
  std::vector<typename Side::W> w;
  std::vector<std::vector<typename Side::W>> ws(c.tp);
  for (int l = 0; l < L; ++l) {
    w.push_back(random_weights(layer, rng));
    for (int r = 0; r < c.tp; ++r) ws[r].push_back(Side::shard(maps[r], w[l]));
  }
  // Compares every rank's outputs with its columns of the TP1 outputs.
  auto same_outputs = [&](const typename Side::Out& f, const std::vector<typename Side::Out>& s,
                          const std::string& what) {
    for (int r = 0; r < c.tp; ++r) {
      ASSERT_EQ(gathered_bytes(Side::main_out(f).view(), 1, {maps[r].heads}),
                Side::main_out(s[r]).bytes())
          << what << ", rank " << r << ": the core output differs";
      ASSERT_EQ(gathered_bytes(f.conv_out.view(), 1, maps[r].conv), s[r].conv_out.bytes())
          << what << ", rank " << r << ": conv_out differs";
    }
  };
  auto same_states = [&](const std::string& what) {
    for (int l = 0; l < L; ++l) {
      for (int r = 0; r < c.tp; ++r) {
        ASSERT_EQ(gathered_bytes(full.ssm_state(l), 1, {maps[r].heads}),
                  bytes_of(ranks[r].ssm_state(l)))
            << what << ", layer " << l << " rank " << r << ": SSM state differs";
        ASSERT_EQ(gathered_bytes(full.conv_state(l), 1, maps[r].conv),
                  bytes_of(ranks[r].conv_state(l)))
            << what << ", layer " << l << " rank " << r << ": conv state differs";
      }
    }
  };
  // One layer call on every pool: TP1 inputs, each rank's columns of them.
  auto call = [&](int l, int64_t tokens, auto&& on_full, auto&& on_rank, const std::string& what) {
    const typename Side::In in = random_inputs(layer, tokens, rng);
    typename Side::Out fo = make_outputs(layer, tokens);
    on_full(in, fo);
    std::vector<typename Side::Out> so;
    for (int r = 0; r < c.tp; ++r) {
      const typename Side::In sin = Side::shard(maps[r], in);
      so.push_back(make_outputs(Side::layer(maps[r].config), tokens));
      on_rank(r, sin, so[r]);
    }
    same_outputs(fo, so, what);
  };
  for (int i = 0; i < requests; ++i) {
    for (int l = 0; l < L; ++l) {
      call(
          l, 3,
          [&](const typename Side::In& in, typename Side::Out& o) {
            full.prefill(l, hf[i], w[l].view(), in.view(), o.view());
          },
          [&](int r, const typename Side::In& in, typename Side::Out& o) {
            ranks[r].prefill(l, hr[r][i], ws[r][l].view(), in.view(), o.view());
          },
          "prefill " + std::to_string(i));
    }
  }
  same_states("after prefill");
  int accepted_total = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    VerifyBatch bf{hf, T, {}};
    std::vector<VerifyBatch> br;
    if (c.tree) {
      for (int i = 0; i < requests; ++i) {
        for (int t = 0; t < T; ++t) {
          bf.parents.push_back(t == 0 ? -1 : static_cast<int32_t>(rng() % t));
        }
      }
    }
    full.begin_verify(bf);
    for (int r = 0; r < c.tp; ++r) {
      br.push_back(VerifyBatch{hr[r], T, bf.parents});
      ranks[r].begin_verify(br[r]);
    }
    for (int l = 0; l < L; ++l) {
      call(
          l, int64_t{requests} * T,
          [&](const typename Side::In& in, typename Side::Out& o) {
            full.verify(l, w[l].view(), in.view(), o.view());
          },
          [&](int r, const typename Side::In& in, typename Side::Out& o) {
            ranks[r].verify(l, ws[r][l].view(), in.view(), o.view());
          },
          "verify layer " + std::to_string(l));
    }
    std::vector<int32_t> accepted(requests);
    for (int32_t& a : accepted) {
      a = c.tree ? static_cast<int32_t>(rng() % (T + 1)) - 1
                 : static_cast<int32_t>(rng() % (T + 1));
      accepted_total += a > 0;
    }
    full.commit(accepted);
    for (int r = 0; r < c.tp; ++r) ranks[r].commit(accepted);
    if (round % 2 == 1) same_states("after commit");
  }
  same_states("at the end");
  EXPECT_GT(accepted_total, rounds);
  double norm = 0;
  for (int l = 0; l < L; ++l) norm += sum_squares(full.ssm_state(l));
  EXPECT_GT(norm, 0.0);
}

class TpShard : public ::testing::TestWithParam<ShardCase> {};

TEST_P(TpShard, ShardsConcatenatedEqualTheTp1PoolBitForBit) {
  const ShardCase c = GetParam();
  if (c.mamba2) {
    run<Mamba2Side>(c);
  } else if (c.kda) {
    run<KdaSide>(c);
  } else {
    run<GdnSide>(c);
  }
}

std::vector<ShardCase> cases() {
  std::vector<ShardCase> all;
  for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
    const bool replay = s == Strategy::kReplay;
    all.push_back({replay ? "gdn_tp2_chain_replay" : "gdn_tp2_chain_snapshot", false, 2, false, s,
                   DType::kF32});
    all.push_back({replay ? "gdn_tp4_tree_bf16_replay" : "gdn_tp4_tree_bf16_snapshot", false, 4,
                   true, s, DType::kBF16});
    all.push_back({replay ? "mamba2_tp2_tree_replay" : "mamba2_tp2_tree_snapshot", true, 2, true, s,
                   DType::kF32});
    all.push_back({replay ? "mamba2_tp4_chain_bf16_replay" : "mamba2_tp4_chain_bf16_snapshot", true,
                   4, false, s, DType::kBF16});
    all.push_back({replay ? "kda_tp2_tree_replay" : "kda_tp2_tree_snapshot", false, 2, true, s,
                   DType::kF32, true});
    // One B/C group (Granite-4.0-H, Falcon-H1): every rank holds a copy, as vLLM shards it.
    all.push_back(
        {replay ? "mamba2_one_group_tp4_tree_replay" : "mamba2_one_group_tp4_tree_snapshot", true,
         4, true, s, DType::kF32, false, 1});
    all.push_back({replay ? "kda_tp4_chain_bf16_replay" : "kda_tp4_chain_bf16_snapshot", false, 4,
                   false, s, DType::kBF16, true});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Cpu, TpShard, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ShardCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(TpShardMap, ColumnsAndBadArguments) {
  const ModelConfig m = ModelConfig::gated_delta_net(1, GdnSide::config(DType::kF32));
  const ShardMap s = shard_map(m, 2, 1);  // H=4 K=8: q cols 16..31, k 48..63, v 32*... of 128
  ASSERT_EQ(s.conv.size(), 3u);
  EXPECT_EQ(s.conv[0].begin, 16);
  EXPECT_EQ(s.conv[0].count, 16);
  EXPECT_EQ(s.conv[1].begin, 32 + 16);
  EXPECT_EQ(s.conv[2].begin, 64 + 32);
  EXPECT_EQ(s.conv[2].count, 32);
  EXPECT_EQ(s.heads.begin, 4);
  EXPECT_EQ(s.conv_dim(), s.config.conv_dim());
  try {
    shard_map(m, 3, 0);
    FAIL() << "tp = 3 does not divide 4 key heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gdn.num_k_heads = 4"), std::string::npos) << e.what();
    // The function the caller called is named (the errors said "shard:").
    EXPECT_EQ(std::string(e.what()).find("shard:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shard_map: "), std::string::npos) << e.what();
  }
  EXPECT_THROW(shard_map(m, 2, 2), Error);
  const ModelConfig mm = ModelConfig::mamba2(1, Mamba2Side::config(DType::kF32));
  EXPECT_EQ(shard_map(mm, 4, 3).conv_dim(), shard_map(mm, 4, 3).config.conv_dim());
  // Mamba2 (8 heads of P = 4, N = small_mamba2_config's): groups that tp does not divide are
  // refused unless there is one, which every rank copies (x 8..15 of 32, B and C whole).
  Mamba2Config one = Mamba2Side::config(DType::kF32);
  const int64_t N = one.d_state;
  one.n_groups = 1;
  const ShardMap s1 = shard_map(ModelConfig::mamba2(1, one), 4, 1);
  ASSERT_EQ(s1.conv.size(), 3u);
  EXPECT_EQ(s1.conv[0].begin, 8);
  EXPECT_EQ(s1.conv[0].count, 8);
  EXPECT_EQ(s1.conv[1].begin, 32);
  EXPECT_EQ(s1.conv[1].count, N);
  EXPECT_EQ(s1.conv[2].begin, 32 + N);
  EXPECT_EQ(s1.conv[2].count, N);
  EXPECT_EQ(s1.config.mamba.n_groups, 1);
  EXPECT_EQ(s1.config.mamba.num_heads, 2);
  EXPECT_EQ(s1.conv_dim(), s1.config.conv_dim());
  one.n_groups = 2;
  try {
    shard_map(ModelConfig::mamba2(1, one), 4, 0);
    FAIL() << "tp = 4 does not divide 2 groups";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mamba.n_groups = 2 is not a multiple of tp = 4 (and not "
                                         "1, which every rank would copy)"),
              std::string::npos)
        << e.what();
  }
  // KDA: GDN's columns (H=4 K=8 V=6: q 16..31, k 48..63, v 64 + 24..47), its own field names.
  const ModelConfig mk = ModelConfig::kda(1, KdaSide::config(DType::kF32));
  const ShardMap sk = shard_map(mk, 2, 1);
  ASSERT_EQ(sk.conv.size(), 3u);
  EXPECT_EQ(sk.conv[0].begin, 16);
  EXPECT_EQ(sk.conv[1].begin, 48);
  EXPECT_EQ(sk.conv[2].begin, 64 + 24);
  EXPECT_EQ(sk.conv[2].count, 24);
  EXPECT_EQ(sk.heads.begin, 4);
  EXPECT_EQ(sk.head_elems, 6);
  EXPECT_EQ(sk.config.kda_layer.num_v_heads, 4);
  EXPECT_EQ(sk.conv_dim(), sk.config.conv_dim());
  try {
    shard_map(mk, 8, 0);
    FAIL() << "tp = 8 does not divide 4 key heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kda.num_k_heads = 4"), std::string::npos) << e.what();
  }
  Buffer src(DType::kF32, {2, 4}), dst(DType::kF32, {2, 3});
  EXPECT_THROW(shard_gather(src.view(), 1, {{2, 3}}, dst.view()), Error);  // past the end
}

// shard_gather's views and ranges are checked before any byte is copied, as the pool's views are:
// strides that reach past 2^48 bytes or are negative (a SEGV in memcpy), extents below zero
// (accepted), ranges whose end overflows int64 (accepted, then std::length_error /
// std::bad_alloc), a broadcast dst of 2^62 elements (2^62 copies), a dst whose elements share
// memory or lie over src (silently wrong). A copy of no element builds no column map. (A view
// whose strides stay within 2^48 bytes but past its own buffer cannot be told from a good one.)
TEST(TpShardGather, RefusesBadViewsAndRanges) {
  Buffer src(DType::kF32, {2, 4}), dst(DType::kF32, {2, 2});
  for (int64_t i = 0; i < 8; ++i) src.set(i, static_cast<float>(i + 1));
  const auto refused = [&](const TensorView& s, const std::vector<ColumnRange>& ranges,
                           const TensorView& d, const std::string& needle) {
    const std::vector<uint8_t> before = dst.bytes();
    try {
      shard_gather(s, 1, ranges, d);
      ADD_FAILURE() << needle << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("shard_gather"), std::string::npos) << e.what();
    }
    EXPECT_EQ(dst.bytes(), before);
  };
  TensorView far = src.view();
  far.stride[0] = int64_t{1} << 47;  // 2^49 bytes on: no buffer is that large
  refused(far, {{0, 2}}, dst.view(), "src stride 0 = 140737488355328");
  TensorView back = src.view();
  back.stride[0] = -1000;
  refused(back, {{0, 2}}, dst.view(), "src dim 0 has extent 2 and stride -1000");
  TensorView negative = dst.view();
  negative.shape[0] = -2;
  refused(src.view(), {{0, 2}}, negative, "dst dim 0 has extent -2");
  refused(src.view(), {{1, INT64_MAX}}, dst.view(), "range {begin 1, count 9223372036854775807}");
  refused(src.view(), {{0, 2}, {0, 2}, {0, 1}}, dst.view(), "the ranges hold more than dst dim 1");
  Buffer one(DType::kF32, {1, 1});
  TensorView wide_src = one.view(), wide_dst = one.view();
  wide_src.shape[0] = wide_dst.shape[0] = int64_t{1} << 62;
  wide_src.stride[0] = wide_dst.stride[0] = 0;
  refused(wide_src, {{0, 1}}, wide_dst, "dst holds more than 2^48 bytes");
  // The rank and the dim refused with their values and the range they miss ("src has 7 dims,
  // dst 7" and "dim = 5 outside the dims" said neither).
  TensorView deep_src = src.view(), deep_dst = dst.view();
  deep_src.ndim = deep_dst.ndim = 7;
  refused(deep_src, {{0, 2}}, deep_dst, "src.ndim = 7 outside [1, 6]");
  TensorView flat = dst.view();
  flat.ndim = 1;
  refused(src.view(), {{0, 2}}, flat, "src.ndim = 2 and dst.ndim = 1 differ");
  {
    const std::vector<uint8_t> before = dst.bytes();
    try {
      shard_gather(src.view(), 5, {{0, 2}}, dst.view());
      ADD_FAILURE() << "dim 5: accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dim = 5 outside [0, ndim = 2)"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(dst.bytes(), before);
  }
  // A dst whose elements share memory (stride 0: only the last write was kept), and a dst over
  // src (a shifted copy read what it had just written): refused, naming both views.
  TensorView broadcast = dst.view();
  broadcast.stride[1] = 0;
  refused(src.view(), {{0, 2}}, broadcast, "dst (");
  refused(src.view(), {{0, 2}}, broadcast, "an output's elements must not share memory");
  TensorView over_src = dst.view();
  over_src.data = static_cast<float*>(src.view().data) + 1;
  over_src.stride[0] = 4;
  refused(src.view(), {{0, 2}}, over_src, "dst (");
  refused(src.view(), {{0, 2}}, over_src, "overlaps src");
  // Interleaved inside a row (src the even columns of a buffer, dst the odd ones): no byte is
  // shared, but each row counts as its span; the message said the rows "share bytes".
  {
    std::vector<float> buf(16, 1.0f);
    const TensorView even = TensorView::strided(buf.data(), DType::kF32, {2, 4}, {8, 2});
    const TensorView odd = TensorView::strided(buf.data() + 1, DType::kF32, {2, 2}, {8, 2});
    refused(even, {{1, 2}}, odd,
            "index 0 of dst lies within the byte span of index 0 of src (each index of the first "
            "dimension counts as its whole span)");
  }
  // A copy of no element builds nothing: a zero-extent dst beside a 2^44-column range (its column
  // map asked for 2^47 bytes before).
  {
    const int64_t big = int64_t{1} << 44;
    float cell[2] = {0.0f, 0.0f};
    const TensorView zs = TensorView::strided(&cell[0], DType::kF32, {0, big}, {0, 0});
    const TensorView zd = TensorView::strided(&cell[1], DType::kF32, {0, big}, {0, 0});
    EXPECT_NO_THROW(shard_gather(zs, 1, {ColumnRange{0, big}}, zd));
  }
  // Each refusal names the view and its value: "src and dst must not be empty", "src and dst
  // dtypes differ" and "must be host memory" said neither which nor what, and a dtype that is
  // none of DType's was copied as 4-byte elements.
  TensorView null_dst = dst.view();
  null_dst.data = nullptr;
  refused(src.view(), {{0, 2}}, null_dst, "dst (");
  refused(src.view(), {{0, 2}}, null_dst, ") is empty");
  TensorView bf16_dst = dst.view();
  bf16_dst.dtype = DType::kBF16;
  refused(src.view(), {{0, 2}}, bf16_dst, "src.dtype = f32 and dst.dtype = bf16 differ");
  TensorView cuda_src = src.view();
  cuda_src.device = Device::kCuda;
  refused(cuda_src, {{0, 2}}, dst.view(), "src.device = cuda: src and dst must be host memory");
  TensorView odd_dst = dst.view();
  odd_dst.device = static_cast<Device>(9);
  refused(src.view(), {{0, 2}}, odd_dst, "dst.device = 9 (not a device)");
  TensorView s7 = src.view(), d7 = dst.view();
  s7.dtype = d7.dtype = static_cast<DType>(7);
  refused(s7, {{0, 2}}, d7, "src.dtype = 7 (not a DType)");
  // The good call still works: columns 1 and 2 of each row.
  shard_gather(src.view(), 1, {{1, 2}}, dst.view());
  EXPECT_EQ(dst.get(0), 2.0f);
  EXPECT_EQ(dst.get(1), 3.0f);
  EXPECT_EQ(dst.get(2), 6.0f);
  EXPECT_EQ(dst.get(3), 7.0f);
}

}  // namespace
}  // namespace specstate::test
