#include "gpu_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace specstate::test {

bool has_gpu() {
  static const bool result = [] {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return result;
}

namespace {
void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}
}  // namespace

DeviceTensor::DeviceTensor(const Buffer& host, int64_t pad)
    : dtype_(host.dtype()), shape_(host.shape()) {
  row_elems_ = 1;
  for (std::size_t d = 1; d < shape_.size(); ++d) row_elems_ *= shape_[d];
  row_stride_ = row_elems_ + (shape_.size() >= 2 ? pad : 0);
  const std::size_t bytes =
      static_cast<std::size_t>(std::max<int64_t>(shape_.empty() ? 1 : shape_[0], 1) * row_stride_) *
      dtype_size(dtype_);
  cuda_check(cudaMalloc(&data_, std::max<std::size_t>(bytes, 16)), "cudaMalloc");
  cuda_check(cudaMemset(data_, 0xff, std::max<std::size_t>(bytes, 16)), "cudaMemset");
  upload(host);
}

DeviceTensor::~DeviceTensor() {
  if (data_) cudaFree(data_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = o.data_;
    dtype_ = o.dtype_;
    shape_ = std::move(o.shape_);
    row_elems_ = o.row_elems_;
    row_stride_ = o.row_stride_;
    o.data_ = nullptr;
  }
  return *this;
}

TensorView DeviceTensor::view() const {
  TensorView v;
  v.data = data_;
  v.dtype = dtype_;
  v.device = Device::kCuda;
  v.ndim = static_cast<int>(shape_.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape_[i];
    v.stride[i] = i == 0 ? row_stride_ : stride;
    stride *= shape_[i];
  }
  return v;
}

TensorView DeviceTensor::rows(int64_t begin, int64_t count) const {
  TensorView v = view();
  v.data = static_cast<char*>(data_) + begin * row_stride_ * int64_t(dtype_size(dtype_));
  v.shape[0] = count;
  return v;
}

void DeviceTensor::upload(const Buffer& host) {
  const std::size_t es = dtype_size(dtype_);
  const int64_t nrows = shape_.empty() ? 1 : shape_[0];
  cuda_check(cudaMemcpy2D(data_, row_stride_ * es, host.bytes().data(), row_elems_ * es,
                          row_elems_ * es, nrows, cudaMemcpyHostToDevice),
             "upload");
  // A pageable host-to-device copy (and the cudaMemset before it) may still be in flight on the
  // legacy stream when cudaMemcpy2D returns; pools on non-blocking streams do not wait for it.
  cuda_check(cudaDeviceSynchronize(), "upload");
}

void DeviceTensor::download(Buffer& host) const {
  const std::size_t es = dtype_size(dtype_);
  const int64_t nrows = shape_.empty() ? 1 : shape_[0];
  cuda_check(cudaMemcpy2D(host.data(), row_elems_ * es, data_, row_stride_ * es, row_elems_ * es,
                          nrows, cudaMemcpyDeviceToHost),
             "download");
}

void DeviceTensor::poison() {
  const int64_t nrows = shape_.empty() ? 1 : shape_[0];
  cuda_check(cudaMemset(data_, 0xff, nrows * row_stride_ * dtype_size(dtype_)), "poison");
}

DeviceWeights::DeviceWeights(const LayerWeights& w)
    : conv_weight(w.conv_weight), A_log(w.A_log), dt_bias(w.dt_bias) {
  if (w.conv_bias.numel()) conv_bias = DeviceTensor(w.conv_bias);
}

GdnWeights DeviceWeights::view() const {
  GdnWeights v{conv_weight.view(), TensorView{}, A_log.view(), dt_bias.view()};
  if (!conv_bias.view().empty()) v.conv_bias = conv_bias.view();
  return v;
}

DeviceInputs::DeviceInputs(const TokenInputs& in, int64_t pad)
    : mixed_qkv(in.mixed_qkv, pad), a(in.a, pad), b(in.b, pad) {}
GdnInputs DeviceInputs::view() const { return GdnInputs{mixed_qkv.view(), a.view(), b.view()}; }
GdnInputs DeviceInputs::rows(int64_t begin, int64_t count) const {
  return GdnInputs{mixed_qkv.rows(begin, count), a.rows(begin, count), b.rows(begin, count)};
}

DeviceOutputs::DeviceOutputs(const TokenOutputs& out, int64_t pad, bool with)
    : conv_out(out.conv_out, pad), core_out(out.core_out, pad), with_conv_out(with) {
  conv_out.poison();
  core_out.poison();
}
GdnOutputs DeviceOutputs::view() const {
  return GdnOutputs{with_conv_out ? conv_out.view() : TensorView{}, core_out.view()};
}
GdnOutputs DeviceOutputs::rows(int64_t begin, int64_t count) const {
  return GdnOutputs{with_conv_out ? conv_out.rows(begin, count) : TensorView{},
                    core_out.rows(begin, count)};
}
void DeviceOutputs::download(TokenOutputs& out) const {
  conv_out.download(out.conv_out);
  core_out.download(out.core_out);
}

std::vector<uint8_t> rows_bytes(const TensorView& v, int64_t begin, int64_t count) {
  const int64_t row_bytes = v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
  std::vector<uint8_t> out(static_cast<std::size_t>(row_bytes * count));
  const char* src = static_cast<const char*>(v.data) + begin * row_bytes;
  if (v.device == Device::kCuda) {
    cuda_check(cudaMemcpy(out.data(), src, out.size(), cudaMemcpyDeviceToHost), "rows_bytes");
  } else {
    std::memcpy(out.data(), src, out.size());
  }
  return out;
}

