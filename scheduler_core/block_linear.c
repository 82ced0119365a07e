/* fp32 projections on AVX-512 or AVX2 FMAs with block-scaled weights read at 4 or 8 bits
 * (scheduler_core/block_linear.py).
 *
 * out[r, c] = sum_k x[r, k] * w[c, k] for a weight whose every 32 values of a row are d * q + m
 * exactly (block_scale.h), as a quantised checkpoint dequantises. The weight is kept as its q
 * (4 bits where every q lies in 0..15, else 8) with d and m per block: 0.75 or 1.25 bytes per value
 * against fp32's 4. A decode batch of a few dozen rows streams every weight from memory once per
 * step; where the CPU's FMAs outrun its memory, that stream is the step's floor, and reading it at a
 * fifth of the bytes moves the floor. Each value is rebuilt in a register as fma(q, d, m), which is
 * w exactly (d * q + m is representable, so its one rounding changes nothing), and then multiplied
 * and added in fp32 like any fp32 matmul: the result differs from oneDNN's only in the order of the
 * additions. Each row adds its products in k order, whatever the other rows of the call, so a row's
 * result does not depend on its batch.
 *
 * Written by hand because no library installable here multiplies fp32 activations by 4-bit weights
 * in fp32 on the CPU (torch's int4 CPU kernel takes bf16 activations; oneDNN's fp32 inner product
 * reads fp32 weights). Single-threaded: the engine uses it on one torch thread.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "block_scale.h"

#define COLUMNS 16   /* columns of out per column block: 16 fp32, one AVX-512 register */

/* Bytes of one k block of one column block in the packed layout: the q of 32 k x 16 columns, then
 * the 16 d and the 16 m. */
static inline int64_t block_bytes(int bits) {
    return SCALE_BLOCK * COLUMNS * bits / 8 + 2 * COLUMNS * (int64_t)sizeof(float);
}

/* Bytes of a weight [n, k] in the packed layout at `bits` bits (what parallax_blocks_layout writes). */
int64_t parallax_blocks_packed_bytes(int64_t n, int64_t k, int bits) {
    return (n / COLUMNS) * (k / SCALE_BLOCK) * block_bytes(bits);
}

/* Finds every block's d, m and q for w [n, k] (k % 32 == 0): q [n, k] int8 and scales [n, k / 32, 2]
 * (d, m). Returns 4 where every q lies in 0..15, 8 where some do not, 0 where some block has no
 * exact d, m and q (then nothing written is usable). */
int parallax_blocks_find(const float *w, int64_t n, int64_t k, int8_t *q, float *scales) {
    int narrow = 1;
    for (int64_t row = 0; row < n; row++)
        for (int64_t kb = 0; kb < k / SCALE_BLOCK; kb++) {
            const int64_t at = row * k + kb * SCALE_BLOCK;
            float *d_m = scales + 2 * (row * (k / SCALE_BLOCK) + kb);
            if (!block_scale(w + at, &d_m[0], &d_m[1], q + at)) return 0;
            for (int i = 0; i < SCALE_BLOCK; i++) narrow &= q[at + i] >= 0 && q[at + i] <= 15;
        }
    return narrow ? 4 : 8;
}

/* The packed layout (n % 16 == 0, k % 32 == 0), read front to back by parallax_blocks_linear: for
 * each column block, for each k block, block_bytes(bits) bytes:
 * - 8 bits: 32 groups of 16 bytes, group kk byte c = q of column c at k kk;
 * - 4 bits: 16 groups of 16 bytes, group g byte c = q of column c at k 2g (low half) and 2g + 1 (high);
 * then 16 d and 16 m (fp32), one per column. */
void parallax_blocks_layout(const int8_t *q, const float *scales, int64_t n, int64_t k, int bits, uint8_t *out) {
    const int64_t k_blocks = k / SCALE_BLOCK;
    for (int64_t nb = 0; nb < n / COLUMNS; nb++)
        for (int64_t kb = 0; kb < k_blocks; kb++, out += block_bytes(bits)) {
            float *d = (float *)(out + SCALE_BLOCK * COLUMNS * bits / 8), *m = d + COLUMNS;
            for (int c = 0; c < COLUMNS; c++) {
                const int64_t row = nb * COLUMNS + c;
                const int8_t *block = q + row * k + kb * SCALE_BLOCK;
                for (int kk = 0; kk < SCALE_BLOCK; kk++) {
                    if (bits == 8)
                        out[kk * COLUMNS + c] = (uint8_t)block[kk];
                    else if (kk % 2 == 0)
                        out[(kk / 2) * COLUMNS + c] = (uint8_t)(block[kk] | (block[kk + 1] << 4));
                }
                d[c] = scales[2 * (row * k_blocks + kb)];
                m[c] = scales[2 * (row * k_blocks + kb) + 1];
            }
        }
}

