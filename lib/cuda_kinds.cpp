// Which layer kinds the CUDA backend has kernels for (backend.h), in every build: the pool asks
// before it opens a device, so the refusal of a kind names the kind, GPU or not.
#include <string>

#include "backend.h"

namespace specstate::detail {

Status cuda_supports_kind(const ModelConfig& config, std::string* why) {
  switch (config.kind) {
    case LayerKind::kGatedDeltaNet:
    case LayerKind::kMamba2:
    case LayerKind::kKda:
      return Status::kSuccess;
  }
  *why = std::string("cuda backend: kind = ") + layer_kind_name(config.kind);
  return Status::kNotSupported;
}

}  // namespace specstate::detail
