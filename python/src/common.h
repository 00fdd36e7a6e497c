// Shared pieces of the Python bindings: arrays taken through DLPack (zero copies) as TensorViews,
// CUDA stream handles, and the registration functions of each part of the module.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "specstate/specstate.h"

namespace specstate::py {

namespace nb = nanobind;

// One array argument: the caller's object (kept alive while held), the imported DLPack tensor
// and the TensorView of its memory. An empty Arg (None) has an empty view.
struct Arg {
  nb::object object;  // what the caller passed (None when empty)
  nb::ndarray<> array;
  TensorView view;
  int device_id = 0;           // CUDA ordinal for device arrays
  bool torch = false;          // a torch.Tensor: its memory can move while it lives (check_unmoved)
  uintptr_t base_storage = 0;  // a torch view: its base's storage address when it was taken
};

// Whether `object` is a torch.Tensor (or a subclass), without importing torch.
bool is_torch_tensor(nb::handle object);

// A torch tensor can move to new memory while it lives (share_memory_(), `.data =`, set_(),
// resize_(), a module's .to() / .half() / .float()), and a view keeps the old memory when the
// tensor it was taken from moves: the address imported is then freed memory, or memory that is no
// longer the caller's tensor. torch_moved: where `a`'s tensor (or its base) is now, when that is
// no longer where it was when `a` was taken; nullopt for other arrays (their import pins their
// memory) and an empty `a`. A view's base is torch's `_base`, the root tensor: a move of a view
// between them is not seen, nor one of the parameter a `.detach()` was taken from (no `_base`).
// moved_text: the reason, for an error. check_unmoved: raises specstate.InvalidArgumentError naming
// `name` (a field: "set the field again").
struct TorchMove {
  uintptr_t now = 0, then = 0;  // the tensor's (base: its base's storage) address, now and then
  bool base = false;            // the view's base moved, not the view
};
// `base`: the view's base too (committed state: the caller's tensor must stay the memory the
// pool writes); without it only the tensor's own address (fields: one query a call).
std::optional<TorchMove> torch_moved(const Arg& a, bool base);
std::string moved_text(const TorchMove& m);
void check_unmoved(const Arg& a, const char* name);

// Imports `object` through DLPack / the buffer protocol without copying. `name` names the
// argument in errors ("inputs.mixed_qkv"). Raises TypeError (not an array, unsupported dtype)
// or ValueError (device, rank, read-only output). NumPy arrays of ml_dtypes.bfloat16 are taken
// as bf16. `allow_none`: None gives an empty Arg.
Arg to_arg(nb::handle object, const char* name, bool writable, bool allow_none);

// "uint8[2, 64] cpu": how an array was received, for errors.
std::string array_text(const nb::ndarray<>& a);

// A host array (cpu / cuda_host) of integers of another dtype than int32, one dimension (NumPy's
// default int64, a CPU torch.int64 tensor): its values as int32, or nullopt for anything else
// (int32 arrays, device arrays, other dtypes and ranks, which to_arg takes or refuses). Raises
// specstate.OutOfRangeError naming `function`, `name`[i] and the value that does not fit.
std::optional<std::vector<int32_t>> host_int_values(nb::handle object, const char* function,
                                                    const char* name);

// A byte buffer argument (export_slot / import_slot): any C-contiguous array (any dtype of whole
// bytes, any rank; uint8 [bytes] is the natural one) of exactly `bytes` bytes, or of
// ceil(bytes / itemsize) elements as the C++ API takes, on cpu (cuda_host) or cuda. The view is
// 1-D in the widest library dtype (i32, bf16) that sizes it to ceil(bytes / element size)
// elements; the library reads / writes only its first `bytes` bytes. `function` and `name` go
// into the errors: TypeError (not an array, a dtype of no whole bytes), ValueError (device,
// read-only for an output, not contiguous), specstate.InvalidArgumentError (the size, a device
// array for a CPU pool).
// `cuda_pool`: whether device arrays may be taken (a CPU pool rejects them, naming the array).
Arg to_bytes_arg(nb::handle object, const char* function, const char* name, bool writable,
                 int64_t bytes, bool cuda_pool);

// A CUDA stream from an int handle, an object with `cuda_stream` (torch.cuda.Stream) or
// `__cuda_stream__` (the CUDA stream protocol), or None (nullopt).
std::optional<uintptr_t> to_stream(nb::handle object, const char* name);

// Returns `view` (memory owned by `owner`) as an ndarray object supporting __dlpack__ /
// __dlpack_device__ and the buffer protocol; `owner` stays alive as long as the array.
nb::object view_to_python(const TensorView& view, int device_id, nb::handle owner);

// The per-layer arguments as Python objects: each field converted (and named) when it is set, so
// an engine can build them once over static buffers (CUDA graphs) and pass them every round.
// each(f) calls f(arg, name) for every field (device checks).
struct PyGdnWeights {
  Arg conv_weight, conv_bias, A_log, dt_bias;
  GdnWeights views() const {
    return GdnWeights{conv_weight.view, conv_bias.view, A_log.view, dt_bias.view};
  }
  template <typename F>
  void each(F f) const {
    f(conv_weight, "weights.conv_weight"), f(conv_bias, "weights.conv_bias");
    f(A_log, "weights.A_log"), f(dt_bias, "weights.dt_bias");
  }
};
struct PyGdnInputs {
  Arg mixed_qkv, a, b;
  GdnInputs views() const { return GdnInputs{mixed_qkv.view, a.view, b.view}; }
  template <typename F>
  void each(F f) const {
    f(mixed_qkv, "inputs.mixed_qkv"), f(a, "inputs.a"), f(b, "inputs.b");
  }
};
struct PyGdnOutputs {
  Arg conv_out, core_out;
  GdnOutputs views() const { return GdnOutputs{conv_out.view, core_out.view}; }
  template <typename F>
  void each(F f) const {
    f(conv_out, "outputs.conv_out"), f(core_out, "outputs.core_out");
  }
};
struct PyMamba2Weights {
  Arg conv_weight, conv_bias, A_log, dt_bias, D;
  Mamba2Weights views() const {
    return Mamba2Weights{conv_weight.view, conv_bias.view, A_log.view, dt_bias.view, D.view};
  }
  template <typename F>
  void each(F f) const {
    f(conv_weight, "weights.conv_weight"), f(conv_bias, "weights.conv_bias");
    f(A_log, "weights.A_log"), f(dt_bias, "weights.dt_bias"), f(D, "weights.D");
  }
};
struct PyMamba2Inputs {
  Arg xBC, dt, z;
  Mamba2Inputs views() const { return Mamba2Inputs{xBC.view, dt.view, z.view}; }
  template <typename F>
  void each(F f) const {
    f(xBC, "inputs.xBC"), f(dt, "inputs.dt"), f(z, "inputs.z");
  }
};
struct PyMamba2Outputs {
  Arg conv_out, y;
  Mamba2Outputs views() const { return Mamba2Outputs{conv_out.view, y.view}; }
  template <typename F>
  void each(F f) const {
    f(conv_out, "outputs.conv_out"), f(y, "outputs.y");
  }
};

struct PyKdaWeights {
  Arg conv_weight, conv_bias, A_log, dt_bias;
  KdaWeights views() const {
    return KdaWeights{conv_weight.view, conv_bias.view, A_log.view, dt_bias.view};
  }
  template <typename F>
  void each(F f) const {
    f(conv_weight, "weights.conv_weight"), f(conv_bias, "weights.conv_bias");
    f(A_log, "weights.A_log"), f(dt_bias, "weights.dt_bias");
  }
};
struct PyKdaInputs {
  Arg mixed_qkv, g, b;
  KdaInputs views() const { return KdaInputs{mixed_qkv.view, g.view, b.view}; }
  template <typename F>
  void each(F f) const {
    f(mixed_qkv, "inputs.mixed_qkv"), f(g, "inputs.g"), f(b, "inputs.b");
  }
};
struct PyKdaOutputs {
  Arg conv_out, core_out;
  KdaOutputs views() const { return KdaOutputs{conv_out.view, core_out.view}; }
  template <typename F>
  void each(F f) const {
    f(conv_out, "outputs.conv_out"), f(core_out, "outputs.core_out");
  }
};

void bind_tensors(nb::module_& m);
void bind_config(nb::module_& m);
void bind_pool(nb::module_& m);
void bind_spec(nb::module_& m);
void bind_cli(nb::module_& m);

// `text` with each NUL byte written as \x00: a message quoting the caller's text (a trace's
// source name, a path's label) keeps its whole length in Python.
inline std::string escape_nul(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\0') {
      out += "\\x00";
    } else {
      out += c;
    }
  }
  return out;
}

