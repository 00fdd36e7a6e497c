// CUDA graphs under the replay strategy: several consecutive rounds (begin_verify, verify of every
// layer, commit with device accepted values) captured once in one graph, so that each round's
// verify re-runs the steps the previous round committed inside the graph, including across graph
// launches. Replayed with new inputs and accepted values; equals the CPU oracle run eagerly.
// Each case runs twice: the CUDA pool in the default element order, and in vLLM's (channels-last
// conv windows, [HV][K][V] states) against the oracle in the default order, compared logically.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <tuple>

#include "common/expect.h"
#include "common/presets.h"
#include "gpu_util.h"
#include "kernels/commit.h"

namespace specstate::test {
namespace {

// params: tree window; the CUDA pool in vLLM's element order (the oracle in the default one)
class ReplayGraph : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(ReplayGraph, ConsecutiveRoundsInOneGraphMatchTheOracle) {
  SPECSTATE_REQUIRE_GPU();
  const bool tree = std::get<0>(GetParam()), vllm = std::get<1>(GetParam());
  const uint64_t seed = (tree ? 9191 : 9090) + (vllm ? 7 : 0);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const GdnConfig g = gdn_preset("gpu_f32");
  const int L = 3, requests = 4, T = 4, rounds_per_graph = 3, launches = 4;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions options = test_pool_options(requests + 1, requests + 1, T, Strategy::kReplay);
  CudaStream owned_stream(cudaStreamNonBlocking);
  cudaStream_t stream = owned_stream.get();
  ASSERT_NE(stream, nullptr);
  const PoolOptions gpu_options =
      vllm ? vllm_layout_options(options, LayerKind::kGatedDeltaNet) : options;
  OraclePools p(model, options, gpu_options, stream, requests);
  const RandomLayers w(g, L, rng);
  ASSERT_NO_FATAL_FAILURE(prefill_history(p, w, g, 3, rng, stream));
  // Rows: every request, a padding row at index 1; the same batch in every round.
  const int B = requests + 1, pad_row = 1;
  VerifyBatch cb = padded_batch(p.ch, pad_row, T), gb = padded_batch(p.gh, pad_row, T);
  if (tree) {
    for (int r = 0; r < B; ++r) {
      const std::vector<int32_t> p =
          r % 2 ? std::vector<int32_t>{-1, 0, 0, 2} : std::vector<int32_t>{-1, 0, 1, 0};
      cb.parents.insert(cb.parents.end(), p.begin(), p.end());
    }
    gb.parents = cb.parents;
  }
  // Fixed device buffers per (round of the graph, layer).
  std::vector<std::vector<DeviceInputs>> din(rounds_per_graph);
  std::vector<std::vector<DeviceOutputs>> dout(rounds_per_graph);
  std::vector<std::vector<TokenOutputs>> host_out(rounds_per_graph);
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(
      cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * B * rounds_per_graph));
  SPECSTATE_CUDA_OK(cudaMemset(d_accepted, 0, sizeof(int32_t) * B * rounds_per_graph));
  for (int k = 0; k < rounds_per_graph; ++k) {
    for (int l = 0; l < L; ++l) {
      din[k].emplace_back(random_inputs(g, int64_t{B} * T, rng), 0);
      host_out[k].push_back(make_outputs(g, int64_t{B} * T));
      dout[k].emplace_back(host_out[k].back(), 0, true);
    }
  }

  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < rounds_per_graph; ++k) {
    p.gpu.begin_verify(gb);
    for (int l = 0; l < L; ++l) {
      p.gpu.verify(l, w.dweights[l].view(), din[k][l].view(), dout[k][l].view());
    }
    p.gpu.commit(TensorView::contiguous(d_accepted + k * B, DType::kI32, {B}, Device::kCuda));
  }
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SPECSTATE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  int accepted_total = 0;
  for (int launch = 0; launch < launches; ++launch) {
    SCOPED_TRACE("launch " + std::to_string(launch));
    std::vector<std::vector<TokenInputs>> in(rounds_per_graph);
    std::vector<std::vector<TokenOutputs>> ref(rounds_per_graph);
    std::vector<int32_t> accepted(B * rounds_per_graph);
    for (int k = 0; k < rounds_per_graph; ++k) {
      for (int l = 0; l < L; ++l) {
        in[k].push_back(random_inputs(g, int64_t{B} * T, rng));
        din[k][l].mixed_qkv.upload(in[k][l].mixed_qkv);
        din[k][l].a.upload(in[k][l].a);
        din[k][l].b.upload(in[k][l].b);
        ref[k].push_back(make_outputs(g, int64_t{B} * T));
      }
      for (int r = 0; r < B; ++r) {
        int32_t& a = accepted[k * B + r];
        a = r == pad_row ? (tree ? -1 : 0)
                         : std::uniform_int_distribution<int>(tree ? -1 : 0, tree ? T - 1 : T)(rng);
        accepted_total += a > 0;
      }
      p.cpu.begin_verify(cb);
      for (int l = 0; l < L; ++l) {
        p.cpu.verify(l, w.weights[l].view(), in[k][l].view(), ref[k][l].view());
      }
      p.cpu.commit(std::vector<int32_t>(accepted.begin() + k * B, accepted.begin() + (k + 1) * B));
    }
    SPECSTATE_CUDA_OK(cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * accepted.size(),
                                 cudaMemcpyHostToDevice));
    SPECSTATE_CUDA_OK(cudaGraphLaunch(exec, stream));
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(p.gpu.last_commit_status(), Status::kSuccess);
    for (int k = 0; k < rounds_per_graph; ++k) {
      for (int l = 0; l < L; ++l) {
        dout[k][l].download(host_out[k][l]);
        for (int r = 0; r < B; ++r) {
          if (r == pad_row) continue;
          expect_close(rows_to_floats(ref[k][l].core_out.view(), int64_t{r} * T, T),
                       rows_to_floats(host_out[k][l].core_out.view(), int64_t{r} * T, T),
                       output_tolerance(g),
                       "round " + std::to_string(k) + " layer " + std::to_string(l) + " row " +
                           std::to_string(r) + ": core_out");
        }
      }
    }
    // Every other launch looks at the committed memory (materializing it); the others leave the
    // pending steps for the next launch's first round to replay.
    if (launch % 2 == 1 || launch + 1 == launches) {
      // The materialize runs on the pool's (non-blocking) stream: wait for it before reading.
      p.gpu.materialize();
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      for (int l = 0; l < L; ++l) {
        expect_close(to_floats(p.cpu.ssm_state(l)), to_floats(p.gpu.ssm_state(l)),
                     state_tolerance(g), "committed ssm, layer " + std::to_string(l));
        expect_close(to_floats(p.cpu.conv_state(l)), to_floats(p.gpu.conv_state(l)),
                     state_tolerance(g), "committed conv, layer " + std::to_string(l));
      }
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(accepted_total, launches * rounds_per_graph) << "the trace committed almost nothing";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d_accepted);
}

