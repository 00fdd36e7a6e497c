// Arrays in (DLPack / buffer protocol, zero copies) and pool memory out (__dlpack__ objects).
#include <nanobind/stl/string.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common.h"

namespace specstate::py {
namespace {

namespace dl = nb::dlpack;

std::string py_type_name(nb::handle object) {
  return nb::cast<std::string>(
      nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr()))).attr("__qualname__")));
}

std::string dtype_text(dl::dtype d) {
  const char* code = "?";
  switch (static_cast<dl::dtype_code>(d.code)) {
    case dl::dtype_code::Int:
      code = "int";
      break;
    case dl::dtype_code::UInt:
      code = "uint";
      break;
    case dl::dtype_code::Float:
      code = "float";
      break;
    case dl::dtype_code::Bfloat:
      code = "bfloat";
      break;
    case dl::dtype_code::Complex:
      code = "complex";
      break;
    case dl::dtype_code::Bool:
      code = "bool";
      break;
    default:
      break;
  }
  std::string out = std::string(code) + std::to_string(d.bits);
  if (d.lanes != 1) out += "x" + std::to_string(d.lanes);
  return out;
}

const char* device_text(int type) {
  switch (type) {
    case nb::device::cpu::value:
      return "cpu";
    case nb::device::cuda::value:
      return "cuda";
    case nb::device::cuda_host::value:
      return "cuda_host";
    case nb::device::cuda_managed::value:
      return "cuda_managed";
    case nb::device::rocm::value:
      return "rocm";
    case nb::device::metal::value:
      return "metal";
    default:
      return "unknown";
  }
}

bool is_numpy_bf16(nb::handle object) {
  if (!nb::hasattr(object, "dtype") || !nb::hasattr(object, "view")) return false;
  nb::object dtype = object.attr("dtype");
  if (!nb::hasattr(dtype, "name")) return false;
  nb::object name = dtype.attr("name");
  return nb::isinstance<nb::str>(name) && nb::cast<std::string>(name) == "bfloat16";
}

bool is_numpy_array(nb::handle object) {
  nb::handle type(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr())));
  return nb::hasattr(type, "__module__") && nb::isinstance<nb::str>(type.attr("__module__")) &&
         nb::cast<std::string>(type.attr("__module__")) == "numpy";
}

bool import_array(nb::handle object, bool writable, nb::ndarray<>& out) {
  if (writable) return nb::try_cast<nb::ndarray<>>(object, out, /*convert=*/false);
  nb::ndarray<nb::ro> ro;
  if (!nb::try_cast<nb::ndarray<nb::ro>>(object, ro, /*convert=*/false)) return false;
  // Same tensor, const dropped: inputs are only read.
  out = nb::ndarray<>(ro);
  return true;
}

std::string hex_address(uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

// The storage address of a torch tensor's `_base` (the root tensor of a view), 0 for none.
uintptr_t torch_base_storage(nb::handle tensor) {
  const nb::object base = tensor.attr("_base");
  if (base.is_none()) return 0;
  return nb::cast<uintptr_t>(base.attr("untyped_storage")().attr("data_ptr")());
}

}  // namespace

bool is_torch_tensor(nb::handle object) {
  // A torch.Tensor or a subclass of it (defined anywhere): torch.Tensor in the type's MRO.
  PyObject* mro = Py_TYPE(object.ptr())->tp_mro;
  for (Py_ssize_t i = 0; mro != nullptr && i < PyTuple_GET_SIZE(mro); ++i) {
    nb::handle base(PyTuple_GET_ITEM(mro, i));
    const char* tp_name = reinterpret_cast<PyTypeObject*>(base.ptr())->tp_name;
    if (tp_name != nullptr && std::strcmp(tp_name, "Tensor") == 0 &&
        nb::hasattr(base, "__module__") && nb::isinstance<nb::str>(base.attr("__module__")) &&
        nb::cast<std::string>(base.attr("__module__")) == "torch") {
      return true;
    }
  }
  return false;
}

std::optional<TorchMove> torch_moved(const Arg& a, bool base) {
  if (!a.torch || a.array.size() == 0) return std::nullopt;
  const uintptr_t held = reinterpret_cast<uintptr_t>(a.array.data());
  const uintptr_t address = nb::cast<uintptr_t>(a.object.attr("data_ptr")());
  if (address != held) return TorchMove{address, held, false};
  // A view (vllm.state_pool's transposes) keeps its own storage when the tensor it was taken from
  // moves (`base.data = ...`, base.set_()): the memory it holds is then alive but no longer the
  // caller's tensor. Compared with the base's storage when the view was taken (a base that had
  // moved before is no move of this view's).
  if (base && a.base_storage != 0) {
    const uintptr_t now = torch_base_storage(a.object);
    if (now != a.base_storage) return TorchMove{now, a.base_storage, true};
  }
  return std::nullopt;
}

std::string moved_text(const TorchMove& m) {
  const std::string where =
      " (now at " + hex_address(m.now) + ", taken at " + hex_address(m.then) +
      ": share_memory_(), `.data =`, set_(), resize_() or a module's .to() / .half() give a "
      "tensor new memory)";
  return m.base ? "the tensor this torch view was taken from moved to new memory after the view "
                  "was taken" +
                      where + "; the view holds the old memory"
                : "the torch tensor's memory moved after it was taken" + where;
}