// The name of an argument's Python type ("Path", "int"), for errors.
inline std::string arg_type_name(nb::handle object) {
  return nb::cast<std::string>(
      nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr()))).attr("__name__")));
}

// A file path argument (str or os.PathLike), or nullopt for anything else: the name's bytes as
// the file system takes them (os.fsencode: names that are no valid UTF-8 pass as they are).
inline std::optional<std::string> as_path(nb::handle object) {
  if (!nb::isinstance<nb::str>(object) && (object.is_none() || !nb::hasattr(object, "__fspath__")))
    return std::nullopt;
  nb::object bytes = nb::module_::import_("os").attr("fsencode")(object);
  if (!nb::isinstance<nb::bytes>(bytes)) return std::nullopt;
  return std::string(PyBytes_AS_STRING(bytes.ptr()), PyBytes_GET_SIZE(bytes.ptr()));
}

// as_path, or TypeError naming `function`'s `path` argument.
inline std::string path_arg(nb::handle object, const char* function) {
  if (std::optional<std::string> p = as_path(object)) return *p;
  throw nb::type_error((std::string(function) + ": path: expected a str or os.PathLike, got " +
                        arg_type_name(object))
                           .c_str());
}

// PyNumber_Index(object) for an object that has __index__; where that raises TypeError (a
// NumPy array of several elements: "only integer scalar arrays can be converted to a scalar
// index", naming nothing), a TypeError naming `name` and the object's type. Other exceptions
// (KeyboardInterrupt, MemoryError) propagate as they are.
inline nb::object index_or_type_error(nb::handle object, const std::string& name) {
  nb::object index = nb::steal(PyNumber_Index(object.ptr()));
  if (index.is_valid()) return index;
  if (PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    throw nb::type_error((name + ": expected an int, got " + arg_type_name(object)).c_str());
  }
  throw nb::python_error();
}

