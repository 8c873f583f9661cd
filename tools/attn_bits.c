/* tools/attn_bits.c - bit fingerprints of the CUDA attention op: a fixed, seeded set of calls
   through fa_cuda_backend_create and the backend's ops.attention (fa_attn_args filled by hand),
   one line per case: its name and a 64-bit FNV-1a hash of the output bytes, then of the LSE
   bytes. Two builds that print the same lines produced the same bits (tools/attn_bits.sh diffs
   a base tree against a new one).

   Cases: head 64 / 128 / 256 x q bf16 / f16 x K/V same / fp8 E4M3 x decode (q_len 1, GQA 4) /
   mixed prefill (q_len 1 + 300 + 1000) x four variants: plain paged-16; causal + softcap +
   ALiBi + sinks, paged-64, 4 splits with a plan; window (left 160, right 40) + sinks dense;
   causal + window (left 200), paged-16, 4 splits without a plan.

   Build: cc -std=c99 -O2 -I<root> -I<root>/backends/cuda -c tools/attn_bits.c, then link with
          <build>/backends/cuda/libflashattn_cuda.a <build>/libflashattn.a -lcudart -lstdc++ -lm
   Run:   attn_bits [filter]   (cases whose name contains filter; exit 1 if a call failed) */
#include "fa_cuda.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}
static float rndf(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

/* random 16-bit values of magnitude ~2^-4 .. 2^1, either sign */
static uint16_t rnd16(fa_dtype dt)
{
    const uint32_t r = rnd();
    const uint32_t s = (r >> 31) & 1u;
    if (dt == FA_DTYPE_BF16) {
        const uint32_t e = 123u + (r >> 16) % 6u;
        return (uint16_t)((s << 15) | (e << 7) | (r & 0x7fu));
    }
    {
        const uint32_t e = 11u + (r >> 16) % 6u;
        return (uint16_t)((s << 15) | (e << 10) | (r & 0x3ffu));
    }
}
/* random E4M3 byte, exponent field 4..9 (no NaN) */
static uint8_t rnd8(void)
{
    const uint32_t r = rnd();
    return (uint8_t)((((r >> 31) & 1u) << 7) | ((4u + (r >> 8) % 6u) << 3) | (r & 7u));
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; ++i) {
        h ^= c[i];
        h *= 1099511628211ULL;
    }
    return h;
}

typedef struct {
    int D;                 /* head size (= the compiled width) */
    fa_dtype q, kv;
    int mixed;             /* 0: decode, 1: q_len 1 + 300 + 1000 */
    int variant;           /* 0..3, header comment */
} Case;

static fa_backend *be;
static int failures;

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    if (be->ops.alloc(be->ctx, bytes ? bytes : 16, &p) != FA_OK) {
        fprintf(stderr, "alloc %zu failed\n", bytes);
        exit(2);
    }
    return p;
}
static void *dev_up(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    be->ops.copy(be->ctx, d, h, bytes, FA_COPY_HOST_TO_DEVICE);
    return d;
}