void check_unmoved(const Arg& a, const char* name) {
  // A field's own address only (one query a layer call): a view whose base moved keeps its own
  // memory alive, and is read or written as it is.
  if (const std::optional<TorchMove> m = torch_moved(a, /*base=*/false)) {
    throw Error(Status::kInvalidArgument,
                std::string(name) + ": " + moved_text(*m) + "; set the field again");
  }
}

namespace {

// Refused, naming the argument: a torch tensor whose negation or conjugation is pending
// (x.conj().imag, torch.neg's lazy views: DLPack exports the memory without the flag, so the
// values would be read with the wrong sign), and one that requires grad where specstate writes
// (`writable`: torch's own
// __dlpack__ refuses to export it, nanobind's fallback import does not, and the writes would go
// behind autograd's back: no version bump, wrong gradients). Returns whether `object` is a
// torch tensor.
bool refuse_torch_hazards(nb::handle object, const char* name, bool writable) {
  if (!is_torch_tensor(object)) return false;
  if (writable && nb::hasattr(object, "requires_grad") &&
      nb::cast<bool>(nb::bool_(object.attr("requires_grad")))) {
    throw nb::value_error((std::string(name) +
                           ": a torch tensor that requires grad; specstate writes it outside "
                           "autograd: pass a tensor without grad (.detach(), or one made under "
                           "torch.no_grad())")
                              .c_str());
  }
  for (const char* flag : {"is_neg", "is_conj"}) {
    if (!nb::hasattr(object, flag)) continue;
    const nb::object set = object.attr(flag)();
    if (nb::isinstance<bool>(set) && nb::cast<bool>(set)) {
      throw nb::value_error((std::string(name) + ": a torch tensor with its " +
                             (flag[3] == 'n' ? "negative" : "conjugate") +
                             " bit set (a lazy view); call .resolve_neg() / .resolve_conj() "
                             "first")
                                .c_str());
    }
  }
  return true;
}

// Imports `object` into arg.array (arg.object set); returns whether the memory was taken as the
// uint16 bits of a NumPy bfloat16 array. Raises TypeError / ValueError naming `name`.
bool import_or_raise(nb::handle object, const char* name, bool writable, Arg& arg) {
  arg.torch = refuse_torch_hazards(object, name, writable);
  arg.object = nb::borrow(object);
  bool bf16_bits = false;
  nb::object source = arg.object;
  bool imported = import_array(source, writable, arg.array);
  // NumPy has no DLPack code for ml_dtypes.bfloat16: take the same memory as uint16 bits.
  if (!imported && is_numpy_bf16(object)) {
    source = object.attr("view")("uint16");
    bf16_bits = true;
    imported = import_array(source, writable, arg.array);
  }
  if (!imported) {
    PyErr_Clear();  // what a failed import may have left (numpy's __dlpack__ BufferError)
    // A NumPy array of the other byte order has no DLPack form: say so instead of "not an array".
    if (is_numpy_array(object) && nb::hasattr(object, "dtype")) {
      const nb::object dtype = object.attr("dtype");
      const nb::object order = dtype.attr("byteorder"), text = dtype.attr("str");  // '>', '>f4'
      if (nb::isinstance<nb::str>(order) && nb::isinstance<nb::str>(text) &&
          nb::cast<std::string>(order) == ">") {
        throw nb::type_error((std::string(name) + ": dtype " + nb::cast<std::string>(text) +
                              " is big-endian; give the native byte order (a.astype(a.dtype." +
                              "newbyteorder('=')))")
                                 .c_str());
      }
    }
    nb::ndarray<nb::ro> probe;
    if (writable && nb::try_cast<nb::ndarray<nb::ro>>(source, probe, false))
      throw nb::value_error(
          (std::string(name) + ": the array is read-only, an output must be writable").c_str());
    // A NumPy array DLPack cannot describe (a structured dtype's field, a stride that is no
    // multiple of the item size): name its dtype and strides, not "got ndarray".
    PyErr_Clear();  // what the probe's import may have left
    if (is_numpy_array(object) && nb::hasattr(object, "dtype") && nb::hasattr(object, "strides")) {
      const std::string dtype = nb::cast<std::string>(object.attr("dtype").attr("__str__")());
      const std::string strides = nb::cast<std::string>(object.attr("strides").attr("__str__")());
      throw nb::type_error((std::string(name) + ": a NumPy array of dtype " + dtype +
                            " and byte strides " + strides +
                            " has no DLPack form; give a plain numeric array "
                            "(np.ascontiguousarray of float32, bfloat16 or int32)")
                               .c_str());
    }
    throw nb::type_error((std::string(name) + ": expected an array (DLPack or buffer protocol: " +
                          "NumPy, torch, CuPy, JAX), got " + py_type_name(object))
                             .c_str());
  }
  return bf16_bits;
}

// The view's device from the array's DLPack device; raises ValueError for other devices.
void set_device(Arg& arg, const char* name) {
  const int dev = arg.array.device_type();
  if (dev == nb::device::cpu::value || dev == nb::device::cuda_host::value) {
    arg.view.device = Device::kCpu;
  } else if (dev == nb::device::cuda::value || dev == nb::device::cuda_managed::value) {
    arg.view.device = Device::kCuda;
    arg.device_id = arg.array.device_id();
  } else {
    throw nb::value_error(
        (std::string(name) + ": device " + device_text(dev) + " is not supported (cpu or cuda)")
            .c_str());
  }
}

}  // namespace

