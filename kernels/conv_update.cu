// Dtype dispatch of launch_conv_update; the kernels are instantiated in conv_update_<act>.cu.
#include <cstdlib>

#include "conv_update.cuh"

namespace specstate::kernels {

extern template cudaError_t launch_conv_update_typed<bf16, bf16>(const ConvUpdateParams&,
                                                                 cudaStream_t);
extern template cudaError_t launch_conv_update_typed<bf16, float>(const ConvUpdateParams&,
                                                                  cudaStream_t);
extern template cudaError_t launch_conv_update_typed<float, bf16>(const ConvUpdateParams&,
                                                                  cudaStream_t);
extern template cudaError_t launch_conv_update_typed<float, float>(const ConvUpdateParams&,
                                                                   cudaStream_t);

int conv_loop_override() {
  static const int forced = [] {
    const char* env = std::getenv("SPECSTATE_CONV_LOOP");
    return env ? (std::atoi(env) != 0 ? 1 : 0) : -1;
  }();
  return forced;
}

cudaError_t launch_conv_update(const ConvUpdateParams& params, ElemType act, ElemType state,
                               cudaStream_t stream) {
  const bool act_bf16 = act == ElemType::kBF16, st_bf16 = state == ElemType::kBF16;
  if (act_bf16) {
    return st_bf16 ? launch_conv_update_typed<bf16, bf16>(params, stream)
                   : launch_conv_update_typed<bf16, float>(params, stream);
  }
  return st_bf16 ? launch_conv_update_typed<float, bf16>(params, stream)
                 : launch_conv_update_typed<float, float>(params, stream);
}

}  // namespace specstate::kernels
