// launch_gdn_fused and where it runs (gdn_fused.h); the kernel: gdn_fused.cuh.

#include "gdn_fused.cuh"

namespace specstate::kernels {

bool gdn_fused_chosen(const GdnFusedParams& f, ElemType act, ElemType conv_state,
                      ElemType ssm_state) {
  const GdnRecurrenceParams& p = f.rec;
  const ConvUpdateParams& c = f.conv;
  const bool applies = f.counters != nullptr && p.cursor != nullptr && p.factors != nullptr &&
                       c.pending != nullptr && c.records != nullptr && c.path != nullptr &&
                       c.weight != nullptr && p.slots != nullptr && c.slots == p.slots &&
                       p.parents == nullptr && c.parents == nullptr && p.snap == nullptr &&
                       c.snap == nullptr && !p.store_final && !c.store_final && p.rows > 0 &&
                       c.rows == p.rows && p.tokens > 0 && c.tokens == p.tokens &&
                       p.ring <= kGdnChunk && 2 * p.tokens <= kGdnChunk && p.head_k_dim == 128 &&
                       c.width == 4 && p.num_k_heads > 0 && p.num_v_heads % p.num_k_heads == 0 &&
                       act == ElemType::kBF16 && conv_state == ElemType::kBF16 &&
                       ssm_state == ElemType::kF32 && !c.channels_last && !p.state_kv;
  return gdn_fused_choice(applies, p.rows, env_force("SPECSTATE_GDN_FUSED"));
}

cudaError_t launch_gdn_fused(const GdnFusedParams& f0, bool kda, cudaStream_t stream) {
  GdnFusedParams f = f0;
  f.rec.v_per_k = f0.rec.num_v_heads / f0.rec.num_k_heads;
  f.rec.inv_v_per_k = 1.0f / static_cast<float>(f.rec.v_per_k);
  f.rec.last_state = env_flag("SPECSTATE_GDN_LAST_STATE");
  constexpr int kRows = gdn_rows_per_cta<8>();
  const dim3 grid((f.rec.head_v_dim + kRows - 1) / kRows, f.rec.num_v_heads, f.rec.rows);
  return kda ? launch_kernel(f.programmatic, gdn_fused_kernel<bf16, true, 128, 4>, grid,
                             dim3(kGdnThreads), stream, f)
             : launch_kernel(f.programmatic, gdn_fused_kernel<bf16, false, 128, 4>, grid,
                             dim3(kGdnThreads), stream, f);
}

}  // namespace specstate::kernels
