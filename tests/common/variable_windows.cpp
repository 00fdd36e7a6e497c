#include "common/variable_windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/kind_driver.h"
#include "common/layer_kinds.h"
#include "common/pool_rounds.h"

namespace specstate::test {
namespace {

std::vector<Buffer*> fields(TokenInputs& in) { return {&in.mixed_qkv, &in.a, &in.b}; }
std::vector<Buffer*> fields(Mamba2TokenInputs& in) { return {&in.xBC, &in.dt, &in.z}; }
std::vector<Buffer*> fields(KdaTokenInputs& in) { return {&in.mixed_qkv, &in.g, &in.b}; }

// Token rows `src_rows` of `src` copied, in order, into rows [0, n) of `dst` (same columns).
void copy_rows(const Buffer& src, const std::vector<int64_t>& src_rows, Buffer& dst) {
  if (src.numel() == 0) return;
  const std::size_t row =
      src.bytes().size() / static_cast<std::size_t>(std::max<int64_t>(src.shape()[0], 1));
  auto* out = static_cast<uint8_t*>(dst.data());
  for (std::size_t i = 0; i < src_rows.size(); ++i) {
    std::memcpy(out + i * row, src.bytes().data() + static_cast<std::size_t>(src_rows[i]) * row,
                row);
  }
}

// `base` (already shaped for the destination's token count) with its first rows replaced by
// `src_rows` of `src`: the packed tokens first, base's random values (filler) after.
template <typename HostInputs>
HostInputs with_rows(const HostInputs& src, const std::vector<int64_t>& src_rows, HostInputs base) {
  auto s = fields(const_cast<HostInputs&>(src));
  auto d = fields(base);
  for (std::size_t i = 0; i < s.size(); ++i) copy_rows(*s[i], src_rows, *d[i]);
  return base;
}

template <typename Kind>
void run_case(const EquivalenceCase& c, const typename Kind::Config& g,
              const VariableWindowsRun& how, Memory& mem, uint64_t seed) {
  using Outputs = typename Kind::Outputs;
  using HostInputs = typename Kind::HostInputs;
  KindDriver<Kind> d(g, mem, seed);
  std::mt19937_64& rng = d.rng;
  const int L = KindDriver<Kind>::kLayers;
  PoolOptions options = d.options(c.requests + 1, c.requests + 2, c.max_window);
  options.strategy = how.strategy;
  // The case's ring, fold rows and element order (EquivalenceCase), for both pools: both run the
  // strategy `how` says, and keep vLLM's order where the case gives it to that strategy's pool.
  options.replay_ring = c.ring;
  options.replay_fold_rows = c.fold_rows;
  if (c.vllm & (how.strategy == Strategy::kReplay ? kReplayVllm : kSnapshotVllm)) {
    options = vllm_layout_options(options, d.model.kind);
  }
  StatePool uniform(d.model, options), variable(d.model, options);
  const std::vector<typename Kind::Weights>& weights = d.weights;
  // Rows `rows_u` of the uniform pool's output equal rows [0, n) of the variable pool's, and
  // each output tensor's compared rows are not all zero (both pools' outputs start zeroed: a
  // tensor a call wrote nothing of in either would compare equal).
  auto same_rows = [&](const Outputs& u, const std::vector<int64_t>& rows_u, const Outputs& v,
                       const std::string& what) {
    const NamedViews x = Kind::tensors(u), y = Kind::tensors(v);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::vector<uint8_t> bu = mem.bytes(x[i].second), bv = mem.bytes(y[i].second);
      if (bu.empty()) continue;
      const std::size_t row = bu.size() / static_cast<std::size_t>(x[i].second.shape[0]);
      int64_t nonzero = 0;
      for (std::size_t k = 0; k < rows_u.size(); ++k) {
        const uint8_t* a = bu.data() + static_cast<std::size_t>(rows_u[k]) * row;
        ASSERT_EQ(0, std::memcmp(a, bv.data() + k * row, row))
            << what << ": " << x[i].first << " of packed token " << k << " differs";
        nonzero += std::count_if(a, a + row, [](uint8_t b) { return b != 0; });
      }
      if (!rows_u.empty()) {
        EXPECT_GT(nonzero, 0) << what << ": the compared " << x[i].first << " is all zero";
      }
    }
  };
  std::vector<SlotHandle> hu, hv;
  auto same_state = [&](const std::string& what) {
    for (std::size_t i = 0; i < hu.size(); ++i) {
      ASSERT_EQ(exported(uniform, hu[i]), exported(variable, hv[i]))
          << what << ": request " << i << " committed state differs";
    }
  };
  // Batched prefill (variable pool, one call per layer) against one prefill per request.
  auto prefill_all = [&](const std::vector<int>& requests) {
    std::vector<int32_t> lengths;
    std::vector<SlotHandle> rows;
    for (int i : requests) {
      lengths.push_back(rng() % 4 == 0 ? 0 : 1 + static_cast<int32_t>(rng() % 5));
      rows.push_back(hv[i]);
    }
    int64_t total = 0;
    for (int32_t n : lengths) total += n;
    if (total == 0) return;
    for (int l = 0; l < L; ++l) {
      const HostInputs host = random_inputs(g, total, rng);
      const Outputs ov = d.outputs(total);
      variable.prefill(l, rows, lengths, weights[l], d.put(host), ov);
      int64_t at = 0;
      for (std::size_t k = 0; k < requests.size(); ++k) {
        const int n = lengths[k];
        if (n == 0) continue;
        std::vector<int64_t> idx(n);
        for (int t = 0; t < n; ++t) idx[t] = at + t;
        const HostInputs one = with_rows(host, idx, random_inputs(g, n, rng));
        const Outputs ou = d.outputs(n);
        uniform.prefill(l, hu[requests[k]], weights[l], d.put(one), ou);
        // ou's rows [0, n) against ov's rows [at, at + n).
        const NamedViews x = Kind::tensors(ou), y = Kind::tensors(ov);
        for (std::size_t f = 0; f < x.size(); ++f) {
          const std::vector<uint8_t> bu = mem.bytes(x[f].second), bv = mem.bytes(y[f].second);
          const std::size_t row = bu.size() / static_cast<std::size_t>(n);
          ASSERT_EQ(0, std::memcmp(bu.data(), bv.data() + static_cast<std::size_t>(at) * row,
                                   static_cast<std::size_t>(n) * row))
              << "batched prefill, layer " << l << ", request " << requests[k] << ": " << x[f].first
              << " differs";
        }
        at += n;
      }
    }
  };

