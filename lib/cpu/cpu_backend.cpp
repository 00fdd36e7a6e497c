// The CPU backend: the oracle every other backend and strategy is tested against. Memory is
// host memory; every call runs on the calling thread. One driver (run_rows) serves every layer
// kind and every strategy: it does what the StateIO of the call says, with the kind's token step.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include "../backend.h"
#include "../logging.h"
#include "gdn_step.h"
#include "kda_step.h"
#include "kernels/kernel_types.h"
#include "mamba2_step.h"
#include "specstate/status.h"

namespace specstate::detail {
namespace {

// A working copy of one slot's layer state (conv window, SSM state; storage dtypes) in the
// canonical element order. Sized by fit(), never cleared: run_rows writes every byte before it
// reads it.
struct StateBuf {
  std::vector<char> conv, ssm;
  void fit(const Layout& l) {
    conv.resize(static_cast<std::size_t>(l.conv_bytes));
    ssm.resize(static_cast<std::size_t>(l.ssm_bytes));
  }
};

// run_rows' working states, kept by the backend from call to call (a layer call allocates and
// zeroes nothing; allocating them per call made decode 2x slower): the row's state, the parent
// and token states of snapshots in a non-canonical element order, and the window's token states
// where no snapshot stores them (replay verifies), in `nodes`, which node_buffer maps to.
struct RowScratch {
  StateBuf cur, prev, next;
  std::vector<StateBuf> nodes;
  std::vector<int> node_buffer, last_child, free_buffers;  // assign_node_buffers' tables
};

// The most working states run_rows holds at once for a pool's calls: cur, prev and next, and
// under replay the window's token states still to be started from (assign_node_buffers: two for
// a chain, at most max_window / 2 + 1 for a tree: while token t runs, each earlier state still
// held has a last child of its own in [t, T), so at most min(t, T - t) are held, besides t's).
// The host-memory check at construction counts them.
int64_t max_working_states(const Layout& l) {
  return 3 + (l.strategy == Strategy::kReplay ? int64_t{l.max_window} / 2 + 1 : 0);
}

// Maps the window's tokens [0, n) of one row (parents[t] < t, -1 for the root's children) to
// buffers of RowScratch::nodes: token t's state is kept until the last token that starts from it
// has run, then its buffer is reused, so a chain needs two buffers and a tree its widest set of
// states still needed (a window of T tokens held T working states before, chains included: a
// CPU replay verify of T = 2048 tokens of a 2 MiB state allocated 4.3 GB). Returns the buffers
// used; node_buffer[t] is token t's.
int assign_node_buffers(const int32_t* parents, int n, RowScratch& s) {
  s.node_buffer.assign(static_cast<std::size_t>(n), -1);
  s.last_child.resize(static_cast<std::size_t>(n));
  for (int t = 0; t < n; ++t) s.last_child[t] = t;
  for (int t = 0; t < n; ++t) {
    if (parents[t] >= 0) s.last_child[parents[t]] = t;  // t ascends: the last child wins
  }
  s.free_buffers.clear();
  int used = 0;
  for (int t = 0; t < n; ++t) {
    int b;
    if (s.free_buffers.empty()) {
      b = used++;
    } else {
      b = s.free_buffers.back();
      s.free_buffers.pop_back();
    }
    s.node_buffer[t] = b;  // differs from the parent's, which is still held
    const int parent = parents[t];
    if (parent >= 0 && s.last_child[parent] == t) s.free_buffers.push_back(s.node_buffer[parent]);
    if (s.last_child[t] == t) s.free_buffers.push_back(b);  // no token starts from t
  }
  return used;
}

// Runs `run` row by row with the token step `step` (a kind's step: load_inputs, load_record,
// store_record, shift_conv, apply_factor, step). DESIGN.md section 6, replay: the replay phase
// re-runs the slot's pending conv steps from its conv records and applies its history factor
// records to the checkpoint; a verify stores the post-history state iff the fold predicate
// holds, and writes each window token's factor record at ring position base + h + t of the
// settled cursor. The window's token t starts from its parent's state.
template <typename Step>
void run_rows(const PoolStorage& s, const LayerRun& run, Step& step, RowScratch& scratch) {
  const Layout& l = s.layout;
  const StateIO& io = run.io;
  const int T = run.tokens_per_row;
  StateBuf& cur = scratch.cur;
  StateBuf& prev = scratch.prev;  // prev / next: snapshot tokens of a non-canonical layout
  StateBuf& next = scratch.next;
  std::vector<StateBuf>& nodes = scratch.nodes;  // the window's token states without snapshots
  // Every working state this call needs is sized before the first row writes anything: a host
  // that cannot hold them refuses the call having changed nothing.
  int buffers = 0;
  try {
    if (run.plan && !io.store_tokens) {
      for (int r = 0; r < run.rows(); ++r) {
        const int slot = run.plan->slots[r];
        if (slot < 0) continue;
        buffers = std::max(buffers, assign_node_buffers(&run.plan->parents[std::size_t(r) * T],
                                                        run.length(r), scratch));
      }
    }
    cur.fit(l);
    if (io.store_tokens && !l.canonical()) {
      prev.fit(l);
      next.fit(l);
    }
    if (static_cast<int>(nodes.size()) < buffers) nodes.resize(static_cast<std::size_t>(buffers));
    for (int b = 0; b < buffers; ++b) nodes[static_cast<std::size_t>(b)].fit(l);
  } catch (const std::bad_alloc&) {
    throw Error(Status::kResourceExhausted,
                "CPU backend: cannot allocate the working copies of this layer call (" +
                    std::to_string(3 + buffers) + " states of one slot's layer, " +
                    std::to_string(l.conv_bytes + l.ssm_bytes) + " bytes each)");
  }
  for (int r = 0; r < run.rows(); ++r) {
    const int slot = run.plan ? run.plan->slots[r] : run.slots[r];
    if (slot < 0) continue;  // padding rows: nothing read, nothing written
    char* conv = s.conv(run.layer, slot);
    char* ssm = s.ssm(run.layer, slot);
    // The token steps work in the canonical element order; the pool's memory is in the layout's
    // (options.conv_layout / ssm_layout: a plain copy for the canonical one). An advance of a
    // canonical layout (decode, prefill) works in the pool's memory itself: it stores its final
    // state anyway, so every intermediate write is overwritten.
    const bool in_place = !run.plan && io.store_final && l.canonical();
    char* const wconv = in_place ? conv : cur.conv.data();
    char* const wssm = in_place ? ssm : cur.ssm.data();
    if (!in_place) {
      l.permute_conv(conv, wconv, false);
      l.permute_ssm(ssm, wssm, false);
    }
    const int n = run.length(r);
    const bool only_replay = io.store_final && n == 0;
    if (io.conv_pending) {
      const int pend = s.pending()[l.pending_index(run.layer, slot)];
      for (int i = 0; i < pend; ++i) {
        step.load_record(s.record(run.layer, slot, s.path()[l.path_index(slot, i)]));
        step.shift_conv(wconv);
      }
      if (pend > 0 && (io.store_replayed || only_replay) && !in_place) {
        l.permute_conv(wconv, conv, true);
      }
    }
    // The settled cursor: a fold (this verify's, or the first verify's of this round) makes the
    // checkpoint the post-history state.
    int base = 0, hist = 0;
    if (s.base(Buf::kCursor) != nullptr) {
      base = s.cursor(run.layer, slot)[0];
      hist = s.cursor(run.layer, slot)[1];
    }
    const bool folds = io.fold && kernels::replay_folds(hist, io.fold_limit);
    if (io.settled && folds) {
      kernels::consume_cursor(base, hist, l.ring);
    } else if (io.history) {
      for (int i = 0; i < hist; ++i)
        step.apply_factor(wssm, s.factor(run.layer, slot, (base + i) % l.ring));
      if ((folds || (!io.fold && hist > 0 && (io.store_replayed || only_replay))) && !in_place) {
        l.permute_ssm(wssm, ssm, true);
      }
      if (folds) kernels::consume_cursor(base, hist, l.ring);
    }
    const int64_t token0 = run.token0(r);  // the row's tokens in the inputs
    if (!run.plan) {
      // Advance: a chain from the (replayed) committed state, stored once at the end.
      for (int i = 0; i < n; ++i) {
        step.load_inputs(token0 + i);
        step.step(wconv, wconv, wssm, wssm, token0 + i);
      }
      if (io.store_final && n > 0 && !in_place) {
        l.permute_conv(wconv, conv, true);
        l.permute_ssm(wssm, ssm, true);
      }
      continue;
    }
    // Verify: token t starts from its parent's state (the row's start state for the root).
    if (!io.store_tokens) assign_node_buffers(&run.plan->parents[std::size_t(r) * T], n, scratch);
    for (int t = 0; t < n; ++t) {
      const int parent = run.plan->parents[static_cast<std::size_t>(r) * T + t];
      const char *prev_conv, *prev_ssm;
      char *next_conv, *next_ssm;
      const bool permuted = io.store_tokens && !l.canonical();
      if (permuted) {
        // Snapshots in the layout's order: the parent's read into, the token's state written
        // from, canonical working copies.
        if (parent >= 0) {
          l.permute_conv(s.snap_conv(run.layer, r, parent), prev.conv.data(), false);
          l.permute_ssm(s.snap_ssm(run.layer, r, parent), prev.ssm.data(), false);
        }
        prev_conv = parent < 0 ? wconv : prev.conv.data();
        prev_ssm = parent < 0 ? wssm : prev.ssm.data();
        next_conv = next.conv.data();
        next_ssm = next.ssm.data();
      } else if (io.store_tokens) {
        prev_conv = parent < 0 ? wconv : s.snap_conv(run.layer, r, parent);
        prev_ssm = parent < 0 ? wssm : s.snap_ssm(run.layer, r, parent);
        next_conv = s.snap_conv(run.layer, r, t);
        next_ssm = s.snap_ssm(run.layer, r, t);
      } else {
        StateBuf* from = parent < 0 ? nullptr : &nodes[scratch.node_buffer[parent]];
        StateBuf& to = nodes[scratch.node_buffer[t]];
        prev_conv = from ? from->conv.data() : wconv;
        prev_ssm = from ? from->ssm.data() : wssm;
        next_conv = to.conv.data();
        next_ssm = to.ssm.data();
      }
      step.load_inputs(token0 + t);
      void* factor = nullptr;
      if (io.write_records) {
        step.store_record(s.record(run.layer, slot, t));
        factor = s.factor(run.layer, slot, (base + hist + t) % l.ring);
      }
      step.step(prev_conv, next_conv, prev_ssm, next_ssm, token0 + t, factor);
      if (permuted) {
        l.permute_conv(next.conv.data(), s.snap_conv(run.layer, r, t), true);
        l.permute_ssm(next.ssm.data(), s.snap_ssm(run.layer, r, t), true);
      }
    }
  }
}

class CpuBackend final : public BackendImpl {
 public:
  Backend kind() const noexcept override { return Backend::kCpu; }
  Device device() const noexcept override { return Device::kCpu; }

