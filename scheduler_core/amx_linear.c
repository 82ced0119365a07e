/* fp32 projections on AMX bf16 tiles, to fp32 accuracy (scheduler_core/amx_linear.py).
 *
 * out[m, n] = sum_k x[m, k] * w[n, k], computed from bf16 pieces. Each fp32 value v is split into
 * v = v1 + v2 + v3, each piece the nearest bf16 to what the previous ones leave (|v2| <= 2^-9 |v|,
 * |v3| <= 2^-18 |v|), which holds v exactly for every normal fp32 value. The product x w is then
 * the sum of the nine piece products; the kernel keeps those at least 2^-18 of the whole
 * (x1w1, x2w1, x1w2, x2w2, x3w1, x1w3) and drops the three at 2^-27 or below, under fp32's own
 * rounding of 2^-24. A weight whose third pieces are all zero (it fits in 16 significand bits)
 * needs five products (parallax_amx_linear). A block-scaled weight, d * q + m per 32 values with
 * integer q (a quantised checkpoint, dequantised), needs three: x's pieces times q, which one bf16
 * holds exactly, with d and m applied per block in fp32 (parallax_amx_linear_blocks, below). Each
 * bf16 product is exact in fp32 and the tile instruction accumulates in fp32, so the result
 * differs from an fp32 matmul's by rounding in another summation order, as oneDNN's differs from
 * MKL's.
 *
 * Written by hand because no library installable here multiplies bf16 operands into an fp32
 * result on the CPU through torch (oneDNN's bf16 inner product returns bf16, and its fp32 "bf16
 * math" mode rounds each operand to one bf16), and the AMX unit does a bf16 product many times
 * faster than AVX-512 does an fp32 one: five of them still cost less than one fp32 FMA.
 * Single-threaded: the engine uses it on one torch thread (see amx_linear.py).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "block_scale.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

#define TILE_ROWS 16  /* rows of x (and of out) per tile */
#define TILE_COLS 16  /* columns of out per tile: 16 fp32 in a 64-byte tile row */
#define TILE_K 32     /* k per tile: 32 bf16 in a 64-byte tile row */
/* One packed weight tile: 16 pairs of k, each 16 columns of n times 2 bf16 (AMX's VNNI layout). */
#define TILE_ELEMENTS (TILE_K * TILE_COLS)

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Asks Linux for the AMX tile state for this process (once; every thread may then use it).
 * Returns 0, or -1 where the kernel or the CPU refuses. */
int parallax_amx_init(void) {
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 0 : -1;
}

static inline float bf16_bits_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The nearest bf16 to v (ties to even). Infinities and NaNs keep their top half, so the pieces
 * after them are zero (see split); so does a finite value so large that rounding up would make
 * it infinite (its two lower pieces then hold the rest, as for any other value). */
static inline uint16_t bf16_nearest(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)(u >> 16);
    const uint16_t rounded = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (rounded & 0x7f80u) == 0x7f80u ? (uint16_t)(u >> 16) : rounded;
}

static inline void split(float v, uint16_t *p1, uint16_t *p2, uint16_t *p3) {
    const uint16_t h1 = bf16_nearest(v);
    const float r1 = v - bf16_bits_to_float(h1);
    const uint16_t h2 = r1 == r1 ? bf16_nearest(r1) : 0;  /* an infinity leaves inf - inf: no more pieces */
    const float r2 = r1 - bf16_bits_to_float(h2);
    *p1 = h1;
    *p2 = h2;
    *p3 = r2 == r2 ? bf16_nearest(r2) : 0;
}

/* bf16_nearest on 16 lanes (each value's bits in a 32-bit lane, the result in the low 16 bits). */
static inline __m512i bf16_nearest16(__m512i u) {
    const __m512i top = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i exponent = _mm512_set1_epi32(0x7f800000), rounded_exponent = _mm512_set1_epi32(0x7f80);
    const __mmask16 keep_top =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, exponent), exponent) |
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(rounded, rounded_exponent), rounded_exponent);
    return _mm512_mask_blend_epi32(keep_top, rounded, top);
}

