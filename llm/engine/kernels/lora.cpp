// Low-rank adapter (LoRA) deltas for a step whose rows use different adapters (multi-LoRA,
// Punica's "segmented gather matmul" done per row on the CPU):
//
//   lora_delta(x, lora_a, lora_b, row_slots, scales, out):
//       out[t] += scales[s] * lora_b[s] @ (lora_a[s] @ x[t])   for every row t with s = row_slots[t] >= 0
//
// x [rows, in] and out [rows, out] share the step's dtype (float32 or bfloat16); lora_a
// [slots, rank, in] and lora_b [slots, out, rank] hold the loaded adapters in that dtype too
// (a smaller adapter's rank is padded with zeros); scales [slots] is float32 (alpha / rank);
// row_slots [rows] int64, -1 for a row without an adapter. The base projection ran once over
// every row before this; each row then adds only its own adapter's delta, so rows of different
// adapters share one step. Every row is computed alone, in one order, whatever shares its step.
// Built by llm/engine/kernels/build.py.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace {

inline float to_float(float value) { return value; }
inline float to_float(c10::BFloat16 value) { return static_cast<float>(value); }
inline void store(float value, float* out) { *out = value; }
inline void store(float value, c10::BFloat16* out) { *out = c10::BFloat16(value); }

template <typename T>
void delta_rows(const T* x, const T* lora_a, const T* lora_b, const int64_t* row_slots, const float* scales, T* out,
                int64_t rows, int64_t in, int64_t rank, int64_t width) {
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(in)), shrunk(static_cast<size_t>(rank));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = row_slots[t];
      if (slot < 0) continue;
      const T* xt = x + t * in;
      for (int64_t i = 0; i < in; ++i) row[i] = to_float(xt[i]);
      const T* a = lora_a + slot * rank * in;
      for (int64_t r = 0; r < rank; ++r) {  // shrink: rank dot products over the input
        const T* ar = a + r * in;
        float dot = 0.f;
        for (int64_t i = 0; i < in; ++i) dot += to_float(ar[i]) * row[i];
        shrunk[r] = dot * scales[slot];
      }
      const T* b = lora_b + slot * width * rank;
      T* ot = out + t * width;
      for (int64_t o = 0; o < width; ++o) {  // expand: one rank-long dot product per output
        const T* bo = b + o * rank;
        float dot = 0.f;
        for (int64_t r = 0; r < rank; ++r) dot += to_float(bo[r]) * shrunk[r];
        store(to_float(ot[o]) + dot, ot + o);
      }
    }
  });
}

void lora_delta(const at::Tensor& x, const at::Tensor& lora_a, const at::Tensor& lora_b, const at::Tensor& row_slots,
                const at::Tensor& scales, at::Tensor& out) {
  TORCH_CHECK(x.dim() == 2 && out.dim() == 2 && out.size(0) == x.size(0), "x must be [rows, in] and out [rows, out]");
  TORCH_CHECK(lora_a.dim() == 3 && lora_b.dim() == 3 && lora_a.size(0) == lora_b.size(0) && lora_a.size(2) == x.size(1) &&
                  lora_b.size(1) == out.size(1) && lora_b.size(2) == lora_a.size(1),
              "lora_a must be [slots, rank, in] and lora_b [slots, out, rank] for x's and out's widths");
  TORCH_CHECK(row_slots.scalar_type() == at::kLong && row_slots.numel() == x.size(0) && row_slots.is_contiguous(),
              "row_slots must be contiguous int64, one per row");
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.numel() == lora_a.size(0) && scales.is_contiguous(),
              "scales must be contiguous float32, one per slot");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(lora_a.scalar_type() == dtype && lora_b.scalar_type() == dtype && out.scalar_type() == dtype,
              "x, lora_a, lora_b and out must share one dtype");
  TORCH_CHECK(x.is_contiguous() && lora_a.is_contiguous() && lora_b.is_contiguous() && out.is_contiguous(),
              "x, lora_a, lora_b and out must be contiguous");
  const int64_t* slot = row_slots.data_ptr<int64_t>();
  for (int64_t t = 0; t < x.size(0); ++t)
    TORCH_CHECK(slot[t] >= -1 && slot[t] < lora_a.size(0), "row ", t, ": slot ", slot[t], " outside [-1, ", lora_a.size(0), ")");
  const int64_t rows = x.size(0), in = x.size(1), rank = lora_a.size(1), width = out.size(1);
  if (dtype == at::kFloat)
    delta_rows(x.data_ptr<float>(), lora_a.data_ptr<float>(), lora_b.data_ptr<float>(), slot, scales.data_ptr<float>(),
               out.data_ptr<float>(), rows, in, rank, width);
  else if (dtype == at::kBFloat16)
    delta_rows(x.data_ptr<c10::BFloat16>(), lora_a.data_ptr<c10::BFloat16>(), lora_b.data_ptr<c10::BFloat16>(), slot,
               scales.data_ptr<float>(), out.data_ptr<c10::BFloat16>(), rows, in, rank, width);
  else
    TORCH_CHECK(false, "lora_delta supports float32 and bfloat16, not ", dtype);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llm_kernels, m) {
  m.def("lora_delta(Tensor x, Tensor lora_a, Tensor lora_b, Tensor row_slots, Tensor scales, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(llm_kernels, CPU, m) { m.impl("lora_delta", &lora_delta); }
