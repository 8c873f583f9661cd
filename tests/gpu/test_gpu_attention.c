/* test_gpu_attention.c - the CUDA attention op against the CPU reference backend.

   Every case: fresh random inputs (never zeros), the reference run in float32 on exact copies
   of the GPU's inputs (q and 16-bit K/V widened to f32; fp8 caches shared byte for byte),
   outputs and LSE poisoned (0xFF = NaN) on the GPU first, every status checked. Compared: every
   output row the call must write (|err| <= 2e-2 for f16/bf16 K/V, 1.5e-1 for fp8, against the
   f32 reference) and its LSE; rows it must not write (tokens past cu_seqlens_q[B], sequences
   whose split plan is 0) must still hold the poison. K/V caches are filled with NaN first, so
   unused block-table slots, rows at or past seqused_k and never-referenced blocks hold NaN.

   Grid: head sizes {40,64,80,96,128,192,256}; block sizes {16,32,64,1,3,8}; heads (Hq, Hkv) (4,4),
   (8,2), (8,1), (32,8); causal or not; windows; softcap; ALiBi ([Hq] and [B,Hq]); sinks; LSE;
   fp8 E4M3 / E5M2 with per-(sequence, kv head) descales or scalar scales; splits 1, 2, 7 with a
   plan (0, 1 and more splits per sequence); batches mixing q_len 1 with long prefills;
   contexts up to 32k; NHD and HND; dense (cu_seqlens_k); strided / grouped q; block tables
   with an offset first column, a wide row stride and shuffled, repeated ids; a cache of more
   than 2^31 elements (64-bit offsets); batch invariance with num_splits 1; argument errors.

   Timings are bench/bench_gpu's (its prefill and decode rows hold the shapes the old --bench of
   this program timed). Usage: see gpu_test_util.h (--quick, --seed N, a name filter). */
#define _POSIX_C_SOURCE 200809L
#include "gpu_test_util.h"


#define MAXS 512

typedef struct acase {
    fa_dtype qdt, kvdt;
    int32_t D, bs, hq, hkv;
    int32_t nseq;
    int32_t qlen[MAXS], klen[MAXS];
    int causal, wl, wr;
    float softcap;
    int alibi;                    /* 0 none, 1 [Hq], 2 [B, Hq] with a batch stride */
    int sinks;                    /* 0 none, 1 moderate, 2 dominant (z far above the logits) */
    int lse;
    int hnd, dense;
    int no_num_keys; /* dense without num_keys (the wgmma family needs it: mma.sync runs it) */
    int splits;                   /* static S (<= 1: no split) */
    int use_plan, plan[MAXS];     /* plan[b] = splits of sequence b (0 = untouched) */
    int descale;                  /* fp8: 1 per-(b, g) arrays, 0 scalar k_scale / v_scale */
    int pad_tokens;               /* tokens past cu_seqlens_q[B] (must stay untouched) */
    int q_strided;                /* q: token stride > Hq*D, two head groups with a gap */
    int q_groups;                 /* with q_strided: that many head groups (0: 2) */
    int shuffle;                  /* block ids: shuffled pool with repeats across sequences */
    int alone;                    /* > 0: also run sequence alone - 1 by itself (a one-sequence
                                     view of the same buffers); its output bits must match */
    int nan_v;                    /* > 0: V of key nan_v - 1 of sequence 0 (KV head 0, every dim)
                                     is NaN: a valid key, masked for some rows of a tile */
    float amp;                    /* > 0: q and K drawn amp times larger (extreme logits) */
    int qscale;                   /* bf16 q: query head h times k_qscale[h % 8] (a zero head, a
                                     subnormal one, 2^-60 .. 2^100): the E4M3 decode tile's
                                     per-head power-of-two scale of q into f16 */
    int counters;                 /* > 0: run again with work_counters (zeroed, FA_WORK_COUNTERS
                                     words) this many times: the same output and LSE bits, the
                                     words zero after every call */
    int pack_ab;                  /* the case runs with GQA packing on (FA_CUDA_GQA_PACK_ON); run
                                     it again with packing off: the same output and LSE bits
                                     (split-KV: checked against the reference instead) */
} acase;

static const float k_qscale[8] = {0.0f, 0x1p-133f, 0x1p-60f, 0x1p-20f, 1.0f, 0x1p20f, 0x1p60f, 0x1p100f};

static const char *dn(fa_dtype t) { return gt_dtype_name(t); }

static int is_fp8(fa_dtype t) { return t == FA_DTYPE_FP8_E4M3 || t == FA_DTYPE_FP8_E5M2; }

/* ------------------------------------------------------------------------------------------ */
/* one case: build inputs, run both backends, compare */

typedef struct host_bufs {
    void *q, *k, *v;              /* GPU-dtype host copies */
    float *qf, *kf, *vf;          /* f32 copies for the reference (16-bit K/V) */
    int32_t *cu_q, *seqused, *cu_k, *bt, *plan;
    float *alibi, *sinks, *kdesc, *vdesc;
} host_bufs;

/* Whether the kernel writes token t's rows: t belongs to a sequence whose plan entry is not 0
   (tokens past the last sequence and sequences planned to 0 splits stay untouched). */
static int token_written(const host_bufs *hb, int32_t B, int32_t t)
{
    int32_t b;
    for (b = 0; b < B; ++b)
        if (t >= hb->cu_q[b] && t < hb->cu_q[b + 1]) return hb->plan[1 + b] != 0;
    return 0;
}

static void describe(const acase *c, char *buf, size_t n)
{
    int b, len = 0, shown = c->nseq < 6 ? c->nseq : 6;
    len += snprintf(buf + len, n - len, "q %s kv %s D=%d bs=%d %d/%d %s%s B=%d [", dn(c->qdt), dn(c->kvdt),
                    c->D, c->bs, c->hq, c->hkv, c->dense ? "dense" : (c->hnd ? "HND" : "NHD"),
                    c->q_strided ? " qstrided" : "", c->nseq);
    for (b = 0; b < shown && len < (int)n - 24; ++b)
        len += snprintf(buf + len, n - len, "%s%dx%d", b ? " " : "", c->qlen[b], c->klen[b]);
    len += snprintf(buf + len, n - len, "%s]", c->nseq > shown ? " ..." : "");
    if (c->q_strided && c->q_groups) len += snprintf(buf + len, n - len, " groups=%d", c->q_groups);
    if (c->no_num_keys) len += snprintf(buf + len, n - len, " num_keys=0");
    if (c->causal) len += snprintf(buf + len, n - len, " causal");
    if (c->wl >= 0 || c->wr >= 0) len += snprintf(buf + len, n - len, " win(%d,%d)", c->wl, c->wr);
    if (c->softcap > 0) len += snprintf(buf + len, n - len, " cap%g", (double)c->softcap);
    if (c->alibi) len += snprintf(buf + len, n - len, " alibi%s", c->alibi == 2 ? "[B,H]" : "");
    if (c->sinks) len += snprintf(buf + len, n - len, " sink%s", c->sinks == 2 ? "!" : "");
    if (c->lse) len += snprintf(buf + len, n - len, " lse");
    if (is_fp8(c->kvdt)) len += snprintf(buf + len, n - len, c->descale ? " descale" : " scale");
    if (c->qscale) len += snprintf(buf + len, n - len, " q-heads 0..2^100");
    if (c->splits > 1)
        len += snprintf(buf + len, n - len, " S=%d%s", c->splits, c->use_plan ? "+plan" : "");
    else if (c->use_plan)
        len += snprintf(buf + len, n - len, " plan");
    if (c->shuffle) len += snprintf(buf + len, n - len, " shuffled");
    if (c->alone) len += snprintf(buf + len, n - len, " alone=%d", c->alone - 1);
    if (c->nan_v) len += snprintf(buf + len, n - len, " nanV@%d", c->nan_v - 1);
}

