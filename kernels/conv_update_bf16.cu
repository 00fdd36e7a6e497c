// bf16 activations: instantiations of the conv update (bf16 and f32 conv state).
#include "conv_update.cuh"

namespace specstate::kernels {
template cudaError_t launch_conv_update_typed<bf16, bf16>(const ConvUpdateParams&, cudaStream_t);
template cudaError_t launch_conv_update_typed<bf16, float>(const ConvUpdateParams&, cudaStream_t);
}  // namespace specstate::kernels
