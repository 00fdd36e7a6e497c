// Host-side bookkeeping of the replay strategy and of the CUDA backend across CUDA graph
// captures (docs/cuda.md, "CUDA graphs"): a graph's launches verify, commit and advance slots
// unseen by the host, and what was captured did not run. Each case is a call sequence that went
// wrong (from a review of the CUDA host code; each failed by reasoning before its fix):
//   AbandonedCaptureThenAbortKeepsThePendingSteps: verifies captured, the capture abandoned, then
//     abort_round: the host settled layers whose verify never ran (pending steps lost).
//   DecodeGraphCapturedBeforeACommitReplaysIt: a decode captured while the slot had nothing
//     deferred baked "no replay phase"; a later commit's steps were ignored by every launch.
//   CapturedDecodeDoesNotClearTheHostsDeferredFlag: a captured (not run) decode cleared the host's
//     deferred flag; an eager decode before the first launch skipped the replay phase.
//   SlotReacquiredIntoABakedRowIsSticky: begin_verify inside the graph; a slot index released and
//     acquired again is committed by every launch but was not marked.
//   NoProgrammaticEdgeOntoACommitAfterACapture: the layer-overlap chain left by a capture made the
//     next layer launch a programmatic dependent of the commit kernel before it.
// Once a pool has captured a layer call or a commit, every slot is possibly deferred (its replay
// phase runs, finding nothing where the device says so); a captured verify does not count as run
// for abort_round; the layer-overlap chain ends at a capture's boundary.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/expect.h"
#include "common/presets.h"
#include "gpu_util.h"

namespace specstate::test {
namespace {

struct Rig {
  GdnConfig g = gdn_preset("gpu_f32");
  int L = 2, T = 3, B = 2;
  std::mt19937_64 rng;
  CudaStream owned{cudaStreamNonBlocking};
  cudaStream_t stream = owned.get();
  ModelConfig model;
  std::unique_ptr<OraclePools> p;
  std::unique_ptr<RandomLayers> w;

  explicit Rig(uint64_t seed, int slots = 4) : rng(seed) {
    model = ModelConfig::gated_delta_net(L, g);
    const PoolOptions options = test_pool_options(slots, B, T, Strategy::kReplay);
    p = std::make_unique<OraclePools>(model, options, stream, B);
    w = std::make_unique<RandomLayers>(g, L, rng);
  }

  // One eager round in both pools over the current rows, host accepted values.
  void eager_round(const std::vector<int32_t>& accepted, const std::string& what) {
    SCOPED_TRACE(what);
    p->cpu.begin_verify(VerifyBatch{p->ch, T, {}});
    p->gpu.begin_verify(VerifyBatch{p->gh, T, {}});
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, int64_t{B} * T, rng);
      TokenOutputs ref = make_outputs(g, int64_t{B} * T), out = make_outputs(g, int64_t{B} * T);
      p->cpu.verify(l, w->weights[l].view(), in.view(), ref.view());
      DeviceInputs d(in, 0);
      DeviceOutputs o(out, 0, true);
      p->gpu.verify(l, w->dweights[l].view(), d.view(), o.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      o.download(out);
      expect_close(to_floats(ref.core_out.view()), to_floats(out.core_out.view()),
                   output_tolerance(g), what + ": verify core_out, layer " + std::to_string(l));
    }
    p->cpu.commit(accepted);
    p->gpu.commit(accepted);
  }