INSTANTIATE_TEST_SUITE_P(Gpu, ReplayGraph, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         graph_case_name);

// The docs' graph pattern (begin_verify outside the graph, a graph of every layer's verify and
// the commit) with the batch's rows changing between launches, as an engine's requests come and
// go: a request released, a new one acquired, prefilled and put in its row. The graph's commit
// advances the new request on the device alone (the host saw no commit of it), so what reads its
// committed state afterwards (decode, views, export, release then adopt) must replay the steps
// the graph committed. Accepted values on the device, or host values baked into the graph at
// capture (each launch commits them again). Each round is checked against the oracle run eagerly;
// a released slot's memory (what adopt() resumes from) is compared with the oracle's.
class ReplayGraphRows : public ::testing::TestWithParam<bool> {};

TEST_P(ReplayGraphRows, ASlotThatJoinsTheBatchAfterTheCaptureReadsWhatTheGraphCommitted) {
  SPECSTATE_REQUIRE_GPU();
  const bool device_values = GetParam();
  std::mt19937_64 rng(device_values ? 4242 : 4343);
  const GdnConfig g = gdn_preset("gpu_f32");
  const int L = 2, T = 3, B = 2;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  const PoolOptions options = test_pool_options(4, B, T, Strategy::kReplay);
  CudaStream owned_stream(cudaStreamNonBlocking);
  cudaStream_t stream = owned_stream.get();
  ASSERT_NE(stream, nullptr);
  OraclePools p(model, options, stream, B);
  const RandomLayers w(g, L, rng);
  ASSERT_NO_FATAL_FAILURE(prefill_history(p, w, g, 3, rng, stream));
  std::vector<DeviceInputs> din;
  std::vector<TokenOutputs> host_out;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < L; ++l) {
    din.emplace_back(random_inputs(g, int64_t{B} * T, rng), 0);
    host_out.push_back(make_outputs(g, int64_t{B} * T));
    dout.emplace_back(host_out.back(), 0, true);
  }
  // The values every launch commits: row 0 keeps one token, row 1 all of them (host values are
  // fixed at capture; device values are rewritten each launch, the same here).
  const std::vector<int32_t> accepted = {1, T};
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * B));
  SPECSTATE_CUDA_OK(
      cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));

  p.gpu.begin_verify(VerifyBatch{p.gh, T, {}});
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < L; ++l) p.gpu.verify(l, w.dweights[l].view(), din[l].view(), dout[l].view());
  if (device_values) {
    p.gpu.commit(TensorView::contiguous(d_accepted, DType::kI32, {B}, Device::kCuda));
  } else {
    p.gpu.commit(accepted);
  }
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SPECSTATE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  // One round: the graph launched for the pools' current rows, the oracle run eagerly.
  auto round = [&](const std::string& what) {
    SCOPED_TRACE(what);
    std::vector<TokenOutputs> ref;
    p.cpu.begin_verify(VerifyBatch{p.ch, T, {}});
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, int64_t{B} * T, rng);
      din[l].mixed_qkv.upload(in.mixed_qkv);
      din[l].a.upload(in.a);
      din[l].b.upload(in.b);
      ref.push_back(make_outputs(g, int64_t{B} * T));
      p.cpu.verify(l, w.weights[l].view(), in.view(), ref.back().view());
    }
    p.cpu.commit(accepted);
    p.gpu.begin_verify(VerifyBatch{p.gh, T, {}});
    SPECSTATE_CUDA_OK(cudaGraphLaunch(exec, stream));
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(p.gpu.last_commit_status(), Status::kSuccess);
    for (int l = 0; l < L; ++l) {
      dout[l].download(host_out[l]);
      expect_close(to_floats(ref[l].core_out.view()), to_floats(host_out[l].core_out.view()),
                   output_tolerance(g), "core_out, layer " + std::to_string(l));
    }
  };
  // One decode token of row `r`'s request in every layer, both pools, outputs compared. The
  // graph's round is still open on the host (it verified nothing there): dropped first.
  auto decode = [&](int r, const std::string& what) {
    if (p.gpu.round_open()) p.gpu.abort_round();
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, 1, rng);
      TokenOutputs ref = make_outputs(g, 1), out = make_outputs(g, 1);
      p.cpu.decode(l, {p.ch[r]}, w.weights[l].view(), in.view(), ref.view());
      DeviceInputs d(in, 0);
      DeviceOutputs o(out, 0, true);
      p.gpu.decode(l, {p.gh[r]}, w.dweights[l].view(), d.view(), o.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      o.download(out);
      expect_close(to_floats(ref.core_out.view()), to_floats(out.core_out.view()),
                   output_tolerance(g), what + ": decode, layer " + std::to_string(l));
    }
  };
  auto states = [&](const std::string& what) {
    p.gpu.materialize();
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    for (int l = 0; l < L; ++l) {
      expect_close(to_floats(p.cpu.ssm_state(l)), to_floats(p.gpu.ssm_state(l)), state_tolerance(g),
                   what + ": committed ssm, layer " + std::to_string(l));
      expect_close(to_floats(p.cpu.conv_state(l)), to_floats(p.gpu.conv_state(l)),
                   state_tolerance(g), what + ": committed conv, layer " + std::to_string(l));
    }
  };
  // A new request in row 1: the old one released, the new one acquired and prefilled.
  auto replace_row1 = [&](const std::string& what) {
    SCOPED_TRACE(what);
    p.cpu.release(p.ch[1]);
    p.gpu.release(p.gh[1]);
    p.ch[1] = p.cpu.acquire();
    p.gh[1] = p.gpu.acquire();
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, 2, rng);
      TokenOutputs ref = make_outputs(g, 2), out = make_outputs(g, 2);
      p.cpu.prefill(l, p.ch[1], w.weights[l].view(), in.view(), ref.view());
      DeviceInputs d(in, 0);
      DeviceOutputs o(out, 0, true);
      p.gpu.prefill(l, p.gh[1], w.dweights[l].view(), d.view(), o.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    }
  };

  round("the captured rows, round 1");
  round("the captured rows, round 2");
  replace_row1("the first new request");
  round("the first new request, round 1");
  // Decode first: an advance of the new request must replay what the graph committed.
  decode(1, "the first new request");
  round("the first new request, round 2");
  states("after the first new request's rounds");
  // A new request again, then a release of it after its rounds: release keeps the committed
  // state in the slot's memory, which adopt() resumes from.
  replace_row1("the second new request");
  round("the second new request, round 1");
  round("the second new request, round 2");
  p.cpu.release(p.ch[1]);
  p.gpu.release(p.gh[1]);
  states("after the second new request's release");
  decode(0, "the captured request");
  states("at the end");

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d_accepted);
}