  Status can_implement(const Layout& layout, const ModelConfig&, std::string* why) const override {
    // Host memory: refuse a pool larger than the machine before touching any of it, counting
    // the working copies its layer calls may hold (max_working_states; saturated, not wrapped).
    const int64_t state = layout.conv_bytes + layout.ssm_bytes;
    const int64_t copies = max_working_states(layout);
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    const int64_t working = state > 0 && copies > kMax / state ? kMax : copies * state;
    const int64_t owned = layout.owned_bytes();
    const int64_t total = owned > kMax - working ? kMax : owned + working;
    const int64_t limit = physical_bytes();
    if (limit > 0 && total > limit) {
      *why =
          "the pool needs " + std::to_string(total) + " bytes of host memory (" +
          (layout.caller_committed ? std::string("the committed state is the caller's; ")
                                   : std::to_string(layout.committed_bytes()) + " committed + ") +
          std::to_string(layout.workspace_bytes()) + " " + strategy_name(layout.strategy) +
          " workspace + " + std::to_string(working) +
          " for the CPU backend's working copies: " + std::to_string(copies) +
          " states of one slot's layer" +
          (layout.strategy == Strategy::kReplay
               ? ", as many as a tree window of max_window = " + std::to_string(layout.max_window) +
                     " tokens may hold at once"
               : std::string()) +
          "), more than the machine's " + std::to_string(limit);
      return Status::kResourceExhausted;
    }
    return Status::kSuccess;
  }

