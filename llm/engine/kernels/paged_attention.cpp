// Decode attention straight from the paged KV cache: one call per layer for every sequence
// that decodes, reading each sequence's keys and values in place through its block table
// (no gather copy, no padding to the longest neighbour, no mask). Each (sequence, KV head)
// pair is one task: its `group` query heads share the keys, so GQA reads them once. The
// sequences are shared out to the threads by context length (balanced_shares), not in halves.
//
// A task walks its blocks once (online softmax, as FlashAttention's decode does): per block it
// scores the keys (four per reduction), rescales the running sums and adds the weighted
// values, while the blocks two ahead are prefetched (the tables scatter blocks over the cache,
// which the hardware prefetcher cannot follow). bfloat16 caches on a CPU with AVX512-BF16 take
// their scores from vdpbf16ps over the raw bfloat16 rows, each key loaded once for the group,
// and add the values widened in registers to a few heads' sums at a time, every sum its own
// chain of FMAs; every other case widens to float32 with AVX2 + FMA.
// LLM_ATTENTION_ISA=avx2 forces the AVX2 code (to test it on any CPU).
//
// Every sequence is computed alone, in the same order whatever shares the step, so a request's
// attention does not depend on its neighbours (batch invariance). The two codes sum in
// different orders, so their results differ in the last bits between CPUs, never within one.
//
// Built by llm/engine/kernels/build.py (AVX2 + FMA for the file, AVX-512 for the functions
// marked so; fast math for the exponentials) and registered as
// torch.ops.llm_kernels.paged_decode_attention.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGroup = 16;
constexpr int64_t kLanes = 8;  // floats per AVX2 register

inline __m256 load8(const float* src) { return _mm256_loadu_ps(src); }

inline __m256 load8(const c10::BFloat16* src) {  // bfloat16 is float32's upper half
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

inline void store_row(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

inline void store_row(const float* src, c10::BFloat16* dst, int64_t n) {
  for (int64_t d = 0; d < n; ++d) dst[d] = c10::BFloat16(src[d]);  // round to nearest even, as torch does
}

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// The four sums of four registers, in one register.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <typename T>
inline void prefetch_rows(const T* rows, int64_t count, int64_t stride, int64_t bytes) {
  for (int64_t r = 0; r < count; ++r) {
    const char* line = reinterpret_cast<const char*>(rows + r * stride);
    for (int64_t offset = 0; offset < bytes; offset += 64) _mm_prefetch(line + offset, _MM_HINT_T0);
  }
}

// Prefetches block `b` of a task's keys and values (its first `n` rows), when it exists.
template <typename T>
[[gnu::always_inline]] inline void prefetch_block(const T* key_cache, const T* value_cache, const int64_t* table, int64_t b, int64_t num_blocks,
                           int64_t length, int64_t block_size, int64_t token_stride, int64_t block_stride, int64_t row_bytes) {
  if (b >= num_blocks) return;
  const int64_t n = std::min(block_size, length - b * block_size);
  prefetch_rows(key_cache + table[b] * block_stride, n, token_stride, row_bytes);
  prefetch_rows(value_cache + table[b] * block_stride, n, token_stride, row_bytes);
}

// (The helpers are always inlined, so the AVX-512 task compiles their loops for AVX-512 too.)
// A block's `n` scores become its softmax weights against the running maximum (updated), their
// total joins the running sum; returns the factor that rescales what was accumulated before.
[[gnu::always_inline]] inline float online_softmax_block(float* w, int64_t n, float& running_max, float& running_sum) {
  const float top = std::max(running_max, *std::max_element(w, w + n));
  const float rescale = std::exp(running_max - top);
  float total = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::exp(w[i] - top);
    total += w[i];
  }
  running_max = top;
  running_sum = running_sum * rescale + total;
  return rescale;
}

// The output rows: each head's accumulated values over its softmax total.
template <typename T>
[[gnu::always_inline]] inline void store_heads(float (*acc)[kMaxHeadDim], const float* running_sum, int64_t group, int64_t head_dim, T* out_rows) {
  for (int64_t g = 0; g < group; ++g) {
    const float inverse = 1.f / running_sum[g];
    for (int64_t d = 0; d < head_dim; ++d) acc[g][d] *= inverse;
    store_row(acc[g], out_rows + g * head_dim, head_dim);
  }
}

// One head's running sums (kChunks registers of 8) rescaled, then each of the block's `n` values
// added with its weight: token by token, the head's chunks as independent chains (a chunk's sums
// stay in a register instead of one serial chain of FMAs per chunk). The same operations in the
// same order per element as chunk by chunk, so the same bits.
constexpr int64_t kMaxAccumulators = 16;

template <int64_t kChunks>
[[gnu::always_inline]] inline void accumulate_avx2(float* acc, float rescale, const float* w, const float* values, int64_t n) {
  constexpr int64_t head_dim = kChunks * kLanes;
  __m256 a[kChunks];
  const __m256 shrink = _mm256_set1_ps(rescale);
  for (int64_t c = 0; c < kChunks; ++c) a[c] = _mm256_mul_ps(_mm256_load_ps(acc + c * kLanes), shrink);
  for (int64_t i = 0; i < n; ++i) {
    const __m256 weight = _mm256_set1_ps(w[i]);
    for (int64_t c = 0; c < kChunks; ++c) a[c] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(values + i * head_dim + c * kLanes), a[c]);
  }
  for (int64_t c = 0; c < kChunks; ++c) _mm256_store_ps(acc + c * kLanes, a[c]);
}