/* Runs one case; returns 1 when it passed. out_bits (optional) receives the GPU output. */
static int run_case(const acase *c, void **out_bits_ret)
{
    fa_backend *gpu = gt_gpu(), *cpu = gt_cpu();
    const int32_t B = c->nseq, Hq = c->hq, Hkv = c->hkv, D = c->D;
    const int fp8 = is_fp8(c->kvdt);
    const size_t qsz = gt_dtype_size(c->qdt), kvsz = gt_dtype_size(c->kvdt);
    const int S = c->splits > 1 ? c->splits : 1;
    int32_t T = 0, b, h, t, i;
    int64_t qts, qhs, qgs, ots, ohs, lhs, q_elems, out_elems, lse_elems;
    int32_t qhg = 0, ng;
    int64_t NB = 0, kv_elems, kbs, krs, khs, bt_stride = 0, bt_off = 0, TK = 0;
    int32_t max_blocks = 0, max_q = 0, max_k = 0, min_q = 0;
    host_bufs hb;
    void *gout = NULL, *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    float *ref_out = NULL, *ref_lse = NULL, *glse = NULL, *dlse = NULL;
    float *hsplit_out = NULL, *hsplit_lse = NULL, *dsplit_out = NULL, *dsplit_lse = NULL;
    int32_t *dcu_q = NULL, *dseq = NULL, *dcu_k = NULL, *dbt = NULL, *dplan = NULL;
    float *dalibi = NULL, *dsinks = NULL, *dkdesc = NULL, *dvdesc = NULL;
    int64_t alibi_bs = 0, dbs = 0, dhs = 0;
    float kscale = 1.0f, vscale = 1.0f;
    fa_attn_args ga, ca;
    int ok = 0;

    memset(&hb, 0, sizeof hb);
    for (b = 0; b < B; ++b) {
        T += c->qlen[b];
        if (c->qlen[b] > max_q) max_q = c->qlen[b];
        if (c->qlen[b] > 0 && (min_q == 0 || c->qlen[b] < min_q)) min_q = c->qlen[b];
        if (c->klen[b] > max_k) max_k = c->klen[b];
        max_blocks =
            (c->klen[b] + c->bs - 1) / c->bs > max_blocks ? (c->klen[b] + c->bs - 1) / c->bs : max_blocks;
        TK += c->klen[b];
    }
    T += c->pad_tokens;

    /* ---- q (optionally two head groups with a gap, token stride past the heads) */
    ng = c->q_groups > 0 ? c->q_groups : 2;
    if (c->q_strided && Hq % ng == 0 && (Hq / ng) % Hkv == 0) {   /* groups: multiples of Hkv */
        qhg = Hq / ng;
        qhs = D;
        qgs = (int64_t)qhg * D + 8;
        qts = ng * qgs + 16;
    } else {
        qhg = 0;
        qhs = D;
        qgs = 0;
        qts = (int64_t)Hq * D + (c->q_strided ? 24 : 0);
    }
    q_elems = (int64_t)T * qts + 8;
    hb.q = gt_xmalloc((size_t)q_elems * qsz);
    hb.qf = (float *)gt_xmalloc((size_t)q_elems * sizeof(float));
    gt_poison(hb.q, (size_t)q_elems * qsz);                  /* gaps: NaN, never read */
    for (t = 0; t < T; ++t)
        for (h = 0; h < Hq; ++h) {
            int64_t o = (int64_t)(qhg ? h / qhg : 0) * qgs + (int64_t)(qhg ? h % qhg : h) * qhs + t * qts;
            gt_fill_uniform((char *)hb.q + o * qsz, D, c->qdt, c->amp > 0 ? -2.0f * c->amp : -2.0f,
                            c->amp > 0 ? 2.0f * c->amp : 2.0f);
            if (c->qscale)
                for (i = 0; i < D; ++i)
                    gt_store(hb.q, o + i, c->qdt, gt_load(hb.q, o + i, c->qdt) * k_qscale[h % 8]);
        }
    for (i = 0; i < q_elems; ++i) hb.qf[i] = gt_load(hb.q, i, c->qdt);

    /* ---- sequences */
    hb.cu_q = (int32_t *)gt_xmalloc(sizeof(int32_t) * (B + 1));
    hb.seqused = (int32_t *)gt_xmalloc(sizeof(int32_t) * (B + 1));
    hb.cu_k = (int32_t *)gt_xmalloc(sizeof(int32_t) * (B + 1));
    hb.cu_q[0] = 0;
    hb.cu_k[0] = 0;
    for (b = 0; b < B; ++b) {
        hb.cu_q[b + 1] = hb.cu_q[b] + c->qlen[b];
        hb.cu_k[b + 1] = hb.cu_k[b] + c->klen[b];
        hb.seqused[b] = c->klen[b];
    }
    hb.plan = (int32_t *)gt_xmalloc(sizeof(int32_t) * (B + 1));
    hb.plan[0] = S;
    for (b = 0; b < B; ++b) hb.plan[1 + b] = c->use_plan ? c->plan[b] : S;

    /* ---- fp8 scales: stored = fp8(x / scale), per (b, g) or scalar */
    if (fp8) {
        dbs = Hkv + 1;   /* a batch stride that is not Hkv */
        dhs = 1;
        hb.kdesc = (float *)gt_xmalloc(sizeof(float) * (size_t)(B * dbs + 1));
        hb.vdesc = (float *)gt_xmalloc(sizeof(float) * (size_t)(B * dbs + 1));
        for (i = 0; i < B * dbs + 1; ++i) {
            hb.kdesc[i] = gt_uniform(0.02f, 0.06f);
            hb.vdesc[i] = gt_uniform(0.02f, 0.06f);
        }
        kscale = gt_uniform(0.02f, 0.06f);
        vscale = gt_uniform(0.02f, 0.06f);
    }

    /* ---- K / V: paged cache (NaN everywhere, then the rows of each sequence) or dense rows */
    if (c->dense) {
        krs = (int64_t)Hkv * D + 8;
        khs = D;
        kbs = 0;
        kv_elems = (TK + 3) * krs;   /* 3 NaN rows past the last sequence */
    } else {
        int32_t used = 0;
        for (b = 0; b < B; ++b) used += (c->klen[b] + c->bs - 1) / c->bs;
        NB = used + used / 4 + 3;    /* unused blocks stay NaN */
        kbs = (int64_t)c->bs * Hkv * D;
        if (c->hnd) {
            krs = D;
            khs = (int64_t)c->bs * D;
        } else {
            krs = (int64_t)Hkv * D;
            khs = D;
        }
        kv_elems = NB * kbs;
        bt_off = 1 + gt_randint(3);
        bt_stride = bt_off + max_blocks + 2 + gt_randint(3);
        hb.bt = (int32_t *)gt_xmalloc(sizeof(int32_t) * (size_t)(B * bt_stride + 1));
        for (i = 0; i < B * bt_stride + 1; ++i)
            hb.bt[i] = (int32_t)(gt_randint(2) ? 0x7fffff00 : -5);   /* unused columns: garbage */
        {
            /* ids: a shuffled permutation; with shuffle, some sequences reuse earlier blocks */
            int32_t *perm = (int32_t *)gt_xmalloc(sizeof(int32_t) * (size_t)NB);
            int32_t next = 0;
            for (i = 0; i < NB; ++i) perm[i] = i;
            if (c->shuffle)
                for (i = (int32_t)NB - 1; i > 0; --i) {
                    int32_t j = (int32_t)gt_randint(i + 1), tmp = perm[i];
                    perm[i] = perm[j];
                    perm[j] = tmp;
                }
            for (b = 0; b < B; ++b) {
                int32_t nblk = (c->klen[b] + c->bs - 1) / c->bs, j;
                for (j = 0; j < nblk; ++j) {
                    int32_t id;
                    if (c->shuffle && b > 0 && gt_randint(4) == 0 && next > 0)
                        id = perm[gt_randint(next)];         /* repeated id */
                    else
                        id = perm[next++];
                    hb.bt[b * bt_stride + bt_off + j] = id;
                }
            }
            free(perm);
        }
    }
    hb.k = gt_xmalloc((size_t)kv_elems * kvsz);
    hb.v = gt_xmalloc((size_t)kv_elems * kvsz);
    gt_poison(hb.k, (size_t)kv_elems * kvsz);
    gt_poison(hb.v, (size_t)kv_elems * kvsz);
    for (b = 0; b < B; ++b) {
        int32_t j, g, d;
        for (j = 0; j < c->klen[b]; ++j) {
            int64_t row;
            if (c->dense)
                row = (int64_t)(hb.cu_k[b] + j) * krs;
            else
                row = (int64_t)hb.bt[b * bt_stride + bt_off + j / c->bs] * kbs + (int64_t)(j % c->bs) * krs;
            for (g = 0; g < Hkv; ++g) {
                float ks = 1.0f, vs = 1.0f;
                if (fp8) {
                    ks = c->descale ? hb.kdesc[b * dbs + g * dhs] : kscale;
                    vs = c->descale ? hb.vdesc[b * dbs + g * dhs] : vscale;
                }
                for (d = 0; d < D; ++d) {
                    int64_t o = row + (int64_t)g * khs + d;
                    float kx, vx;
                    do {
                        kx = gt_uniform(-2.0f, 2.0f);
                    } while (kx == 0.0f);
                    do {
                        vx = gt_uniform(-1.0f, 1.0f);
                    } while (vx == 0.0f);
                    gt_store(hb.k, o, c->kvdt, (c->amp > 0 && !fp8 ? kx * c->amp : kx) / ks);
                    gt_store(hb.v, o, c->kvdt, (b == 0 && g == 0 && j == c->nan_v - 1) ? NAN : vx / vs);
                }
            }
        }
    }
    if (!fp8) {
        hb.kf = (float *)gt_xmalloc(sizeof(float) * (size_t)kv_elems);
        hb.vf = (float *)gt_xmalloc(sizeof(float) * (size_t)kv_elems);
        for (i = 0; i < kv_elems; ++i) {
            hb.kf[i] = gt_load(hb.k, i, c->kvdt);
            hb.vf[i] = gt_load(hb.v, i, c->kvdt);
        }
    }

    /* ---- ALiBi slopes, sinks */
    if (c->alibi) {
        alibi_bs = c->alibi == 2 ? Hq + 1 : 0;
        hb.alibi = (float *)gt_xmalloc(sizeof(float) * (size_t)((c->alibi == 2 ? B : 1) * (Hq + 1)));
        for (i = 0; i < (c->alibi == 2 ? B : 1) * (Hq + 1); ++i) hb.alibi[i] = gt_uniform(0.01f, 0.3f);
    }
    if (c->sinks) {
        hb.sinks = (float *)gt_xmalloc(sizeof(float) * (size_t)Hq);
        for (h = 0; h < Hq; ++h)
            hb.sinks[h] = c->sinks == 2 ? gt_uniform(25.0f, 40.0f) : gt_uniform(-1.0f, 3.0f);
    }

    /* ---- output layout: padded strides */
    ohs = D + 8;
    ots = (int64_t)Hq * ohs + 16;
    out_elems = (int64_t)T * ots;
    lhs = T + 5;
    lse_elems = (int64_t)Hq * lhs;

    /* ---- the argument structs (the GPU's, then the reference's from it) */
    memset(&ga, 0, sizeof ga);
    ga.q_token_stride = qts;
    ga.q_head_stride = qhs;
    ga.q_group_stride = qgs;
    ga.q_head_group = qhg;
    ga.q_dtype = c->qdt;
    ga.k_block_stride = kbs;
    ga.k_row_stride = krs;
    ga.k_head_stride = khs;
    ga.v_block_stride = kbs;
    ga.v_row_stride = krs;
    ga.v_head_stride = khs;
    ga.kv_dtype = c->kvdt;
    ga.out_token_stride = ots;
    ga.out_head_stride = ohs;
    ga.lse_head_stride = lhs;
    ga.block_table_stride = bt_stride;
    ga.num_seqs = B;
    ga.num_tokens = T;
    ga.max_seqlen_q = max_q;
    ga.max_seqlen_k = max_k;
    ga.num_heads_q = Hq;
    ga.num_heads_kv = Hkv;
    ga.head_size = D;
    ga.block_size = c->dense ? 0 : c->bs;
    ga.num_blocks = c->dense ? 0 : NB;
    ga.num_keys = c->dense && !c->no_num_keys ? TK + 3 : 0; /* the rows of k and v */
    ga.softmax_scale = 1.0f / sqrtf((float)D);
    ga.softcap = c->softcap;
    ga.causal = c->causal;
    ga.window_left = c->wl;
    ga.window_right = c->wr;
    ga.alibi_batch_stride = alibi_bs;
    ga.descale_batch_stride = dbs;
    ga.descale_head_stride = dhs;
    ga.k_scale = kscale;
    ga.v_scale = vscale;
    ga.num_splits = S;

    /* ---- device copies */
    dq = gt_dup(hb.q, (size_t)q_elems * qsz);
    dk = gt_dup(hb.k, (size_t)kv_elems * kvsz);
    dv = gt_dup(hb.v, (size_t)kv_elems * kvsz);
    dout = gt_dmalloc((size_t)out_elems * qsz);
    dcu_q = (int32_t *)gt_dup(hb.cu_q, sizeof(int32_t) * (B + 1));
    if (!dq || !dk || !dv || !dout || !dcu_q) goto done;
    if (c->dense) {
        if (!(dcu_k = (int32_t *)gt_dup(hb.cu_k, sizeof(int32_t) * (B + 1)))) goto done;
    } else {
        if (!(dseq = (int32_t *)gt_dup(hb.seqused, sizeof(int32_t) * B))) goto done;
        if (!(dbt = (int32_t *)gt_dup(hb.bt, sizeof(int32_t) * (size_t)(B * bt_stride + 1)))) goto done;
    }
    if (c->use_plan && !(dplan = (int32_t *)gt_dup(hb.plan, sizeof(int32_t) * (B + 1)))) goto done;
    if (c->alibi &&
        !(dalibi = (float *)gt_dup(hb.alibi, sizeof(float) * (size_t)((c->alibi == 2 ? B : 1) * (Hq + 1)))))
        goto done;
    if (c->sinks && !(dsinks = (float *)gt_dup(hb.sinks, sizeof(float) * (size_t)Hq))) goto done;
    if (fp8 && c->descale) {
        if (!(dkdesc = (float *)gt_dup(hb.kdesc, sizeof(float) * (size_t)(B * dbs + 1)))) goto done;
        if (!(dvdesc = (float *)gt_dup(hb.vdesc, sizeof(float) * (size_t)(B * dbs + 1)))) goto done;
    }
    if (c->lse && !(dlse = (float *)gt_dmalloc(sizeof(float) * (size_t)lse_elems))) goto done;
    if (S > 1) {
        dsplit_out = (float *)gt_dmalloc(sizeof(float) * (size_t)S * T * Hq * D);
        dsplit_lse = (float *)gt_dmalloc(sizeof(float) * (size_t)S * Hq * T);
        if (!dsplit_out || !dsplit_lse) goto done;
        /* stale partials must not matter: poison the workspace too */
        if (!gt_check(gpu->ops.fill(gpu->ctx, dsplit_out, 0, GT_POISON,
                                    sizeof(float) * (size_t)S * T * Hq * D, 1),
                      gpu, "fill") ||
            !gt_check(gpu->ops.fill(gpu->ctx, dsplit_lse, 0, GT_POISON, sizeof(float) * (size_t)S * Hq * T,
                                    1),
                      gpu, "fill"))
            goto done;
    }
    if (!gt_check(gpu->ops.fill(gpu->ctx, dout, 0, GT_POISON, (size_t)out_elems * qsz, 1), gpu, "fill"))
        goto done;
    if (dlse && !gt_check(gpu->ops.fill(gpu->ctx, dlse, 0, GT_POISON, sizeof(float) * (size_t)lse_elems, 1),
                          gpu, "fill"))
        goto done;

    ca = ga;
    ga.q = dq;
    ga.k = dk;
    ga.v = dv;
    ga.out = dout;
    ga.lse = dlse;
    ga.cu_seqlens_q = dcu_q;
    ga.seqused_k = dseq;
    ga.cu_seqlens_k = dcu_k;
    ga.block_table = dbt ? dbt + bt_off : NULL;
    ga.alibi_slopes = dalibi;
    ga.sinks = dsinks;
    ga.k_descale = dkdesc;
    ga.v_descale = dvdesc;
    ga.split_plan = dplan;
    ga.split_out = dsplit_out;
    ga.split_lse = dsplit_lse;
    if (!gt_check(gpu->ops.attention(gpu->ctx, &ga), gpu, "attention")) goto done;

    /* ---- reference: f32 q (and f32 K/V unless fp8), f32 out */
    ref_out = (float *)gt_xmalloc(sizeof(float) * (size_t)out_elems);
    ref_lse = (float *)gt_xmalloc(sizeof(float) * (size_t)lse_elems);
    gt_poison(ref_out, sizeof(float) * (size_t)out_elems);
    gt_poison(ref_lse, sizeof(float) * (size_t)lse_elems);
    if (S > 1) {
        hsplit_out = (float *)gt_xmalloc(sizeof(float) * (size_t)S * T * Hq * D);
        hsplit_lse = (float *)gt_xmalloc(sizeof(float) * (size_t)S * Hq * T);
    }
    ca.q = hb.qf;
    ca.q_dtype = FA_DTYPE_F32;
    ca.k = fp8 ? hb.k : (const void *)hb.kf;
    ca.v = fp8 ? hb.v : (const void *)hb.vf;
    ca.kv_dtype = fp8 ? c->kvdt : FA_DTYPE_F32;
    ca.out = ref_out;
    ca.lse = ref_lse;
    ca.cu_seqlens_q = hb.cu_q;
    ca.seqused_k = c->dense ? NULL : hb.seqused;
    ca.cu_seqlens_k = c->dense ? hb.cu_k : NULL;
    ca.block_table = c->dense ? NULL : hb.bt + bt_off;
    ca.alibi_slopes = hb.alibi;
    ca.sinks = hb.sinks;
    ca.k_descale = c->descale ? hb.kdesc : NULL;
    ca.v_descale = c->descale ? hb.vdesc : NULL;
    ca.split_plan = c->use_plan ? hb.plan : NULL;
    ca.split_out = hsplit_out;
    ca.split_lse = hsplit_lse;
    if (!gt_check(cpu->ops.attention(cpu->ctx, &ca), cpu, "attention (reference)")) goto done;

    /* ---- compare */
    gout = gt_xmalloc((size_t)out_elems * qsz);
    if (!gt_d2h(gout, dout, (size_t)out_elems * qsz)) goto done;
    if (dlse) {
        glse = (float *)gt_xmalloc(sizeof(float) * (size_t)lse_elems);
        if (!gt_d2h(glse, dlse, sizeof(float) * (size_t)lse_elems)) goto done;
    }
    {
        const double tol = fp8 ? 1.5e-1 : 2e-2;
        int64_t nw = 0, nu = 0, idx = 0;
        float *got = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
        float *want = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
        float *gl = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq);
        float *wl = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq);
        int untouched_bad = 0;
        ok = 1;
        for (t = 0; t < T; ++t) {
            const int written = token_written(&hb, B, t);
            for (h = 0; h < Hq; ++h) {
                const int64_t oo = t * ots + h * ohs;
                if (written) {
                    int32_t d;
                    for (d = 0; d < D; ++d) {
                        got[idx] = gt_load(gout, oo + d, c->qdt);
                        want[idx] = ref_out[oo + d];
                        ++idx;
                    }
                    if (dlse) {
                        gl[nw] = glse[h * lhs + t];
                        wl[nw] = ref_lse[h * lhs + t];
                    }
                    ++nw;
                } else {
                    /* must be untouched: out row (incl. padding columns) and LSE still poison */
                    const uint8_t *p8 = (const uint8_t *)gout + oo * qsz;
                    size_t k2;
                    for (k2 = 0; k2 < (size_t)D * qsz; ++k2)
                        if (p8[k2] != GT_POISON) untouched_bad = 1;
                    if (dlse) {
                        uint32_t bits;
                        memcpy(&bits, &glse[h * lhs + t], 4);
                        if (bits != 0xFFFFFFFFu) untouched_bad = 1;
                    }
                    ++nu;
                }
                /* padded output columns [D, D + 8) are never written */
                {
                    const uint8_t *p8 = (const uint8_t *)gout + (oo + D) * qsz;
                    size_t k2;
                    for (k2 = 0; k2 < 8 * qsz; ++k2)
                        if (p8[k2] != GT_POISON) untouched_bad = 1;
                }
            }
        }
        if (untouched_bad) {
            gt_fail("rows / columns that must stay untouched were written (%lld untouched rows)",
                    (long long)nu);
            ok = 0;
        }
        if (!gt_compare("out", got, want, idx, FA_DTYPE_F32, tol, 0.0)) ok = 0;
        if (dlse && !gt_compare("lse", gl, wl, nw, FA_DTYPE_F32, 2e-3, 1e-4)) ok = 0;
        free(got);
        free(want);
        free(gl);
        free(wl);
    }
    if (ok && c->alone > 0) {
        /* the same sequence as a batch of one: cu_seqlens_q / seqused_k / block table views */
        const int32_t sb = c->alone - 1;
        fa_attn_args one = ga;
        void *dout2 = gt_dmalloc((size_t)out_elems * qsz), *gout2 = NULL;
        if (dout2 &&
            gt_check(gpu->ops.fill(gpu->ctx, dout2, 0, GT_POISON, (size_t)out_elems * qsz, 1), gpu, "fill")) {
            one.num_seqs = 1;
            one.max_seqlen_q = c->qlen[sb]; /* a decode row alone takes the packed decode tile */
            one.max_seqlen_k = c->klen[sb];
            one.cu_seqlens_q = dcu_q + sb;
            one.seqused_k = dseq ? dseq + sb : NULL;
            one.cu_seqlens_k = dcu_k ? dcu_k + sb : NULL;
            one.block_table = dbt ? dbt + bt_off + (int64_t)sb * bt_stride : NULL;
            one.alibi_slopes = c->alibi == 2 ? dalibi + (int64_t)sb * alibi_bs : dalibi;
            one.k_descale = dkdesc ? dkdesc + (int64_t)sb * dbs : NULL;
            one.v_descale = dvdesc ? dvdesc + (int64_t)sb * dbs : NULL;
            one.out = dout2;
            one.lse = NULL;
            one.split_plan = NULL;
            one.num_splits = 1;
            gout2 = gt_xmalloc((size_t)out_elems * qsz);
            if (gt_check(gpu->ops.attention(gpu->ctx, &one), gpu, "attention (one sequence)") &&
                gt_d2h(gout2, dout2, (size_t)out_elems * qsz)) {
                const size_t row0 = (size_t)hb.cu_q[sb] * (size_t)ots * qsz;
                const size_t nbytes = (size_t)c->qlen[sb] * (size_t)ots * qsz;
                if (!gt_compare_bytes("out bits of the sequence alone vs in the batch", (char *)gout2 + row0,
                                      (char *)gout + row0, nbytes))
                    ok = 0;
            }
        }
        free(gout2);
        gt_dfree(dout2);
    }
    if (ok && c->counters > 0) {
        /* the call again with work counters (a backend may hand out its work items from them,
           e.g. the wgmma family's persistent grid): every output and LSE byte as without them,
           and the counters zero again after each call */
        fa_attn_args wc = ga;
        const size_t ob = (size_t)out_elems * qsz, lb = sizeof(float) * (size_t)lse_elems;
        int32_t *dctr = (int32_t *)gt_dmalloc(sizeof(int32_t) * FA_WORK_COUNTERS);
        void *dout4 = gt_dmalloc(ob), *gout4 = gt_xmalloc(ob);
        float *dlse4 = dlse ? (float *)gt_dmalloc(lb) : NULL, *glse4 = dlse ? (float *)gt_xmalloc(lb) : NULL;
        int32_t hctr[FA_WORK_COUNTERS];
        int rep;
        if (!dctr || !dout4 || (dlse && !dlse4) ||
            !gt_check(gpu->ops.fill(gpu->ctx, dctr, 0, 0, sizeof(int32_t) * FA_WORK_COUNTERS, 1), gpu,
                      "fill"))
            ok = 0;
        for (rep = 0; ok && rep < c->counters; ++rep) {
            int k;
            if (!gt_check(gpu->ops.fill(gpu->ctx, dout4, 0, GT_POISON, ob, 1), gpu, "fill") ||
                (dlse4 && !gt_check(gpu->ops.fill(gpu->ctx, dlse4, 0, GT_POISON, lb, 1), gpu, "fill"))) {
                ok = 0;
                break;
            }
            wc.work_counters = dctr;
            wc.out = dout4;
            wc.lse = dlse4;
            if (!gt_check(gpu->ops.attention(gpu->ctx, &wc), gpu, "attention (work counters)") ||
                !gt_d2h(gout4, dout4, ob) || (dlse4 && !gt_d2h(glse4, dlse4, lb)) ||
                !gt_d2h(hctr, dctr, sizeof hctr)) {
                ok = 0;
                break;
            }
            if (!gt_compare_bytes("out bits with work counters vs without", gout4, gout, ob)) ok = 0;
            if (dlse4 && !gt_compare_bytes("lse bits with work counters vs without", glse4, glse, lb)) ok = 0;
            for (k = 0; k < FA_WORK_COUNTERS; ++k)
                if (hctr[k] != 0) {
                    gt_fail("work_counters[%d] = %d after call %d (want 0)", k, (int)hctr[k], rep + 1);
                    ok = 0;
                }
        }
        free(gout4);
        free(glse4);
        gt_dfree(dout4);
        gt_dfree(dlse4);
        gt_dfree(dctr);
    }
