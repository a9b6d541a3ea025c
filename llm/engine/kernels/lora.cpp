// Low-rank adapter (LoRA) deltas for a step whose rows use different adapters (multi-LoRA,
// Punica's "segmented gather matmul" done per row on the CPU):
//
//   lora_delta(x, lora_a, lora_b, part_ends, ranks, row_slots, scales, out):
//       out[t] += scales[s] * lora_b[s] @ (lora_a[s] @ x[t])   for every row t with s = row_slots[t] >= 0
//
// A fused projection (q|k|v, gate|up) is P parts: out's columns [part_ends[p-1], part_ends[p])
// are part p, whose A is rows [p * R, p * R + rank) of lora_a[s] and whose B is those columns
// of lora_b[s]'s first `rank` rows (rank = ranks[s] <= R; the rest is never read). So each
// output column reads only its own part's ranks, with no block-diagonal zeros, and B is stored
// transposed so the expand is one contiguous multiply-add per rank over the part's columns.
// x [rows, in], out [rows, out], lora_a [slots, P * R, in] and lora_b [slots, R, out] share the
// step's dtype (float32 or bfloat16: 16 adapters' matrices read per step are memory traffic
// beside the base weights, so they are as narrow as those); sums are float32; scales [slots]
// is float32; part_ends [P], ranks [slots] and row_slots [rows] are int64 (-1: no adapter). The base projection ran once over every row before this; each row adds only its own
// adapter's delta, so rows of different adapters share one step. Every row is computed alone,
// in one order, whatever shares its step. Built by llm/engine/kernels/build.py.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

inline float to_float(float value) { return value; }
inline float to_float(c10::BFloat16 value) {  // the bits shifted up: vectorises
  const uint32_t bits = static_cast<uint32_t>(value.x) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}
inline void store(float value, float* out) { *out = value; }
inline void store(float value, c10::BFloat16* out) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  *out = c10::BFloat16(static_cast<uint16_t>(bits >> 16), c10::BFloat16::from_bits());
}

constexpr int64_t kWorkPerTask = 1 << 21;  // multiply-adds below which a call stays on the calling thread

template <typename T>
void delta_rows(const T* x, const T* lora_a, const T* lora_b, const int64_t* part_ends, int64_t parts,
                const int64_t* ranks, const int64_t* row_slots, const float* scales, T* out, int64_t rows, int64_t in,
                int64_t width_rank, int64_t width) {
  const int64_t a_rows = parts * width_rank;
  // The adapted rows ordered by slot (a counting sort, stable): a thread then runs one
  // adapter's rows back to back, its A and B read from memory once and from cache after,
  // instead of once per row when the step's rows interleave adapters.
  int64_t slots = 0;
  for (int64_t t = 0; t < rows; ++t) slots = std::max(slots, row_slots[t] + 1);
  std::vector<int64_t> first(static_cast<size_t>(slots + 1), 0), order;
  for (int64_t t = 0; t < rows; ++t)
    if (row_slots[t] >= 0) ++first[row_slots[t] + 1];
  for (int64_t s = 0; s < slots; ++s) first[s + 1] += first[s];
  order.resize(static_cast<size_t>(first[slots]));
  for (int64_t t = 0; t < rows; ++t)
    if (row_slots[t] >= 0) order[first[row_slots[t]]++] = t;
  // A decode step's few rows are microseconds of work: forking threads for them cost more than
  // the work whenever another process wanted the cores (a served step's neighbours).
  const int64_t row_work = a_rows * in + width_rank * width;
  const int64_t grain = std::max<int64_t>(1, kWorkPerTask / std::max<int64_t>(row_work, 1));
  at::parallel_for(0, static_cast<int64_t>(order.size()), grain, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(in)), shrunk(static_cast<size_t>(a_rows)), acc(static_cast<size_t>(width));
    for (int64_t k = begin; k < end; ++k) {
      const int64_t t = order[k], slot = row_slots[t];
      const int64_t rank = ranks[slot];
      const T* xt = x + t * in;
      for (int64_t i = 0; i < in; ++i) row[i] = to_float(xt[i]);
      const T* a = lora_a + slot * a_rows * in;
      for (int64_t p = 0; p < parts; ++p) {  // shrink: rank dot products over the input, per part
        for (int64_t r = 0; r < rank; ++r) {
          const T* ar = a + (p * width_rank + r) * in;
          float dot = 0.f;
          for (int64_t i = 0; i < in; ++i) dot += to_float(ar[i]) * row[i];
          shrunk[p * width_rank + r] = dot * scales[slot];
        }
      }
      const T* b = lora_b + slot * width_rank * width;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t p = 0, start = 0; p < parts; start = part_ends[p], ++p) {  // expand: axpy per rank over the part's columns
        const float* sp = shrunk.data() + p * width_rank;
        const int64_t stop = part_ends[p];
        for (int64_t r = 0; r < rank; ++r) {
          const float weight = sp[r];
          const T* br = b + r * width;
          for (int64_t o = start; o < stop; ++o) acc[o] += weight * to_float(br[o]);
        }
      }
      T* ot = out + t * width;
      for (int64_t o = 0; o < width; ++o) store(to_float(ot[o]) + acc[o], ot + o);
    }
  });
}

