// Dtype dispatch of launch_kda_recurrence: the GDN kernel with the gate per key channel
// (gdn_recurrence.cuh, kKda); instantiated in kda_recurrence_<act>.cu.
#include "gdn_recurrence.cuh"

namespace specstate::kernels {

extern template cudaError_t launch_gdn_recurrence_typed<bf16, float, true>(
    const GdnRecurrenceParams&, cudaStream_t);
extern template cudaError_t launch_gdn_recurrence_typed<bf16, bf16, true>(
    const GdnRecurrenceParams&, cudaStream_t);
extern template cudaError_t launch_gdn_recurrence_typed<float, float, true>(
    const GdnRecurrenceParams&, cudaStream_t);
extern template cudaError_t launch_gdn_recurrence_typed<float, bf16, true>(
    const GdnRecurrenceParams&, cudaStream_t);

cudaError_t launch_kda_recurrence(const GdnRecurrenceParams& params, ElemType act, ElemType state,
                                  cudaStream_t stream) {
  return dispatch_act_state(act, state, [&](auto a, auto s) {
    return launch_gdn_recurrence_typed<decltype(a), decltype(s), true>(params, stream);
  });
}

}  // namespace specstate::kernels