// "uint8[2, 64] cpu": how an array was received, for errors.
std::string array_text(const nb::ndarray<>& a) {
  std::string out = dtype_text(a.dtype()) + "[";
  for (size_t i = 0; i < a.ndim(); ++i) out += (i ? ", " : "") + std::to_string(a.shape(i));
  out += "] ";
  out += device_text(a.device_type());
  if (a.device_type() == nb::device::cuda::value) out += ":" + std::to_string(a.device_id());
  return out;
}

Arg to_arg(nb::handle object, const char* name, bool writable, bool allow_none) {
  Arg arg;
  if (object.is_none()) {
    if (!allow_none) throw nb::type_error((std::string(name) + ": None is not an array").c_str());
    arg.object = nb::none();
    return arg;
  }
  const bool bf16_bits = import_or_raise(object, name, writable, arg);
  if (arg.torch) arg.base_storage = torch_base_storage(object);
  const nb::ndarray<>& a = arg.array;
  const dl::dtype d = a.dtype();
  TensorView& v = arg.view;
  if (bf16_bits || (d.code == uint8_t(dl::dtype_code::Bfloat) && d.bits == 16 && d.lanes == 1)) {
    v.dtype = DType::kBF16;
  } else if (d.code == uint8_t(dl::dtype_code::Float) && d.bits == 32 && d.lanes == 1) {
    v.dtype = DType::kF32;
  } else if (d.code == uint8_t(dl::dtype_code::Int) && d.bits == 32 && d.lanes == 1) {
    v.dtype = DType::kI32;
  } else {
    throw nb::type_error((std::string(name) + ": dtype " + dtype_text(d) +
                          " is not supported (float32, bfloat16 or int32)")
                             .c_str());
  }
  set_device(arg, name);
  if (a.ndim() > static_cast<size_t>(TensorView::kMaxDims))
    throw nb::value_error((std::string(name) + ": " + std::to_string(a.ndim()) +
                           " dimensions, at most " + std::to_string(TensorView::kMaxDims))
                              .c_str());
  v.ndim = static_cast<int>(a.ndim());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.stride[i] = a.stride(i);  // nanobind strides are in elements
  }
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  if (v.data == nullptr && a.size() > 0) {
    // A DLPack tensor may claim elements at a null address: the library takes a null pointer as
    // "no tensor" (an optional output was skipped), and a read of it would fault.
    throw nb::value_error((std::string(name) + ": " + array_text(a) +
                           " has a null data pointer but " + std::to_string(a.size()) + " elements")
                              .c_str());
  }
  if (v.data == nullptr && a.size() == 0) {
    // An empty array may carry no pointer; the library takes a null pointer as "no tensor".
    static char dummy alignas(16)[16];
    v.data = dummy;
  }
  return arg;
}

