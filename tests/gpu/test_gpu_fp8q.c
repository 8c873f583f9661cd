/* test_gpu_fp8q.c - the CUDA attention op with an fp8 (E4M3) query: q, K and V as e4m3 codes
   with per-(sequence, KV head) descales (or scalar k_scale / v_scale), out in bf16 or f16. On
   sm_90a this runs in the wgmma family (QGMMA for both GEMMs, P rounded to e4m3); elsewhere, or
   with FA_GPU_FAMILY=mma_sync, every such call must fail with FA_ERR_UNSUPPORTED and write
   nothing, which is what the program then checks.

   Every case: fresh random codes (never zeros), the CPU reference run on the same bytes with an
   f32 output, outputs and LSE poisoned first on the GPU. Compared per case: the largest and the
   root-mean-square |out - ref| against the largest |V| (dequantised) of the call, the LSE
   (absolute 2e-2 + relative 1e-3), rows past the last sequence still poisoned. The bounds
   (docs/semantics.md, "fp8 query") hold the error of e4m3 P (3 significand bits, relative
   rounding error up to 2^-4) and of QGMMA's accumulation; a layout or scale error is of the
   order of |V| itself. Also: a sequence run alone gives the same bits (batch invariance), and
   the calls the family does not take are rejected before anything is written. Heads 64, 128
   and 256 (the same bounds: the error of a row's output does not grow with the head size; P's
   rounding is per key and the logits are scaled by 1 / sqrt(D)). A block id outside the cache
   (heads 64 / 256 cases): the call runs, the next synchronize reports the id, the other
   sequences' rows keep their bits, the bad sequence's rows stay finite (nothing read).

   Usage: see gpu_test_util.h (--quick, --seed N, a name filter). */
#define _POSIX_C_SOURCE 200809L
#include "gpu_test_util.h"

#define MAXB 8

typedef struct qcase {
    int nseq, qlen[MAXB], klen[MAXB];
    int hq, hkv, bs;        /* bs: block size (paged), ignored when dense */
    int dense, causal, wl, wr, lse, descale, splits, alibi, sinks, pad;
    float softcap;
    fa_dtype odt;
    int alone;              /* > 0: sequence alone - 1 again by itself: the same bits */
    int qgroups;            /* q as two query-head groups (DCP's layout), each its own region */
    int hd;                 /* head size: 64, 128 or 256 */
    int bad;                /* > 0: then a block id outside the cache in sequence bad - 1 (paged) */
} qcase;

/* Whether the backend under test runs fp8-query calls at head size d: the CUDA backend where
   that head's prefill is in the wgmma family; the CPU backend of the harness's self-check build
   (GT_GPU_IS_CPU) runs every one. */
static int wgmma_on(int d)
{
#ifdef GT_GPU_IS_CPU
    (void)d;
    return 1;
#else /* !GT_GPU_IS_CPU */
    const fa_backend *be = gt_gpu();
    int i;
    for (i = 0; i < be->caps.num_dims; ++i)
        if (be->caps.dims[i].head_dim == d) return be->caps.dims[i].prefill_family == FA_KERNEL_FAMILY_WGMMA;
    return 0;
#endif /* GT_GPU_IS_CPU */
}

static void describe(const qcase *c, char *buf, size_t n)
{
    int len = snprintf(buf, n, "fp8 q d%d out %s %d/%d %s bs=%d B=%d [", c->hd, gt_dtype_name(c->odt), c->hq,
                       c->hkv, c->dense ? "dense" : "paged", c->bs, c->nseq);
    int b;
    for (b = 0; b < c->nseq && len < (int)n - 24; ++b)
        len += snprintf(buf + len, n - len, "%s%dx%d", b ? " " : "", c->qlen[b], c->klen[b]);
    len += snprintf(buf + len, n - len, "]%s%s%s%s%s%s%s%s", c->causal ? " causal" : "", c->lse ? " lse" : "",
                    c->descale ? " descale" : " scale", c->alibi ? " alibi" : "", c->sinks ? " sinks" : "",
                    c->alone ? " alone" : "", c->qgroups ? " qgroups" : "", c->bad ? " bad-id" : "");
    if (c->wl >= 0 || c->wr >= 0) len += snprintf(buf + len, n - len, " win(%d,%d)", c->wl, c->wr);
    if (c->softcap > 0) len += snprintf(buf + len, n - len, " cap%g", (double)c->softcap);
    if (c->splits > 1) snprintf(buf + len, n - len, " S=%d", c->splits);
}

/* e4m3 codes of uniform values in [-a, a), never zero */
static void fill_codes(uint8_t *x, int64_t n, float a) { gt_fill_uniform(x, n, FA_DTYPE_FP8_E4M3, -a, a); }

