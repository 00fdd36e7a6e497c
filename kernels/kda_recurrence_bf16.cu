// bf16 activations: instantiations of the KDA recurrence (f32 and bf16 SSM state).
#include "gdn_recurrence.cuh"

namespace specstate::kernels {
template cudaError_t launch_gdn_recurrence_typed<bf16, float, true>(const GdnRecurrenceParams&,
                                                                    cudaStream_t);
template cudaError_t launch_gdn_recurrence_typed<bf16, bf16, true>(const GdnRecurrenceParams&,
                                                                   cudaStream_t);
}  // namespace specstate::kernels
