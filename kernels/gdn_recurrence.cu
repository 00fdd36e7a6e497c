// Dtype dispatch of launch_gdn_recurrence; kernels are instantiated in gdn_recurrence_<act>.cu.
#include "gdn_recurrence.cuh"

namespace specstate::kernels {

extern template cudaError_t launch_gdn_recurrence_typed<bf16, float>(const GdnRecurrenceParams&,
                                                                     cudaStream_t);
extern template cudaError_t launch_gdn_recurrence_typed<bf16, bf16>(const GdnRecurrenceParams&,
                                                                    cudaStream_t);
extern template cudaError_t launch_gdn_recurrence_typed<float, float>(const GdnRecurrenceParams&,
                                                                      cudaStream_t);
extern template cudaError_t launch_gdn_recurrence_typed<float, bf16>(const GdnRecurrenceParams&,
                                                                     cudaStream_t);

cudaError_t launch_gdn_recurrence(const GdnRecurrenceParams& params, ElemType act, ElemType state,
                                  cudaStream_t stream) {
  return dispatch_act_state(act, state, [&](auto a, auto s) {
    return launch_gdn_recurrence_typed<decltype(a), decltype(s)>(params, stream);
  });
}

}  // namespace specstate::kernels