INSTANTIATE_TEST_SUITE_P(Gpu, ReplayGraphRows, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "device_values" : "host_values");
                         });

// Device-side accepted values out of range under replay: the round commits nothing (every row
// records no pending steps and keeps its state; all-or-nothing), and the flag is raised; the
// next rounds go on from there. (Checked against the CPU oracle, which skips the refused round,
// within the f32 tolerance after the last round; not byte for byte round by round.)
TEST(ReplayCommitChecks, OutOfRangeDeviceValuesRefuseTheRoundAndFlag) {
  SPECSTATE_REQUIRE_GPU();
  std::mt19937_64 rng(31);
  const GdnConfig g = gdn_preset("gpu_f32");
  const int L = 2, T = 3;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions options = test_pool_options(4, 4, T, Strategy::kReplay);
  CudaStream stream;
  OraclePools p(model, options, stream.get(), 4);
  const RandomLayers w(g, L, rng);
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * 4));
  for (int round = 0; round < 3; ++round) {
    p.cpu.begin_verify(VerifyBatch{p.ch, T, {}});
    p.gpu.begin_verify(VerifyBatch{p.gh, T, {}});
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, 4 * T, rng);
      TokenOutputs out = make_outputs(g, 4 * T);
      p.cpu.verify(l, w.weights[l].view(), in.view(), out.view());
      DeviceInputs din(in, 0);
      DeviceOutputs dout(out, 0, true);
      p.gpu.verify(l, w.dweights[l].view(), din.view(), dout.view());
    }
    // Row 1: a > T; row 3: a < 0 (rounds 1, 2). The oracle keeps every row (a = 0).
    const std::vector<int32_t> raw = {2, round > 0 ? T + 1 : 3, 1, round > 0 ? -2 : 2};
    const std::vector<int32_t> kept = round > 0 ? std::vector<int32_t>(4, 0) : raw;
    SPECSTATE_CUDA_OK(
        cudaMemcpy(d_accepted, raw.data(), sizeof(int32_t) * 4, cudaMemcpyHostToDevice));
    p.gpu.commit(TensorView::contiguous(d_accepted, DType::kI32, {4}, Device::kCuda));
    p.cpu.commit(kept);
    EXPECT_EQ(p.gpu.last_commit_status(), round > 0 ? Status::kOutOfRange : Status::kSuccess);
  }
  for (int l = 0; l < L; ++l) {
    expect_close(to_floats(p.cpu.ssm_state(l)), to_floats(p.gpu.ssm_state(l)), state_tolerance(g),
                 "committed ssm, layer " + std::to_string(l));
    expect_close(to_floats(p.cpu.conv_state(l)), to_floats(p.gpu.conv_state(l)), state_tolerance(g),
                 "committed conv, layer " + std::to_string(l));
  }
  cudaFree(d_accepted);
}