// `object` as an integer of type T (an int or anything with __index__, not bool): TypeError
// naming `name` for anything else, specstate.OutOfRangeError naming `name` and the value where
// it does not fit T.
template <typename T>
T to_integer(nb::handle object, const std::string& name) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "an integer field");
  if (PyBool_Check(object.ptr()) || !PyIndex_Check(object.ptr())) {
    throw nb::type_error((name + ": expected an int, got " + arg_type_name(object)).c_str());
  }
  nb::object index = index_or_type_error(object, name);
  const auto out_of_range = [&] {
    return Error(Status::kOutOfRange, name + " = " + nb::cast<std::string>(nb::str(index)) +
                                          " is out of range [" +
                                          std::to_string(std::numeric_limits<T>::min()) + ", " +
                                          std::to_string(std::numeric_limits<T>::max()) + "]");
  };
  if constexpr (std::is_signed_v<T>) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0 || v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      throw out_of_range();
    return static_cast<T>(v);
  } else {
    if (PyObject_RichCompareBool(index.ptr(), nb::int_(0).ptr(), Py_LT) == 1) throw out_of_range();
    const unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw out_of_range();
    }
    if (v > std::numeric_limits<T>::max()) throw out_of_range();
    return static_cast<T>(v);
  }
}

// The error PyFloat_AsDouble raised for `object`: an OverflowError (an int past a double's range)
// as specstate.OutOfRangeError and a TypeError or ValueError (an array of several values) as a
// TypeError, both naming `name` with Python's message; anything else (KeyboardInterrupt,
// MemoryError, an exception of the object's own __float__) as it was raised.
[[noreturn]] inline void throw_float_error(nb::handle object, const std::string& name) {
  nb::python_error error;
  if (!error.matches(PyExc_OverflowError) && !error.matches(PyExc_TypeError) &&
      !error.matches(PyExc_ValueError)) {
    throw error;
  }
  const std::string what =
      name + ": " + arg_type_name(object) + " " + nb::cast<std::string>(nb::str(error.value()));
  if (error.matches(PyExc_OverflowError)) throw Error(Status::kOutOfRange, what);
  throw nb::type_error(what.c_str());
}