/* split on 16 values at once: the same integer and fp32 steps, lane by lane, so the same bits. One
 * value at a time (branches) and the block sums one chain at a time took 37 us in C for a 13-row
 * call on 64 columns of a 576-wide weight, 11 us after (bench/amx_call_overhead.py, docs/engine.md). */
static inline void split16(const float *v, uint16_t *p1, uint16_t *p2, uint16_t *p3) {
    const __m512 x = _mm512_loadu_ps(v);
    const __m512i h1 = bf16_nearest16(_mm512_castps_si512(x));
    const __m512 r1 = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(h1, 16)));
    const __m512i h2 = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(r1, r1, _CMP_EQ_OQ), bf16_nearest16(_mm512_castps_si512(r1)));
    const __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(_mm512_slli_epi32(h2, 16)));
    const __m512i h3 = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(r2, r2, _CMP_EQ_OQ), bf16_nearest16(_mm512_castps_si512(r2)));
    _mm256_storeu_si256((__m256i *)p1, _mm512_cvtepi32_epi16(h1));
    _mm256_storeu_si256((__m256i *)p2, _mm512_cvtepi32_epi16(h2));
    _mm256_storeu_si256((__m256i *)p3, _mm512_cvtepi32_epi16(h3));
}

/* x [m, k] into its three pieces x1, x2, x3 (each m_padded rows of k bf16), the rows after m zero. */
static void split_rows(const float *x, int64_t m, int64_t k, int64_t m_padded, uint16_t *x1, uint16_t *x2,
                       uint16_t *x3) {
    int64_t i = 0;
    for (; i + 16 <= m * k; i += 16) split16(x + i, x1 + i, x2 + i, x3 + i);
    for (; i < m * k; i++) split(x[i], &x1[i], &x2[i], &x3[i]);
    const int64_t padding = (m_padded - m) * k * (int64_t)sizeof(uint16_t);
    memset(x1 + m * k, 0, padding);
    memset(x2 + m * k, 0, padding);
    memset(x3 + m * k, 0, padding);
}

/* Where value (k, column c) of a 32 x 16 block lies in its tile: AMX's layout for the second
 * operand, pairs of k side by side in each column. */
static inline int64_t tile_index(int kk, int c) {
    return (kk / 2) * (TILE_COLS * 2) + c * 2 + (kk % 2);
}

/* 2 where every weight is its first two bf16 pieces exactly, else 3. */
int parallax_amx_weight_pieces(const float *w, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        uint16_t a, b, c;
        split(w[i], &a, &b, &c);
        if (c != 0 && c != 0x8000u) return 3;
    }
    return 2;
}

/* w [n, k] (n % 16 == 0, k % 32 == 0) into out: for each block of 16 columns, for each block of
 * 32 k, `pieces` tiles (the first pieces, then the second, ...) of TILE_ELEMENTS bf16 in
 * tile_index order. A weight read in this order streams from memory front to back. */
void parallax_amx_pack_weight(const float *w, int64_t n, int64_t k, int pieces, uint16_t *out) {
    const int64_t k_blocks = k / TILE_K;
    for (int64_t nb = 0; nb < n / TILE_COLS; nb++) {
        for (int64_t kb = 0; kb < k_blocks; kb++) {
            uint16_t *tiles = out + ((nb * k_blocks + kb) * pieces) * TILE_ELEMENTS;
            for (int c = 0; c < TILE_COLS; c++) {
                const float *row = w + (nb * TILE_COLS + c) * k + kb * TILE_K;
                for (int kk = 0; kk < TILE_K; kk++) {
                    uint16_t p[3];
                    split(row[kk], &p[0], &p[1], &p[2]);
                    for (int piece = 0; piece < pieces; piece++) tiles[piece * TILE_ELEMENTS + tile_index(kk, c)] = p[piece];
                }
            }
        }
    }
}

/* Every tile 16 rows of 64 bytes: tiles 0-1 out, 2-4 x's pieces, 5-7 w's. A constant in memory,
 * not a local: GCC 12 does not count ldtilecfg as reading its operand and dropped the stores that
 * filled a local one (the load then faulted). */
static const tile_config CONFIG = {
    .palette_id = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_ROWS, TILE_K / 2, TILE_K / 2, TILE_K / 2},
};

static void configure(void) {
    _tile_loadconfig(&CONFIG);
}