#if defined(__AVX512F__)

#define MAX_ROWS 16  /* rows of x per pass over a column block: one accumulator register each */
/* Rows per pass over a pair of column blocks: two accumulators a row, plus the two blocks' weights,
 * d and m, the 4-bit mask and the broadcast x, in AVX-512's 32 registers. */
#define PAIR_MAX_ROWS 12
#define PREFETCH_BLOCKS 8  /* how far ahead, in k blocks, a lone column block asks for its weight */

/* acc[r] += x[r, kk] * w, for the ROWS rows of x (their rows k apart). */
#define ADD_PRODUCTS(ROWS, acc, x, k, kk, w)                                        \
    do {                                                                            \
        for (int r = 0; r < (ROWS); r++)                                            \
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps((x)[r * (k) + (kk)]), (w), acc[r]); \
    } while (0)

/* One column block for ROWS rows of x (a constant where it is inlined, so acc stays in registers):
 * out's ROWS x 16 values, every k block's values rebuilt in registers as they are used. */
static inline __attribute__((always_inline)) void column_block(const int rows, const float *x, int64_t k,
                                                               const uint8_t *block, int bits, float *out,
                                                               int64_t n) {
    __m512 acc[MAX_ROWS];
    for (int r = 0; r < rows; r++) acc[r] = _mm512_setzero_ps();
    const int64_t stride = block_bytes(bits);
    const __m512i low_half = _mm512_set1_epi32(0x0f);
    for (int64_t kb = 0; kb < k / SCALE_BLOCK; kb++, block += stride) {
        const float *scales = (const float *)(block + SCALE_BLOCK * COLUMNS * bits / 8);
        const __m512 d = _mm512_loadu_ps(scales), m = _mm512_loadu_ps(scales + COLUMNS);
        const float *xk = x + kb * SCALE_BLOCK;
        /* Every line of the k block 8 blocks on (3 or 5 KB ahead): the hardware prefetcher alone
         * kept a 13-row LM head at half its speed (bench/block_projections.py). */
        for (int64_t line = 0; line < stride; line += 64)
            _mm_prefetch((const char *)(block + PREFETCH_BLOCKS * stride + line), _MM_HINT_T0);
        if (bits == 4) {
            for (int g = 0; g < SCALE_BLOCK / 2; g++) {
                const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(block + g * COLUMNS)));
                const __m512 even = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, low_half)), d, m);
                const __m512 odd = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), d, m);
                ADD_PRODUCTS(rows, acc, xk, k, 2 * g, even);
                ADD_PRODUCTS(rows, acc, xk, k, 2 * g + 1, odd);
            }
        } else {
            for (int kk = 0; kk < SCALE_BLOCK; kk++) {
                const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(block + kk * COLUMNS)));
                const __m512 w = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), d, m);
                ADD_PRODUCTS(rows, acc, xk, k, kk, w);
            }
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + r * n, acc[r]);
}

/* acc[r][0] += x[r, kk] * w0 and acc[r][1] += x[r, kk] * w1: one broadcast of x for two FMAs. */
#define ADD_PAIR_PRODUCTS(ROWS, acc, x, k, kk, w0, w1)                  \
    do {                                                                \
        for (int r = 0; r < (ROWS); r++) {                              \
            const __m512 xr = _mm512_set1_ps((x)[r * (k) + (kk)]);      \
            acc[r][0] = _mm512_fmadd_ps(xr, (w0), acc[r][0]);           \
            acc[r][1] = _mm512_fmadd_ps(xr, (w1), acc[r][1]);           \
        }                                                               \
    } while (0)

/* column_block for two adjacent column blocks at once (`block` and `block + column_stride`), ROWS
 * <= PAIR_MAX_ROWS rows. Each output still adds its products in k order from zero, one FMA per k,
 * so the result is column_block's bit for bit; what changes is that each x value is broadcast once
 * for two FMAs. With one FMA per broadcast an Intel Xeon (Ice Lake) ran the kernel at about 40 % of
 * its FMA peak; a decode step of 13 to 32 rows runs 1.09-1.34x faster this way there
 * (bench/block_kernel_ab.py, docs/engine.md). Written out beside column_block, not as one loop over
 * a group of blocks: that loop ran at 0.93x this pair's speed. */
