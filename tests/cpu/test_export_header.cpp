// The slot state header of export_slot / import_slot (include/specstate/pool.h, docs/lifecycle.md
// "The export format"), for both layer kinds and both strategies:
//   - an export buffer is the 64-byte header (magic, version, kind, layer count, dtypes, shape
//     fields, state bytes, checksum) and then the state; slot_state_bytes() counts both;
//   - a buffer of another config is rejected by import even when it has the same size (other
//     dtypes, shape fields, kind, layer count, activation dtype), naming what differs, and so is
//     a file of another activation dtype;
//   - a buffer without a header (garbage, an export of the old layout) or with a truncated,
//     corrupt or other-version header is rejected;
// each rejection changing nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/expect.h"
#include "common/pool_rounds.h"

namespace specstate::test {
namespace {

constexpr int64_t kHeader = StatePool::kSlotStateHeaderBytes;

uint64_t le(const std::vector<uint8_t>& b, int64_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{b[static_cast<std::size_t>(at + i)]} << (8 * i);
  return v;
}

void put_le(std::vector<uint8_t>& b, int64_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b[static_cast<std::size_t>(at + i)] = uint8_t(v >> (8 * i));
}

// The header's checksum (FNV-1a 64 of bytes [0, 56)), stored again after an edit.
void reseal(std::vector<uint8_t>& b) {
  uint64_t h = 14695981039346656037ull;
  for (int i = 0; i < 56; ++i) h = (h ^ b[static_cast<std::size_t>(i)]) * 1099511628211ull;
  put_le(b, 56, h, 8);
}

// An export image as the i32 view import_slot takes.
struct Image {
  std::vector<int32_t> words;
  explicit Image(const std::vector<uint8_t>& bytes) : words((bytes.size() + 3) / 4, 0) {
    std::memcpy(words.data(), bytes.data(), bytes.size());
  }
  TensorView view() {
    return TensorView::contiguous(words.data(), DType::kI32, {static_cast<int64_t>(words.size())});
  }
};

struct HeaderCase {
  const char* name;
  const char* preset;
  Strategy strategy;
};

void PrintTo(const HeaderCase& c, std::ostream* out) { *out << c.name; }

const std::vector<HeaderCase>& cases() {
  static const std::vector<HeaderCase> all = {
      {"gdn_f32_snapshot", "small_f32", Strategy::kSnapshot},
      {"gdn_bf16_replay", "small_bf16", Strategy::kReplay},
      {"m2_f32_replay", "m2_small_f32", Strategy::kReplay},
      {"m2_bf16_snapshot", "m2_small_bf16", Strategy::kSnapshot},
      {"kda_f32_replay", "kda_small_f32", Strategy::kReplay},
      {"kda_bf16_snapshot", "kda_small_bf16", Strategy::kSnapshot},
  };
  return all;
}

constexpr int kLayers = 3;

class ExportHeader : public ::testing::TestWithParam<HeaderCase> {};

TEST_P(ExportHeader, BufferIsTheHeaderThenTheState) {
  const HeaderCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1741);
    StatePool p = r.pool(c.strategy);
    const SlotHandle h = p.acquire();
    r.prefill(p, h, r.inputs(4));
    r.round(p, round_batch(false, {h}), round_accept(false, {2}));  // replay: pending
    const ModelConfig& m = p.config();
    const int64_t state =
        int64_t{kLayers} * (m.conv_state_elems() * int64_t(dtype_size(m.conv_state_dtype())) +
                            m.ssm_state_elems() * int64_t(dtype_size(m.ssm_state_dtype())));
    EXPECT_EQ(p.slot_state_bytes(), kHeader + state);
    const std::vector<uint8_t> image = export_image(p, h);
    ASSERT_EQ(static_cast<int64_t>(image.size()), kHeader + state);
    EXPECT_EQ(std::string(image.begin(), image.begin() + 8), "specslot");
    EXPECT_EQ(le(image, 8, 4), 1u) << "version";
    EXPECT_EQ(le(image, 12, 4), static_cast<uint64_t>(m.kind));
    EXPECT_EQ(le(image, 16, 4), static_cast<uint64_t>(kLayers));
    EXPECT_EQ(image[20], static_cast<uint8_t>(m.act_dtype()));
    EXPECT_EQ(image[21], static_cast<uint8_t>(m.conv_state_dtype()));
    EXPECT_EQ(image[22], static_cast<uint8_t>(m.ssm_state_dtype()));
    const bool m2 = m.kind == LayerKind::kMamba2;
    // KDA writes GDN's five shape fields (its own kind field tells them apart).
    const bool kda = m.kind == LayerKind::kKda;
    const GdnConfig gdn_like = [&] {
      if (!kda) return m.gdn;
      GdnConfig g;
      g.num_k_heads = m.kda_layer.num_k_heads;
      g.num_v_heads = m.kda_layer.num_v_heads;
      g.head_k_dim = m.kda_layer.head_k_dim;
      g.head_v_dim = m.kda_layer.head_v_dim;
      return g;
    }();
    if (kda) EXPECT_EQ(le(image, 12, 4), 2u) << "LayerKind::kKda";
    const int64_t fields[5] = {m2 ? m.mamba.num_heads : gdn_like.num_k_heads,
                               m2 ? m.mamba.head_dim : gdn_like.num_v_heads,
                               m2 ? m.mamba.d_state : gdn_like.head_k_dim,
                               m2 ? m.mamba.n_groups : gdn_like.head_v_dim, m.conv_width()};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(le(image, 24 + 4 * i, 4), uint64_t(fields[i])) << i;
    EXPECT_EQ(le(image, 48, 8), static_cast<uint64_t>(state));
    std::vector<uint8_t> resealed = image;
    reseal(resealed);
    EXPECT_EQ(resealed, image) << "checksum";
    // The state after the header: layer by layer, conv window then SSM state, as the views.
    std::vector<uint8_t> views;
    for (int l = 0; l < kLayers; ++l) {
      for (const TensorView& v : {p.conv_state(l, h), p.ssm_state(l, h)}) {
        const auto b = view_bytes(v);
        views.insert(views.end(), b.begin(), b.end());
      }
    }
    EXPECT_EQ(std::vector<uint8_t>(image.begin() + kHeader, image.end()), views);
    // Every pool of the same config writes the same header, whatever its strategy.
    StatePool q =
        r.pool(c.strategy == Strategy::kSnapshot ? Strategy::kReplay : Strategy::kSnapshot);
    const std::vector<uint8_t> other = export_image(q, q.acquire());
    EXPECT_TRUE(std::equal(image.begin(), image.begin() + kHeader, other.begin()));
  });
}