  void allocate(PoolStorage& s) override {
    const Layout& l = s.layout;
    int64_t total = 0;
    for (int b = 0; b < static_cast<int>(Buf::kCount); ++b) {
      if (!l.owns(static_cast<Buf>(b))) continue;
      s.buffers[b] = allocate_zeroed(static_cast<std::size_t>(l.bytes[b]));
      total += l.bytes[b];
      if (!s.buffers[b]) {
        free(s);
        throw Error(Status::kResourceExhausted,
                    "StatePool: cannot allocate " + std::to_string(l.total_bytes()) +
                        " bytes of host memory (failed at the " + buf_name(static_cast<Buf>(b)) +
                        ", " + std::to_string(l.bytes[b]) + " bytes)");
      }
    }
    try {
      if (!l.caller_committed) s.bind_owned_committed();  // its per-layer tables may not fit
    } catch (...) {
      free(s);  // as the CUDA backend does: the buffers above leaked
      throw;
    }
    logger().debug("cpu backend: {} bytes", total);
  }

  void free(PoolStorage& s) noexcept override {
    for (void*& p : s.buffers) {
      std::free(p);
      p = nullptr;
    }
  }

  void zero_slot(const PoolStorage& s, int slot) override {
    for (int l = 0; l < s.layout.layers; ++l) {
      std::memset(s.conv(l, slot), 0, s.layout.conv_bytes);
      std::memset(s.ssm(l, slot), 0, s.layout.ssm_bytes);
      if (s.pending()) s.pending()[s.layout.pending_index(l, slot)] = 0;
      if (s.base(Buf::kCursor)) s.cursor(l, slot)[0] = s.cursor(l, slot)[1] = 0;
    }
  }