/* Runs one case; out_bits (optional, host, T * Hq * D of odt) receives the GPU output. */
static int run_case(const qcase *c, void *out_bits)
{
    fa_backend *gpu = gt_gpu(), *cpu = gt_cpu();
    const int B = c->nseq, Hq = c->hq, Hkv = c->hkv, bs = c->dense ? 1 : c->bs, D = c->hd;
    const int S = c->splits > 1 ? c->splits : 1, expect_ok = wgmma_on(D);
    const size_t osz = gt_dtype_size(c->odt);
    int32_t cu_q[MAXB + 1], cu_k[MAXB + 1], seqused[MAXB], maxq = 0, maxk = 0, minq = 0, T = 0, TK = 0;
    int32_t *bt = NULL;
    int64_t NB = 0, max_blocks = 0, i, kv_elems;
    int b, ok = 0;
    uint8_t *q, *k, *v;
    float qd[MAXB * 8], kd[MAXB * 8], vd[MAXB * 8], alibi[64], sinks[64];
    float *ref = NULL, *ref_lse = NULL, *glse = NULL;
    void *gout = NULL;
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    float *dlse = NULL, *dqd = NULL, *dkd = NULL, *dvd = NULL, *dsplit_o = NULL, *dsplit_l = NULL,
          *dal = NULL, *dsk = NULL;
    int32_t *dcu_q = NULL, *dcu_k = NULL, *dseq = NULL, *dbt = NULL;
    fa_attn_args ga, ca;
    double vmax = 0, max_err = 0, sq = 0;
    int64_t cnt = 0;

    cu_q[0] = cu_k[0] = 0;
    for (b = 0; b < B; ++b) {
        cu_q[b + 1] = cu_q[b] + c->qlen[b];
        cu_k[b + 1] = cu_k[b] + c->klen[b];
        seqused[b] = c->klen[b];
        if (c->qlen[b] > maxq) maxq = c->qlen[b];
        if (c->klen[b] > maxk) maxk = c->klen[b];
        if (c->qlen[b] > 0 && (minq == 0 || c->qlen[b] < minq)) minq = c->qlen[b];
        if ((c->klen[b] + bs - 1) / bs > max_blocks) max_blocks = (c->klen[b] + bs - 1) / bs;
    }
    T = cu_q[B] + c->pad;
    TK = cu_k[B];
    /* ---- inputs: q [T, Hq, D]; K/V paged [NB, bs, Hkv, D] (ids shuffled) or dense [TK, Hkv, D] */
    /* q: [T, Hq, D], or two groups of Hq / 2 heads, [T, Hq / 2, D] each, 256 bytes apart */
    const int qg = c->qgroups ? Hq / 2 : 0;
    const int64_t q_gs = qg ? (int64_t)T * qg * D + 256 : 0, q_elems = qg ? 2 * q_gs : (int64_t)T * Hq * D;
    q = gt_xmalloc((size_t)q_elems);
    fill_codes(q, q_elems, 2.0f);
    if (c->dense) {
        kv_elems = (int64_t)TK * Hkv * D;
    } else {
        int64_t used = 0;
        for (b = 0; b < B; ++b) used += (c->klen[b] + bs - 1) / bs;
        NB = used + 3;
        kv_elems = NB * bs * Hkv * D;
        bt = gt_xmalloc(sizeof(int32_t) * (size_t)(B * (max_blocks > 0 ? max_blocks : 1)));
        int64_t *perm = gt_xmalloc(sizeof(int64_t) * (size_t)NB);
        for (i = 0; i < NB; ++i) perm[i] = i;
        for (i = NB - 1; i > 0; --i) {
            int64_t j = gt_randint(i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        used = 0;
        for (b = 0; b < B; ++b)
            for (i = 0; i < max_blocks; ++i)
                bt[b * max_blocks + i] = i < (c->klen[b] + bs - 1) / bs ? (int32_t)perm[used++] : -1;
        free(perm);
    }
    k = gt_xmalloc((size_t)kv_elems);
    v = gt_xmalloc((size_t)kv_elems);
    fill_codes(k, kv_elems, 2.0f);
    fill_codes(v, kv_elems, 2.0f);
    for (b = 0; b < B * Hkv; ++b) {
        qd[b] = gt_uniform(0.5f, 1.5f);
        kd[b] = gt_uniform(0.5f, 1.5f);
        vd[b] = gt_uniform(0.5f, 1.5f);
    }
    for (b = 0; b < Hq; ++b) {
        alibi[b] = gt_uniform(0.01f, 0.2f);
        sinks[b] = gt_uniform(-1.f, 2.f);
    }
    /* vmax: the largest |V| of the call, dequantised */
    for (i = 0; i < kv_elems; ++i) {
        double x = fabs(gt_load(v, i, FA_DTYPE_FP8_E4M3)) * (c->descale ? 1.5 : 0.75);
        if (x > vmax) vmax = x;
    }

    memset(&ga, 0, sizeof ga);
    ga.q_token_stride = (int64_t)(qg ? qg : Hq) * D;
    ga.q_head_group = qg;
    ga.q_group_stride = q_gs;
    ga.q_head_stride = D;
    ga.q_dtype = FA_DTYPE_FP8_E4M3;
    ga.kv_dtype = FA_DTYPE_FP8_E4M3;
    ga.out_dtype = c->odt;
    ga.out_token_stride = (int64_t)Hq * D;
    ga.out_head_stride = D;
    ga.lse_head_stride = T;
    ga.k_row_stride = ga.v_row_stride = (int64_t)Hkv * D;
    ga.k_head_stride = ga.v_head_stride = D;
    ga.k_block_stride = ga.v_block_stride = c->dense ? 0 : (int64_t)bs * Hkv * D;
    ga.block_table_stride = max_blocks;
    ga.num_blocks = NB;
    ga.num_keys = c->dense ? TK : 0;
    ga.num_seqs = B;
    ga.num_tokens = T;
    ga.max_seqlen_q = maxq;
    ga.max_seqlen_k = maxk;
    ga.min_seqlen_q = minq;
    ga.num_heads_q = Hq;
    ga.num_heads_kv = Hkv;
    ga.head_size = D;
    ga.block_size = c->dense ? 0 : bs;
    ga.softmax_scale = 1.0f / sqrtf((float)D);
    ga.softcap = c->softcap;
    ga.causal = c->causal;
    ga.window_left = c->wl;
    ga.window_right = c->wr;
    ga.descale_batch_stride = Hkv;
    ga.descale_head_stride = 1;
    ga.k_scale = c->descale ? 1.0f : 0.75f;
    ga.v_scale = c->descale ? 1.0f : 0.75f;
    ga.alibi_batch_stride = 0;
    ga.num_splits = S;
    ca = ga;

    /* ---- the reference: CPU, same bytes, f32 out, no split */
    ref = gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
    ref_lse = gt_xmalloc(sizeof(float) * (size_t)T * Hq);
    ca.q = q;
    ca.k = k;
    ca.v = v;
    ca.out = ref;
    ca.out_dtype = FA_DTYPE_F32;
    ca.lse = ref_lse;
    ca.cu_seqlens_q = cu_q;
    ca.seqused_k = c->dense ? NULL : seqused;
    ca.cu_seqlens_k = c->dense ? cu_k : NULL;
    ca.block_table = bt;
    ca.q_descale = c->descale ? qd : NULL;
    ca.k_descale = c->descale ? kd : NULL;
    ca.v_descale = c->descale ? vd : NULL;
    ca.alibi_slopes = c->alibi ? alibi : NULL;
    ca.sinks = c->sinks ? sinks : NULL;
    ca.num_splits = 1;
    gt_poison(ref, sizeof(float) * (size_t)T * Hq * D);
    if (!gt_check(cpu->ops.attention(cpu->ctx, &ca), cpu, "cpu attention")) goto done;

    /* ---- the GPU call */
    dq = gt_dup(q, (size_t)q_elems);
    dk = gt_dup(k, (size_t)kv_elems);
    dv = gt_dup(v, (size_t)kv_elems);
    dcu_q = gt_dup(cu_q, sizeof(int32_t) * (B + 1));
    dcu_k = c->dense ? gt_dup(cu_k, sizeof(int32_t) * (B + 1)) : NULL;
    dseq = c->dense ? NULL : gt_dup(seqused, sizeof(int32_t) * B);
    dbt = c->dense ? NULL : gt_dup(bt, sizeof(int32_t) * (size_t)(B * (max_blocks > 0 ? max_blocks : 1)));
    dqd = gt_dup(qd, sizeof(float) * B * Hkv);
    dkd = gt_dup(kd, sizeof(float) * B * Hkv);
    dvd = gt_dup(vd, sizeof(float) * B * Hkv);
    dal = gt_dup(alibi, sizeof(float) * Hq);
    dsk = gt_dup(sinks, sizeof(float) * Hq);
    dout = gt_dmalloc(osz * (size_t)T * Hq * D);
    dlse = gt_dmalloc(sizeof(float) * (size_t)T * Hq);
    if (S > 1) {
        dsplit_o = gt_dmalloc(sizeof(float) * (size_t)S * T * Hq * D);
        dsplit_l = gt_dmalloc(sizeof(float) * (size_t)S * T * Hq);
    }
    gout = gt_xmalloc(osz * (size_t)T * Hq * D);
    glse = gt_xmalloc(sizeof(float) * (size_t)T * Hq);
    gt_poison(gout, osz * (size_t)T * Hq * D);
    gt_poison(glse, sizeof(float) * (size_t)T * Hq);
    if (!dq || !dk || !dv || !dcu_q || !dout || !dlse || !gt_h2d(dout, gout, osz * (size_t)T * Hq * D) ||
        !gt_h2d(dlse, glse, sizeof(float) * (size_t)T * Hq))
        goto done;
    ga.q = dq;
    ga.k = dk;
    ga.v = dv;
    ga.out = dout;
    ga.lse = c->lse ? dlse : NULL;
    ga.cu_seqlens_q = dcu_q;
    ga.seqused_k = dseq;
    ga.cu_seqlens_k = dcu_k;
    ga.block_table = dbt;
    ga.q_descale = c->descale ? dqd : NULL;
    ga.k_descale = c->descale ? dkd : NULL;
    ga.v_descale = c->descale ? dvd : NULL;
    ga.alibi_slopes = c->alibi ? dal : NULL;
    ga.sinks = c->sinks ? dsk : NULL;
    ga.split_out = dsplit_o;
    ga.split_lse = dsplit_l;
    {
        fa_status st = gpu->ops.attention(gpu->ctx, &ga);
        if (!expect_ok) { /* no wgmma family: rejected, nothing written */
            if (!gt_expect_status(st, FA_ERR_UNSUPPORTED, gpu, "gpu attention (fp8 q, no wgmma family)") ||
                !gt_sync() || !gt_d2h(gout, dout, osz * (size_t)T * Hq * D))
                goto done;
            for (i = 0; i < (int64_t)(osz * (size_t)T * Hq * D); ++i)
                if (((uint8_t *)gout)[i] != GT_POISON) {
                    gt_fail("a rejected call wrote out (byte %lld)", (long long)i);
                    goto done;
                }
            ok = 1;
            goto done;
        }
        if (!gt_check(st, gpu, "gpu attention") || !gt_sync()) goto done;
    }
    if (!gt_d2h(gout, dout, osz * (size_t)T * Hq * D) || !gt_d2h(glse, dlse, sizeof(float) * (size_t)T * Hq))
        goto done;
    /* ---- compare */
    ok = 1;
    for (i = 0; i < (int64_t)T * Hq * D && ok; ++i) {
        const int64_t t = i / ((int64_t)Hq * D);
        const float g = gt_load(gout, i, c->odt);
        if (t >= cu_q[B]) { /* past the last sequence: untouched */
            if (!isnan(g)) {
                gt_fail("out[%lld] past the last sequence was written (%g)", (long long)i, (double)g);
                ok = 0;
            }
            continue;
        }
        if (!isfinite(g) && isfinite(ref[i])) {
            gt_fail("out[%lld] (token %lld) = %g, ref %g", (long long)i, (long long)t, (double)g,
                    (double)ref[i]);
            ok = 0;
            break;
        }
        const double e = fabs((double)g - ref[i]);
        if (e > max_err) max_err = e;
        sq += e * e;
        ++cnt;
    }
    if (ok && cnt > 0) {
        const double rms = sqrt(sq / (double)cnt);
        printf("#     max |err| %.4g, rms %.4g, max |V| %.3g: %.4f / %.5f of it\n", max_err, rms, vmax,
               max_err / vmax, rms / vmax);
        if (max_err > 0.08 * vmax || rms > 0.01 * vmax) {
            gt_fail("error above the fp8 bound: max %.4g (bound %.4g), rms %.4g (bound %.4g)", max_err,
                    0.08 * vmax, rms, 0.01 * vmax);
            ok = 0;
        }
        gt()->case_max_err = max_err;
    }
    if (ok && c->lse) {
        int h;
        for (h = 0; h < Hq && ok; ++h)
            for (i = 0; i < cu_q[B] && ok; ++i) {
                const double g = glse[(int64_t)h * T + i], r = ref_lse[(int64_t)h * T + i];
                if (isinf(r) || isinf(g) ? !gt_same_special(g, r) : fabs(g - r) > 2e-2 + 1e-3 * fabs(r)) {
                    gt_fail("lse[h %d, t %lld] = %g, ref %g", h, (long long)i, g, r);
                    ok = 0;
                }
            }
    }
    if (ok && out_bits) memcpy(out_bits, gout, osz * (size_t)T * Hq * D);
    if (ok && c->alone > 0) { /* the same sequence alone: a one-sequence view of the same buffers */
        const int s = c->alone - 1;
        void *alone = gt_xmalloc(osz * (size_t)c->qlen[s] * Hq * D);
        fa_attn_args a1 = ga;
        a1.num_seqs = 1;
        a1.num_tokens = c->qlen[s];
        a1.q = (uint8_t *)dq + (int64_t)cu_q[s] * Hq * D;
        a1.out = (uint8_t *)dout + (int64_t)cu_q[s] * Hq * D * (int64_t)osz;
        a1.lse = NULL;
        if (c->dense)
            a1.cu_seqlens_k = dcu_k + s;
        else {
            a1.seqused_k = dseq + s;
            a1.block_table = dbt + (int64_t)s * max_blocks;
        }
        a1.q_descale = c->descale ? dqd + s * Hkv : NULL;
        a1.k_descale = c->descale ? dkd + s * Hkv : NULL;
        a1.v_descale = c->descale ? dvd + s * Hkv : NULL;
        a1.max_seqlen_q = a1.min_seqlen_q = c->qlen[s];
        a1.max_seqlen_k = c->klen[s];
        /* the view's cu_seqlens_q counts its own rows from 0; dense keys keep their rows */
        {
            int32_t cu1[2] = {0, c->qlen[s]};
            int32_t *dcu1 = gt_dup(cu1, sizeof cu1);
            a1.cu_seqlens_q = dcu1;
            if (c->dense) {
                int32_t ck1[2] = {cu_k[s], cu_k[s + 1]};
                int32_t *dck1 = gt_dup(ck1, sizeof ck1);
                a1.cu_seqlens_k = dck1;
                ok = gt_check(gpu->ops.attention(gpu->ctx, &a1), gpu, "gpu attention (alone)") && gt_sync();
                gt_dfree(dck1);
            } else {
                ok = gt_check(gpu->ops.attention(gpu->ctx, &a1), gpu, "gpu attention (alone)") && gt_sync();
            }
            gt_dfree(dcu1);
        }
        if (ok && gt_d2h(alone, a1.out, osz * (size_t)c->qlen[s] * Hq * D))
            ok = gt_compare_bytes("alone vs in the batch", alone,
                                  (uint8_t *)gout + (int64_t)cu_q[s] * Hq * D * (int64_t)osz,
                                  osz * (size_t)c->qlen[s] * Hq * D);
        else
            ok = 0;
        free(alone);
    }
#ifndef GT_GPU_IS_CPU /* (the CPU backend refuses such a call before it runs) */
    if (ok && c->bad > 0 && !c->dense) { /* a block id outside the cache: runs, reported, never read */
        const int s = c->bad - 1, col = (c->klen[s] + bs - 1) / bs / 2; /* a column of used keys */
        const int32_t bad_id = D == 64 ? (int32_t)NB : -3, good_id = bt[s * max_blocks + col];
        const size_t ob = osz * (size_t)T * Hq * D, row = osz * (size_t)Hq * D;
        const size_t bt_bytes = sizeof(int32_t) * (size_t)(B * max_blocks);
        uint8_t *got = gt_xmalloc(ob);
        char needle[128];
        const char *msg;
        fa_status st;
        bt[s * max_blocks + col] = bad_id;
        gt_poison(got, ob);
        ok = gt_h2d(dbt, bt, bt_bytes) && gt_h2d(dout, got, ob) &&
             gt_check(gpu->ops.attention(gpu->ctx, &ga), gpu, "gpu attention (bad id: runs)");
        if (ok) {
            st = gpu->ops.synchronize(gpu->ctx);
            msg = gpu->ops.last_error ? gpu->ops.last_error(gpu->ctx) : "";
            snprintf(needle, sizeof needle, "block_table id %d (row %d, column %d) is outside [0, %lld)",
                     (int)bad_id, s, col, (long long)NB);
            if (st != FA_ERR_INVALID_ARG || msg == NULL || strstr(msg, needle) == NULL) {
                gt_fail("synchronize after the bad id: %d \"%s\" (want \"%s\")", (int)st, msg ? msg : "",
                        needle);
                ok = 0;
            }
        }
        if (ok && gt_d2h(got, dout, ob)) {
            /* the other sequences' rows: the good call's bits; the bad one's: finite */
            int64_t nonfinite = 0;
            for (b = 0; b < B && ok; ++b) {
                if (b != s) {
                    ok = gt_compare_bytes("rows of the other sequences after the bad id",
                                          got + (size_t)cu_q[b] * row,
                                          (uint8_t *)gout + (size_t)cu_q[b] * row, (size_t)c->qlen[b] * row);
                    continue;
                }
                for (i = (int64_t)cu_q[b] * Hq * D; i < (int64_t)cu_q[b + 1] * Hq * D; ++i)
                    nonfinite += !isfinite(gt_load(got, i, c->odt));
            }
            if (ok && nonfinite > 0) {
                gt_fail("%lld non-finite outputs in the sequence with the bad id", (long long)nonfinite);
                ok = 0;
            }
        } else {
            ok = 0;
        }
        bt[s * max_blocks + col] = good_id;
        free(got);
    }
#endif /* GT_GPU_IS_CPU */
done:
    free(q);
    free(k);
    free(v);
    free(bt);
    free(ref);
    free(ref_lse);
    free(gout);
    free(glse);
    gt_dfree(dq);
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dout);
    gt_dfree(dlse);
    gt_dfree(dqd);
    gt_dfree(dkd);
    gt_dfree(dvd);
    gt_dfree(dal);
    gt_dfree(dsk);
    gt_dfree(dsplit_o);
    gt_dfree(dsplit_l);
    gt_dfree(dcu_q);
    gt_dfree(dcu_k);
    gt_dfree(dseq);
    gt_dfree(dbt);
    return ok;
}

static qcase base_case(void)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.hq = 8;
    c.hkv = 2;
    c.bs = 16;
    c.wl = c.wr = -1;
    c.lse = 1;
    c.descale = 1;
    c.odt = FA_DTYPE_BF16;
    c.hd = 128;
    return c;
}

