/* Decode attention over the paged KV cache, read in place (scheduler_core/decode_attention.py).
 *
 * One query token per request: for request b and query head h (KV head h / (heads / kv_heads)),
 * out[b, h] = softmax(q[b, h] . K[slot] * scale over the request's slots) . V[slot], where the slots
 * are idx[b, 0 .. lens[b]). K and V are the cache's [slots, kv_heads, head_dim] fp32 buffers.
 *
 * Written by hand because torch's CPU path must first gather every request's keys and values into
 * a padded copy (index_select) before scaled_dot_product_attention reads them again; no library
 * installable here reads a paged cache in place on the CPU. One pass over each request's key rows
 * (all heads of a row together, so each row is read once), the softmax, one pass over its value
 * rows. Single-threaded: the engine uses it on one torch thread (see decode_attention.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows prefetched ahead: a request's slots are mostly, not always, consecutive. 8, not 2: the
 * kernel's share of a 64-prompt SmolLM2 run went from 2.01 to 1.58 s (two pairs, AMD EPYC). Near
 * the end of a request's keys the rows ahead are its first values, near the end of its values the
 * next request's first keys, so no pass starts on demand misses (bench/engine_breakdown.py's
 * decode attention, AMD EPYC family 26, four A/B pairs: median 1.70 -> 1.56 s). */
#define PREFETCH_ROWS 8

/* e^x for x <= 0 (a score minus the row's maximum): 2^n * e^r with |r| <= ln2 / 2, e^r by its
 * degree-7 Taylor-like minimax polynomial (Cephes expf's coefficients), within 2 ulp of expf.
 * Plain code the compiler vectorises; libm's expf would be one call per score. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = __builtin_rintf(x * 1.44269504088896341f);  /* ties to even: vectorises, unlike roundf */
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

static inline void prefetch_row(const float* base, int64_t slot, int64_t row) {
    const char* p = (const char*)(base + slot * row);
    for (int64_t c = 0; c < row * (int64_t)sizeof(float); c += 64) __builtin_prefetch(p + c);
}

/* always_inline, so each call below with a constant head_dim gets loops of known length. */
static inline __attribute__((always_inline)) void attend(
        const float* q, const float* k_cache, const float* v_cache, const int64_t* idx, const int64_t* lens,
        float* out, int64_t batch, int64_t heads, int64_t kv_heads, const int64_t head_dim, int64_t idx_stride,
        float scale, float* scores) {
    const int64_t group = heads / kv_heads;
    const int64_t row = kv_heads * head_dim;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t n = lens[b];
        const int64_t* slots = idx + b * idx_stride;
        const float* qb = q + b * heads * head_dim;
        for (int64_t t = 0; t < n; t++) {
            const int64_t ahead = t + PREFETCH_ROWS;
            if (ahead < n)
                prefetch_row(k_cache, slots[ahead], row);
            else if (ahead - n < n)
                prefetch_row(v_cache, slots[ahead - n], row);
            const float* key = k_cache + slots[t] * row;
            for (int64_t kv = 0; kv < kv_heads; kv++) {
                const float* kh = key + kv * head_dim;
                for (int64_t h = kv * group; h < (kv + 1) * group; h++) {
                    const float* qh = qb + h * head_dim;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int64_t d = 0; d < head_dim; d++) dot += qh[d] * kh[d];
                    scores[h * n + t] = dot * scale;
                }
            }
        }
        for (int64_t h = 0; h < heads; h++) {
            float* s = scores + h * n;
            float top = -INFINITY;
            for (int64_t t = 0; t < n; t++) top = s[t] > top ? s[t] : top;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t t = 0; t < n; t++) {
                const float e = exp_nonpositive(s[t] - top);
                s[t] = e;
                sum += e;
            }
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int64_t t = 0; t < n; t++) s[t] *= inv;
        }
        float* ob = out + b * heads * head_dim;
        memset(ob, 0, sizeof(float) * heads * head_dim);
        for (int64_t t = 0; t < n; t++) {
            const int64_t ahead = t + PREFETCH_ROWS;
            if (ahead < n)
                prefetch_row(v_cache, slots[ahead], row);
            else if (b + 1 < batch && ahead - n < lens[b + 1])
                prefetch_row(k_cache, idx[(b + 1) * idx_stride + ahead - n], row);
            const float* value = v_cache + slots[t] * row;
            for (int64_t kv = 0; kv < kv_heads; kv++) {
                const float* vh = value + kv * head_dim;
                for (int64_t h = kv * group; h < (kv + 1) * group; h++) {
                    const float p = scores[h * n + t];
                    float* oh = ob + h * head_dim;
#pragma omp simd
                    for (int64_t d = 0; d < head_dim; d++) oh[d] += p * vh[d];
                }
            }
        }
    }
}

/* Returns 0, or 1 when the score buffer could not be allocated (out is then untouched). */
int parallax_decode_attention(const float* q, const float* k_cache, const float* v_cache, const int64_t* idx,
                              const int64_t* lens, float* out, int64_t batch, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, int64_t idx_stride, float scale) {
    int64_t longest = 1;
    for (int64_t b = 0; b < batch; b++) longest = lens[b] > longest ? lens[b] : longest;
    float* scores = malloc(sizeof(float) * heads * longest);
    if (scores == NULL) return 1;
    if (head_dim == 64)
        attend(q, k_cache, v_cache, idx, lens, out, batch, heads, kv_heads, 64, idx_stride, scale, scores);
    else if (head_dim == 128)
        attend(q, k_cache, v_cache, idx, lens, out, batch, heads, kv_heads, 128, idx_stride, scale, scores);
    else
        attend(q, k_cache, v_cache, idx, lens, out, batch, heads, kv_heads, head_dim, idx_stride, scale, scores);
    free(scores);
    return 0;
}

/* A decode batch's boolean attention mask, [batch, span] contiguous, as the model's torch path builds
   it: each row keeps its request's first keys (1...1 0...0, at least one). Writes each row's length
   to lens and returns 0; returns 1 for any other mask. */
int parallax_prefix_lengths(const uint8_t* mask, int64_t batch, int64_t span, int64_t* lens) {
    for (int64_t b = 0; b < batch; b++) {
        const uint8_t* row = mask + b * span;
        int64_t len = 0;
        while (len < span && row[len]) len++;
        if (len == 0) return 1;
        for (int64_t i = len; i < span; i++)
            if (row[i]) return 1;
        lens[b] = len;
    }
    return 0;
}
