// StatePool, SlotHandle and VerifyBatch. Pool calls release the GIL; on a CUDA pool every call
// takes an optional `stream`: the caller's stream, ordered with the pool's stream through events
// (no host synchronisation; capturable under CUDA graphs).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"

#ifdef SPECSTATE_PY_CUDA
#include <cuda_runtime.h>
#endif

namespace specstate::py {
namespace {

// Runs `call` (an export_slot / import_slot over the byte view `v` the binding made of the
// caller's array `a`); a library error that describes the view (i32[1616]) is raised again
// naming the array the caller gave (uint8[6464]).
template <typename F>
void naming_caller_array(const char* name, const TensorView& v, const Arg& a, F&& call) {
  try {
    call();
  } catch (const Error& e) {
    std::string what = e.what();
    const std::string view = std::string(name) + " (" + v.describe() + ")";
    const std::size_t at = what.find(view);
    if (at == std::string::npos) throw;
    what.replace(at, view.size(), std::string(name) + " (" + array_text(a.array) + ")");
    const std::size_t prefix = what.find(": ");  // Error prepends the status name
    throw Error(e.status(), prefix == std::string::npos ? what : what.substr(prefix + 2));
  }
}

// A StatePool built without the GIL (seconds for a large pool: allocation and zeroing), from
// copies of the caller's config and options (another thread may change those objects meanwhile).
// `views`: caller-owned committed state, or null. The Python objects behind the views are held
// by the caller of this function, which keeps the GIL-side references.
StatePool build_pool(const ModelConfig& config, const PoolOptions& options,
                     const CommittedStateViews* views) {
  const ModelConfig c = config;
  const PoolOptions o = options;
  nb::gil_scoped_release release;
  return views != nullptr ? StatePool(c, o, *views) : StatePool(c, o);
}

class PyPool {
 public:
  // The pool is built first, without the GIL (build_pool: allocating and zeroing gigabytes
  // takes seconds), then adopted here. Over caller-owned committed state (DESIGN.md section 4),
  // the imported arrays (their DLPack capsule or buffer export, which keeps the memory from being
  // released or resized) stay held for the pool's lifetime.
  // A torch tensor of the caller-owned committed state, with its layer and name (check_unmoved).
  struct CommittedTensor {
    Arg arg;
    int layer = 0;
    std::string name;
  };
  explicit PyPool(StatePool&& pool, std::vector<nb::ndarray<>> held = {},
                  std::vector<CommittedTensor> tensors = {})
      : config_(pool.config()),
        options_(pool.options()),
        committed_tensors_(std::move(tensors)),
        committed_arrays_(std::move(held)),
        pool_(std::move(pool)),
        stream_(reinterpret_cast<uintptr_t>(pool_.options().stream)) {}
  ~PyPool() {
    // Dropped open (no close()) over a committed torch tensor that moved: the pool's destructor
    // would materialize into the memory it no longer owns.
    if (!closed_.load() && !committed_tensors_.empty() && !moved_committed(true).empty()) {
      pool_.discard();
    }
#ifdef SPECSTATE_PY_CUDA
    if (events_ready_) {
      cudaEventDestroy(ready_);
      cudaEventDestroy(done_);
    }
#endif
  }

  // The pool, or kFailedPrecondition naming close() once it is closed. Calls on it hold the
  // pool's lock (locked, guarded): close() moves it out under that lock.
  StatePool& pool() {
    check_open();
    return pool_;
  }
  void check_open() const {
    if (closed_.load()) {
      throw Error(Status::kFailedPrecondition,
                  "StatePool: the pool is closed (close(), or the end of its with block, freed "
                  "it); only close() and the closed property remain");
    }
  }
  // The pool's configuration, fixed at construction: copies read without the lock, never the
  // pool itself (which a close() on another thread may be moving out).
  const ModelConfig& config() const {
    check_open();
    return config_;
  }
  const PoolOptions& options() const {
    check_open();
    return options_;
  }
  bool closed() const { return closed_.load(); }
  // Frees the pool's memory now, without the GIL and under the pool's lock (dropping the last
  // reference frees it too, but holding the GIL while a large pool is freed). A caller-owned
  // pool materializes its live slots into the caller's memory first, as its destructor does; an
  // error there is raised and the pool stays open. Where a committed torch tensor has moved the
  // pool is discarded instead (nothing written there), closed, and then that is raised. Then the
  // held arrays (caller-owned committed state, the round's device offsets) are let go. A second
  // close() does nothing.
  void close() {
    // A committed torch tensor that moved: the pool is discarded (its live slots' deferred state
    // is not written into memory that is no longer the tensor's), then the error says so.
    const std::string moved = closed_.load() ? std::string() : moved_committed(false);
    {
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_.load()) return;
      if (const int views = views_.load(); views > 0) {
        // A zero-copy view (and any array made from it) reads the pool's memory: freeing it
        // under them would leave them dangling.
        throw Error(Status::kFailedPrecondition,
                    "StatePool.close(): " + std::to_string(views) +
                        " zero-copy view(s) of the pool's memory (conv_state, ssm_state, "
                        "workspace, snapshot_conv / snapshot_ssm, or an array made from one) are "
                        "alive; drop them (del) first. The pool stays open");
      }
      if (!moved.empty()) {
        pool_.discard();
      } else {
        if (!committed_arrays_.empty()) pool_.materialize();
        StatePool dead(std::move(pool_));  // freed at the end of this block, without the GIL
      }
      closed_.store(true);
    }
    committed_arrays_.clear();
    committed_tensors_.clear();
    round_array_ = nb::ndarray<>();
    stream_owner_ = nb::object();
    if (!moved.empty()) {
      throw Error(Status::kInvalidArgument,
                  "StatePool.close(): " + moved +
                      "; the pool is closed without writing its live slots' deferred state "
                      "there");
    }
  }
  // Raises (naming the tensor) where a torch tensor of the caller-owned committed state has
  // moved to new memory since the pool took it: the pool would write freed memory. `layer`: that
  // layer's tensors only (a layer call), -1 every layer's. With the GIL. (The tensors are copied
  // first: a query runs Python code, during which another thread may close() the pool.)
  void check_committed_unmoved(int layer) const {
    if (committed_tensors_.empty()) return;
    const std::vector<CommittedTensor> tensors = committed_tensors_;
    for (const CommittedTensor& t : tensors) {
      if (layer >= 0 && t.layer != layer) continue;
      if (const std::optional<TorchMove> m = torch_moved(t.arg, /*base=*/true)) {
        throw Error(Status::kInvalidArgument,
                    t.name + ": " + moved_text(*m) +
                        "; the pool cannot follow it: close() it (its live slots' deferred "
                        "state is then not written) and build a pool over the tensor as it is");
      }
    }
  }
  // The first committed torch tensor that moved ("" when none), for close(): a failed query
  // raises there (the pool stays open). `dropping` (the destructor): the caller's pending Python
  // error is kept aside, and a query that fails (interpreter shutdown, a subclass's data_ptr())
  // counts as moved: losing deferred steps is safer than writing memory that may be freed.
  std::string moved_committed(bool dropping) const {
    if (committed_tensors_.empty()) return {};
    const std::vector<CommittedTensor> tensors = committed_tensors_;
    if (!dropping) {
      for (const CommittedTensor& t : tensors) {
        if (const std::optional<TorchMove> m = torch_moved(t.arg, /*base=*/true))
          return t.name + ": " + moved_text(*m);
      }
      return {};
    }
    nb::error_scope keep;  // a pending exception (the pool dropped while one propagates)
    for (const CommittedTensor& t : tensors) {
      try {
        if (const std::optional<TorchMove> m = torch_moved(t.arg, /*base=*/true))
          return t.name + ": " + moved_text(*m);
      } catch (...) {
        PyErr_Clear();
        return t.name + ": its address could not be read";
      }
    }
    return {};
  }
  std::mutex& mutex() { return mutex_; }
  // Live zero-copy views of the pool's memory, which close() refuses to free under. A view is
  // counted under the pool's lock by the call that makes it (count_view, so that a close() on
  // another thread runs either before that call, which then raises, or after the count, and
  // refuses), and uncounted when its owner (view_owner) dies.
  void count_view() { views_.fetch_add(1); }
  void uncount_view() { views_.fetch_sub(1); }
  // The owner of a counted view: it keeps the pool object (`self`) alive and uncounts the view
  // when the last array over it is gone. On failure the count is given back.
  nb::object view_owner(nb::handle self) {
    struct Lease {
      PyObject* pool;
      PyPool* owner;
    };
    Lease* lease = nullptr;
    try {
      lease = new Lease{self.ptr(), this};
      nb::capsule owner(lease, [](void* ptr) noexcept {
        auto* l = static_cast<Lease*>(ptr);
        l->owner->uncount_view();  // before the reference: it may be the pool's last
        Py_DECREF(l->pool);
        delete l;
      });
      self.inc_ref();
      return owner;
    } catch (...) {
      delete lease;
      uncount_view();
      throw;
    }
  }
  uintptr_t stream() const { return stream_; }
  // The caller stream of calls that name none, and the Python object it came from (kept alive:
  // a stream object may destroy its stream when collected). Under the pool's lock.
  // Returns the previous object, for the caller to release with the GIL.
  nb::object set_stream(uintptr_t s, nb::object owner) {
    stream_ = s;
    std::swap(stream_owner_, owner);
    return owner;
  }
  bool is_cuda() const { return options_.backend == Backend::kCuda; }
  // Under the pool's lock, by the begin_verify that opened the round: `array` and the last
  // round's array change places (no reference count changes, so no GIL is needed; the caller
  // releases the old one with the GIL). Held outside the lock, a begin_verify on one thread
  // could keep its array after another thread's round had begun, and that round's array could
  // be freed while its kernels read it. close() clears it after its own lock, with the GIL; a
  // begin_verify after close() fails before this.
  void swap_round_array(nb::ndarray<>& array) { std::swap(round_array_, array); }