void lora_delta(const at::Tensor& x, const at::Tensor& lora_a, const at::Tensor& lora_b, const at::Tensor& part_ends,
                const at::Tensor& ranks, const at::Tensor& row_slots, const at::Tensor& scales, at::Tensor& out) {
  TORCH_CHECK(x.dim() == 2 && out.dim() == 2 && out.size(0) == x.size(0), "x must be [rows, in] and out [rows, out]");
  TORCH_CHECK(part_ends.scalar_type() == at::kLong && part_ends.dim() == 1 && part_ends.numel() >= 1 && part_ends.is_contiguous(),
              "part_ends must be contiguous int64, one per part");
  const int64_t parts = part_ends.numel(), slots = lora_a.size(0);
  TORCH_CHECK(lora_a.dim() == 3 && lora_b.dim() == 3 && lora_b.size(0) == slots && lora_a.size(2) == x.size(1) &&
                  lora_b.size(2) == out.size(1) && lora_a.size(1) == parts * lora_b.size(1),
              "lora_a must be [slots, parts * R, in] and lora_b [slots, R, out] for x's and out's widths");
  TORCH_CHECK(part_ends.data_ptr<int64_t>()[parts - 1] == out.size(1), "the last part must end at out's width");
  TORCH_CHECK(scales.scalar_type() == at::kFloat, "scales must be float32");
  TORCH_CHECK(ranks.scalar_type() == at::kLong && ranks.numel() == slots && scales.numel() == slots && ranks.is_contiguous() &&
                  scales.is_contiguous(),
              "ranks (int64) and scales (float32) must be contiguous, one per slot");
  TORCH_CHECK(row_slots.scalar_type() == at::kLong && row_slots.numel() == x.size(0) && row_slots.is_contiguous(),
              "row_slots must be contiguous int64, one per row");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(out.scalar_type() == dtype && lora_a.scalar_type() == dtype && lora_b.scalar_type() == dtype,
              "x, lora_a, lora_b and out must share one dtype");
  TORCH_CHECK(x.is_contiguous() && lora_a.is_contiguous() && lora_b.is_contiguous() && out.is_contiguous(),
              "x, lora_a, lora_b and out must be contiguous");
  const int64_t* slot = row_slots.data_ptr<int64_t>();
  const int64_t* rank = ranks.data_ptr<int64_t>();
  for (int64_t t = 0; t < x.size(0); ++t)
    TORCH_CHECK(slot[t] >= -1 && slot[t] < slots, "row ", t, ": slot ", slot[t], " outside [-1, ", slots, ")");
  for (int64_t s = 0; s < slots; ++s)
    TORCH_CHECK(rank[s] >= 0 && rank[s] <= lora_b.size(1), "slot ", s, ": rank ", rank[s], " outside [0, ", lora_b.size(1), "]");
  const int64_t rows = x.size(0), in = x.size(1), width_rank = lora_b.size(1), width = out.size(1);
  const int64_t* ends = part_ends.data_ptr<int64_t>();
  if (dtype == at::kFloat)
    delta_rows(x.data_ptr<float>(), lora_a.data_ptr<float>(), lora_b.data_ptr<float>(), ends, parts, rank, slot,
               scales.data_ptr<float>(), out.data_ptr<float>(), rows, in, width_rank, width);
  else if (dtype == at::kBFloat16)
    delta_rows(x.data_ptr<c10::BFloat16>(), lora_a.data_ptr<c10::BFloat16>(), lora_b.data_ptr<c10::BFloat16>(), ends, parts, rank, slot,
               scales.data_ptr<float>(), out.data_ptr<c10::BFloat16>(), rows, in, width_rank, width);
  else
    TORCH_CHECK(false, "lora_delta supports float32 and bfloat16 rows, not ", dtype);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llm_kernels, m) {
  m.def("lora_delta(Tensor x, Tensor lora_a, Tensor lora_b, Tensor part_ends, Tensor ranks, Tensor row_slots, Tensor scales, "
        "Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(llm_kernels, CPU, m) { m.impl("lora_delta", &lora_delta); }