/* The products of one 16-column block into tile `C`, from x's pieces in tiles 2-4 and this block's
 * k-th weight tiles. Macros, not functions: tile numbers must be compile-time constants. */
#define BLOCK_PRODUCTS(C, TILES, PIECES)                          \
    do {                                                          \
        _tile_loadd(5, (TILES), 64);                              \
        _tile_loadd(6, (TILES) + TILE_ELEMENTS, 64);              \
        _tile_dpbf16ps(C, 2, 5);                                  \
        _tile_dpbf16ps(C, 3, 5);                                  \
        _tile_dpbf16ps(C, 4, 5);                                  \
        _tile_dpbf16ps(C, 2, 6);                                  \
        _tile_dpbf16ps(C, 3, 6);                                  \
        if ((PIECES) == 3) {                                      \
            _tile_loadd(7, (TILES) + 2 * TILE_ELEMENTS, 64);      \
            _tile_dpbf16ps(C, 2, 7);                              \
        }                                                         \
    } while (0)

/* Tile `C` (16 rows, 16 columns) into out's rows row0 .. row0 + rows, through a buffer where the
 * block has fewer than 16 rows. */
static inline void store_block(int C, float *out, int64_t n, int rows, float *partial) {
    if (rows == TILE_ROWS) {
        if (C == 0) _tile_stored(0, out, n * 4); else _tile_stored(1, out, n * 4);
        return;
    }
    if (C == 0) _tile_stored(0, partial, TILE_COLS * 4); else _tile_stored(1, partial, TILE_COLS * 4);
    for (int r = 0; r < rows; r++) memcpy(out + r * n, partial + r * TILE_COLS, TILE_COLS * 4);
}

/* x's three pieces as the products below take them, `count` values as one row (for tests). */
void parallax_amx_split(const float *x, int64_t count, uint16_t *x1, uint16_t *x2, uint16_t *x3) {
    split_rows(x, 1, count, 1, x1, x2, x3);
}

/* out [m, n] = x [m, k] . w^T, w packed by parallax_amx_pack_weight with `pieces` pieces; scratch
 * holds 3 * ceil(m / 16) * 16 * k bf16 (x's pieces, zero rows after the last). Column blocks go in
 * pairs on the outside and row blocks inside, so a pair's weight tiles come from memory once and
 * from the cache for every further block of rows. Call parallax_amx_init first. */