  // Orders the pool's stream after `caller` (enter) and `caller` after the pool's work (leave).
  // A no-op on CPU pools and when the caller's stream is the pool's.
  class Bridge {
   public:
    Bridge(PyPool& p, std::optional<uintptr_t> caller) : p_(p) {
#ifdef SPECSTATE_PY_CUDA
      if (!p.is_cuda()) return;
      caller_ = caller.value_or(p.stream_);
      pool_stream_ = reinterpret_cast<uintptr_t>(p.options_.stream);
      if (caller_ == pool_stream_) return;
      p.ensure_events();
      check(cudaEventRecord(p.ready_, as_stream(caller_)), "recording on the caller's stream");
      check(cudaStreamWaitEvent(as_stream(pool_stream_), p.ready_, 0), "ordering the pool");
      active_ = true;
#else
      (void)caller;
#endif
    }
    // After the call returned: orders the caller's stream after the pool's work; throws if the
    // device refuses.
    void leave() {
#ifdef SPECSTATE_PY_CUDA
      if (!active_) return;
      active_ = false;
      check(cudaEventRecord(p_.done_, as_stream(pool_stream_)), "recording on the pool's stream");
      check(cudaStreamWaitEvent(as_stream(caller_), p_.done_, 0),
            "ordering the caller's stream after the pool");
#endif
    }
    // The call threw: the same ordering, best effort (a destructor does not throw).
    ~Bridge() noexcept {
#ifdef SPECSTATE_PY_CUDA
      if (!active_) return;
      if (cudaEventRecord(p_.done_, as_stream(pool_stream_)) == cudaSuccess)
        cudaStreamWaitEvent(as_stream(caller_), p_.done_, 0);
#endif
    }
    Bridge(const Bridge&) = delete;
    Bridge& operator=(const Bridge&) = delete;

   private:
    PyPool& p_;
#ifdef SPECSTATE_PY_CUDA
    static cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
    static void check(cudaError_t e, const char* what) {
      if (e != cudaSuccess)
        throw Error(Status::kBackendError, std::string(what) + ": " + cudaGetErrorString(e));
    }
    uintptr_t caller_ = 0, pool_stream_ = 0;
    bool active_ = false;
#endif
  };

 private:
#ifdef SPECSTATE_PY_CUDA
  void ensure_events() {
    if (events_ready_) return;
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(options_.device);
    cudaError_t e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
    cudaSetDevice(previous);
    if (e != cudaSuccess)
      throw Error(Status::kBackendError, std::string("creating events: ") + cudaGetErrorString(e));
    events_ready_ = true;
  }
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool events_ready_ = false;
#endif
  // The arrays the pool's kernels read or write are declared before the pool, so they are
  // released after it: the pool's destructor waits for its queued work (CUDA: a device-wide
  // synchronize before freeing), and only then may the caller's framework reuse their memory.
  const ModelConfig config_;
  const PoolOptions options_;
  std::vector<CommittedTensor> committed_tensors_;  // the torch tensors among them
  std::vector<nb::ndarray<>> committed_arrays_;
  nb::ndarray<> round_array_;  // the open round's device cu_seqlens (read by the kernels)
  StatePool pool_;
  uintptr_t stream_ = 0;     // the caller's stream when a call names none
  nb::object stream_owner_;  // the Python object stream_ came from (set_stream)
  std::mutex mutex_;
  std::atomic<bool> closed_{false};
  std::atomic<int> views_{0};  // live zero-copy views (view_owner)
};

// Runs `fn` (a read of the pool's host state: no device work) without the GIL, under the pool's
// lock: another thread may be inside a call that released the GIL and rewrites that state.
template <typename Fn>
auto guarded(PyPool& p, Fn&& fn) {
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(p.mutex());
  return fn(static_cast<const StatePool&>(p.pool()));
}

// Runs `fn` on the pool without the GIL, under the pool's lock, in stream order with `stream`.
// `layer`: the one layer whose committed memory the call touches (a layer call), or -1: any.
template <typename Fn>
auto locked(PyPool& p, nb::handle stream, Fn&& fn, int layer = -1) {
  const std::optional<uintptr_t> s = to_stream(stream, "stream");
  p.check_committed_unmoved(layer);
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(p.mutex());
  PyPool::Bridge bridge(p, s);
  if constexpr (std::is_void_v<decltype(fn(p.pool()))>) {
    fn(p.pool());
    bridge.leave();
  } else {
    auto result = fn(p.pool());
    bridge.leave();
    return result;
  }
}

// A zero-copy view of the pool's memory made by `make` (a StatePool view accessor), counted
// under the pool's lock (PyPool::count_view) and owned by the pool object.
template <typename Fn>
DLPackView pool_view(nb::handle_t<PyPool> self, nb::handle stream, Fn&& make) {
  PyPool& p = initialized<PyPool>(self, "self");
  int device = 0;
  bool counted = false;
  TensorView v;
  try {
    v = locked(p, stream, [&](StatePool& s) {
      const TensorView view = make(s);
      device = s.options().device;
      p.count_view();
      counted = true;
      return view;
    });
  } catch (...) {
    if (counted) p.uncount_view();  // the stream ordering after it failed: no view
    throw;
  }
  return DLPackView{view_to_python(v, device, p.view_owner(self))};
}

// A CUDA array on another GPU than the pool's (options.device) is refused: TensorView carries no
// device index, so the library cannot tell, and a kernel of cuda:want would read it through peer
// access at best.
void check_device_id(const Arg& a, int want, const char* name) {
  if (a.view.empty() || a.view.device != Device::kCuda) return;
  if (a.device_id != want)
    throw nb::value_error((std::string(name) + ": array on cuda:" + std::to_string(a.device_id) +
                           ", the pool is on cuda:" + std::to_string(want))
                              .c_str());
}

// CUDA pools only: a CPU pool refuses every device array itself, with the message that says why
// (a cuda:1 array for a CPU pool was called "on cuda:1, the pool is on cuda:0").
void check_device(const PyPool& p, const Arg& a, const char* name) {
  if (!p.is_cuda()) return;
  check_device_id(a, p.options().device, name);
}

template <typename W, typename I, typename O>
void check_layer_args(const PyPool& p, const W& w, const I& in, const O& out) {
  auto check = [&](const Arg& a, const char* name) {
    check_device(p, a, name);
    check_unmoved(a, name);
  };
  w.each(check);
  in.each(check);
  out.each(check);
}

std::string handle_repr(const SlotHandle& h) {
  if (h.is_padding()) return "SlotHandle.padding()";
  // pool_id too: handles of two pools with the same slot and generation compare unequal.
  return "SlotHandle(slot=" + std::to_string(h.slot) +
         ", generation=" + std::to_string(h.generation) + ", pool_id=" + std::to_string(h.pool_id) +
         ")";
}

// An int argument (int, numpy integer: anything with __index__, not bool); TypeError naming `name`.
int to_int(nb::handle object, const char* function, const char* name) {
  if (!PyBool_Check(object.ptr()) && PyIndex_Check(object.ptr())) {
    nb::object index = index_or_type_error(object, name);
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow == 0 && v >= INT32_MIN && v <= INT32_MAX) return static_cast<int>(v);
    throw Error(Status::kOutOfRange, std::string(function) + ": " + name + " = " +
                                         nb::cast<std::string>(nb::str(index)) +
                                         " is out of range");
  }
  throw nb::type_error(
      (std::string(name) + ": expected an int, got " + arg_type_name(object)).c_str());
}