// 300 rows, past one CTA's 256 threads (the replay commit kernel checks the round's values
// itself, each CTA striding over every row): live rows at 0, 150, 298 and 299, padding between
// holding out-of-range values (never read). A bad value in the last row refuses the round: every
// row keeps its state, as the oracle that commits nothing; the rounds before and after commit.
// begin_verify's upload (300 slots and 900 parents, past one launch's 960 values) is split.
TEST(ReplayCommitChecks, ABadValueInTheLastOfManyRowsRefusesTheRound) {
  SPECSTATE_REQUIRE_GPU();
  std::mt19937_64 rng(37);
  const GdnConfig g = gdn_preset("gpu_f32");
  const int L = 2, T = 3, kRows = 300;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions options = test_pool_options(4, kRows, T, Strategy::kReplay);
  CudaStream stream;
  OraclePools p(model, options, stream.get(), 4);
  const RandomLayers w(g, L, rng);
  const int live[4] = {0, 150, 298, 299};
  VerifyBatch cb{std::vector<SlotHandle>(kRows, SlotHandle::padding()), T, {}};
  VerifyBatch gb = cb;
  for (int i = 0; i < 4; ++i) {
    cb.rows[live[i]] = p.ch[i];
    gb.rows[live[i]] = p.gh[i];
  }
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * kRows));
  for (int round = 0; round < 3; ++round) {
    p.cpu.begin_verify(cb);
    p.gpu.begin_verify(gb);
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, kRows * T, rng);
      TokenOutputs out = make_outputs(g, kRows * T);
      p.cpu.verify(l, w.weights[l].view(), in.view(), out.view());
      DeviceInputs din(in, 0);
      DeviceOutputs dout(out, 0, true);
      p.gpu.verify(l, w.dweights[l].view(), din.view(), dout.view());
    }
    const bool bad = round == 1;
    std::vector<int32_t> raw(kRows, T + 5), kept(kRows, 0);  // padding: any value / 0
    const int32_t values[4] = {1, T, 2, bad ? T + 1 : 3};
    for (int i = 0; i < 4; ++i) {
      raw[live[i]] = values[i];
      if (!bad) kept[live[i]] = values[i];
    }
    SPECSTATE_CUDA_OK(
        cudaMemcpy(d_accepted, raw.data(), sizeof(int32_t) * kRows, cudaMemcpyHostToDevice));
    p.gpu.commit(TensorView::contiguous(d_accepted, DType::kI32, {kRows}, Device::kCuda));
    p.cpu.commit(kept);
    EXPECT_EQ(p.gpu.last_commit_status(), bad ? Status::kOutOfRange : Status::kSuccess)
        << "round " << round;
  }
  for (int l = 0; l < L; ++l) {
    const std::vector<float> ssm = to_floats(p.gpu.ssm_state(l));
    expect_close(to_floats(p.cpu.ssm_state(l)), ssm, state_tolerance(g),
                 "committed ssm, layer " + std::to_string(l));
    expect_close(to_floats(p.cpu.conv_state(l)), to_floats(p.gpu.conv_state(l)), state_tolerance(g),
                 "committed conv, layer " + std::to_string(l));
    double norm = 0;
    for (float v : ssm) norm += double(v) * v;
    EXPECT_GT(norm, 0.0) << "layer " << l;
  }
  cudaFree(d_accepted);
}