#ifndef GT_GPU_IS_CPU
    if (ok && c->pack_ab) {
        /* the same call with GQA packing off: a row's keys, tiles and arithmetic do not depend on
           which rows share its row block, so every byte must be the same (with split-KV the
           splits cut the keys where the row blocks' tiles are, so the rows are checked against
           the reference instead, which the first run already did for the packed call) */
        fa_attn_args np = ga;
        const size_t ob = (size_t)out_elems * qsz, lb = sizeof(float) * (size_t)lse_elems;
        void *dout5 = gt_dmalloc(ob), *gout5 = gt_xmalloc(ob);
        float *dlse5 = dlse ? (float *)gt_dmalloc(lb) : NULL, *glse5 = dlse ? (float *)gt_xmalloc(lb) : NULL;
        if (!dout5 || (dlse && !dlse5) ||
            !gt_check(gpu->ops.fill(gpu->ctx, dout5, 0, GT_POISON, ob, 1), gpu, "fill") ||
            (dlse5 && !gt_check(gpu->ops.fill(gpu->ctx, dlse5, 0, GT_POISON, lb, 1), gpu, "fill")) ||
            !gt_check(fa_cuda_backend_set_gqa_pack(gpu, FA_CUDA_GQA_PACK_OFF), gpu, "set_gqa_pack(off)")) {
            ok = 0;
        } else {
            np.out = dout5;
            np.lse = dlse5;
            if (!gt_check(gpu->ops.attention(gpu->ctx, &np), gpu, "attention (GQA packing off)") ||
                !gt_d2h(gout5, dout5, ob) || (dlse5 && !gt_d2h(glse5, dlse5, lb)))
                ok = 0;
            else if (ga.num_splits <= 1) {
                if (!gt_compare_bytes("out bits with GQA packing off vs on", gout5, gout, ob)) ok = 0;
                if (dlse5 && !gt_compare_bytes("lse bits with GQA packing off vs on", glse5, glse, lb))
                    ok = 0;
            }
        }
        if (!gt_check(fa_cuda_backend_set_gqa_pack(gpu, FA_CUDA_GQA_PACK_ON), gpu, "set_gqa_pack(on)"))
            ok = 0;
        free(gout5);
        free(glse5);
        gt_dfree(dout5);
        gt_dfree(dlse5);
    }
#endif /* GT_GPU_IS_CPU */
    if (ok && min_q > 0 && (int64_t)min_q * (Hq / Hkv) <= 16 && (int64_t)max_q * (Hq / Hkv) > 16) {
        /* a mixed batch again with the min_seqlen_q hint: the CUDA backend then runs its decode
           rows in the packed decode tile, the rest in the prefill tile (two launches). With one
           split every output byte must equal the one-launch run's; with more, the two tiles cut
           a sequence's keys at different tile boundaries, so the rows are checked against the
           reference instead (and rows that must stay untouched against the first run) */
        fa_attn_args hinted = ga;
        void *dout3 = gt_dmalloc((size_t)out_elems * qsz), *gout3 = NULL;
        if (dout3 &&
            gt_check(gpu->ops.fill(gpu->ctx, dout3, 0, GT_POISON, (size_t)out_elems * qsz, 1), gpu, "fill")) {
            hinted.min_seqlen_q = min_q;
            hinted.out = dout3;
            gout3 = gt_xmalloc((size_t)out_elems * qsz);
            if (gt_check(gpu->ops.attention(gpu->ctx, &hinted), gpu, "attention (min_seqlen_q hint)") &&
                gt_d2h(gout3, dout3, (size_t)out_elems * qsz)) {
                if (ga.num_splits <= 1) {
                    if (!gt_compare_bytes("out bits with the min_seqlen_q hint (two launches) vs without",
                                          gout3, gout, (size_t)out_elems * qsz))
                        ok = 0;
                } else {
                    float *got3 = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
                    float *want3 = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
                    size_t n3 = 0;
                    for (t = 0; t < T; ++t) {
                        const int written = token_written(&hb, B, t);
                        for (h = 0; h < Hq; ++h) {
                            const int64_t oo = t * ots + h * ohs;
                            if (written) {
                                int32_t d;
                                for (d = 0; d < D; ++d) {
                                    got3[n3] = gt_load(gout3, oo + d, c->qdt);
                                    want3[n3] = ref_out[oo + d];
                                    ++n3;
                                }
                            } else if (memcmp((const char *)gout3 + oo * qsz, (const char *)gout + oo * qsz,
                                              (size_t)D * qsz) != 0) {
                                gt_fail("min_seqlen_q hint: an untouched row (token %d, head %d) was written",
                                        t, h);
                                ok = 0;
                            }
                        }
                    }
                    if (!gt_compare("out with the min_seqlen_q hint (two launches, splits)", got3, want3, n3,
                                    FA_DTYPE_F32, fp8 ? 1.5e-1 : 2e-2, 0.0))
                        ok = 0;
                    free(got3);
                    free(want3);
                }
            } else {
                ok = 0;
            }
        } else {
            ok = 0;
        }
        free(gout3);
        gt_dfree(dout3);
    }
    if (ok && out_bits_ret) {
        *out_bits_ret = gout;
        gout = NULL;
    }

