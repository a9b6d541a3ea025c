// bfloat16 products against a weight packed once at load, on CPUs with AMX (Sapphire Rapids and
// later). A decode step's products have a few dozen rows at most and are bound by reading the
// weight; oneDNN's reached 10-17 GB/s of this machine's ~25 GB/s (and 50 from its L3) there,
// this one 17-35 GB/s: 1.2-2.1x faster from 1 to 32 rows, and as fast at 256 rows.
//
// Packing: the weight [N, K] becomes [N / 16][K / 2][16][2], the operand layout of AMX's
// tdpbf16ps: for 16 output columns and 32 input columns, one 1 KiB tile read in order. A pass
// takes up to 16 rows against 4 column blocks (tiles 0-3 hold the float32 sums, 4 the rows, 5-7
// the weight) over all of K, then rounds the sums to bfloat16 as torch does (to nearest even).
//
// Every row is summed alone, in the same order whatever the row count (a tile's rows never mix),
// so a row's bits do not depend on the other rows of its step: batch invariance at any size.
//
// Registered as torch.ops.llm_kernels.amx_available, amx_pack and amx_linear.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <torch/library.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace {

#define AMX_BF16 __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")))

constexpr int64_t kColumns = 16;     // output columns per packed block: one tile row of float32 sums
constexpr int64_t kPairsPerStep = 16;  // input column pairs per tile: 32 bfloat16, 64 bytes a row
constexpr int kBlocksPerPass = 4;    // column blocks per pass (tiles 0-3)
constexpr int64_t kMaxTileRows = 16;

// Whether the CPU has AMX's bfloat16 products, and Linux lets this process use its tiles (a
// process must ask for the tile state once: ARCH_REQ_XCOMP_PERM for XTILEDATA).
bool amx_available() {
  static const bool available = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16") || !__builtin_cpu_supports("avx512bf16"))
      return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return available;
}

// weight [N, K] bfloat16 -> packed [N / 16, K / 2, 16, 2] (N a multiple of 16, K of 32).
at::Tensor amx_pack(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kBFloat16, "amx_pack wants a 2-D bfloat16 weight");
  const int64_t n = weight.size(0), k = weight.size(1);
  TORCH_CHECK(n % kColumns == 0 && k % (2 * kPairsPerStep) == 0,
              "amx_pack needs out_features a multiple of 16 and in_features of 32, got ", n, " x ", k);
  return weight.contiguous().view({n / kColumns, kColumns, k / 2, 2}).permute({0, 2, 1, 3}).contiguous();
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-4 hold `rows` rows (sums and activations), 5-7 a weight tile's 16 pairs; 64 bytes a row.
AMX_BF16 void configure_tiles(int64_t rows) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<uint8_t>(t < 5 ? rows : kPairsPerStep);
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
}