  std::vector<int> all;
  for (int i = 0; i < c.requests; ++i) {
    hu.push_back(uniform.acquire());
    hv.push_back(variable.acquire());
    all.push_back(i);
  }
  prefill_all(all);
  same_state("after the batched prefill");

  int short_rows = 0, zero_rows = 0, accepted_total = 0;
  for (int round = 0; round < c.rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    mem.clear();
    // A request leaves, another arrives in its slot and is prefilled with others.
    const int i = maybe_replace_request(rng, 5, c.requests, uniform, hu, variable, hv);
    if (i >= 0) {
      prefill_all(c.requests > 1 ? std::vector<int>{i, (i + 1) % c.requests} : std::vector<int>{i});
      if (::testing::Test::HasFatalFailure()) return;
    }
    const int T = 1 + static_cast<int>(rng() % c.max_window);
    // Rows: the requests in random order with padding rows in between.
    std::vector<int> row_request(all);
    std::shuffle(row_request.begin(), row_request.end(), rng);
    row_request.resize(1 + rng() % c.requests);
    if (rng() % 2) row_request.insert(row_request.begin() + rng() % row_request.size(), -1);
    const int B = static_cast<int>(row_request.size());
    std::vector<int32_t> lengths(B), offsets(B + 1, 0);
    for (int r = 0; r < B; ++r) {
      const int pick = static_cast<int>(rng() % 4);
      lengths[r] = row_request[r] < 0 ? 0
                   : pick == 0        ? T
                   : pick == 1        ? static_cast<int32_t>(rng() % (T + 1))
                                      : 1 + static_cast<int32_t>(rng() % T);
      // Every fifth round the first live row sits the round out; every other round it is
      // shorter than the window (the statistics below then hold for any seed).
      if (r == 0 || row_request[r - 1] < 0) {
        if (row_request[r] >= 0 && round % 5 == 1) lengths[r] = 0;
        if (row_request[r] >= 0 && round % 2 == 0 && T > 1)
          lengths[r] = std::min(lengths[r], T - 1);
      }
      offsets[r + 1] = offsets[r] + lengths[r];
      short_rows += row_request[r] >= 0 && lengths[r] < T;
      zero_rows += row_request[r] >= 0 && lengths[r] == 0;
    }
    const int64_t packed = offsets[B];
    VerifyBatch bu = request_batch(row_request, hu, T), bv = request_batch(row_request, hv, T);
    // (Packed parents of a round without tokens would be empty, i.e. a chain.)
    const bool padded_parents = how.device_cu_seqlens || packed == 0 || rng() % 2;
    if (c.tree) {
      for (int r = 0; r < B; ++r) {
        const std::vector<int32_t> p = random_tree(T, rng);
        bu.parents.insert(bu.parents.end(), p.begin(), p.end());
        if (padded_parents) {
          std::vector<int32_t> q = p;
          for (int t = lengths[r]; t < T && !how.device_cu_seqlens; ++t) q[t] = 1000 + t;  // unused
          bv.parents.insert(bv.parents.end(), q.begin(), q.end());
        } else {
          bv.parents.insert(bv.parents.end(), p.begin(), p.begin() + lengths[r]);
        }
      }
    }
    // The uniform pool's token of packed token k.
    std::vector<int64_t> real;
    for (int r = 0; r < B; ++r) {
      for (int t = 0; t < lengths[r]; ++t) real.push_back(int64_t{r} * T + t);
    }
    const int64_t v_tokens = how.device_cu_seqlens ? int64_t{B} * T : packed;
    if (how.device_cu_seqlens) {
      Buffer cu(DType::kI32, {B + 1});
      for (int r = 0; r <= B; ++r) cu.set(r, static_cast<float>(offsets[r]));
      bv.cu_seqlens = mem.put(cu);
    } else {
      bv.lengths = lengths;
    }
    uniform.begin_verify(bu);
    variable.begin_verify(bv);
    for (int l = 0; l < L; ++l) {
      const HostInputs host_u = random_inputs(g, int64_t{B} * T, rng);
      const HostInputs host_v = with_rows(host_u, real, random_inputs(g, v_tokens, rng));
      const Outputs ou = d.outputs(int64_t{B} * T), ov = d.outputs(v_tokens);
      uniform.verify(l, weights[l], d.put(host_u), ou);
      variable.verify(l, weights[l], d.put(host_v), ov);
      same_rows(ou, real, ov, "verify of layer " + std::to_string(l));
      if (::testing::Test::HasFatalFailure()) return;
    }
    std::vector<int32_t> accepted(B);
    for (int r = 0; r < B; ++r) {
      const int n = lengths[r];
      accepted[r] = c.tree ? static_cast<int32_t>(rng() % (n + 1)) - 1
                           : static_cast<int32_t>(rng() % (n + 1));
      accepted_total += accepted[r] > (c.tree ? -1 : 0);
    }
    if (commit_both(mem, round, accepted, uniform, variable)) {
      ASSERT_EQ(variable.last_commit_status(), Status::kSuccess);
    }
    same_state("after commit");
    if (::testing::Test::HasFatalFailure()) return;
  }
  expect_nonzero_ssm_state(mem, variable, L);
  EXPECT_GT(short_rows, c.rounds / 3) << "too few rows had a window shorter than the round's";
  EXPECT_GT(zero_rows, 0) << "no row had an empty window";
  EXPECT_GT(accepted_total, c.rounds / 2) << "the rounds accepted almost nothing";
}

}  // namespace

std::vector<VarlenCase> varlen_cases(const std::vector<EquivalenceCase>& base,
                                     const std::vector<bool>& device_cu) {
  std::vector<VarlenCase> out;
  for (const EquivalenceCase& c : base) {
    for (Strategy s : {Strategy::kSnapshot, Strategy::kReplay}) {
      for (bool cu : device_cu) out.push_back({c, {s, cu}});
    }
  }
  return out;
}

std::string varlen_case_name(const ::testing::TestParamInfo<VarlenCase>& info) {
  return std::string(info.param.base.name) +
         (info.param.how.strategy == Strategy::kReplay ? "_replay" : "_snapshot");
}

void PrintTo(const VarlenCase& c, std::ostream* out) { *out << c.base.name; }

void run_variable_windows(const EquivalenceCase& c, const VariableWindowsRun& how, Memory& mem,
                          uint64_t seed) {
  for_kind(c.preset,
           [&](auto kind, const auto& g) { run_case<decltype(kind)>(c, g, how, mem, seed); });
}

}  // namespace specstate::test