std::optional<std::vector<int32_t>> host_int_values(nb::handle object, const char* function,
                                                    const char* name) {
  if (object.is_none()) return std::nullopt;
  refuse_torch_hazards(object, name, /*writable=*/false);
  // bytes and bytearray (and a memoryview of bytes) export their bytes as uint8: commit(b"12")
  // would commit the character codes. An accepted count is an int: refused, naming the argument.
  bool byte_string = PyBytes_Check(object.ptr()) || PyByteArray_Check(object.ptr());
  if (PyMemoryView_Check(object.ptr())) {  // a view of bytes, not of an integer array
    // A released memoryview raises on any access: named here (its own ValueError named nothing).
    const nb::object base = nb::steal(PyObject_GetAttrString(object.ptr(), "obj"));
    if (!base.is_valid()) {
      PyErr_Clear();
      throw nb::value_error((std::string(name) + ": the memoryview is released").c_str());
    }
    byte_string = PyBytes_Check(base.ptr()) || PyByteArray_Check(base.ptr());
  }
  if (byte_string) {
    throw nb::type_error((std::string(name) +
                          ": expected a list of ints or an integer array, got " +
                          arg_type_name(object))
                             .c_str());
  }
  nb::ndarray<> a;
  if (!import_array(object, /*writable=*/false, a)) return std::nullopt;
  const dl::dtype d = a.dtype();
  const bool is_int = d.code == uint8_t(dl::dtype_code::Int);
  const bool is_uint = d.code == uint8_t(dl::dtype_code::UInt);
  const int dev = a.device_type();
  if ((!is_int && !is_uint) || d.lanes != 1 || (is_int && d.bits == 32) ||
      (d.bits != 8 && d.bits != 16 && d.bits != 32 && d.bits != 64) ||
      (dev != nb::device::cpu::value && dev != nb::device::cuda_host::value)) {
    return std::nullopt;
  }
  if (a.ndim() != 1) {
    throw nb::value_error((std::string(name) + ": " + array_text(a) + " has " +
                           std::to_string(a.ndim()) + " dimensions, expected one ([rows])")
                              .c_str());
  }
  const auto* base = static_cast<const char*>(a.data());
  const int64_t n = static_cast<int64_t>(a.shape(0)), stride = a.stride(0) * (d.bits / 8);
  // Bounded before anything is allocated (a broadcast array of 2^40 entries holds 8 bytes):
  // no round has more rows than max_rows can be, and the pool checks the exact count.
  if (n > PoolOptions::kMaxRows) {
    throw Error(Status::kOutOfRange, std::string(function) + ": " + name + " is " + array_text(a) +
                                         ": " + std::to_string(n) +
                                         " entries, more than a round's rows can be (" +
                                         std::to_string(PoolOptions::kMaxRows) + ")");
  }
  if (base == nullptr && n > 0) {
    throw nb::value_error((std::string(name) + ": " + array_text(a) +
                           " has a null data pointer but " + std::to_string(n) + " elements")
                              .c_str());
  }
  std::vector<int32_t> values(static_cast<std::size_t>(n));
  // Elements read with memcpy: an array may sit at any byte address (np.frombuffer with an
  // offset), where a typed load is undefined.
  const auto read = [](const char* p, auto zero) {
    decltype(zero) x;
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  for (int64_t i = 0; i < n; ++i) {
    const char* p = base + i * stride;
    int64_t v = 0;
    uint64_t u = 0;
    switch (d.bits) {
      case 8:
        v = is_int ? read(p, int8_t{}) : read(p, uint8_t{});
        break;
      case 16:
        v = is_int ? read(p, int16_t{}) : read(p, uint16_t{});
        break;
      case 32:  // uint32 (int32 arrays are taken as they are)
        v = read(p, uint32_t{});
        break;
      default:
        if (is_int) {
          v = read(p, int64_t{});
        } else {
          u = read(p, uint64_t{});
          v = u > static_cast<uint64_t>(INT32_MAX) ? int64_t{INT32_MAX} + 1
                                                   : static_cast<int64_t>(u);
        }
    }
    if (v < INT32_MIN || v > INT32_MAX) {
      throw Error(Status::kOutOfRange,
                  std::string(function) + ": " + name + "[" + std::to_string(i) +
                      "] = " + (is_uint && d.bits == 64 ? std::to_string(u) : std::to_string(v)) +
                      " does not fit int32 (" + name + " is " + array_text(a) + ")");
    }
    values[static_cast<std::size_t>(i)] = static_cast<int32_t>(v);
  }
  return values;
}

Arg to_bytes_arg(nb::handle object, const char* function, const char* name, bool writable,
                 int64_t bytes, bool cuda_pool) {
  Arg arg;
  if (object.is_none())
    throw nb::type_error((std::string(name) + ": None is not an array").c_str());
  arg.torch = refuse_torch_hazards(object, name, writable);
  arg.object = nb::borrow(object);
  bool imported = import_array(object, writable, arg.array);
  if (!imported && is_numpy_array(object)) {
    // An object array holds references, not numbers (its bytes are no values).
    if (nb::cast<std::string>(nb::str(object.attr("dtype").attr("kind"))) == "O") {
      throw nb::type_error(
          (std::string(name) + ": dtype object holds Python objects, not numbers").c_str());
    }
    // A NumPy dtype DLPack has no code for (ml_dtypes' bfloat16, float8, int4, ...): only the
    // bytes matter here, so take the same memory as uint8.
    nb::object as_bytes;
    try {
      as_bytes = object.attr("view")("uint8");
    } catch (nb::python_error& e) {
      // The exception's own message (what() would add its traceback).
      const std::string why = nb::cast<std::string>(nb::str(e.value()));
      throw nb::value_error((std::string(name) + ": cannot take the array's memory as bytes (" +
                             why + "): give a C-contiguous buffer")
                                .c_str());
    }
    imported = import_array(as_bytes, writable, arg.array);
  }
  if (!imported) import_or_raise(object, name, writable, arg);  // raises what is wrong
  const nb::ndarray<>& a = arg.array;
  const dl::dtype d = a.dtype();
  if (d.lanes != 1 || d.bits == 0 || d.bits % 8 != 0)
    throw nb::type_error((std::string(name) + ": dtype " + dtype_text(d) +
                          " is no dtype of whole-byte scalar elements (give a uint8 array)")
                             .c_str());
  set_device(arg, name);
  if (arg.view.device == Device::kCuda && !cuda_pool)
    throw Error(Status::kInvalidArgument, std::string(function) + ": " + name + " (" +
                                              array_text(a) +
                                              ") lives on cuda, the pool's backend is cpu: give "
                                              "a host array (NumPy)");
  const int64_t item = d.bits / 8;
  int64_t expect_stride = 1;  // C order, in elements; dimensions of one element are free
  // An array of no elements (numpy gives it strides of 0) has no layout to refuse: its size is
  // what is wrong.
  for (size_t i = a.ndim(); a.size() > 0 && i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect_stride)
      throw nb::value_error((std::string(name) + ": " + array_text(a) +
                             " is not contiguous (a slot's state is one run of bytes: give a "
                             "C-contiguous buffer, e.g. numpy.ascontiguousarray)")
                                .c_str());
    expect_stride *= static_cast<int64_t>(a.shape(i));
  }
  const int64_t got = static_cast<int64_t>(a.size()) * item;
  const int64_t rounded = (bytes + item - 1) / item * item;  // the C++ API's ceil(bytes / item)
  if (got != bytes && got != rounded) {
    std::string want = std::to_string(bytes) + " bytes";
    if (rounded != bytes)
      want += " (or " + std::to_string(rounded / item) + " " + dtype_text(d) + " elements)";
    throw Error(Status::kInvalidArgument,
                std::string(function) + ": " + name + " (" + array_text(a) + ") holds " +
                    std::to_string(got) + " bytes, expected pool.slot_state_bytes() = " + want +
                    ", e.g. numpy.empty(pool.slot_state_bytes(), numpy.uint8)");
  }
  // The library takes the buffer as a 1-D i32 / bf16 / f32 view of ceil(bytes / element size)
  // elements and touches only its first `bytes` bytes (include/specstate/pool.h).
  const int64_t elem = bytes % 4 == 0 ? 4 : 2;
  TensorView& v = arg.view;
  v.dtype = elem == 4 ? DType::kI32 : DType::kBF16;
  v.ndim = 1;
  v.shape[0] = (bytes + elem - 1) / elem;
  v.stride[0] = 1;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  return arg;
}

