// Built when the CUDA backend is not: a pool asked for Backend::kCuda gets a clear error.
#include "backend.h"
#include "specstate/status.h"

namespace specstate::detail {

std::unique_ptr<BackendImpl> make_cuda_backend(const PoolOptions&) {
  throw Error(Status::kNotSupported,
              "StatePool: options.backend = cuda: this build of specstate has no CUDA backend "
              "(configure where nvcc exists, SPECSTATE_CUDA=AUTO or ON)");
}

}  // namespace specstate::detail