void parallax_amx_linear(const float *x, int64_t m, int64_t k, const uint16_t *packed, int64_t n, int pieces,
                         float *out, uint16_t *scratch) {
    const int64_t k_blocks = k / TILE_K, n_blocks = n / TILE_COLS;
    const int64_t m_padded = (m + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    const int64_t block_stride = k_blocks * pieces * TILE_ELEMENTS;  /* bf16 per column block */
    uint16_t *x1 = scratch, *x2 = scratch + m_padded * k, *x3 = scratch + 2 * m_padded * k;
    float partial[TILE_ROWS * TILE_COLS] __attribute__((aligned(64)));
    split_rows(x, m, k, m_padded, x1, x2, x3);
    configure();
    for (int64_t nb = 0; nb < n_blocks; nb += 2) {
        const int pair = nb + 1 < n_blocks;
        const uint16_t *first = packed + nb * block_stride, *second = first + block_stride;
        for (int64_t m0 = 0; m0 < m; m0 += TILE_ROWS) {
            const int rows = m - m0 < TILE_ROWS ? (int)(m - m0) : TILE_ROWS;
            const int64_t row_offset = m0 * k;
            _tile_zero(0);
            _tile_zero(1);
            for (int64_t kb = 0; kb < k_blocks; kb++) {
                _tile_loadd(2, x1 + row_offset + kb * TILE_K, k * 2);
                _tile_loadd(3, x2 + row_offset + kb * TILE_K, k * 2);
                _tile_loadd(4, x3 + row_offset + kb * TILE_K, k * 2);
                BLOCK_PRODUCTS(0, first + kb * pieces * TILE_ELEMENTS, pieces);
                if (pair) BLOCK_PRODUCTS(1, second + kb * pieces * TILE_ELEMENTS, pieces);
            }
            store_block(0, out + m0 * n + nb * TILE_COLS, n, rows, partial);
            if (pair) store_block(1, out + m0 * n + (nb + 1) * TILE_COLS, n, rows, partial);
        }
    }
    _tile_release();
}

/* ---- Block-scaled weights: w = d * q + m per 32 values of a row, q a small integer. ----
 *
 * Quantised checkpoints (GGUF's Q4_1, Q8_0, ...) hold a row's weights in blocks of 32 as integers
 * q with a scale d and an offset m; dequantised to fp32 they are d * q + m exactly. For such a
 * weight sum_k w_k x_k = sum_blocks (d * sum_k q_k x_k + m * sum_k x_k): the tiles multiply x's
 * three bf16 pieces by q (a bf16 holds every integer up to 256 exactly), one k-tile being one
 * block, and the scale and offset are applied in fp32 after each. The weight is kept as one int8
 * per value, or 4 bits where every q lies in 0..15 (parallax_amx_narrow), plus a scale and an
 * offset per block (1.25 or 0.75 bytes per value against fp32's 4), widened to bf16 tiles in the
 * cache as it is used, and each block takes three tile products, not five. */

/* Column blocks per chunk: the kernel takes a weight a chunk of columns at a time, every k block
 * of it, so a chunk's widened tiles (32 KB) stay in the cache, even for an LM head of 49,152. */
#define CHUNK_BLOCKS 32

/* w [n, k] (n % 16 == 0, k % 32 == 0) into q (n * k int8) and scales (n * k / 16 fp32), both in
 * the order the kernel reads them: for each chunk of CHUNK_BLOCKS 16-column blocks, for each k
 * block, for each column block of the chunk, one int8 tile in tile_index order, and its 16 d then
 * 16 m. Returns 1, or 0 (nothing usable written) where
 * some block has no exact d, m, q. */
int parallax_amx_pack_blocks(const float *w, int64_t n, int64_t k, int8_t *q_out, float *scales) {
    const int64_t k_blocks = k / TILE_K, n_blocks = n / TILE_COLS;
    int64_t at = 0;  /* tiles written so far */
    for (int64_t chunk = 0; chunk < n_blocks; chunk += CHUNK_BLOCKS) {
        const int64_t chunk_end = chunk + CHUNK_BLOCKS < n_blocks ? chunk + CHUNK_BLOCKS : n_blocks;
        for (int64_t kb = 0; kb < k_blocks; kb++) {
            for (int64_t nb = chunk; nb < chunk_end; nb++, at++) {
                int8_t *tile = q_out + at * TILE_ELEMENTS;
                float *block_scales = scales + at * 2 * TILE_COLS;
                for (int c = 0; c < TILE_COLS; c++) {
                    int8_t q[TILE_K];
                    if (!block_scale(w + (nb * TILE_COLS + c) * k + kb * TILE_K, &block_scales[c],
                                     &block_scales[TILE_COLS + c], q))
                        return 0;
                    for (int kk = 0; kk < TILE_K; kk++) tile[tile_index(kk, c)] = q[kk];
                }
            }
        }
    }
    return 1;
}

/* Weights whose q all lie in 0..15 (Q4_1's) are kept at 4 bits: each 64 values of the int8 layout
 * as 32 bytes, byte j holding value j in its low half and value 32 + j in its high half. Returns 1
 * with `out` (count / 2 bytes) written, or 0 where some q is outside 0..15. */
int parallax_amx_narrow(const int8_t *q, int64_t count, uint8_t *out) {
    for (int64_t i = 0; i < count; i++)
        if (q[i] < 0 || q[i] > 15) return 0;
    for (int64_t group = 0; group < count; group += 64)
        for (int j = 0; j < 32; j++)
            out[group / 2 + j] = (uint8_t)(q[group + j] | (q[group + 32 + j] << 4));
    return 1;
}

/* `count` values (one k block of a chunk's tiles) widened to bf16 into `tiles`, exactly; the next
 * ones (the next k block's, or the next chunk's) are asked for from memory meanwhile. 8 bits:
 * int8 converted through fp32; 4 bits: each half byte looked up in a table of the bf16 values
 * 0..15, twice the values per instruction. */
static void widen(const uint8_t *q, int64_t count, int bits, uint16_t *tiles) {
    if (bits == 4) {
        const int64_t bytes = count / 2;
        /* bf16 of 0..15 (1.0 = 0x3f80); the table's upper 16 entries are never indexed. */
        static const uint16_t bf16_of[32] __attribute__((aligned(64))) = {
            0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
            0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};
        const __m512i table = _mm512_load_si512((const void *)bf16_of);
        const __m512i low_nibble = _mm512_set1_epi16(0x0f);
        for (int64_t i = 0; i < bytes; i += 32) {
            _mm_prefetch((const char *)(q + bytes + i), _MM_HINT_T0);
            const __m512i words = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(q + i)));
            const __m512i low = _mm512_and_si512(words, low_nibble), high = _mm512_srli_epi16(words, 4);
            _mm512_store_si512((__m512i *)(tiles + 2 * i), _mm512_permutexvar_epi16(low, table));
            _mm512_store_si512((__m512i *)(tiles + 2 * i + 32), _mm512_permutexvar_epi16(high, table));
        }
        return;
    }
    const int8_t *signed_q = (const int8_t *)q;
    for (int64_t i = 0; i < count; i += 32) {
        _mm_prefetch((const char *)(signed_q + count + i), _MM_HINT_T0);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(signed_q + i))));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(signed_q + i + 16))));
        _mm512_store_si512((__m512i *)(tiles + i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* One column block: x's pieces (tiles 2-4) times q (tile B) into tile C, stored to partial[C].
 * Macros, not functions: tile numbers must be literal constants. */
#define BLOCK_PRODUCT(C, B, TILE)                   \
    do {                                            \
        _tile_zero(C);                              \
        _tile_loadd(B, (TILE), 64);                 \
        _tile_dpbf16ps(C, 2, B);                    \
        _tile_dpbf16ps(C, 3, B);                    \
        _tile_dpbf16ps(C, 4, B);                    \
        _tile_stored(C, partial[C], TILE_COLS * 4); \
    } while (0)

/* out[r] = (first ? 0 : out[r]) + d * partial[r], then + m * block_sum[r], for `rows` rows of
 * one column block (out's rows n apart). */
static inline void scale_block(const float *partial, const float *scales, const float *sums, int rows, int first,
                               float *out, int64_t n) {
    const __m512 d = _mm512_loadu_ps(scales), offset = _mm512_loadu_ps(scales + TILE_COLS);
    for (int r = 0; r < rows; r++) {
        const __m512 before = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + r * n);
        const __m512 scaled = _mm512_fmadd_ps(d, _mm512_load_ps(partial + r * TILE_COLS), before);
        _mm512_storeu_ps(out + r * n, _mm512_fmadd_ps(offset, _mm512_set1_ps(sums[r]), scaled));
    }
}

/* sums[kb * m_padded + r]: block kb of row r, each block's 32 values added in order from 0, the
 * rows after m zero. Sixteen blocks of a row at a time, one lane each (a gather per value), so
 * each lane adds in the same order as one sum at a time would, without waiting on the one before
 * (one sum at a time is a chain of 32 dependent adds). */
static void block_sums(const float *x, int64_t m, int64_t k, int64_t m_padded, float *sums) {
    const int64_t k_blocks = k / TILE_K;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i lanes = _mm512_mullo_epi32(lane, _mm512_set1_epi32(TILE_K));  /* a block apart in x */
    const __m512i sum_lanes = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)m_padded));  /* and in sums */
    for (int64_t r = 0; r < m; r++)
        for (int64_t kb = 0; kb < k_blocks; kb += 16) {
            const __mmask16 live = k_blocks - kb >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k_blocks - kb)) - 1);
            const float *base = x + r * k + kb * TILE_K;
            __m512 total = _mm512_setzero_ps();
            for (int kk = 0; kk < TILE_K; kk++)
                total = _mm512_add_ps(total, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, lanes, base + kk, 4));
            _mm512_mask_i32scatter_ps(sums + kb * m_padded + r, live, sum_lanes, total, 4);
        }
    for (int64_t r = m; r < m_padded; r++)
        for (int64_t kb = 0; kb < k_blocks; kb++) sums[kb * m_padded + r] = 0.0f;
}