static void run(const qcase *c)
{
    char name[256];
    describe(c, name, sizeof name);
    if (!gt_case("%s", name)) return;
    if (!run_case(c, NULL)) gt_fail("case failed");
    gt_case_end();
}

/* The three sequences most cases run: a 300-token prefill, a decode row over 777 keys and 129
   query rows over 1000 keys (a short last row block, a diagonal inside a tile). */
static void three_seqs(qcase *c)
{
    c->nseq = 3;
    c->qlen[0] = 300;
    c->klen[0] = 300;
    c->qlen[1] = 1;
    c->klen[1] = 777;
    c->qlen[2] = 129;
    c->klen[2] = 1000;
}

/* Prefill shapes over the features: block sizes, GQA, causal, windows, softcap, splits, ALiBi,
   sinks, dense, f16 out, scalar scales, decode rows beside long ones, rows past the last
   sequence. */
static void test_grid(void)
{
    static const int bss[] = {16, 8, 64, 128, 256};
    int f;
    for (f = 0; f < 16; ++f) {
        qcase c = base_case();
        if (gt_quick() && f % 2) continue;
        three_seqs(&c);
        c.bs = bss[f % 5];
        c.causal = f % 2 == 0;
        if (f % 4 == 1) c.hq = 4, c.hkv = 4;
        if (f % 8 == 3) c.hq = 16, c.hkv = 2;
        if (f == 2) c.wl = 100, c.wr = 0;
        if (f == 5) c.wl = 64, c.wr = 32, c.causal = 0;
        if (f == 4) c.softcap = 30.f;
        if (f == 6) c.splits = 3;
        if (f == 7) c.alibi = 1;
        if (f == 8) c.sinks = 1;
        if (f == 9) c.dense = 1;
        if (f == 10) c.odt = FA_DTYPE_F16;
        if (f == 11) c.descale = 0;
        if (f == 12) c.pad = 5, c.lse = 0;
        if (f == 13) c.alone = 3;
        if (f == 14) c.splits = 2, c.softcap = 20.f, c.causal = 1;
        if (f == 15) c.qlen[0] = 1024, c.klen[0] = 2048, c.alone = 1;
        run(&c);
    }
}