done:
    gt_dfree(dq);
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dout);
    gt_dfree(dcu_q);
    gt_dfree(dseq);
    gt_dfree(dcu_k);
    gt_dfree(dbt);
    gt_dfree(dplan);
    gt_dfree(dalibi);
    gt_dfree(dsinks);
    gt_dfree(dkdesc);
    gt_dfree(dvdesc);
    gt_dfree(dlse);
    gt_dfree(dsplit_out);
    gt_dfree(dsplit_lse);
    free(hb.q);
    free(hb.k);
    free(hb.v);
    free(hb.qf);
    free(hb.kf);
    free(hb.vf);
    free(hb.cu_q);
    free(hb.seqused);
    free(hb.cu_k);
    free(hb.bt);
    free(hb.plan);
    free(hb.alibi);
    free(hb.sinks);
    free(hb.kdesc);
    free(hb.vdesc);
    free(ref_out);
    free(ref_lse);
    free(glse);
    free(gout);
    free(hsplit_out);
    free(hsplit_lse);
    return ok;
}

static void run_named(const char *group, const acase *c)
{
    char d[400];
    describe(c, d, sizeof d);
    if (!gt_case("%s: %s", group, d)) return;
    if (!c->dense && gt_gpu()->caps.block_size_multiple > 1 &&
        c->bs % gt_gpu()->caps.block_size_multiple != 0)
        gt_skip("block size %d: the backend's block_size_multiple is %d", (int)c->bs,
                (int)gt_gpu()->caps.block_size_multiple);
    else
        run_case(c, NULL);
    gt_case_end();
}

static acase base_case(fa_dtype qdt, int D, int bs, int hq, int hkv)
{
    acase c;
    memset(&c, 0, sizeof c);
    c.qdt = qdt;
    c.kvdt = qdt;
    c.D = D;
    c.bs = bs;
    c.hq = hq;
    c.hkv = hkv;
    c.wl = -1;
    c.wr = -1;
    c.lse = 1;
    c.shuffle = 1;
    return c;
}