// The items of `object`, a sequence (a list, tuple, range, NumPy array; not str), as a tuple: a
// copy taken before any item is converted, so an item whose __index__ or __float__ changes the
// list cannot change what is read (nanobind's list caster kept reading the list's item array
// after such a change: a segfault). Exactly the first len(object) items are copied (a
// PySequence_Tuple of an object whose __len__ lies iterated until memory ran out). TypeError
// naming `name` for anything else, specstate.OutOfRangeError for more than `max_items` items
// (by default kMaxSequenceItems: the largest argument any call takes is far below; the copy of
// range(10**12) would not fit). `what`: the items expected, for the messages.
inline constexpr Py_ssize_t kMaxSequenceItems = Py_ssize_t{1} << 26;
inline nb::object sequence_items(nb::handle object, const std::string& name,
                                 Py_ssize_t max_items = kMaxSequenceItems,
                                 const char* what = "numbers") {
  PyObject* o = object.ptr();
  if (std::strcmp(what, "numbers") == 0 && is_torch_tensor(object)) {
    // A torch tensor of numbers (an engine's accepted lengths or parents) is no Python sequence
    // (no sequence protocol): its values, one dimension, bounded before they are copied.
    const Py_ssize_t dims = nb::cast<Py_ssize_t>(object.attr("dim")());
    if (dims != 1) {
      throw nb::type_error((name + ": expected a sequence of numbers, got a torch tensor of " +
                            std::to_string(dims) + " dimensions (one is taken)")
                               .c_str());
    }
    const Py_ssize_t n = nb::cast<Py_ssize_t>(object.attr("numel")());
    if (n > max_items) {
      throw Error(Status::kOutOfRange,
                  name + ": " + std::to_string(n) + " items, at most " + std::to_string(max_items));
    }
    nb::object items = nb::steal(PySequence_Tuple(object.attr("tolist")().ptr()));
    if (!items.is_valid()) throw nb::python_error();
    return items;
  }
  if (PyUnicode_Check(o) || !PySequence_Check(o)) {
    throw nb::type_error(
        (name + ": expected a sequence of " + what + ", got " + arg_type_name(object)).c_str());
  }
  const Py_ssize_t n = PySequence_Size(o);
  if (n < 0) {  // a sequence with no length (only __getitem__)
    PyErr_Clear();
    throw nb::type_error(
        (name + ": expected a sequence of " + what + " with a length, got " + arg_type_name(object))
            .c_str());
  }
  if (n > max_items) {
    throw Error(Status::kOutOfRange,
                name + ": " + std::to_string(n) + " items, at most " + std::to_string(max_items));
  }
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {  // their length is their items'
    nb::object items = nb::steal(PySequence_Tuple(o));
    if (!items.is_valid()) throw nb::python_error();
    return items;
  }
  nb::object items = nb::steal(PyTuple_New(n));
  if (!items.is_valid()) throw nb::python_error();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_GetItem(o, i);
    if (item == nullptr) throw nb::python_error();
    PyTuple_SET_ITEM(items.ptr(), i, item);
  }
  return items;
}