namespace {
// A stream handle: a Python int in [0, 2^64) (a cudaStream_t's bits). `what` names the value.
uintptr_t stream_handle(nb::handle value, const std::string& what) {
  if (!nb::isinstance<nb::int_>(value) || nb::isinstance<nb::bool_>(value))
    throw nb::type_error(
        (what + ": expected an int stream handle, got " + py_type_name(value)).c_str());
  const unsigned long long v = PyLong_AsUnsignedLongLong(value.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw nb::value_error((what + " = " + nb::cast<std::string>(nb::repr(value)) +
                           " is not a stream handle (a cudaStream_t's bits, in [0, 2^64))")
                              .c_str());
  }
  return static_cast<uintptr_t>(v);
}
}  // namespace

std::optional<uintptr_t> to_stream(nb::handle object, const char* name) {
  if (object.is_none()) return std::nullopt;
  const std::string n = name;
  if (nb::isinstance<nb::int_>(object) && !nb::isinstance<nb::bool_>(object))
    return stream_handle(object, n);
  if (nb::hasattr(object, "__cuda_stream__")) {
    // The CUDA stream protocol: __cuda_stream__() returns (version, handle).
    nb::object pair = object.attr("__cuda_stream__")();
    if (!nb::isinstance<nb::tuple>(pair) || nb::len(pair) != 2)
      throw nb::type_error((n + ": __cuda_stream__() returned " + py_type_name(pair) +
                            ", expected a (version, handle) tuple")
                               .c_str());
    return stream_handle(pair[1], n + ".__cuda_stream__()[1]");
  }
  // The property read once (hasattr then attr read it twice: a property with side effects ran
  // twice).
  PyObject* handle = PyObject_GetAttrString(object.ptr(), "cuda_stream");
  if (handle != nullptr) return stream_handle(nb::steal(handle), n + ".cuda_stream");
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
  PyErr_Clear();
  throw nb::type_error((std::string(name) + ": expected a CUDA stream (an int handle such as " +
                        "torch.cuda.current_stream().cuda_stream, or a stream object), got " +
                        py_type_name(object))
                           .c_str());
}

nb::object view_to_python(const TensorView& view, int device_id, nb::handle owner) {
  size_t shape[TensorView::kMaxDims];
  int64_t strides[TensorView::kMaxDims];
  for (int i = 0; i < view.ndim; ++i) {
    shape[i] = static_cast<size_t>(view.shape[i]);
    strides[i] = view.stride[i];
  }
  dl::dtype d{};
  d.lanes = 1;
  switch (view.dtype) {
    case DType::kF32:
      d.code = uint8_t(dl::dtype_code::Float);
      d.bits = 32;
      break;
    case DType::kBF16:
      d.code = uint8_t(dl::dtype_code::Bfloat);
      d.bits = 16;
      break;
    case DType::kI32:
      d.code = uint8_t(dl::dtype_code::Int);
      d.bits = 32;
      break;
  }
  const int device =
      view.device == Device::kCuda ? nb::device::cuda::value : nb::device::cpu::value;
  nb::ndarray<nb::array_api> array(view.data, static_cast<size_t>(view.ndim), shape, owner, strides,
                                   d, device, view.device == Device::kCuda ? device_id : 0);
  return nb::cast(std::move(array));
}