static inline __attribute__((always_inline)) void column_pair(const int rows, const float *x, int64_t k,
                                                              const uint8_t *block, int64_t column_stride,
                                                              int bits, float *out, int64_t n) {
    __m512 acc[PAIR_MAX_ROWS][2];
    for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const int64_t stride = block_bytes(bits);
    const __m512i low_half = _mm512_set1_epi32(0x0f);
    const uint8_t *block1 = block + column_stride;
    for (int64_t kb = 0; kb < k / SCALE_BLOCK; kb++, block += stride, block1 += stride) {
        const float *scales0 = (const float *)(block + SCALE_BLOCK * COLUMNS * bits / 8);
        const float *scales1 = (const float *)(block1 + SCALE_BLOCK * COLUMNS * bits / 8);
        const __m512 d0 = _mm512_loadu_ps(scales0), m0 = _mm512_loadu_ps(scales0 + COLUMNS);
        const __m512 d1 = _mm512_loadu_ps(scales1), m1 = _mm512_loadu_ps(scales1 + COLUMNS);
        const float *xk = x + kb * SCALE_BLOCK;
        /* The next pair's k block, a pair ahead (14 KB for SmolLM2's 4-bit weights of k 576, 23 KB
         * for its 8-bit LM head, 36 KB for its down projection of k 1536). Asked for within each
         * stream, 8 blocks ahead as column_block does, the first 8 blocks of every second column
         * block never were (the stream ahead of `block` runs into `block1`'s, which is read
         * already), and a 13-row LM head took 4.9 ms against 3.7 (bench/block_kernel_ab.py,
         * docs/engine.md). */
        for (int64_t line = 0; line < stride; line += 64) {
            _mm_prefetch((const char *)(block + 2 * column_stride + line), _MM_HINT_T0);
            _mm_prefetch((const char *)(block1 + 2 * column_stride + line), _MM_HINT_T0);
        }
        if (bits == 4) {
            for (int g = 0; g < SCALE_BLOCK / 2; g++) {
                const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(block + g * COLUMNS)));
                const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(block1 + g * COLUMNS)));
                const __m512 even0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q0, low_half)), d0, m0);
                const __m512 even1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q1, low_half)), d1, m1);
                ADD_PAIR_PRODUCTS(rows, acc, xk, k, 2 * g, even0, even1);
                const __m512 odd0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q0, 4)), d0, m0);
                const __m512 odd1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q1, 4)), d1, m1);
                ADD_PAIR_PRODUCTS(rows, acc, xk, k, 2 * g + 1, odd0, odd1);
            }
        } else {
            for (int kk = 0; kk < SCALE_BLOCK; kk++) {
                const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(block + kk * COLUMNS)));
                const __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(block1 + kk * COLUMNS)));
                const __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), d0, m0);
                const __m512 w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), d1, m1);
                ADD_PAIR_PRODUCTS(rows, acc, xk, k, kk, w0, w1);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        _mm512_storeu_ps(out + r * n, acc[r][0]);
        _mm512_storeu_ps(out + r * n + COLUMNS, acc[r][1]);
    }
}

#define ROWS_CASE(R) \
    case R: column_block(R, x, k, block, bits, out, n); break;
#define PAIR_CASE(R) \
    case R: column_pair(R, x, k, block, column_stride, bits, out, n); break;

/* One pass of `rows` rows over a pair of column blocks (group 2) or one (group 1); `rows` is at
 * most PAIR_MAX_ROWS or MAX_ROWS, a constant in each case so that the accumulators stay in registers. */
