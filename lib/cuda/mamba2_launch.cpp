// Mamba2's launch: the shared conv and the Mamba2 recurrence kernel.
#include "launch_common.h"

namespace specstate::detail::cuda {

Mamba2Launch build_mamba2_launch(const Mamba2LaunchArgs& a) {
  namespace k = specstate::kernels;
  const PoolStorage& s = *a.storage;
  const Mamba2Config& m = s.config.mamba;
  const Mamba2Weights& w = *a.weights;
  const Mamba2Inputs& in = *a.inputs;
  const Mamba2Outputs& out = *a.outputs;
  Mamba2Launch L;
  set_elem_types(L, m);
  void* conv_out = nullptr;
  int64_t conv_out_stride_token = 0, conv_out_stride_c = 1;
  L.conv =
      conv_params(a, in.xBC, out.conv_out, &conv_out, &conv_out_stride_token, &conv_out_stride_c);

  k::Mamba2RecurrenceParams& r = L.rec;
  r.num_heads = m.num_heads;
  r.head_dim = m.head_dim;
  r.d_state = m.d_state;
  r.n_groups = m.n_groups;
  r.d_skip = m.d_skip;
  r.gate = m.gate;
  r.has_dt_min = m.dt_min.has_value();
  r.has_dt_max = m.dt_max.has_value();
  r.dt_min = m.dt_min.value_or(0.0f);
  r.dt_max = m.dt_max.value_or(0.0f);
  r.a_log_dtype = elem(w.A_log.dtype);
  r.dt_bias_dtype = elem(w.dt_bias.dtype);
  r.a_log_stride = w.A_log.stride[0];
  r.dt_bias_stride = w.dt_bias.stride[0];
  r.A_log = w.A_log.data;
  r.dt_bias = w.dt_bias.data;
  if (m.d_skip) {
    r.d_dtype = elem(w.D.dtype);
    r.d_stride = w.D.stride[0];
    r.D = w.D.data;
  }
  if (a.tokens > 0) {
    r.xbc_stride_token = conv_out_stride_token;
    r.xbc_stride_c = conv_out_stride_c;
    r.xbc = conv_out;
    r.dt_stride_token = in.dt.stride[0];
    r.dt_stride_h = in.dt.stride[1];
    r.dt = offset_bytes(in.dt, a.token0 * in.dt.stride[0]);
    if (m.gate) {
      r.z_stride_token = in.z.stride[0];
      r.z_stride_c = in.z.stride[1];
      r.z = offset_bytes(in.z, a.token0 * in.z.stride[0]);
    }
    r.out_stride_token = out.y.stride[0];
    r.out_stride_h = out.y.stride[1];
    r.out_stride_p = out.y.stride[2];
    r.out = offset_bytes(out.y, a.token0 * out.y.stride[0]);
  }
  const auto fl = k::mamba2_factor_layout(m.num_heads, m.head_dim, m.n_groups, m.d_state,
                                          dtype_size(m.act_dtype));
  r.f_dt = fl.dt;
  r.f_dA = fl.dA;
  r.f_x = fl.x;
  r.f_B = fl.B;
  state_io_params(r, a);
  return L;
}

}  // namespace specstate::detail::cuda