// The weights of a delta-rule layer kind (GDN, KDA: conv_weight, A_log, dt_bias, conv_bias?),
// bound with the kind's names and docs.
template <typename W>
void bind_delta_weights(nb::module_& m, const char* name, const char* doc, const char* init_doc,
                        const char* bias_doc, const char* a_log_doc, const char* dt_bias_doc) {
  const auto rw = [](auto field, const char* what) {
    return std::make_pair([field](const W& self) { return (self.*field).object; },
                          [field, what](W& self, nb::handle value) {
                            self.*field = to_arg(value, what, false,
                                                 std::string(what) == "weights.conv_bias");
                          });
  };
  nb::class_<W> c(m, name, doc);
  c.def(
      "__init__",
      [](W* self, nb::handle conv_weight, nb::handle A_log, nb::handle dt_bias,
         nb::handle conv_bias) {
        W tmp;  // converted first: a refused argument releases the ones before it
        tmp.conv_weight = to_arg(conv_weight, "weights.conv_weight", false, false);
        tmp.A_log = to_arg(A_log, "weights.A_log", false, false);
        tmp.dt_bias = to_arg(dt_bias, "weights.dt_bias", false, false);
        tmp.conv_bias = to_arg(conv_bias, "weights.conv_bias", false, true);
        new (self) W(std::move(tmp));
      },
      nb::arg("conv_weight").none(), nb::arg("A_log").none(), nb::arg("dt_bias").none(),
      nb::arg("conv_bias").none() = nb::none(), init_doc);
  const auto prop = [&](const char* field_name, Arg W::*field, const char* what,
                        const char* field_doc) {
    auto [get, set] = rw(field, what);
    c.def_prop_rw(field_name, get, set, nb::arg("value").none(), field_doc);
  };
  prop("conv_weight", &W::conv_weight, "weights.conv_weight",
       "[conv_dim, W] depthwise conv weight.");
  prop("conv_bias", &W::conv_bias, "weights.conv_bias", bias_doc);
  prop("A_log", &W::A_log, "weights.A_log", a_log_doc);
  prop("dt_bias", &W::dt_bias, "weights.dt_bias", dt_bias_doc);
}