// Kernel nodes of a captured replay round: begin_verify is one upload (the slots and the chain's
// parents together) and a commit from device memory is one kernel (it checks the values itself),
// so a round of L layers is L layers' launches plus two nodes. Captured piece by piece after an
// eager round; the graphs are counted, not run.
TEST(ReplayRoundNodes, BeginVerifyIsOneUploadAndTheCommitOneKernel) {
  SPECSTATE_REQUIRE_GPU();
  std::mt19937_64 rng(41);
  const GdnConfig g = gdn_preset("gpu_f32");
  const int L = 2, T = 3, B = 4;
  const ModelConfig model = ModelConfig::gated_delta_net(L, g);
  PoolOptions options = test_pool_options(B, B, T, Strategy::kReplay);
  CudaStream owned_stream(cudaStreamNonBlocking);
  cudaStream_t stream = owned_stream.get();
  options.stream = stream;
  options.backend = Backend::kCuda;
  StatePool pool(model, options);
  std::vector<SlotHandle> handles;
  for (int i = 0; i < B; ++i) handles.push_back(pool.acquire());
  const RandomLayers w(g, L, rng);
  std::vector<DeviceInputs> din;
  std::vector<TokenOutputs> host_out;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < L; ++l) {
    din.emplace_back(random_inputs(g, int64_t{B} * T, rng), 0);
    host_out.push_back(make_outputs(g, int64_t{B} * T));
    dout.emplace_back(host_out.back(), 0, true);
  }
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * B));
  const std::vector<int32_t> accepted = {1, T, 2, 1};
  SPECSTATE_CUDA_OK(
      cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * B, cudaMemcpyHostToDevice));
  const VerifyBatch batch{handles, T, {}};
  const TensorView acc = TensorView::contiguous(d_accepted, DType::kI32, {B}, Device::kCuda);
  const auto verify_all = [&] {
    for (int l = 0; l < L; ++l) pool.verify(l, w.dweights[l].view(), din[l].view(), dout[l].view());
  };
  // An eager round first: the slots then hold history, as in service.
  pool.begin_verify(batch);
  verify_all();
  pool.commit(acc);
  SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
  ASSERT_EQ(pool.last_commit_status(), Status::kSuccess);
  const auto nodes = [&](const std::function<void()>& body) {
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    body();
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    std::size_t n = 0;
    EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &n), cudaSuccess);
    cudaGraphDestroy(graph);
    return n;
  };
  EXPECT_EQ(nodes([&] { pool.begin_verify(batch); }), 1u) << "begin_verify";
  EXPECT_GE(nodes(verify_all), static_cast<std::size_t>(L)) << "the layers";
  EXPECT_EQ(nodes([&] { pool.commit(acc); }), 1u) << "commit";
  cudaFree(d_accepted);
}

