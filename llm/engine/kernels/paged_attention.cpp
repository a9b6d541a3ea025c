// Decode attention straight from the paged KV cache: one call per layer for every sequence
// that decodes, reading each sequence's keys and values in place through its block table
// (no gather copy, no padding to the longest neighbour, no mask). Each (sequence, KV head)
// pair is one task: its `group` query heads share the keys, so GQA reads them once.
//
// Every sequence is computed alone, in the same order whatever shares the step, so a
// request's attention does not depend on its neighbours (batch invariance).
//
// Built by llm/engine/kernels/build.py (AVX2 + FMA, fast math for the exponentials) and
// registered as torch.ops.llm_kernels.paged_decode_attention.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGroup = 16;

inline void load_row(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

inline void load_row(const c10::BFloat16* src, float* dst, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
  for (int64_t d = 0; d < n; ++d) {
    uint32_t word = static_cast<uint32_t>(bits[d]) << 16;
    std::memcpy(dst + d, &word, sizeof(float));
  }
}

inline void store_row(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

inline void store_row(const float* src, c10::BFloat16* dst, int64_t n) {
  for (int64_t d = 0; d < n; ++d) dst[d] = c10::BFloat16(src[d]);  // round to nearest even, as torch does
}

// One (sequence, KV head) task: scores for every key, a softmax, then the weighted values.
// kHeadDim is a compile-time constant for the common sizes so the inner loops unroll fully.
template <typename T, int64_t kHeadDim>
void attend(const T* query_rows, const T* key_cache, const T* value_cache, const int64_t* table, int64_t length,
            T* out_rows, int64_t group, int64_t head_dim_runtime, int64_t block_size, int64_t token_stride,
            int64_t block_stride, float scale, std::vector<float>& scores) {
  const int64_t head_dim = kHeadDim > 0 ? kHeadDim : head_dim_runtime;
  alignas(64) float q[kMaxGroup][kMaxHeadDim];
  alignas(64) float acc[kMaxGroup][kMaxHeadDim];
  alignas(64) float row[kMaxHeadDim];
  scores.resize(static_cast<size_t>(group * length));
  for (int64_t g = 0; g < group; ++g) {
    load_row(query_rows + g * head_dim, q[g], head_dim);
    for (int64_t d = 0; d < head_dim; ++d) q[g][d] *= scale;
  }
  const int64_t num_blocks = (length + block_size - 1) / block_size;
  for (int64_t b = 0, t = 0; b < num_blocks; ++b) {
    const T* key = key_cache + table[b] * block_stride;
    const int64_t in_block = std::min(block_size, length - t);
    for (int64_t offset = 0; offset < in_block; ++offset, ++t, key += token_stride) {
      load_row(key, row, head_dim);
      for (int64_t g = 0; g < group; ++g) {
        float dot = 0.f;
        for (int64_t d = 0; d < head_dim; ++d) dot += q[g][d] * row[d];
        scores[g * length + t] = dot;
      }
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * length;
    const float top = *std::max_element(s, s + length);
    float total = 0.f;
    for (int64_t t = 0; t < length; ++t) {
      s[t] = std::exp(s[t] - top);
      total += s[t];
    }
    const float inverse = 1.f / total;
    for (int64_t t = 0; t < length; ++t) s[t] *= inverse;
    std::fill(acc[g], acc[g] + head_dim, 0.f);
  }
  for (int64_t b = 0, t = 0; b < num_blocks; ++b) {
    const T* value = value_cache + table[b] * block_stride;
    const int64_t in_block = std::min(block_size, length - t);
    for (int64_t offset = 0; offset < in_block; ++offset, ++t, value += token_stride) {
      load_row(value, row, head_dim);
      for (int64_t g = 0; g < group; ++g) {
        const float p = scores[g * length + t];
        for (int64_t d = 0; d < head_dim; ++d) acc[g][d] += p * row[d];
      }
    }
  }
  for (int64_t g = 0; g < group; ++g) store_row(acc[g], out_rows + g * head_dim, head_dim);
}

template <typename T>
void decode_attention(const T* query, int64_t query_stride, const T* key_cache, const T* value_cache,
                      const int64_t* block_tables, const int64_t* context_lens, T* out, int64_t num_seqs, int64_t heads,
                      int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t table_width, double scale) {
  const int64_t group = heads / kv_heads;
  const int64_t token_stride = kv_heads * head_dim;  // one position of one block
  const int64_t block_stride = block_size * token_stride;
  at::parallel_for(0, num_seqs * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t seq = task / kv_heads, kv_head = task % kv_heads;
      const int64_t head = kv_head * group;  // the first of the query heads that share this KV head
      const T* keys = key_cache + kv_head * head_dim;
      const T* values = value_cache + kv_head * head_dim;
      const int64_t* table = block_tables + seq * table_width;
      const auto run = head_dim == 64 ? &attend<T, 64> : head_dim == 128 ? &attend<T, 128> : &attend<T, 0>;
      run(query + seq * query_stride + head * head_dim, keys, values, table, context_lens[seq],
          out + (seq * heads + head) * head_dim, group, head_dim, block_size, token_stride, block_stride,
          static_cast<float>(scale), scores);
    }
  });
}

void paged_decode_attention(const at::Tensor& query, const at::Tensor& key_cache, const at::Tensor& value_cache,
                            const at::Tensor& block_tables, const at::Tensor& context_lens, double scale, at::Tensor& out) {
  TORCH_CHECK(query.dim() == 3, "query must be [sequences, heads, head_dim]");
  TORCH_CHECK(key_cache.dim() == 4 && value_cache.sizes() == key_cache.sizes(),
              "key and value caches must both be [blocks, block_size, kv_heads, head_dim]");
  TORCH_CHECK(query.device().is_cpu() && key_cache.device().is_cpu(), "paged_decode_attention runs on the CPU only");
  TORCH_CHECK(query.scalar_type() == key_cache.scalar_type() && value_cache.scalar_type() == key_cache.scalar_type() &&
                  out.scalar_type() == key_cache.scalar_type(),
              "query, caches and out must share one dtype");
  TORCH_CHECK(query.stride(2) == 1 && query.stride(1) == query.size(2),
              "query's heads must be contiguous (a row of the flat batch may be wider)");
  TORCH_CHECK(key_cache.is_contiguous() && value_cache.is_contiguous() && out.is_contiguous(),
              "caches and out must be contiguous");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && context_lens.scalar_type() == at::kLong &&
                  block_tables.is_contiguous() && context_lens.is_contiguous(),
              "block_tables and context_lens must be contiguous int64");
  const int64_t num_seqs = query.size(0), heads = query.size(1), head_dim = query.size(2);
  const int64_t block_size = key_cache.size(1), kv_heads = key_cache.size(2);
  TORCH_CHECK(key_cache.size(3) == head_dim && head_dim <= kMaxHeadDim, "head_dim mismatch or above ", kMaxHeadDim);
  TORCH_CHECK(heads % kv_heads == 0 && heads / kv_heads <= kMaxGroup, "heads must be a multiple of kv_heads (group <= ", kMaxGroup, ")");
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.size(0) == num_seqs && context_lens.numel() == num_seqs,
              "one block table row and one context length per sequence");
  TORCH_CHECK(out.sizes() == query.sizes(), "out must have the query's shape");
  const int64_t table_width = block_tables.size(1);
  const int64_t* lengths = context_lens.data_ptr<int64_t>();
  for (int64_t i = 0; i < num_seqs; ++i)
    TORCH_CHECK(lengths[i] >= 1 && lengths[i] <= table_width * block_size, "sequence ", i, ": context length ", lengths[i],
                " outside [1, ", table_width * block_size, "]");
  if (key_cache.scalar_type() == at::kFloat) {
    decode_attention<float>(query.data_ptr<float>(), query.stride(0), key_cache.data_ptr<float>(), value_cache.data_ptr<float>(),
                            block_tables.data_ptr<int64_t>(), lengths, out.data_ptr<float>(), num_seqs, heads, kv_heads,
                            head_dim, block_size, table_width, scale);
  } else if (key_cache.scalar_type() == at::kBFloat16) {
    decode_attention<c10::BFloat16>(query.data_ptr<c10::BFloat16>(), query.stride(0), key_cache.data_ptr<c10::BFloat16>(),
                                    value_cache.data_ptr<c10::BFloat16>(), block_tables.data_ptr<int64_t>(), lengths,
                                    out.data_ptr<c10::BFloat16>(), num_seqs, heads, kv_heads, head_dim, block_size,
                                    table_width, scale);
  } else {
    TORCH_CHECK(false, "paged_decode_attention supports float32 and bfloat16, not ", key_cache.scalar_type());
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llm_kernels, m) {
  m.def("paged_decode_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
        "Tensor context_lens, float scale, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(llm_kernels, CPU, m) { m.impl("paged_decode_attention", &paged_decode_attention); }