static void one_pass(int group, int rows, const float *x, int64_t k, const uint8_t *block, int64_t column_stride,
                     int bits, float *out, int64_t n) {
    if (group == 2) {
        switch (rows) {
            PAIR_CASE(1) PAIR_CASE(2) PAIR_CASE(3) PAIR_CASE(4) PAIR_CASE(5) PAIR_CASE(6)
            PAIR_CASE(7) PAIR_CASE(8) PAIR_CASE(9) PAIR_CASE(10) PAIR_CASE(11) PAIR_CASE(12)
        }
    } else {
        switch (rows) {
            ROWS_CASE(1) ROWS_CASE(2) ROWS_CASE(3) ROWS_CASE(4) ROWS_CASE(5) ROWS_CASE(6)
            ROWS_CASE(7) ROWS_CASE(8) ROWS_CASE(9) ROWS_CASE(10) ROWS_CASE(11) ROWS_CASE(12)
            ROWS_CASE(13) ROWS_CASE(14) ROWS_CASE(15) ROWS_CASE(16)
        }
    }
}

/* out [m, n] = x [m, k] . w^T for a weight packed by parallax_blocks_layout with `bits` bits. Column
 * blocks on the outside, two at a time (an odd last one alone): their weights come from memory
 * once, and from the cache for each further pass over the rows, the rows split evenly between the
 * passes (13 rows over a pair are 7 + 6). */
void parallax_blocks_linear(const float *x, int64_t m, int64_t k, const uint8_t *packed, int bits, int64_t n,
                            float *out) {
    const int64_t column_stride = (k / SCALE_BLOCK) * block_bytes(bits);
    const int64_t blocks = n / COLUMNS;
    for (int64_t nb = 0; nb < blocks;) {
        const int group = blocks - nb >= 2 ? 2 : 1;
        const int max_rows = group == 2 ? PAIR_MAX_ROWS : MAX_ROWS;
        const int64_t passes = (m + max_rows - 1) / max_rows;
        for (int64_t pass = 0, r0 = 0; pass < passes; pass++) {
            const int64_t r1 = m * (pass + 1) / passes;
            one_pass(group, (int)(r1 - r0), x + r0 * k, k, packed + nb * column_stride, column_stride, bits,
                     out + r0 * n + nb * COLUMNS, n);
            r0 = r1;
        }
        nb += group;
    }
}

#elif defined(__AVX2__) && defined(__FMA__)

/* AVX2: 8 fp32 per register and 16 registers. Each column block of the same packed layout is read
 * as two halves of 8 columns, both in one pass: two accumulators a row for 6 rows, the two halves'
 * rebuilt weights and the broadcast x fill the 16 registers (d, m and the 4-bit mask are read from
 * memory). Each output still adds its products in k order from zero, one FMA per k, so the results
 * are the AVX-512 kernel's bit for bit. On an AMD EPYC with AVX2 only, oneDNN's fp32 inner product
 * ran the engine's decode batches of about 13 rows at 17-26 GFLOP/s against its 60 at 2048 rows
 * (bench/engine_breakdown.py, bench/roofline.py; docs/engine.md). */
#define HALF 8
#define MAX_ROWS 6

/* acc[r][0] += x[r, kk] * w0 and acc[r][1] += x[r, kk] * w1: one broadcast of x for two FMAs. */
#define ADD_PAIR_PRODUCTS(ROWS, acc, x, k, kk, w0, w1)                                 \
    do {                                                                               \
        _Pragma("GCC unroll 8") for (int r = 0; r < (ROWS); r++) {                     \
            const __m256 xr = _mm256_broadcast_ss(&(x)[r * (k) + (kk)]);               \
            acc[r][0] = _mm256_fmadd_ps(xr, (w0), acc[r][0]);                          \
            acc[r][1] = _mm256_fmadd_ps(xr, (w1), acc[r][1]);                          \
        }                                                                              \
    } while (0)

/* The 8 values of one half of a column block at one k, rebuilt: fma(q, d, m). */
static inline __attribute__((always_inline)) __m256 rebuilt(__m256i q, const float *d, const float *m) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_loadu_ps(d), _mm256_loadu_ps(m));
}

/* One column block for ROWS <= MAX_ROWS rows of x, asking for the next column block's k block as
 * it goes (a column block is read from memory by its first pass and from the cache by the rest). */