// Rows [0, configured) of x against column blocks [block, block + kCount), all of K; the float32
// sums go to `sums` [rows][kBlocksPerPass * 16].
template <int kCount>
AMX_BF16 void pass(const c10::BFloat16* x, int64_t x_stride, const c10::BFloat16* packed, int64_t block, int64_t k_pairs, float* sums) {
  const int64_t block_elems = k_pairs * 2 * kColumns, steps = k_pairs / kPairsPerStep, tile_elems = kPairsPerStep * 2 * kColumns;
  _tile_zero(0);
  if constexpr (kCount > 1) _tile_zero(1);
  if constexpr (kCount > 2) _tile_zero(2);
  if constexpr (kCount > 3) _tile_zero(3);
  const c10::BFloat16* w = packed + block * block_elems;
  for (int64_t s = 0; s < steps; ++s, w += tile_elems) {
    _tile_loadd(4, x + s * 2 * kPairsPerStep, x_stride * 2);
    _tile_loadd(5, w, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (kCount > 1) { _tile_loadd(6, w + block_elems, 64); _tile_dpbf16ps(1, 4, 6); }
    if constexpr (kCount > 2) { _tile_loadd(7, w + 2 * block_elems, 64); _tile_dpbf16ps(2, 4, 7); }
    if constexpr (kCount > 3) { _tile_loadd(5, w + 3 * block_elems, 64); _tile_dpbf16ps(3, 4, 5); }
  }
  constexpr int64_t stride = kBlocksPerPass * kColumns * sizeof(float);
  _tile_stored(0, sums, stride);
  if constexpr (kCount > 1) _tile_stored(1, sums + kColumns, stride);
  if constexpr (kCount > 2) _tile_stored(2, sums + 2 * kColumns, stride);
  if constexpr (kCount > 3) _tile_stored(3, sums + 3 * kColumns, stride);
}

// Two row groups (tiles 4 and 5: 16 rows and `second` rows) against two column blocks (tiles
// 6 and 7), the sums in tiles 0-3: each weight tile serves 32 rows, each row tile two blocks.
template <int kCount>
AMX_BF16 void pass_2x2(const c10::BFloat16* x, int64_t x_stride, const c10::BFloat16* packed, int64_t block, int64_t k_pairs, float* sums) {
  const int64_t block_elems = k_pairs * 2 * kColumns, steps = k_pairs / kPairsPerStep, tile_elems = kPairsPerStep * 2 * kColumns;
  _tile_zero(0);
  _tile_zero(2);
  if constexpr (kCount > 1) { _tile_zero(1); _tile_zero(3); }
  const c10::BFloat16* w = packed + block * block_elems;
  const c10::BFloat16* x2 = x + kMaxTileRows * x_stride;
  for (int64_t s = 0; s < steps; ++s, w += tile_elems) {
    _tile_loadd(4, x + s * 2 * kPairsPerStep, x_stride * 2);
    _tile_loadd(6, w, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(5, x2 + s * 2 * kPairsPerStep, x_stride * 2);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (kCount > 1) {
      _tile_loadd(7, w + block_elems, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr int64_t stride = kBlocksPerPass * kColumns * sizeof(float);
  float* sums2 = sums + kMaxTileRows * kBlocksPerPass * kColumns;
  _tile_stored(0, sums, stride);
  _tile_stored(2, sums2, stride);
  if constexpr (kCount > 1) { _tile_stored(1, sums + kColumns, stride); _tile_stored(3, sums2 + kColumns, stride); }
}

// Tiles for pass_2x2: 0, 1 and 4 hold `first` rows, 2, 3 and 5 `second`, 6 and 7 a weight tile.
AMX_BF16 void configure_tiles_2x2(int64_t first, int64_t second) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = static_cast<uint8_t>(t == 0 || t == 1 || t == 4 ? first : t < 6 ? second : kPairsPerStep);
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
}

// Leaves the thread's tiles configured as we found them: torch's and oneDNN's AMX kernels may
// skip configuring when they believe their palette is still loaded. Released when none was.
AMX_BF16 void restore_tiles(const TileConfig& previous) {
  if (previous.palette != 0)
    _tile_loadconfig(&previous);
  else
    _tile_release();
}

// A pass's float32 sums [m][kBlocksPerPass * 16] (`count` blocks of them) rounded to bfloat16
// (to nearest even, as torch rounds) into out's rows.
AMX_BF16 void store_rows(const float* sums, int64_t m, int64_t count, c10::BFloat16* out, int64_t out_stride) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b = 0; b < count; ++b) {
      const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_load_ps(sums + i * kBlocksPerPass * kColumns + b * kColumns));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i * out_stride + b * kColumns), (__m256i)rounded);
    }
}