// `object` as a vector of T (a bound class, or std::string), item by item from sequence_items'
// copy: TypeError naming `name[i]` and the item's type for an item that is no T. Never reserves
// more than the items given (nanobind's list caster reserved len(list) elements of T before
// looking at any, inside a noexcept function: a long list of None ended in std::terminate).
template <typename T>
std::vector<T> to_object_vector(nb::handle object, const std::string& name, Py_ssize_t max_items,
                                const char* what) {
  const nb::object items = sequence_items(object, name, max_items, what);
  const Py_ssize_t n = PyTuple_GET_SIZE(items.ptr());
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::handle item(PyTuple_GET_ITEM(items.ptr(), i));
    T value{};
    if (!nb::try_cast<T>(item, value, /*convert=*/false)) {
      PyErr_Clear();
      throw nb::type_error(
          (name + "[" + std::to_string(i) + "]: expected " + what + ", got " + arg_type_name(item))
              .c_str());
    }
    out.push_back(std::move(value));
  }
  return out;
}

// A list argument as the caller passed it, converted (and named) in the call's body by
// to_int_vector (kFloats false) / to_float_vector (true); a type of its own only so that the
// stubs say what it takes (an nb::handle parameter reads as `object` there).
template <bool kFloats>
struct ListArg {
  nb::object object;
  operator nb::handle() const { return object; }  // NOLINT: to_int_vector(list, ...)
};
using IntList = ListArg<false>;
using FloatList = ListArg<true>;

// A bool or enum argument as the caller passed it, converted (and named) in the call's body by
// to_bool / to_enum (a plain bool parameter refused np.bool_, and both named only the whole
// signature for 1); types of their own so that the stubs say what they take.
// (The stubs name T as nanobind's own caster of T does.)
template <typename T>
struct StrictArg {
  nb::object object;
  operator nb::handle() const { return object; }  // NOLINT: to_bool / to_enum<T>(arg, ...)
};
using BoolArg = StrictArg<bool>;
template <typename E>
using EnumArg = StrictArg<E>;
using DTypeArg = EnumArg<DType>;

// `object` as a vector of integers of type T: every item through to_integer, named
// `name[i]` (an int or anything with __index__, not bool).
template <typename T>
std::vector<T> to_int_vector(nb::handle object, const std::string& name) {
  const nb::object items = sequence_items(object, name);
  const Py_ssize_t n = PyTuple_GET_SIZE(items.ptr());
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyTuple_GET_ITEM(items.ptr(), i);
    // An exact int that fits: no name built (the per-round lists are thousands of items).
    if (PyLong_CheckExact(item)) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
      if (overflow == 0 && !(v == -1 && PyErr_Occurred()) &&
          v >= static_cast<long long>(std::numeric_limits<T>::min()) &&
          (v < 0 || static_cast<unsigned long long>(v) <=
                        static_cast<unsigned long long>(std::numeric_limits<T>::max()))) {
        out.push_back(static_cast<T>(v));
        continue;
      }
      PyErr_Clear();
    }
    out.push_back(to_integer<T>(item, name + "[" + std::to_string(i) + "]"));
  }
  return out;
}

// `object` as a double: a real number (float, int or anything with __float__ / __index__, not
// bool); TypeError naming `name` otherwise ("expected <expected>"), OutOfRangeError for an int
// past a double's range (throw_float_error).
inline double to_double(nb::handle object, const std::string& name,
                        const char* expected = "a float") {
  PyObject* o = object.ptr();
  if (PyBool_Check(o) ||
      !(PyFloat_Check(o) || PyIndex_Check(o) || PyObject_HasAttrString(o, "__float__"))) {
    throw nb::type_error(
        (name + ": expected " + expected + ", got " + arg_type_name(object)).c_str());
  }
  const double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) throw_float_error(object, name);
  return v;
}

// `object` as a vector of doubles: every item through to_double, named `name[i]`.
inline std::vector<double> to_float_vector(nb::handle object, const std::string& name) {
  const nb::object items = sequence_items(object, name);
  const Py_ssize_t n = PyTuple_GET_SIZE(items.ptr());
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    out.push_back(
        to_double(PyTuple_GET_ITEM(items.ptr(), i), name + "[" + std::to_string(i) + "]"));
  }
  return out;
}