TEST_P(ExportHeader, GarbageTruncatedAndOtherVersionHeadersAreRejected) {
  const HeaderCase& c = GetParam();
  for_kind(c.preset, [&](auto kind, const auto& layer) {
    using Kind = decltype(kind);
    PoolRounds<Kind> r(layer, kLayers, 1742);
    StatePool p = r.pool(c.strategy);
    const SlotHandle src = p.acquire(), dst = p.acquire();
    r.prefill(p, src, r.inputs(4));
    r.prefill(p, dst, r.inputs(2));
    r.round(p, round_batch(false, {dst}), round_accept(false, {3}));  // replay: pending
    const std::vector<uint8_t> good = export_image(p, src);
    const std::vector<uint8_t> before = exported(p, dst);
    auto rejected = [&](const std::string& what, std::vector<uint8_t> bytes,
                        const std::vector<std::string>& words) {
      SCOPED_TRACE(what);
      Image image(bytes);
      std::vector<std::string> all = {"StatePool::import_slot", "src ("};
      all.insert(all.end(), words.begin(), words.end());
      expect_rejected([&] { p.import_slot(dst, image.view()); }, Status::kInvalidArgument, all);
      EXPECT_EQ(exported(p, dst), before) << "a rejected import changed the slot";
    };
    rejected("zeros", std::vector<uint8_t>(good.size(), 0),
             {"holds no slot state header", "00 00 00 00 00 00 00 00", "\"specslot\""});
    {  // the layout before the header: the state at byte 0
      std::vector<uint8_t> old(good.begin() + kHeader, good.end());
      old.resize(good.size(), 0);
      rejected("old layout", old, {"holds no slot state header"});
    }
    {  // a header cut short: its first 20 bytes, zeros after
      std::vector<uint8_t> cut = good;
      std::fill(cut.begin() + 20, cut.begin() + kHeader, 0);
      rejected("truncated", cut, {"truncated or corrupt slot state header"});
    }
    {  // one bit of the layer count flipped
      std::vector<uint8_t> flipped = good;
      flipped[16] ^= 1;
      rejected("corrupt", flipped, {"truncated or corrupt slot state header"});
    }
    {  // a later format
      std::vector<uint8_t> later = good;
      put_le(later, 8, 2, 4);
      reseal(later);
      rejected("version 2", later, {"header version 2", "reads version 1"});
    }
    {  // a sealed header whose element-order byte is none: named with its value (the message
       // was a checksum mismatch quoting two equal checksums)
      std::vector<uint8_t> order = good;
      order[23] = 4;
      reseal(order);
      rejected("element orders", order, {"byte 23 (the element orders) = 4 is none (0..3)"});
    }
    {  // a sealed header with a reserved byte set
      std::vector<uint8_t> reserved = good;
      reserved[44] = 1;
      reseal(reserved);
      rejected("reserved", reserved, {"reserved bytes 44..47 = 01 00 00 00"});
    }
    {  // a consistent header that claims other state bytes
      std::vector<uint8_t> longer = good;
      put_le(longer, 48, le(good, 48, 8) + 4, 8);
      reseal(longer);
      rejected("state bytes", longer,
               {"state bytes = " + std::to_string(le(good, 48, 8) + 4),
                "this pool has " + std::to_string(le(good, 48, 8))});
    }
    // The good image still imports.
    Image image(good);
    p.import_slot(dst, image.view());
    EXPECT_EQ(exported(p, dst), exported(p, src));
  });
}