// All `rows` of x against column blocks [begin, end): one thread's share.
AMX_BF16 void product(const c10::BFloat16* x, int64_t x_stride, int64_t rows, const c10::BFloat16* packed, int64_t begin, int64_t end,
                      int64_t k_pairs, c10::BFloat16* out, int64_t out_stride) {
  alignas(64) float sums[2 * kMaxTileRows * kBlocksPerPass * kColumns];
  TileConfig previous;
  _tile_storeconfig(&previous);
  int64_t configured = -1;  // the configuration's key: rows of one group, or 100 + rows of a pair's second
  auto store = [&](int64_t r, int64_t m, int64_t block, int64_t count, const float* from) {
    store_rows(from, m, count, out + r * out_stride + block * kColumns, out_stride);
  };
  if (rows > kMaxTileRows) {  // pairs of row groups against pairs of column blocks, then what is left
    for (int64_t block = begin; block < end; block += 2) {
      const int64_t count = std::min<int64_t>(2, end - block);
      int64_t r = 0;
      for (; r + kMaxTileRows < rows; r += 2 * kMaxTileRows) {
        const int64_t second = std::min(kMaxTileRows, rows - r - kMaxTileRows);
        if (100 + second != configured) configure_tiles_2x2(kMaxTileRows, second), configured = 100 + second;
        if (count == 2) pass_2x2<2>(x + r * x_stride, x_stride, packed, block, k_pairs, sums);
        else pass_2x2<1>(x + r * x_stride, x_stride, packed, block, k_pairs, sums);
        store(r, kMaxTileRows, block, count, sums);
        store(r + kMaxTileRows, second, block, count, sums + kMaxTileRows * kBlocksPerPass * kColumns);
      }
      if (r < rows) {
        const int64_t m = rows - r;
        if (m != configured) configure_tiles(configured = m);
        if (count == 2) pass<2>(x + r * x_stride, x_stride, packed, block, k_pairs, sums);
        else pass<1>(x + r * x_stride, x_stride, packed, block, k_pairs, sums);
        store(r, m, block, count, sums);
      }
    }
    restore_tiles(previous);
    return;
  }
  configure_tiles(rows);
  for (int64_t block = begin; block < end; block += kBlocksPerPass) {
    const int64_t count = std::min<int64_t>(kBlocksPerPass, end - block);
    switch (count) {
      case 4: pass<4>(x, x_stride, packed, block, k_pairs, sums); break;
      case 3: pass<3>(x, x_stride, packed, block, k_pairs, sums); break;
      case 2: pass<2>(x, x_stride, packed, block, k_pairs, sums); break;
      default: pass<1>(x, x_stride, packed, block, k_pairs, sums); break;
    }
    store(0, rows, block, count, sums);
  }
  restore_tiles(previous);
}

at::Tensor amx_linear(const at::Tensor& x, const at::Tensor& packed) {
  TORCH_CHECK(amx_available(), "amx_linear needs a CPU with AMX (amx-tile, amx-bf16) that Linux lets this process use");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.stride(1) == 1 && x.device().is_cpu(),
              "x must be [rows, K] bfloat16 on the CPU with contiguous rows");
  TORCH_CHECK(packed.dim() == 4 && packed.scalar_type() == at::kBFloat16 && packed.is_contiguous() && packed.size(2) == kColumns &&
                  packed.size(3) == 2 && packed.size(1) % kPairsPerStep == 0,
              "packed must come from amx_pack");
  const int64_t rows = x.size(0), k_pairs = packed.size(1), blocks = packed.size(0);
  TORCH_CHECK(x.size(1) == 2 * k_pairs, "x has ", x.size(1), " columns, the weight ", 2 * k_pairs);
  at::Tensor out = at::empty({rows, blocks * kColumns}, x.options());
  if (rows == 0) return out;
  const c10::BFloat16* xp = x.data_ptr<c10::BFloat16>();
  const c10::BFloat16* wp = packed.data_ptr<c10::BFloat16>();
  c10::BFloat16* op = out.data_ptr<c10::BFloat16>();
  const int64_t x_stride = x.stride(0), out_stride = blocks * kColumns;
  at::parallel_for(0, blocks, kBlocksPerPass, [&](int64_t begin, int64_t end) {
    product(xp, x_stride, rows, wp, begin, end, k_pairs, op, out_stride);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(llm_kernels, m) {
  m.def("amx_available() -> bool");
  m.def("amx_pack(Tensor weight) -> Tensor");
  m.def("amx_linear(Tensor x, Tensor packed) -> Tensor");
}

TORCH_LIBRARY_IMPL(llm_kernels, CPU, m) {
  m.impl("amx_pack", &amx_pack);
  m.impl("amx_linear", &amx_linear);
}

TORCH_LIBRARY_IMPL(llm_kernels, CompositeExplicitAutograd, m) { m.impl("amx_available", &amx_available); }