  // One decode token of row r in every layer of both pools, outputs compared.
  void decode(int r, const std::string& what) {
    for (int l = 0; l < L; ++l) {
      const TokenInputs in = random_inputs(g, 1, rng);
      TokenOutputs ref = make_outputs(g, 1), out = make_outputs(g, 1);
      p->cpu.decode(l, {p->ch[r]}, w->weights[l].view(), in.view(), ref.view());
      DeviceInputs d(in, 0);
      DeviceOutputs o(out, 0, true);
      p->gpu.decode(l, {p->gh[r]}, w->dweights[l].view(), d.view(), o.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
      o.download(out);
      expect_close(to_floats(ref.core_out.view()), to_floats(out.core_out.view()),
                   output_tolerance(g), what + ": decode, layer " + std::to_string(l));
    }
  }

  void states(const std::string& what) {
    p->gpu.materialize();
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    for (int l = 0; l < L; ++l) {
      expect_close(to_floats(p->cpu.conv_state(l)), to_floats(p->gpu.conv_state(l)),
                   state_tolerance(g), what + ": committed conv, layer " + std::to_string(l));
      expect_close(to_floats(p->cpu.ssm_state(l)), to_floats(p->gpu.ssm_state(l)),
                   state_tolerance(g), what + ": committed ssm, layer " + std::to_string(l));
    }
  }
};

// An engine captures the round's verifies; the capture is abandoned before the commit (its own
// code failed inside the capture, or it decided to run the round eagerly) and the graph is never
// launched. It drops the round with abort_round(), as begin_verify's refusal tells it to. The
// host had marked every layer verified (Impl::verified, ReplayStrategy::verified_) at capture:
// discard_round settles them on the device (pending conv steps = 0, folded cursors consumed)
// although their verify never ran, so the previous round's accepted steps are lost from the
// conv window (and, where h > fold limit, from the SSM state).
TEST(GraphBookkeeping, AbandonedCaptureThenAbortKeepsThePendingSteps) {
  SPECSTATE_REQUIRE_GPU();
  Rig r(101);
  ASSERT_NO_FATAL_FAILURE(prefill_history(*r.p, *r.w, r.g, 3, r.rng, r.stream));
  // Steps pending on the device (replay commits no state).
  ASSERT_NO_FATAL_FAILURE(r.eager_round({2, r.T}, "round 1"));

  std::vector<DeviceInputs> din;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < r.L; ++l) {
    din.emplace_back(random_inputs(r.g, int64_t{r.B} * r.T, r.rng), 0);
    dout.emplace_back(make_outputs(r.g, int64_t{r.B} * r.T), 0, true);
  }
  r.p->gpu.begin_verify(VerifyBatch{r.p->gh, r.T, {}});
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < r.L; ++l) {
    r.p->gpu.verify(l, r.w->dweights[l].view(), din[l].view(), dout[l].view());
  }
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &graph));
  cudaGraphDestroy(graph);  // never launched
  r.p->gpu.abort_round();
  // The oracle: the round never happened.
  ASSERT_NO_FATAL_FAILURE(r.states("after the abandoned capture and abort_round"));
  ASSERT_NO_FATAL_FAILURE(r.eager_round({1, 2}, "the next round"));
  ASSERT_NO_FATAL_FAILURE(r.decode(0, "row 0"));
  ASSERT_NO_FATAL_FAILURE(r.states("at the end"));
}

