// Dtype dispatch of launch_mamba2_recurrence; kernels are instantiated in
// mamba2_recurrence_<act>.cu.
#include "mamba2_recurrence.cuh"

namespace specstate::kernels {

extern template cudaError_t launch_mamba2_recurrence_typed<bf16, float>(
    const Mamba2RecurrenceParams&, cudaStream_t);
extern template cudaError_t launch_mamba2_recurrence_typed<bf16, bf16>(
    const Mamba2RecurrenceParams&, cudaStream_t);
extern template cudaError_t launch_mamba2_recurrence_typed<float, float>(
    const Mamba2RecurrenceParams&, cudaStream_t);
extern template cudaError_t launch_mamba2_recurrence_typed<float, bf16>(
    const Mamba2RecurrenceParams&, cudaStream_t);

cudaError_t launch_mamba2_recurrence(const Mamba2RecurrenceParams& params, ElemType act,
                                     ElemType state, cudaStream_t stream) {
  return dispatch_act_state(act, state, [&](auto a, auto s) {
    return launch_mamba2_recurrence_typed<decltype(a), decltype(s)>(params, stream);
  });
}

}  // namespace specstate::kernels
