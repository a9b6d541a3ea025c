// Row-wise operations of the Llama forward fused into one operator each: at one decoding
// sequence a step is ~900 operator dispatches of a few microseconds, and torch's RMSNorm alone
// is several (square, mean, rsqrt, scale, weight, the cast to the compute dtype) per call.
//
//   rms_norm(x, weight, eps, out):           out = x / rms(x) * weight, cast to out's dtype
//   add_rms_norm(x, delta, weight, eps, out): x += delta (the residual, in place), then as above
//   silu_mul(gate_up, out):                   out = silu(gate) * up, gate_up = [gate | up]
//
// x and weight are float32 (the residual stream stays float32); out and delta are float32 or
// bfloat16. Every row is computed alone, in one order, so a row's result does not depend on
// the other rows of the step. Built by llm/engine/kernels/build.py.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>

namespace {

constexpr int64_t kElementsPerTask = 16384;  // below this much work a call runs on the calling thread

inline float to_float(float value) { return value; }
inline float to_float(c10::BFloat16 value) { return static_cast<float>(value); }
inline void store(float value, float* out) { *out = value; }
inline void store(float value, c10::BFloat16* out) { *out = c10::BFloat16(value); }

int64_t grain(int64_t width) { return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(width, 1)); }

template <typename Delta, typename Out>
void norm_rows(float* x, const Delta* delta, const float* weight, double eps, Out* out, int64_t rows, int64_t hidden) {
  at::parallel_for(0, rows, grain(hidden), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      float* xr = x + row * hidden;
      if (delta != nullptr) {
        const Delta* dr = delta + row * hidden;
        for (int64_t i = 0; i < hidden; ++i) xr[i] += to_float(dr[i]);
      }
      float squares = 0.f;
      for (int64_t i = 0; i < hidden; ++i) squares += xr[i] * xr[i];
      const float inverse = 1.f / std::sqrt(squares / static_cast<float>(hidden) + static_cast<float>(eps));
      Out* orow = out + row * hidden;
      for (int64_t i = 0; i < hidden; ++i) store(xr[i] * inverse * weight[i], orow + i);
    }
  });
}

void check_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& out) {
  TORCH_CHECK(x.device().is_cpu(), "llm_kernels row ops run on the CPU only");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous float32 [rows, hidden]");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1) && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "weight must be contiguous float32 [hidden]");
  TORCH_CHECK(out.sizes() == x.sizes() && out.is_contiguous(), "out must be contiguous with x's shape");
  TORCH_CHECK(out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16, "out must be float32 or bfloat16");
}

template <typename Delta>
void dispatch_out(at::Tensor& x, const Delta* delta, const at::Tensor& weight, double eps, at::Tensor& out) {
  const int64_t rows = x.size(0), hidden = x.size(1);
  if (out.scalar_type() == at::kFloat)
    norm_rows(x.data_ptr<float>(), delta, weight.data_ptr<float>(), eps, out.data_ptr<float>(), rows, hidden);
  else
    norm_rows(x.data_ptr<float>(), delta, weight.data_ptr<float>(), eps, out.data_ptr<c10::BFloat16>(), rows, hidden);
}

void rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  check_norm(x, weight, out);
  at::Tensor input = x;  // not written: no delta
  dispatch_out<float>(input, nullptr, weight, eps, out);
}

void add_rms_norm(at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight, double eps, at::Tensor& out) {
  check_norm(x, weight, out);
  TORCH_CHECK(delta.sizes() == x.sizes() && delta.is_contiguous(), "delta must be contiguous with x's shape");
  if (delta.scalar_type() == at::kFloat)
    dispatch_out(x, delta.data_ptr<float>(), weight, eps, out);
  else if (delta.scalar_type() == at::kBFloat16)
    dispatch_out(x, delta.data_ptr<c10::BFloat16>(), weight, eps, out);
  else
    TORCH_CHECK(false, "delta must be float32 or bfloat16, not ", delta.scalar_type());
}

template <typename T>
void silu_mul_rows(const T* gate_up, T* out, int64_t rows, int64_t width) {
  at::parallel_for(0, rows, grain(width), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* gate = gate_up + row * 2 * width;
      const T* up = gate + width;
      T* orow = out + row * width;
      for (int64_t i = 0; i < width; ++i) {
        const float g = to_float(gate[i]);
        store(g / (1.f + std::exp(-g)) * to_float(up[i]), orow + i);
      }
    }
  });
}

void silu_mul(const at::Tensor& gate_up, at::Tensor& out) {
  TORCH_CHECK(gate_up.device().is_cpu(), "llm_kernels row ops run on the CPU only");
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0 && gate_up.is_contiguous(),
              "gate_up must be contiguous [rows, 2 * width]");
  TORCH_CHECK(out.dim() == 2 && out.size(0) == gate_up.size(0) && out.size(1) * 2 == gate_up.size(1) && out.is_contiguous() &&
                  out.scalar_type() == gate_up.scalar_type(),
              "out must be contiguous [rows, width] in gate_up's dtype");
  const int64_t rows = out.size(0), width = out.size(1);
  if (out.scalar_type() == at::kFloat)
    silu_mul_rows(gate_up.data_ptr<float>(), out.data_ptr<float>(), rows, width);
  else if (out.scalar_type() == at::kBFloat16)
    silu_mul_rows(gate_up.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), rows, width);
  else
    TORCH_CHECK(false, "silu_mul supports float32 and bfloat16, not ", out.scalar_type());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llm_kernels, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps, Tensor(a!) out) -> ()");
  m.def("add_rms_norm(Tensor(a!) x, Tensor delta, Tensor weight, float eps, Tensor(b!) out) -> ()");
  m.def("silu_mul(Tensor gate_up, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(llm_kernels, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("silu_mul", &silu_mul);
}