// One (sequence, KV head) task in AVX2 + FMA: each block's keys and values are widened to
// float32 into a scratch once, then read by every query head of the group. kChunks = head_dim /
// 8, a compile-time constant for the common sizes so the inner loops unroll; 0 reads it at run time.
template <typename T, int64_t kChunks>
void attend(const T* query_rows, const T* key_cache, const T* value_cache, const int64_t* table, int64_t length,
            T* out_rows, int64_t group, int64_t head_dim_runtime, int64_t block_size, int64_t token_stride,
            int64_t block_stride, float scale, std::vector<float>& scratch) {
  const int64_t chunks = kChunks > 0 ? kChunks : head_dim_runtime / kLanes;
  const int64_t head_dim = chunks * kLanes;
  alignas(64) float q[kMaxGroup][kMaxHeadDim];
  alignas(64) float acc[kMaxGroup][kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup];
  scratch.resize(static_cast<size_t>(block_size * (2 * head_dim + group)));
  float* keys = scratch.data();                    // [block_size][head_dim], float32
  float* values = keys + block_size * head_dim;    // [block_size][head_dim]
  float* weights = values + block_size * head_dim; // [group][block_size]
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t c = 0; c < chunks; ++c)
      _mm256_store_ps(q[g] + c * kLanes, _mm256_mul_ps(load8(query_rows + g * head_dim + c * kLanes), _mm256_set1_ps(scale)));
    std::fill(acc[g], acc[g] + head_dim, 0.f);
    running_max[g] = std::numeric_limits<float>::lowest();  // finite: fast math assumes no infinities
    running_sum[g] = 0.f;
  }
  const int64_t row_bytes = head_dim * static_cast<int64_t>(sizeof(T));
  const int64_t num_blocks = (length + block_size - 1) / block_size;
  for (int64_t b = 0; b < 2; ++b)
    prefetch_block(key_cache, value_cache, table, b, num_blocks, length, block_size, token_stride, block_stride, row_bytes);
  for (int64_t b = 0, t0 = 0; b < num_blocks; ++b, t0 += block_size) {
    const int64_t n = std::min(block_size, length - t0);
    const T* key = key_cache + table[b] * block_stride;
    const T* value = value_cache + table[b] * block_stride;
    prefetch_block(key_cache, value_cache, table, b + 2, num_blocks, length, block_size, token_stride, block_stride, row_bytes);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < chunks; ++c) {
        _mm256_storeu_ps(keys + t * head_dim + c * kLanes, load8(key + t * token_stride + c * kLanes));
        _mm256_storeu_ps(values + t * head_dim + c * kLanes, load8(value + t * token_stride + c * kLanes));
      }
    for (int64_t g = 0; g < group; ++g) {
      float* w = weights + g * block_size;
      int64_t t = 0;
      for (; t + 4 <= n; t += 4) {  // four keys' dot products, reduced together
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        const float* k = keys + t * head_dim;
        for (int64_t c = 0; c < chunks; ++c) {
          const __m256 qc = _mm256_load_ps(q[g] + c * kLanes);
          s0 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + c * kLanes), s0);
          s1 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + head_dim + c * kLanes), s1);
          s2 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + 2 * head_dim + c * kLanes), s2);
          s3 = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + 3 * head_dim + c * kLanes), s3);
        }
        _mm_storeu_ps(w + t, hsum4(s0, s1, s2, s3));
      }
      for (; t < n; ++t) {
        __m256 s = _mm256_setzero_ps();
        for (int64_t c = 0; c < chunks; ++c) s = _mm256_fmadd_ps(_mm256_load_ps(q[g] + c * kLanes), _mm256_loadu_ps(keys + t * head_dim + c * kLanes), s);
        w[t] = hsum(s);
      }
      const float rescale = online_softmax_block(w, n, running_max[g], running_sum[g]);
      if constexpr (kChunks > 0 && kChunks <= kMaxAccumulators) {
        accumulate_avx2<kChunks>(acc[g], rescale, w, values, n);
        continue;
      }
      const __m256 shrink = _mm256_set1_ps(rescale);
      for (int64_t c = 0; c < chunks; ++c) {
        __m256 a = _mm256_mul_ps(_mm256_load_ps(acc[g] + c * kLanes), shrink);
        for (int64_t i = 0; i < n; ++i) a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(values + i * head_dim + c * kLanes), a);
        _mm256_store_ps(acc[g] + c * kLanes, a);
      }
    }
  }
  store_heads(acc, running_sum, group, head_dim, out_rows);
}