INSTANTIATE_TEST_SUITE_P(Cpu, ExportHeader, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<HeaderCase>& info) {
                           return std::string(info.param.name);
                         });

// Pairs of configs whose slot states have the same size, and what import names of the first
// when the second imports its export.
struct ConfigPair {
  const char* name;
  ModelConfig from, into;
  std::vector<std::string> words;
};

std::vector<ConfigPair> same_size_pairs() {
  std::vector<ConfigPair> out;
  {  // conv f32 + SSM bf16 against conv bf16 + SSM f32, with conv elements = SSM elements
    GdnConfig a = gdn_preset("small_f32"), b = gdn_preset("small_f32");
    a.conv_width = b.conv_width = 5;  // conv_dim 64 x 4 = HV x V x K = 256
    a.ssm_state_dtype = DType::kBF16;
    b.conv_state_dtype = DType::kBF16;
    out.push_back({"gdn_dtypes",
                   ModelConfig::gated_delta_net(2, a),
                   ModelConfig::gated_delta_net(2, b),
                   {"was exported from", "conv_state_dtype = f32, this pool has bf16",
                    "ssm_state_dtype = bf16, this pool has f32"}});
  }
  {  // K and V exchanged: conv_dim 2 H K + HV V and HV V K stay
    GdnConfig a = gdn_preset("small_f32"), b = gdn_preset("small_f32");
    a.head_k_dim = 8;
    a.head_v_dim = 16;
    b.head_k_dim = 16;
    b.head_v_dim = 8;
    out.push_back({"gdn_head_dims",
                   ModelConfig::gated_delta_net(2, a),
                   ModelConfig::gated_delta_net(2, b),
                   {"head_k_dim = 8, this pool has 16", "head_v_dim = 16, this pool has 8"}});
  }
  {  // nheads and P exchanged: nheads P, G N stay
    Mamba2Config a = mamba2_preset("m2_small_bf16"), b = mamba2_preset("m2_small_bf16");
    b.num_heads = a.head_dim;
    b.head_dim = a.num_heads;
    out.push_back({"m2_heads",
                   ModelConfig::mamba2(2, a),
                   ModelConfig::mamba2(2, b),
                   {"num_heads = " + std::to_string(a.num_heads) + ", this pool has " +
                        std::to_string(b.num_heads),
                    "head_dim = " + std::to_string(a.head_dim) + ", this pool has " +
                        std::to_string(b.head_dim)}});
  }
  {  // a GDN layer and a Mamba2 layer of the same sizes
    out.push_back({"kind",
                   ModelConfig::gated_delta_net(2, gdn_preset("small_f32")),
                   ModelConfig::mamba2(2, mamba2_preset("m2_small_f32")),
                   {"kind = gated_delta_net, this pool has mamba2"}});
  }
  {  // a GDN layer and a KDA layer of the same shape fields and bytes
    const GdnConfig g = gdn_preset("small_f32");
    const KdaConfig k = kda_preset("kda_small_f32");
    EXPECT_EQ(k.conv_dim(), g.conv_dim());
    EXPECT_EQ(k.ssm_state_elems(), g.ssm_state_elems());
    out.push_back({"kda_kind",
                   ModelConfig::kda(2, k),
                   ModelConfig::gated_delta_net(2, g),
                   {"kind = kda, this pool has gated_delta_net"}});
  }
  {  // two layers of W = 4 against one of W = 11
    GdnConfig b = gdn_preset("small_f32");
    b.conv_width = 11;  // 64 x 10 + 256 = 2 x (64 x 3 + 256)
    out.push_back({"layers",
                   ModelConfig::gated_delta_net(2, gdn_preset("small_f32")),
                   ModelConfig::gated_delta_net(1, b),
                   {"num_layers = 2, this pool has 1", "conv_width = 4, this pool has 11"}});
  }
  {  // only the activation dtype differs
    GdnConfig b = gdn_preset("small_f32");
    b.act_dtype = DType::kBF16;
    out.push_back({"act_dtype",
                   ModelConfig::gated_delta_net(2, gdn_preset("small_f32")),
                   ModelConfig::gated_delta_net(2, b),
                   {"act_dtype = f32, this pool has bf16"}});
  }
  return out;
}