// A tree window longer than the recurrence kernel stages is refused before anything runs.
TEST(ReplayCommitChecks, TreeWindowAboveTheKernelLimitIsRefusedAtBeginVerify) {
  SPECSTATE_REQUIRE_GPU();
  PoolOptions options = test_pool_options(1, 1, 20, Strategy::kReplay);
  options.backend = Backend::kCuda;
  StatePool gpu(ModelConfig::gated_delta_net(1, gdn_preset("gpu_f32")), options);
  SlotHandle h = gpu.acquire();
  std::vector<int32_t> parents(20);
  for (int t = 0; t < 20; ++t) parents[t] = t - 1;
  try {
    gpu.begin_verify(VerifyBatch{{h}, 20, parents});
    FAIL() << "accepted a 20-token tree";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kNotSupported);
    EXPECT_NE(std::string(e.what()).find("batch.window = 20"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gpu.begin_verify(VerifyBatch{{h}, 20, {}}));  // a chain of 20 is fine
}

// Heads and layers are grid extents of the launches (at most 65535): such a pool was built and
// every round's launches then failed. Refused at construction, naming the field.
TEST(ReplayCommitChecks, HeadsAndLayersPastTheGridExtentAreRefusedAtConstruction) {
  SPECSTATE_REQUIRE_GPU();
  PoolOptions options = test_pool_options(1, 1, 2, Strategy::kReplay);
  options.backend = Backend::kCuda;
  GdnConfig wide = gdn_preset("gpu_f32");
  wide.num_k_heads = 1;
  wide.num_v_heads = 65536;
  wide.head_k_dim = 32;
  wide.head_v_dim = 1;
  expect_rejected([&] { StatePool pool(ModelConfig::gated_delta_net(1, wide), options); },
                  Status::kNotSupported, {"num_v_heads = 65536 > 65535"});
  GdnConfig tiny = wide;
  tiny.num_v_heads = 1;
  expect_rejected([&] { StatePool pool(ModelConfig::gated_delta_net(65536, tiny), options); },
                  Status::kNotSupported, {"num_layers = 65536 > 65535"});
  wide.num_v_heads = 65535;  // at the limit: built
  EXPECT_NO_THROW(StatePool(ModelConfig::gated_delta_net(1, wide), options));
}

// An error the caller left on the thread (unconsumed by cudaGetLastError) was taken for the error
// of the pool's next launch: verify and commit threw after queuing their kernels (a device-valued
// replay commit then ran on the device while the round stayed open on the host). The pool's
// launches report their own errors only, and leave the caller's error for the caller.
TEST(ReplayCommitChecks, AnErrorTheCallerLeftOnTheThreadIsNotTheLaunchesError) {
  SPECSTATE_REQUIRE_GPU();
  PoolOptions options = test_pool_options(1, 1, 4, Strategy::kReplay);
  options.backend = Backend::kCuda;
  const GdnConfig g = gdn_preset("gpu_f32");
  StatePool gpu(ModelConfig::gated_delta_net(1, g), options);
  const SlotHandle h = gpu.acquire();
  std::mt19937_64 rng(5);
  const LayerWeights w = random_weights(g, rng);
  DeviceWeights dw(w);
  TokenInputs in = random_inputs(g, 4, rng);
  TokenOutputs out = make_outputs(g, 4);
  DeviceInputs din(in, 0);
  DeviceOutputs dout(out, 0, true);
  ASSERT_NE(cudaSetDevice(1 << 20), cudaSuccess);  // the thread's last error: invalid device
  gpu.begin_verify(VerifyBatch{{h}, 4, {}});
  EXPECT_NO_THROW(gpu.verify(0, dw.view(), din.view(), dout.view()));
  EXPECT_NO_THROW(gpu.commit(std::vector<int32_t>{2}));
  EXPECT_FALSE(gpu.round_open());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);  // still the caller's to read
  dout.download(out);
  EXPECT_GT(sum_squares(out.core_out.view()), 0.0);
}

