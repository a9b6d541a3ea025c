// Row-wise operations of the Llama forward fused into one operator each: at one decoding
// sequence a step is ~900 operator dispatches of a few microseconds, and torch's RMSNorm alone
// is several (square, mean, rsqrt, scale, weight, the cast to the compute dtype) per call.
//
//   rms_norm(x, weight, eps, out):           out = x / rms(x) * weight, cast to out's dtype
//   add_rms_norm(x, delta, weight, eps, out): x += delta (the residual, in place), then as above
//   silu_mul(gate_up, out):                   out = silu(gate) * up, gate_up = [gate | up]
//   rotary_cache_write(qkv, positions, cos, sin, slots, k_cache, v_cache, qk_out):
//       rotary embedding of the query and key heads into qk_out, and the step's keys and values
//       written into their cache slots (what were a gather, a roll, two products and two writes)
//
// x and weight are float32 (the residual stream stays float32); out and delta are float32 or
// bfloat16. Every row is computed alone, in one order, so a row's result does not depend on
// the other rows of the step. Built by llm/engine/kernels/build.py.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
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

template <typename T>
void rotary_rows(const T* qkv, const int64_t* positions, const T* cos, const T* sin, const int64_t* slots, T* k_cache,
                 T* v_cache, T* qk_out, int64_t rows, int64_t qk_heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t heads = qk_heads - kv_heads, half = head_dim / 2, width = (qk_heads + kv_heads) * head_dim;
  at::parallel_for(0, rows, grain(width), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* in = qkv + row * width;
      const T* c = cos + positions[row] * head_dim;
      const T* s = sin + positions[row] * head_dim;
      T* out = qk_out + row * qk_heads * head_dim;
      const int64_t slot = slots[row];
      for (int64_t head = 0; head < qk_heads; ++head) {
        const T* x = in + head * head_dim;
        T* y = out + head * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t partner = d < half ? d + half : d - half;  // torch.roll by half: the halves swapped
          store(to_float(x[d]) * to_float(c[d]) + to_float(x[partner]) * to_float(s[d]), y + d);
        }
        if (head >= heads) std::copy(y, y + head_dim, k_cache + (slot * kv_heads + head - heads) * head_dim);
      }
      std::copy(in + qk_heads * head_dim, in + width, v_cache + slot * kv_heads * head_dim);
    }
  });
}

void rotary_cache_write(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
                        const at::Tensor& slots, at::Tensor& k_cache, at::Tensor& v_cache, at::Tensor& qk_out) {
  TORCH_CHECK(qkv.device().is_cpu(), "llm_kernels row ops run on the CPU only");
  TORCH_CHECK(qk_out.dim() == 3 && k_cache.dim() == 3 && v_cache.sizes() == k_cache.sizes(),
              "qk_out must be [rows, heads + kv_heads, head_dim], the caches [slots, kv_heads, head_dim]");
  const int64_t rows = qkv.size(0), qk_heads = qk_out.size(1), head_dim = qk_out.size(2), kv_heads = k_cache.size(1);
  TORCH_CHECK(qkv.dim() == 2 && qkv.size(1) == (qk_heads + kv_heads) * head_dim && qk_out.size(0) == rows &&
                  k_cache.size(2) == head_dim && head_dim % 2 == 0 && qk_heads > kv_heads,
              "qkv must be [rows, (heads + 2 kv_heads) * head_dim] for qk_out's and the caches' shapes");
  TORCH_CHECK(cos.dim() == 2 && cos.size(1) == head_dim && sin.sizes() == cos.sizes(), "cos and sin must be [positions, head_dim]");
  TORCH_CHECK(positions.scalar_type() == at::kLong && slots.scalar_type() == at::kLong && positions.numel() == rows &&
                  slots.numel() == rows && positions.is_contiguous() && slots.is_contiguous(),
              "positions and slots must be contiguous int64, one per row");
  const auto dtype = qkv.scalar_type();
  TORCH_CHECK(cos.scalar_type() == dtype && sin.scalar_type() == dtype && k_cache.scalar_type() == dtype &&
                  v_cache.scalar_type() == dtype && qk_out.scalar_type() == dtype,
              "qkv, cos, sin, the caches and qk_out must share one dtype");
  TORCH_CHECK(qkv.is_contiguous() && cos.is_contiguous() && sin.is_contiguous() && k_cache.is_contiguous() &&
                  v_cache.is_contiguous() && qk_out.is_contiguous(),
              "qkv, cos, sin, the caches and qk_out must be contiguous");
  const int64_t* position = positions.data_ptr<int64_t>();
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    TORCH_CHECK(position[row] >= 0 && position[row] < cos.size(0), "row ", row, ": position ", position[row], " outside the tables");
    TORCH_CHECK(slot[row] >= 0 && slot[row] < k_cache.size(0), "row ", row, ": slot ", slot[row], " outside the cache");
  }
  if (dtype == at::kFloat)
    rotary_rows(qkv.data_ptr<float>(), position, cos.data_ptr<float>(), sin.data_ptr<float>(), slot, k_cache.data_ptr<float>(),
                v_cache.data_ptr<float>(), qk_out.data_ptr<float>(), rows, qk_heads, kv_heads, head_dim);
  else if (dtype == at::kBFloat16)
    rotary_rows(qkv.data_ptr<c10::BFloat16>(), position, cos.data_ptr<c10::BFloat16>(), sin.data_ptr<c10::BFloat16>(), slot,
                k_cache.data_ptr<c10::BFloat16>(), v_cache.data_ptr<c10::BFloat16>(), qk_out.data_ptr<c10::BFloat16>(), rows,
                qk_heads, kv_heads, head_dim);
  else
    TORCH_CHECK(false, "rotary_cache_write supports float32 and bfloat16, not ", dtype);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llm_kernels, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps, Tensor(a!) out) -> ()");
  m.def("add_rms_norm(Tensor(a!) x, Tensor delta, Tensor weight, float eps, Tensor(b!) out) -> ()");
  m.def("silu_mul(Tensor gate_up, Tensor(a!) out) -> ()");
  m.def("rotary_cache_write(Tensor qkv, Tensor positions, Tensor cos, Tensor sin, Tensor slots, Tensor(a!) k_cache, "
        "Tensor(b!) v_cache, Tensor(c!) qk_out) -> ()");
}

TORCH_LIBRARY_IMPL(llm_kernels, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("silu_mul", &silu_mul);
  m.impl("rotary_cache_write", &rotary_cache_write);
}
