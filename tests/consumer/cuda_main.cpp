// Builds against the installed specstate with specstate::cuda and creates a CUDA pool: it runs
// where a device is, and reports a backend error (exit 0) where there is none.
#include <specstate/specstate.h>

#include <cstdio>

int main() {
  using namespace specstate;
  GdnConfig layer;
  layer.num_k_heads = 1;
  layer.num_v_heads = 2;
  layer.head_k_dim = 32;
  layer.head_v_dim = 32;
  PoolOptions options;
  options.num_slots = 2;
  options.max_rows = 1;
  options.max_window = 2;
  options.backend = Backend::kCuda;
  try {
    StatePool pool(ModelConfig::gated_delta_net(1, layer), options);
    std::printf("specstate %s consumer: CUDA pool of %lld committed bytes\n", version(),
                static_cast<long long>(pool.committed_bytes()));
    return pool.committed_bytes() > 0 ? 0 : 1;
  } catch (const Error& e) {
    // No device (or no driver) here: the backend says so; anything else is a failure.
    std::printf("specstate %s consumer: no CUDA pool here: %s\n", version(), e.what());
    return e.status() == Status::kBackendError || e.status() == Status::kNotSupported ? 0 : 1;
  }
}
