// The extension module specstate._specstate: errors, enums, configs and the parts bound in the
// other files. The package specstate (python/specstate/__init__.py) re-exports it.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "common.h"

namespace specstate::py {
namespace {

// specstate.Error and one subclass per Status (kInvalidArgument and kOutOfRange are also
// ValueErrors, kNotSupported a NotImplementedError).
PyObject* g_error = nullptr;
PyObject* g_errors[8] = {};

PyObject* make_error(nb::module_& m, const char* name, const char* doc, PyObject* bases) {
  const std::string qualified = std::string("specstate.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

void bind_errors(nb::module_& m) {
  g_error = make_error(m, "Error",
                       "Raised by every specstate call that rejects its input (a rejected call "
                       "changes nothing). `status` is the specstate.Status; the message names "
                       "the function, the argument and its value.",
                       PyExc_RuntimeError);
  auto sub = [&](Status status, const char* name, const char* doc, PyObject* extra) {
    nb::tuple bases = extra ? nb::make_tuple(nb::handle(g_error), nb::handle(extra))
                            : nb::make_tuple(nb::handle(g_error));
    g_errors[static_cast<int>(status)] = make_error(m, name, doc, bases.ptr());
  };
  sub(Status::kInvalidArgument, "InvalidArgumentError",
      "A value, shape, stride or dtype the call cannot accept (also a ValueError).",
      PyExc_ValueError);
  sub(Status::kOutOfRange, "OutOfRangeError",
      "An index (slot, layer, row, token, tree node) outside its range (also a ValueError).",
      PyExc_ValueError);
  sub(Status::kResourceExhausted, "ResourceExhaustedError", "The pool has no free slot.", nullptr);
  sub(Status::kFailedPrecondition, "FailedPreconditionError",
      "A stale / released / foreign handle, or a call out of protocol order.", nullptr);
  sub(Status::kNotSupported, "NotSupportedError",
      "A configuration this build or backend does not implement (also a NotImplementedError).",
      PyExc_NotImplementedError);
  sub(Status::kBackendError, "BackendError", "The device reported an error (CUDA).", nullptr);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      const int index = static_cast<int>(e.status());
      PyObject* cls = (index >= 0 && index < 8 && g_errors[index]) ? g_errors[index] : g_error;
      // A message may hold bytes of the input that are not UTF-8 (a trace's "last read: ..."):
      // decoded with backslash escapes, never a UnicodeDecodeError in place of the error. Its
      // whole length (a NUL of the caller's text, e.g. a source name, shown as \x00: what()
      // would end there).
      const std::string what = escape_nul(e.text());
      nb::object message = nb::steal(PyUnicode_DecodeUTF8(
          what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace"));
      if (!message.is_valid()) return;
      nb::object instance = nb::steal(PyObject_CallOneArg(cls, message.ptr()));
      if (!instance.is_valid()) return;  // the call set a Python error already
      instance.attr("status") = nb::cast(e.status());
      PyErr_SetObject(cls, instance.ptr());
    }
  });
}

// A size accessor of a config (conv_dim, ssm_state_elems, slot_bytes, ...) called once the
// config validates: the products of an unvalidated config's fields may pass 64 bits (signed
// overflow), and a negative field gives a meaningless size. Raises the validation's error,
// which names the field and its value.
inline ModelConfig one_layer(const GdnConfig& c) { return ModelConfig::gated_delta_net(1, c); }
inline ModelConfig one_layer(const KdaConfig& c) { return ModelConfig::kda(1, c); }
inline ModelConfig one_layer(const Mamba2Config& c) { return ModelConfig::mamba2(1, c); }
inline const ModelConfig& one_layer(const ModelConfig& c) { return c; }
template <typename C, typename R>
auto validated(R (C::*size)() const noexcept) {
  return [size](const C& c) {
    one_layer(c).validate();
    return (c.*size)();
  };
}

// A float field that may be unset, as Python writes it ("None", "0.0625", "0.1"): the shortest
// decimal that reads back as the same float32 (the field's type), in Python's float notation.
// Widened to double first, 0.1 printed as 0.10000000149011612.
std::string optional_text(const std::optional<float>& v) {
  if (!v) return "None";
  char digits[64];
  const auto end = std::to_chars(digits, digits + sizeof(digits), *v).ptr;
  return nb::cast<std::string>(
      nb::repr(nb::float_(std::strtod(std::string(digits, end).c_str(), nullptr))));
}

// The fields the delta-rule kinds' configs share (GdnConfig, KdaConfig): set from __init__'s
// keywords, and bound as properties, methods and __repr__ under the kind's class name.
// (The int keywords arrive as objects: converted naming "<cls>.<field>" and the value, as the
// properties' setters do.)
template <typename C>
void set_delta_fields(C* self, const char* cls, nb::handle num_k_heads, nb::handle num_v_heads,
                      nb::handle head_k_dim, nb::handle head_v_dim, nb::handle conv_width,
                      nb::handle scale, BoolArg conv_bias, DTypeArg act_dtype,
                      DTypeArg conv_state_dtype, DTypeArg ssm_state_dtype) {
  const std::string c = cls;
  self->num_k_heads = to_integer<int>(num_k_heads, c + ".num_k_heads");
  self->num_v_heads = to_integer<int>(num_v_heads, c + ".num_v_heads");
  self->head_k_dim = to_integer<int>(head_k_dim, c + ".head_k_dim");
  self->head_v_dim = to_integer<int>(head_v_dim, c + ".head_v_dim");
  self->conv_width = to_integer<int>(conv_width, c + ".conv_width");
  self->scale = to_float32(scale, c + ".scale");
  self->conv_bias = to_bool(conv_bias, c + ".conv_bias");
  self->act_dtype = to_enum<DType>(act_dtype, c + ".act_dtype");
  self->conv_state_dtype = to_enum<DType>(conv_state_dtype, c + ".conv_state_dtype");
  self->ssm_state_dtype = to_enum<DType>(ssm_state_dtype, c + ".ssm_state_dtype");
}

template <typename C>
void def_delta_fields(nb::class_<C>& cls, const std::string& name, const char* conv_bias_doc,
                      const char* act_dtype_doc) {
  def_int_field(cls, name, "num_k_heads", &C::num_k_heads, "H: query/key heads.");
  def_int_field(cls, name, "num_v_heads", &C::num_v_heads, "HV: value heads, a multiple of H.");
  def_int_field(cls, name, "head_k_dim", &C::head_k_dim, "K.");
  def_int_field(cls, name, "head_v_dim", &C::head_v_dim, "V.");
  def_int_field(cls, name, "conv_width", &C::conv_width,
                "W: conv taps; the conv state keeps W-1 columns.");
  cls.def_prop_rw("scale", field_getter(&C::scale), float_setter(&C::scale, name + ".scale"),
                  nb::arg("value").none(),
                  value_sig("scale", "typing.SupportsFloat | typing.SupportsIndex | None"),
                  "Query scale; K**-0.5 when None.")
      .def_prop_rw("conv_bias", field_getter(&C::conv_bias),
                   bool_setter(&C::conv_bias, name + ".conv_bias"), nb::arg("value").none(),
                   value_sig("conv_bias", "bool | numpy.bool_"), conv_bias_doc)
      .def_prop_rw("act_dtype", field_getter(&C::act_dtype),
                   enum_setter(&C::act_dtype, name + ".act_dtype"), nb::arg("value").none(),
                   value_sig("act_dtype", "DType"), act_dtype_doc)
      .def_prop_rw("conv_state_dtype", field_getter(&C::conv_state_dtype),
                   enum_setter(&C::conv_state_dtype, name + ".conv_state_dtype"),
                   nb::arg("value").none(), value_sig("conv_state_dtype", "DType"),
                   "Committed conv window dtype.")
      .def_prop_rw("ssm_state_dtype", field_getter(&C::ssm_state_dtype),
                   enum_setter(&C::ssm_state_dtype, name + ".ssm_state_dtype"),
                   nb::arg("value").none(), value_sig("ssm_state_dtype", "DType"),
                   "Committed SSM state dtype.")
      .def("conv_dim", validated(&C::conv_dim), "2*H*K + HV*V (of a config that validates).")
      .def("effective_scale", validated(&C::effective_scale),
           "scale, or K**-0.5 when unset (of a config that validates).")
      .def("ssm_state_elems", validated(&C::ssm_state_elems),
           "HV * V * K (of a config that validates).")
      .def("__repr__", [name](const C& c) {
        std::string extra;
        if constexpr (std::is_same_v<C, KdaConfig>)
          extra = ", lower_bound=" + optional_text(c.lower_bound);
        return name + "(num_k_heads=" + std::to_string(c.num_k_heads) +
               ", num_v_heads=" + std::to_string(c.num_v_heads) +
               ", head_k_dim=" + std::to_string(c.head_k_dim) +
               ", head_v_dim=" + std::to_string(c.head_v_dim) +
               ", conv_width=" + std::to_string(c.conv_width) +
               ", scale=" + optional_text(c.scale) +
               ", conv_bias=" + (c.conv_bias ? "True" : "False") + extra +
               ", act_dtype=" + dtype_name(c.act_dtype) +
               ", conv_state_dtype=" + dtype_name(c.conv_state_dtype) +
               ", ssm_state_dtype=" + dtype_name(c.ssm_state_dtype) + ")";
      });
}

}  // namespace

void bind_config(nb::module_& m) {
  nb::enum_<Status>(m, "Status", "Outcome of a call (specstate.Error.status).")
      .value("SUCCESS", Status::kSuccess)
      .value("INVALID_ARGUMENT", Status::kInvalidArgument)
      .value("OUT_OF_RANGE", Status::kOutOfRange)
      .value("RESOURCE_EXHAUSTED", Status::kResourceExhausted)
      .value("FAILED_PRECONDITION", Status::kFailedPrecondition)
      .value("NOT_SUPPORTED", Status::kNotSupported)
      .value("BACKEND_ERROR", Status::kBackendError);
  nb::enum_<DType>(m, "DType", "Storage dtype of activations and states.")
      .value("F32", DType::kF32)
      .value("BF16", DType::kBF16)
      .value("I32", DType::kI32);
  nb::enum_<Device>(m, "Device", "Where an array's memory lives.")
      .value("CPU", Device::kCpu)
      .value("CUDA", Device::kCuda);
  nb::enum_<Backend>(m, "Backend", "Where the pool's memory lives and its kernels run.")
      .value("CPU", Backend::kCpu)
      .value("CUDA", Backend::kCuda);
  nb::enum_<Strategy>(
      m, "Strategy",
      "How verify records what commit needs (bit-identical results). SNAPSHOT: the state after "
      "every window token in row-indexed scratch, commit copies the accepted one. REPLAY: "
      "per-token rank-1 factor records in a ring per slot, commit only moves the slot's cursor, "
      "the next verify applies them to the checkpoint (committed memory lags until then: "
      "StatePool.materialize).")
      .value("SNAPSHOT", Strategy::kSnapshot)
      .value("REPLAY", Strategy::kReplay);
  nb::enum_<ConvLayout>(
      m, "ConvLayout",
      "Element order of each slot's conv window (PoolOptions.conv_layout); views keep the shape "
      "[slots, conv_dim, W-1] and carry the order in their strides.")
      .value("CHANNELS_FIRST", ConvLayout::kChannelsFirst,
             "[conv_dim][W-1]: specstate's and SGLang's, vLLM's 'DS'")
      .value("CHANNELS_LAST", ConvLayout::kChannelsLast,
             "[W-1][conv_dim]: vLLM v1's default conv_state ('SD'); adopt it transposed");
  nb::enum_<SsmLayout>(
      m, "SsmLayout",
      "Element order of each slot's SSM state (PoolOptions.ssm_layout); views keep the shape "
      "[slots, HV, V, K] and carry the order in their strides.")
      .value("VK", SsmLayout::kVK,
             "[HV][V][K] (Mamba2 [nheads][P][N]): SGLang's, vLLM's GDN and KDA recurrent_state "
             "(since vLLM's PR #33291)")
      .value("KV", SsmLayout::kKV,
             "[HV][K][V]: fla's default, vLLM's GDN and KDA recurrent_state before its PR #33291 "
             "(GDN and KDA only); adopt it transposed");
  nb::enum_<Workspace>(m, "Workspace", "Workspace tensors of a strategy (StatePool.workspace).")
      .value("SNAPSHOT_CONV", Workspace::kSnapshotConv,
             "snapshot: [max_rows, max_window, conv_dim, W-1]")
      .value("SNAPSHOT_SSM", Workspace::kSnapshotSsm, "snapshot: [max_rows, max_window, HV, V, K]")
      .value("RECORDS", Workspace::kRecords,
             "replay: [slots, max_window, conv_dim], each window token's conv input");
  nb::enum_<LayerKind>(m, "LayerKind", "The recurrent layer type of a model.")
      .value("GATED_DELTA_NET", LayerKind::kGatedDeltaNet)
      .value("MAMBA2", LayerKind::kMamba2)
      .value("KDA", LayerKind::kKda);
  nb::enum_<LogLevel>(m, "LogLevel", "Level of the spdlog logger 'specstate'.")
      .value("TRACE", LogLevel::kTrace)
      .value("DEBUG", LogLevel::kDebug)
      .value("INFO", LogLevel::kInfo)
      .value("WARN", LogLevel::kWarn)
      .value("ERROR", LogLevel::kError)
      .value("OFF", LogLevel::kOff);

  m.def("set_log_level", &set_log_level, nb::arg("level").noconvert(),
        "Sets the level of specstate's logger.");
  m.def("log_level", &log_level, "The level of specstate's logger.");
  m.def(
      "version", [] { return std::string(specstate::version()); },
      "The C++ library's version, e.g. '0.1.0'.");

  nb::class_<GdnConfig> gdn(
      m, "GdnConfig",
      "One Gated DeltaNet layer (Qwen3-Next). Defaults: Qwen3-Next-80B at TP1 "
      "(H=16, HV=32, K=V=128, W=4, bf16 activations and conv state, f32 SSM).");
  gdn.def(
      "__init__",
      [](GdnConfig* self, nb::handle num_k_heads, nb::handle num_v_heads, nb::handle head_k_dim,
         nb::handle head_v_dim, nb::handle conv_width, nb::handle scale, BoolArg conv_bias,
         DTypeArg act_dtype, DTypeArg conv_state_dtype, DTypeArg ssm_state_dtype) {
        new (self) GdnConfig();
        set_delta_fields(self, "GdnConfig", num_k_heads, num_v_heads, head_k_dim, head_v_dim,
                         conv_width, scale, conv_bias, act_dtype, conv_state_dtype,
                         ssm_state_dtype);
      },
      nb::sig("def __init__(self, *, num_k_heads: typing.SupportsIndex = 16, num_v_heads: "
              "typing.SupportsIndex = 32, head_k_dim: typing.SupportsIndex = 128, head_v_dim: "
              "typing.SupportsIndex = 128, conv_width: typing.SupportsIndex = 4, scale: "
              "typing.SupportsFloat | typing.SupportsIndex | None = None, conv_bias: bool | "
              "numpy.bool_ = False, act_dtype: DType = specstate._specstate.DType.BF16, "
              "conv_state_dtype: DType = "
              "specstate._specstate.DType.BF16, ssm_state_dtype: DType = "
              "specstate._specstate.DType.F32) -> None"),
      nb::kw_only(), nb::arg("num_k_heads").none() = 16, nb::arg("num_v_heads").none() = 32,
      nb::arg("head_k_dim").none() = 128, nb::arg("head_v_dim").none() = 128,
      nb::arg("conv_width").none() = 4, nb::arg("scale").none() = nb::none(),
      nb::arg("conv_bias").none() = false, nb::arg("act_dtype").none() = DType::kBF16,
      nb::arg("conv_state_dtype").none() = DType::kBF16,
      nb::arg("ssm_state_dtype").none() = DType::kF32, "Keyword arguments set the fields.");
  def_delta_fields(gdn, "GdnConfig", "Whether verify/decode take a conv bias.",
                   "dtype of mixed_qkv, a, b, conv_out and core_out.");

  nb::class_<Mamba2Config>(m, "Mamba2Config",
                           "One Mamba2 layer (Nemotron-H, Falcon-H1, Granite-4.0-H). Defaults: "
                           "Nemotron-H-8B at TP1.")
      .def(
          "__init__",
          [](Mamba2Config* self, nb::handle num_heads, nb::handle head_dim, nb::handle d_state,
             nb::handle n_groups, nb::handle conv_width, BoolArg conv_bias, BoolArg d_skip,
             BoolArg gate, nb::handle dt_min, nb::handle dt_max, DTypeArg act_dtype,
             DTypeArg conv_state_dtype, DTypeArg ssm_state_dtype) {
            new (self) Mamba2Config();
            self->num_heads = to_integer<int>(num_heads, "Mamba2Config.num_heads");
            self->head_dim = to_integer<int>(head_dim, "Mamba2Config.head_dim");
            self->d_state = to_integer<int>(d_state, "Mamba2Config.d_state");
            self->n_groups = to_integer<int>(n_groups, "Mamba2Config.n_groups");
            self->conv_width = to_integer<int>(conv_width, "Mamba2Config.conv_width");
            self->conv_bias = to_bool(conv_bias, "Mamba2Config.conv_bias");
            self->d_skip = to_bool(d_skip, "Mamba2Config.d_skip");
            self->gate = to_bool(gate, "Mamba2Config.gate");
            // dt_min rounded to 0 and dt_max to infinity mean what was asked (no lower / upper
            // clamp beyond the values float32 holds): taken.
            self->dt_min = to_float32(dt_min, "Mamba2Config.dt_min", /*zero_ok=*/true);
            self->dt_max = to_float32(dt_max, "Mamba2Config.dt_max", false, /*inf_ok=*/true);
            self->act_dtype = to_enum<DType>(act_dtype, "Mamba2Config.act_dtype");
            self->conv_state_dtype =
                to_enum<DType>(conv_state_dtype, "Mamba2Config.conv_state_dtype");
            self->ssm_state_dtype = to_enum<DType>(ssm_state_dtype, "Mamba2Config.ssm_state_dtype");
          },
          nb::sig("def __init__(self, *, num_heads: typing.SupportsIndex = 128, head_dim: "
                  "typing.SupportsIndex = 64, d_state: typing.SupportsIndex = 128, n_groups: "
                  "typing.SupportsIndex = 8, conv_width: typing.SupportsIndex = 4, conv_bias: bool "
                  "| numpy.bool_ = True, d_skip: bool | numpy.bool_ = True, gate: bool | "
                  "numpy.bool_ = False, dt_min: typing.SupportsFloat | typing.SupportsIndex | None "
                  "= None, dt_max: typing.SupportsFloat | typing.SupportsIndex | None = None, "
                  "act_dtype: DType = specstate._specstate.DType.BF16, conv_state_dtype: DType = "
                  "specstate._specstate.DType.BF16, "
                  "ssm_state_dtype: DType = specstate._specstate.DType.F32) -> None"),
          nb::kw_only(), nb::arg("num_heads").none() = 128, nb::arg("head_dim").none() = 64,
          nb::arg("d_state").none() = 128, nb::arg("n_groups").none() = 8,
          nb::arg("conv_width").none() = 4, nb::arg("conv_bias").none() = true,
          nb::arg("d_skip").none() = true, nb::arg("gate").none() = false,
          nb::arg("dt_min").none() = nb::none(), nb::arg("dt_max").none() = nb::none(),
          nb::arg("act_dtype").none() = DType::kBF16,
          nb::arg("conv_state_dtype").none() = DType::kBF16,
          nb::arg("ssm_state_dtype").none() = DType::kF32, "Keyword arguments set the fields.")
      .def_prop_rw("num_heads", field_getter(&Mamba2Config::num_heads),
                   int_setter(&Mamba2Config::num_heads, "Mamba2Config.num_heads"),
                   nb::arg("value").none(), value_sig("num_heads", "typing.SupportsIndex"),
                   "nheads.")
      .def_prop_rw("head_dim", field_getter(&Mamba2Config::head_dim),
                   int_setter(&Mamba2Config::head_dim, "Mamba2Config.head_dim"),
                   nb::arg("value").none(), value_sig("head_dim", "typing.SupportsIndex"),
                   "P: channels per head.")
      .def_prop_rw("d_state", field_getter(&Mamba2Config::d_state),
                   int_setter(&Mamba2Config::d_state, "Mamba2Config.d_state"),
                   nb::arg("value").none(), value_sig("d_state", "typing.SupportsIndex"),
                   "N: state size per channel.")
      .def_prop_rw("n_groups", field_getter(&Mamba2Config::n_groups),
                   int_setter(&Mamba2Config::n_groups, "Mamba2Config.n_groups"),
                   nb::arg("value").none(), value_sig("n_groups", "typing.SupportsIndex"),
                   "G: groups of B and C.")
      .def_prop_rw("conv_width", field_getter(&Mamba2Config::conv_width),
                   int_setter(&Mamba2Config::conv_width, "Mamba2Config.conv_width"),
                   nb::arg("value").none(), value_sig("conv_width", "typing.SupportsIndex"),
                   "W: conv taps.")
      .def_prop_rw("conv_bias", field_getter(&Mamba2Config::conv_bias),
                   bool_setter(&Mamba2Config::conv_bias, "Mamba2Config.conv_bias"),
                   nb::arg("value").none(), value_sig("conv_bias", "bool | numpy.bool_"),
                   "Whether the weights carry a conv bias.")
      .def_prop_rw("d_skip", field_getter(&Mamba2Config::d_skip),
                   bool_setter(&Mamba2Config::d_skip, "Mamba2Config.d_skip"),
                   nb::arg("value").none(), value_sig("d_skip", "bool | numpy.bool_"),
                   "y += D[h] * x (weights.D given).")
      .def_prop_rw("gate", field_getter(&Mamba2Config::gate),
                   bool_setter(&Mamba2Config::gate, "Mamba2Config.gate"), nb::arg("value").none(),
                   value_sig("gate", "bool | numpy.bool_"), "y *= silu(z) (inputs.z given).")
      .def_prop_rw("dt_min", field_getter(&Mamba2Config::dt_min),
                   float_setter(&Mamba2Config::dt_min, "Mamba2Config.dt_min", true),
                   nb::arg("value").none(),
                   value_sig("dt_min", "typing.SupportsFloat | typing.SupportsIndex | None"),
                   "Optional lower clamp of softplus(dt + dt_bias).")
      .def_prop_rw("dt_max", field_getter(&Mamba2Config::dt_max),
                   float_setter(&Mamba2Config::dt_max, "Mamba2Config.dt_max", false, true),
                   nb::arg("value").none(),
                   value_sig("dt_max", "typing.SupportsFloat | typing.SupportsIndex | None"),
                   "Optional upper clamp of softplus(dt + dt_bias).")
      .def_prop_rw("act_dtype", field_getter(&Mamba2Config::act_dtype),
                   enum_setter(&Mamba2Config::act_dtype, "Mamba2Config.act_dtype"),
                   nb::arg("value").none(), value_sig("act_dtype", "DType"),
                   "dtype of xBC, dt, z, conv_out, y.")
      .def_prop_rw("conv_state_dtype", field_getter(&Mamba2Config::conv_state_dtype),
                   enum_setter(&Mamba2Config::conv_state_dtype, "Mamba2Config.conv_state_dtype"),
                   nb::arg("value").none(), value_sig("conv_state_dtype", "DType"),
                   "Committed conv dtype.")
      .def_prop_rw("ssm_state_dtype", field_getter(&Mamba2Config::ssm_state_dtype),
                   enum_setter(&Mamba2Config::ssm_state_dtype, "Mamba2Config.ssm_state_dtype"),
                   nb::arg("value").none(), value_sig("ssm_state_dtype", "DType"),
                   "Committed SSM dtype.")
      .def("__repr__",
           [](const Mamba2Config& c) {
             return "Mamba2Config(num_heads=" + std::to_string(c.num_heads) +
                    ", head_dim=" + std::to_string(c.head_dim) +
                    ", d_state=" + std::to_string(c.d_state) +
                    ", n_groups=" + std::to_string(c.n_groups) +
                    ", conv_width=" + std::to_string(c.conv_width) +
                    ", conv_bias=" + (c.conv_bias ? "True" : "False") +
                    ", d_skip=" + (c.d_skip ? "True" : "False") +
                    ", gate=" + (c.gate ? "True" : "False") +
                    ", dt_min=" + optional_text(c.dt_min) + ", dt_max=" + optional_text(c.dt_max) +
                    ", act_dtype=" + dtype_name(c.act_dtype) +
                    ", conv_state_dtype=" + dtype_name(c.conv_state_dtype) +
                    ", ssm_state_dtype=" + dtype_name(c.ssm_state_dtype) + ")";
           })
      .def("conv_dim", validated(&Mamba2Config::conv_dim),
           "nheads*P + 2*G*N (of a config that validates).")
      .def("ssm_state_elems", validated(&Mamba2Config::ssm_state_elems),
           "nheads * P * N (of a config that validates).");

  nb::class_<KdaConfig> kda(
      m, "KdaConfig",
      "One KDA layer (Kimi Delta Attention, Kimi-Linear): the GDN step with a "
      "decay per key channel. Defaults: Kimi-Linear-48B-A3B at TP1 (H=HV=32, "
      "K=V=128, W=4, bf16 activations and conv state, f32 SSM).");
  kda.def(
         "__init__",
         [](KdaConfig* self, nb::handle num_k_heads, nb::handle num_v_heads, nb::handle head_k_dim,
            nb::handle head_v_dim, nb::handle conv_width, nb::handle scale, BoolArg conv_bias,
            nb::handle lower_bound, DTypeArg act_dtype, DTypeArg conv_state_dtype,
            DTypeArg ssm_state_dtype) {
           new (self) KdaConfig();
           set_delta_fields(self, "KdaConfig", num_k_heads, num_v_heads, head_k_dim, head_v_dim,
                            conv_width, scale, conv_bias, act_dtype, conv_state_dtype,
                            ssm_state_dtype);
           self->lower_bound = to_float32(lower_bound, "KdaConfig.lower_bound");
         },
         nb::sig("def __init__(self, *, num_k_heads: typing.SupportsIndex = 32, num_v_heads: "
                 "typing.SupportsIndex = 32, head_k_dim: typing.SupportsIndex = 128, head_v_dim: "
                 "typing.SupportsIndex = 128, conv_width: typing.SupportsIndex = 4, scale: "
                 "typing.SupportsFloat | typing.SupportsIndex | None = None, conv_bias: bool | "
                 "numpy.bool_ = False, lower_bound: typing.SupportsFloat | typing.SupportsIndex | "
                 "None = None, act_dtype: DType = specstate._specstate.DType.BF16, "
                 "conv_state_dtype: DType = "
                 "specstate._specstate.DType.BF16, ssm_state_dtype: DType = "
                 "specstate._specstate.DType.F32) -> None"),
         nb::kw_only(), nb::arg("num_k_heads").none() = 32, nb::arg("num_v_heads").none() = 32,
         nb::arg("head_k_dim").none() = 128, nb::arg("head_v_dim").none() = 128,
         nb::arg("conv_width").none() = 4, nb::arg("scale").none() = nb::none(),
         nb::arg("conv_bias").none() = false, nb::arg("lower_bound").none() = nb::none(),
         nb::arg("act_dtype").none() = DType::kBF16,
         nb::arg("conv_state_dtype").none() = DType::kBF16,
         nb::arg("ssm_state_dtype").none() = DType::kF32, "Keyword arguments set the fields.")
      .def_prop_rw(
          "lower_bound", field_getter(&KdaConfig::lower_bound),
          float_setter(&KdaConfig::lower_bound, "KdaConfig.lower_bound"), nb::arg("value").none(),
          value_sig("lower_bound", "typing.SupportsFloat | typing.SupportsIndex | None"),
          "None: g = -exp(A_log) * softplus(g + dt_bias); set (negative): g = lower_bound * "
          "sigmoid(exp(A_log) * (g + dt_bias)) (fla's lower-bound gate).");
  def_delta_fields(kda, "KdaConfig", "Whether the weights carry a conv bias.",
                   "dtype of mixed_qkv, g, b, conv_out and core_out.");

  nb::class_<ModelConfig>(m, "ModelConfig",
                          "A model: num_layers recurrent layers of one configuration (attention "
                          "layers are not specstate's business).")
      .def(nb::init<>())
      .def_static(
          "gated_delta_net",
          [](nb::handle num_layers, const GdnConfig& layer) {
            return ModelConfig::gated_delta_net(
                to_integer<int>(num_layers, "ModelConfig.gated_delta_net: num_layers"), layer);
          },
          nb::sig("def gated_delta_net(num_layers: typing.SupportsIndex, layer: GdnConfig) -> "
                  "ModelConfig"),
          nb::arg("num_layers").none(), nb::arg("layer"),
          "num_layers Gated DeltaNet layers of config `layer`.")
      .def_prop_rw("kind", field_getter(&ModelConfig::kind),
                   enum_setter(&ModelConfig::kind, "ModelConfig.kind"), nb::arg("value").none(),
                   value_sig("kind", "LayerKind"), "The layer kind.")
      .def_prop_rw("num_layers", field_getter(&ModelConfig::num_layers),
                   int_setter(&ModelConfig::num_layers, "ModelConfig.num_layers"),
                   nb::arg("value").none(), value_sig("num_layers", "typing.SupportsIndex"),
                   "Recurrent layers.")
      .def_static(
          "mamba2",
          [](nb::handle num_layers, const Mamba2Config& layer) {
            return ModelConfig::mamba2(
                to_integer<int>(num_layers, "ModelConfig.mamba2: num_layers"), layer);
          },
          nb::sig(
              "def mamba2(num_layers: typing.SupportsIndex, layer: Mamba2Config) -> ModelConfig"),
          nb::arg("num_layers").none(), nb::arg("layer"),
          "num_layers Mamba2 layers of config `layer`.")
      .def_rw("gdn", &ModelConfig::gdn, "The GDN layer config (kind GATED_DELTA_NET).")
      .def_rw("mamba", &ModelConfig::mamba, "The Mamba2 layer config (kind MAMBA2).")
      .def_static(
          "kda",
          [](nb::handle num_layers, const KdaConfig& layer) {
            return ModelConfig::kda(to_integer<int>(num_layers, "ModelConfig.kda: num_layers"),
                                    layer);
          },
          nb::sig("def kda(num_layers: typing.SupportsIndex, layer: KdaConfig) -> ModelConfig"),
          nb::arg("num_layers").none(), nb::arg("layer"),
          "num_layers KDA layers of config `layer`.")
      .def_rw("kda_layer", &ModelConfig::kda_layer, "The KDA layer config (kind KDA).")
      .def("conv_dim", validated(&ModelConfig::conv_dim),
           "Channels of the conv (of a config that validates).")
      .def("act_dtype", &ModelConfig::act_dtype,
           "The activation dtype of the layer kind's inputs and outputs.")
      .def("conv_width", &ModelConfig::conv_width, "W.")
      .def("conv_state_dtype", &ModelConfig::conv_state_dtype, "Committed conv dtype.")
      .def("ssm_state_dtype", &ModelConfig::ssm_state_dtype, "Committed SSM dtype.")
      .def("conv_state_elems", validated(&ModelConfig::conv_state_elems),
           "conv_dim * (W-1) (of a config that validates).")
      .def("ssm_state_elems", validated(&ModelConfig::ssm_state_elems),
           "Elements of one SSM state (of a config that validates).")
      .def("slot_bytes", validated(&ModelConfig::slot_bytes),
           "Committed bytes of one slot over all layers (of a config that validates).")
      .def_ro_static("MAX_SLOT_BYTES", &ModelConfig::kMaxSlotBytes,
                     "validate() refuses a config whose slot_bytes() would pass this (2^48).")
      .def("validate", &ModelConfig::validate,
           "Raises specstate.InvalidArgumentError naming the first field out of range.")
      .def("__repr__", [](const ModelConfig& c) {
        // The fields as set (no derived size: conv_dim() of a config that does not validate
        // could overflow): the kind, the layers and the kind's layer config.
        std::string layer;
        switch (c.kind) {
          case LayerKind::kMamba2:
            layer = "mamba=" + nb::cast<std::string>(nb::repr(nb::cast(c.mamba)));
            break;
          case LayerKind::kKda:
            layer = "kda_layer=" + nb::cast<std::string>(nb::repr(nb::cast(c.kda_layer)));
            break;
          default:
            layer = "gdn=" + nb::cast<std::string>(nb::repr(nb::cast(c.gdn)));
        }
        return std::string("ModelConfig(kind=") + layer_kind_name(c.kind) +
               ", num_layers=" + std::to_string(c.num_layers) + ", " + layer + ")";
      });

  nb::class_<PoolOptions>(m, "PoolOptions", "The options a StatePool is created with.")
      .def(
          "__init__",
          [](PoolOptions* self, nb::handle num_slots, nb::handle max_rows, nb::handle max_window,
             EnumArg<Backend> backend, EnumArg<Strategy> strategy, nb::handle device,
             nb::handle stream, nb::handle replay_ring, EnumArg<ConvLayout> conv_layout,
             EnumArg<SsmLayout> ssm_layout, nb::handle replay_fold_rows) {
            new (self) PoolOptions();
            self->num_slots = to_integer<int>(num_slots, "PoolOptions.num_slots");
            self->max_rows = to_integer<int>(max_rows, "PoolOptions.max_rows");
            self->max_window = to_integer<int>(max_window, "PoolOptions.max_window");
            self->backend = to_enum<Backend>(backend, "PoolOptions.backend");
            self->strategy = to_enum<Strategy>(strategy, "PoolOptions.strategy");
            self->device = to_integer<int>(device, "PoolOptions.device");
            self->replay_ring = to_integer<int>(replay_ring, "PoolOptions.replay_ring");
            self->replay_fold_rows =
                to_integer<int>(replay_fold_rows, "PoolOptions.replay_fold_rows");
            self->conv_layout = to_enum<ConvLayout>(conv_layout, "PoolOptions.conv_layout");
            self->ssm_layout = to_enum<SsmLayout>(ssm_layout, "PoolOptions.ssm_layout");
            auto s = to_stream(stream, "stream");
            self->stream = reinterpret_cast<void*>(s.value_or(0));
          },
          nb::sig(
              "def __init__(self, *, num_slots: typing.SupportsIndex = 1, max_rows: "
              "typing.SupportsIndex = 1, max_window: typing.SupportsIndex = 1, backend: Backend = "
              "specstate._specstate.Backend.CPU, strategy: Strategy = "
              "specstate._specstate.Strategy.SNAPSHOT, device: typing.SupportsIndex = "
              "0, stream: object | None = None, replay_ring: typing.SupportsIndex = 0, "
              "conv_layout: ConvLayout = specstate._specstate.ConvLayout.CHANNELS_FIRST, "
              "ssm_layout: SsmLayout = "
              "specstate._specstate.SsmLayout.VK, replay_fold_rows: typing.SupportsIndex = 0) -> "
              "None"),
          nb::kw_only(), nb::arg("num_slots").none() = 1, nb::arg("max_rows").none() = 1,
          nb::arg("max_window").none() = 1, nb::arg("backend").none() = Backend::kCpu,
          nb::arg("strategy").none() = Strategy::kSnapshot, nb::arg("device").none() = 0,
          nb::arg("stream").none() = nb::none(), nb::arg("replay_ring").none() = 0,
          nb::arg("conv_layout").none() = ConvLayout::kChannelsFirst,
          nb::arg("ssm_layout").none() = SsmLayout::kVK, nb::arg("replay_fold_rows").none() = 0,
          "Keyword arguments set the fields.")
      .def_prop_rw("num_slots", field_getter(&PoolOptions::num_slots),
                   int_setter(&PoolOptions::num_slots, "PoolOptions.num_slots"),
                   nb::arg("value").none(), value_sig("num_slots", "typing.SupportsIndex"),
                   "Requests whose committed state the pool holds.")
      .def_prop_rw("max_rows", field_getter(&PoolOptions::max_rows),
                   int_setter(&PoolOptions::max_rows, "PoolOptions.max_rows"),
                   nb::arg("value").none(), value_sig("max_rows", "typing.SupportsIndex"),
                   "Largest verify batch (padding included).")
      .def_prop_rw("max_window", field_getter(&PoolOptions::max_window),
                   int_setter(&PoolOptions::max_window, "PoolOptions.max_window"),
                   nb::arg("value").none(), value_sig("max_window", "typing.SupportsIndex"),
                   "Largest window T.")
      .def_prop_rw("backend", field_getter(&PoolOptions::backend),
                   enum_setter(&PoolOptions::backend, "PoolOptions.backend"),
                   nb::arg("value").none(), value_sig("backend", "Backend"), "CPU or CUDA.")
      .def_prop_rw("strategy", field_getter(&PoolOptions::strategy),
                   enum_setter(&PoolOptions::strategy, "PoolOptions.strategy"),
                   nb::arg("value").none(), value_sig("strategy", "Strategy"),
                   "SNAPSHOT or REPLAY.")
      .def_prop_rw("device", field_getter(&PoolOptions::device),
                   int_setter(&PoolOptions::device, "PoolOptions.device"), nb::arg("value").none(),
                   value_sig("device", "typing.SupportsIndex"), "CUDA device ordinal (CUDA only).")
      .def_prop_rw(
          "replay_ring", field_getter(&PoolOptions::replay_ring),
          int_setter(&PoolOptions::replay_ring, "PoolOptions.replay_ring"), nb::arg("value").none(),
          value_sig("replay_ring", "typing.SupportsIndex"),
          "REPLAY: factor records per slot and layer (0: the default, "
          "default_replay_ring(kind, max_window): from max_window = 2 up to 5, max(3 * "
          "max_window, 8) for Gated DeltaNet and Mamba2 and max(2 * max_window, 8) for KDA; "
          "otherwise max(2 * max_window, 6)).")
      .def_prop_rw(
          "replay_fold_rows", field_getter(&PoolOptions::replay_fold_rows),
          int_setter(&PoolOptions::replay_fold_rows, "PoolOptions.replay_fold_rows"),
          nb::arg("value").none(), value_sig("replay_fold_rows", "typing.SupportsIndex"),
          "REPLAY: rounds of at least this many rows let the history grow to the whole ring; "
          "smaller ones fold as a ring of max(2 * max_window, 6) would (0: the default, "
          "default_replay_fold_rows(kind): 8 for GATED_DELTA_NET and KDA, 1 for MAMBA2; "
          "1: always the whole ring). The same bits under any value.")
      .def_prop_rw("conv_layout", field_getter(&PoolOptions::conv_layout),
                   enum_setter(&PoolOptions::conv_layout, "PoolOptions.conv_layout"),
                   nb::arg("value").none(), value_sig("conv_layout", "ConvLayout"),
                   "Element order of the conv windows (ConvLayout).")
      .def_prop_rw("ssm_layout", field_getter(&PoolOptions::ssm_layout),
                   enum_setter(&PoolOptions::ssm_layout, "PoolOptions.ssm_layout"),
                   nb::arg("value").none(), value_sig("ssm_layout", "SsmLayout"),
                   "Element order of the SSM states (SsmLayout; KV for GDN and KDA only).")
      .def_prop_rw(
          "stream", [](const PoolOptions& o) { return reinterpret_cast<uintptr_t>(o.stream); },
          [](PoolOptions& o, nb::handle value) {
            o.stream = reinterpret_cast<void*>(to_stream(value, "stream").value_or(0));
          },
          nb::arg("value").none(),
          "cudaStream_t (int handle) the pool's work runs on (CUDA only; 0 = the default "
          "stream). Give a non-default stream to capture CUDA graphs. Only the handle is kept: "
          "the stream (e.g. a CuPy stream object, which destroys it when collected) must outlive "
          "every pool built with these options.");

  // The replay ring (docs/strategies.md): the default R of a kind, the round's fold limit and
  // the fold model `specstate plan` prints.
  m.def(
      "default_replay_ring",
      [](LayerKind kind, nb::handle max_window) {
        return default_replay_ring(
            kind, to_integer<int64_t>(max_window, "default_replay_ring: max_window"));
      },
      nb::sig("def default_replay_ring(kind: LayerKind, max_window: typing.SupportsIndex) -> int"),
      nb::arg("kind").noconvert(), nb::arg("max_window"),
      "The replay ring R a pool of `kind` gets for PoolOptions.replay_ring = 0 (from "
      "max_window = 2 up to 5, max(3 * max_window, 8) for GATED_DELTA_NET and MAMBA2 and "
      "max(2 * max_window, 8) for KDA; otherwise max(2 * max_window, 6)). "
      "Raises InvalidArgumentError for a max_window outside [1, 65536].");
  m.def("default_replay_fold_rows", &default_replay_fold_rows, nb::arg("kind").noconvert(),
        "The replay_fold_rows a pool of `kind` gets for PoolOptions.replay_fold_rows = 0: 8 for "
        "GATED_DELTA_NET and KDA (smaller rounds fold at the small limit), 1 for MAMBA2 (every "
        "round uses the whole ring).");
  m.def(
      "default_replay_ring",
      [](nb::handle max_window) {
        return default_replay_ring(
            to_integer<int64_t>(max_window, "default_replay_ring: max_window"));
      },
      nb::sig("def default_replay_ring(max_window: typing.SupportsIndex) -> int"),
      nb::arg("max_window"),
      "The generic rule, max(2 * max_window, 6) (every kind's ring outside max_window 2..5).\n"
      "Raises InvalidArgumentError for a max_window outside [1, 65536].");
  // specstate::vllm (include/specstate/vllm.h), wrapped by python/specstate/vllm.py.
  m.def(
      "_vllm_conv_shape",
      [](const ModelConfig& model, nb::handle slots) {
        return vllm::conv_shape(model, to_integer<int64_t>(slots, "conv_shape: slots"));
      },
      nb::arg("config"), nb::arg("slots"));
  m.def(
      "_vllm_recurrent_shape",
      [](const ModelConfig& model, nb::handle slots, SsmLayout order) {
        return vllm::recurrent_shape(model, to_integer<int64_t>(slots, "recurrent_shape: slots"),
                                     order);
      },
      nb::arg("config"), nb::arg("slots"), nb::arg("order").noconvert());
  m.def("_vllm_layout_options", &vllm::layout_options, nb::arg("options"), nb::arg("config"),
        nb::arg("order").noconvert());
  m.def(
      "replay_fold_limit",
      [](nb::handle max_window, nb::handle ring, nb::handle rows, nb::handle fold_rows) {
        return replay_fold_limit(to_integer<int>(max_window, "replay_fold_limit: max_window"),
                                 to_integer<int>(ring, "replay_fold_limit: ring"),
                                 to_integer<int>(rows, "replay_fold_limit: rows"),
                                 to_integer<int>(fold_rows, "replay_fold_limit: fold_rows"));
      },
      nb::sig("def replay_fold_limit(max_window: typing.SupportsIndex, ring: typing.SupportsIndex, "
              "rows: typing.SupportsIndex, fold_rows: typing.SupportsIndex = 0) -> int"),
      nb::arg("max_window"), nb::arg("ring"), nb::arg("rows"), nb::arg("fold_rows") = 0,
      "The fold limit L of a verify round of `rows` rows: a verify whose slot has h history "
      "records folds iff h > L (ring - 2 * max_window from `fold_rows` rows on, 0: 8; "
      "max(2 * max_window, 6) - 2 * max_window at most below). Raises InvalidArgumentError "
      "naming a bad argument.");
  nb::class_<ReplayRingModel>(m, "ReplayRingModel",
                              "Folds per round and the mean history a verify applies.")
      .def_ro("fold_rate", &ReplayRingModel::fold_rate, "Folds per round (1: every round).")
      .def_ro("mean_history", &ReplayRingModel::mean_history,
              "History records a verify applies, on average.");
  m.def(
      "replay_ring_model",
      [](nb::handle max_window, nb::handle ring, nb::handle rows, nb::handle fold_rows) {
        return replay_ring_model(to_integer<int>(max_window, "replay_ring_model: max_window"),
                                 to_integer<int>(ring, "replay_ring_model: ring"),
                                 to_integer<int>(rows, "replay_ring_model: rows"),
                                 to_integer<int>(fold_rows, "replay_ring_model: fold_rows"));
      },
      nb::sig("def replay_ring_model(max_window: typing.SupportsIndex, ring: typing.SupportsIndex, "
              "rows: typing.SupportsIndex = 16, fold_rows: typing.SupportsIndex = 0) -> "
              "ReplayRingModel"),
      nb::arg("max_window"), nb::arg("ring"), nb::arg("rows") = 16, nb::arg("fold_rows") = 0,
      "The cursor of a slot when every round of `rows` rows accepts a in [1, max_window] tokens "
      "uniformly: its fold rate and mean history (exact). Raises InvalidArgumentError naming a "
      "bad argument.");
  m.def("layer_kind_name", &layer_kind_name, nb::arg("kind").noconvert(),
        "'gated_delta_net', 'mamba2' or 'kda' (as messages and plan print the kind).");
  m.def("backend_name", &backend_name, nb::arg("backend").noconvert(), "'cpu' or 'cuda'.");
  m.def("strategy_name", &strategy_name, nb::arg("strategy").noconvert(),
        "'snapshot' or 'replay'.");
  m.def("conv_layout_name", &conv_layout_name, nb::arg("layout").noconvert(),
        "'channels_first' or 'channels_last'.");
  m.def("ssm_layout_name", &ssm_layout_name, nb::arg("layout").noconvert(), "'vk' or 'kv'.");
  m.def("dtype_name", &dtype_name, nb::arg("dtype").noconvert(), "'f32', 'bf16' or 'i32'.");
  m.def("status_name", &status_name, nb::arg("status").noconvert(), "The status's name.");

  // Tensor-parallel shards (specstate/shard.h, docs/multi_gpu.md).
  nb::class_<ColumnRange>(m, "ColumnRange",
                          "Columns [begin, begin + count) of a TP1 tensor's sharded dimension.")
      .def_ro("begin", &ColumnRange::begin, "The first column.")
      .def_ro("count", &ColumnRange::count, "Columns in the run.")
      .def("__repr__", [](const ColumnRange& r) {
        return "ColumnRange(begin=" + std::to_string(r.begin) +
               ", count=" + std::to_string(r.count) + ")";
      });
  nb::class_<ShardMap>(m, "ShardMap",
                       "Rank `rank` of a TP group of `tp`: the shard's ModelConfig and which "
                       "columns of a TP1 tensor belong to it. A TP1 array's shard along dim d is "
                       "the concatenation of its runs: np.concatenate([x.take(range(r.begin, "
                       "r.begin + r.count), axis=d) for r in ranges], axis=d).")
      .def_ro("tp", &ShardMap::tp, "Ranks in the group.")
      .def_ro("rank", &ShardMap::rank, "This shard's rank.")
      .def_ro("config", &ShardMap::config,
              "The shard's model: heads (and groups) divided by tp; a Mamba2 model's single "
              "B/C group is copied to every rank (n_groups stays 1), as vLLM shards it.")
      .def_ro("conv", &ShardMap::conv,
              "Runs of conv_dim channels (mixed_qkv / xBC, conv weights, conv_out, the conv "
              "state), in the shard's order.")
      .def_ro("heads", &ShardMap::heads,
              "Value heads (GDN, KDA) / heads (Mamba2): gates, A_log, dt_bias, D, the core "
              "output and the SSM state.")
      .def_ro("head_elems", &ShardMap::head_elems, "Elements per head of the outputs (V or P).")
      .def("conv_dim", &ShardMap::conv_dim, "The shard's channels (the runs' total).");
  m.def(
      "shard_map",
      [](const ModelConfig& config, nb::handle tp_arg, nb::handle rank_arg) {
        const int tp = to_integer<int>(tp_arg, "shard_map: tp");  // in the arguments' order
        const int rank = to_integer<int>(rank_arg, "shard_map: rank");
        return shard_map(config, tp, rank);
      },
      nb::sig("def shard_map(config: ModelConfig, tp: typing.SupportsIndex, rank: "
              "typing.SupportsIndex) "
              "-> ShardMap"),
      nb::arg("config"), nb::arg("tp"), nb::arg("rank"),
      "The ShardMap of rank `rank` of `tp` for a TP1 ModelConfig. Raises "
      "InvalidArgumentError naming the field when tp does not divide the heads (or groups, "
      "unless a Mamba2 model has one, which every rank copies) or rank is outside [0, tp).");
}

}  // namespace specstate::py

NB_MODULE(_specstate, m) {
  using namespace specstate::py;
  m.doc() =
      "specstate: the recurrent state of hybrid LLMs (Gated DeltaNet, Mamba2, KDA) during "
      "speculative decoding. Arrays are taken through DLPack with zero copies; see "
      "docs/python.md.";
  m.attr("__version__") = SPECSTATE_PY_VERSION;
  bind_config(m);
  bind_errors(m);
  bind_tensors(m);
  bind_pool(m);
  bind_spec(m);
  bind_cli(m);
}