/* Heads 64 and 256 (head 256: 64-key tiles, so block sizes up to 64 are pages of a tile and 128 /
   256 are boxes inside a block): paged and dense, causal and not, windows, softcap, split-KV,
   ALiBi, sinks, 32/8 and 4/4 heads, descales per (sequence, KV head) and scalar scales, f16 and
   bf16 out, query-head groups, batch invariance, a bad block id. The --quick set: f = 0, 1, 3,
   4, 9. */
static void test_heads(int hd)
{
    int f;
    for (f = 0; f < 11; ++f) {
        qcase c = base_case();
        if (gt_quick() && !(f == 0 || f == 1 || f == 3 || f == 4 || f == 9)) continue;
        c.hd = hd;
        three_seqs(&c);
        switch (f) {
        case 0: c.causal = 1, c.hq = 32, c.hkv = 8, c.bs = 16; break;
        case 1: c.dense = 1, c.hq = 4, c.hkv = 4, c.odt = FA_DTYPE_F16; break;
        case 2: c.causal = 1, c.wl = 100, c.wr = 0, c.bs = hd == 256 ? 64 : 128; break;
        case 3: c.softcap = 30.f, c.bs = 8, c.causal = 1; break;
        case 4: c.splits = 3, c.alibi = 1, c.causal = 1, c.hq = 32, c.hkv = 8, c.bs = 32; break;
        case 5: c.sinks = 1, c.dense = 1, c.causal = 1, c.odt = FA_DTYPE_F16; break;
        case 6: c.wl = 64, c.wr = 32, c.bs = 256; break;
        case 7: c.descale = 0, c.bs = 128, c.hq = 4, c.hkv = 4, c.pad = 5, c.lse = 0; break;
        case 8: c.qgroups = 1, c.causal = 1, c.hq = 32, c.hkv = 8; break;
        case 9: c.bad = 3, c.causal = 1, c.bs = 16, c.splits = 2, c.softcap = 20.f; break;
        default: c.qlen[0] = 1024, c.klen[0] = 2048, c.causal = 1, c.alone = 1, c.bs = 64; break;
        }
        run(&c);
    }
}

