// A random driver of the public StatePool API with a shadow oracle, shared by the API fuzz target
// (choices from the fuzzer's bytes) and the soak test (choices from a seeded std::mt19937_64).
//
// Two pools of one config: `pool`, the one under test, takes every call (acquire, release,
// prefill, decode, begin_verify/verify/commit or abort_round (uniform or variable windows),
// releases in the middle of a round,
// and invalid calls of each); `shadow` only ever prefills and decodes. The oracle (DESIGN.md
// sections 5.6 and 7):
//   - a rejected call throws specstate::Error and leaves both pools byte-identical;
//   - verify outputs of window token t equal the shadow's decode output of the same token;
//   - after every commit, every live slot of `pool` equals the shadow's slot bit for bit, where
//     the shadow has decoded exactly the accepted tokens (root .. accepted node) of each row;
//   - begin_verify over a verified round is rejected; after abort_round every slot is as before;
//   - a row released mid-round is padding: advancing it is rejected, the other rows commit.
// Uses only include/specstate (a user's view of the library). Any violation prints what differs
// and aborts, which libFuzzer and ctest both report.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::fuzz {

// Where the driver's choices come from.
class Source {
 public:
  virtual ~Source() = default;
  // A value in [0, n) (n >= 1).
  virtual uint32_t below(uint32_t n) = 0;
  virtual bool exhausted() const = 0;
  bool coin() { return below(2) == 1; }
};