// to_arg (read-only, not None) for an argument of integers (commit's accepted values,
// begin_verify's cu_seqlens): its type errors name what the argument takes, not the layer arrays'
// dtypes
// (`takes` in place of theirs, `numpy_takes` in place of NumPy's hint; `takes` appended to an
// error that names neither: an object that is no array at all). A ValueError (a null data
// pointer, too many dimensions) stays one.
Arg to_int_arg(nb::handle object, const char* name, const std::string& takes,
               const std::string& numpy_takes) {
  try {
    return to_arg(object, name, false, false);
  } catch (const nb::builtin_exception& e) {
    if (e.type() != nb::exception_type::type_error) throw;
    std::string m = e.what();
    const std::string layer_hint = "(float32, bfloat16 or int32)";
    const std::string numpy_hint = "np.ascontiguousarray of float32, bfloat16 or int32";
    if (const std::size_t at = m.find(layer_hint); at != std::string::npos) {
      m.replace(at, layer_hint.size(), takes);
    } else if (const std::size_t np_at = m.find(numpy_hint); np_at != std::string::npos) {
      m.replace(np_at, numpy_hint.size(), numpy_takes);
    } else {
      m += " " + takes;
    }
    throw nb::type_error(m.c_str());
  }
}

// export_slot / import_slot's `dst` / `src`, or its legacy keyword `path`: one of the two.
nb::handle pick_target(nb::handle positional, nb::handle path, const char* function,
                       const char* name) {
  if (path.is_none()) return positional;
  if (!positional.is_none())
    throw nb::type_error((std::string(function) + ": give " + name + " or path, not both").c_str());
  if (!as_path(path))
    throw nb::type_error(
        (std::string("path: expected a str or os.PathLike, got ") + arg_type_name(path)).c_str());
  return path;
}

const char* kStreamDoc =
    " `stream`: CUDA pools only, the caller's stream (int handle, e.g. "
    "torch.cuda.current_stream().cuda_stream, or a stream object); the call is ordered after "
    "the work queued there and the caller's later work after the call, without a host sync. "
    "None: StatePool.stream.";

// One layer call: the arguments checked and taken as views, `call(pool, w, in, out)` under the
// pool's lock and stream bridge. The call holds its own references to every array (copies of the
// argument structs, taken with the GIL): Python code that runs before the GIL is released (the
// stream's `cuda_stream`) or another thread while it is released may reassign a field of the
// caller's struct, which dropped the array the call was reading or writing.
template <typename W, typename I, typename O, typename Call>
void layer_call(PyPool& p, int layer, nb::handle_t<W> weights, const I& in_arg, const O& out_arg,
                nb::handle stream, Call&& call) {
  const W w = initialized<W>(weights, "weights");
  const I in = in_arg;
  const O out = out_arg;
  check_layer_args(p, w, in, out);
  const auto wv = w.views();
  const auto iv = in.views();
  const auto ov = out.views();
  locked(
      p, stream,
      [&](StatePool& s) {
        call(s, wv, iv, ov);
        return 0;
      },
      layer);
}