/* Block sizes no TMA box serves (1, 3, 24, 48, 200 at head 128; 96 at head 256: the cp.async
   producer copying e4m3 rows in the boxes' layout, V transposed as a box's): heads 64 / 128 /
   256, causal and not, splits, a window, softcap, ALiBi / sinks, f16 out, a bad block id. The
   --quick set: f = 0, 2, 4, 6. */
static void test_gather(void)
{
    static const int hds[] = {128, 64, 256}, bss[] = {1, 3, 24, 48, 200, 96, 5, 40};
    int f;
    for (f = 0; f < 8; ++f) {
        qcase c = base_case();
        if (gt_quick() && f % 2) continue;
        c.hd = hds[f % 3];
        three_seqs(&c);
        c.bs = bss[f];
        c.causal = f % 2 == 0;
        if (f == 1) c.splits = 3, c.alibi = 1;
        if (f == 2) c.wl = 100, c.wr = 0, c.odt = FA_DTYPE_F16;
        if (f == 3) c.softcap = 30.f, c.hq = 32, c.hkv = 8;
        if (f == 4) c.sinks = 1, c.hq = 4, c.hkv = 4;
        if (f == 5) c.descale = 0, c.pad = 5;
        if (f == 6) c.bad = 2, c.splits = 2;
        if (f == 7) c.qlen[0] = 1024, c.klen[0] = 2048, c.alone = 1;
        run(&c);
    }
}