// `object` (None, or a real number) as an optional float32: OutOfRangeError naming `name` and the
// value where a finite value would become 0 (unless `zero_ok`: a field for which 0 means the same,
// Mamba2's dt_min) or infinite (unless `inf_ok`: dt_max, where infinity is "no clamp") as float32
// (scale = 1e-300 was stored as 0.0 and refused later as "0"); NaN and infinities given as such
// pass to the config's own checks.
inline std::optional<float> to_float32(nb::handle object, const std::string& name,
                                       bool zero_ok = false, bool inf_ok = false) {
  if (object.is_none()) return std::nullopt;
  const double v = to_double(object, name, "a float or None");
  // A nonzero value whose double is 0 (Fraction(1, 10**400)) was stored as 0.0 and refused later
  // as "0"; it is out of range here, as a double that becomes 0 as float32 is.
  const bool lost =
      v == 0.0 && PyObject_RichCompareBool(object.ptr(), nb::int_(0).ptr(), Py_NE) == 1;
  if (PyErr_Occurred()) PyErr_Clear();
  if (lost && !zero_ok) {
    throw Error(Status::kOutOfRange, name + " = " + nb::cast<std::string>(nb::str(object)) +
                                         " is out of float32's range (it would be 0)");
  }
  const float f = static_cast<float>(v);
  if (std::isfinite(v) && ((std::isinf(f) && !inf_ok) || (v != 0.0 && f == 0.0f && !zero_ok))) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", v);
    throw Error(Status::kOutOfRange, name + " = " + buf +
                                         " is out of float32's range (it would be " +
                                         (std::isinf(f) ? "infinite" : "0") + ")");
  }
  return f;
}
// A field of C as a property's getter (the setters below convert and name what they refuse).
template <typename C, typename T>
auto field_getter(T C::*field) {
  return [field](const C& c) { return c.*field; };
}
template <typename C>
auto float_setter(std::optional<float> C::*field, std::string full, bool zero_ok = false,
                  bool inf_ok = false) {
  return [field, full, zero_ok, inf_ok](C& c, nb::handle value) {
    c.*field = to_float32(value, full, zero_ok, inf_ok);
  };
}

// An integer field of C as a property: its getter, and a setter that names `full`
// ("<class>.<field>") and the value it refuses (nanobind's def_rw says only "(): incompatible
// function arguments", with neither).
template <typename C, typename T>
auto int_setter(T C::*field, std::string full) {
  return [field, full](C& c, nb::handle value) { c.*field = to_integer<T>(value, full); };
}
// A stream object (torch's, CuPy's, anything with __cuda_stream__).
inline bool looks_like_stream(nb::handle object) {
  return nb::hasattr(object, "cuda_stream") || nb::hasattr(object, "__cuda_stream__");
}

// A SlotHandle argument (None: nullopt when `allow_none`); TypeError naming `name` otherwise,
// with a hint for what is often passed instead (a slot index, a stream).
inline std::optional<SlotHandle> to_handle(nb::handle object, const char* name, bool allow_none) {
  if (allow_none && object.is_none()) return std::nullopt;
  SlotHandle h;
  if (nb::try_cast<SlotHandle>(object, h, /*convert=*/false)) return h;
  std::string msg = std::string(name) + ": expected a SlotHandle (from pool.acquire())";
  if (allow_none) msg += " or None (every slot)";
  msg += ", got " + arg_type_name(object);
  if (PyIndex_Check(object.ptr()) && !PyBool_Check(object.ptr()))  // int, NumPy integers
    msg += " (a slot index? give the handle; pool.slot_index(handle) maps a handle to its index)";
  else if (looks_like_stream(object))
    msg += " (a stream? pass it as stream=...)";
  throw nb::type_error(msg.c_str());
}