void bind_tensors(nb::module_& m) {
  m.def(
      "describe", [](nb::handle x) { return to_arg(x, "x", false, false).view.describe(); },
      nb::arg("x"),
      "How specstate sees an array: dtype, shape, element strides and device, e.g. "
      "'f32[4, 8192] strides [8192, 1] cpu'. No copy is made; raises TypeError / ValueError "
      "for what specstate cannot take.");
  m.def(
      "_bf16_bits",
      [](nb::handle x) {
        // Writable where x's memory is (an output's import), read-only otherwise: the bits are
        // then exported read-only (DLPack's read-only flag), so that NumPy's result cannot be made
        // writable again (flags.writeable = True on bytes through np.frombuffer wrote the bytes).
        bool read_only = false;
        Arg a;
        try {
          a = to_arg(x, "x", true, false);
        } catch (const nb::builtin_exception& e) {
          if (e.type() != nb::exception_type::value_error) throw;
          a = to_arg(x, "x", false, false);
          read_only = true;
        }
        if (a.view.dtype != DType::kBF16) throw nb::type_error("x: not a bfloat16 array");
        TensorView bits = a.view;
        bits.dtype = DType::kI32;  // placeholder, replaced below
        size_t shape[TensorView::kMaxDims];
        int64_t strides[TensorView::kMaxDims];
        for (int i = 0; i < bits.ndim; ++i) {
          shape[i] = static_cast<size_t>(bits.shape[i]);
          strides[i] = bits.stride[i];
        }
        // The owner is the import of x's memory (what its DLPack export keeps alive), not x:
        // x may let go of that memory while the bits live (a wrapper whose array is replaced).
        const int32_t device_type = a.array.device_type(), device_id = a.array.device_id();
        auto* import = new nb::ndarray<>(std::move(a.array));
        nb::capsule owner(import, [](void* p) noexcept { delete static_cast<nb::ndarray<>*>(p); });
        if (read_only) {
          nb::ndarray<nb::array_api, nb::ro> array(bits.data, static_cast<size_t>(bits.ndim), shape,
                                                   owner, strides, nb::dtype<uint16_t>(),
                                                   device_type, device_id);
          return nb::cast(std::move(array));
        }
        nb::ndarray<nb::array_api> array(bits.data, static_cast<size_t>(bits.ndim), shape, owner,
                                         strides, nb::dtype<uint16_t>(), device_type, device_id);
        return nb::cast(std::move(array));
      },
      nb::arg("x"),
      "The same memory as a bfloat16 array `x`, as uint16 bits (no copy; keeps that memory "
      "alive). "
      "Used by specstate.to_numpy for NumPy, which has no DLPack bfloat16.");

#define SPECSTATE_ARG_RW(Cls, field, prefix, writable, optional, doc)      \
  def_prop_rw(                                                             \
      #field, [](const Cls& self) { return self.field.object; },           \
      [](Cls& self, nb::handle value) {                                    \
        self.field = to_arg(value, prefix "." #field, writable, optional); \
      },                                                                   \
      nb::arg("value").none(), doc)

  bind_delta_weights<PyGdnWeights>(
      m, "GdnWeights",
      "One Gated DeltaNet layer's weights, as views of the caller's arrays (no copies; the "
      "arrays stay alive while this object holds them).",
      "conv_weight [conv_dim, W] (tap W-1 multiplies the current token), A_log [HV], "
      "dt_bias [HV], conv_bias [conv_dim] or None; float32 or bfloat16.",
      "[conv_dim] conv bias, or None (GdnConfig.conv_bias False).", "[HV] log decay.",
      "[HV] gate bias.");

  nb::class_<PyGdnInputs>(
      m, "GdnInputs",
      "Per-token layer inputs, packed by row (token i of row r at r*T + i in verify), as views "
      "of the caller's arrays.")
      .def(
          "__init__",
          [](PyGdnInputs* self, nb::handle mixed_qkv, nb::handle a, nb::handle b) {
            PyGdnInputs tmp;  // converted first: a refused argument releases the ones before it
            tmp.mixed_qkv = to_arg(mixed_qkv, "inputs.mixed_qkv", false, false);
            tmp.a = to_arg(a, "inputs.a", false, false);
            tmp.b = to_arg(b, "inputs.b", false, false);
            new (self) PyGdnInputs(std::move(tmp));
          },
          nb::arg("mixed_qkv").none(), nb::arg("a").none(), nb::arg("b").none(),
          "mixed_qkv [tokens, conv_dim] = [q | k | v] before the conv, a [tokens, HV] (decay "
          "gate input), b [tokens, HV] (beta gate input); in the layer's act dtype.")
      .SPECSTATE_ARG_RW(PyGdnInputs, mixed_qkv, "inputs", false, false,
                        "[tokens, conv_dim] conv input.")
      .SPECSTATE_ARG_RW(PyGdnInputs, a, "inputs", false, false, "[tokens, HV] decay gate input.")
      .SPECSTATE_ARG_RW(PyGdnInputs, b, "inputs", false, false, "[tokens, HV] beta gate input.");

  nb::class_<PyGdnOutputs>(m, "GdnOutputs",
                           "Per-token layer outputs, written into the caller's arrays.")
      .def(
          "__init__",
          [](PyGdnOutputs* self, nb::handle core_out, nb::handle conv_out) {
            PyGdnOutputs tmp;  // converted first: a refused argument releases the ones before it
            tmp.core_out = to_arg(core_out, "outputs.core_out", true, false);
            tmp.conv_out = to_arg(conv_out, "outputs.conv_out", true, true);
            new (self) PyGdnOutputs(std::move(tmp));
          },
          nb::arg("core_out").none(), nb::arg("conv_out").none() = nb::none(),
          "core_out [tokens, HV, V] recurrence output; conv_out [tokens, conv_dim] (conv + "
          "SiLU) or None; in the layer's act dtype.")
      .SPECSTATE_ARG_RW(PyGdnOutputs, core_out, "outputs", true, false,
                        "[tokens, HV, V] recurrence output.")
      .SPECSTATE_ARG_RW(PyGdnOutputs, conv_out, "outputs", true, true,
                        "[tokens, conv_dim] conv output after SiLU, or None.");

  nb::class_<PyMamba2Weights>(m, "Mamba2Weights",
                              "One Mamba2 layer's weights, as views of the caller's arrays.")
      .def(
          "__init__",
          [](PyMamba2Weights* self, nb::handle conv_weight, nb::handle A_log, nb::handle dt_bias,
             nb::handle conv_bias, nb::handle D) {
            PyMamba2Weights tmp;  // converted first: a refused argument releases the ones before it
            tmp.conv_weight = to_arg(conv_weight, "weights.conv_weight", false, false);
            tmp.A_log = to_arg(A_log, "weights.A_log", false, false);
            tmp.dt_bias = to_arg(dt_bias, "weights.dt_bias", false, false);
            tmp.conv_bias = to_arg(conv_bias, "weights.conv_bias", false, true);
            tmp.D = to_arg(D, "weights.D", false, true);
            new (self) PyMamba2Weights(std::move(tmp));
          },
          nb::arg("conv_weight").none(), nb::arg("A_log").none(), nb::arg("dt_bias").none(),
          nb::arg("conv_bias").none() = nb::none(), nb::arg("D").none() = nb::none(),
          "conv_weight [conv_dim, W], A_log [nheads] (A = -exp(A_log)), dt_bias [nheads], "
          "conv_bias [conv_dim] or None, D [nheads] or None; float32 or bfloat16.")
      .SPECSTATE_ARG_RW(PyMamba2Weights, conv_weight, "weights", false, false,
                        "[conv_dim, W] depthwise conv weight.")
      .SPECSTATE_ARG_RW(PyMamba2Weights, conv_bias, "weights", false, true,
                        "[conv_dim] conv bias, or None.")
      .SPECSTATE_ARG_RW(PyMamba2Weights, A_log, "weights", false, false, "[nheads] log decay.")
      .SPECSTATE_ARG_RW(PyMamba2Weights, dt_bias, "weights", false, false, "[nheads] dt bias.")
      .SPECSTATE_ARG_RW(PyMamba2Weights, D, "weights", false, true,
                        "[nheads] skip coefficient, or None (Mamba2Config.d_skip False).");
  nb::class_<PyMamba2Inputs>(m, "Mamba2Inputs", "Per-token Mamba2 layer inputs, packed by row.")
      .def(
          "__init__",
          [](PyMamba2Inputs* self, nb::handle xBC, nb::handle dt, nb::handle z) {
            PyMamba2Inputs tmp;  // converted first: a refused argument releases the ones before it
            tmp.xBC = to_arg(xBC, "inputs.xBC", false, false);
            tmp.dt = to_arg(dt, "inputs.dt", false, false);
            tmp.z = to_arg(z, "inputs.z", false, true);
            new (self) PyMamba2Inputs(std::move(tmp));
          },
          nb::arg("xBC").none(), nb::arg("dt").none(), nb::arg("z").none() = nb::none(),
          "xBC [tokens, conv_dim] = [x | B | C] before the conv, dt [tokens, nheads] raw time "
          "step, z [tokens, nheads*P] output gate or None (Mamba2Config.gate False).")
      .SPECSTATE_ARG_RW(PyMamba2Inputs, xBC, "inputs", false, false, "[tokens, conv_dim].")
      .SPECSTATE_ARG_RW(PyMamba2Inputs, dt, "inputs", false, false, "[tokens, nheads].")
      .SPECSTATE_ARG_RW(PyMamba2Inputs, z, "inputs", false, true, "[tokens, nheads*P] or None.");
  nb::class_<PyMamba2Outputs>(m, "Mamba2Outputs", "Per-token Mamba2 layer outputs.")
      .def(
          "__init__",
          [](PyMamba2Outputs* self, nb::handle y, nb::handle conv_out) {
            PyMamba2Outputs tmp;  // converted first: a refused argument releases the ones before it
            tmp.y = to_arg(y, "outputs.y", true, false);
            tmp.conv_out = to_arg(conv_out, "outputs.conv_out", true, true);
            new (self) PyMamba2Outputs(std::move(tmp));
          },
          nb::arg("y").none(), nb::arg("conv_out").none() = nb::none(),
          "y [tokens, nheads, P] selective-state-update output; conv_out [tokens, conv_dim] or "
          "None.")
      .SPECSTATE_ARG_RW(PyMamba2Outputs, y, "outputs", true, false, "[tokens, nheads, P].")
      .SPECSTATE_ARG_RW(PyMamba2Outputs, conv_out, "outputs", true, true,
                        "[tokens, conv_dim] or None.");

  bind_delta_weights<PyKdaWeights>(
      m, "KdaWeights", "One KDA layer's weights, as views of the caller's arrays.",
      "conv_weight [conv_dim, W], A_log [HV], dt_bias [HV, K] (one bias per key channel), "
      "conv_bias [conv_dim] or None; float32 or bfloat16.",
      "[conv_dim] conv bias, or None (KdaConfig.conv_bias False).", "[HV] log decay scale.",
      "[HV, K] gate bias.");
  nb::class_<PyKdaInputs>(m, "KdaInputs", "Per-token KDA layer inputs, packed by row.")
      .def(
          "__init__",
          [](PyKdaInputs* self, nb::handle mixed_qkv, nb::handle g, nb::handle b) {
            PyKdaInputs tmp;  // converted first: a refused argument releases the ones before it
            tmp.mixed_qkv = to_arg(mixed_qkv, "inputs.mixed_qkv", false, false);
            tmp.g = to_arg(g, "inputs.g", false, false);
            tmp.b = to_arg(b, "inputs.b", false, false);
            new (self) PyKdaInputs(std::move(tmp));
          },
          nb::arg("mixed_qkv").none(), nb::arg("g").none(), nb::arg("b").none(),
          "mixed_qkv [tokens, conv_dim] = [q | k | v] before the conv, g [tokens, HV, K] raw "
          "gate, b [tokens, HV] beta logits; in the layer's act dtype.")
      .SPECSTATE_ARG_RW(PyKdaInputs, mixed_qkv, "inputs", false, false,
                        "[tokens, conv_dim] conv input.")
      .SPECSTATE_ARG_RW(PyKdaInputs, g, "inputs", false, false, "[tokens, HV, K] raw gate.")
      .SPECSTATE_ARG_RW(PyKdaInputs, b, "inputs", false, false, "[tokens, HV] beta logits.");
  nb::class_<PyKdaOutputs>(m, "KdaOutputs", "Per-token KDA layer outputs.")
      .def(
          "__init__",
          [](PyKdaOutputs* self, nb::handle core_out, nb::handle conv_out) {
            PyKdaOutputs tmp;  // converted first: a refused argument releases the ones before it
            tmp.core_out = to_arg(core_out, "outputs.core_out", true, false);
            tmp.conv_out = to_arg(conv_out, "outputs.conv_out", true, true);
            new (self) PyKdaOutputs(std::move(tmp));
          },
          nb::arg("core_out").none(), nb::arg("conv_out").none() = nb::none(),
          "core_out [tokens, HV, V] recurrence output; conv_out [tokens, conv_dim] or None.")
      .SPECSTATE_ARG_RW(PyKdaOutputs, core_out, "outputs", true, false,
                        "[tokens, HV, V] recurrence output.")
      .SPECSTATE_ARG_RW(PyKdaOutputs, conv_out, "outputs", true, true,
                        "[tokens, conv_dim] conv output after SiLU, or None.");
#undef SPECSTATE_ARG_RW
}

}  // namespace specstate::py