// prefill / decode / verify for one layer kind's argument types (GDN or Mamba2 overloads).
template <typename W, typename I, typename O, typename Cls>
void bind_layer_calls(Cls& cls, const char* kind) {
  const std::string of = std::string(" (") + kind + " overload.)";
  // The handles are taken as objects and converted by to_handle / to_handles (an argument named
  // in the error, with a hint for a slot index); the signatures keep their types for the stubs.
  const std::string k = std::string(kind).substr(0, std::string(kind).size() - 7);  // "Weights"
  const std::string tail = ", weights: " + k + "Weights, inputs: " + k + "Inputs, outputs: " + k +
                           "Outputs, stream: object | None = None) -> None";
  cls.def(
         "prefill",
         [](PyPool& p, nb::handle layer_arg, nb::handle handle, nb::handle_t<W> weights,
            const I& in, const O& out, nb::handle stream) {
           const int layer = to_int(layer_arg, "StatePool.prefill", "layer");
           const SlotHandle h = *to_handle(handle, "handle", false);
           layer_call<W>(p, layer, weights, in, out, stream,
                         [&](StatePool& s, const auto& w, const auto& i, const auto& o) {
                           s.prefill(layer, h, w, i, o);
                         });
         },
         nb::sig(
             keep_text("def prefill(self, layer: typing.SupportsIndex, handle: SlotHandle" + tail)),
         nb::arg("layer").none(), nb::arg("handle").none(), nb::arg("weights"), nb::arg("inputs"),
         nb::arg("outputs"), nb::arg("stream").none() = nb::none(),
         (std::string("Advances one request's committed state of `layer` in place over n "
                      "tokens (inputs [n, ...], in order).") +
          kStreamDoc + of)
             .c_str())
      .def(
          "prefill_batch",
          [](PyPool& p, nb::handle layer_arg, nb::handle handles_arg, IntList lengths_arg,
             nb::handle_t<W> weights, const I& in, const O& out, nb::handle stream) {
            const int layer = to_int(layer_arg, "StatePool.prefill_batch", "layer");
            const std::vector<SlotHandle> handles = to_handles(handles_arg, "handles");
            const std::vector<int32_t> lengths =
                to_int_vector<int32_t>(lengths_arg, "StatePool.prefill_batch: lengths");
            layer_call<W>(p, layer, weights, in, out, stream,
                          [&](StatePool& s, const auto& w, const auto& i, const auto& o) {
                            s.prefill(layer, handles, lengths, w, i, o);
                          });
          },
          nb::sig(keep_text("def prefill_batch(self, layer: typing.SupportsIndex, handles: "
                            "Sequence[SlotHandle], lengths: specstate._types.IntSequence" +
                            tail)),
          nb::arg("layer").none(), nb::arg("handles").none(), nb::arg("lengths"),
          nb::arg("weights"), nb::arg("inputs"), nb::arg("outputs"),
          nb::arg("stream").none() = nb::none(),
          (std::string("Batched variable-length prefill: handles[r] advances by lengths[r] "
                       "tokens packed at lengths[0] + .. + lengths[r-1] (inputs hold "
                       "sum(lengths) tokens); equal to one prefill per request.") +
           kStreamDoc + of)
              .c_str())
      .def(
          "decode",
          [](PyPool& p, nb::handle layer_arg, nb::handle rows_arg, nb::handle_t<W> weights,
             const I& in, const O& out, nb::handle stream) {
            const int layer = to_int(layer_arg, "StatePool.decode", "layer");
            const std::vector<SlotHandle> rows = to_handles(rows_arg, "rows");
            layer_call<W>(p, layer, weights, in, out, stream,
                          [&](StatePool& s, const auto& w, const auto& i, const auto& o) {
                            s.decode(layer, rows, w, i, o);
                          });
          },
          nb::sig(keep_text(
              "def decode(self, layer: typing.SupportsIndex, rows: Sequence[SlotHandle]" + tail)),
          nb::arg("layer").none(), nb::arg("rows").none(), nb::arg("weights"), nb::arg("inputs"),
          nb::arg("outputs"), nb::arg("stream").none() = nb::none(),
          (std::string("One token per row (row r's token at r), advancing the committed state; "
                       "padding rows are skipped.") +
           kStreamDoc + of)
              .c_str())
      .def(
          "verify",
          [](PyPool& p, nb::handle layer_arg, nb::handle_t<W> weights, const I& in, const O& out,
             nb::handle stream) {
            const int layer = to_int(layer_arg, "StatePool.verify", "layer");
            layer_call<W>(p, layer, weights, in, out, stream,
                          [&](StatePool& s, const auto& w, const auto& i, const auto& o) {
                            s.verify(layer, w, i, o);
                          });
          },
          nb::sig(keep_text("def verify(self, layer: typing.SupportsIndex" + tail)),
          nb::arg("layer").none(), nb::arg("weights"), nb::arg("inputs"), nb::arg("outputs"),
          nb::arg("stream").none() = nb::none(),
          (std::string("Verifies `layer` for the open round: outputs for every window token "
                       "(inputs packed by row, [rows*T, ...]); the committed state is "
                       "unchanged.") +
           kStreamDoc + of)
              .c_str());
}

}  // namespace

// A pool built by build_pool (without the GIL) placed into `self`, with the GIL: nanobind checks
// that `self` is not yet initialized when __init__ starts, but two threads calling __init__ on
// one object (StatePool.__new__ then __init__ twice) both passed that check while their pools
// were built, and the second placement-new overwrote the first pool, in use by then (leaked,
// its handles dead). Nothing else runs between this check and nanobind marking `self` ready.
void adopt_built(nb::pointer_and_handle<PyPool> self, StatePool&& pool,
                 std::vector<nb::ndarray<>> held = {},
                 std::vector<PyPool::CommittedTensor> tensors = {}) {
  if (nb::inst_ready(self.h)) {
    StatePool dead(std::move(pool));  // (freed here; its caller-owned views are the caller's)
    throw nb::type_error(
        "StatePool.__init__: this StatePool was initialized meanwhile (by __init__ on another "
        "thread); the pool built here is dropped");
  }
  new (self.p) PyPool(std::move(pool), std::move(held), std::move(tensors));
}