static void set_seqs(acase *c, int n, const int *ql, const int *kl)
{
    int i;
    c->nseq = n;
    for (i = 0; i < n; ++i) {
        c->qlen[i] = ql[i];
        c->klen[i] = kl[i];
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the grid */

static void test_head_sizes(void)
{
    static const int dims[] = {40, 64, 80, 96, 128, 192, 256};
    static const int ql[] = {1, 37, 129, 1}, kl[] = {300, 237, 463, 17};
    int i;
    for (i = 0; i < 7; ++i) {
        fa_dtype qd = i % 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16;
        acase c = base_case(qd, dims[i], 16, 8, 2);
        set_seqs(&c, gt_quick() ? 2 : 4, ql, kl);
        c.causal = 1;
        c.pad_tokens = 3;
        run_named("head size", &c);
    }
}

static void test_blocks_heads(void)
{
    static const int bss[] = {16, 32, 64, 1, 3, 8}; /* any block size >= 1, page size 1 included */
    static const int heads[][2] = {{4, 4}, {8, 2}, {8, 1}, {32, 8}};
    static const int ql[] = {1, 70, 1, 200}, kl[] = {900, 270, 33, 200};
    int i, j;
    for (i = 0; i < 6; ++i)
        for (j = 0; j < 4; ++j) {
            acase c;
            if (gt_quick() && (i + j) % 3) continue;
            c = base_case(FA_DTYPE_BF16, 128, bss[i], heads[j][0], heads[j][1]);
            set_seqs(&c, 4, ql, kl);
            c.causal = (i + j) % 2 == 0;
            c.hnd = j % 2;
            run_named("blocks x heads", &c);
        }
}

static void test_features(void)
{
    static const int ql[] = {1, 100, 3, 260}, kl[] = {700, 400, 3, 260};
    int f;
    for (f = 0; f < 12; ++f) {
        acase c = base_case(f % 3 == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, f % 2 ? 64 : 128, 16, 8, 2);
        if (gt_quick() && f % 3) continue;
        set_seqs(&c, 4, ql, kl);
        switch (f) {
        case 0: c.causal = 0; break;
        case 1:
            c.causal = 1;
            c.wl = 63;
            break; /* sliding window */
        case 2:
            c.causal = 0;
            c.wl = 40;
            c.wr = 40;
            break; /* encoder-only window */
        case 3:
            c.causal = 0;
            c.wl = 90;
            c.wr = 0;
            break; /* left-only, non-causal */
        case 4:
            c.causal = 1;
            c.softcap = 10.0f;
            break;
        case 5:
            c.causal = 0;
            c.softcap = 50.0f;
            c.alibi = 1;
            break;
        case 6:
            c.causal = 1;
            c.alibi = 2;
            c.wl = 100;
            break;
        case 7:
            c.causal = 1;
            c.sinks = 1;
            break;
        case 8:
            c.causal = 0;
            c.sinks = 2;
            c.softcap = 5.0f;
            break; /* sink dominates */
        case 9:
            c.causal = 1;
            c.sinks = 1;
            c.alibi = 1;
            c.softcap = 30.0f;
            c.wl = 31;
            break;
        case 10:
            c.causal = 1;
            c.lse = 0;
            c.q_strided = 1;
            break;
        case 11: /* two query-head groups of 8 over 4 KV heads (DCP-style grouping) */
            c.causal = 0;
            c.wl = 5;
            c.wr = -1;
            c.q_strided = 1;
            c.hnd = 1;
            c.hq = 16;
            c.hkv = 4;
            c.sinks = 1;
            c.alibi = 1;
            break;
        }
        run_named("features", &c);
    }
}

static void test_fp8(void)
{
    static const int ql[] = {1, 1, 45, 130}, kl[] = {1000, 77, 300, 130};
    int f;
    for (f = 0; f < 8; ++f) {
        acase c =
            base_case(f % 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16, f < 4 ? 128 : 64, f % 4 < 2 ? 16 : 32, 8, 2);
        if (gt_quick() && f % 3) continue;
        c.kvdt = (f / 2) % 2 ? FA_DTYPE_FP8_E5M2 : FA_DTYPE_FP8_E4M3;
        set_seqs(&c, 4, ql, kl);
        c.causal = 1;
        c.descale = f != 3;
        c.hnd = f == 5;
        c.sinks = f == 6;
        if (f == 7) { /* head size not a multiple of 16: 8-byte fp8 copies */
            c.D = 40;
        }
        run_named("fp8", &c);
    }
    for (f = 0; f < 2; ++f) { /* block sizes that are not multiples of 16: fp8 rows of one page each */
        acase c = base_case(FA_DTYPE_BF16, f ? 64 : 128, f ? 3 : 1, 8, 2);
        c.kvdt = FA_DTYPE_FP8_E4M3;
        set_seqs(&c, 4, ql, kl);
        c.causal = 1;
        c.descale = 1;
        run_named("fp8", &c);
    }
    { /* fp8 decode, GQA packed, long context */
        static const int ql2[] = {1, 1, 1, 1}, kl2[] = {4000, 1, 2500, 777};
        acase c = base_case(FA_DTYPE_BF16, 128, 16, 32, 8);
        c.kvdt = FA_DTYPE_FP8_E4M3;
        c.descale = 1;
        set_seqs(&c, 4, ql2, kl2);
        c.causal = 1;
        run_named("fp8", &c);
    }
}

/* fp8 caches under a 16-bit query in the wgmma family's fp8-cache kernels (heads 64 / 128 / 256,
   any block size, dense K/V with num_keys; in mma.sync, as every case here, under
   FA_GPU_FAMILY=mma_sync): E4M3 and
   E5M2, bf16 and f16 queries, blocks 8, 16, 32, 64, 128, 256 and dense, causal or not,
   per-(sequence, head) descales
   and the scalar k_scale / v_scale, split-KV with ALiBi / sinks / softcap / windows, and a NaN in
   V of a key that a mask hides from some rows of a tile. */
static void test_fp8_wgmma(void)
{
    static const int ql[] = {45, 130, 300, 1}, kl[] = {300, 130, 700, 77};
    static const int ql2[] = {100, 30}, kl2[] = {100, 70};
    int v;
    for (v = 0; v < 15; ++v) {
        const int D = v == 14 ? 256 : (v == 2 || v == 3 || v == 5 || v == 7 || v == 9 || v == 12 ? 64 : 128);
        const int bs = v == 4 || v == 5 ? 256 : (v == 9 ? 128 : (v == 10 ? 32 : (v == 11 ? 8 : 16)));
        acase c = base_case(v % 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16, D, bs, v == 11 ? 32 : 8, v == 11 ? 8 : 2);
        if (gt_quick() && v % 3) continue;
        c.kvdt = (v / 2) % 2 ? FA_DTYPE_FP8_E5M2 : FA_DTYPE_FP8_E4M3;
        set_seqs(&c, 4, ql, kl);
        c.causal = v != 1 && v != 3 && v != 6;
        c.descale = v != 1 && v != 4 && v != 7;
        c.dense = v == 6 || v == 7;
        if (v == 8) c.splits = 2;
        if (v == 9) { /* general kernel: split, window, softcap */
            c.splits = 3;
            c.wl = 150;
            c.softcap = 30.f;
        }
        if (v == 10) { /* general kernel: ALiBi and sinks */
            c.alibi = 2;
            c.sinks = 1;
        }
        if (v == 12 || v == 13) { /* NaN in V of a valid key, masked for some rows of a tile */
            c.shuffle = 0;
            set_seqs(&c, 2, ql2, kl2);
            c.causal = 1;
            c.wl = v == 12 ? 20 : 8;
            c.nan_v = 41;
        }
        run_named("fp8 wgmma", &c);
    }
    /* block sizes no TMA box serves (1, 3, 24, 48): the KV8 kernels' cp.async copy of the raw
       rows in the wgmma family (mma.sync under FA_GPU_FAMILY=mma_sync; the same cases and
       reference either way).
       Heads 64 / 128, E4M3 / E5M2, bf16 / f16, causal or not, shuffled block tables; v 2 takes the
       general kernel (splits), v 4 the scalar k_scale / v_scale. */
    for (v = 0; v < 6; ++v) {
        static const int bsg[] = {3, 1, 24, 48, 3, 48}, dg[] = {128, 64, 128, 64, 64, 128};
        static const int e5g[] = {0, 1, 0, 1, 0, 1}, causalg[] = {1, 0, 1, 1, 0, 0};
        acase c = base_case(v % 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16, dg[v], bsg[v], 8, 2);
        if (gt_quick() && v % 3) continue;
        c.kvdt = e5g[v] ? FA_DTYPE_FP8_E5M2 : FA_DTYPE_FP8_E4M3;
        set_seqs(&c, 4, ql, kl);
        c.causal = causalg[v];
        c.descale = v != 4;
        if (v == 2) c.splits = 2;
        run_named("fp8 wgmma", &c);
    }
    /* head 256 (64-key tiles; the KV8 kernels there have 2 converted stages and 1 raw stage):
       the group does not ask which family ran: the same cases, against the same reference, in
       either family. Blocks
       16, 64 (one box a tile), 128 (a box at a row offset inside the block), 8 and dense; v 3
       and 6 take the general kernel (splits; window and softcap), v 7 a NaN in V masked for some
       rows, v 8 ALiBi, sinks and HND. */
    for (v = 0; v < 9; ++v) {
        static const int bs256[] = {16, 16, 64, 64, 0, 0, 128, 16, 8};
        static const int e5[] = {0, 1, 1, 0, 0, 1, 1, 0, 1}, causal[] = {1, 0, 1, 0, 0, 1, 1, 1, 1};
        acase c = base_case(v % 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16, 256, bs256[v] ? bs256[v] : 16, 8, 2);
        if (gt_quick() && v % 3) continue;
        c.kvdt = e5[v] ? FA_DTYPE_FP8_E5M2 : FA_DTYPE_FP8_E4M3;
        set_seqs(&c, 4, ql, kl);
        c.causal = causal[v];
        c.descale = v != 1 && v != 4;
        c.dense = bs256[v] == 0;
        if (v == 3) c.splits = 2;
        if (v == 6) {
            c.splits = 3;
            c.wl = 150;
            c.softcap = 30.f;
        }
        if (v == 7) {
            c.shuffle = 0;
            set_seqs(&c, 2, ql2, kl2);
            c.wl = 20;
            c.nan_v = 41;
        }
        if (v == 8) {
            c.alibi = 1;
            c.sinks = 1;
            c.hnd = 1;
        }
        run_named("fp8 wgmma", &c);
    }
}

static void test_splits(void)
{
    static const int splits[] = {1, 2, 7};
    static const int ql[] = {1, 1, 1, 60, 1}, kl[] = {5000, 3, 1200, 900, 700};
    int i, v;
    for (i = 0; i < 3; ++i)
        for (v = 0; v < 2; ++v) {
            acase c = base_case(FA_DTYPE_BF16, 128, 16, 8, 2);
            if (gt_quick() && v) continue;
            set_seqs(&c, 5, ql, kl);
            c.causal = 1;
            c.splits = splits[i];
            c.use_plan = 1;
            c.plan[0] = splits[i]; /* plan[b]: splits of sequence b */
            c.plan[1] = 0; /* untouched */
            c.plan[2] = splits[i] > 1 ? 2 : 1;
            c.plan[3] = 1;
            c.plan[4] = splits[i] > 1 ? splits[i] - 1 : 1;
            if (v) { /* with every feature that the split must carry */
                c.sinks = 1;
                c.softcap = 20.0f;
                c.alibi = 1;
                c.wl = 700;
                c.kvdt = FA_DTYPE_FP8_E5M2;
                c.descale = 1;
            }
            run_named("splits", &c);
        }
    { /* no plan: every sequence S splits */
        acase c = base_case(FA_DTYPE_F16, 96, 32, 4, 4);
        set_seqs(&c, 5, ql, kl);
        c.causal = 1;
        c.splits = 3;
        run_named("splits", &c);
    }
}

static void test_mixed_long(void)
{
    /* decodes with long contexts (sampled up to 32k) mixed with prefills */
    int r;
    for (r = 0; r < (gt_quick() ? 1 : 4); ++r) {
        acase c =
            base_case(r % 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16, r == 3 ? 256 : 128, r == 2 ? 64 : 16, 32, 8);
        int b, n = 3 + (int)gt_randint(4);
        c.nseq = n;
        for (b = 0; b < n; ++b) {
            if (gt_randint(3) == 0) {
                c.qlen[b] = 1 + (int)gt_randint(c.D > 128 ? 100 : 200);
                c.klen[b] = c.qlen[b] + (int)gt_randint(gt_quick() || c.D > 128 ? 200 : 1000);
            } else {
                c.qlen[b] = 1;
                c.klen[b] = 1 + (int)gt_randint(gt_quick() ? 2000 : 32768);
            }
        }
        if (!gt_quick()) { /* one decode row over a 32k context */
            c.qlen[0] = 1;
            c.klen[0] = 32768;
        }
        c.causal = 1;
        c.splits = r >= 2 ? 4 : 1;
        c.hnd = r == 1;
        c.sinks = r == 3;
        run_named("mixed long", &c);
    }
}

static void test_dense(void)
{
    static const int ql[] = {50, 1, 120, 33}, kl[] = {50, 300, 120, 90};
    static const int ql3[] = {300, 129, 7}, kl3[] = {700, 129, 260};
    static const int ql4[] = {200, 64}, kl4[] = {500, 64};
    int v;
    for (v = 0; v < 6; ++v) {
        const int D = v == 2 ? 80 : (v == 3 ? 64 : (v == 4 ? 256 : 128));
        acase c = base_case(v == 1 || v == 4 ? FA_DTYPE_F16 : FA_DTYPE_BF16, D, 16, 8, v == 2 ? 8 : 2);
        if (gt_quick() && v != 0 && v != 3) continue;
        if (v == 3)
            set_seqs(&c, 3, ql3, kl3); /* several tiles; sequences start inside a tile */
        else if (v == 4)
            set_seqs(&c, 2, ql4, kl4);
        else
            set_seqs(&c, 4, ql, kl);
        c.dense = 1;
        c.causal = v != 2 && v != 3;
        if (v == 2) {
            c.wl = 20;
            c.wr = 20;
            c.alibi = 2;
        }
        if (v == 1) c.splits = 2;
        if (v == 3) c.softcap = 30.f;
        if (v == 4) c.wl = 100;
        c.no_num_keys = v == 5; /* mma.sync runs it */
        run_named("dense", &c);
    }
}

static void test_edges(void)
{
    /* Lq > Lk (top rows empty), Lk = 0, q_len 0, a window that removes every key of some rows */
    static const int ql[] = {40, 5, 0, 7, 16}, kl[] = {10, 0, 9, 7, 16};
    int v;
    for (v = 0; v < 3; ++v) {
        acase c = base_case(FA_DTYPE_BF16, 64, 16, 4, 2);
        set_seqs(&c, 5, ql, kl);
        c.causal = 1;
        c.sinks = v == 1;
        if (v == 2) {
            c.causal = 0;
            c.wl = 0;
            c.wr = -1;
            c.splits = 2;
        }
        c.pad_tokens = 2;
        run_named("edges", &c);
    }
    { /* decode packing with the most heads per KV head the packed tile holds (16) and beyond */
        static const int ql2[] = {1, 1, 1}, kl2[] = {500, 64, 1};
        acase c = base_case(FA_DTYPE_BF16, 128, 16, 16, 1);
        set_seqs(&c, 3, ql2, kl2);
        c.causal = 1;
        run_named("edges", &c);
        c.hq = 32;
        run_named("edges", &c);
    }
    { /* extreme logits (|q|, |k| up to 2e5: logits near 1e12, finite in float32): a one-hot
         softmax, finite rows equal to the reference; a decode tile and a prefill tile */
        static const int ql3[] = {1, 1}, kl3[] = {80, 300}, ql4[] = {40}, kl4[] = {90};
        acase c = base_case(FA_DTYPE_BF16, 64, 16, 8, 2);
        set_seqs(&c, 2, ql3, kl3);
        c.causal = 1;
        c.amp = 1e5f;
        run_named("extreme logits", &c);
        c = base_case(FA_DTYPE_BF16, 128, 16, 8, 2);
        set_seqs(&c, 1, ql4, kl4);
        c.causal = 1;
        c.amp = 1e5f;
        run_named("extreme logits", &c);
    }
}

/* NaN hygiene at mask edges (docs/cuda.md): a NaN in V of a valid key that a window or the
   causal mask hides from some rows of a tile but not from others. The rows that cannot see it
   must come out finite, equal to the reference; the rows that see it NaN. Prefill tile, packed
   decode tile with two tokens per tile, a split and an fp8 cache. */
static void test_nan_edges(void)
{
    int v;
    for (v = 0; v < 5; ++v) {
        acase c = base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, v == 2 ? 64 : 128, 16, 8, 2);
        static const int ql[] = {100, 30}, kl[] = {100, 70};
        static const int ql2[] = {2, 1}, kl2[] = {50, 40};
        c.shuffle = 0;
        if (v < 3 || v == 4) {
            set_seqs(&c, 2, ql, kl);
            c.causal = 1;
            c.wl = v == 2 ? 20 : 8;
            c.nan_v = 41; /* rows 40..48 (40..60) see it */
            if (v == 1) c.splits = 2;
            if (v == 4) c.kvdt = FA_DTYPE_FP8_E4M3;
        } else { /* decode tile: 2 tokens x 8 heads per KV head */
            set_seqs(&c, 2, ql2, kl2);
            c.hq = 8;
            c.hkv = 1;
            c.causal = 1;
            c.wl = 0;
            c.nan_v = 49; /* key 48: row 0's only key, masked for row 1 */
        }
        run_named("nan at a mask edge", &c);
    }
}

/* Shapes aimed at the wgmma family's edges (and run by either family): blocks longer than the
   128-key TMA box (256, 384), more sequences than the kernel's 384 threads (the binary steps of
   its tile -> sequence search), a window that starts past the first tiles (pages wholly before
   the window), f16 with softcap and a window, short and long queries in one batch; heads 64
   and 256, split-KV, ALiBi and sinks, query-head groups. */
static void test_family_edges(void)
{
    int v;
    for (v = 0; v < 6; ++v) {
        acase c = base_case(v == 3 ? FA_DTYPE_F16 : FA_DTYPE_BF16, 128, 16, 8, 2);
        if (gt_quick() && v % 2) continue;
        switch (v) {
        case 0:
        case 1: { /* blocks of 256 and 384 rows */
            static const int ql[] = {300, 1, 129}, kl[] = {1000, 700, 129};
            set_seqs(&c, 3, ql, kl);
            c.bs = v == 0 ? 256 : 384;
            c.causal = 1;
        } break;
        case 2: { /* 400 sequences of 5 queries (20 rows a KV head) */
            int b;
            c.nseq = 400;
            for (b = 0; b < c.nseq; ++b) {
                c.qlen[b] = 5;
                c.klen[b] = 5 + (b * 37) % 200;
            }
            c.causal = 1;
        } break;
        case 3: { /* f16, softcap, a window */
            static const int ql[] = {200, 77}, kl[] = {1500, 300};
            set_seqs(&c, 2, ql, kl);
            c.causal = 1;
            c.softcap = 30.0f;
            c.wl = 100;
        } break;
        case 4: { /* a window far past the first tiles, block 8 */
            static const int ql[] = {150, 1}, kl[] = {3000, 2000};
            set_seqs(&c, 2, ql, kl);
            c.bs = 8;
            c.causal = 1;
            c.wl = 200;
        } break;
        default: { /* non-causal, Lq > Lk and a 1-key sequence, MHA */
            static const int ql[] = {300, 200, 130}, kl[] = {100, 1, 700};
            set_seqs(&c, 3, ql, kl);
            c.hq = c.hkv = 4;
            c.causal = 0;
        } break;
        }
        run_named("family edges", &c);
    }
    /* heads 64 and 256 (head 256 tiles 64 keys: its block 128 starts a TMA box inside a block) */
    for (v = 0; v < 8; ++v) {
        acase c = base_case(v % 4 == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, v < 4 ? 64 : 256, 16, 8, 2);
        if (gt_quick() && v % 2) continue;
        switch (v % 4) {
        case 0: { /* causal, three lengths */
            static const int ql[] = {300, 1, 129}, kl[] = {1000, 700, 129};
            set_seqs(&c, 3, ql, kl);
            c.causal = 1;
        } break;
        case 1: { /* f16, softcap, a window, block 8 */
            static const int ql[] = {200, 77}, kl[] = {1500, 300};
            set_seqs(&c, 2, ql, kl);
            c.bs = 8;
            c.causal = 1;
            c.softcap = 30.0f;
            c.wl = 100;
        } break;
        case 2: { /* non-causal, Lq > Lk and a 1-key sequence, MHA, block 128 */
            static const int ql[] = {300, 200, 130}, kl[] = {100, 1, 700};
            set_seqs(&c, 3, ql, kl);
            c.hq = c.hkv = 4;
            c.bs = 128;
            c.causal = 0;
        } break;
        default: { /* a window far past the first tiles, block 64 */
            static const int ql[] = {150, 1}, kl[] = {3000, 2000};
            set_seqs(&c, 2, ql, kl);
            c.bs = 64;
            c.causal = 1;
            c.wl = 200;
        } break;
        }
        run_named("family edges", &c);
    }
    /* split-KV (plans of 3 / 1 / 2 / 0 splits, or none: every sequence 3): heads 128, 64, 256,
       f16 with softcap and a window */
    for (v = 0; v < 4; ++v) {
        static const int ql[] = {300, 129, 1, 200}, kl[] = {5000, 1200, 700, 200};
        acase c =
            base_case(v == 3 ? FA_DTYPE_F16 : FA_DTYPE_BF16, v == 1 ? 64 : (v == 2 ? 256 : 128), 16, 8, 2);
        if (gt_quick() && v % 2) continue;
        set_seqs(&c, 4, ql, kl);
        c.causal = 1;
        c.splits = 3;
        c.use_plan = v != 2;
        c.plan[0] = 3;
        c.plan[1] = 1;
        c.plan[2] = 2;
        c.plan[3] = 0; /* untouched */
        if (v == 3) {
            c.softcap = 30.0f;
            c.wl = 500;
        }
        run_named("family edges", &c);
    }
    /* queries of 4096 rows and more at head 128, query heads in pairs of a KV head: the wgmma
       family's multicast pair's shapes (a cluster of two CTAs sharing every K / V box; off unless
       sm90_attention.cu's kMcastOn, tools/variants/sm90_mcast.py builds it on) at blocks 16 and 8;
       causal over 4200 keys with a short second sequence (group 2), f16 with softcap, a window
       and split-KV (group 4), a two-sided window (three KV heads, group 2) */
    for (v = 0; v < 3; ++v) {
        acase c = base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, 128, v == 1 ? 8 : 16,
                            v == 2 ? 6 : 4 * (v + 1), v == 2 ? 3 : 2);
        if (gt_quick() && v == 0) continue;
        if (v == 0) {
            static const int ql[] = {4100, 37}, kl[] = {4200, 500};
            set_seqs(&c, 2, ql, kl);
            c.causal = 1;
        } else if (v == 1) {
            static const int ql[] = {4096}, kl[] = {5000};
            set_seqs(&c, 1, ql, kl);
            c.causal = 1;
            c.wl = 300;
            c.softcap = 30.0f;
            c.splits = 2;
        } else {
            static const int ql[] = {4097}, kl[] = {4097};
            set_seqs(&c, 1, ql, kl);
            c.wl = 200;
            c.wr = 50;
        }
        run_named("family edges", &c);
    }
    /* ALiBi and sinks: [Hq] slopes with moderate sinks (head 128), [B, Hq] slopes with a window
       and softcap (f16, head 64), dominant sinks with split-KV (head 256) */
    for (v = 0; v < 3; ++v) {
        static const int ql[] = {300, 1, 129}, kl[] = {1000, 700, 129};
        acase c =
            base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, v == 0 ? 128 : (v == 1 ? 64 : 256), 16, 8, 2);
        if (gt_quick() && v == 1) continue;
        set_seqs(&c, 3, ql, kl);
        c.causal = 1;
        c.alibi = v == 2 ? 0 : v + 1;
        c.sinks = v == 2 ? 2 : 1;
        if (v == 1) {
            c.wl = 150;
            c.softcap = 30.0f;
        }
        if (v == 2) {
            c.splits = 3;
        }
        run_named("family edges", &c);
    }
    /* block sizes no TMA box serves (1, 2, 3, 5, 24, 200: the wgmma family's cp.async
       producer, pages of 8 keys): heads 64 / 128 / 256, f16 with softcap and a window, split-KV,
       a window far past the first tiles, non-causal MHA with a 1-key sequence, ALiBi and sinks */
    for (v = 0; v < 8; ++v) {
        static const int bss[] = {1, 2, 3, 5, 24, 200, 1, 7}, dims[] = {128, 64, 256, 128, 64, 128, 256, 128};
        acase c = base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, dims[v], bss[v], 8, 2);
        if (gt_quick() && v % 2) continue;
        switch (v) {
        case 1: { /* f16, softcap, a window */
            static const int ql[] = {200, 77}, kl[] = {1500, 300};
            set_seqs(&c, 2, ql, kl);
            c.causal = 1;
            c.softcap = 30.0f;
            c.wl = 100;
        } break;
        case 3: { /* split-KV with a plan */
            static const int ql[] = {300, 129, 1, 200}, kl[] = {5000, 1200, 700, 200};
            set_seqs(&c, 4, ql, kl);
            c.causal = 1;
            c.splits = 3;
            c.use_plan = 1;
            c.plan[0] = 3;
            c.plan[1] = 1;
            c.plan[2] = 2;
            c.plan[3] = 0;
        } break;
        case 4: { /* a window far past the first tiles */
            static const int ql[] = {150, 1}, kl[] = {3000, 2000};
            set_seqs(&c, 2, ql, kl);
            c.causal = 1;
            c.wl = 200;
        } break;
        case 5: { /* non-causal, Lq > Lk and a 1-key sequence, MHA */
            static const int ql[] = {300, 200, 130}, kl[] = {100, 1, 700};
            set_seqs(&c, 3, ql, kl);
            c.hq = c.hkv = 4;
            c.causal = 0;
        } break;
        case 6: { /* ALiBi and sinks */
            static const int ql[] = {300, 1, 129}, kl[] = {1000, 700, 129};
            set_seqs(&c, 3, ql, kl);
            c.causal = 1;
            c.alibi = 1;
            c.sinks = 1;
        } break;
        default: { /* causal, three lengths */
            static const int ql[] = {300, 1, 129}, kl[] = {1000, 700, 129};
            set_seqs(&c, 3, ql, kl);
            c.causal = 1;
        } break;
        }
        run_named("family edges", &c);
    }
    /* query-head groups (two groups with a gap, DCP's gathered queries): head 128 causal with
       sinks, head 64 f16 with a window; the 5-query sequence has Lq x G = 20 rows a KV head (past
       the decode tile's 16) but 10 within a group */
    for (v = 0; v < 2; ++v) {
        static const int ql[] = {300, 1, 129, 5}, kl[] = {1000, 700, 129, 60};
        acase c = base_case(v ? FA_DTYPE_F16 : FA_DTYPE_BF16, v ? 64 : 128, 16, 8, 2);
        set_seqs(&c, 4, ql, kl);
        c.causal = 1;
        c.q_strided = 1;
        c.sinks = v ? 0 : 1;
        c.wl = v ? 100 : -1;
        run_named("family edges", &c);
    }
    /* query-head groups with split-KV (DCP's context step over long contexts: the partials of
       every group in the one [S, T, Hq, D] workspace) and more than 16 groups (one launch and one
       q map each): head 128 with a plan, head 64 f16 with ALiBi and 3 static splits, 20 groups of
       2 heads over 2 KV heads, 20 groups with 2 splits */
    for (v = 0; v < 4; ++v) {
        static const int ql[] = {300, 1, 129, 5}, kl[] = {2000, 700, 1300, 60};
        acase c = base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, v == 1 ? 64 : 128, 16, v >= 2 ? 40 : 8, 2);
        set_seqs(&c, 4, ql, kl);
        c.q_strided = 1;
        c.q_groups = v >= 2 ? 20 : 2;
        c.lse = 1;
        if (v == 0) {
            static const int plan[] = {3, 1, 2, 0};
            c.splits = 3;
            c.use_plan = 1;
            memcpy(c.plan, plan, sizeof plan);
            c.causal = 1;
        } else if (v == 1) {
            c.splits = 3;
            c.alibi = 1;
        } else if (v == 3) {
            c.splits = 2;
            c.causal = 1;
            c.sinks = 1;
        }
        run_named("family edges", &c);
    }
}

