/* Block-scaled weights: finding, for 32 values of a weight's row, a scale d, an offset m and small
 * integers q with w = d * q + m exactly, as a quantised checkpoint (GGUF's Q4_1, Q8_0) dequantises.
 * Shared by the kernels that read such weights at 4 or 8 bits (amx_linear.c, block_linear.c);
 * scheduler_core/native_build.py hashes it with each source that includes it. */
#ifndef PARALLAX_BLOCK_SCALE_H
#define PARALLAX_BLOCK_SCALE_H

#include <stdint.h>

#define SCALE_BLOCK 32  /* values per block */

/* Finds d, m and integers q (|q| <= 127) with w = d * q + m exactly (checked in double, where
 * every such product and sum is exact) for one block of 32: offset blocks (m the least value,
 * d = (greatest - least) / 15, as Q4_1 stores them) or symmetric ones (m = 0, d = the largest
 * magnitude / 127, as Q8_0 does). Returns 1 with q written, or 0. */
static inline int block_scale(const float *w, float *d_out, float *m_out, int8_t *q) {
    float lo = w[0], hi = w[0], amax = 0.0f;
    for (int i = 0; i < SCALE_BLOCK; i++) {
        lo = w[i] < lo ? w[i] : lo;
        hi = w[i] > hi ? w[i] : hi;
        const float a = w[i] < 0 ? -w[i] : w[i];
        amax = a > amax ? a : amax;
    }
    if (!(amax < __builtin_inff())) return 0;  /* an infinity or a NaN */
    const double candidates[2][2] = {{((double)hi - lo) / 15.0, lo}, {amax / 127.0, 0.0}};
    for (int c = 0; c < 2; c++) {
        const double d = candidates[c][0], m = candidates[c][1];
        if ((double)(float)d != d) continue;
        int exact = 1;
        for (int i = 0; i < SCALE_BLOCK && exact; i++) {
            const double steps = d == 0.0 ? 0.0 : __builtin_nearbyint((w[i] - m) / d);
            exact = steps >= -127.0 && steps <= 127.0 && d * steps + m == (double)w[i];
            q[i] = (int8_t)steps;
        }
        if (exact) {
            *d_out = (float)d;
            *m_out = (float)m;
            return 1;
        }
    }
    return 0;
}

#endif