/* GQA packing (queries of at most 127 tokens, a power-of-two group: the rows of a row block are
   (token, query head) pairs of one KV head): heads 128 / 64 / 256, groups 4 / 8 / 2, a cp.async
   block size, split-KV with ALiBi and sinks, query-head groups, and a sequence packed alone
   against the same sequence unpacked in a batch with a 300-token query, bit for bit. */
static void test_packed(void)
{
    int f;
    for (f = 0; f < 5; ++f) {
        qcase c = base_case();
        if (gt_quick() && f % 2) continue;
        c.nseq = 3;
        c.qlen[0] = 5, c.klen[0] = 600;
        c.qlen[1] = 40, c.klen[1] = 1000;
        c.qlen[2] = 1, c.klen[2] = 777;
        c.causal = 1;
        c.hq = 32, c.hkv = 8;
        switch (f) {
        case 0: break;
        case 1: c.hd = 64, c.hq = 16, c.hkv = 2, c.bs = 3, c.wl = 100, c.odt = FA_DTYPE_F16; break;
        case 2: c.hd = 256, c.hq = 8, c.hkv = 4, c.splits = 2, c.alibi = 1, c.sinks = 1; break;
        case 3: c.qgroups = 1; break;
        default: c.qlen[2] = 300, c.klen[2] = 300, c.alone = 2; break;
        }
        run(&c);
    }
}