/* GQA packing (the wgmma family packs a KV head's query heads into the rows of a row block when
   the group is a power of two and no query is longer than 127 tokens): short queries with
   Lq x G past the decode tile's 16 rows, groups 2 to 64, every feature the rows' (token, head)
   pairs reach (the mask and window per token, ALiBi slopes and sinks per head, the NaN fix-up,
   the LSE and the split partials per (token, head), query-head groups, an fp8 cache, dense K/V,
   a cp.async block size, the persistent grid), each run with packing on (FA_CUDA_GQA_PACK_ON)
   and again off, bit for bit (split-KV: both against the reference); and under the default
   (auto: by max_seqlen_q) a sequence packed alone against unpacked in a batch with a 200-token
   query, bit for bit. */
static void test_gqa_packing(void)
{
    int v;
    for (v = 0; v < 9; ++v) {
        acase c = base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, 128, 16, 32, 8);
        if (gt_quick() && (v == 5 || v == 7)) continue;
        switch (v) {
        case 0: { /* G = 4, causal, six lengths (20 .. 400 rows a KV head); again with work
                     counters (the persistent grid walking the packed items) */
            static const int ql[] = {5, 8, 16, 33, 64, 100}, kl[] = {1000, 3000, 16, 2100, 640, 1900};
            set_seqs(&c, 6, ql, kl);
            c.causal = 1;
            c.counters = 2;
        } break;
        case 1: { /* f16, head 64, G = 8, softcap, a window, block 3 (the cp.async producer), NaN in
                     V at a mask edge */
            static const int ql[] = {7, 20, 3}, kl[] = {900, 1500, 300};
            set_seqs(&c, 3, ql, kl);
            c.D = 64;
            c.hq = 16;
            c.hkv = 2;
            c.bs = 3;
            c.causal = 1;
            c.softcap = 30.0f;
            c.wl = 100;
            c.nan_v = 795; /* key 794: seen by tokens 0 and 1 of sequence 0, masked for 2 .. 6 */
        } break;
        case 2: { /* head 256, G = 2, ALiBi [B, Hq] and sinks, split-KV with a plan */
            static const int ql[] = {9, 60, 17, 30}, kl[] = {3000, 1200, 700, 90};
            static const int plan[] = {3, 1, 2, 0};
            set_seqs(&c, 4, ql, kl);
            c.D = 256;
            c.hq = 8;
            c.hkv = 4;
            c.causal = 1;
            c.alibi = 2;
            c.sinks = 1;
            c.splits = 3;
            c.use_plan = 1;
            memcpy(c.plan, plan, sizeof plan);
        } break;
        case 3: { /* G = 16, non-causal, dense K/V */
            static const int ql[] = {9, 64, 2}, kl[] = {500, 1000, 3};
            set_seqs(&c, 3, ql, kl);
            c.hq = 16;
            c.hkv = 1;
            c.dense = 1;
        } break;
        case 4: { /* G = 64: one token a warpgroup's rows, a two-sided window */
            static const int ql[] = {2, 3, 5}, kl[] = {700, 2000, 64};
            set_seqs(&c, 3, ql, kl);
            c.hq = 64;
            c.hkv = 1;
            c.wl = 300;
            c.wr = 20;
        } break;
        case 5: { /* an fp8 (E4M3) cache with per-(sequence, KV head) descales, G = 4 */
            static const int ql[] = {6, 40, 12}, kl[] = {2500, 800, 3000};
            set_seqs(&c, 3, ql, kl);
            c.kvdt = FA_DTYPE_FP8_E4M3;
            c.descale = 1;
            c.causal = 1;
        } break;
        case 6: { /* query-head groups (2; G = 4 within a group), sinks, LSE */
            static const int ql[] = {5, 30, 1, 70}, kl[] = {600, 1300, 200, 2000};
            set_seqs(&c, 4, ql, kl);
            c.hq = 16;
            c.hkv = 2;
            c.q_strided = 1;
            c.causal = 1;
            c.sinks = 1;
        } break;
        case 7: { /* G = 2, ALiBi [Hq], 2 static splits, HND, block 8 */
            static const int ql[] = {40, 127, 11}, kl[] = {4000, 300, 1000};
            set_seqs(&c, 3, ql, kl);
            c.hq = 8;
            c.hkv = 4;
            c.bs = 8;
            c.hnd = 1;
            c.causal = 1;
            c.alibi = 1;
            c.splits = 2;
        } break;
        default: { /* the 30-token sequence alone (packed) against the batch (unpacked: a 200-token
                      query), bit for bit; G = 4 and ALiBi */
            static const int ql[] = {1, 200, 1, 30}, kl[] = {3000, 400, 50, 900};
            set_seqs(&c, 4, ql, kl);
            c.causal = 1;
            c.alibi = 1;
            c.alone = 4;
        } break;
        }
        c.pack_ab = v < 8;
#ifndef GT_GPU_IS_CPU
        if (!gt_check(fa_cuda_backend_set_gqa_pack(gt_gpu(),
                                                   c.pack_ab ? FA_CUDA_GQA_PACK_ON : FA_CUDA_GQA_PACK_AUTO),
                      gt_gpu(), "fa_cuda_backend_set_gqa_pack"))
            return;
#endif /* GT_GPU_IS_CPU */
        run_named("gqa packing", &c);
    }
#ifndef GT_GPU_IS_CPU
    gt_check(fa_cuda_backend_set_gqa_pack(gt_gpu(), FA_CUDA_GQA_PACK_AUTO), gt_gpu(), "set_gqa_pack(auto)");
#endif /* GT_GPU_IS_CPU */
}

/* num_splits <= 1: a sequence's output bits do not depend on the rest of the batch. */
static void test_batch_invariance(void)
{
    static const int ql[] = {1, 200, 1, 30}, kl[] = {3000, 400, 50, 90};
    int v;
    for (v = 0; v < 2; ++v) {
        acase c = base_case(v ? FA_DTYPE_F16 : FA_DTYPE_BF16, 128, 16, 8, 2);
        set_seqs(&c, 4, ql, kl);
        c.causal = 1;
        c.alone = v ? 1 : 2; /* a decode row (packed tile) and a prefill */
        c.alibi = v ? 2 : 0;
        c.kvdt = v ? FA_DTYPE_FP8_E4M3 : c.qdt;
        c.descale = v;
        run_named("batch invariance", &c);
    }
}

/* fa_attn_args.work_counters: each call again with zeroed counters must give the same bits and
   leave them zero. The wgmma family's plain kernels at heads 64 / 128 may take their work items
   from them (a persistent grid, more items than SMs here: 16 query heads x 14 row blocks, and one
   sequence of 10 row blocks x 16 heads); a split call, block size 3 (the cp.async producer),
   head 256 and an fp8 cache must leave them alone. */