void bind_pool(nb::module_& m) {
  nb::class_<SlotHandle>(m, "SlotHandle",
                         "A request's slot. Generation-checked: a released handle is stale.")
      .def(nb::init<>())
      .def_static("padding", &SlotHandle::padding, "The handle of a padding row.")
      .def_ro("slot", &SlotHandle::slot, "Slot index (-1: padding).")
      .def_ro("generation", &SlotHandle::generation, "Generation of the slot.")
      .def_ro("pool_id", &SlotHandle::pool_id, "Id of the pool that issued it.")
      .def("is_padding", &SlotHandle::is_padding, "Whether this is a padding row.")
      .def(
          "__eq__", [](const SlotHandle& a, const SlotHandle& b) { return a == b; },
          nb::sig("def __eq__(self, other: object, /) -> bool"), nb::is_operator())
      .def(
          "__ne__", [](const SlotHandle& a, const SlotHandle& b) { return a != b; },
          nb::sig("def __ne__(self, other: object, /) -> bool"), nb::is_operator())
      .def("__hash__",
           [](const SlotHandle& h) {
             return nb::hash(nb::make_tuple(h.slot, h.generation, h.pool_id));
           })
      .def("__copy__", [](const SlotHandle& h) { return h; })
      .def(
          "__deepcopy__", [](const SlotHandle& h, nb::handle) { return h; }, nb::arg("memo"))
      .def("__repr__", &handle_repr);

  nb::class_<VerifyBatch>(m, "VerifyBatch",
                          "One verify round: rows -> slots (SlotHandle.padding() for padding "
                          "rows), the window T and, for trees, parents ([T] shared or [B*T]).")
      .def(
          "__init__",
          [](VerifyBatch* self, nb::handle rows_arg, nb::handle window, IntList parents,
             IntList lengths) {
            std::vector<SlotHandle> rows = to_handles(rows_arg, "VerifyBatch.rows");
            const int t = to_integer<int>(window, "VerifyBatch.window");
            std::vector<int32_t> p = to_int_vector<int32_t>(parents, "VerifyBatch.parents");
            std::vector<int32_t> l = to_int_vector<int32_t>(lengths, "VerifyBatch.lengths");
            new (self) VerifyBatch{};
            self->rows = std::move(rows);
            self->window = t;
            self->parents = std::move(p);
            self->lengths = std::move(l);
          },
          nb::sig("def __init__(self, rows: Sequence[SlotHandle] = [], window: "
                  "typing.SupportsIndex = 1, "
                  "parents: specstate._types.IntSequence = (), lengths: "
                  "specstate._types.IntSequence = ()) -> None"),
          nb::arg("rows").none() = nb::tuple(), nb::arg("window").none() = 1,
          nb::arg("parents") = nb::tuple(), nb::arg("lengths") = nb::tuple(),
          "rows: list of SlotHandle; window: T (the largest with lengths); parents: [] (chain), "
          "[T] or [B*T] (with lengths: [sum(lengths)] packed or [B*T]); lengths: [] (every row "
          "T tokens) or [B] per-row windows 0..T, inputs packed by their cumulative offsets.")
      .def_prop_rw(
          "rows", [](const VerifyBatch& b) { return b.rows; },
          [](VerifyBatch& b, nb::handle v) { b.rows = to_handles(v, "VerifyBatch.rows"); },
          "The rows' handles (a copy: assign a new list to change them).")
      .def_prop_rw("window", field_getter(&VerifyBatch::window),
                   int_setter(&VerifyBatch::window, "VerifyBatch.window"), nb::arg("value").none(),
                   value_sig("window", "typing.SupportsIndex"),
                   "T tokens per row; token 0 is the root.")
      .def_prop_rw(
          "parents", [](const VerifyBatch& b) { return b.parents; },
          [](VerifyBatch& b, IntList v) {
            b.parents = to_int_vector<int32_t>(v, "VerifyBatch.parents");
          },
          "Empty (chain) or the tree's parents (a copy: assign a new list).")
      .def_prop_rw(
          "lengths", [](const VerifyBatch& b) { return b.lengths; },
          [](VerifyBatch& b, IntList v) {
            b.lengths = to_int_vector<int32_t>(v, "VerifyBatch.lengths");
          },
          "Empty, or [B] per-row windows (variable windows; tokens packed, no filler; a copy: "
          "assign a new list).")
      .def("is_tree", &VerifyBatch::is_tree, "Whether parents is non-empty.")
      .def("is_variable", &VerifyBatch::is_variable,
           "Whether the rows have their own windows (lengths; cu_seqlens goes to begin_verify).")
      .def("__repr__", [](const VerifyBatch& b) {
        return "VerifyBatch(rows=" + std::to_string(b.rows.size()) +
               ", window=" + std::to_string(b.window) + (b.is_tree() ? ", tree" : "") + ")";
      });

  auto pool =
      nb::class_<PyPool>(
          m, "StatePool",
          "Committed per-layer states of every request (a slot each), the verify scratch, and the "
          "protocol: acquire, prefill/decode, begin_verify, verify (every layer), commit, release. "
          "Every call validates its whole input first and raises specstate.Error without changing "
          "anything when it rejects.")
          .def(
              "__init__",
              [](nb::pointer_and_handle<PyPool> self, const ModelConfig& config,
                 const PoolOptions& options) {
                adopt_built(self, build_pool(config, options, nullptr), {});
              },
              nb::arg("config"), nb::arg("options"),
              "Allocates the pool (zeroed; without the GIL). Raises specstate.Error.")
          .def(
              "__init__",
              [](nb::pointer_and_handle<PyPool> self, const ModelConfig& config,
                 const PoolOptions& options, nb::handle committed_conv, nb::handle committed_ssm) {
                CommittedStateViews views;
                std::vector<nb::ndarray<>> held;
                std::vector<PyPool::CommittedTensor> tensors;
                // Any sequence of arrays (a list, a tuple), copied first and named item by item
                // (nb::list took lists only, with nanobind's unnamed signature error otherwise).
                const auto take = [&](nb::handle arrays, const char* name,
                                      std::vector<TensorView>& out) {
                  if (PyObject_CheckBuffer(arrays.ptr()) || nb::hasattr(arrays, "__dlpack__")) {
                    throw nb::type_error((std::string(name) +
                                          ": expected a sequence of arrays (one per layer), got "
                                          "one array, " +
                                          arg_type_name(arrays))
                                             .c_str());
                  }
                  // At most one array a layer and one more are copied: a longer sequence
                  // (range(2**26)) is refused before any of its items is read; one too long or
                  // too short gets the pool's count error, naming config.num_layers.
                  const Py_ssize_t most =
                      config.num_layers >= 1 && config.num_layers < kMaxSequenceItems
                          ? Py_ssize_t{config.num_layers} + 1
                          : kMaxSequenceItems;
                  const nb::object items =
                      sequence_items(arrays, name, most, "arrays (one per layer)");
                  for (Py_ssize_t l = 0; l < PyTuple_GET_SIZE(items.ptr()); ++l) {
                    const std::string arg = std::string(name) + "[" + std::to_string(l) + "]";
                    Arg a = to_arg(PyTuple_GET_ITEM(items.ptr(), l), arg.c_str(), true, false);
                    // (A tensor-parallel engine's rank r passes options.device = r.)
                    if (options.backend == Backend::kCuda) {
                      check_device_id(a, options.device, arg.c_str());
                    }
                    out.push_back(a.view);
                    held.push_back(a.array);  // the import, not only the object: an
                                              // exported buffer cannot be released under it
                    if (a.torch) tensors.push_back({a, static_cast<int>(l), arg});
                  }
                };
                take(committed_conv, "committed_conv", views.conv);
                take(committed_ssm, "committed_ssm", views.ssm);
                adopt_built(self, build_pool(config, options, &views), std::move(held),
                            std::move(tensors));
              },
              nb::arg("config"), nb::arg("options"), nb::arg("committed_conv").none(),
              nb::arg("committed_ssm").none(),
              "A pool over caller-owned committed state: committed_conv / committed_ssm are one "
              "array per layer ([slots, conv_dim, W-1] and [slots, HV, V, K], e.g. slices of an "
              "engine's [L, slots, ...] tensors; padded slot strides allowed, each slot "
              "contiguous), read and written in place and kept alive by the pool. Raises "
              "specstate.Error naming the array it cannot adopt.")
          .def(
              "close", &PyPool::close,
              "Frees the pool's memory now, without the GIL (dropping the last reference frees it "
              "too, holding the GIL meanwhile). A caller-owned pool first materializes its live "
              "slots into the caller's memory, as on destruction; if that raises, the pool stays "
              "open. Where a torch tensor of that memory has moved to new memory (share_memory_(), "
              "`.data =`), nothing is written there: the pool is closed, then "
              "InvalidArgumentError names the tensor. While a zero-copy view of the pool "
              "(conv_state, ssm_state, workspace, "
              "snapshot_conv / snapshot_ssm, or an array made from one) is alive it raises "
              "FailedPreconditionError and the pool stays open. Afterwards every call raises "
              "FailedPreconditionError; close() again does nothing. `with StatePool(...) as "
              "pool:` closes it at the end of the block.")
          .def_prop_ro("closed", &PyPool::closed, "Whether close() has freed the pool.")
          .def(
              "__enter__", [](nb::handle self) { return nb::borrow(self); },
              nb::sig("def __enter__(self) -> StatePool"))
          .def(
              "__exit__",
              [](PyPool& p, nb::handle exc_type, nb::handle, nb::handle) {
                if (exc_type.is_none()) {
                  p.close();
                  return;
                }
                // The block raised: its exception propagates, not close()'s (views still alive
                // or a caller-owned pool's materialize failing: the pool then stays open and is
                // freed with its last reference; a moved committed tensor: closed).
                try {
                  p.close();
                } catch (const Error&) {
                }
              },
              nb::arg("exc_type").none(), nb::arg("exc_value").none(), nb::arg("traceback").none(),
              // -> None, not bool: type checkers take a bool __exit__ for one that may swallow
              // the block's exception (`with StatePool(...) as p: return ...` then "missing
              // return"); it never does.
              nb::sig("def __exit__(self, exc_type: type[BaseException] | None, exc_value: "
                      "BaseException | None, traceback: types.TracebackType | None) -> None"),
              "Closes the pool (close()); an exception of the block propagates: if close() then "
              "raises, its error gives way to the block's (and a pool that close() left open is "
              "freed with its last reference).")
          .def_ro_static("SLOT_STATE_HEADER_BYTES", &StatePool::kSlotStateHeaderBytes,
                         "Bytes of an exported slot state's header (docs/lifecycle.md).")
          .def_prop_ro(
              "config", [](PyPool& p) -> ModelConfig { return p.config(); },
              "The ModelConfig (a copy).")
          .def_prop_ro(
              "options", [](PyPool& p) -> PoolOptions { return p.options(); },
              "The PoolOptions (a copy).")
          .def_prop_rw(
              "stream",
              [](PyPool& p) {
                nb::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(p.mutex());
                return p.stream();
              },
              [](PyPool& p, nb::handle s) {
                const std::optional<uintptr_t> given = to_stream(s, "stream");
                const uintptr_t v = given.value_or(reinterpret_cast<uintptr_t>(p.options().stream));
                nb::object owner = given ? nb::borrow(s) : nb::object();
                nb::object previous;  // released here, with the GIL
                {
                  nb::gil_scoped_release release;
                  std::lock_guard<std::mutex> lock(p.mutex());  // calls in flight read it
                  p.check_open();
                  previous = p.set_stream(v, std::move(owner));
                }
              },
              nb::arg("value").none(),
              "The caller stream of calls that name none (CUDA pools; default: the pool's own "
              "stream, PoolOptions.stream). Settable between rounds; None restores the default. "
              "The pool keeps the object given alive (a stream object may destroy its stream "
              "when collected).")
          .def(
              "acquire",
              [](PyPool& p, nb::handle stream) {
                return locked(p, stream, [](StatePool& s) { return s.acquire(); });
              },
              nb::arg("stream").none() = nb::none(),
              (std::string("The lowest free slot, zeroed. Raises ResourceExhaustedError when the "
                           "pool is full.") +
               kStreamDoc)
                  .c_str())
          .def(
              "adopt",
              [](PyPool& p, nb::handle slot_arg, nb::handle stream) {
                const int slot = to_int(slot_arg, "StatePool.adopt", "slot");
                return locked(p, stream, [&](StatePool& s) { return s.adopt(slot); });
              },
              nb::sig("def adopt(self, slot: typing.SupportsIndex, stream: object | None = None) "
                      "-> SlotHandle"),
              nb::arg("slot").none(), nb::arg("stream").none() = nb::none(),
              (std::string("Takes free slot `slot` as a new request keeping its committed state "
                           "as it is in memory (a caller-owned pool: a state the engine "
                           "computed in its own tensors).") +
               kStreamDoc)
                  .c_str())
          .def(
              "release",
              [](PyPool& p, nb::handle handle, nb::handle stream) {
                const SlotHandle h = *to_handle(handle, "handle", false);
                locked(p, stream, [&](StatePool& s) {
                  s.release(h);
                  return 0;
                });
              },
              nb::sig(
                  "def release(self, handle: SlotHandle, stream: object | None = None) -> None"),
              nb::arg("handle").none(), nb::arg("stream").none() = nb::none(),
              (std::string("Frees the slot; the handle becomes stale.") + kStreamDoc).c_str())
          .def(
              "is_live",
              [](PyPool& p, nb::handle handle) {
                const SlotHandle h = *to_handle(handle, "handle", false);
                return guarded(p, [&](const StatePool& s) { return s.is_live(h); });
              },
              nb::sig("def is_live(self, handle: SlotHandle) -> bool"), nb::arg("handle").none(),
              "Whether `handle` is a live slot of this pool.")
          .def(
              "free_slots",
              [](PyPool& p) {
                return guarded(p, [](const StatePool& s) { return s.free_slots(); });
              },
              "Free slots.")
          .def(
              "slot_index",
              [](PyPool& p, nb::handle handle) {
                const SlotHandle h = *to_handle(handle, "handle", false);
                return guarded(p, [&](const StatePool& s) { return s.slot_index(h); });
              },
              nb::sig("def slot_index(self, handle: SlotHandle) -> int"), nb::arg("handle").none(),
              "Index of a live handle into the state views; raises otherwise.")
          .def(
              "conv_state",
              [](nb::handle_t<PyPool> self, nb::handle layer, nb::handle handle,
                 nb::handle stream) {
                const int l = to_int(layer, "StatePool.conv_state", "layer");
                const std::optional<SlotHandle> h = to_handle(handle, "handle", true);
                return pool_view(self, stream, [&](StatePool& s) {
                  return h ? s.conv_state(l, *h) : s.conv_state(l);
                });
              },
              nb::sig("def conv_state(self, layer: typing.SupportsIndex, handle: SlotHandle | None "
                      "= None, stream: "
                      "object | None = None) -> specstate._types.DLPackArray"),
              nb::arg("layer").none(), nb::arg("handle").none() = nb::none(),
              nb::arg("stream").none() = nb::none(),
              (std::string(
                   "Committed conv windows of `layer`, [slots, conv_dim, W-1] (oldest column "
                   "first), as a zero-copy array supporting __dlpack__ that keeps the pool "
                   "alive; with `handle`, that request's [conv_dim, W-1] only (materializes "
                   "only its slot). Materializes deferred work first (replay); exact until the "
                   "next commit.") +
               kStreamDoc)
                  .c_str())
          .def(
              "ssm_state",
              [](nb::handle_t<PyPool> self, nb::handle layer, nb::handle handle,
                 nb::handle stream) {
                const int l = to_int(layer, "StatePool.ssm_state", "layer");
                const std::optional<SlotHandle> h = to_handle(handle, "handle", true);
                return pool_view(self, stream, [&](StatePool& s) {
                  return h ? s.ssm_state(l, *h) : s.ssm_state(l);
                });
              },
              nb::sig("def ssm_state(self, layer: typing.SupportsIndex, handle: SlotHandle | None "
                      "= None, stream: "
                      "object | None = None) -> specstate._types.DLPackArray"),
              nb::arg("layer").none(), nb::arg("handle").none() = nb::none(),
              nb::arg("stream").none() = nb::none(),
              (std::string("Committed SSM states of `layer`, [slots, HV, V, K] (Mamba2 [slots, "
                           "nheads, P, N]); with `handle`, that request's [HV, V, K] only. "
                           "Zero-copy (see conv_state).") +
               kStreamDoc)
                  .c_str())
          .def(
              "workspace",
              [](nb::handle_t<PyPool> self, Workspace which, nb::handle layer_arg,
                 nb::handle stream) {
                const int layer = to_int(layer_arg, "StatePool.workspace", "layer");
                return pool_view(self, stream,
                                 [&](StatePool& s) { return s.workspace(which, layer); });
              },
              nb::sig("def workspace(self, which: Workspace, layer: typing.SupportsIndex, stream: "
                      "object | None = None) -> specstate._types.DLPackArray"),
              nb::arg("which").noconvert(), nb::arg("layer").none(),
              nb::arg("stream").none() = nb::none(),
              (std::string("The strategy's workspace of `layer` (snapshot scratch or replay "
                           "records), zero-copy. Raises FailedPreconditionError when the "
                           "strategy has no such workspace.") +
               kStreamDoc)
                  .c_str())
          .def(
              "snapshot_conv",
              [](nb::handle_t<PyPool> self, nb::handle layer_arg, nb::handle stream) {
                const int layer = to_int(layer_arg, "StatePool.snapshot_conv", "layer");
                return pool_view(self, stream,
                                 [&](StatePool& s) { return s.snapshot_conv(layer); });
              },
              nb::sig(
                  "def snapshot_conv(self, layer: typing.SupportsIndex, stream: object | None = "
                  "None) -> specstate._types.DLPackArray"),
              nb::arg("layer").none(), nb::arg("stream").none() = nb::none(),
              "workspace(Workspace.SNAPSHOT_CONV, layer, stream).")
          .def(
              "snapshot_ssm",
              [](nb::handle_t<PyPool> self, nb::handle layer_arg, nb::handle stream) {
                const int layer = to_int(layer_arg, "StatePool.snapshot_ssm", "layer");
                return pool_view(self, stream, [&](StatePool& s) { return s.snapshot_ssm(layer); });
              },
              nb::sig("def snapshot_ssm(self, layer: typing.SupportsIndex, stream: object | None = "
                      "None) -> specstate._types.DLPackArray"),
              nb::arg("layer").none(), nb::arg("stream").none() = nb::none(),
              "workspace(Workspace.SNAPSHOT_SSM, layer, stream).")
          .def(
              "committed_bytes",
              [](PyPool& p) {
                return guarded(p, [](const StatePool& s) { return s.committed_bytes(); });
              },
              "Committed state bytes, all slots, all layers.")
          .def(
              "workspace_bytes",
              [](PyPool& p) {
                return guarded(p, [](const StatePool& s) { return s.workspace_bytes(); });
              },
              "Bytes the strategy needs besides the committed state, all layers.")
          .def(
              "scratch_bytes",
              [](PyPool& p) {
                return guarded(p, [](const StatePool& s) { return s.scratch_bytes(); });
              },
              "Same as workspace_bytes.")
          .def(
              "materialize",
              [](PyPool& p, nb::handle handles_arg, nb::handle stream) {
                const std::vector<SlotHandle> handles = to_handles(handles_arg, "handles");
                locked(p, stream, [&](StatePool& s) {
                  s.materialize(handles);
                  return 0;
                });
              },
              nb::sig("def materialize(self, handles: Sequence[SlotHandle] = [], stream: object | "
                      "None = None) -> None"),
              nb::arg("handles").none() = nb::tuple(), nb::arg("stream").none() = nb::none(),
              (std::string("Makes the committed memory of `handles` (all live slots when empty) "
                           "equal their committed state (replay; a no-op for snapshot). Reads only "
                           "the pool's records, never the weights of an earlier call.") +
               kStreamDoc)
                  .c_str())
          .def(
              "abort_round",
              [](PyPool& p, nb::handle stream) {
                locked(p, stream, [&](StatePool& s) {
                  s.abort_round();
                  return 0;
                });
              },
              nb::arg("stream").none() = nb::none(),
              (std::string("Drops the open round (raises when none is open); begin_verify over a "
                           "verified, uncommitted round raises instead.") +
               kStreamDoc)
                  .c_str())
          .def(
              "round_open",
              [](PyPool& p) {
                return guarded(p, [](const StatePool& s) { return s.round_open(); });
              },
              "Whether a verify round is open.")
          .def(
              "copy_slot",
              [](PyPool& p, nb::handle src_arg, nb::handle dst_arg, nb::handle stream) {
                const SlotHandle src = *to_handle(src_arg, "src", false);
                const SlotHandle dst = *to_handle(dst_arg, "dst", false);
                locked(p, stream, [&](StatePool& s) {
                  s.copy_slot(src, dst);
                  return 0;
                });
              },
              nb::sig("def copy_slot(self, src: SlotHandle, dst: SlotHandle, stream: object | "
                      "None = None) -> None"),
              nb::arg("src").none(), nb::arg("dst").none(), nb::arg("stream").none() = nb::none(),
              (std::string("Copies src's committed state (all layers, materialized) into dst; dst "
                           "must not be a row of the open round.") +
               kStreamDoc)
                  .c_str())
          .def(
              "fork",
              [](PyPool& p, nb::handle src_arg, nb::handle stream) {
                const SlotHandle src = *to_handle(src_arg, "src", false);
                return locked(p, stream, [&](StatePool& s) { return s.fork(src); });
              },
              nb::sig(
                  "def fork(self, src: SlotHandle, stream: object | None = None) -> SlotHandle"),
              nb::arg("src").none(), nb::arg("stream").none() = nb::none(),
              (std::string("A new slot holding a copy of src's state (parallel sampling, prefix "
                           "caching).") +
               kStreamDoc)
                  .c_str())
          .def(
              "reset",
              [](PyPool& p, nb::handle handle, nb::handle stream) {
                const SlotHandle h = *to_handle(handle, "handle", false);
                locked(p, stream, [&](StatePool& s) {
                  s.reset(h);
                  return 0;
                });
              },
              nb::sig("def reset(self, handle: SlotHandle, stream: object | None = None) -> None"),
              nb::arg("handle").none(), nb::arg("stream").none() = nb::none(),
              (std::string("Zeroes the slot's committed state and drops its pending steps.") +
               kStreamDoc)
                  .c_str())
          .def(
              "slot_state_bytes",
              [](PyPool& p) {
                return guarded(p, [](const StatePool& s) { return s.slot_state_bytes(); });
              },
              "Bytes of one slot's exported state: the size of an export_slot / import_slot "
              "buffer (the layout is the library's, include/specstate/pool.h).")
          .def(
              "export_slot",
              [](PyPool& p, nb::handle handle, nb::handle dst, nb::handle stream,
                 nb::handle path) -> nb::object {
                const char* fn = "StatePool.export_slot";
                const SlotHandle h = *to_handle(handle, "handle", false);
                dst = pick_target(dst, path, fn, "dst");
                if (const std::optional<std::string> file = as_path(dst)) {
                  locked(p, stream, [&](StatePool& s) {
                    s.export_slot(h, *file);
                    return 0;
                  });
                  return nb::none();
                }
                const int64_t bytes =
                    guarded(p, [](const StatePool& s) { return s.slot_state_bytes(); });
                if (dst.is_none()) {  // a fresh host array (allocated in whole i32 words)
                  const int64_t words = (bytes + 3) / 4;
                  int32_t* data = new int32_t[static_cast<size_t>(words)];
                  nb::capsule owner(data,
                                    [](void* q) noexcept { delete[] static_cast<int32_t*>(q); });
                  const size_t shape[1] = {static_cast<size_t>(bytes)};
                  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> array(data, 1, shape, owner);
                  const TensorView v =
                      TensorView::contiguous(data, DType::kI32, {words}, Device::kCpu);
                  locked(p, stream, [&](StatePool& s) {
                    s.export_slot(h, v);
                    return 0;
                  });
                  return nb::cast(std::move(array));
                }
                Arg a = to_bytes_arg(dst, fn, "dst", true, bytes, p.is_cuda());
                check_device(p, a, "dst");
                const TensorView v = a.view;
                naming_caller_array("dst", v, a, [&] {
                  locked(p, stream, [&](StatePool& s) {
                    s.export_slot(h, v);
                    return 0;
                  });
                });
                return nb::none();
              },
              nb::sig(
                  "def export_slot(self, handle: SlotHandle, dst: object | None = None, stream: "
                  "object | None = None, *, path: object | None = None) -> numpy.ndarray | None"),
              nb::arg("handle").none(), nb::arg("dst").none() = nb::none(),
              nb::arg("stream").none() = nb::none(), nb::kw_only(),
              nb::arg("path").none() = nb::none(),
              (std::string(
                   "Exports the slot's committed state (materialized first; the same bytes on "
                   "every backend and strategy, slot_state_bytes() of them). `dst`: None returns a "
                   "fresh uint8 NumPy array of "
                   "slot_state_bytes() bytes; a writable C-contiguous array (uint8, or any "
                   "dtype) of exactly slot_state_bytes() bytes is filled (host memory, or "
                   "device memory on CUDA pools, in stream order); a str / "
                   "os.PathLike writes a safetensors file (`path=` also works).") +
               kStreamDoc)
                  .c_str())
          .def(
              "import_slot",
              [](PyPool& p, nb::handle handle, nb::handle src, nb::handle stream, nb::handle path) {
                const char* fn = "StatePool.import_slot";
                const SlotHandle h = *to_handle(handle, "handle", false);
                src = pick_target(src, path, fn, "src");
                if (const std::optional<std::string> file = as_path(src)) {
                  locked(p, stream, [&](StatePool& s) {
                    s.import_slot(h, *file);
                    return 0;
                  });
                  return;
                }
                if (src.is_none())
                  throw nb::type_error(
                      "src: None is not a state; give an array of slot_state_bytes() bytes or a "
                      "path");
                Arg a = to_bytes_arg(
                    src, fn, "src", false,
                    guarded(p, [](const StatePool& s) { return s.slot_state_bytes(); }),
                    p.is_cuda());
                check_device(p, a, "src");
                const TensorView v = a.view;
                naming_caller_array("src", v, a, [&] {
                  locked(p, stream, [&](StatePool& s) {
                    s.import_slot(h, v);
                    return 0;
                  });
                });
              },
              nb::sig("def import_slot(self, handle: SlotHandle, src: object | None = None, "
                      "stream: object | None = None, *, path: object | None = None) -> None"),
              nb::arg("handle").none(), nb::arg("src").none() = nb::none(),
              nb::arg("stream").none() = nb::none(), nb::kw_only(),
              nb::arg("path").none() = nb::none(),
              (std::string(
                   "Imports a slot's committed state exported by export_slot, from any pool of "
                   "the same model (any backend or strategy). `src`: a C-contiguous array "
                   "(uint8, or any dtype; bytes / bytearray too) of exactly slot_state_bytes() "
                   "bytes (host memory, or device memory on CUDA pools), or a str / "
                   "os.PathLike safetensors file (shapes, dtypes and the model checked; "
                   "`path=` also works).") +
               kStreamDoc)
                  .c_str())
          .def(
              "begin_verify",
              [](PyPool& p, const VerifyBatch& batch, nb::handle cu_seqlens, nb::handle stream) {
                VerifyBatch b = batch;
                // Python batches carry no device offsets of their own: a batch taken from
                // current_batch must not bring the last round's array, which this call releases.
                b.cu_seqlens = TensorView{};
                Arg cu;
                if (!cu_seqlens.is_none()) {
                  cu = to_int_arg(cu_seqlens, "batch.cu_seqlens", "(cu_seqlens is int32)",
                                  "np.ascontiguousarray of int32");
                  check_device(p, cu, "batch.cu_seqlens");
                  b.cu_seqlens = cu.view;
                }
                // The kernels read the array when they run: the pool keeps it until the next
                // round begins (taken in under the lock; `held` then has the last round's).
                nb::ndarray<> held = cu.array;
                locked(p, stream, [&](StatePool& s) {
                  s.begin_verify(b);
                  p.swap_round_array(held);
                  return 0;
                });
              },
              nb::arg("batch"), nb::arg("cu_seqlens").none() = nb::none(),
              nb::arg("stream").none() = nb::none(),
              (std::string("Starts a round: rows (live, of this pool, no slot twice), window <= "
                           "max_window, rows <= max_rows, the tree. cu_seqlens (CUDA pools): an "
                           "int32 [B+1] device array of row offsets read by the kernels when they "
                           "run (CUDA graphs whose lengths change on the device), instead of "
                           "batch.lengths; kept alive by the pool until the next round.") +
               kStreamDoc)
                  .c_str())
          .def(
              "commit",
              [](PyPool& p, nb::handle accepted, nb::handle stream) {
                std::optional<std::vector<int32_t>> host;
                // Lists, tuples and other plain sequences (range) of ints; an array (buffer or
                // DLPack) and byte strings (refused by host_int_values) go the array path.
                PyObject* o = accepted.ptr();
                const bool plain_sequence = PySequence_Check(o) && !PyUnicode_Check(o) &&
                                            !PyBytes_Check(o) && !PyByteArray_Check(o) &&
                                            !PyObject_CheckBuffer(o) &&
                                            !nb::hasattr(accepted, "__dlpack__") &&
                                            !nb::hasattr(accepted, "__array_interface__") &&
                                            !nb::hasattr(accepted, "__cuda_array_interface__");
                if (plain_sequence) {
                  // Each value named by its index when it is no int or does not fit int32; the
                  // items copied first (an item's __index__ may change the list), at most a
                  // round's rows of them.
                  const nb::object items =
                      sequence_items(accepted, "StatePool.commit: accepted", PoolOptions::kMaxRows);
                  host.emplace();
                  for (nb::handle item : items) {
                    const std::string name = "accepted[" + std::to_string(host->size()) + "]";
                    host->push_back(to_int(item, "StatePool.commit", name.c_str()));
                  }
                } else {
                  host = host_int_values(accepted, "StatePool.commit", "accepted");
                }
                if (host) {
                  const std::vector<int32_t>& values = *host;
                  locked(p, stream, [&](StatePool& s) {
                    s.commit(values);
                    return 0;
                  });
                  return;
                }
                Arg a = to_int_arg(
                    accepted, "accepted",
                    "(accepted values: a list of ints, or an array of any integer dtype)",
                    "np.ascontiguousarray of an integer dtype");
                // A dtype that is no integer is a TypeError, as float64 already was (float32
                // and bfloat16 arrays import, and were refused by the pool as values).
                if (a.view.dtype != DType::kI32) {
                  throw nb::type_error((std::string("accepted: dtype ") + dtype_name(a.view.dtype) +
                                        " is no integer dtype (a list of ints, or an integer "
                                        "array)")
                                           .c_str());
                }
                check_device(p, a, "accepted");
                const TensorView v = a.view;
                locked(p, stream, [&](StatePool& s) {
                  s.commit(v);
                  return 0;
                });
              },
              nb::arg("accepted").none(), nb::arg("stream").none() = nb::none(),
              (std::string(
                   "Ends the round, all layers at once, all-or-nothing. Per row: chain: the "
                   "accepted length a in [0, T] (0 = keep); tree: the accepted node in [-1, "
                   "T-1] (-1 = keep). A list of ints, a host array of any integer dtype (NumPy's "
                   "default int64 included; each value must fit int32), or an int32 [rows] "
                   "array in device memory on CUDA pools (checked on the device, no host sync; "
                   "a bad value commits no row, see last_commit_status).") +
               kStreamDoc)
                  .c_str())
          .def(
              "last_commit_status",
              [](PyPool& p, nb::handle stream) {
                return locked(p, stream, [](StatePool& s) { return s.last_commit_status(); });
              },
              nb::arg("stream").none() = nb::none(),
              (std::string("Status.OUT_OF_RANGE if the last device-valued commit (or a commit in a "
                           "round of device cu_seqlens) was refused because a row's value was "
                           "out of range (no row committed), else Status.SUCCESS. Waits for the "
                           "pool's stream.") +
               kStreamDoc)
                  .c_str())
          .def_prop_ro(
              "current_batch",
              [](PyPool& p) {
                // A copy, taken under the lock (begin_verify and commit rewrite the batch).
                return guarded(p,
                               [](const StatePool& s) { return VerifyBatch(s.current_batch()); });
              },
              "The open round's batch (no rows when none is open).");
  bind_layer_calls<PyGdnWeights, PyGdnInputs, PyGdnOutputs>(pool, "GdnWeights");
  bind_layer_calls<PyMamba2Weights, PyMamba2Inputs, PyMamba2Outputs>(pool, "Mamba2Weights");
  bind_layer_calls<PyKdaWeights, PyKdaInputs, PyKdaOutputs>(pool, "KdaWeights");
}

}  // namespace specstate::py