// The bfloat16 task on CPUs with AVX512-BF16 (Sapphire Rapids and later, Zen 4): the scores
// come from vdpbf16ps over the raw bfloat16 query and keys (exact products, float32 sums), the
// values are widened once per block into a float32 scratch. The same walk as `attend`, a third
// of its instructions. kPairs = head_dim / 32 (one 512-bit register holds 32 bfloat16).
#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

AVX512_BF16 inline __m256 fold512(__m512 v) {  // 16 partial sums to 8
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

AVX512_BF16 inline __m512 widen16(const c10::BFloat16* src) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// kHeads heads' running sums (kSixteens registers of 16 each) rescaled, then the block's `n`
// values added with each head's weight, token by token: each value row is widened from the
// cache once, in registers, for every head of the tile, and every sum is its own chain. Per
// element the same operations in the same order as head by head and chunk by chunk.
template <int64_t kSixteens, int64_t kHeads>
AVX512_BF16 inline void accumulate_avx512(float (*acc)[kMaxHeadDim], const float* rescale, const float* weights, int64_t block_size,
                                          const c10::BFloat16* value, int64_t token_stride, int64_t n) {
  __m512 a[kHeads][kSixteens];
  for (int64_t h = 0; h < kHeads; ++h) {
    const __m512 shrink = _mm512_set1_ps(rescale[h]);
    for (int64_t c = 0; c < kSixteens; ++c) a[h][c] = _mm512_mul_ps(_mm512_load_ps(acc[h] + c * 16), shrink);
  }
  for (int64_t i = 0; i < n; ++i) {
    __m512 v[kSixteens];
    for (int64_t c = 0; c < kSixteens; ++c) v[c] = widen16(value + i * token_stride + c * 16);
    for (int64_t h = 0; h < kHeads; ++h) {
      const __m512 weight = _mm512_set1_ps(weights[h * block_size + i]);
      for (int64_t c = 0; c < kSixteens; ++c) a[h][c] = _mm512_fmadd_ps(weight, v[c], a[h][c]);
    }
  }
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t c = 0; c < kSixteens; ++c) _mm512_store_ps(acc[h] + c * 16, a[h][c]);
}

// Heads [g, g + count) through accumulate_avx512 in tiles of at most kMaxTileHeads.
template <int64_t kSixteens>
AVX512_BF16 inline void accumulate_heads(float (*acc)[kMaxHeadDim], const float* rescale, const float* weights, int64_t block_size,
                                         const c10::BFloat16* value, int64_t token_stride, int64_t n, int64_t group) {
  constexpr int64_t kMaxTileHeads = std::max<int64_t>(1, 24 / kSixteens);  // sums + one value row within 32 registers
  for (int64_t g = 0; g < group;) {
    const int64_t tile = std::min(kMaxTileHeads, group - g);
    const float* w = weights + g * block_size;
    switch (std::min<int64_t>(tile, 4)) {
      case 4: accumulate_avx512<kSixteens, std::min<int64_t>(4, kMaxTileHeads)>(acc + g, rescale + g, w, block_size, value, token_stride, n); break;
      case 3: accumulate_avx512<kSixteens, std::min<int64_t>(3, kMaxTileHeads)>(acc + g, rescale + g, w, block_size, value, token_stride, n); break;
      case 2: accumulate_avx512<kSixteens, std::min<int64_t>(2, kMaxTileHeads)>(acc + g, rescale + g, w, block_size, value, token_stride, n); break;
      default: accumulate_avx512<kSixteens, 1>(acc + g, rescale + g, w, block_size, value, token_stride, n); break;
    }
    g += std::min<int64_t>(std::min<int64_t>(tile, 4), kMaxTileHeads);
  }
}