  void copy_slot(const PoolStorage& s, int src, int dst) override {
    for (int l = 0; l < s.layout.layers; ++l) {
      std::memcpy(s.conv(l, dst), s.conv(l, src), s.layout.conv_bytes);
      std::memcpy(s.ssm(l, dst), s.ssm(l, src), s.layout.ssm_bytes);
    }
  }

  void export_slot(const PoolStorage& s, int slot, void* buffer, Device) override {
    char* out = static_cast<char*>(buffer);
    for (int l = 0; l < s.layout.layers; ++l) {
      std::memcpy(out, s.conv(l, slot), s.layout.conv_bytes);
      out += s.layout.conv_bytes;
      std::memcpy(out, s.ssm(l, slot), s.layout.ssm_bytes);
      out += s.layout.ssm_bytes;
    }
  }

  void import_slot(const PoolStorage& s, int slot, const void* buffer, Device) override {
    const char* in = static_cast<const char*>(buffer);
    for (int l = 0; l < s.layout.layers; ++l) {
      std::memcpy(s.conv(l, slot), in, s.layout.conv_bytes);
      in += s.layout.conv_bytes;
      std::memcpy(s.ssm(l, slot), in, s.layout.ssm_bytes);
      in += s.layout.ssm_bytes;
    }
  }

  void run_gdn(const PoolStorage& s, const LayerRun& run, const GdnWeights& weights,
               const GdnInputs& inputs, const GdnOutputs& outputs) override {
    auto step = make_step<cpu::GdnStep>(s, s.config.gdn, weights, inputs, outputs);
    run_rows(s, run, *step, scratch_);
  }

  void run_mamba2(const PoolStorage& s, const LayerRun& run, const Mamba2Weights& weights,
                  const Mamba2Inputs& inputs, const Mamba2Outputs& outputs) override {
    auto step = make_step<cpu::Mamba2Step>(s, s.config.mamba, weights, inputs, outputs);
    run_rows(s, run, *step, scratch_);
  }

  void run_kda(const PoolStorage& s, const LayerRun& run, const KdaWeights& weights,
               const KdaInputs& inputs, const KdaOutputs& outputs) override {
    auto step = make_step<cpu::KdaStep>(s, s.config.kda_layer, weights, inputs, outputs);
    run_rows(s, run, *step, scratch_);
  }

