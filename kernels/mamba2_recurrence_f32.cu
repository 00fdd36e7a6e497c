// f32 activations: instantiations of the Mamba2 recurrence (f32 and bf16 SSM state).
#include "mamba2_recurrence.cuh"

namespace specstate::kernels {
template cudaError_t launch_mamba2_recurrence_typed<float, float>(const Mamba2RecurrenceParams&,
                                                                  cudaStream_t);
template cudaError_t launch_mamba2_recurrence_typed<float, bf16>(const Mamba2RecurrenceParams&,
                                                                 cudaStream_t);
}  // namespace specstate::kernels