// Decode of every layer captured while the slot had nothing deferred (right after its
// prefill): advance_io's answer (no replay phase) is baked into the graph. Then a round commits
// two steps of the slot (eagerly, host values: pending on the device). Every launch of the
// decode graph reads the checkpoint without them, and writes its state over it (store_final)
// while the device cursors still hold the two steps, which a later materialize / verify applies
// on top.
TEST(GraphBookkeeping, DecodeGraphCapturedBeforeACommitReplaysIt) {
  SPECSTATE_REQUIRE_GPU();
  Rig r(202);
  ASSERT_NO_FATAL_FAILURE(prefill_history(*r.p, *r.w, r.g, 3, r.rng, r.stream));
  // The decode graph of row 0's request (static inputs, slot by value).
  std::vector<DeviceInputs> din;
  std::vector<TokenOutputs> host_out;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < r.L; ++l) {
    din.emplace_back(random_inputs(r.g, 1, r.rng), 0);
    host_out.push_back(make_outputs(r.g, 1));
    dout.emplace_back(host_out.back(), 0, true);
  }
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < r.L; ++l) {
    r.p->gpu.decode(l, {r.p->gh[0]}, r.w->dweights[l].view(), din[l].view(), dout[l].view());
  }
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SPECSTATE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  ASSERT_NO_FATAL_FAILURE(r.eager_round({2, 1}, "a round committing two steps of row 0"));
  // One decode step through the graph; the oracle decodes eagerly.
  for (int l = 0; l < r.L; ++l) {
    const TokenInputs in = random_inputs(r.g, 1, r.rng);
    din[l].mixed_qkv.upload(in.mixed_qkv);
    din[l].a.upload(in.a);
    din[l].b.upload(in.b);
    TokenOutputs ref = make_outputs(r.g, 1);
    r.p->cpu.decode(l, {r.p->ch[0]}, r.w->weights[l].view(), in.view(), ref.view());
    host_out[l] = std::move(ref);
  }
  SPECSTATE_CUDA_OK(cudaGraphLaunch(exec, r.stream));
  SPECSTATE_CUDA_OK(cudaStreamSynchronize(r.stream));
  for (int l = 0; l < r.L; ++l) {
    TokenOutputs got = make_outputs(r.g, 1);
    dout[l].download(got);
    expect_close(to_floats(host_out[l].core_out.view()), to_floats(got.core_out.view()),
                 output_tolerance(r.g),
                 "graph decode after the commit, layer " + std::to_string(l));
  }
  ASSERT_NO_FATAL_FAILURE(r.states("after the graph's decode"));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The slot is deferred (a round committed steps of it); decode of every layer is captured (the
// replay phase is baked, and so is after_advance's clear_pending), which clears the host's
// deferred flag although nothing ran. Before the graph is first launched the engine decodes the
// slot eagerly: advance_io sees nothing deferred and skips the replay phase.
TEST(GraphBookkeeping, CapturedDecodeDoesNotClearTheHostsDeferredFlag) {
  SPECSTATE_REQUIRE_GPU();
  Rig r(303);
  ASSERT_NO_FATAL_FAILURE(prefill_history(*r.p, *r.w, r.g, 3, r.rng, r.stream));
  ASSERT_NO_FATAL_FAILURE(r.eager_round({2, 1}, "a round committing two steps of row 0"));
  std::vector<DeviceInputs> din;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < r.L; ++l) {
    din.emplace_back(random_inputs(r.g, 1, r.rng), 0);
    dout.emplace_back(make_outputs(r.g, 1), 0, true);
  }
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
  for (int l = 0; l < r.L; ++l) {
    r.p->gpu.decode(l, {r.p->gh[0]}, r.w->dweights[l].view(), din[l].view(), dout[l].view());
  }
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &graph));
  cudaGraphDestroy(graph);  // (or kept for later steps: not launched yet)
  ASSERT_NO_FATAL_FAILURE(r.decode(0, "an eager decode after the capture"));
  ASSERT_NO_FATAL_FAILURE(r.states("after it"));
}

