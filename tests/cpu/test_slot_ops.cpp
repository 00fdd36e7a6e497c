// The slot-operation suite (common/slot_ops.h) on the CPU oracle, every layer kind in f32 and
// bf16, both strategies; and the CPU's bad arguments of the slot operations: each rejected naming
// it, with nothing changed.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "common/slot_ops.h"

namespace specstate::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, SlotOps,
                         ::testing::ValuesIn(slot_ops_params(Backend::kCpu, &host_memory)),
                         slot_ops_name);

// Every slot's committed bytes of the pool (through the views: materializes).
std::vector<uint8_t> pool_bytes(const StatePool& pool) { return committed_bytes(pool); }

// --- bad arguments: each rejected naming it, nothing changed ----------------------------------

template <typename Kind>
struct BadFixture {
  PoolRounds<Kind> r;
  StatePool p;
  SlotHandle a, b;
  std::vector<uint8_t> before;
  BadFixture(const typename Kind::Config& layer, int slots = 3)
      : r(layer, kLayers, 301), p(r.pool(Strategy::kReplay, slots)) {
    a = p.acquire();
    b = p.acquire();
    r.prefill(p, a, r.inputs(3));
    r.prefill(p, b, r.inputs(2));
    before = pool_bytes(p);
  }
  void unchanged() { EXPECT_EQ(pool_bytes(p), before); }
};

TEST(SlotOpsBadInput, CopyAndForkArguments) {
  BadFixture<GdnKind> f(gdn_preset("small_f32"));
  expect_rejected([&] { f.p.copy_slot(f.a, f.a); }, Status::kInvalidArgument,
                  {"StatePool::copy_slot", "src = dst", "slot 0"});
  SlotHandle foreign = f.b;
  foreign.pool_id += 99;
  expect_rejected([&] { f.p.copy_slot(f.a, foreign); }, Status::kFailedPrecondition,
                  {"dst = ", "another pool"});
  const SlotHandle c = f.p.acquire();
  f.p.release(c);
  expect_rejected([&] { f.p.copy_slot(c, f.a); }, Status::kFailedPrecondition,
                  {"src = ", "released"});
  expect_rejected([&] { f.p.fork(c); }, Status::kFailedPrecondition,
                  {"StatePool::fork", "src = ", "released"});
  EXPECT_EQ(f.p.free_slots(), 1);
  f.unchanged();
  const SlotHandle last = f.p.fork(f.a);  // the pool is full now
  f.before = pool_bytes(f.p);
  expect_rejected([&] { f.p.fork(f.a); }, Status::kResourceExhausted, {"num_slots = 3"});
  expect_rejected([&] { f.p.reset(c); }, Status::kFailedPrecondition,
                  {"StatePool::reset", "released"});
  f.unchanged();
  f.p.release(last);
}

TEST(SlotOpsBadInput, ExportAndImportBuffers) {
  BadFixture<Mamba2Kind> f(mamba2_preset("m2_small_bf16"));
  const int64_t bytes = f.p.slot_state_bytes();
  const int64_t n = (bytes + 3) / 4;
  std::vector<int32_t> buf(static_cast<std::size_t>(2 * n + 8));
  const std::string want = std::to_string(n);
  for (auto* call : {+[](StatePool&p, SlotHandle h, const TensorView&v) { p.export_slot(h, v); },
                     +[](StatePool&p, SlotHandle h, const TensorView&v) { p.import_slot(h, v); }}) {
    expect_rejected(
        [&] { call(f.p, f.a, TensorView::contiguous(buf.data(), DType::kI32, {n - 1})); },
        Status::kInvalidArgument, {"holds " + std::to_string(n - 1), "expected " + want});
    expect_rejected(
        [&] {
          call(f.p, f.a, TensorView::contiguous(buf.data(), DType::kI32, {2, n}));
        },
        Status::kInvalidArgument, {"ndim = 2", "expected 1"});
    expect_rejected([&] { call(f.p, f.a, TensorView::strided(buf.data(), DType::kI32, {n}, {2})); },
                    Status::kInvalidArgument, {"stride 2", "contiguous"});
    expect_rejected(
        [&] {
          call(f.p, f.a, TensorView::contiguous(buf.data(), DType::kI32, {n}, Device::kCuda));
        },
        Status::kInvalidArgument, {"lives on cuda", "the pool's backend is cpu"});
    expect_rejected(
        [&] {
          call(f.p, f.a, TensorView::contiguous(static_cast<void*>(nullptr), DType::kI32, {n}));
        },
        Status::kInvalidArgument, {".data is null"});
    // A view of the pool's own memory.
    const TensorView pool_mem = f.p.ssm_state(0);
    expect_rejected(
        [&] { call(f.p, f.a, TensorView::contiguous(pool_mem.data, DType::kI32, {n})); },
        Status::kInvalidArgument,
        {"overlaps the pool's",
         "a call's buffers (inputs, weights, outputs, an imported slot state) must be"});
  }
  SlotHandle stale = f.b;
  stale.generation += 1;
  expect_rejected(
      [&] { f.p.export_slot(stale, TensorView::contiguous(buf.data(), DType::kI32, {n})); },
      Status::kFailedPrecondition, {"StatePool::export_slot", "handle"});
  f.unchanged();
}