template <int64_t kPairs>
AVX512_BF16 void attend_avx512_bf16(const c10::BFloat16* query_rows, const c10::BFloat16* key_cache,
                                     const c10::BFloat16* value_cache, const int64_t* table, int64_t length,
                                     c10::BFloat16* out_rows, int64_t group, int64_t head_dim_runtime, int64_t block_size,
                                     int64_t token_stride, int64_t block_stride, float scale, std::vector<float>& scratch) {
  const int64_t pairs = kPairs > 0 ? kPairs : head_dim_runtime / 32;
  const int64_t head_dim = pairs * 32, sixteens = pairs * 2;
  __m512bh q[kMaxGroup][kMaxHeadDim / 32];
  alignas(64) float acc[kMaxGroup][kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup];
  scratch.resize(static_cast<size_t>(block_size * (head_dim + group) + 16));
  float* values = scratch.data();                 // [block_size][head_dim], float32
  float* weights = values + block_size * head_dim; // [group][block_size]
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t p = 0; p < pairs; ++p)
      q[g][p] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(query_rows + g * head_dim + p * 32));
    std::fill(acc[g], acc[g] + head_dim, 0.f);
    running_max[g] = std::numeric_limits<float>::lowest();  // finite: fast math assumes no infinities
    running_sum[g] = 0.f;
  }
  const int64_t row_bytes = head_dim * 2;
  const int64_t num_blocks = (length + block_size - 1) / block_size;
  for (int64_t b = 0; b < 2; ++b)
    prefetch_block(key_cache, value_cache, table, b, num_blocks, length, block_size, token_stride, block_stride, row_bytes);
  for (int64_t b = 0, t0 = 0; b < num_blocks; ++b, t0 += block_size) {
    const int64_t n = std::min(block_size, length - t0);
    const c10::BFloat16* key = key_cache + table[b] * block_stride;
    const c10::BFloat16* value = value_cache + table[b] * block_stride;
    prefetch_block(key_cache, value_cache, table, b + 2, num_blocks, length, block_size, token_stride, block_stride, row_bytes);
    int64_t t4 = 0;
    if constexpr (kPairs > 0) {  // four keys loaded once for every head of the group
      for (; t4 + 4 <= n; t4 += 4) {
        __m512bh k[4][kPairs];
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t p = 0; p < kPairs; ++p)
            k[j][p] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(key + (t4 + j) * token_stride + p * 32));
        for (int64_t g = 0; g < group; ++g) {
          __m512 s[4];
          for (int64_t j = 0; j < 4; ++j) {
            s[j] = _mm512_setzero_ps();
            for (int64_t p = 0; p < kPairs; ++p) s[j] = _mm512_dpbf16_ps(s[j], q[g][p], k[j][p]);
          }
          _mm_storeu_ps(weights + g * block_size + t4, _mm_mul_ps(hsum4(fold512(s[0]), fold512(s[1]), fold512(s[2]), fold512(s[3])), _mm_set1_ps(scale)));
        }
      }
    }
    for (int64_t g = 0; g < group; ++g) {
      float* w = weights + g * block_size;
      int64_t t = t4;
      for (; t + 4 <= n; t += 4) {  // four keys' dot products, reduced together
        __m512 s[4];
        for (int64_t j = 0; j < 4; ++j) {
          const c10::BFloat16* k = key + (t + j) * token_stride;
          s[j] = _mm512_setzero_ps();
          for (int64_t p = 0; p < pairs; ++p)
            s[j] = _mm512_dpbf16_ps(s[j], q[g][p], (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(k + p * 32)));
        }
        _mm_storeu_ps(w + t, _mm_mul_ps(hsum4(fold512(s[0]), fold512(s[1]), fold512(s[2]), fold512(s[3])), _mm_set1_ps(scale)));
      }
      for (; t < n; ++t) {
        const c10::BFloat16* k = key + t * token_stride;
        __m512 s = _mm512_setzero_ps();
        for (int64_t p = 0; p < pairs; ++p)
          s = _mm512_dpbf16_ps(s, q[g][p], (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(k + p * 32)));
        w[t] = hsum(fold512(s)) * scale;
      }
    }
    float rescale[kMaxGroup];
    for (int64_t g = 0; g < group; ++g) rescale[g] = online_softmax_block(weights + g * block_size, n, running_max[g], running_sum[g]);
    if constexpr (kPairs > 0) {
      accumulate_heads<2 * kPairs>(acc, rescale, weights, block_size, value, token_stride, n, group);
    } else {
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < sixteens; ++c) _mm512_storeu_ps(values + t * head_dim + c * 16, widen16(value + t * token_stride + c * 16));
      for (int64_t g = 0; g < group; ++g) {
        const float* w = weights + g * block_size;
        const __m512 shrink = _mm512_set1_ps(rescale[g]);
        for (int64_t c = 0; c < sixteens; ++c) {
          __m512 a = _mm512_mul_ps(_mm512_load_ps(acc[g] + c * 16), shrink);
          for (int64_t i = 0; i < n; ++i) a = _mm512_fmadd_ps(_mm512_set1_ps(w[i]), _mm512_loadu_ps(values + i * head_dim + c * 16), a);
          _mm512_store_ps(acc[g] + c * 16, a);
        }
      }
    }
  }
  store_heads(acc, running_sum, group, head_dim, out_rows);
}