// A sequence of SlotHandle arguments (a list, tuple or other sequence; not a str or bytes), read
// from sequence_items' copy: at most kMaxSequenceItems items (OutOfRangeError naming `name` and the
// count; range(10**12) reserved 24 TB and ended in MemoryError), TypeError naming `name` (or
// `name[i]` with to_handle's hint) otherwise. Never reserves more than the items given.
inline std::vector<SlotHandle> to_handles(nb::handle seq, const std::string& name) {
  if (nb::isinstance<nb::bytes>(seq)) {
    throw nb::type_error(
        (name + ": expected a sequence of SlotHandle, got " + arg_type_name(seq)).c_str());
  }
  // Lists and tuples are copied whole (a tuple of their items); any other sequence (an array of
  // slot indices, a common mistake) is read item by item, each checked as it is read, so that
  // the first wrong item is named before the next is made (copying 2^26 items of a tensor first
  // made as many Python objects). Checking an item runs no Python code.
  const bool whole = PyList_CheckExact(seq.ptr()) || PyTuple_CheckExact(seq.ptr());
  const nb::object items =
      whole ? sequence_items(seq, name, kMaxSequenceItems, "SlotHandle") : nb::borrow(seq);
  Py_ssize_t n = 0;
  if (whole) {
    n = PyTuple_GET_SIZE(items.ptr());
  } else {
    if (PyUnicode_Check(seq.ptr()) || !PySequence_Check(seq.ptr())) {
      throw nb::type_error(
          (name + ": expected a sequence of SlotHandle, got " + arg_type_name(seq)).c_str());
    }
    n = PySequence_Size(seq.ptr());
    if (n < 0) {
      PyErr_Clear();
      throw nb::type_error(
          (name + ": expected a sequence of SlotHandle with a length, got " + arg_type_name(seq))
              .c_str());
    }
    if (n > kMaxSequenceItems) {
      throw Error(Status::kOutOfRange, name + ": " + std::to_string(n) + " items, at most " +
                                           std::to_string(kMaxSequenceItems));
    }
  }
  std::vector<SlotHandle> out;
  out.reserve(static_cast<std::size_t>(std::min<Py_ssize_t>(n, Py_ssize_t{1} << 16)));
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object item = whole ? nb::borrow(PyTuple_GET_ITEM(items.ptr(), i))
                            : nb::steal(PySequence_GetItem(items.ptr(), i));
    if (!item.is_valid()) throw nb::python_error();
    out.push_back(*to_handle(item, (name + "[" + std::to_string(i) + "]").c_str(), false));
  }
  return out;
}

// `object` (already checked to be a T by its nb::handle_t parameter) as a T&: TypeError naming
// `name` for an instance whose __init__ never ran (a subclass that does not call
// super().__init__(); nb::cast threw std::bad_cast, a RuntimeError naming nothing).
template <typename T>
T& initialized(nb::handle object, const char* name) {
  if (!nb::inst_ready(object)) {
    throw nb::type_error((std::string(name) + ": the " + arg_type_name(object) +
                          " object is not initialized (does its __init__ call "
                          "super().__init__()?)")
                             .c_str());
  }
  return nb::cast<T&>(object);
}