static void test_work_counters(void)
{
    static const int ql[] = {384, 640, 256, 500}, kl[] = {384, 640, 700, 500};
    static const int q1[] = {1280}, k1[] = {1300};
    int v;
#ifndef GT_GPU_IS_CPU
    /* the persistent grid on for every call of this group (the backend's default, auto, takes it
       only where max_seqlen_q <= FA_CUDA_PERSIST_AUTO_ROWS) */
    if (!gt_check(fa_cuda_backend_set_persistent(gt_gpu(), FA_CUDA_PERSIST_ON), gt_gpu(),
                  "fa_cuda_backend_set_persistent(on)"))
        return;
#endif
    for (v = 0; v < 7; ++v) {
        acase c = base_case(v == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16, v == 1 ? 64 : (v == 5 ? 256 : 128),
                            v == 3 ? 3 : 16, 16, 4);
        set_seqs(&c, 4, ql, kl);
        c.causal = v != 3;
        c.counters = 2;
        switch (v) {
        case 1: c.dense = 1; break; /* head 64, dense K/V, f16 */
        case 2: set_seqs(&c, 1, q1, k1); break; /* one sequence: heads outermost */
        case 3: break; /* block 3: the cp.async producer, one CTA an item */
        case 4: c.splits = 2; break; /* the General kernels */
        case 5: c.counters = 1; break; /* head 256 */
        case 6: /* an fp8 cache (the KV8 kernels) */
            c.kvdt = FA_DTYPE_FP8_E4M3;
            c.descale = 1;
            c.counters = 1;
            break;
        }
        if (v != 0 && v != 2 && gt()->quick) continue; /* --quick: the two persistent cases */
        run_named("work counters", &c);
    }
#ifndef GT_GPU_IS_CPU
    gt_check(fa_cuda_backend_set_persistent(gt_gpu(), FA_CUDA_PERSIST_AUTO), gt_gpu(),
             "fa_cuda_backend_set_persistent(auto)");
#endif
}

/* The multi-warp decode tile (docs/cuda.md): one-token sequences of heads 64 / 128 with up to 16
   query heads per KV head (two n8 column fragments past 8) and of head 256 with up to 8 (16: the
   packed tile), an E4M3 cache at either q dtype,
   the features of a decode row (window, softcap, ALiBi, sinks, no LSE), splits with a plan
   (0: untouched), page size 1, dense K/V, hot logits; a decode call with a speculative row (the
   packed tile runs it, filter 3) and a one-token row next to a prefill (filter 4) alone vs in
   the batch, bit for bit. */
static void test_multiwarp_decode(void)
{
    static const int ql[] = {1, 1, 1, 1, 1}, kl[] = {4097, 1, 33, 1500, 0};
    static const int ql2[] = {1, 1, 3, 1}, kl2[] = {900, 60, 700, 2};
    static const int ql3[] = {1, 300, 1}, kl3[] = {2000, 300, 17};
    acase c = base_case(FA_DTYPE_F16, 64, 16, 12, 1);
    set_seqs(&c, 5, ql, kl);
    c.kvdt = FA_DTYPE_FP8_E4M3;
    c.descale = 1;
    c.causal = 1;
    c.splits = 5;
    c.use_plan = 1;
    c.plan[0] = 5;
    c.plan[1] = 1;
    c.plan[2] = 0;
    c.plan[3] = 3;
    c.plan[4] = 2;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 128, 16, 48, 8);
    set_seqs(&c, 5, ql, kl);
    c.kvdt = FA_DTYPE_FP8_E4M3;
    c.causal = 1;
    c.wl = 100;
    c.softcap = 30.0f;
    c.alibi = 2;
    c.sinks = 1;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 128, 1, 16, 1);
    set_seqs(&c, 5, ql, kl);
    c.causal = 1;
    c.amp = 16.0f;
    c.splits = 2;
    c.lse = 0;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 64, 16, 8, 2);
    set_seqs(&c, 5, ql, kl);
    c.dense = 1;
    c.sinks = 2;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_F16, 128, 16, 8, 2);
    set_seqs(&c, 4, ql2, kl2);
    c.causal = 1;
    c.alone = 3;
    run_named("multi-warp decode", &c);
    c.alone = 4;
    c.kvdt = FA_DTYPE_FP8_E4M3;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 64, 16, 16, 1);
    set_seqs(&c, 3, ql3, kl3);
    c.causal = 1;
    c.alibi = 1;
    c.alone = 3;
    run_named("multi-warp decode", &c);
    /* E4M3 at head 64 over 8k+ keys with more than two CTAs an SM (40 sequences x 8 KV heads):
       the 6-stage ring; the first sequence alone (8 CTAs) takes the 3-stage one, bit for bit */
    if (!gt_quick()) {
        int b;
        c = base_case(FA_DTYPE_BF16, 64, 16, 32, 8);
        c.nseq = 40;
        for (b = 0; b < c.nseq; ++b) {
            c.qlen[b] = 1;
            c.klen[b] = 8200 + 13 * b;
        }
        c.kvdt = FA_DTYPE_FP8_E4M3;
        c.descale = 1;
        c.causal = 1;
        c.alone = 1;
        run_named("multi-warp decode", &c);
    }
    /* head 256: one column fragment (G <= 8); G = 16 keeps the packed tile */
    c = base_case(FA_DTYPE_BF16, 256, 16, 32, 8);
    set_seqs(&c, 5, ql, kl);
    c.kvdt = FA_DTYPE_FP8_E4M3;
    c.descale = 1;
    c.causal = 1;
    c.wl = 700;
    c.softcap = 20.0f;
    c.alibi = 2;
    c.splits = 3;
    c.use_plan = 1;
    c.plan[0] = 3;
    c.plan[1] = 2;
    c.plan[2] = 1;
    c.plan[3] = 3;
    c.plan[4] = 0;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_F16, 256, 1, 8, 1);
    set_seqs(&c, 5, ql, kl);
    c.causal = 1;
    c.sinks = 1;
    c.amp = 8.0f;
    c.splits = 2;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 256, 16, 8, 8);
    set_seqs(&c, 4, ql2, kl2);
    c.causal = 1;
    c.alone = 3;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 256, 16, 16, 1);
    set_seqs(&c, 4, ql2, kl2);
    c.kvdt = FA_DTYPE_FP8_E4M3;
    c.causal = 1;
    c.alone = 4;
    run_named("multi-warp decode", &c);
    /* a bf16 query over an E4M3 cache, query heads 0 .. 2^100 in size (the per-head f16 scale:
       zero, a subnormal largest |q|, the clamp at 2^127, huge heads), one and two fragments */
    c = base_case(FA_DTYPE_BF16, 64, 16, 16, 2);
    set_seqs(&c, 5, ql, kl);
    c.kvdt = FA_DTYPE_FP8_E4M3;
    c.descale = 1;
    c.qscale = 1;
    c.splits = 3;
    run_named("multi-warp decode", &c);
    c = base_case(FA_DTYPE_BF16, 128, 16, 32, 2);
    set_seqs(&c, 5, ql, kl);
    c.kvdt = FA_DTYPE_FP8_E4M3;
    c.qscale = 1;
    run_named("multi-warp decode", &c);
}

/* A cache of more than 2^31 elements: block ids above 2^31 / block_stride. */
static void test_large_cache(void)
{
    fa_backend *gpu = gt_gpu(), *cpu = gt_cpu();
    const int32_t Hq = 8, Hkv = 8, D = 128, bs = 16, B = 2;
    const int64_t kbs = (int64_t)bs * Hkv * D, NB = ((int64_t)1 << 31) / kbs + 4096;
    const int32_t kl[2] = {70, 40}; /* q lengths 1 and 20 (cu below) */
    int32_t ids[2][8] = {{(int32_t)NB - 1, 3, (int32_t)NB - 7, 131070, 0}, {(int32_t)NB - 2, 131073, 7}};
    const fa_dtype qd = FA_DTYPE_BF16;
    const int32_t T = 21;
    const size_t cache_bytes = (size_t)(NB * kbs) * 2;
    uint16_t *q = NULL, *out = NULL, *kb = NULL, *vb = NULL;
    float *qf = NULL, *kf = NULL, *vf = NULL, *ref = NULL, *rlse = NULL, *glse = NULL;
    void *dk = NULL, *dv = NULL, *dq = NULL, *dout = NULL, *dlse = NULL, *dcu = NULL, *dseq = NULL,
         *dbt = NULL;
    int32_t cu[3] = {0, 1, 21}, bt_g[2][8], bt_c[2][8], b, j, i;
    fa_attn_args a;
    fa_status st;
#ifdef GT_GPU_IS_CPU
    return;
#endif
    if (!gt_case("64-bit offsets: %lld blocks x %lld elements = %.2fG elements per cache, ids up to %lld",
                 (long long)NB, (long long)kbs, (double)(NB * kbs) / 1e9, (long long)NB - 1))
        return;
    if (gt_heavy()) {
        gt_case_end();
        return;
    }
    dk = gt_dmalloc_status(cache_bytes, 1, &st);
    if (dk) dv = gt_dmalloc_status(cache_bytes, 1, &st);
    if (!dk || !dv) {
        gt_skip("cannot allocate 2 x %.1f GB", (double)cache_bytes / 1e9);
        goto done;
    }
    if (!gt_check(gpu->ops.fill(gpu->ctx, dk, 0, GT_POISON, cache_bytes, 1), gpu, "fill") ||
        !gt_check(gpu->ops.fill(gpu->ctx, dv, 0, GT_POISON, cache_bytes, 1), gpu, "fill"))
        goto done;
    /* host: a compact copy (block c of sequence b at compact id b * 8 + c) */
    kb = (uint16_t *)gt_xmalloc((size_t)16 * kbs * 2);
    vb = (uint16_t *)gt_xmalloc((size_t)16 * kbs * 2);
    gt_poison(kb, (size_t)16 * kbs * 2);
    gt_poison(vb, (size_t)16 * kbs * 2);
    for (b = 0; b < B; ++b)
        for (j = 0; j < 8; ++j) {
            bt_g[b][j] = j < (kl[b] + bs - 1) / bs ? ids[b][j] : -1;
            bt_c[b][j] = b * 8 + j;
        }
    for (b = 0; b < B; ++b)
        for (j = 0; j < kl[b]; ++j) {
            int64_t o = (int64_t)bt_c[b][j / bs] * kbs + (int64_t)(j % bs) * Hkv * D;
            gt_fill_uniform(kb + o, (int64_t)Hkv * D, qd, -2.0f, 2.0f);
            gt_fill_uniform(vb + o, (int64_t)Hkv * D, qd, -1.0f, 1.0f);
        }
    /* upload the used blocks to their large ids */
    for (b = 0; b < B; ++b)
        for (j = 0; j < (kl[b] + bs - 1) / bs; ++j) {
            size_t off = (size_t)((int64_t)bt_g[b][j] * kbs) * 2;
            if (!gt_h2d((char *)dk + off, kb + (int64_t)bt_c[b][j] * kbs, (size_t)kbs * 2) ||
                !gt_h2d((char *)dv + off, vb + (int64_t)bt_c[b][j] * kbs, (size_t)kbs * 2))
                goto done;
        }
    q = (uint16_t *)gt_xmalloc((size_t)T * Hq * D * 2);
    gt_fill_uniform(q, (int64_t)T * Hq * D, qd, -2.0f, 2.0f);
    qf = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
    for (i = 0; i < T * Hq * D; ++i) qf[i] = gt_load(q, i, qd);
    kf = (float *)gt_xmalloc(sizeof(float) * (size_t)16 * kbs);
    vf = (float *)gt_xmalloc(sizeof(float) * (size_t)16 * kbs);
    for (i = 0; i < 16 * kbs; ++i) {
        kf[i] = gt_load(kb, i, qd);
        vf[i] = gt_load(vb, i, qd);
    }
    dq = gt_dup(q, (size_t)T * Hq * D * 2);
    dout = gt_dmalloc((size_t)T * Hq * D * 2);
    dlse = gt_dmalloc(sizeof(float) * (size_t)Hq * T);
    dcu = gt_dup(cu, sizeof cu);
    dseq = gt_dup(kl, sizeof kl);
    dbt = gt_dup(bt_g, sizeof bt_g);
    if (!dq || !dout || !dlse || !dcu || !dseq || !dbt) goto done;
    memset(&a, 0, sizeof a);
    a.q_token_stride = (int64_t)Hq * D;
    a.q_head_stride = D;
    a.q_dtype = qd;
    a.k_block_stride = a.v_block_stride = kbs;
    a.k_row_stride = a.v_row_stride = (int64_t)Hkv * D;
    a.k_head_stride = a.v_head_stride = D;
    a.kv_dtype = qd;
    a.out_token_stride = (int64_t)Hq * D;
    a.out_head_stride = D;
    a.lse_head_stride = T;
    a.block_table_stride = 8;
    a.num_seqs = B;
    a.num_tokens = T;
    a.max_seqlen_q = 20;
    a.max_seqlen_k = 70;
    a.num_heads_q = Hq;
    a.num_heads_kv = Hkv;
    a.head_size = D;
    a.block_size = bs;
    a.num_blocks = NB;
    a.softmax_scale = 1.0f / sqrtf((float)D);
    a.causal = 1;
    a.window_left = -1;
    a.window_right = -1;
    a.num_splits = 1;
    {
        fa_attn_args g = a, c = a;
        g.q = dq;
        g.k = dk;
        g.v = dv;
        g.out = dout;
        g.lse = (float *)dlse;
        g.cu_seqlens_q = (int32_t *)dcu;
        g.seqused_k = (int32_t *)dseq;
        g.block_table = (int32_t *)dbt;
        if (!gt_check(gpu->ops.attention(gpu->ctx, &g), gpu, "attention")) goto done;
        ref = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
        rlse = (float *)gt_xmalloc(sizeof(float) * (size_t)Hq * T);
        c.q = qf;
        c.q_dtype = FA_DTYPE_F32;
        c.k = kf;
        c.v = vf;
        c.kv_dtype = FA_DTYPE_F32;
        c.out = ref;
        c.lse = rlse;
        c.cu_seqlens_q = cu;
        c.seqused_k = kl;
        c.block_table = &bt_c[0][0];
        if (!gt_check(cpu->ops.attention(cpu->ctx, &c), cpu, "attention (reference)")) goto done;
        out = (uint16_t *)gt_xmalloc((size_t)T * Hq * D * 2);
        glse = (float *)gt_xmalloc(sizeof(float) * (size_t)Hq * T);
        if (!gt_d2h(out, dout, (size_t)T * Hq * D * 2) || !gt_d2h(glse, dlse, sizeof(float) * (size_t)Hq * T))
            goto done;
        {
            float *got = (float *)gt_xmalloc(sizeof(float) * (size_t)T * Hq * D);
            for (i = 0; i < T * Hq * D; ++i) got[i] = gt_load(out, i, qd);
            gt_compare("out", got, ref, (int64_t)T * Hq * D, FA_DTYPE_F32, 2e-2, 0.0);
            gt_compare("lse", glse, rlse, (int64_t)Hq * T, FA_DTYPE_F32, 2e-3, 1e-4);
            free(got);
        }
    }
done:
    gt_dfree(dk);
    gt_dfree(dv);
    gt_dfree(dq);
    gt_dfree(dout);
    gt_dfree(dlse);
    gt_dfree(dcu);
    gt_dfree(dseq);
    gt_dfree(dbt);
    free(q);
    free(out);
    free(kb);
    free(vb);
    free(qf);
    free(kf);
    free(vf);
    free(ref);
    free(rlse);
    free(glse);
    gt_case_end();
}