// Whether the AVX512-BF16 code may run: the CPU has it and LLM_ATTENTION_ISA does not say avx2
// (read at every call, so a test can switch it; a getenv is far below one call's cost).
bool use_avx512_bf16() {
  static const bool cpu_has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                              __builtin_cpu_supports("avx512bf16");
  const char* isa = std::getenv("LLM_ATTENTION_ISA");
  return cpu_has && !(isa != nullptr && std::strcmp(isa, "avx2") == 0);
}

// The sequences split into one share per thread, longest first onto the least loaded (a
// sequence's cost is its context length): contexts of a step differ up to 30x, and cut into
// equal halves of the sequence order, one thread's half held 1.14x the mean (1.34x at the 90th
// percentile, random steps of the benchmark's lengths). A thread takes a sequence's KV heads one
// after another (their rows share cache lines' neighbours). A sequence's result does not depend
// on its thread, so neither does the output.
std::vector<std::vector<int64_t>> balanced_shares(const int64_t* context_lens, int64_t num_seqs, int64_t threads) {
  threads = std::max<int64_t>(1, std::min(threads, num_seqs));
  std::vector<int64_t> order(num_seqs);
  for (int64_t seq = 0; seq < num_seqs; ++seq) order[seq] = seq;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return context_lens[a] > context_lens[b]; });
  std::vector<std::vector<int64_t>> shares(threads);
  std::vector<int64_t> load(threads, 0);
  for (const int64_t seq : order) {
    const int64_t least = std::min_element(load.begin(), load.end()) - load.begin();
    shares[least].push_back(seq);
    load[least] += context_lens[seq];
  }
  for (auto& share : shares) std::sort(share.begin(), share.end());  // in cache order again
  return shares;
}

template <typename T>
void decode_attention(const T* query, int64_t query_stride, const T* key_cache, const T* value_cache,
                      const int64_t* block_tables, const int64_t* context_lens, T* out, int64_t num_seqs, int64_t heads,
                      int64_t kv_heads, int64_t head_dim, int64_t block_size, int64_t table_width, double scale) {
  const int64_t group = heads / kv_heads;
  const int64_t token_stride = kv_heads * head_dim;  // one position of one block
  const int64_t block_stride = block_size * token_stride;
  auto run = head_dim == 64 ? &attend<T, 8> : head_dim == 128 ? &attend<T, 16> : &attend<T, 0>;
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    if (head_dim % 32 == 0 && use_avx512_bf16())
      run = head_dim == 64 ? &attend_avx512_bf16<2> : head_dim == 128 ? &attend_avx512_bf16<4> : &attend_avx512_bf16<0>;
  }
  auto run_task = [&](int64_t task, std::vector<float>& scratch) {
    const int64_t seq = task / kv_heads, kv_head = task % kv_heads;
    const int64_t head = kv_head * group;  // the first of the query heads that share this KV head
    run(query + seq * query_stride + head * head_dim, key_cache + kv_head * head_dim, value_cache + kv_head * head_dim,
        block_tables + seq * table_width, context_lens[seq], out + (seq * heads + head) * head_dim, group, head_dim, block_size,
        token_stride, block_stride, static_cast<float>(scale), scratch);
  };
  const std::vector<std::vector<int64_t>> shares = balanced_shares(context_lens, num_seqs, at::get_num_threads());
  at::parallel_for(0, static_cast<int64_t>(shares.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t share = begin; share < end; ++share)
      for (const int64_t seq : shares[share])
        for (int64_t kv_head = 0; kv_head < kv_heads; ++kv_head) run_task(seq * kv_heads + kv_head, scratch);
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
  TORCH_CHECK(key_cache.size(3) == head_dim, "the caches' head_dim ", key_cache.size(3), " differs from the query's ", head_dim);
  TORCH_CHECK(head_dim % kLanes == 0 && head_dim <= kMaxHeadDim, "head_dim ", head_dim, " must be a multiple of ", kLanes,
              " and at most ", kMaxHeadDim);
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
