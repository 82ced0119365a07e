/* Runs scheduler_core/block_linear.c on weights of both widths (Q8_0- and Q4_1-shaped), several
 * shapes and every pass split of 1 to 33 rows, each buffer allocated to its exact size, and checks
 * each result against a double-precision product. tests/scheduler_core/test_block_linear.py
 * builds it with -fsanitize=address, so a read or write outside an operand stops it. Prints "ok"
 * and exits 0, or names the first wrong case and exits 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int64_t parallax_blocks_packed_bytes(int64_t n, int64_t k, int bits);
int parallax_blocks_find(const float *w, int64_t n, int64_t k, int8_t *q, float *scales);
void parallax_blocks_layout(const int8_t *q, const float *scales, int64_t n, int64_t k, int bits, uint8_t *out);
void parallax_blocks_linear(const float *x, int64_t m, int64_t k, const uint8_t *packed, int bits, int64_t n,
                            float *out);

static float uniform(void) { return (float)(rand() % 2001) / 1000.0f - 1.0f; }

/* w [n, k]: every 32 values d * q + m exactly, q in 0..15 (4 bits) or -127..127 (8 bits). */
static float *block_scaled(int64_t n, int64_t k, int bits) {
    float *w = malloc(sizeof(float) * n * k);
    for (int64_t i = 0; i < n * k; i++)
        w[i] = bits == 4 ? (float)(rand() % 16) * 0.125f - 1.0f : (float)(rand() % 255 - 127) * 0.0625f;
    for (int64_t i = 0; i < n * k; i += 32) {  /* each block spans its whole range, so d is found */
        w[i] = bits == 4 ? -1.0f : 127 * 0.0625f;
        if (bits == 4) w[i + 1] = 0.875f;
    }
    return w;
}

int main(void) {
    const int64_t shapes[][2] = {{16, 32}, {48, 64}, {960, 576}, {576, 1536}};
    for (int s = 0; s < 4; s++)
        for (int bits = 4; bits <= 8; bits += 4) {
            const int64_t n = shapes[s][0], k = shapes[s][1];
            float *w = block_scaled(n, k, bits), *scales = malloc(sizeof(float) * n * (k / 32) * 2);
            int8_t *q = malloc(n * k);
            if (parallax_blocks_find(w, n, k, q, scales) != bits) {
                printf("%ld x %ld: the weight was not found to be %d-bit\n", (long)n, (long)k, bits);
                return 1;
            }
            uint8_t *packed = malloc(parallax_blocks_packed_bytes(n, k, bits));
            parallax_blocks_layout(q, scales, n, k, bits, packed);
            for (int64_t m = 1; m <= 33; m++) {
                float *x = malloc(sizeof(float) * m * k), *out = malloc(sizeof(float) * m * n);
                for (int64_t i = 0; i < m * k; i++) x[i] = uniform();
                parallax_blocks_linear(x, m, k, packed, bits, n, out);
                for (int64_t r = 0; r < m; r++)
                    for (int64_t c = 0; c < n; c++) {
                        double exact = 0.0, size = 0.0;
                        for (int64_t i = 0; i < k; i++) {
                            exact += (double)x[r * k + i] * w[c * k + i];
                            size += fabs((double)x[r * k + i] * w[c * k + i]);
                        }
                        if (fabs(out[r * n + c] - exact) > 1e-6 * size + 1e-6) {
                            printf("%ld x %ld, %d bits, %ld rows: out[%ld, %ld] = %g, not %g\n", (long)n, (long)k,
                                   bits, (long)m, (long)r, (long)c, out[r * n + c], exact);
                            return 1;
                        }
                    }
                free(x);
                free(out);
            }
            free(w);
            free(scales);
            free(q);
            free(packed);
        }
    printf("ok\n");
    return 0;
}