/* block_sums, for tests. */
void parallax_amx_block_sums(const float *x, int64_t m, int64_t k, int64_t m_padded, float *sums) {
    block_sums(x, m, k, m_padded, sums);
}

/* out [m, n] = x [m, k] . w^T for a weight packed by parallax_amx_pack_blocks (bits = 8), or that
 * and narrowed by parallax_amx_narrow (bits = 4); scratch holds
 * 3 * ceil(m / 16) * 16 * k bf16, sums ceil(m / 16) * 16 * k / 32 fp32 (x's pieces and its block
 * sums) and tiles CHUNK_BLOCKS * 512 bf16, 64-byte aligned (one k block of a chunk widened).
 * Call parallax_amx_init first.
 *
 * Within a chunk of columns, k blocks on the outside: a block of rows keeps x's pieces in tiles 2-4
 * while the chunk's column blocks stream past, so consecutive tile products share their x tiles and, alternating between out
 * tiles 0 and 1, one column block's scaling (vector work) runs beside the next one's products;
 * out collects the blocks' sums in fp32. */
void parallax_amx_linear_blocks(const float *x, int64_t m, int64_t k, const uint8_t *q, int bits, const float *scales,
                                int64_t n, float *out, uint16_t *scratch, float *sums, uint16_t *tiles) {
    const int64_t k_blocks = k / TILE_K, n_blocks = n / TILE_COLS;
    const int64_t m_padded = (m + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    uint16_t *x1 = scratch, *x2 = scratch + m_padded * k, *x3 = scratch + 2 * m_padded * k;
    float partial[2][TILE_ROWS * TILE_COLS] __attribute__((aligned(64)));
    split_rows(x, m, k, m_padded, x1, x2, x3);
    block_sums(x, m, k, m_padded, sums);
    configure();
    const uint8_t *chunk_q = q;
    const float *chunk_scales = scales;
    for (int64_t chunk = 0; chunk < n_blocks; chunk += CHUNK_BLOCKS) {
        const int64_t blocks = chunk + CHUNK_BLOCKS < n_blocks ? CHUNK_BLOCKS : n_blocks - chunk;
        for (int64_t kb = 0; kb < k_blocks; kb++) {
            widen(chunk_q + kb * blocks * TILE_ELEMENTS * bits / 8, blocks * TILE_ELEMENTS, bits, tiles);
            const float *k_scales = chunk_scales + kb * blocks * 2 * TILE_COLS;
            for (int64_t m0 = 0; m0 < m; m0 += TILE_ROWS) {
                const int rows = m - m0 < TILE_ROWS ? (int)(m - m0) : TILE_ROWS;
                const float *row_sums = sums + kb * m_padded + m0;
                float *out_rows = out + m0 * n + chunk * TILE_COLS;
                _tile_loadd(2, x1 + m0 * k + kb * TILE_K, k * 2);
                _tile_loadd(3, x2 + m0 * k + kb * TILE_K, k * 2);
                _tile_loadd(4, x3 + m0 * k + kb * TILE_K, k * 2);
                for (int64_t nb = 0; nb < blocks; nb += 2) {
                    BLOCK_PRODUCT(0, 5, tiles + nb * TILE_ELEMENTS);
                    if (nb > 0)
                        scale_block(partial[1], k_scales + (nb - 1) * 2 * TILE_COLS, row_sums, rows, kb == 0,
                                    out_rows + (nb - 1) * TILE_COLS, n);
                    if (nb + 1 < blocks) BLOCK_PRODUCT(1, 6, tiles + (nb + 1) * TILE_ELEMENTS);
                    scale_block(partial[0], k_scales + nb * 2 * TILE_COLS, row_sums, rows, kb == 0,
                                out_rows + nb * TILE_COLS, n);
                }
                if (blocks % 2 == 0)
                    scale_block(partial[1], k_scales + (blocks - 1) * 2 * TILE_COLS, row_sums, rows, kb == 0,
                                out_rows + (blocks - 1) * TILE_COLS, n);
            }
        }
        chunk_q += k_blocks * blocks * TILE_ELEMENTS * bits / 8;
        chunk_scales += k_blocks * blocks * 2 * TILE_COLS;
    }
    _tile_release();
}
