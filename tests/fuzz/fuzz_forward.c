/* fuzz_forward: fa_forward / fa_forward_profile on the CPU backend, small shapes: a builder and
   a layer from the input, one or two steps (cache write + attention: plain, cascade, chunked
   local, encoder, cross-attention), sometimes broken tensors. Checks: guards around every
   buffer; q/k/v never written; on error out and the KV cache unchanged; on FA_OK the first T
   rows of out finite (finite inputs, moderate scales), rows past T untouched, and the cache
   changed only at the slots of this step's tokens. */
#include "fuzz_common.h"
#include "fa_cpu.h"

#define MAXR 4
#define MAXT 24
#define TPAD 2

static fa_backend *cpu_be(void)
{
    static fa_backend *be;
    if (be == NULL) FZ_CHECK(fa_cpu_backend_create(&be) == FA_OK);
    return be;
}

/* A second CPU backend that reports a small GPU (few SMs, a cheap split combine), so that the
   planner splits these small batches and the split-KV path (partials in the builder's
   workspace, the combine) runs too. The CPU ops read none of these fields. */
static fa_backend *small_be(int32_t sms)
{
    static fa_backend *be;
    if (be == NULL) FZ_CHECK(fa_cpu_backend_create(&be) == FA_OK);
    be->info.num_sms = sms;
    be->caps.combine_us = 0.0f;
    be->caps.combine_us_per_split = 0.0f;
    be->caps.cta_us = 0.0f;
    return be;
}

static uint32_t rng_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* a value in [-2, 2] stored as dtype t at index i */
static void put(void *base, int64_t i, fa_dtype t, float x)
{
    switch (t) {
    case FA_DTYPE_F32: ((float *)base)[i] = x; break;
    case FA_DTYPE_F16: ((uint16_t *)base)[i] = fa_cpu_float_to_half(x); break;
    case FA_DTYPE_BF16: ((uint16_t *)base)[i] = fa_cpu_float_to_bf16(x); break;
    default: ((uint8_t *)base)[i] = fa_cpu_float_to_fp8(x, t); break;
    }
}

static float get(const void *base, int64_t i, fa_dtype t)
{
    switch (t) {
    case FA_DTYPE_F32: return ((const float *)base)[i];
    case FA_DTYPE_F16: return fa_cpu_half_to_float(((const uint16_t *)base)[i]);
    case FA_DTYPE_BF16: return fa_cpu_bf16_to_float(((const uint16_t *)base)[i]);
    default: return fa_cpu_fp8_to_float(((const uint8_t *)base)[i], t);
    }
}

static void fill(void *base, int64_t n, fa_dtype t, uint32_t *seed)
{
    int64_t i;
    for (i = 0; i < n; ++i) put(base, i, t, ((float)(rng_next(seed) % 4001) - 2000.0f) / 1000.0f);
}