static inline __attribute__((always_inline)) void column_block(const int rows, const float *x, int64_t k,
                                                               const uint8_t *block, int64_t column_stride,
                                                               const int bits, float *out, int64_t n) {
    __m256 acc[MAX_ROWS][2];
    _Pragma("GCC unroll 8") for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const int64_t stride = block_bytes(bits);
    const __m256i low_half = _mm256_set1_epi32(0x0f);
    for (int64_t kb = 0; kb < k / SCALE_BLOCK; kb++, block += stride) {
        const float *d = (const float *)(block + SCALE_BLOCK * COLUMNS * bits / 8), *m = d + COLUMNS;
        const float *xk = x + kb * SCALE_BLOCK;
        for (int64_t line = 0; line < stride; line += 64)
            _mm_prefetch((const char *)(block + column_stride + line), _MM_HINT_T0);
        if (bits == 4) {
            for (int g = 0; g < SCALE_BLOCK / 2; g++) {
                const __m256i q0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(block + g * COLUMNS)));
                const __m256i q1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(block + g * COLUMNS + HALF)));
                const __m256 even0 = rebuilt(_mm256_and_si256(q0, low_half), d, m);
                const __m256 even1 = rebuilt(_mm256_and_si256(q1, low_half), d + HALF, m + HALF);
                ADD_PAIR_PRODUCTS(rows, acc, xk, k, 2 * g, even0, even1);
                const __m256 odd0 = rebuilt(_mm256_srli_epi32(q0, 4), d, m);
                const __m256 odd1 = rebuilt(_mm256_srli_epi32(q1, 4), d + HALF, m + HALF);
                ADD_PAIR_PRODUCTS(rows, acc, xk, k, 2 * g + 1, odd0, odd1);
            }
        } else {
            for (int kk = 0; kk < SCALE_BLOCK; kk++) {
                const uint8_t *q = block + kk * COLUMNS;
                const __m256 w0 = rebuilt(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)), d, m);
                const __m256 w1 = rebuilt(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + HALF))),
                                          d + HALF, m + HALF);
                ADD_PAIR_PRODUCTS(rows, acc, xk, k, kk, w0, w1);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(out + r * n, acc[r][0]);
        _mm256_storeu_ps(out + r * n + HALF, acc[r][1]);
    }
}

/* One function per row count and width, and the loops over rows unrolled by pragma, so that the
 * accumulators stay in registers: with the row counts inlined into one function by a switch, as the
 * AVX-512 build's cases are, or the width chosen inside the k loop, GCC 12 kept them on the stack
 * as well (a store per FMA; a 13-row qkv ran about a quarter slower so in a scratch timing loop). */
#define ROWS_PASS(R)                                                                                     \
    static __attribute__((noinline)) void pass_##R##_4(const float *x, int64_t k, const uint8_t *block,   \
                                                      int64_t column_stride, float *out, int64_t n) {   \
        column_block(R, x, k, block, column_stride, 4, out, n);                                          \
    }                                                                                                    \
    static __attribute__((noinline)) void pass_##R##_8(const float *x, int64_t k, const uint8_t *block,   \
                                                      int64_t column_stride, float *out, int64_t n) {   \
        column_block(R, x, k, block, column_stride, 8, out, n);                                          \
    }
ROWS_PASS(1) ROWS_PASS(2) ROWS_PASS(3) ROWS_PASS(4) ROWS_PASS(5) ROWS_PASS(6)

typedef void (*pass_fn)(const float *, int64_t, const uint8_t *, int64_t, float *, int64_t);
static const pass_fn passes_by_rows[MAX_ROWS + 1][2] = {
    {0, 0}, {pass_1_4, pass_1_8}, {pass_2_4, pass_2_8}, {pass_3_4, pass_3_8},
    {pass_4_4, pass_4_8}, {pass_5_4, pass_5_8}, {pass_6_4, pass_6_8},
};

/* out [m, n] = x [m, k] . w^T, as the AVX-512 kernel's: column blocks on the outside, each in
 * passes of at most MAX_ROWS rows split evenly (13 rows are 5 + 4 + 4). */
void parallax_blocks_linear(const float *x, int64_t m, int64_t k, const uint8_t *packed, int bits, int64_t n,
                            float *out) {
    const int64_t column_stride = (k / SCALE_BLOCK) * block_bytes(bits);
    const int64_t passes = (m + MAX_ROWS - 1) / MAX_ROWS;
    for (int64_t nb = 0; nb < n / COLUMNS; nb++)
        for (int64_t pass = 0, r0 = 0; pass < passes; pass++) {
            const int64_t r1 = m * (pass + 1) / passes;
            passes_by_rows[r1 - r0][bits == 8](x + r0 * k, k, packed + nb * column_stride, column_stride,
                                               out + r0 * n + nb * COLUMNS, n);
            r0 = r1;
        }
}

#else
#error "block_linear.c needs AVX-512, or AVX2 with FMA"
#endif