  // A kind's token step, whose constructor sizes every buffer its tokens use (a token
  // allocates nothing): a host that cannot hold them refuses the call before any row is
  // written, as run_rows refuses its working states (it was a plain std::bad_alloc).
  template <typename Step, typename Config, typename... Views>
  static std::unique_ptr<Step> make_step(const PoolStorage& s, const Config& config,
                                         const Views&... views) {
    try {
      return std::make_unique<Step>(config, views...);
    } catch (const std::bad_alloc&) {
      throw Error(Status::kResourceExhausted,
                  "CPU backend: cannot allocate the token step's buffers of this layer call "
                  "(conv_dim " +
                      std::to_string(s.layout.shapes.conv_dim) + ", conv_width " +
                      std::to_string(s.layout.shapes.conv_width) + ")");
    }
  }

  void commit_copy(const PoolStorage& s, const CommitWork& work) override {
    const RoundPlan& plan = *work.plan;
    for (int l = 0; l < s.layout.layers; ++l) {
      for (int r = 0; r < plan.rows; ++r) {
        const int step = work.last_step[r];
        const int slot = plan.slots[r];
        if (slot < 0 || step < 0) continue;
        std::memcpy(s.conv(l, slot), s.snap_conv(l, r, step), s.layout.conv_bytes);
        std::memcpy(s.ssm(l, slot), s.snap_ssm(l, r, step), s.layout.ssm_bytes);
      }
    }
    logger().trace("cpu commit (copy): {} rows x {} layers", plan.rows, s.layout.layers);
  }

  void commit_pending(const PoolStorage& s, const CommitWork& work) override {
    const RoundPlan& plan = *work.plan;
    const Layout& l = s.layout;
    std::vector<int32_t> path;
    std::vector<char> moved;
    for (int r = 0; r < plan.rows; ++r) {
      const int slot = plan.slots[r];
      if (slot < 0) continue;
      // The accepted steps root..last, in order (a chain: 0..a-1; a tree: the node's path).
      path.clear();
      for (int t = work.last_step[r]; t >= 0; t = plan.parents[std::size_t(r) * plan.window + t]) {
        path.push_back(t);
      }
      std::reverse(path.begin(), path.end());
      const int n = static_cast<int>(path.size());
      for (int i = 0; i < n; ++i) s.path()[l.path_index(slot, i)] = path[i];
      for (int layer = 0; layer < l.layers; ++layer) {
        s.pending()[l.pending_index(layer, slot)] = n;
        int32_t* cur = s.cursor(layer, slot);
        kernels::settle_cursor(cur[0], cur[1], l.ring, plan.fold_limit);
        // The window's records sit at base + h + t; the accepted path's move to base + h + i
        // (p_i >= i, ascending: a record is read before its position is overwritten).
        for (int i = 0; i < n; ++i) {
          if (path[i] == i) continue;
          std::memcpy(s.factor(layer, slot, (cur[0] + cur[1] + i) % l.ring),
                      s.factor(layer, slot, (cur[0] + cur[1] + path[i]) % l.ring),
                      static_cast<std::size_t>(l.factor_bytes));
        }
        cur[1] += n;
      }
    }
    logger().trace("cpu commit (pending): {} rows", plan.rows);
  }

  void clear_pending(const PoolStorage& s, int layer_begin, int layer_end,
                     const std::vector<int32_t>& slots, Clear how, int fold_limit) override {
    const Layout& l = s.layout;
    for (int layer = layer_begin; layer < layer_end; ++layer) {
      for (int32_t slot : slots) {
        if (slot < 0) continue;
        if (s.pending()) s.pending()[l.pending_index(layer, slot)] = 0;
        if (!s.base(Buf::kCursor)) continue;
        int32_t* cur = s.cursor(layer, slot);
        if (how == Clear::kSettled) {
          kernels::settle_cursor(cur[0], cur[1], l.ring, fold_limit);
        } else {
          kernels::consume_cursor(cur[0], cur[1], l.ring);
        }
      }
    }
  }

 private:
  RowScratch scratch_;  // run_rows' working states (a pool's calls do not overlap)

  static int64_t physical_bytes();
  static void* allocate_zeroed(std::size_t bytes) {
    // 64-byte alignment for the Eigen maps.
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p) std::memset(p, 0, rounded == 0 ? 64 : rounded);
    return p;
  }
};

}  // namespace
}  // namespace specstate::detail

#include <unistd.h>

namespace specstate::detail {
namespace {
int64_t CpuBackend::physical_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t{pages} * page : 0;
}
}  // namespace

std::unique_ptr<BackendImpl> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace specstate::detail