// A bool field of C as a property's setter: True / False or a NumPy bool, nothing else (def_rw
// said only "(): incompatible function arguments" for 1, and refused np.bool_); TypeError naming
// `full` and what was given.
inline bool to_bool(nb::handle object, const std::string& name) {
  if (PyBool_Check(object.ptr())) return object.ptr() == Py_True;
  const nb::handle type = object.type();
  if (nb::hasattr(type, "__module__") && nb::hasattr(type, "__name__")) {
    const nb::object module = type.attr("__module__"), tname = type.attr("__name__");
    if (nb::isinstance<nb::str>(module) && nb::isinstance<nb::str>(tname) &&
        nb::cast<std::string>(module) == "numpy" &&
        (nb::cast<std::string>(tname) == "bool" || nb::cast<std::string>(tname) == "bool_")) {
      const int truth = PyObject_IsTrue(object.ptr());
      if (truth < 0) throw nb::python_error();
      return truth == 1;
    }
  }
  throw nb::type_error((name + ": expected a bool, got " + arg_type_name(object)).c_str());
}
template <typename C>
auto bool_setter(bool C::*field, std::string full) {
  return [field, full](C& c, nb::handle value) { c.*field = to_bool(value, full); };
}
// A field of C that holds a bound class or a std::string, as a property: field_getter returns a
// copy (def_rw returned a reference into the object: a Window read from TraceRecord.window took
// the next value assigned to the field, and one held in a set changed its hash), and this setter
// takes a T only, TypeError naming `full`, what it wants and what was given.
template <typename T>
T to_object(nb::handle value, const std::string& name, const char* what) {
  T v{};
  if (!nb::try_cast<T>(value, v, /*convert=*/false)) {
    PyErr_Clear();
    throw nb::type_error((name + ": expected " + what + ", got " + arg_type_name(value)).c_str());
  }
  return v;
}
template <typename C, typename T>
auto object_setter(T C::*field, std::string full, const char* what) {
  return
      [field, full, what](C& c, nb::handle value) { c.*field = to_object<T>(value, full, what); };
}
// `object` as the enum E: an E itself, nothing else (nanobind's implicit conversion took ints and
// bools: PoolOptions(strategy=True) was REPLAY). TypeError naming `name` and what was given.
template <typename E>
E to_enum(nb::handle object, const std::string& name) {
  if (!nb::isinstance<E>(object)) {
    const std::string want = nb::cast<std::string>(nb::type<E>().attr("__name__"));
    throw nb::type_error(
        (name + ": expected a " + want + ", got " + arg_type_name(object)).c_str());
  }
  return nb::cast<E>(object);
}
template <typename C, typename E>
auto enum_setter(E C::*field, std::string full) {
  return [field, full](C& c, nb::handle value) { c.*field = to_enum<E>(value, full); };
}
// A binding's signature text, kept for the module's lifetime (nanobind keeps the pointer).
inline const char* keep_text(std::string text) {
  static std::deque<std::string> texts;
  texts.push_back(std::move(text));
  return texts.back().c_str();
}

// The stub's signature of field `name`'s setter, taking `type`: the setters take any object
// (nb::arg("value").none(), so that their own error names the field and the value's type), which
// nanobind's stubs write as `object | None`; type checkers see what the setter accepts.
inline auto value_sig(const char* name, const char* type) {
  return nb::for_setter(
      nb::sig(keep_text(std::string("def ") + name + "(self, value: " + type + ", /) -> None")));
}

template <typename C, typename T>
void def_int_field(nb::class_<C>& cls, const std::string& cls_name, const char* name, T C::*field,
                   const char* doc) {
  cls.def_prop_rw(name, field_getter(field), int_setter(field, cls_name + "." + name),
                  nb::arg("value").none(), value_sig(name, "typing.SupportsIndex"), doc);
}

// A zero-copy view of pool memory (view_to_python), named in the stubs as the DLPack protocol
// the package declares (specstate.DLPackArray): `np.from_dlpack(pool.ssm_state(0))` type-checks.
struct DLPackView {
  nb::object object;
};

}  // namespace specstate::py

namespace nanobind::detail {
template <>
struct type_caster<specstate::py::DLPackView> {
  NB_TYPE_CASTER(specstate::py::DLPackView, const_name("specstate._types.DLPackArray"))
  bool from_python(handle, uint8_t, cleanup_list*) noexcept { return false; }  // a return type
  static handle from_cpp(const specstate::py::DLPackView& v, rv_policy, cleanup_list*) noexcept {
    return v.object.inc_ref();
  }
};
// Any object passes (the call's body converts it and names what it refuses); the name is the
// stubs'.
template <bool kFloats>
struct type_caster<specstate::py::ListArg<kFloats>> {
  NB_TYPE_CASTER(specstate::py::ListArg<kFloats>,
                 const_name<kFloats>("specstate._types.FloatSequence",
                                     "specstate._types.IntSequence"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    value.object = borrow(src);
    return true;
  }
  static handle from_cpp(const specstate::py::ListArg<kFloats>& v, rv_policy,
                         cleanup_list*) noexcept {
    return v.object.inc_ref();
  }
};
template <typename T>
struct type_caster<specstate::py::StrictArg<T>> {
  NB_TYPE_CASTER(specstate::py::StrictArg<T>, make_caster<T>::Name)
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    value.object = borrow(src);
    return true;
  }
  static handle from_cpp(const specstate::py::StrictArg<T>& v, rv_policy, cleanup_list*) noexcept {
    return v.object.inc_ref();
  }
};
}  // namespace nanobind::detail