/* Query-head groups (DCP: two groups over the same KV heads, one launch each). */
static void test_groups(void)
{
    qcase c = base_case();
    c.nseq = 2;
    c.qlen[0] = 200;
    c.klen[0] = 500;
    c.qlen[1] = 1;
    c.klen[1] = 300;
    c.causal = 1;
    c.qgroups = 1;
    run(&c);
}

/* A long prefill (several row blocks, many key tiles: the ring's phases wrap many times). */
static void test_long(void)
{
    qcase c = base_case();
    if (gt_quick()) return;
    c.nseq = 2;
    c.qlen[0] = 2048;
    c.klen[0] = 4096;
    c.qlen[1] = 700;
    c.klen[1] = 700;
    c.causal = 1;
    c.hq = 32;
    c.hkv = 8;
    run(&c);
}

/* Calls the fp8 path does not take: rejected with FA_ERR_UNSUPPORTED (an E5M2 cache:
   FA_ERR_INVALID_ARG), nothing written. */
static void test_rejected(void)
{
    static const char *what[] = {"head_size 96", "out_dtype f32", "kv_dtype e5m2"};
    int f;
#ifdef GT_GPU_IS_CPU /* (the CPU backend of the self-check build takes those calls) */
    return;
#endif
    for (f = 0; f < 3; ++f) {
        fa_backend *gpu = gt_gpu();
        fa_attn_args a;
        int32_t cu[2] = {0, 4}, su[1] = {20}, btab[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        const int Dh = f == 0 ? 96 : 128, bs = 16;
        uint8_t *hq = gt_xmalloc(4 * 2 * Dh), *hk = gt_xmalloc((size_t)8 * bs * 2 * Dh);
        uint16_t host_out[4 * 2 * 128];
        void *dq, *dk, *dout;
        int32_t *dcu, *dsu, *dbt;
        size_t i;
        if (!gt_case("fp8 q rejected: %s", what[f])) {
            free(hq);
            free(hk);
            continue;
        }
        fill_codes(hq, 4 * 2 * Dh, 1.f);
        fill_codes(hk, (int64_t)8 * bs * 2 * Dh, 1.f);
        dq = gt_dup(hq, (size_t)4 * 2 * Dh);
        dk = gt_dup(hk, (size_t)8 * bs * 2 * Dh);
        dcu = gt_dup(cu, sizeof cu);
        dsu = gt_dup(su, sizeof su);
        dbt = gt_dup(btab, sizeof btab);
        gt_poison(host_out, sizeof host_out);
        dout = gt_dup(host_out, sizeof host_out);
        memset(&a, 0, sizeof a);
        a.q = dq;
        a.q_token_stride = 2 * Dh;
        a.q_head_stride = Dh;
        a.q_dtype = FA_DTYPE_FP8_E4M3;
        a.k = a.v = dk;
        a.k_block_stride = a.v_block_stride = (int64_t)bs * 2 * Dh;
        a.k_row_stride = a.v_row_stride = 2 * Dh;
        a.k_head_stride = a.v_head_stride = Dh;
        a.kv_dtype = f == 2 ? FA_DTYPE_FP8_E5M2 : FA_DTYPE_FP8_E4M3;
        a.out_dtype = f == 1 ? FA_DTYPE_F32 : FA_DTYPE_BF16;
        a.out = dout;
        a.out_token_stride = 2 * Dh;
        a.out_head_stride = Dh;
        a.cu_seqlens_q = dcu;
        a.seqused_k = dsu;
        a.block_table = dbt;
        a.block_table_stride = 8;
        a.num_blocks = 8;
        a.num_seqs = 1;
        a.num_tokens = 4;
        a.max_seqlen_q = 4;
        a.max_seqlen_k = 20;
        a.num_heads_q = 2;
        a.num_heads_kv = 2;
        a.head_size = Dh;
        a.block_size = bs;
        a.softmax_scale = 0.1f;
        a.window_left = a.window_right = -1;
        a.k_scale = a.v_scale = 1.f;
        if (dq && dk && dout && dcu && dsu && dbt) {
            const fa_status st = gpu->ops.attention(gpu->ctx, &a);
            const char *msg = gpu->ops.last_error ? gpu->ops.last_error(gpu->ctx) : "";
            /* (an E5M2 cache under an fp8 query is an invalid combination, not a missing kernel) */
            if (gt_expect_status(st, f == 2 ? FA_ERR_INVALID_ARG : FA_ERR_UNSUPPORTED, gpu, what[f]) &&
                gt_sync() && gt_d2h(host_out, dout, sizeof host_out)) {
                for (i = 0; i < sizeof host_out / 2; ++i)
                    if (host_out[i] != 0xFFFF) {
                        gt_fail("a rejected call wrote out");
                        break;
                    }
                printf("#     %s\n", msg ? msg : "");
            }
        }
        gt_dfree(dq);
        gt_dfree(dk);
        gt_dfree(dout);
        gt_dfree(dcu);
        gt_dfree(dsu);
        gt_dfree(dbt);
        free(hq);
        free(hk);
        gt_case_end();
    }
}

int main(int argc, char **argv)
{
    if (gt_init(argc, argv) != 0) return gt_finish();
    printf("# fp8 query path: %s\n",
           wgmma_on(128) ? "the wgmma family" : "none (every call must be rejected)");
    test_grid();
    test_heads(64);
    test_heads(256);
    test_gather();
    test_packed();
    test_groups();
    test_long();
    test_rejected();
    return gt_finish();
}
