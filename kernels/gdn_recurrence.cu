// Dtype dispatch of launch_gdn_recurrence; kernels are instantiated in gdn_recurrence_<act>.cu.
#include <cstdlib>

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

int gdn_items_override() {
  static const int forced = [] {
    const char* env = std::getenv("SPECSTATE_GDN_ITEMS");
    return env ? std::atoi(env) : 0;
  }();
  return forced;
}

cudaError_t launch_gdn_recurrence(const GdnRecurrenceParams& params, ElemType act, ElemType state,
                                  cudaStream_t stream) {
  const bool act_bf16 = act == ElemType::kBF16, st_bf16 = state == ElemType::kBF16;
  if (act_bf16) {
    return st_bf16 ? launch_gdn_recurrence_typed<bf16, bf16>(params, stream)
                   : launch_gdn_recurrence_typed<bf16, float>(params, stream);
  }
  return st_bf16 ? launch_gdn_recurrence_typed<float, bf16>(params, stream)
                 : launch_gdn_recurrence_typed<float, float>(params, stream);
}

}  // namespace specstate::kernels