/* an occasional defect in a tensor view; returns 1 when it changed the view */
static int maybe_break(fz_reader *r, fa_tensor *t)
{
    fa_tensor before = *t;
    switch (fz_u8(r) % 24) {
    case 1: t->data = NULL; break;
    case 2: t->rank = fz_i32(r); break;
    case 3: t->dtype = (fa_dtype)fz_i32(r); break;
    case 4: { /* a wrong extent; a larger leading one than allocated only where rows are not read */
        int j = fz_range(r, 0, 4);
        int64_t x = fz_i64(r);
        if (j == 1 && t->rank == 5 && x > t->shape[1]) x = -x; /* more cache blocks than exist */
        if (j == 0 && t->rank == 3 && x > t->shape[0])
            x = -x;  /* more rows than exist (the profiling run writes them all) */
        t->shape[j] = x;
        break;
    }
    case 5: { /* a stride that cannot be valid, or a smaller one (a larger one would describe memory
                 the caller does not have: a caller bug, not the library's) */
        int j = fz_range(r, 0, 4);
        int64_t x = fz_i64(r);
        if (x > t->stride[j] && !(j == t->rank - 1 && x != 1)) x = -x;
        t->stride[j] = x;
        break;
    }
    default: break;
    }
    return memcmp(&before, t, sizeof before) != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_reader r;
    fa_config cfg;
    fa_builder *b = NULL;
    fa_backend *be;
    fa_layer layer;
    fa_layer_desc d;
    const fa_config *rc;
    fa_dtype dt, cdt;
    int32_t Hq, Hkv, D, bs, nb, step, i;
    size_t es, ces;
    float slopes[8], sinks[8];
    uint32_t seed;
    fz_buf qb, kb, vb, ob, cb, sb, ab, snb;
    fa_tensor q, k, v, out, cache;
    int64_t qshape[3], kshape[3], cshape[5], ntok_q, ntok_k, ncache;
    int moderate = 1;
    fa_status s;
    fz_init(&r, data, size);
    seed = (uint32_t)fz_raw(&r, 4);
    memset(&cfg, 0, sizeof cfg);
    Hkv = fz_range(&r, 1, 2);
    Hq = Hkv * fz_range(&r, 1, 2);
    D = 8 * fz_range(&r, 1, 4);
    dt = (fa_dtype)fz_range(&r, 0, 2);
    {
        static const int32_t sizes[4] = {16, 32, 1, 3}; /* any block size >= 1 */
        bs = sizes[fz_range(&r, 0, 3)];
    }
    nb = fz_range(&r, 1, 6);
    cfg.model.num_heads_q = Hq;
    cfg.model.num_heads_kv = Hkv;
    cfg.model.head_size = D;
    cfg.model.dtype = dt;
    cfg.cache.block_size = bs;
    cfg.cache.cache_dtype = (fa_cache_dtype)fz_range(&r, 0, 3);
    cfg.compilation.max_num_splits = fz_range(&r, 0, 8);
    cfg.compilation.batch_invariant = fz_u8(&r) == 1;
    cfg.compilation.full_cuda_graph = fz_u8(&r) == 1;
    cfg.scheduler.max_num_seqs = MAXR;
    cfg.scheduler.max_num_batched_tokens = MAXT;
    cfg.scheduler.attention_chunk_size = fz_bool(&r) ? 0 : bs * fz_range(&r, 1, 2);
    cfg.debug.validate = fz_u8(&r) == 1;
    be = fz_bool(&r) ? cpu_be() : small_be(fz_range(&r, 1, 4));
    if (fa_builder_create(be, &cfg, NULL, &b) != FA_OK) return 0;
    rc = fa_builder_config(b);

    memset(&d, 0, sizeof d);
    d.num_heads_q = Hq;
    d.num_heads_kv = Hkv;
    d.head_size = D;
    d.dtype = dt;
    d.attn_type = (fa_attn_type)((fz_u8(&r) & 3) ? 0 : fz_range(&r, 0, 3));
    d.sliding_window = fz_bool(&r) ? 0 : fz_range(&r, -1, 40); /* -1 and 0: none */
    d.logits_soft_cap = fz_bool(&r) ? 0.0f : fz_float(&r);
    d.scale = fz_bool(&r) ? 0.0f : fz_float(&r);
    for (i = 0; i < 8; ++i) {
        slopes[i] = (float)fz_u8(&r) / 64.0f;
        sinks[i] = (float)fz_u8(&r) / 32.0f - 4.0f;
    }
    if (fz_u8(&r) == 1) {
        d.alibi_slopes = slopes;
        d.num_alibi_slopes = Hq;
    }
    if (fz_u8(&r) == 2) {
        d.sinks = sinks;
        d.num_sinks = Hq;
    }
    d.kv_cache_dtype = (fa_cache_dtype)(fz_bool(&r) ? 0 : fz_range(&r, 0, 3));
    d.k_scale = fz_bool(&r) ? 0.0f : fz_float(&r);
    d.v_scale = fz_bool(&r) ? 0.0f : fz_float(&r);
    d.kv_sharing = fz_u8(&r) == 1;
    d.attention_chunk_size = fz_bool(&r) ? rc->scheduler.attention_chunk_size : fz_range(&r, 0, 64);
    if (fa_layer_init(&layer, &d) != FA_OK) {
        fa_builder_destroy(b);
        return 0;
    }
    /* finiteness is checked for moderate scales only (a huge scale may overflow f16 honestly) */
    if (!(layer.scale < 64.0f) || !(layer.k_scale > 0.05f && layer.k_scale < 8.0f) ||
        !(layer.v_scale > 0.05f && layer.v_scale < 8.0f) || !(layer.softcap < 1e6f))
        moderate = 0;
    if (fz_u8(&r) == 1) (void)fa_builder_set_layers(b, &layer, 1);

    cdt = fa_cache_storage_dtype(layer.desc.kv_cache_dtype, dt);
    es = fa_dtype_size(dt);
    ces = fa_dtype_size(cdt);
    ntok_q = (int64_t)(MAXT + TPAD) * Hq * D;
    ntok_k = (int64_t)(MAXT + TPAD) * Hkv * D;
    ncache = (int64_t)2 * nb * bs * Hkv * D;
    fill(fz_buf_new(&qb, (size_t)ntok_q * es), ntok_q, dt, &seed);
    fill(fz_buf_new(&kb, (size_t)ntok_k * es), ntok_k, dt, &seed);
    fill(fz_buf_new(&vb, (size_t)ntok_k * es), ntok_k, dt, &seed);
    fill(fz_buf_new(&cb, (size_t)ncache * ces), ncache, cdt, &seed);
    fz_buf_new(&ob, (size_t)ntok_q * es);
    fz_buf_new(&sb, 8 * sizeof(float));
    fz_buf_new(&ab, 8 * sizeof(float));
    fz_buf_new(&snb, 1);
    fz_buf_snap(&qb);
    fz_buf_snap(&kb);
    fz_buf_snap(&vb);

    for (step = 0; step < 2 && r.i < r.n; ++step) {
        int32_t n = fz_range(&r, 1, MAXR), qsl[MAXR + 1], seq[MAXR], table[MAXR * 8], rs = nb, T, P = 0, t;
        int64_t slots[MAXT], written[MAXT];
        fa_batch batch;
        fa_metadata md;
        int use_k, cache_view_changed, inject;
        qsl[0] = 0;
        for (i = 0; i < n; ++i) {
            int32_t ql = (fz_u8(&r) & 1) ? 1 : fz_range(&r, 0, 8), ctx = fz_range(&r, 0, nb * bs);
            if (qsl[i] + ql > MAXT) ql = MAXT - qsl[i];
            qsl[i + 1] = qsl[i] + ql;
            seq[i] = ctx + ql > nb * bs ? nb * bs : ctx + ql;
            if (seq[i] < ql && fz_u8(&r) != 1) seq[i] = ql; /* usually a valid causal batch */
        }
        T = qsl[n];
        for (i = 0; i < n * rs;
             ++i) { /* block ids in range; rarely anything (must be refused before any write) */
            table[i] = fz_u8(&r) == 1 ? fz_small_or_any(&r, -2, nb + 2) : fz_range(&r, 0, nb - 1);
        }
        for (t = 0; t < T; ++t) slots[t] = -1;
        for (i = 0; i < n; ++i) /* the slots of each request's new tokens (positions seq-ql .. seq-1) */
            for (t = qsl[i]; t < qsl[i + 1]; ++t) {
                int64_t p = seq[i] - (qsl[i + 1] - t);
                uint8_t how = fz_u8(&r);
                if (p >= 0 && p < (int64_t)rs * bs && how != 1)
                    slots[t] = (int64_t)table[i * rs + p / bs] * bs + p % bs;
                else if (how == 1)
                    slots[t] = fz_i64(&r);
            }
        memset(&batch, 0, sizeof batch);
        batch.num_reqs = n;
        batch.query_start_loc = qsl;
        batch.seq_lens = seq;
        batch.block_table = table;
        batch.block_table_host = table;
        batch.block_table_stride = rs;
        batch.slot_mapping = slots;
        batch.causal = (fa_causal)((fz_u8(&r) & 3) ? 0 : fz_range(&r, 0, 2));
        if (fz_bool(&r)) {
            int32_t blocks = fz_range(&r, 0, nb);
            if (fa_builder_cascade_prefix_len(b, &batch, blocks, &P) != FA_OK) P = 0;
            if (fz_u8(&r) == 1) P = bs * fz_range(&r, 1, 2);
        }
        if (fa_builder_build(b, &batch, P, &md) != FA_OK) continue;

        /* tensors: packed [MAXT + TPAD, H, D]; sometimes a padded token stride (q/out) */
        qshape[0] = MAXT + TPAD;
        qshape[1] = Hq;
        qshape[2] = D;
        kshape[0] = MAXT + TPAD;
        kshape[1] = Hkv;
        kshape[2] = D;
        cshape[0] = 2;
        cshape[1] = nb;
        cshape[2] = bs;
        cshape[3] = Hkv;
        cshape[4] = D;
        q = fa_tensor_make(fz_buf_data(&qb), dt, 3, qshape);
        out = fa_tensor_make(fz_buf_data(&ob), dt, 3, qshape);
        k = fa_tensor_make(fz_buf_data(&kb), dt, 3, kshape);
        v = fa_tensor_make(fz_buf_data(&vb), dt, 3, kshape);
        cache = fa_tensor_make(fz_buf_data(&cb), cdt, 5, cshape);
        if (fz_u8(&r) == 1) {
            q.shape[0] = MAXT + TPAD - 1;
            out.shape[0] = MAXT + TPAD - 1;
        } /* still >= T */
        maybe_break(&r, &q);
        maybe_break(&r, &k);
        maybe_break(&r, &v);
        maybe_break(&r, &out);
        cache_view_changed = maybe_break(&r, &cache);
        use_k = fz_u8(&r) != 1;
        fz_buf_snap(&ob);
        fz_buf_snap(&cb);
        for (t = 0; t < MAXT; ++t) written[t] = slots[t];

        inject = fz_u8(&r) == 1; /* a device fault: the Nth call of one op fails after its checks */
        if (inject) {
            fa_cpu_backend_options o;
            memset(&o, 0, sizeof o);
            o.fail_op = (fa_op)fz_range(&r, 0, 3);
            o.fail_op_at = fz_range(&r, 1, 3);
            FZ_CHECK(fa_cpu_backend_set_options(be, &o) == FA_OK);
        }
        if (fz_u8(&r) == 1) {
            s = fa_forward_profile(&layer, be, &out);
            fz_check_status(s, "fa_forward_profile", "backend 'cpu' op");
        } else {
            s = fa_forward(&layer, be, &q, use_k ? &k : NULL, use_k ? &v : NULL, &cache,
                           fz_u8(&r) == 1 ? NULL : &md, &out);
            fz_check_status(s, "fa_forward", "backend 'cpu' op"); /* op failures: api.md §2 format */
        }
        FZ_CHECK(fz_buf_guards_ok(&qb) && fz_buf_guards_ok(&kb) && fz_buf_guards_ok(&vb) &&
                 fz_buf_guards_ok(&ob) && fz_buf_guards_ok(&cb));
        FZ_CHECK(fz_buf_unchanged(&qb) && fz_buf_unchanged(&kb) &&
                 fz_buf_unchanged(&vb)); /* inputs are const */
        if (inject) {
            FZ_CHECK(fa_cpu_backend_set_options(be, NULL) == FA_OK);
            if (s != FA_OK && strstr(fa_last_error(), "injected") != NULL) {
                /* a fault while running: its status, naming backend and op; what earlier ops of
                   the step wrote (the cache) may stay (api.md §2) */
                FZ_CHECK(s == FA_ERR_BACKEND && strstr(fa_last_error(), "backend 'cpu' op") != NULL);
                continue;
            }
        }
        if (s != FA_OK) {
#ifdef FZ_DEBUG
            fprintf(stderr,
                    "error %d: %s | out same %d cache same %d | attn %d kvdt %d sharing %d use_k %d T %d P "
                    "%d chunk %d/%d\n",
                    (int)s, fa_last_error(), fz_buf_unchanged(&ob), fz_buf_unchanged(&cb),
                    (int)layer.desc.attn_type, (int)layer.desc.kv_cache_dtype, layer.desc.kv_sharing, use_k,
                    T, P, layer.desc.attention_chunk_size, rc->scheduler.attention_chunk_size);
#endif
            FZ_CHECK(fz_buf_unchanged(&ob) && fz_buf_unchanged(&cb));
            continue;
        }
#ifdef FZ_DEBUG
        fprintf(stderr, "forward ok: T %d n %d P %d attn %d chunk %d splits %d\n", T, n, P,
                (int)layer.desc.attn_type, layer.desc.attention_chunk_size, md.num_splits);
#endif
        {
            /* out: rows < T finite; rows >= T as before (a profiling run zeroes every row) */
            const uint8_t *o = (const uint8_t *)fz_buf_data(&ob), *o0 = ob.snap;
            int64_t row = (int64_t)Hq * D, e;
            int profile = out.shape[0] > 0 && memcmp(o, o0, ob.bytes) != 0 && T == 0;
            (void)profile;
            for (t = 0; t < MAXT + TPAD; ++t) {
                if (t < T) {
                    for (e = 0; e < row && moderate; ++e) FZ_CHECK(isfinite(get(o, t * row + e, dt)));
                } else if (memcmp(o + t * row * es, o0 + t * row * es, (size_t)(row * es)) != 0) {
                    /* only the profiling run writes past T: it writes zeros */
                    for (e = 0; e < row; ++e) FZ_CHECK(get(o, t * row + e, dt) == 0.0f);
                }
            }
        }
        {
            /* cache: changed only inside blocks/slots written by this step's tokens */
            const uint8_t *c = (const uint8_t *)fz_buf_data(&cb), *c0 = cb.snap;
            int64_t slot_elems = (int64_t)Hkv * D, sidx, kv;
            for (kv = 0; kv < 2 && !cache_view_changed; ++kv) /* a smaller stride maps slots elsewhere */
                for (sidx = 0; sidx < (int64_t)nb * bs; ++sidx) {
                    int64_t off = (kv * nb * bs + sidx) * slot_elems * (int64_t)ces;
                    if (memcmp(c + off, c0 + off, (size_t)(slot_elems * (int64_t)ces)) != 0) {
                        int found = 0;
                        for (t = 0; t < T; ++t)
                            if (written[t] == sidx) found = 1;
                        FZ_CHECK(found && use_k && !layer.desc.kv_sharing);
                    }
                }
        }
    }
    fz_buf_free(&qb);
    fz_buf_free(&kb);
    fz_buf_free(&vb);
    fz_buf_free(&ob);
    fz_buf_free(&cb);
    fz_buf_free(&sb);
    fz_buf_free(&ab);
    fz_buf_free(&snb);
    fa_builder_destroy(b);
    return 0;
}