std::vector<float> rows_to_floats(const TensorView& v, int64_t begin, int64_t count) {
  // Each row's elements in logical order (row-major over shape[1..]), read through the view's
  // strides: a row is compact within stride[0] elements, in any element order (the pool's
  // PoolOptions::conv_layout / ssm_layout), so states of two orders compare element for element.
  int64_t row_elems = 1;
  for (int d = 1; d < v.ndim; ++d) row_elems *= v.shape[d];
  const std::vector<uint8_t> bytes = rows_bytes(v, begin, count);
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(row_elems * count));
  std::vector<int64_t> idx(static_cast<std::size_t>(v.ndim), 0);
  for (int64_t r = 0; r < count; ++r) {
    std::fill(idx.begin(), idx.end(), 0);
    for (int64_t i = 0; i < row_elems; ++i) {
      int64_t e = r * v.stride[0];
      for (int d = 1; d < v.ndim; ++d) e += idx[static_cast<std::size_t>(d)] * v.stride[d];
      for (int d = v.ndim - 1; d >= 1; --d) {
        if (++idx[static_cast<std::size_t>(d)] < v.shape[d]) break;
        idx[static_cast<std::size_t>(d)] = 0;
      }
      if (v.dtype == DType::kBF16) {
        uint16_t raw;
        std::memcpy(&raw, bytes.data() + 2 * e, 2);
        out.push_back(float_from_bf16(raw));
      } else {
        float raw;
        std::memcpy(&raw, bytes.data() + 4 * e, 4);
        out.push_back(raw);
      }
    }
  }
  return out;
}

std::vector<float> to_floats(const TensorView& v) { return rows_to_floats(v, 0, v.shape[0]); }

void expect_close(const std::vector<float>& ref, const std::vector<float>& got, double tol,
                  const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double max_ref = 0, max_err = 0;
  std::size_t worst = 0, nan_at = ref.size();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) {
      if (nan_at == ref.size()) nan_at = i;
      continue;
    }
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
    const double err = std::fabs(double(got[i]) - ref[i]);
    if (err > max_err) {
      max_err = err;
      worst = i;
    }
  }
  EXPECT_EQ(nan_at, ref.size()) << what << ": NaN at index " << nan_at << " (ref "
                                << (nan_at < ref.size() ? ref[nan_at] : 0.f) << ", got "
                                << (nan_at < ref.size() ? got[nan_at] : 0.f)
                                << "; NaN = unwritten)";
  EXPECT_GT(max_ref, 0.0) << what << ": the reference is all zeros";
  const double rel = max_ref > 0 ? max_err / max_ref : max_err;
  EXPECT_LE(rel, tol) << what << ": max abs error " << max_err << " at index " << worst << " (ref "
                      << ref[worst] << ", got " << got[worst] << "), max |ref| " << max_ref
                      << ", relative " << rel;
}

namespace {

PoolOptions on_cuda(PoolOptions options, cudaStream_t stream) {
  options.backend = Backend::kCuda;
  options.stream = stream;
  return options;
}

}  // namespace

OraclePools::OraclePools(const ModelConfig& model, const PoolOptions& options, cudaStream_t stream,
                         int requests)
    : OraclePools(model, options, options, stream, requests) {}

OraclePools::OraclePools(const ModelConfig& model, const PoolOptions& cpu_options,
                         const PoolOptions& gpu_options, cudaStream_t stream, int requests)
    : cpu(model, cpu_options), gpu(model, on_cuda(gpu_options, stream)) {
  for (int i = 0; i < requests; ++i) {
    ch.push_back(cpu.acquire());
    gh.push_back(gpu.acquire());
  }
}

RandomLayers::RandomLayers(const GdnConfig& g, int layers, std::mt19937_64& rng) {
  for (int l = 0; l < layers; ++l) {
    weights.push_back(random_weights(g, rng));
    dweights.emplace_back(weights.back());
  }
}

void prefill_history(OraclePools& p, const RandomLayers& w, const GdnConfig& g, int tokens,
                     std::mt19937_64& rng, cudaStream_t stream) {
  for (std::size_t req = 0; req < p.ch.size(); ++req) {
    for (std::size_t l = 0; l < w.weights.size(); ++l) {
      const int layer = static_cast<int>(l);
      const TokenInputs in = random_inputs(g, tokens, rng);
      TokenOutputs out = make_outputs(g, tokens);
      p.cpu.prefill(layer, p.ch[req], w.weights[l].view(), in.view(), out.view());
      DeviceInputs din(in, 0);
      DeviceOutputs dout(out, 0, true);
      p.gpu.prefill(layer, p.gh[req], w.dweights[l].view(), din.view(), dout.view());
      SPECSTATE_CUDA_OK(cudaStreamSynchronize(stream));
    }
  }
}

VerifyBatch padded_batch(const std::vector<SlotHandle>& handles, int pad_row, int window) {
  VerifyBatch batch;
  batch.window = window;
  batch.rows = handles;
  batch.rows.insert(batch.rows.begin() + pad_row, SlotHandle::padding());
  return batch;
}

std::string chain_or_tree(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "tree" : "chain";
}

std::string graph_case_name(const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
  return std::string(std::get<0>(info.param) ? "tree" : "chain") +
         (std::get<1>(info.param) ? "_vllm" : "");
}

double state_tolerance(const GdnConfig& g) {
  // f32 arithmetic in another order: ~1e-6. A bf16 rounding that lands on the other side
  // of a tie-break (activations or state) moves an element by one bf16 ulp (2^-8 relative).
  if (g.act_dtype == DType::kBF16 || g.ssm_state_dtype == DType::kBF16) return 2e-2;
  return 1e-5;
}

double output_tolerance(const GdnConfig& g) {
  if (g.act_dtype == DType::kBF16 || g.ssm_state_dtype == DType::kBF16) return 2e-2;
  return 1e-5;
}

}  // namespace specstate::test