PoolOptions options(Strategy s) {
  PoolOptions o;
  o.num_slots = 3;
  o.max_rows = 2;
  o.max_window = 4;
  o.strategy = s;
  return o;
}

TEST(ExportHeaderConfig, ABufferOfAnotherConfigOfTheSameSizeIsRejected) {
  for (const ConfigPair& pair : same_size_pairs()) {
    for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
      SCOPED_TRACE(std::string(pair.name) + (s == Strategy::kReplay ? " replay" : " snapshot"));
      StatePool from(pair.from, options(s)), into(pair.into, options(s));
      ASSERT_EQ(from.slot_state_bytes(), into.slot_state_bytes()) << "not a same-size pair";
      const SlotHandle a = from.acquire(), b = into.acquire();
      std::vector<uint8_t> filled(static_cast<std::size_t>(into.slot_state_bytes()));
      for (std::size_t i = 0; i < filled.size(); ++i) filled[i] = uint8_t(i * 7 + 1);
      Image self(export_image(into, b));  // b's own header, recognisable state bytes
      std::memcpy(reinterpret_cast<uint8_t*>(self.words.data()) + kHeader, filled.data() + kHeader,
                  filled.size() - kHeader);
      into.import_slot(b, self.view());
      const std::vector<uint8_t> before = exported(into, b);
      Image foreign(export_image(from, a));
      std::vector<std::string> words = {"StatePool::import_slot", "src ("};
      words.insert(words.end(), pair.words.begin(), pair.words.end());
      expect_rejected([&] { into.import_slot(b, foreign.view()); }, Status::kInvalidArgument,
                      words);
      EXPECT_EQ(exported(into, b), before) << "a rejected import changed the slot";
    }
  }
}

TEST(ExportHeaderConfig, AFileOfAnotherActivationDtypeIsRejected) {
  const std::string path = ::testing::TempDir() + "specstate_export_header_act.safetensors";
  for (const ConfigPair& pair : same_size_pairs()) {
    SCOPED_TRACE(pair.name);
    StatePool from(pair.from, options(Strategy::kSnapshot));
    StatePool into(pair.into, options(Strategy::kReplay));
    const SlotHandle a = from.acquire(), b = into.acquire();
    from.export_slot(a, path);
    std::vector<std::string> words = {"StatePool::import_slot", path};
    if (std::string(pair.name) == "act_dtype") {
      words.push_back("metadata act_dtype = 'f32', the pool has 'bf16'");
    }
    expect_rejected([&] { into.import_slot(b, path); }, Status::kInvalidArgument, words);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace specstate::test