// ReplayGraph's pattern: begin_verify inside the graph, so the graph's upload carries the slot
// indices of the capture. A request finishes; the engine releases it and acquires a new request,
// which gets the same (lowest free) slot index, prefills it, and keeps launching the graph,
// whose verify and commit advance that index on the device. The host never marks the new slot
// as possibly deferred (release and acquire cleared its flags), so its decode (and views, export,
// release) read the checkpoint without the steps.
TEST(GraphBookkeeping, SlotReacquiredIntoABakedRowIsSticky) {
  SPECSTATE_REQUIRE_GPU();
  Rig r(404);
  ASSERT_NO_FATAL_FAILURE(prefill_history(*r.p, *r.w, r.g, 3, r.rng, r.stream));
  std::vector<DeviceInputs> din;
  std::vector<TokenOutputs> host_out;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < r.L; ++l) {
    din.emplace_back(random_inputs(r.g, int64_t{r.B} * r.T, r.rng), 0);
    host_out.push_back(make_outputs(r.g, int64_t{r.B} * r.T));
    dout.emplace_back(host_out.back(), 0, true);
  }
  const std::vector<int32_t> accepted = {1, r.T};
  int32_t* d_accepted = nullptr;
  SPECSTATE_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d_accepted), sizeof(int32_t) * r.B));
  SPECSTATE_CUDA_OK(
      cudaMemcpy(d_accepted, accepted.data(), sizeof(int32_t) * r.B, cudaMemcpyHostToDevice));
  cudaGraph_t graph = nullptr;
  SPECSTATE_CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
  r.p->gpu.begin_verify(VerifyBatch{r.p->gh, r.T, {}});
  for (int l = 0; l < r.L; ++l) {
    r.p->gpu.verify(l, r.w->dweights[l].view(), din[l].view(), dout[l].view());
  }
  r.p->gpu.commit(TensorView::contiguous(d_accepted, DType::kI32, {r.B}, Device::kCuda));
  SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SPECSTATE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  auto round = [&](const std::string& what) {
    SCOPED_TRACE(what);
    std::vector<TokenOutputs> ref;
    r.p->cpu.begin_verify(VerifyBatch{r.p->ch, r.T, {}});
    for (int l = 0; l < r.L; ++l) {
      const TokenInputs in = random_inputs(r.g, int64_t{r.B} * r.T, r.rng);
      din[l].mixed_qkv.upload(in.mixed_qkv);
      din[l].a.upload(in.a);
      din[l].b.upload(in.b);
      ref.push_back(make_outputs(r.g, int64_t{r.B} * r.T));
      r.p->cpu.verify(l, r.w->weights[l].view(), in.view(), ref.back().view());
    }
    r.p->cpu.commit(accepted);
    SPECSTATE_CUDA_OK(cudaGraphLaunch(exec, r.stream));
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(r.stream));
    for (int l = 0; l < r.L; ++l) {
      dout[l].download(host_out[l]);
      expect_close(to_floats(ref[l].core_out.view()), to_floats(host_out[l].core_out.view()),
                   output_tolerance(r.g), "core_out, layer " + std::to_string(l));
    }
  };
  round("the captured requests");
  // Row 1's request leaves; a new one takes the same slot index.
  const int old_index = r.p->gpu.slot_index(r.p->gh[1]);
  r.p->cpu.release(r.p->ch[1]);
  r.p->gpu.release(r.p->gh[1]);
  r.p->ch[1] = r.p->cpu.acquire();
  r.p->gh[1] = r.p->gpu.acquire();
  ASSERT_EQ(r.p->gpu.slot_index(r.p->gh[1]), old_index) << "the lowest free slot is reused";
  for (int l = 0; l < r.L; ++l) {
    const TokenInputs in = random_inputs(r.g, 2, r.rng);
    TokenOutputs ref = make_outputs(r.g, 2), out = make_outputs(r.g, 2);
    r.p->cpu.prefill(l, r.p->ch[1], r.w->weights[l].view(), in.view(), ref.view());
    DeviceInputs d(in, 0);
    DeviceOutputs o(out, 0, true);
    r.p->gpu.prefill(l, r.p->gh[1], r.w->dweights[l].view(), d.view(), o.view());
    SPECSTATE_CUDA_OK(cudaStreamSynchronize(r.stream));
  }
  round("the new request in the baked row");
  ASSERT_NO_FATAL_FAILURE(r.decode(1, "the new request"));
  ASSERT_NO_FATAL_FAILURE(r.states("at the end"));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d_accepted);
}