/* Argument errors: the status and a message. */
static void test_errors(void)
{
    fa_backend *gpu = gt_gpu();
    fa_attn_args a;
    void *buf = NULL;
    int32_t cu[2] = {0, 1};
    void *dcu = NULL;
#ifdef GT_GPU_IS_CPU
    return; /* the CPU backend accepts f32 and any block size */
#endif
    if (!gt_case(
            "errors: head_size 12, f32 q, kv dtype mismatch, splits without workspace, paged without table"))
        return;
    buf = gt_dmalloc(1 << 20);
    dcu = gt_dup(cu, sizeof cu);
    if (!buf || !dcu) goto done;
    /* initialised: the calls that pass the checks read it (initcheck) */
    if (!gt_check(gpu->ops.fill(gpu->ctx, buf, 0, 0x3c, 1 << 20, 1), gpu, "fill")) goto done;
    memset(&a, 0, sizeof a);
    a.q = a.k = a.v = a.out = buf;
    a.q_token_stride = 128;
    a.q_head_stride = 128;
    a.k_block_stride = a.v_block_stride = 16 * 128;
    a.k_row_stride = a.v_row_stride = 128;
    a.k_head_stride = a.v_head_stride = 128;
    a.out_token_stride = 128;
    a.out_head_stride = 128;
    a.q_dtype = a.kv_dtype = FA_DTYPE_BF16;
    a.cu_seqlens_q = (int32_t *)dcu;
    a.seqused_k = (int32_t *)dcu + 1;
    a.block_table = (int32_t *)dcu;
    a.num_seqs = 1;
    a.num_tokens = 1;
    a.max_seqlen_q = 1;
    a.max_seqlen_k = 1;
    a.num_heads_q = 1;
    a.num_heads_kv = 1;
    a.head_size = 128;
    a.block_size = 16;
    a.num_blocks = 1;
    a.softmax_scale = 0.1f;
    a.window_left = a.window_right = -1;
    a.num_splits = 1;
    {
        fa_attn_args e = a;
        e.head_size = 12;
        gt_expect_status(gpu->ops.attention(gpu->ctx, &e), FA_ERR_INVALID_ARG, gpu, "head_size 12");
        e = a;
        e.q_dtype = e.kv_dtype = FA_DTYPE_F32;
        {
            fa_status st = gpu->ops.attention(gpu->ctx, &e);
            if (st != FA_ERR_UNSUPPORTED && st != FA_ERR_INVALID_ARG)
                gt_fail("f32 q on the GPU returned %d", (int)st);
        }
        e = a;
        e.kv_dtype = FA_DTYPE_F16;
        gt_expect_status(gpu->ops.attention(gpu->ctx, &e), FA_ERR_INVALID_ARG, gpu, "kv f16 with q bf16");
        e = a;
        e.num_splits = 3;
        gt_expect_status(gpu->ops.attention(gpu->ctx, &e), FA_ERR_INVALID_ARG, gpu,
                         "splits without workspace");
        e = a;
        e.block_table = NULL;
        gt_expect_status(gpu->ops.attention(gpu->ctx, &e), FA_ERR_INVALID_ARG, gpu,
                         "paged without block_table");
        e = a;
        e.block_size = -8;
        gt_expect_status(gpu->ops.attention(gpu->ctx, &e), FA_ERR_INVALID_ARG, gpu, "block_size -8");
        if (gpu->ops.last_error) {
            const char *m = gpu->ops.last_error(gpu->ctx);
            if (!m || !strstr(m, "-8"))
                gt_fail("the block_size message does not name the value: '%s'", m ? m : "(null)");
        }
        /* a valid call still works after the errors */
        gt_check(gpu->ops.attention(gpu->ctx, &a), gpu, "valid call after errors");
        gt_sync();
    }
done:
    gt_dfree(buf);
    gt_dfree(dcu);
    gt_case_end();
}

#ifndef FA_TEST_SM90_BUILT
#define FA_TEST_SM90_BUILT 0 /* meson: 1 when gpu_arch has sm_90a (the wgmma family is built) */
#endif

/* The kernel-family switch: argument errors, and the capability block follows it. On a 9.x
   device of a build with sm_90a, auto runs head 128's prefill in the wgmma family (so that the
   suite's bf16 head-128 paged cases test it); fa_cuda_backend_set_family(mma_sync) turns it off. */
static void test_family(void)
{
#ifdef GT_GPU_IS_CPU
    return;
#else /* !GT_GPU_IS_CPU */
    fa_backend *gpu = gt_gpu();
    const char *env = getenv("FA_GPU_FAMILY");
    const int restore = env != NULL && strcmp(env, "mma_sync") == 0 ? FA_CUDA_FAMILY_MMA_SYNC
                        : env != NULL && strcmp(env, "wgmma") == 0  ? FA_CUDA_FAMILY_WGMMA
                                                                    : FA_CUDA_FAMILY_AUTO;
    int wg_ok;
    int i, d = -1, want;
    if (!gt_case("kernel family: fa_cuda_backend_set_family and the capability block")) return;
    for (i = 0; i < gpu->caps.num_dims; ++i)
        if (gpu->caps.dims[i].head_dim == 128) d = i;
    gt_expect_status(fa_cuda_backend_set_family(NULL, 0), FA_ERR_INVALID_ARG, NULL, "set_family(NULL)");
    gt_expect_status(fa_cuda_backend_set_family(gt_cpu(), 0), FA_ERR_INVALID_ARG, NULL,
                     "set_family(cpu backend)");
    gt_expect_status(fa_cuda_backend_set_family(gpu, 3), FA_ERR_INVALID_ARG, gpu, "set_family(3)");
    gt_expect_status(fa_cuda_backend_set_family(gpu, -1), FA_ERR_INVALID_ARG, gpu, "set_family(-1)");
    gt_expect_status(fa_cuda_backend_set_persistent(NULL, 1), FA_ERR_INVALID_ARG, NULL,
                     "set_persistent(NULL)");
    gt_expect_status(fa_cuda_backend_set_persistent(gt_cpu(), 1), FA_ERR_INVALID_ARG, NULL,
                     "set_persistent(cpu backend)");
    gt_expect_status(fa_cuda_backend_set_persistent(gpu, 3), FA_ERR_INVALID_ARG, NULL,
                     "set_persistent(mode 3)");
    gt_expect_status(fa_cuda_backend_set_persistent(gpu, -1), FA_ERR_INVALID_ARG, NULL,
                     "set_persistent(mode -1)");
    gt_expect_status(fa_cuda_backend_set_gqa_pack(NULL, 1), FA_ERR_INVALID_ARG, NULL, "set_gqa_pack(NULL)");
    gt_expect_status(fa_cuda_backend_set_gqa_pack(gt_cpu(), 1), FA_ERR_INVALID_ARG, NULL,
                     "set_gqa_pack(cpu backend)");
    gt_expect_status(fa_cuda_backend_set_gqa_pack(gpu, 3), FA_ERR_INVALID_ARG, NULL, "set_gqa_pack(mode 3)");
    gt_expect_status(fa_cuda_backend_set_gqa_pack(gpu, -1), FA_ERR_INVALID_ARG, NULL,
                     "set_gqa_pack(mode -1)");
    /* wgmma: accepted exactly where auto would use the family; elsewhere refused, nothing changed */
    wg_ok = FA_TEST_SM90_BUILT && gpu->info.cc_major == 9;
    if (d >= 0 &&
        gt_expect_status(fa_cuda_backend_set_family(gpu, FA_CUDA_FAMILY_WGMMA),
                         wg_ok ? FA_OK : FA_ERR_UNSUPPORTED, gpu, "set wgmma") &&
        gpu->caps.dims[d].prefill_family != (wg_ok ? FA_KERNEL_FAMILY_WGMMA : FA_KERNEL_FAMILY_MMA_SYNC))
        gt_fail("wgmma: caps.dims[head 128].prefill_family = %d", (int)gpu->caps.dims[d].prefill_family);
    if (d >= 0) {
        if (gt_expect_status(fa_cuda_backend_set_family(gpu, FA_CUDA_FAMILY_MMA_SYNC), FA_OK, gpu,
                             "set mma_sync") &&
            gpu->caps.dims[d].prefill_family != FA_KERNEL_FAMILY_MMA_SYNC)
            gt_fail("mma_sync: caps.dims[head 128].prefill_family = %d",
                    (int)gpu->caps.dims[d].prefill_family);
        want = FA_TEST_SM90_BUILT && gpu->info.cc_major == 9 ? FA_KERNEL_FAMILY_WGMMA
                                                             : FA_KERNEL_FAMILY_MMA_SYNC;
        if (gt_expect_status(fa_cuda_backend_set_family(gpu, FA_CUDA_FAMILY_AUTO), FA_OK, gpu, "set auto") &&
            gpu->caps.dims[d].prefill_family != want)
            gt_fail(
                "auto on cc %d.%d (sm_90a built: %d): caps.dims[head 128].prefill_family = %d, expected %d",
                (int)gpu->info.cc_major, (int)gpu->info.cc_minor, FA_TEST_SM90_BUILT,
                (int)gpu->caps.dims[d].prefill_family, want);
        printf("#     head 128 prefill family under auto: %s\n",
               want == FA_KERNEL_FAMILY_WGMMA ? "wgmma" : "mma_sync");
    }
    gt_check(fa_cuda_backend_set_family(gpu, restore), gpu, "restore the family");
    gt_case_end();
#endif /* GT_GPU_IS_CPU */
}

int main(int argc, char **argv)
{
    if (gt_init(argc, argv) != 0) return gt_finish();
    test_head_sizes();
    test_blocks_heads();
    test_features();
    test_fp8();
    test_fp8_wgmma();
    test_splits();
    test_mixed_long();
    test_dense();
    test_edges();
    test_nan_edges();
    test_batch_invariance();
    test_work_counters();
    test_multiwarp_decode();
    test_family_edges();
    test_gqa_packing();
    test_large_cache();
    test_errors();
    test_family();
    return gt_finish();
}