static void run_case(const Case *c, const char *filter)
{
    char name[128];
    const int Hkv = 2, G = 4, Hq = Hkv * G, D = c->D;
    const int dec_q[4] = {1, 1, 1, 1}, dec_k[4] = {37, 300, 1000, 513};
    const int mix_q[3] = {1, 300, 1000}, mix_k[3] = {777, 320, 1000};
    const int B = c->mixed ? 3 : 4;
    const int *lq = c->mixed ? mix_q : dec_q, *lk = c->mixed ? mix_k : dec_k;
    const int bs = c->variant == 1 ? 64 : 16;
    const int dense = c->variant == 2;
    const int S = (c->variant == 1 || c->variant == 3) ? 4 : 1;
    const size_t qe = 2, ke = c->kv == c->q ? 2 : 1;
    int32_t cu_q[5], cu_k[5], used[4], plan[5];
    int b, T = 0, TK = 0, nblk = 0, maxq = 0, minq = 1 << 30, maxk = 0, bt_cols = 0;
    size_t i, n;
    fa_attn_args a;
    fa_status st;
    uint64_t h;

    snprintf(name, sizeof(name), "d%d_%s_%s_%s_v%d", D, c->q == FA_DTYPE_BF16 ? "bf16" : "f16",
             c->kv == c->q ? "same" : "e4m3", c->mixed ? "mixed" : "decode", c->variant);
    if (filter && !strstr(name, filter)) return;
    rng_state = 0x9e3779b97f4a7c15ULL ^
                (uint64_t)(D * 131 + c->q * 17 + c->kv * 5 + c->mixed * 3 + c->variant * 1000);

    cu_q[0] = cu_k[0] = 0;
    for (b = 0; b < B; ++b) {
        cu_q[b + 1] = cu_q[b] + lq[b];
        cu_k[b + 1] = cu_k[b] + lk[b];
        used[b] = lk[b];
        if (lq[b] > maxq) maxq = lq[b];
        if (lq[b] < minq) minq = lq[b];
        if (lk[b] > maxk) maxk = lk[b];
        if ((lk[b] + bs - 1) / bs > bt_cols) bt_cols = (lk[b] + bs - 1) / bs;
        nblk += (lk[b] + bs - 1) / bs;
    }
    T = cu_q[B];
    TK = cu_k[B];

    /* host data */
    {
        const size_t nq = (size_t)T * Hq * D;
        const size_t nkv = dense ? (size_t)TK * Hkv * D : (size_t)nblk * bs * Hkv * D;
        uint16_t *hq = (uint16_t *)malloc(nq * 2);
        unsigned char *hk = (unsigned char *)malloc(nkv * ke), *hv = (unsigned char *)malloc(nkv * ke);
        int32_t *bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * bt_cols);
        int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)(nblk > 0 ? nblk : 1));
        float slopes[64], sinks[64];
        void *dq, *dk, *dv, *dout, *dbt = NULL, *dcuq, *dcuk = NULL, *dused = NULL, *dslopes = NULL,
                                   *dsinks = NULL, *dplan = NULL, *dsout = NULL, *dslse = NULL;
        float *dlse;
        unsigned char *hout;
        float *hlse;
        int k;

        for (i = 0; i < nq; ++i) hq[i] = rnd16(c->q);
        for (i = 0; i < nkv; ++i) {
            if (ke == 2) {
                ((uint16_t *)hk)[i] = rnd16(c->q);
                ((uint16_t *)hv)[i] = rnd16(c->q);
            } else {
                hk[i] = rnd8();
                hv[i] = rnd8();
            }
        }
        for (k = 0; k < nblk; ++k) perm[k] = k;
        for (k = nblk - 1; k > 0; --k) {
            const int j = (int)(rnd() % (uint32_t)(k + 1));
            const int32_t t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
        }
        {
            int next = 0;
            for (b = 0; b < B; ++b)
                for (k = 0; k < bt_cols; ++k)
                    bt[(size_t)b * bt_cols + k] = k < (lk[b] + bs - 1) / bs ? perm[next++] : 0;
        }
        for (k = 0; k < Hq; ++k) {
            slopes[k] = 0.5f / (float)(1 << (k % 8)) + 0.01f * rndf();
            sinks[k] = 2.0f * rndf();
        }
        plan[0] = S;
        for (b = 0; b < B; ++b) plan[1 + b] = b == 1 ? 1 : (b == 2 ? 2 : S);

        dq = dev_up(hq, nq * 2);
        dk = dev_up(hk, nkv * ke);
        dv = dev_up(hv, nkv * ke);
        dcuq = dev_up(cu_q, sizeof(int32_t) * (size_t)(B + 1));
        if (dense)
            dcuk = dev_up(cu_k, sizeof(int32_t) * (size_t)(B + 1));
        else {
            dused = dev_up(used, sizeof(int32_t) * (size_t)B);
            dbt = dev_up(bt, sizeof(int32_t) * (size_t)B * bt_cols);
        }
        dslopes = dev_up(slopes, sizeof(float) * (size_t)Hq);
        dsinks = dev_up(sinks, sizeof(float) * (size_t)Hq);
        dplan = dev_up(plan, sizeof(int32_t) * (size_t)(B + 1));
        dout = dev_alloc(nq * qe);
        dlse = (float *)dev_alloc(sizeof(float) * (size_t)Hq * T);
        if (S > 1) {
            dsout = dev_alloc(sizeof(float) * (size_t)S * nq);
            dslse = dev_alloc(sizeof(float) * (size_t)S * Hq * T);
        }

        memset(&a, 0, sizeof(a));
        a.q = dq;
        a.q_token_stride = (int64_t)Hq * D;
        a.q_head_stride = D;
        a.q_group_stride = 0;
        a.q_head_group = 0;
        a.q_dtype = c->q;
        a.k = dk;
        a.v = dv;
        if (dense) {
            a.k_row_stride = a.v_row_stride = (int64_t)Hkv * D;
        } else {
            a.k_block_stride = a.v_block_stride = (int64_t)bs * Hkv * D;
            a.k_row_stride = a.v_row_stride = (int64_t)Hkv * D;
        }
        a.k_head_stride = a.v_head_stride = D;
        a.kv_dtype = c->kv;
        a.out = dout;
        a.out_token_stride = (int64_t)Hq * D;
        a.out_head_stride = D;
        a.lse = dlse;
        a.lse_head_stride = T;
        a.cu_seqlens_q = (const int32_t *)dcuq;
        a.seqused_k = dense ? NULL : (const int32_t *)dused;
        a.cu_seqlens_k = dense ? (const int32_t *)dcuk : NULL;
        a.block_table = dense ? NULL : (const int32_t *)dbt;
        a.block_table_stride = bt_cols;
        a.num_blocks = dense ? 0 : nblk;
        a.num_seqs = B;
        a.num_tokens = T;
        a.max_seqlen_q = maxq;
        a.max_seqlen_k = maxk;
        a.min_seqlen_q = minq;
        a.num_heads_q = Hq;
        a.num_heads_kv = Hkv;
        a.head_size = D;
        a.block_size = dense ? 0 : bs;
        a.softmax_scale = 1.0f / sqrtf((float)D);
        a.window_left = a.window_right = -1;
        switch (c->variant) {
        case 1:
            a.causal = 1;
            a.softcap = 30.0f;
            a.alibi_slopes = (const float *)dslopes;
            a.sinks = (const float *)dsinks;
            a.num_splits = S;
            a.split_plan = (const int32_t *)dplan;
            break;
        case 2:
            a.window_left = 160;
            a.window_right = 40;
            a.sinks = (const float *)dsinks;
            break;
        case 3:
            a.causal = 1;
            a.window_left = 200;
            a.num_splits = S;
            break;
        default: break;
        }
        if (c->kv != c->q) {
            a.k_scale = 0.75f;
            a.v_scale = 1.25f;
        }
        a.split_out = (float *)dsout;
        a.split_lse = (float *)dslse;

        st = be->ops.attention(be->ctx, &a);
        if (st == FA_OK && be->ops.synchronize) st = be->ops.synchronize(be->ctx);
        if (st != FA_OK) {
            printf("%s FAILED %d %s\n", name, (int)st, be->ops.last_error ? be->ops.last_error(be->ctx) : "");
            ++failures;
        } else {
            n = nq * qe;
            hout = (unsigned char *)malloc(n);
            hlse = (float *)malloc(sizeof(float) * (size_t)Hq * T);
            be->ops.copy(be->ctx, hout, dout, n, FA_COPY_DEVICE_TO_HOST);
            be->ops.copy(be->ctx, hlse, dlse, sizeof(float) * (size_t)Hq * T, FA_COPY_DEVICE_TO_HOST);
            if (be->ops.synchronize) be->ops.synchronize(be->ctx);
            h = fnv(14695981039346656037ULL, hout, n);
            printf("%s out %016llx lse %016llx\n", name, (unsigned long long)h,
                   (unsigned long long)fnv(14695981039346656037ULL, hlse, sizeof(float) * (size_t)Hq * T));
            free(hout);
            free(hlse);
        }
        fflush(stdout);
        be->ops.free(be->ctx, dq);
        be->ops.free(be->ctx, dk);
        be->ops.free(be->ctx, dv);
        be->ops.free(be->ctx, dcuq);
        if (dcuk) be->ops.free(be->ctx, dcuk);
        if (dused) be->ops.free(be->ctx, dused);
        if (dbt) be->ops.free(be->ctx, dbt);
        be->ops.free(be->ctx, dslopes);
        be->ops.free(be->ctx, dsinks);
        be->ops.free(be->ctx, dplan);
        be->ops.free(be->ctx, dout);
        be->ops.free(be->ctx, dlse);
        if (dsout) be->ops.free(be->ctx, dsout);
        if (dslse) be->ops.free(be->ctx, dslse);
        free(hq);
        free(hk);
        free(hv);
        free(bt);
        free(perm);
    }
}

int main(int argc, char **argv)
{
    static const int dims[3] = {64, 128, 256};
    static const fa_dtype qd[2] = {FA_DTYPE_BF16, FA_DTYPE_F16};
    const char *filter = argc > 1 ? argv[1] : NULL;
    int di, qi, kvi, mixed, v, cases = 0;
    if (fa_cuda_backend_create(0, NULL, &be) != FA_OK) {
        fprintf(stderr, "fa_cuda_backend_create failed\n");
        return 2;
    }
    for (di = 0; di < 3; ++di)
        for (qi = 0; qi < 2; ++qi)
            for (kvi = 0; kvi < 2; ++kvi)
                for (mixed = 0; mixed < 2; ++mixed)
                    for (v = 0; v < 4; ++v) {
                        Case c;
                        c.D = dims[di];
                        c.q = qd[qi];
                        c.kv = kvi ? FA_DTYPE_FP8_E4M3 : qd[qi];
                        c.mixed = mixed;
                        c.variant = v;
                        run_case(&c, filter);
                        ++cases;
                    }
    fa_cuda_backend_destroy(be);
    fprintf(stderr, "attn_bits: %d cases, %d failed\n", cases, failures);
    return failures ? 1 : 0;
}