class ByteSource final : public Source {
 public:
  ByteSource(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  uint32_t below(uint32_t n) override {
    if (n <= 1) return 0;
    uint32_t v = 0;
    for (int i = 0; i < (n > 256 ? 2 : 1); ++i) v = (v << 8) | (at_ < size_ ? data_[at_++] : 0);
    return v % n;
  }
  bool exhausted() const override { return at_ >= size_; }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

class RngSource final : public Source {
 public:
  explicit RngSource(uint64_t seed) : rng_(seed) {}
  uint32_t below(uint32_t n) override { return n <= 1 ? 0 : static_cast<uint32_t>(rng_() % n); }
  bool exhausted() const override { return false; }

 private:
  std::mt19937_64 rng_;
};

[[noreturn]] inline void violation(const std::string& what) {
  std::fprintf(stderr, "pool_driver: ORACLE VIOLATION: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Host bytes viewed in one dtype, row-major.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    bytes.assign(static_cast<std::size_t>(numel()) * dtype_size(dtype), 0);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    return n;
  }
  void set(int64_t i, float v) {
    if (dtype == DType::kBF16) {
      const uint16_t b = bf16_from_float(v);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  }
  TensorView view() const {
    TensorView v;
    v.data = const_cast<uint8_t*>(bytes.data());
    v.dtype = dtype;
    v.ndim = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.shape[i] = shape[i];
      v.stride[i] = stride;
      stride *= shape[i];
    }
    return v;
  }
  // Rows [begin, begin + count) of the leading dimension.
  TensorView rows(int64_t begin, int64_t count) const {
    TensorView v = view();
    v.data = const_cast<uint8_t*>(bytes.data()) + begin * v.stride[0] * dtype_size(dtype);
    v.shape[0] = count;
    return v;
  }
  std::size_t row_bytes() const {
    return bytes.size() / static_cast<std::size_t>(shape.empty() ? 1 : shape[0]);
  }
};

struct Layer {
  HostTensor conv_weight, conv_bias, A_log, dt_bias;
  GdnWeights view() const {
    return {conv_weight.view(), conv_bias.bytes.empty() ? TensorView{} : conv_bias.view(),
            A_log.view(), dt_bias.view()};
  }
};

struct Tokens {  // n tokens of one layer
  HostTensor qkv, a, b;
  GdnInputs view() const { return {qkv.view(), a.view(), b.view()}; }
  GdnInputs rows(int64_t begin, int64_t n) const {
    return {qkv.rows(begin, n), a.rows(begin, n), b.rows(begin, n)};
  }
};

struct Outs {
  HostTensor conv_out, core_out;
  GdnOutputs view() const { return {conv_out.view(), core_out.view()}; }
};

struct DriverStats {
  int64_t ops = 0, rounds = 0, commits = 0, rejected = 0, tree_rounds = 0, padded_rows = 0;
  int64_t acquired = 0, released = 0, compared_slots = 0;
  int64_t aborted = 0, released_mid_round = 0;  // rounds dropped by abort_round, rows released
  int64_t varlen_rounds = 0;                    // rounds with per-row window lengths
};

class PoolDriver {
 public:
  // A small random GDN config and pool shape drawn from `src`; weights and inputs from a seeded
  // generator (inputs shaped like real ones: A = exp(A_log) in [1, 16], dt in [1e-3, 1e-1]).
  explicit PoolDriver(Source& src) : src_(src) {
    GdnConfig g;
    g.num_k_heads = 1 + static_cast<int>(src.below(2));
    g.num_v_heads = g.num_k_heads * (1 + static_cast<int>(src.below(2)));
    g.head_k_dim = 2 << src.below(3);
    g.head_v_dim = 2 << src.below(3);
    g.conv_width = 2 + static_cast<int>(src.below(3));
    g.conv_bias = src.coin();
    g.act_dtype = src.coin() ? DType::kBF16 : DType::kF32;
    g.conv_state_dtype = src.coin() ? DType::kBF16 : DType::kF32;
    g.ssm_state_dtype = DType::kF32;
    config_ = ModelConfig::gated_delta_net(1 + static_cast<int>(src.below(2)), g);
    options_.num_slots = 1 + static_cast<int>(src.below(4));
    options_.max_rows = 1 + static_cast<int>(src.below(4));
    options_.max_window = 1 + static_cast<int>(src.below(5));
    rng_.seed(src.below(1u << 16));
    // The pool under test runs either strategy; the shadow only decodes (the strategy does not
    // matter there). Under replay every comparison goes through views, which materialize.
    PoolOptions tested = options_;
    tested.strategy = src.coin() ? Strategy::kReplay : Strategy::kSnapshot;
    pool_ = std::make_unique<StatePool>(config_, tested);
    shadow_ = std::make_unique<StatePool>(config_, options_);
    const int D = g.conv_dim(), HV = g.num_v_heads;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    for (int l = 0; l < config_.num_layers; ++l) {
      Layer L;
      const DType w = src.coin() ? DType::kBF16 : DType::kF32;  // weights: any float dtype
      L.conv_weight = HostTensor(w, {D, g.conv_width});
      for (int64_t i = 0; i < L.conv_weight.numel(); ++i) L.conv_weight.set(i, 0.5f * normal(rng_));
      if (g.conv_bias) {
        L.conv_bias = HostTensor(w, {D});
        for (int64_t i = 0; i < D; ++i) L.conv_bias.set(i, 0.1f * normal(rng_));
      }
      L.A_log = HostTensor(w, {HV});
      L.dt_bias = HostTensor(w, {HV});
      for (int h = 0; h < HV; ++h) {
        L.A_log.set(h, static_cast<float>(std::log(1.0 + 15.0 * uni(rng_))));
        const double dt = std::exp(std::log(1e-3) + uni(rng_) * (std::log(1e-1) - std::log(1e-3)));
        L.dt_bias.set(h, static_cast<float>(std::log(std::expm1(dt))));
      }
      layers_.push_back(std::move(L));
    }
  }

  const DriverStats& stats() const { return stats_; }

  // One random operation. Returns false when the source is exhausted.
  bool step() {
    if (src_.exhausted()) return false;
    ++stats_.ops;
    switch (src_.below(10)) {
      case 0:
      case 1:
        acquire();
        break;
      case 2:
        release();
        break;
      case 3:
        prefill();
        break;
      case 4:
        decode();
        break;
      case 5:
        invalid_outside_round();
        break;
      default:
        round();
        break;
    }
    return true;
  }

  // One speculative round over random live requests, padding included (the soak test's unit).
  void round() {
    if (live_.empty()) {
      acquire();
      if (live_.empty()) return;
    }
    const GdnConfig& g = config_.gdn;
    const int T = 1 + static_cast<int>(src_.below(static_cast<uint32_t>(options_.max_window)));
    const int B = 1 + static_cast<int>(src_.below(static_cast<uint32_t>(options_.max_rows)));
    // Rows: distinct live requests, some padding.
    std::vector<int> order(live_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[src_.below(static_cast<uint32_t>(i))]);
    }
    std::vector<int> row_req(B, -1);
    std::size_t next = 0;
    for (int r = 0; r < B; ++r) {
      if (next < order.size() && src_.below(4) != 0) row_req[r] = order[next++];
    }
    VerifyBatch batch;
    batch.window = T;
    for (int r = 0; r < B; ++r) {
      batch.rows.push_back(row_req[r] < 0 ? SlotHandle::padding() : live_[row_req[r]].pool);
      stats_.padded_rows += row_req[r] < 0;
    }
    const bool tree = T > 1 && src_.coin();
    std::vector<int32_t> parents(T);
    for (int t = 0; t < T; ++t) {
      parents[t] = t == 0 ? -1 : (tree ? static_cast<int32_t>(src_.below(t)) : t - 1);
    }
    if (tree) batch.parents = parents;
    stats_.tree_rounds += tree;
    // Variable windows (DESIGN.md section 2): each row its own length 0..T, packed with no filler
    // (a tree then given per row at r * T, the shared tree's prefix used).
    const bool varlen = src_.coin();
    std::vector<int> len(B, T), tok0(B);
    if (varlen) {
      for (int r = 0; r < B; ++r) {
        len[r] = row_req[r] < 0 ? 0 : static_cast<int>(src_.below(static_cast<uint32_t>(T + 1)));
        batch.lengths.push_back(len[r]);
      }
      if (tree) {
        batch.parents.clear();
        for (int r = 0; r < B; ++r)
          batch.parents.insert(batch.parents.end(), parents.begin(), parents.end());
      }
      ++stats_.varlen_rounds;
    }
    int n = 0;
    for (int r = 0; r < B; ++r) {
      tok0[r] = varlen ? n : r * T;
      n = varlen ? n + len[r] : (r + 1) * T;
    }

    const auto before = committed(*pool_);
    pool_->begin_verify(batch);
    std::vector<Tokens> inputs;
    std::vector<Outs> outs;
    for (int l = 0; l < config_.num_layers; ++l) {
      inputs.push_back(random_tokens(n));
      outs.push_back(make_outs(n));
      pool_->verify(l, layers_[l].view(), inputs[l].view(), outs[l].view());
    }
    if (committed(*pool_) != before) violation("verify changed the committed state");

    // DESIGN.md section 5.6: a verified round is committed or aborted, never replaced.
    if (src_.below(8) == 0) {
      expect_rejected("begin_verify over a verified round", [&] { pool_->begin_verify(batch); });
    }
    if (src_.below(16) == 0) {
      pool_->abort_round();
      ++stats_.rounds;
      ++stats_.aborted;
      compare_all("after abort_round");
      return;
    }
    // A request that leaves mid-round: its row becomes padding, the others still commit.
    int released_req = -1;
    if (src_.below(8) == 0) {
      const int r = static_cast<int>(src_.below(static_cast<uint32_t>(B)));
      if (row_req[r] >= 0) {
        released_req = row_req[r];
        row_req[r] = -1;
        pool_->release(live_[released_req].pool);
        shadow_->release(live_[released_req].shadow);
        std::vector<int32_t> bad(B, tree ? -1 : 0);
        bad[r] = tree ? 0 : 1;
        expect_rejected("commit advancing a released row", [&] { pool_->commit(bad); });
        ++stats_.released_mid_round;
      }
    }

    // Invalid commits first: each rejected, nothing changed, the round still open.
    if (src_.coin()) {
      std::vector<int32_t> bad(B, tree ? -1 : 0);
      const int r = static_cast<int>(src_.below(static_cast<uint32_t>(B)));
      switch (src_.below(5)) {
        case 0:
          bad[r] = tree ? T : T + 1;
          break;
        case 4:
          // Past the row's own window (variable windows), within the round's: a > T_row.
          if (len[r] < T) {
            bad[r] = tree ? len[r] : len[r] + 1;
          } else {
            bad.pop_back();
          }
          break;
        case 1:
          bad[r] = tree ? -2 : -1;
          break;
        case 2:
          bad.push_back(0);
          break;
        default:
          bad[r] = src_.coin() ? std::numeric_limits<int32_t>::min()
                               : std::numeric_limits<int32_t>::max();
          break;
      }
      expect_rejected("commit with an invalid accepted vector", [&] { pool_->commit(bad); });
      // A padding row that claims to advance.
      for (int p = 0; p < B; ++p) {
        if (row_req[p] >= 0) continue;
        std::vector<int32_t> pad(B, tree ? -1 : 0);
        pad[p] = tree ? 0 : 1;
        expect_rejected("commit advancing a padding row", [&] { pool_->commit(pad); });
        break;
      }
    }

    // The accepted node of every row (tree: any node; chain: a length in [0, T]).
    std::vector<int32_t> accepted(B), last(B, -1);
    for (int r = 0; r < B; ++r) {
      if (row_req[r] < 0 || len[r] == 0 || src_.below(5) == 0) {
        accepted[r] = tree ? -1 : 0;
        continue;
      }
      last[r] = static_cast<int32_t>(src_.below(static_cast<uint32_t>(len[r])));
      accepted[r] = tree ? last[r] : last[r] + 1;
    }
    if (src_.coin()) {
      pool_->commit(accepted);
    } else {
      // Through a strided host view (stride 3): a commit that ignored the stride would read
      // the filler values, which are all out of range.
      std::vector<int32_t> spaced(static_cast<std::size_t>(3 * B), 1 << 20);
      for (int r = 0; r < B; ++r) spaced[3 * r] = accepted[r];
      pool_->commit(TensorView::strided(spaced.data(), DType::kI32, {B}, {3}));
    }
    ++stats_.rounds;
    ++stats_.commits;

    // The shadow decodes the accepted path of every row; verify's outputs of those tokens must
    // equal the shadow's.
    for (int r = 0; r < B; ++r) {
      if (last[r] < 0) continue;
      std::vector<int> path;
      for (int t = last[r]; t >= 0; t = parents[t]) path.insert(path.begin(), t);
      const SlotHandle s = live_[row_req[r]].shadow;
      for (int l = 0; l < config_.num_layers; ++l) {
        Tokens gathered = gather(inputs[l], tok0[r], path);
        Outs o = make_outs(static_cast<int>(path.size()));
        shadow_->prefill(l, s, layers_[l].view(), gathered.view(), o.view());
        for (std::size_t i = 0; i < path.size(); ++i) {
          const std::size_t tok = static_cast<std::size_t>(tok0[r] + path[i]);
          same_row(outs[l].core_out, tok, o.core_out, i, "core_out", l, r, path[i]);
          same_row(outs[l].conv_out, tok, o.conv_out, i, "conv_out", l, r, path[i]);
        }
      }
    }
    if (released_req >= 0) {
      stale_.push_back(live_[released_req].pool);
      live_.erase(live_.begin() + released_req);
      ++stats_.released;
    }
    compare_all("after commit");
  }

  // Every live slot of the pool equals the shadow's (bit for bit).
  void compare_all(const char* when) {
    for (const Request& q : live_) {
      for (int l = 0; l < config_.num_layers; ++l) {
        if (slot_bytes(pool_->conv_state(l), pool_->slot_index(q.pool)) !=
                slot_bytes(shadow_->conv_state(l), shadow_->slot_index(q.shadow)) ||
            slot_bytes(pool_->ssm_state(l), pool_->slot_index(q.pool)) !=
                slot_bytes(shadow_->ssm_state(l), shadow_->slot_index(q.shadow))) {
          violation(std::string(when) + ": layer " + std::to_string(l) + " slot " +
                    std::to_string(pool_->slot_index(q.pool)) +
                    " differs from sequential decode of the accepted tokens");
        }
        ++stats_.compared_slots;
      }
    }
  }

 private:
  struct Request {
    SlotHandle pool, shadow;
  };

  void acquire() {
    if (pool_->free_slots() == 0) {
      expect_rejected("acquire on a full pool", [&] { pool_->acquire(); });
      return;
    }
    Request q{pool_->acquire(), shadow_->acquire()};
    live_.push_back(q);
    ++stats_.acquired;
  }

  void release() {
    if (live_.empty()) return;
    const std::size_t i = src_.below(static_cast<uint32_t>(live_.size()));
    pool_->release(live_[i].pool);
    shadow_->release(live_[i].shadow);
    stale_.push_back(live_[i].pool);
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.released;
  }

  void prefill() {
    if (live_.empty()) return;
    const Request& q = live_[src_.below(static_cast<uint32_t>(live_.size()))];
    const int n = 1 + static_cast<int>(src_.below(3));
    for (int l = 0; l < config_.num_layers; ++l) {
      const Tokens in = random_tokens(n);
      Outs a = make_outs(n), b = make_outs(n);
      pool_->prefill(l, q.pool, layers_[l].view(), in.view(), a.view());
      shadow_->prefill(l, q.shadow, layers_[l].view(), in.view(), b.view());
      if (a.core_out.bytes != b.core_out.bytes) violation("prefill outputs differ between pools");
    }
    compare_all("after prefill");
  }

  void decode() {
    if (live_.empty()) return;
    std::vector<SlotHandle> rows, shadow_rows;
    for (const Request& q : live_) {
      if (src_.coin()) {
        rows.push_back(q.pool);
        shadow_rows.push_back(q.shadow);
      } else if (src_.below(4) == 0) {
        rows.push_back(SlotHandle::padding());
        shadow_rows.push_back(SlotHandle::padding());
      }
    }
    if (rows.empty()) return;
    const int n = static_cast<int>(rows.size());
    for (int l = 0; l < config_.num_layers; ++l) {
      const Tokens in = random_tokens(n);
      Outs a = make_outs(n), b = make_outs(n);
      pool_->decode(l, rows, layers_[l].view(), in.view(), a.view());
      shadow_->decode(l, shadow_rows, layers_[l].view(), in.view(), b.view());
    }
    compare_all("after decode");
  }

  // Calls every one of which must be rejected and change nothing.
  void invalid_outside_round() {
    const GdnConfig& g = config_.gdn;
    const int L = config_.num_layers;
    const Tokens in = random_tokens(1);
    Outs out = make_outs(1);
    const GdnWeights w = layers_[0].view();
    const SlotHandle h = live_.empty() ? SlotHandle::padding() : live_[0].pool;
    switch (src_.below(12)) {
      case 0:
        expect_rejected("commit without a round", [&] { pool_->commit(std::vector<int32_t>{0}); });
        break;
      case 1:
        expect_rejected("verify without a round",
                        [&] { pool_->verify(0, w, in.view(), out.view()); });
        break;
      case 2:
        if (!stale_.empty()) {
          const SlotHandle s = stale_[src_.below(static_cast<uint32_t>(stale_.size()))];
          if (!pool_->is_live(s)) {
            expect_rejected("prefill of a released handle",
                            [&] { pool_->prefill(0, s, w, in.view(), out.view()); });
            expect_rejected("begin_verify with a released handle", [&] {
              pool_->begin_verify(VerifyBatch{{s}, 1, {}});
            });
            expect_rejected("release of a released handle", [&] { pool_->release(s); });
          }
        }
        break;
      case 3:
        if (!live_.empty() && options_.max_rows >= 2) {
          expect_rejected("begin_verify with a slot twice", [&] {
            pool_->begin_verify(VerifyBatch{{h, h}, 1, {}});
          });
        }
        break;
      case 4:
        if (!live_.empty()) {
          expect_rejected("begin_verify with a window beyond max_window", [&] {
            pool_->begin_verify(VerifyBatch{{h}, options_.max_window + 1, {}});
          });
          std::vector<int32_t> bad_parents = {0};
          expect_rejected("begin_verify with a root whose parent is not -1", [&] {
            pool_->begin_verify(VerifyBatch{{h}, 1, bad_parents});
          });
        }
        break;
      case 5:
        if (!live_.empty()) {
          expect_rejected("prefill of a layer out of range",
                          [&] { pool_->prefill(L, h, w, in.view(), out.view()); });
          expect_rejected("prefill of layer -1",
                          [&] { pool_->prefill(-1, h, w, in.view(), out.view()); });
        }
        break;
      case 6:
        if (!live_.empty()) {
          GdnInputs bad = in.view();
          bad.mixed_qkv.shape[1] += 1;
          expect_rejected("prefill with a wrong conv_dim",
                          [&] { pool_->prefill(0, h, w, bad, out.view()); });
        }
        break;
      case 7:
        if (!live_.empty()) {
          GdnInputs bad = in.view();
          bad.a.dtype = bad.a.dtype == DType::kF32 ? DType::kBF16 : DType::kF32;
          expect_rejected("prefill with a wrong dtype",
                          [&] { pool_->prefill(0, h, w, bad, out.view()); });
        }
        break;
      case 8:
        if (!live_.empty()) {
          GdnWeights bad = w;
          HostTensor bias(DType::kF32, {g.conv_dim()});
          if (g.conv_bias) {
            bad.conv_bias = TensorView{};  // missing where the config wants one
          } else {
            bad.conv_bias = bias.view();  // given where the config has none
          }
          expect_rejected("prefill with a conv bias that does not match the config",
                          [&] { pool_->prefill(0, h, bad, in.view(), out.view()); });
        }
        break;
      case 9:
        if (!live_.empty()) {
          GdnInputs bad = in.view();
          bad.mixed_qkv.ndim = 7 + static_cast<int>(src_.below(1000));
          expect_rejected("prefill with ndim > 6",
                          [&] { pool_->prefill(0, h, w, bad, out.view()); });
        }
        break;
      case 10:
        if (!live_.empty()) {
          GdnOutputs bad = out.view();
          bad.core_out.device = Device::kCuda;
          expect_rejected("prefill with an output on another device",
                          [&] { pool_->prefill(0, h, w, in.view(), bad); });
        }
        break;
      default: {
        SlotHandle foreign = h;
        foreign.pool_id += 1000;
        if (!live_.empty()) {
          expect_rejected("prefill of another pool's handle",
                          [&] { pool_->prefill(0, foreign, w, in.view(), out.view()); });
        }
        break;
      }
    }
  }

  template <typename Fn>
  void expect_rejected(const char* what, Fn&& fn) {
    const auto before = committed(*pool_);
    bool threw = false;
    try {
      fn();
    } catch (const Error&) {
      threw = true;
    }
    if (!threw) violation(std::string(what) + " was accepted");
    if (committed(*pool_) != before) violation(std::string(what) + " changed the committed state");
    ++stats_.rejected;
  }

  static std::vector<uint8_t> view_bytes(const TensorView& v) {
    const auto* p = static_cast<const uint8_t*>(v.data);
    return std::vector<uint8_t>(p, p + v.numel() * static_cast<int64_t>(dtype_size(v.dtype)));
  }
  std::vector<uint8_t> committed(const StatePool& p) const {
    std::vector<uint8_t> out;
    for (int l = 0; l < config_.num_layers; ++l) {
      for (const TensorView& v : {p.conv_state(l), p.ssm_state(l)}) {
        if (!v.is_contiguous()) violation("committed state view is not contiguous");
        const auto b = view_bytes(v);
        out.insert(out.end(), b.begin(), b.end());
      }
    }
    return out;
  }
  static std::vector<uint8_t> slot_bytes(const TensorView& v, int slot) {
    const int64_t per = v.numel() / v.shape[0];
    const auto* p = static_cast<const uint8_t*>(v.data) +
                    slot * v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
    return std::vector<uint8_t>(p, p + per * static_cast<int64_t>(dtype_size(v.dtype)));
  }

  Tokens random_tokens(int n) {
    const GdnConfig& g = config_.gdn;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tokens t{HostTensor(g.act_dtype, {n, g.conv_dim()}),
             HostTensor(g.act_dtype, {n, g.num_v_heads}),
             HostTensor(g.act_dtype, {n, g.num_v_heads})};
    for (int64_t i = 0; i < t.qkv.numel(); ++i) t.qkv.set(i, normal(rng_));
    for (int64_t i = 0; i < t.a.numel(); ++i) t.a.set(i, normal(rng_));
    for (int64_t i = 0; i < t.b.numel(); ++i) t.b.set(i, normal(rng_));
    return t;
  }
  Outs make_outs(int n) const {
    const GdnConfig& g = config_.gdn;
    return {HostTensor(g.act_dtype, {n, g.conv_dim()}),
            HostTensor(g.act_dtype, {n, g.num_v_heads, g.head_v_dim})};
  }
  static Tokens gather(const Tokens& all, int base, const std::vector<int>& path) {
    Tokens t{HostTensor(all.qkv.dtype, {static_cast<int64_t>(path.size()), all.qkv.shape[1]}),
             HostTensor(all.a.dtype, {static_cast<int64_t>(path.size()), all.a.shape[1]}),
             HostTensor(all.b.dtype, {static_cast<int64_t>(path.size()), all.b.shape[1]})};
    for (std::size_t i = 0; i < path.size(); ++i) {
      const std::size_t src = static_cast<std::size_t>(base + path[i]);
      for (auto [to, from] :
           {std::pair{&t.qkv, &all.qkv}, std::pair{&t.a, &all.a}, std::pair{&t.b, &all.b}}) {
        const std::size_t rb = from->row_bytes();
        std::memcpy(to->bytes.data() + i * rb, from->bytes.data() + src * rb, rb);
      }
    }
    return t;
  }
  static void same_row(const HostTensor& x, std::size_t xi, const HostTensor& y, std::size_t yi,
                       const char* name, int layer, int row, int token) {
    const std::size_t rb = x.row_bytes();
    if (std::memcmp(x.bytes.data() + xi * rb, y.bytes.data() + yi * rb, rb) != 0) {
      violation(std::string("verify ") + name + " of layer " + std::to_string(layer) + " row " +
                std::to_string(row) + " token " + std::to_string(token) +
                " differs from sequential decode");
    }
  }

  Source& src_;
  ModelConfig config_;
  PoolOptions options_;
  std::mt19937_64 rng_;
  std::unique_ptr<StatePool> pool_, shadow_;
  std::vector<Layer> layers_;
  std::vector<Request> live_;
  std::vector<SlotHandle> stale_;
  DriverStats stats_;
};

}  // namespace specstate::fuzz