// A stream of another GPU than options.device: every launch on it failed with an error naming no
// option (and copy_slot / import_slot overwrote a slot first); refused at construction. The pool's
// destructor left the thread on the pool's GPU. Both need two GPUs.
TEST(ReplayCommitChecks, AStreamOfAnotherGpuIsRefusedAndTheDestructorKeepsTheCurrentDevice) {
  SPECSTATE_REQUIRE_GPU();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "needs two GPUs (" << count << " here)";
  PoolOptions options = test_pool_options(1, 1, 2, Strategy::kReplay);
  options.backend = Backend::kCuda;
  options.device = 0;
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  options.stream = other;
  expect_rejected(
      [&] { StatePool pool(ModelConfig::gated_delta_net(1, gdn_preset("gpu_f32")), options); },
      Status::kInvalidArgument, {"options.stream belongs to cuda:1, options.device = 0"});
  options.stream = nullptr;
  {
    StatePool pool(ModelConfig::gated_delta_net(1, gdn_preset("gpu_f32")), options);
    pool.acquire();
  }
  int current = -1;
  EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 1) << "destroying a pool of cuda:0 moved the thread off cuda:1";
  cudaStreamDestroy(other);
  cudaSetDevice(0);
}

// A device the build holds no code for was accepted: acquire worked (memsets only) and the first
// prefill, decode or verify failed as a backend error. The pool now asks at construction
// (kernels::kernel_image_status) and refuses the device with kNotSupported, naming its compute
// capability. Here the build holds this device's code: the probe says so and leaves no error on
// the thread, and a pool on it runs a prefill. (The refusal itself needs a GPU the build lacks.)
TEST(ReplayCommitChecks, TheBuildsKernelImageForTheDeviceIsProbedAtConstruction) {
  SPECSTATE_REQUIRE_GPU();
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  PoolOptions options = test_pool_options(1, 1, 2, Strategy::kReplay);
  options.backend = Backend::kCuda;
  if (major < 8) {  // a card the backend refuses: the refusal, by name
    expect_rejected(
        [&] { StatePool pool(ModelConfig::gated_delta_net(1, gdn_preset("gpu_f32")), options); },
        Status::kNotSupported, {"compute capability", "needs 8.0 or newer"});
    return;
  }
  EXPECT_EQ(kernels::kernel_image_status(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  StatePool pool(ModelConfig::gated_delta_net(1, gdn_preset("gpu_f32")), options);
  const SlotHandle h = pool.acquire();
  EXPECT_TRUE(pool.is_live(h));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace specstate::test