// The layer-overlap rule (docs/cuda.md, "Layers overlap"): a layer's first kernel is a
// programmatic dependent of the kernel before it only where the backend's last operation on the
// stream launched another layer. The backend's chain_key_ is updated by captured launches too:
// after a commit (chain broken) the engine captures a decode graph of a request with nothing
// deferred (chain_key_ = the last layer),
// and its next eager layer call is then launched as a programmatic dependent of the commit kernel
// still ahead of it in the stream, whose writes (pending counts, cursors; snapshot: the committed
// state) its prologue reads before griddepcontrol.wait. Observed here by continuing a captured
// round (ending in its commit node) with cudaStreamBeginCaptureToGraph: the host's decision is
// the one an eager launch gets, and shows as the edge type.
TEST(GraphBookkeeping, NoProgrammaticEdgeOntoACommitAfterACapture) {
  SPECSTATE_REQUIRE_GPU();
  int major = 0;
  SPECSTATE_CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  if (major < 9) GTEST_SKIP() << "no programmatic dependent launch below sm_90";
  Rig r(505);
  ASSERT_NO_FATAL_FAILURE(prefill_history(*r.p, *r.w, r.g, 3, r.rng, r.stream));
  std::vector<DeviceInputs> din;
  std::vector<DeviceOutputs> dout;
  for (int l = 0; l < r.L; ++l) {
    din.emplace_back(random_inputs(r.g, int64_t{r.B} * r.T, r.rng), 0);
    dout.emplace_back(make_outputs(r.g, int64_t{r.B} * r.T), 0, true);
  }
  DeviceInputs one(random_inputs(r.g, 1, r.rng), 0);
  DeviceOutputs one_out(make_outputs(r.g, 1), 0, true);
  // A request with nothing deferred (no round has committed it): its decode runs no replay phase,
  // so no clear_pending breaks the chain after each layer. (A decode of a deferred or sticky slot
  // ends every layer with a clear_pending, which breaks it.)
  const SlotHandle z = r.p->gpu.acquire();

  // A round ending in its commit kernel; `decode_graph_between`: a decode graph captured after it.
  auto edge_after_commit = [&](bool decode_graph_between, cudaGraphDependencyType* type) {
    cudaGraph_t round_graph = nullptr;
    SPECSTATE_CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
    r.p->gpu.begin_verify(VerifyBatch{r.p->gh, r.T, {}});
    for (int l = 0; l < r.L; ++l) {
      r.p->gpu.verify(l, r.w->dweights[l].view(), din[l].view(), dout[l].view());
    }
    r.p->gpu.commit(std::vector<int32_t>{1, 1});
    SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &round_graph));
    size_t n = 0;
    SPECSTATE_CUDA_OK(cudaGraphGetNodes(round_graph, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    SPECSTATE_CUDA_OK(cudaGraphGetNodes(round_graph, nodes.data(), &n));
    cudaGraphNode_t sink = nullptr;  // the commit kernel: the node nothing depends on
    for (cudaGraphNode_t node : nodes) {
      size_t out = 0;
      SPECSTATE_CUDA_OK(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &out));
      if (out == 0) sink = node;
    }
    ASSERT_NE(sink, nullptr);
    if (decode_graph_between) {
      cudaGraph_t decode_graph = nullptr;
      SPECSTATE_CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
      for (int l = 0; l < r.L; ++l) {
        r.p->gpu.decode(l, {z}, r.w->dweights[l].view(), one.view(), one_out.view());
      }
      SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &decode_graph));
      cudaGraphDestroy(decode_graph);
    }
    // What an eager decode of layer 0 now asks for, relative to the commit kernel before it.
    SPECSTATE_CUDA_OK(cudaStreamBeginCaptureToGraph(r.stream, round_graph, &sink, nullptr, 1,
                                                    cudaStreamCaptureModeGlobal));
    r.p->gpu.decode(0, {r.p->gh[1]}, r.w->dweights[0].view(), one.view(), one_out.view());
    cudaGraph_t same = nullptr;
    SPECSTATE_CUDA_OK(cudaStreamEndCapture(r.stream, &same));
    size_t e = 0;
    SPECSTATE_CUDA_OK(cudaGraphGetEdges(round_graph, nullptr, nullptr, nullptr, &e));
    std::vector<cudaGraphNode_t> from(e), to(e);
    std::vector<cudaGraphEdgeData> data(e);
    SPECSTATE_CUDA_OK(cudaGraphGetEdges(round_graph, from.data(), to.data(), data.data(), &e));
    bool found = false;
    for (size_t i = 0; i < e; ++i) {
      if (from[i] != sink) continue;
      found = true;
      *type = static_cast<cudaGraphDependencyType>(data[i].type);
    }
    ASSERT_TRUE(found) << "the decode continues from the commit node";
    cudaGraphDestroy(round_graph);
  };
  cudaGraphDependencyType control = cudaGraphDependencyTypeDefault;
  ASSERT_NO_FATAL_FAILURE(edge_after_commit(false, &control));
  EXPECT_EQ(control, cudaGraphDependencyTypeDefault) << "no capture between: plain order";
  cudaGraphDependencyType after_capture = cudaGraphDependencyTypeDefault;
  ASSERT_NO_FATAL_FAILURE(edge_after_commit(true, &after_capture));
  EXPECT_EQ(after_capture, cudaGraphDependencyTypeDefault)
      << "a decode graph captured in between made the next layer launch a programmatic "
         "dependent of the commit kernel";
}

}  // namespace
}  // namespace specstate::test
