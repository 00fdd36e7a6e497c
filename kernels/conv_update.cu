// Dtype dispatch of launch_conv_update; the kernels are instantiated in conv_update_<act>.cu.
#include <atomic>

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

namespace {
std::atomic<int64_t> lean_launches{0};
}  // namespace

int64_t conv_lean_launches() { return lean_launches.load(std::memory_order_relaxed); }
void count_conv_lean_launch() { lean_launches.fetch_add(1, std::memory_order_relaxed); }

cudaError_t launch_conv_update(const ConvUpdateParams& params, ElemType act, ElemType state,
                               cudaStream_t stream) {
  return dispatch_act_state(act, state, [&](auto a, auto s) {
    return launch_conv_update_typed<decltype(a), decltype(s)>(params, stream);
  });
}

}  // namespace specstate::kernels