TEST(SlotOpsBadInput, ImportFilesThatDoNotFitThePool) {
  const std::string path = temp_path("bad");
  BadFixture<GdnKind> f(gdn_preset("small_f32"));
  auto expect_file_rejected = [&](const std::vector<std::string>& words) {
    expect_rejected([&] { f.p.import_slot(f.a, path); }, Status::kInvalidArgument, words);
    f.unchanged();
  };
  {  // other dtypes (bf16 conv state)
    PoolRounds<GdnKind> r(gdn_preset("small_bf16"), kLayers, 1);
    StatePool q = r.pool(Strategy::kSnapshot);
    q.export_slot(q.acquire(), path);
    expect_file_rejected({path, "tensor 'layers.0.conv_state' is BF16[", "expects F32["});
  }
  {  // other shapes (Mamba2 of other heads), and another kind
    PoolRounds<Mamba2Kind> r(mamba2_preset("m2_small_f32"), kLayers, 1);
    StatePool q = r.pool(Strategy::kSnapshot);
    q.export_slot(q.acquire(), path);
    expect_file_rejected({path, "metadata kind = 'mamba2'", "gated_delta_net"});
  }
  {  // fewer layers
    PoolRounds<GdnKind> r(gdn_preset("small_f32"), kLayers - 1, 1);
    StatePool q = r.pool(Strategy::kSnapshot);
    q.export_slot(q.acquire(), path);
    expect_file_rejected({"metadata num_layers = '2'", "'3'"});
  }
  auto write = [&](const std::vector<SafetensorsFile::NewTensor>& tensors) {
    const auto bytes = SafetensorsFile::serialize(tensors, {});
    std::FILE* out = std::fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    std::fclose(out);
  };
  const GdnConfig g = gdn_preset("small_f32");
  const int64_t conv_bytes = g.conv_dim() * (g.conv_width - 1) * 4;
  const std::vector<int64_t> conv_shape = {g.conv_dim(), g.conv_width - 1};
  const std::vector<int64_t> ssm_shape = {g.num_v_heads, g.head_v_dim, g.head_k_dim};
  const int64_t ssm_bytes = ssm_shape[0] * ssm_shape[1] * ssm_shape[2] * 4;
  std::vector<SafetensorsFile::NewTensor> good;
  for (int l = 0; l < kLayers; ++l) {
    good.push_back({"layers." + std::to_string(l) + ".conv_state", SafetensorsDType::kF32,
                    conv_shape, std::vector<uint8_t>(conv_bytes, 1)});
    good.push_back({"layers." + std::to_string(l) + ".ssm_state", SafetensorsDType::kF32, ssm_shape,
                    std::vector<uint8_t>(ssm_bytes, 1)});
  }
  {
    auto missing = good;
    missing.erase(missing.begin() + 3);
    write(missing);
    expect_file_rejected({"no tensor named 'layers.1.ssm_state'"});
  }
  {
    auto extra = good;
    extra.push_back({"layers.3.conv_state", SafetensorsDType::kF32, conv_shape,
                     std::vector<uint8_t>(conv_bytes, 1)});
    write(extra);
    expect_file_rejected({"tensor 'layers.3.conv_state' is not part of a slot state"});
  }
  {
    auto shape = good;
    shape[1].shape = {ssm_shape[0], ssm_shape[1] * ssm_shape[2]};
    write(shape);
    expect_file_rejected({"tensor 'layers.0.ssm_state' is F32[", "the pool expects F32["});
  }
  {
    // Metadata the file has is compared, empty or not, and the version too: an explicit
    // "kind": "" or "format": "" was taken as absent, and a file of version 999 was imported.
    const auto write_meta = [&](const std::map<std::string, std::string>& metadata) {
      const auto bytes = SafetensorsFile::serialize(good, metadata);
      std::FILE* out = std::fopen(path.c_str(), "wb");
      ASSERT_NE(out, nullptr);
      std::fwrite(bytes.data(), 1, bytes.size(), out);
      std::fclose(out);
    };
    write_meta({{"format", "specstate.slot_state"}, {"version", "999"}});
    expect_file_rejected({"metadata version = '999', the pool has '1'"});
    write_meta({{"format", ""}});
    expect_file_rejected({"metadata format = '', the pool has 'specstate.slot_state'"});
    write_meta({{"kind", ""}});
    expect_file_rejected({"metadata kind = '', the pool has 'gated_delta_net'"});
  }
  {
    write(good);  // metadata-less but well-formed: accepted
    f.p.import_slot(f.a, path);
    f.before = pool_bytes(f.p);
  }
  {
    // A file larger than any slot state file of the pool (a good export grown to a sparse 2 GiB)
    // is refused from its header before its data is read: it was read whole (2 GB of memory,
    // seconds) and then refused. So is a header longer than the pool's could be (50 MB).
    f.p.export_slot(f.a, path);
    ASSERT_EQ(::truncate(path.c_str(), int64_t{2} << 30), 0);
    auto t0 = std::chrono::steady_clock::now();
    expect_file_rejected({path, "the data section has", "bytes but the tensors cover only"});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    {
      std::ofstream o(path, std::ios::binary | std::ios::trunc);
      const uint64_t length = 50'000'000;
      for (int i = 0; i < 8; ++i) o.put(static_cast<char>(length >> (8 * i)));
    }
    ASSERT_EQ(::truncate(path.c_str(), 60'000'000), 0);
    t0 = std::chrono::steady_clock::now();
    expect_file_rejected({path, "header length 50000000 exceeds the", "(not read)"});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  }
  std::remove(path.c_str());
  expect_file_rejected({path});  // no such file
  expect_rejected([&] { f.p.export_slot(f.a, std::string("/nonexistent-dir/x.safetensors")); },
                  Status::kInvalidArgument, {"/nonexistent-dir/x.safetensors", "cannot write"});
  expect_rejected([&] { f.p.import_slot(f.a, std::string()); }, Status::kInvalidArgument,
                  {"path is empty"});
  // A name with a NUL byte names another file (the system reads it up to the NUL): refused,
  // and the file its prefix names is neither written nor read.
  const std::string prefix = temp_path("nul");
  f.p.export_slot(f.a, prefix);  // a good file there: an import of the prefix would succeed
  const std::string nul = prefix + std::string(1, '\0') + "x.safetensors";
  expect_rejected([&] { f.p.import_slot(f.a, nul); }, Status::kInvalidArgument,
                  {"StatePool::import_slot", "\\0x.safetensors' holds a NUL byte (at"});
  f.unchanged();
  std::remove(prefix.c_str());
  expect_rejected([&] { f.p.export_slot(f.a, nul); }, Status::kInvalidArgument,
                  {"StatePool::export_slot", "holds a NUL byte"});
  std::ifstream created(prefix);
  EXPECT_FALSE(created.good()) << prefix << " was written";
  f.unchanged();
  {
    // A failed export (a file size limit standing for a full disk) leaves the previous export as
    // it was: the file was truncated when opened, so the failed write destroyed it.
    const std::string keep = temp_path("keep");
    f.p.export_slot(f.a, keep);
    const auto read_all = [](const std::string& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    const std::string before = read_all(keep);
    ASSERT_GT(before.size(), 100u);
    const auto export_under_a_size_limit = [&] {
      std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
      rlimit limit{};
      getrlimit(RLIMIT_FSIZE, &limit);
      limit.rlim_cur = 100;
      setrlimit(RLIMIT_FSIZE, &limit);
      bool refused = false;
      try {
        f.p.export_slot(f.a, keep);
      } catch (const Error& e) {
        refused = std::string(e.what()).find("the file is as it was") != std::string::npos;
      }
      std::exit(refused && read_all(keep) == before ? 0 : 1);
    };
    EXPECT_EXIT(export_under_a_size_limit(), ::testing::ExitedWithCode(0), "");
    EXPECT_EQ(read_all(keep), before);
    std::remove(keep.c_str());
  }
  // A FIFO that no process reads is refused before it is opened (it blocked the export, with the
  // pool's lock held, until a reader appeared); a directory too.
  const std::string fifo = temp_path("fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_rejected([&] { f.p.export_slot(f.a, fifo); }, Status::kInvalidArgument,
                  {"StatePool::export_slot", fifo, "is a FIFO that no process reads"});
  std::remove(fifo.c_str());
  expect_rejected([&] { f.p.export_slot(f.a, std::string("/tmp")); }, Status::kInvalidArgument,
                  {"'/tmp' is a directory"});
  f.unchanged();
  f.p.export_slot(f.a, std::string("/dev/null"));  // a device is written as before
}

}  // namespace
}  // namespace specstate::test
