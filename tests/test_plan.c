/* Planner unit tests: every pure planning function of flashattn.h against the worked examples
   of docs/SEMANTICS.md and against brute-force properties on random inputs (fixed seeds). */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* ---------------------------------------------------------------------------------------- */
/* helpers */

static int32_t cdiv32(int32_t a, int32_t b) { return (a + b - 1) / b; }

#define ASSERT_ERR(expr) \
    do { \
        fa_status st__ = (expr); \
        cr_assert_neq(st__, FA_OK, "%s unexpectedly succeeded", #expr); \
        cr_assert_str_neq(fa_last_error(), "", "%s failed without a message", #expr); \
    } while (0)

static void assert_i32_array(const int32_t *got, const int32_t *want, int n, const char *what)
{
    for (int i = 0; i < n; ++i)
        cr_assert_eq(got[i], want[i], "%s[%d] = %d, expected %d", what, i, got[i], want[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* >>local: chunked local attention virtual batches (SEMANTICS §8) */

/* The worked example of §8: C = 4, bs = 2, q = [4,10,5], seq_lens = [6,17,9]. */
static const int32_t ex_qsl[4] = {0, 4, 14, 19};
static const int32_t ex_seq[3] = {6, 17, 9};

Test(local, worked_example_count)
{
    int32_t v = -1;
    ASSERT_OK(fa_local_virtual_batches_count(4, ex_qsl, ex_seq, 3, &v));
    cr_assert_eq(v, 8, "V = %d, expected 8 (nblk = [2,4,2])", v);
}

Test(local, worked_example_arrays)
{
    int32_t bt[30];
    for (int i = 0; i < 30; ++i) bt[i] = i; /* rows [0..9], [10..19], [20..29] */
    int32_t sq[8], cu[9], sk[8], btl[16];
    memset(sq, 0x7f, sizeof sq);
    memset(cu, 0x7f, sizeof cu);
    memset(sk, 0x7f, sizeof sk);
    memset(btl, 0x7f, sizeof btl);
    fa_local_batches lb;
    memset(&lb, 0, sizeof lb);
    lb.seqlens_q = sq;
    lb.cu_seqlens_q = cu;
    lb.seqused_k = sk;
    lb.block_table = btl;
    ASSERT_OK(fa_make_local_virtual_batches(4, 2, ex_qsl, ex_seq, 3, bt, 10, 10, 8, &lb));
    cr_assert_eq(lb.num_virtual, 8);
    cr_assert_eq(lb.pages_per_virtual, 2, "pages_per_virtual = C / bs = 2, got %d", lb.pages_per_virtual);
    const int32_t want_sq[8] = {2, 2, 1, 4, 4, 1, 4, 1};
    const int32_t want_cu[9] = {0, 2, 4, 5, 9, 13, 14, 18, 19};
    const int32_t want_sk[8] = {4, 2, 4, 4, 4, 1, 4, 1};
    const int32_t want_bt[16] = {0, 1, 2, 3, 12, 13, 14, 15, 16, 17, 18, 19, 22, 23, 24, 25};
    assert_i32_array(sq, want_sq, 8, "seqlens_q_local");
    assert_i32_array(cu, want_cu, 9, "cu_seqlens_q_local");
    assert_i32_array(sk, want_sk, 8, "seqused_k_local");
    assert_i32_array(btl, want_bt, 16, "block_table_local");
    cr_assert_eq(lb.max_query_len, 4, "max_query_len %d", lb.max_query_len);
    cr_assert_eq(lb.max_seq_len, 4, "max_seq_len %d", lb.max_seq_len);
}

/* The same example with a wider row stride: the table's row stride must be honoured. */
Test(local, worked_example_row_stride)
{
    int32_t bt[3 * 13];
    for (int i = 0; i < 3 * 13; ++i) bt[i] = -999;
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 10; ++c) bt[r * 13 + c] = r * 10 + c;
    int32_t sq[8], cu[9], sk[8], btl[16];
    fa_local_batches lb;
    memset(&lb, 0, sizeof lb);
    lb.seqlens_q = sq;
    lb.cu_seqlens_q = cu;
    lb.seqused_k = sk;
    lb.block_table = btl;
    ASSERT_OK(fa_make_local_virtual_batches(4, 2, ex_qsl, ex_seq, 3, bt, 13, 10, 8, &lb));
    const int32_t want_bt[16] = {0, 1, 2, 3, 12, 13, 14, 15, 16, 17, 18, 19, 22, 23, 24, 25};
    assert_i32_array(btl, want_bt, 16, "block_table_local (row stride 13)");
}

/* Brute-force property check of a virtual-batch plan against the original batch. */
static void check_local_plan(int32_t C, int32_t bs, const int32_t *qsl, const int32_t *seq, int32_t n,
                             const int32_t *bt, int64_t stride, int32_t max_blocks,
                             const fa_local_batches *lb, int32_t V)
{
    int32_t ppv = C / bs;
    cr_assert_eq(lb->num_virtual, V);
    cr_assert_eq(lb->pages_per_virtual, ppv);
    cr_assert_eq(lb->cu_seqlens_q[0], 0);
    int32_t maxq = 0, maxk = 0;
    for (int32_t v = 0; v < V; ++v) {
        cr_assert_geq(lb->seqlens_q[v], 1, "virtual %d has %d queries", v, lb->seqlens_q[v]);
        cr_assert_eq(lb->cu_seqlens_q[v + 1], lb->cu_seqlens_q[v] + lb->seqlens_q[v],
                     "cu_seqlens_q is not the cumsum of seqlens_q at %d", v);
        cr_assert_leq(lb->seqused_k[v], C, "virtual %d sees %d > C keys", v, lb->seqused_k[v]);
        cr_assert_geq(lb->seqused_k[v], lb->seqlens_q[v]);
        if (lb->seqlens_q[v] > maxq) maxq = lb->seqlens_q[v];
        if (lb->seqused_k[v] > maxk) maxk = lb->seqused_k[v];
    }
    cr_assert_eq(lb->cu_seqlens_q[V], qsl[n], "virtual batches cover %d of %d tokens", lb->cu_seqlens_q[V],
                 qsl[n]);
    cr_assert_eq(lb->max_query_len, maxq);
    cr_assert_eq(lb->max_seq_len, maxk);
    /* every query token of the original batch lands in exactly one virtual batch (the cu
       partition), whose pages are its chunk's and whose causal key count is p - cs + 1 */
    int32_t v = 0;
    for (int32_t b = 0; b < n; ++b) {
        int32_t q = qsl[b + 1] - qsl[b];
        for (int32_t i = 0; i < q; ++i) {
            int32_t g = qsl[b] + i;
            while (v < V && lb->cu_seqlens_q[v + 1] <= g) ++v;
            cr_assert_lt(v, V);
            cr_assert(lb->cu_seqlens_q[v] <= g && g < lb->cu_seqlens_q[v + 1]);
            int32_t p = seq[b] - q + i;
            int32_t cs = C * (p / C);
            for (int32_t t = 0; t < ppv; ++t) {
                int32_t col = cs / bs + t;
                if (col > max_blocks - 1) col = max_blocks - 1;
                cr_assert_eq(lb->block_table[(int64_t)v * ppv + t], bt[b * stride + col],
                             "req %d pos %d (virtual %d) page %d: %d, expected %d", b, p, v, t,
                             lb->block_table[(int64_t)v * ppv + t], bt[b * stride + col]);
            }
            int32_t il = g - lb->cu_seqlens_q[v];
            int32_t visible = il + lb->seqused_k[v] - lb->seqlens_q[v] + 1;
            cr_assert_eq(visible, p - cs + 1,
                         "req %d pos %d: bottom-right causal in virtual %d sees %d keys, chunk "
                         "[%d,%d] has %d",
                         b, p, v, visible, cs, p, p - cs + 1);
        }
    }
}

Test(local, random_batches_property)
{
    rng_seed(0x10CA1);
    static int32_t qsl[33], seq[32], bt[32 * 64];
    static int32_t sq[4096], cu[4097], sk[4096], btl[4096 * 8];
    for (int it = 0; it < 400; ++it) {
        int32_t bs = (it % 3 == 0) ? 16 : (it % 3 == 1 ? 2 : 4);
        int32_t C = bs * rng_int(1, 8);
        int32_t n = rng_int(1, 32);
        int32_t need = 1;
        qsl[0] = 0;
        for (int32_t b = 0; b < n; ++b) {
            int32_t s = rng_int(1, bs * 40 > 300 ? 300 : bs * 40);
            int32_t q = (rng_int(0, 2) == 0) ? 1 : rng_int(1, s);
            seq[b] = s;
            qsl[b + 1] = qsl[b] + q;
            if (cdiv32(s, bs) > need) need = cdiv32(s, bs);
        }
        /* max_blocks: exactly what the longest request needs, so pages of chunks running past
           the end are clipped; the row stride is wider than max_blocks */
        int32_t max_blocks = need;
        int64_t stride = max_blocks + rng_int(0, 3);
        for (int32_t b = 0; b < n; ++b)
            for (int64_t c = 0; c < stride; ++c)
                bt[b * stride + c] = (c < max_blocks) ? b * 1000 + (int32_t)c : -7;
        int32_t V = -1;
        ASSERT_OK(fa_local_virtual_batches_count(C, qsl, seq, n, &V));
        cr_assert(V >= n && V <= 4096, "V = %d", V);
        fa_local_batches lb;
        memset(&lb, 0, sizeof lb);
        lb.seqlens_q = sq;
        lb.cu_seqlens_q = cu;
        lb.seqused_k = sk;
        lb.block_table = btl;
        ASSERT_OK(fa_make_local_virtual_batches(C, bs, qsl, seq, n, bt, stride, max_blocks, V, &lb));
        check_local_plan(C, bs, qsl, seq, n, bt, stride, max_blocks, &lb, V);
    }
}

/* Pages of a chunk that run past max_blocks are clipped to column max_blocks - 1. */
Test(local, block_table_clipping)
{
    /* C = 8, bs = 2 (4 pages per chunk); one request, seq 9, q 1: the query at position 8 lives
       in chunk [8, 16) whose pages would be columns 4..7; only 5 columns are valid. */
    const int32_t qsl[2] = {0, 1}, seq[1] = {9};
    int32_t bt[8] = {100, 101, 102, 103, 104, -1, -1, -1};
    int32_t sq[1], cu[2], sk[1], btl[4];
    fa_local_batches lb;
    memset(&lb, 0, sizeof lb);
    lb.seqlens_q = sq;
    lb.cu_seqlens_q = cu;
    lb.seqused_k = sk;
    lb.block_table = btl;
    ASSERT_OK(fa_make_local_virtual_batches(8, 2, qsl, seq, 1, bt, 8, 5, 1, &lb));
    cr_assert_eq(lb.num_virtual, 1);
    cr_assert_eq(sk[0], 1);
    const int32_t want[4] = {104, 104, 104, 104};
    assert_i32_array(btl, want, 4, "clipped block_table_local");
}

/* ---------------------------------------------------------------------------------------- */
/* >>cascade: the heuristic (SEMANTICS §6.3) */

static int32_t ones[256];
static int32_t mixed[256];
static void init_lens(void)
{
    for (int i = 0; i < 256; ++i) {
        ones[i] = 1;
        mixed[i] = 1;
    }
    mixed[3] = 17; /* one prefill among decodes: not flash-decoding */
}

/* A configuration that says yes (MHA, >= 8 requests, P >= 256) so each rule alone flips it. */
Test(cascade_heuristic, each_rule_flips_it, .init = init_lens)
{
    /* baseline: MHA -> always 1 */
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 16, 16, 0, 0, 0, 132, 1), 1, "MHA baseline");
    cr_assert_eq(fa_use_cascade_attention(255, ones, 8, 16, 16, 0, 0, 0, 132, 1), 0, "P < 256");
    cr_assert_eq(fa_use_cascade_attention(0, ones, 8, 16, 16, 0, 0, 0, 132, 1), 0, "P = 0");
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 16, 16, 1, 0, 0, 132, 1), 0, "alibi");
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 16, 16, 0, 1, 0, 132, 1), 0, "sliding");
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 16, 16, 0, 0, 1, 132, 1), 0, "local");
    cr_assert_eq(fa_use_cascade_attention(256, ones, 7, 16, 16, 0, 0, 0, 132, 1), 0, "num_reqs 7 < 8");
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 16, 16, 0, 0, 0, 132, 2), 0, "dcp 2");
    cr_assert_eq(fa_use_cascade_attention(4096, ones, 256, 16, 16, 0, 0, 0, 132, 1), 1, "MHA large");
}

Test(cascade_heuristic, not_flash_decoding_is_yes, .init = init_lens)
{
    /* GQA with one request of length 17: not the flash-decoding case -> cascade */
    cr_assert_eq(fa_use_cascade_attention(256, mixed, 8, 32, 8, 0, 0, 0, 132, 1), 1);
    /* the same batch of pure decodes: cascade 2 vs FD 1 -> no */
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 32, 8, 0, 0, 0, 132, 1), 0);
}

Test(cascade_heuristic, worked_examples, .init = init_lens)
{
    /* 64 decodes, Hq 32, Hkv 8, P 1024: cascade cdiv(32*1,132)*8 = 8 < FD cdiv(64*8*1*8,132) = 32 */
    cr_assert_eq(fa_use_cascade_attention(1024, ones, 64, 32, 8, 0, 0, 0, 132, 1), 1);
    /* 8 decodes, P 256: cascade 1*2 = 2, FD cdiv(8*8*2,132) = 1 -> no */
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 32, 8, 0, 0, 0, 132, 1), 0);
}

Test(cascade_heuristic, strict_less_than_boundary, .init = init_lens)
{
    /* 16 decodes, Hq 32, Hkv 8, P 256 (2 tiles): cascade 1*2 = 2, FD cdiv(16*8*2,132) = 2 -> tie -> 0 */
    cr_assert_eq(fa_use_cascade_attention(256, ones, 16, 32, 8, 0, 0, 0, 132, 1), 0, "tie is no");
    /* 17 decodes: FD cdiv(17*8*2,132) = 3 > 2 -> 1 */
    cr_assert_eq(fa_use_cascade_attention(256, ones, 17, 32, 8, 0, 0, 0, 132, 1), 1);
    /* P 1024 with 16 decodes: cascade 8, FD cdiv(16*8*8,132) = 8 -> tie -> 0 */
    cr_assert_eq(fa_use_cascade_attention(1024, ones, 16, 32, 8, 0, 0, 0, 132, 1), 0);
    /* tiles round up: P 1025 -> 9 tiles: cascade 9, FD cdiv(16*8*9,132) = 9 -> 0; 18 reqs -> 10 > 9 */
    cr_assert_eq(fa_use_cascade_attention(1025, ones, 16, 32, 8, 0, 0, 0, 132, 1), 0);
    cr_assert_eq(fa_use_cascade_attention(1025, ones, 18, 32, 8, 0, 0, 0, 132, 1), 1);
    /* SM count matters: 64 decodes on 8 SMs: cascade cdiv(32,8)*8 = 32, FD cdiv(4096,8) = 512 -> 1;
       G = 256 heads per kv head (Hq 256, Hkv 1), 8 decodes, 132 SMs, P 256:
       cascade cdiv(256,132)*2 = 4, FD cdiv(8*1*cdiv(256,128)*2,132) = 1 -> 0 */
    cr_assert_eq(fa_use_cascade_attention(1024, ones, 64, 32, 8, 0, 0, 0, 8, 1), 1);
    cr_assert_eq(fa_use_cascade_attention(256, ones, 8, 256, 1, 0, 0, 0, 132, 1), 0);
}

/* fa_cascade_prefix_len: clip to the smallest num_computed_tokens, round down, heuristic */
static int32_t pl_computed[64], pl_qlens[64];
static fa_cascade_query decode_query(int32_t blocks, int32_t min_computed)
{
    for (int i = 0; i < 64; ++i) {
        pl_computed[i] = 5000 + i;
        pl_qlens[i] = 1;
    }
    pl_computed[17] = min_computed;
    fa_cascade_query q;
    memset(&q, 0, sizeof q);
    q.num_common_prefix_blocks = blocks;
    q.block_size = 16;
    q.num_computed_tokens = pl_computed;
    q.query_lens = pl_qlens;
    q.num_reqs = 64;
    q.num_heads_q = 32;
    q.num_heads_kv = 8;
    q.num_sms = 132;
    q.dcp_world_size = 1;
    return q;
}

Test(cascade_prefix, clip_round_and_heuristic)
{
    int32_t p = -1;
    fa_cascade_query q = decode_query(64, 6000); /* 1024, nothing to clip */
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 1024, "P %d", p);
    q = decode_query(70, 1050);                  /* 1120 -> clip 1050 -> round 1040 */
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 1040, "P %d, expected min(1120, 1050) rounded down to 1040", p);
    q = decode_query(70, 1040);                  /* already a multiple */
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 1040);
    q = decode_query(70, 200);                   /* 200 -> 192 < 256 -> heuristic no */
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "P %d", p);
    q = decode_query(0, 6000);                   /* no shared blocks */
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0);
}

Test(cascade_prefix, flags_give_zero)
{
    int32_t p = -1;
    fa_cascade_query q = decode_query(64, 6000);
    q.encoder_only = 1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "encoder_only -> 0, got %d", p);
    q = decode_query(64, 6000);
    q.use_alibi = 1;
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "alibi");
    q = decode_query(64, 6000);
    q.use_sliding_window = 1;
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "sliding");
    q = decode_query(64, 6000);
    q.use_local_attention = 1;
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "local");
    q = decode_query(64, 6000);
    q.dcp_world_size = 2;
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "dcp");
    q = decode_query(64, 6000);
    q.num_reqs = 7;
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 0, "7 requests");
    /* dcp_world_size 0 means the default 1 */
    q = decode_query(64, 6000);
    q.dcp_world_size = 0;
    p = -1;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 1024, "dcp_world_size 0 (default 1)");
}

Test(cascade_prefix, bs_rounding_other_block_size)
{
    /* bs 32: 40 blocks = 1280, min computed 1300 -> 1280; min 1279 -> 1248 */
    int32_t p = -1;
    fa_cascade_query q = decode_query(40, 1300);
    q.block_size = 32;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 1280);
    q = decode_query(40, 1279);
    q.block_size = 32;
    ASSERT_OK(fa_cascade_prefix_len(&q, &p));
    cr_assert_eq(p, 1248, "P %d", p);
}

Test(cascade_block_tables, offsets_and_bad_input)
{
    int32_t bt[4 * 10];
    for (int i = 0; i < 40; ++i) bt[i] = i;
    const int32_t *pre = NULL, *suf = NULL;
    ASSERT_OK(fa_cascade_block_tables(bt, 10, 48, 16, &pre, &suf));
    cr_assert_eq(pre, bt, "prefix table is row 0");
    cr_assert_eq(suf, bt + 3, "suffix table offset by P/bs = 3 columns");
    ASSERT_OK(fa_cascade_block_tables(bt, 10, 256, 32, &pre, &suf));
    cr_assert_eq(suf, bt + 8);
    /* bad inputs: error, outputs untouched */
    const int32_t *sentinel = (const int32_t *)(uintptr_t)0x1234;
    pre = suf = sentinel;
    ASSERT_ERR(fa_cascade_block_tables(bt, 10, 40, 16, &pre, &suf)); /* not a multiple */
    cr_assert(pre == sentinel && suf == sentinel);
    ASSERT_ERR(fa_cascade_block_tables(NULL, 10, 48, 16, &pre, &suf));
    cr_assert(pre == sentinel && suf == sentinel);
    ASSERT_ERR(fa_cascade_block_tables(bt, 10, -16, 16, &pre, &suf));
    ASSERT_ERR(fa_cascade_block_tables(bt, 10, 48, 0, &pre, &suf));
    ASSERT_ERR(fa_cascade_block_tables(bt, 10, 48, 16, NULL, &suf));
    ASSERT_ERR(fa_cascade_block_tables(bt, 10, 48, 16, &pre, NULL));
    ASSERT_ERR(fa_cascade_block_tables(bt, 2, 48, 16, &pre, &suf)); /* 3 columns > row stride 2 */
    cr_assert(pre == sentinel && suf == sentinel);
}

/* ---------------------------------------------------------------------------------------- */
/* >>windows (SEMANTICS §3.4, §9.1) */

static void assert_window(fa_window w, int32_t l, int32_t r, const char *what)
{
    cr_assert(w.left == l && w.right == r, "%s: (%d,%d), expected (%d,%d)", what, w.left, w.right, l, r);
}

Test(windows, sliding_window_config)
{
    assert_window(fa_sliding_window_config(0, FA_ATTN_DECODER), -1, -1, "none decoder");
    assert_window(fa_sliding_window_config(0, FA_ATTN_ENCODER_ONLY), -1, -1, "none encoder-only");
    assert_window(fa_sliding_window_config(-3, FA_ATTN_ENCODER), -1, -1, "negative");
    assert_window(fa_sliding_window_config(4096, FA_ATTN_DECODER), 4095, 0, "decoder");
    assert_window(fa_sliding_window_config(4096, FA_ATTN_ENCODER), 4095, 0, "encoder (left only)");
    assert_window(fa_sliding_window_config(4096, FA_ATTN_ENCODER_DECODER), 4095, 0, "cross");
    assert_window(fa_sliding_window_config(4096, FA_ATTN_ENCODER_ONLY), 4095, 4095, "encoder-only");
    assert_window(fa_sliding_window_config(1, FA_ATTN_DECODER), 0, 0, "W 1");
    assert_window(fa_sliding_window_config(1, FA_ATTN_ENCODER_ONLY), 0, 0, "W 1 encoder-only");
}

Test(windows, aot_sliding_window)
{
    fa_window w[4] = {{127, 0}, {127, 0}, {127, 0}, {127, 0}};
    fa_window out = {5, 5};
    int en = -5;
    ASSERT_OK(fa_aot_sliding_window(w, 4, &out, &en));
    cr_assert_eq(en, 1);
    assert_window(out, 127, 0, "one distinct");

    fa_window none[2] = {{-1, -1}, {-1, -1}};
    out.left = out.right = 5;
    en = -5;
    ASSERT_OK(fa_aot_sliding_window(none, 2, &out, &en));
    cr_assert_eq(en, 1);
    assert_window(out, -1, -1, "one distinct (none)");

    fa_window mix[3] = {{127, 0}, {-1, -1}, {127, 0}};
    out.left = out.right = 5;
    en = -5;
    ASSERT_OK(fa_aot_sliding_window(mix, 3, &out, &en));
    cr_assert_eq(en, 0, "several distinct -> AOT off");
    assert_window(out, -1, -1, "several distinct");

    fa_window mix2[2] = {{127, 0}, {127, 127}}; /* same left, different right */
    out.left = out.right = 5;
    en = -5;
    ASSERT_OK(fa_aot_sliding_window(mix2, 2, &out, &en));
    cr_assert_eq(en, 0);
    assert_window(out, -1, -1, "differ in right only");

    /* zero layers: no window to disagree about. The reference (vLLM builder) keeps AOT on
       with (-1,-1) when the set of windows is empty. */
    out.left = out.right = 5;
    en = -5;
    ASSERT_OK(fa_aot_sliding_window(w, 0, &out, &en));
    assert_window(out, -1, -1, "zero layers");
    cr_assert_eq(en, 1, "zero layers: AOT stays enabled as in the reference, got %d", en);
}

/* ---------------------------------------------------------------------------------------- */
/* >>dcp (SEMANTICS §7.1) */

static int32_t brute_local_len(int32_t L, int32_t N, int32_t r, int32_t I)
{
    int32_t c = 0;
    for (int32_t p = 0; p < L; ++p)
        if ((p / I) % N == r) ++c;
    return c;
}

Test(dcp, local_seq_len_table)
{
    const int32_t rows[4][3] = {{10, 4, 1}, {7, 4, 1}, {37, 4, 16}, {7, 2, 2}};
    const int32_t want[4][4] = {{3, 3, 2, 2}, {2, 2, 2, 1}, {16, 16, 5, 0}, {4, 3, -1, -1}};
    for (int i = 0; i < 4; ++i)
        for (int r = 0; r < rows[i][1]; ++r) {
            int32_t got = fa_dcp_local_seq_len(rows[i][0], rows[i][1], r, rows[i][2]);
            cr_assert_eq(got, want[i][r], "L=%d N=%d I=%d r=%d: %d, expected %d", rows[i][0], rows[i][1],
                         rows[i][2], r, got, want[i][r]);
        }
}

Test(dcp, local_seq_len_brute_force)
{
    rng_seed(0xDC9);
    const int32_t Ns[5] = {1, 2, 3, 4, 8};
    for (int it = 0; it < 20000; ++it) {
        int32_t N = Ns[rng_int(0, 4)];
        int32_t I = (rng_int(0, 1) == 0) ? 1 : rng_int(1, 32);
        int32_t L = rng_int(0, 700);
        int32_t r = rng_int(0, N - 1);
        int32_t got = fa_dcp_local_seq_len(L, N, r, I);
        int32_t want = brute_local_len(L, N, r, I);
        cr_assert_eq(got, want, "L=%d N=%d r=%d I=%d: %d, expected %d", L, N, r, I, got, want);
    }
    /* the shares of all ranks add up to L */
    for (int32_t L = 0; L < 300; ++L) {
        int32_t sum = 0;
        for (int32_t r = 0; r < 4; ++r) sum += fa_dcp_local_seq_len(L, 4, r, 8);
        cr_assert_eq(sum, L);
    }
}

Test(dcp, local_seq_lens_batch)
{
    rng_seed(0xBA7C);
    int32_t lens[100], out[100];
    for (int i = 0; i < 100; ++i) lens[i] = rng_int(0, 5000);
    for (int32_t N = 1; N <= 8; N *= 2)
        for (int32_t I = 1; I <= 16; I *= 4)
            for (int32_t r = 0; r < N; ++r) {
                memset(out, 0x7f, sizeof out);
                ASSERT_OK(fa_dcp_local_seq_lens(lens, 100, N, r, I, out));
                for (int i = 0; i < 100; ++i)
                    cr_assert_eq(out[i], brute_local_len(lens[i], N, r, I), "L=%d N=%d r=%d I=%d", lens[i], N,
                                 r, I);
            }
}

Test(dcp, slot_mapping_example)
{
    /* N=2, I=2, bs=4, block row [7,3,9], positions 0..19 */
    const int32_t row[3] = {7, 3, 9};
    int32_t req[20], pos[20];
    for (int i = 0; i < 20; ++i) {
        req[i] = 0;
        pos[i] = i;
    }
    const int64_t want0[20] = {28, 29, -1, -1, 30, 31, -1, -1, 12, 13,
                               -1, -1, 14, 15, -1, -1, 36, 37, -1, -1};
    const int64_t want1[20] = {-1, -1, 28, 29, -1, -1, 30, 31, -1, -1,
                               12, 13, -1, -1, 14, 15, -1, -1, 36, 37};
    int64_t sm[20];
    memset(sm, 0x55, sizeof sm);
    ASSERT_OK(fa_dcp_slot_mapping(row, 3, 3, 4, req, pos, 20, 2, 0, 2, sm));
    for (int i = 0; i < 20; ++i)
        cr_assert_eq(sm[i], want0[i], "rank 0 pos %d: %lld, expected %lld", i, (long long)sm[i],
                     (long long)want0[i]);
    memset(sm, 0x55, sizeof sm);
    ASSERT_OK(fa_dcp_slot_mapping(row, 3, 3, 4, req, pos, 20, 2, 1, 2, sm));
    for (int i = 0; i < 20; ++i)
        cr_assert_eq(sm[i], want1[i], "rank 1 pos %d: %lld, expected %lld", i, (long long)sm[i],
                     (long long)want1[i]);
    /* N = 1 is the plain slot mapping block_table[p / bs] * bs + p % bs */
    ASSERT_OK(fa_dcp_slot_mapping(row, 3, 3, 4, req, pos, 12, 1, 0, 1, sm));
    for (int i = 0; i < 12; ++i) cr_assert_eq(sm[i], row[i / 4] * 4 + i % 4);
}

Test(dcp, slot_mapping_property)
{
    rng_seed(0x5107);
    enum { NREQ = 6, STRIDE = 24, NTOK = 600 };
    int32_t bt[NREQ * STRIDE], req[NTOK], pos[NTOK];
    static int64_t sm[8][NTOK];
    for (int it = 0; it < 60; ++it) {
        const int32_t Ns[4] = {1, 2, 4, 8};
        const int32_t bss[3] = {16, 32, 8};
        int32_t N = Ns[rng_int(0, 3)];
        int32_t bs = bss[rng_int(0, 2)];
        int32_t I = 1;
        do {
            I = 1 << rng_int(0, 5);
        } while (bs % I != 0);
        int32_t max_blocks = rng_int(4, STRIDE);
        /* unique block ids per (request, column) */
        for (int i = 0; i < NREQ * STRIDE; ++i) bt[i] = -1;
        for (int b = 0; b < NREQ; ++b)
            for (int c = 0; c < max_blocks; ++c) bt[b * STRIDE + c] = 1 + b * 100 + c;
        int32_t cap = max_blocks * bs * N; /* positions the table can address */
        /* each request: the full range of positions 0..len-1 (so the local order is checkable) */
        int32_t len[NREQ], n = 0;
        for (int b = 0; b < NREQ; ++b) {
            len[b] = rng_int(0, cap < 100 ? cap : 100);
            for (int32_t p = 0; p < len[b]; ++p) {
                req[n] = b;
                pos[n] = p;
                ++n;
            }
        }
        for (int32_t r = 0; r < N; ++r)
            ASSERT_OK(fa_dcp_slot_mapping(bt, STRIDE, max_blocks, bs, req, pos, n, N, r, I, sm[r]));
        int32_t k_of_rank[8][NREQ];
        memset(k_of_rank, 0, sizeof k_of_rank);
        for (int32_t t = 0; t < n; ++t) {
            int owners = 0, owner = -1;
            for (int32_t r = 0; r < N; ++r)
                if (sm[r][t] >= 0) {
                    ++owners;
                    owner = r;
                }
            cr_assert_eq(owners, 1, "position %d of req %d owned by %d ranks", pos[t], req[t], owners);
            cr_assert_eq(owner, (pos[t] / I) % N, "position %d owned by rank %d", pos[t], owner);
            for (int32_t r = 0; r < N; ++r)
                if (r != owner) cr_assert_eq(sm[r][t], -1);
            /* local order follows global order: the k-th token of this rank in request b is
               local slot k, i.e. block_table[b, k / bs] * bs + k % bs */
            int32_t b = req[t];
            int32_t k = k_of_rank[owner][b]++;
            int64_t want = (int64_t)bt[b * STRIDE + k / bs] * bs + k % bs;
            cr_assert_eq(sm[owner][t], want, "N=%d I=%d bs=%d req %d pos %d: slot %lld, expected %lld", N, I,
                         bs, b, pos[t], (long long)sm[owner][t], (long long)want);
        }
        /* slots of one rank are distinct and inside the rank's blocks of that request */
        for (int32_t r = 0; r < N; ++r)
            for (int32_t t = 0; t < n; ++t) {
                if (sm[r][t] < 0) continue;
                int64_t blk = sm[r][t] / bs;
                int32_t b = req[t], found = 0;
                for (int c = 0; c < max_blocks; ++c) found |= (bt[b * STRIDE + c] == blk);
                cr_assert(found, "slot %lld not in request %d's blocks", (long long)sm[r][t], b);
                for (int32_t u = t + 1; u < n; ++u)
                    cr_assert(sm[r][u] != sm[r][t], "rank %d: duplicate slot %lld", r, (long long)sm[r][t]);
            }
        /* the counts agree with fa_dcp_local_seq_len */
        for (int32_t r = 0; r < N; ++r)
            for (int b = 0; b < NREQ; ++b)
                cr_assert_eq(k_of_rank[r][b], fa_dcp_local_seq_len(len[b], N, r, I));
    }
}

/* ---------------------------------------------------------------------------------------- */
/* >>caps: cache shape, stride order, strides, capabilities */

Test(caps, kv_cache_shape)
{
    int64_t s[5] = {0};
    ASSERT_OK(fa_kv_cache_shape(1000, 16, 8, 128, s));
    const int64_t want[5] = {2, 1000, 16, 8, 128};
    for (int i = 0; i < 5; ++i) cr_assert_eq(s[i], want[i], "shape[%d] = %lld", i, (long long)s[i]);
    ASSERT_OK(fa_kv_cache_shape(3000000000ll, 32, 1, 64, s));
    cr_assert_eq(s[1], 3000000000ll, "num_blocks is 64-bit");
    int64_t keep[5] = {9, 9, 9, 9, 9};
    ASSERT_ERR(fa_kv_cache_shape(1000, 0, 8, 128, keep));
    for (int i = 0; i < 5; ++i) cr_assert_eq(keep[i], 9);
    ASSERT_OK(fa_kv_cache_shape(1000, 1, 8, 128, s)); /* page size 1 */
    cr_assert_eq(s[2], 1);
    ASSERT_ERR(fa_kv_cache_shape(1000, -8, 8, 128, keep));
    ASSERT_ERR(fa_kv_cache_shape(-1, 16, 8, 128, keep));
    for (int i = 0; i < 5; ++i) cr_assert_eq(keep[i], 9);
}

static void assert_order(fa_kv_layout l, int layers, const int32_t *want, int32_t rank)
{
    int32_t o[6] = {-9, -9, -9, -9, -9, -9};
    int32_t r = -1;
    ASSERT_OK(fa_kv_cache_stride_order(l, layers, o, &r));
    cr_assert_eq(r, rank);
    for (int i = 0; i < rank; ++i)
        cr_assert_eq(o[i], want[i], "layout %d layers %d: order[%d] = %d, expected %d", (int)l, layers, i,
                     o[i], want[i]);
}

Test(caps, kv_cache_stride_order)
{
    const int32_t nhd[5] = {0, 1, 2, 3, 4}, hnd[5] = {0, 1, 3, 2, 4};
    const int32_t nhd6[6] = {2, 0, 1, 3, 4, 5}, hnd6[6] = {2, 4, 0, 1, 3, 5};
    assert_order(FA_LAYOUT_NHD, 0, nhd, 5);
    assert_order(FA_LAYOUT_HND, 0, hnd, 5);
    assert_order(FA_LAYOUT_NHD, 1, nhd6, 6);
    assert_order(FA_LAYOUT_HND, 1, hnd6, 6);
}

Test(caps, kv_cache_strides)
{
    int64_t s[5] = {0};
    const int64_t NB = 100;
    ASSERT_OK(fa_kv_cache_strides(FA_LAYOUT_NHD, NB, 16, 8, 128, s));
    const int64_t nhd[5] = {NB * 16384, 16384, 1024, 128, 1};
    for (int i = 0; i < 5; ++i)
        cr_assert_eq(s[i], nhd[i], "NHD stride[%d] = %lld, expected %lld", i, (long long)s[i],
                     (long long)nhd[i]);
    ASSERT_OK(fa_kv_cache_strides(FA_LAYOUT_HND, NB, 16, 8, 128, s));
    const int64_t hnd[5] = {NB * 16384, 16384, 128, 2048, 1};
    for (int i = 0; i < 5; ++i)
        cr_assert_eq(s[i], hnd[i], "HND stride[%d] = %lld, expected %lld", i, (long long)s[i],
                     (long long)hnd[i]);
    /* consistent with the stride order: the strides of the physical order are decreasing */
    int32_t o[6], r;
    for (int l = 0; l < 2; ++l) {
        ASSERT_OK(fa_kv_cache_stride_order((fa_kv_layout)l, 0, o, &r));
        ASSERT_OK(fa_kv_cache_strides((fa_kv_layout)l, 7, 32, 4, 64, s));
        int64_t shape[5];
        ASSERT_OK(fa_kv_cache_shape(7, 32, 4, 64, shape));
        int64_t expect = 1;
        for (int i = 4; i >= 0; --i) {
            cr_assert_eq(s[o[i]], expect, "layout %d: stride of dim %d", l, o[i]);
            expect *= shape[o[i]];
        }
    }
    /* 64-bit: 3e9 blocks */
    ASSERT_OK(fa_kv_cache_strides(FA_LAYOUT_NHD, 3000000000ll, 16, 8, 128, s));
    cr_assert_eq(s[0], 3000000000ll * 16384);
}

Test(caps, kernel_block_sizes)
{
    fa_block_sizes a = fa_supported_kernel_block_sizes(0);
    cr_assert_eq(a.multiple_of, 1);
    cr_assert_eq(a.count, 0);
    fa_block_sizes h = fa_supported_kernel_block_sizes(1);
    cr_assert_eq(h.multiple_of, 0);
    cr_assert_eq(h.count, 3);
    cr_assert(h.sizes[0] == 16 && h.sizes[1] == 32 && h.sizes[2] == 64, "hybrid {%d,%d,%d}", h.sizes[0],
              h.sizes[1], h.sizes[2]);
    cr_assert_eq(fa_supports_block_size(16, 0), 1);
    cr_assert_eq(fa_supports_block_size(48, 0), 1);
    cr_assert_eq(fa_supports_block_size(256, 0), 1);
    cr_assert_eq(fa_supports_block_size(24, 0), 1); /* any size >= 1 */
    cr_assert_eq(fa_supports_block_size(8, 0), 1);
    cr_assert_eq(fa_supports_block_size(1, 0), 1);
    cr_assert_eq(fa_supports_block_size(3, 0), 1);
    cr_assert_eq(fa_supports_block_size(0, 0), 0);
    cr_assert_eq(fa_supports_block_size(-16, 0), 0);
    cr_assert_eq(fa_supports_block_size(16, 1), 1);
    cr_assert_eq(fa_supports_block_size(32, 1), 1);
    cr_assert_eq(fa_supports_block_size(64, 1), 1);
    cr_assert_eq(fa_supports_block_size(48, 1), 0);
    cr_assert_eq(fa_supports_block_size(128, 1), 0);
}

Test(caps, supports)
{
    const int32_t good[] = {8, 16, 40, 64, 72, 80, 96, 128, 192, 256};
    const int32_t bad[] = {0, -8, 4, 12, 100, 257, 264, 512};
    for (size_t i = 0; i < sizeof good / sizeof *good; ++i)
        cr_assert_eq(fa_supports_head_size(good[i]), 1, "head size %d", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i)
        cr_assert_eq(fa_supports_head_size(bad[i]), 0, "head size %d", bad[i]);
    cr_assert_eq(fa_supports_kv_cache_dtype(FA_CACHE_AUTO), 1);
    cr_assert_eq(fa_supports_kv_cache_dtype(FA_CACHE_FP8), 1);
    cr_assert_eq(fa_supports_kv_cache_dtype(FA_CACHE_FP8_E4M3), 1);
    cr_assert_eq(fa_supports_kv_cache_dtype(FA_CACHE_FP8_E5M2), 1);
    cr_assert_eq(fa_supports_kv_cache_dtype(FA_CACHE_DTYPE_COUNT_), 0);
    cr_assert_eq(fa_supports_kv_cache_dtype((fa_cache_dtype)-1), 0);
    cr_assert_eq(fa_supports_compute_capability(8, 0), 1);
    cr_assert_eq(fa_supports_compute_capability(8, 6), 1);
    cr_assert_eq(fa_supports_compute_capability(9, 0), 1);
    cr_assert_eq(fa_supports_compute_capability(10, 0), 1);
    cr_assert_eq(fa_supports_compute_capability(7, 5), 0);
    cr_assert_eq(fa_supports_compute_capability(7, 9), 0);
    cr_assert_eq(fa_supports_compute_capability(0, 0), 0);
}

Test(caps, cache_storage_dtype)
{
    cr_assert_eq(fa_cache_storage_dtype(FA_CACHE_AUTO, FA_DTYPE_F16), FA_DTYPE_F16);
    cr_assert_eq(fa_cache_storage_dtype(FA_CACHE_AUTO, FA_DTYPE_BF16), FA_DTYPE_BF16);
    cr_assert_eq(fa_cache_storage_dtype(FA_CACHE_AUTO, FA_DTYPE_F32), FA_DTYPE_F32);
    cr_assert_eq(fa_cache_storage_dtype(FA_CACHE_FP8, FA_DTYPE_BF16), FA_DTYPE_FP8_E4M3);
    cr_assert_eq(fa_cache_storage_dtype(FA_CACHE_FP8_E4M3, FA_DTYPE_F16), FA_DTYPE_FP8_E4M3);
    cr_assert_eq(fa_cache_storage_dtype(FA_CACHE_FP8_E5M2, FA_DTYPE_BF16), FA_DTYPE_FP8_E5M2);
}

Test(caps, check_combination)
{
    const char *r;
    fa_backend old_gpu, *cpu = NULL;
    ASSERT_OK(fa_cpu_backend_create(&cpu));
    old_gpu = *cpu;
    old_gpu.info.cc_major = 7; /* a device older than 8.0 */
    old_gpu.info.cc_minor = 5;
    r = fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0);
    cr_assert_null(r, "supported combination rejected: %s", r);
    r = fa_check_combination(NULL, 64, FA_DTYPE_F16, FA_CACHE_FP8_E5M2, 32, 1, 0);
    cr_assert_null(r, "sinks and e5m2 are supported on every architecture (decision table): %s", r);
    r = fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 48, 0, 0);
    cr_assert_null(r, "cc 0.0 skips the device check: %s", r);
    r = fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 64, 0, 1);
    cr_assert_null(r, "hybrid with 64: %s", r);
    cr_assert_not_null(fa_check_combination(NULL, 100, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0), "head 100");
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 0, 0, 0), "block 0");
    r = fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 1, 0, 0);
    cr_assert_null(r, "block 1 (page size 1): %s", r);
    r = fa_check_combination(cpu, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 3, 0, 0);
    cr_assert_null(r, "block 3 on the CPU backend: %s", r);
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 48, 0, 1),
                       "hybrid block 48");
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_BF16, (fa_cache_dtype)9, 16, 0, 0),
                       "cache dtype 9");
    cr_assert_not_null(fa_check_combination(&old_gpu, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0), "cc 7.5");
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_I32, FA_CACHE_AUTO, 16, 0, 0), "dtype i32");
    cr_assert_not_null(fa_check_combination(NULL, 128, FA_DTYPE_FP8_E4M3, FA_CACHE_AUTO, 16, 0, 0),
                       "dtype fp8 activations");
    r = fa_check_combination(NULL, 100, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0);
    cr_assert(r && r[0], "reason is a non-empty string");
    /* the backend's capability block: what it compiled and runs */
    cr_assert_null(fa_check_combination(cpu, 128, FA_DTYPE_F32, FA_CACHE_AUTO, 16, 0, 0), "f32 on the CPU");
    old_gpu = *cpu;
    old_gpu.caps.act_dtypes &= ~(1u << FA_DTYPE_F32);
    cr_assert_not_null(fa_check_combination(&old_gpu, 128, FA_DTYPE_F32, FA_CACHE_AUTO, 16, 0, 0),
                       "no f32 kernels");
    old_gpu = *cpu;
    old_gpu.caps.num_dims = 3; /* widest 96: head 128 pruned */
    cr_assert_not_null(fa_check_combination(&old_gpu, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0),
                       "pruned head dim");
    cr_assert_null(fa_check_combination(&old_gpu, 96, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0),
                   "head 96 compiled");
    old_gpu = *cpu;
    old_gpu.caps.cache_dtypes &= ~(1u << FA_DTYPE_FP8_E5M2);
    cr_assert_not_null(fa_check_combination(&old_gpu, 128, FA_DTYPE_BF16, FA_CACHE_FP8_E5M2, 16, 0, 0),
                       "no e5m2 reads");
    old_gpu = *cpu;
    old_gpu.caps.block_size_multiple = 32;
    cr_assert_not_null(fa_check_combination(&old_gpu, 128, FA_DTYPE_BF16, FA_CACHE_AUTO, 16, 0, 0),
                       "block 16 of 32s");
    fa_cpu_backend_destroy(cpu);
}

Test(caps, dtype_sizes)
{
    cr_assert_eq(fa_dtype_size(FA_DTYPE_F32), 4);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_F16), 2);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_BF16), 2);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_FP8_E4M3), 1);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_FP8_E5M2), 1);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_I32), 4);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_I64), 8);
    cr_assert_eq(fa_dtype_size(FA_DTYPE_COUNT_), 0);
    for (int t = 0; t < FA_DTYPE_COUNT_; ++t) {
        const char *n = fa_dtype_name((fa_dtype)t);
        cr_assert(n && n[0]);
    }
}

Test(tensor, make_contiguous)
{
    int64_t shape[4] = {5, 3, 4, 8};
    float buf[1];
    fa_tensor t = fa_tensor_make(buf, FA_DTYPE_F16, 4, shape);
    cr_assert_eq(t.data, buf);
    cr_assert_eq(t.dtype, FA_DTYPE_F16);
    cr_assert_eq(t.rank, 4);
    const int64_t st[4] = {96, 32, 8, 1};
    for (int i = 0; i < 4; ++i) {
        cr_assert_eq(t.shape[i], shape[i]);
        cr_assert_eq(t.stride[i], st[i], "stride[%d] = %lld", i, (long long)t.stride[i]);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* >>plan splits (SEMANTICS §9.3) */

static double eff_of(int64_t work, int32_t sms, int32_t s)
{
    double w = (double)work * s / sms;
    return w / ceil(w);
}

Test(splits, heuristic_worked_examples)
{
    /* §9.3: work 48, SMs 108: eff(1..9) = .44 .89 .67 .89 .74 .89 .78 .89 1.0 -> 2 */
    cr_assert_eq(fa_num_splits_heuristic(48, 108, 64, 128), 2);
    /* work >= 0.8 * SMs -> 1 (0.8 * 132 = 105.6) */
    cr_assert_eq(fa_num_splits_heuristic(106, 132, 64, 128), 1);
    cr_assert_eq(fa_num_splits_heuristic(1000, 132, 64, 128), 1);
    /* just below: eff(1..4) = .795, eff(5) = .994 -> 5 */
    cr_assert_eq(fa_num_splits_heuristic(105, 132, 64, 128), 5);
    /* keys span <= 4 tiles -> 1 */
    cr_assert_eq(fa_num_splits_heuristic(10, 132, 4, 128), 1);
    cr_assert_eq(fa_num_splits_heuristic(1, 132, 1, 128), 1);
    /* 5 tiles: max_s = 5, eff(s) = 10s/132 -> best at 5; .85 * .379 = .322 > eff(4) = .303 -> 5 */
    cr_assert_eq(fa_num_splits_heuristic(10, 132, 5, 128), 5);
    /* the cap: at most max_splits */
    cr_assert_eq(fa_num_splits_heuristic(10, 132, 64, 3), 3);
    cr_assert_eq(fa_num_splits_heuristic(48, 108, 64, 1), 1);
}

Test(splits, heuristic_rule_random)
{
    rng_seed(0x5917);
    for (int it = 0; it < 5000; ++it) {
        int32_t sms = rng_int(1, 200);
        int64_t work = rng_int(1, 300);
        int32_t nb = rng_int(1, 300);
        int32_t maxs = rng_int(1, 128);
        int32_t got = fa_num_splits_heuristic(work, sms, nb, maxs);
        int32_t want;
        if ((double)work >= 0.8 * sms || nb <= 4) {
            want = 1;
        } else {
            int32_t ms = maxs;
            if (ms > 128) ms = 128;
            if (ms > sms) ms = sms;
            if (ms > nb) ms = nb;
            double best = 0;
            for (int32_t s = 1; s <= ms; ++s)
                if (eff_of(work, sms, s) > best) best = eff_of(work, sms, s);
            /* skip float-borderline cases */
            int borderline = 0;
            for (int32_t s = 1; s <= ms; ++s)
                if (fabs(eff_of(work, sms, s) - 0.85 * best) < 1e-5) borderline = 1;
            if (borderline) continue;
            want = 1;
            for (int32_t s = 1; s <= ms; ++s)
                if (eff_of(work, sms, s) >= 0.85 * best) {
                    want = s;
                    break;
                }
        }
        cr_assert_eq(got, want,
                     "work %lld sms %d n_blocks %d max %d: %d, expected %d "
                     "(smallest s within 85%% of the best efficiency)",
                     (long long)work, sms, nb, maxs, got, want);
        cr_assert(got >= 1 && got <= (maxs < 1 ? 1 : maxs));
    }
}

static fa_split_params decode_params(int32_t n, int32_t lk, int32_t *cu, int32_t *sk)
{
    for (int32_t b = 0; b <= n; ++b) cu[b] = b;
    for (int32_t b = 0; b < n; ++b) sk[b] = lk;
    fa_split_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = n;
    p.cu_seqlens_q = cu;
    p.seqused_k = sk;
    p.num_heads_q = 32;
    p.num_heads_kv = 8;
    p.head_size = 128;
    p.causal = 1;
    p.window.left = -1;
    p.window.right = -1;
    p.num_sms = 132;
    p.max_num_splits = 32;
    p.caps = test_caps();
    return p;
}

static void check_plan_layout(const int32_t *plan, int32_t n, int32_t plan_len, int32_t cap)
{
    cr_assert(plan[0] >= 1 && plan[0] <= cap, "S = %d not in [1, %d]", plan[0], cap);
    for (int32_t b = 0; b < n; ++b)
        cr_assert(plan[1 + b] >= 1 && plan[1 + b] <= plan[0], "plan[1+%d] = %d not in [1, S=%d]", b,
                  plan[1 + b], plan[0]);
    for (int32_t i = 1 + n; i < plan_len; ++i)
        cr_assert_eq(plan[i], 0, "tail plan[%d] = %d, expected 0", i, plan[i]);
}

Test(splits, plan_batch1_long_vs_batch64)
{
    int32_t cu[65], sk[64], plan[300];
    /* §9.3 worked example: 132 SMs, Hkv 8, G 4, D 128, decode, Lk 8192 (64 tiles):
       B = 1 -> 13 splits (static 15), B = 64 -> 1 per request */
    fa_split_params p = decode_params(1, 8192, cu, sk);
    memset(plan, 0x7f, sizeof plan);
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    check_plan_layout(plan, 1, 300, 32);
    cr_assert_geq(plan[0], 4, "batch 1, 8192 keys: static S = %d (spec example 15)", plan[0]);
    cr_assert_geq(plan[1], 4, "batch 1, 8192 keys: %d splits (spec example 13)", plan[1]);

    p = decode_params(64, 8192, cu, sk);
    memset(plan, 0x7f, sizeof plan);
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    check_plan_layout(plan, 64, 300, 32);
    /* decode rule: 64 x 8 KV heads fill the SMs (512 CTAs, 4 per SM): no split (1.4% off the
       best fixed split, 4, in the H200 sweep of docs/perf.md) */
    for (int b = 0; b < 64; ++b)
        cr_assert_eq(plan[1 + b], 1, "batch 64: request %d gets %d splits, expected 1", b, plan[1 + b]);

    /* short context: no split */
    p = decode_params(1, 100, cu, sk);
    ASSERT_OK(fa_plan_splits(&p, plan, 2));
    cr_assert_eq(plan[1], 1, "100 keys (1 tile) -> 1 split, got %d", plan[1]);
}

/* The cascade prefix of 256 decodes: one "request" of 256 query tokens (1024 rows per KV head)
   over 16384 keys. Up to head 128 the backend's prefill tile holds 128 rows (FA_TILE_M), so the
   grid is 8 x 8 = 64 CTAs on 132 SMs and the keys split in two; at head 256 (64-row tiles, 128
   CTAs) the grid already fills the SMs and nothing splits. */
Test(splits, plan_cascade_prefix_fills_the_sms)
{
    int32_t cu[2] = {0, 256}, sk[1] = {16384}, plan[4];
    fa_split_params p = decode_params(1, 16384, cu, sk);
    cu[1] = 256;
    p.causal = 0;
    cr_assert_eq(test_tile_m(128), 128);
    cr_assert_eq(test_tile_m(256), 64);
    ASSERT_OK(fa_plan_splits(&p, plan, 4));
    check_plan_layout(plan, 1, 4, 32);
    cr_assert_eq(plan[1], 2, "head 128: %d splits, expected 2 (64 CTAs on 132 SMs)", plan[1]);
    p.head_size = 256;
    ASSERT_OK(fa_plan_splits(&p, plan, 4));
    cr_assert_eq(plan[1], 1, "head 256: %d splits, expected 1 (128 CTAs)", plan[1]);
}

/* plan[0] for n decodes of lk keys (32/8 heads, cap 128) at the given head size and K/V bytes */
static int32_t decode_splits(int32_t n, int32_t lk, int32_t head, int32_t kv_bytes, int32_t *cu, int32_t *sk)
{
    int32_t plan[300];
    fa_split_params p = decode_params(n, lk, cu, sk);
    p.max_num_splits = 128;
    p.head_size = head;
    p.kv_bytes = kv_bytes;
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    return plan[0];
}

/* Decode (max q_len x G <= 16, the packed decode tile): a cost model picks a power-of-two share
   of 32-key tiles per split (request b: ceil(tiles_b / share) splits, at most the cap). Worked
   examples: the 12 shapes of the H200 split sweep (docs/perf.md; 132 SMs, 32/8 heads, head 128),
   with the cap 128 of an elastic builder; each pick was within 5% of the best fixed split there. */
Test(splits, plan_decode_rule)
{
    static int32_t cu[257], sk[256], plan[300];
    const int32_t batch[12] = {1, 1, 1, 8, 8, 8, 64, 64, 64, 256, 256, 256};
    const int32_t ctx[12] = {1024, 8192, 32768, 1024, 8192, 32768, 1024, 8192, 32768, 1024, 8192, 32768};
    const int32_t want[12] = {16, 32, 64, 8, 8, 8, 1, 1, 1, 1, 8, 8};
    fa_split_params p;
    for (int i = 0; i < 12; ++i) {
        p = decode_params(batch[i], ctx[i], cu, sk);
        p.max_num_splits = 128;
        ASSERT_OK(fa_plan_splits(&p, plan, 300));
        check_plan_layout(plan, batch[i], 300, 128);
        cr_assert_eq(plan[0], want[i], "batch %d x %d: %d splits, expected %d", batch[i], ctx[i], plan[0],
                     want[i]);
        for (int b = 0; b < batch[i]; ++b)
            cr_assert_eq(plan[1 + b], want[i], "batch %d x %d, request %d", batch[i], ctx[i], b);
    }
    /* the cap binds */
    p = decode_params(1, 32768, cu, sk);
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    check_plan_layout(plan, 1, 300, 32);
    cr_assert_eq(plan[1], 32, "batch 1 x 32768, cap 32: %d splits", plan[1]);
    /* a few keys: the combine's cost outweighs a shorter walk */
    p = decode_params(1, 100, cu, sk);
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    cr_assert_eq(plan[1], 1, "100 keys: %d splits", plan[1]);
    /* kv_bytes 0 reads as 2; an fp8 cache's tiles carry half the bytes, which the model sees
       (64 x 8k at head 256: the bandwidth term differs) */
    const int32_t heads[3] = {64, 128, 256};
    for (int i = 0; i < 12; ++i)
        for (int h = 0; h < 3; ++h) {
            const int32_t s16 = decode_splits(batch[i], ctx[i], heads[h], 2, cu, sk);
            const int32_t s0 = decode_splits(batch[i], ctx[i], heads[h], 0, cu, sk);
            cr_assert_eq(s0, s16, "batch %d x %d head %d: kv_bytes 0 %d splits, 2 %d", batch[i], ctx[i],
                         heads[h], s0, s16);
        }
    cr_assert_neq(decode_splits(64, 8192, 256, 1, cu, sk), decode_splits(64, 8192, 256, 2, cu, sk),
                  "64 x 8k head 256: fp8 and bf16 the same split count");

    /* one long request among short ones: only the long one splits */
    p = decode_params(64, 100, cu, sk);
    sk[17] = 32768;
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    check_plan_layout(plan, 64, 300, 32);
    cr_assert_geq(plan[1 + 17], 16, "long request among 63 short ones: %d splits", plan[1 + 17]);
    for (int b = 0; b < 64; ++b)
        if (b != 17) cr_assert_eq(plan[1 + b], 1, "short request %d: %d splits", b, plan[1 + b]);

    /* a window bounds the keys a decode row reads: planned like a request of the window's keys */
    p = decode_params(1, 32768, cu, sk);
    p.window.left = 1000;
    p.window.right = 0;
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    int32_t windowed = plan[1];
    p = decode_params(1, 1000 + 1 + 1, cu, sk);
    ASSERT_OK(fa_plan_splits(&p, plan, 300));
    cr_assert_eq(windowed, plan[1], "window 1000: %d splits, 1002 keys: %d", windowed, plan[1]);
    cr_assert_lt(windowed, 32, "window 1000: %d splits (the window's 32 tiles)", windowed);

    /* properties over random decode batches: one power-of-two share for the whole batch, within
       the cap, no split without a tile, S = the largest request's count */
    rng_seed(0xDEC0);
    for (int it = 0; it < 300; ++it) {
        int32_t n = rng_int(1, 256);
        p = decode_params(n, 1, cu, sk);
        for (int32_t b = 0; b < n; ++b) sk[b] = rng_int(0, 3) ? rng_int(1, 4000) : rng_int(1, 200000);
        p.num_sms = rng_int(1, 160);
        p.max_num_splits = rng_int(1, 128);
        const int32_t hkv[4] = {1, 2, 8, 16};
        p.num_heads_kv = hkv[rng_int(0, 3)];
        p.num_heads_q = p.num_heads_kv * (1 << rng_int(0, 4)); /* G <= 16 */
        p.head_size = 8 * rng_int(1, 32);
        ASSERT_OK(fa_plan_splits(&p, plan, 300));
        check_plan_layout(plan, n, 300, p.max_num_splits);
        int32_t smax = 1, found = 0;
        for (int32_t b = 0; b < n; ++b) {
            int32_t tiles = cdiv32(sk[b], 32), s = plan[1 + b];
            if (s > smax) smax = s;
            cr_assert(s <= (tiles < 1 ? 1 : tiles), "req %d: %d splits of %d tiles", b, s, tiles);
        }
        for (int64_t share = 1; share <= (1 << 20) && !found; share *= 2) {
            int ok = 1;
            for (int32_t b = 0; b < n && ok; ++b) {
                int64_t want_s = (cdiv32(sk[b], 32) + share - 1) / share;
                if (want_s < 1) want_s = 1;
                if (want_s > p.max_num_splits) want_s = p.max_num_splits;
                ok = plan[1 + b] == want_s;
            }
            found = ok;
        }
        cr_assert(found, "it %d: the splits of %d requests do not come from one power-of-two share", it, n);
        cr_assert_eq(plan[0], smax, "S = %d, largest request split %d", plan[0], smax);
    }
}

Test(splits, plan_caps_and_batch_invariance)
{
    int32_t cu[65], sk[64], plan[128];
    fa_split_params p = decode_params(1, 65536, cu, sk);
    p.max_num_splits = 3; /* e.g. the full-graph cap */
    memset(plan, 0x7f, sizeof plan);
    ASSERT_OK(fa_plan_splits(&p, plan, 128));
    check_plan_layout(plan, 1, 128, 3);
    cr_assert_geq(plan[1], 2, "a long single request still splits under a cap of 3");

    p = decode_params(1, 65536, cu, sk);
    p.max_num_splits = 1;
    ASSERT_OK(fa_plan_splits(&p, plan, 128));
    cr_assert(plan[0] == 1 && plan[1] == 1);

    p = decode_params(5, 65536, cu, sk);
    p.batch_invariant = 1;
    memset(plan, 0x7f, sizeof plan);
    ASSERT_OK(fa_plan_splits(&p, plan, 128));
    cr_assert_eq(plan[0], 1, "batch_invariant: S = %d", plan[0]);
    for (int b = 0; b < 5; ++b) cr_assert_eq(plan[1 + b], 1);
    for (int i = 6; i < 128; ++i) cr_assert_eq(plan[i], 0);
}

Test(splits, plan_len_and_bad_input)
{
    int32_t cu[9], sk[8], plan[16];
    fa_split_params p = decode_params(8, 4096, cu, sk);
    for (int i = 0; i < 16; ++i) plan[i] = 4242;
    ASSERT_ERR(fa_plan_splits(&p, plan, 8)); /* needs 1 + 8 */
    for (int i = 0; i < 16; ++i) cr_assert_eq(plan[i], 4242, "plan written on error at %d", i);
    ASSERT_OK(fa_plan_splits(&p, plan, 9));
    check_plan_layout(plan, 8, 9, 32);
    cr_assert_eq(plan[9], 4242, "plan written past plan_len");
    ASSERT_ERR(fa_plan_splits(NULL, plan, 9));
    ASSERT_ERR(fa_plan_splits(&p, NULL, 9));
}

Test(splits, plan_random_properties)
{
    rng_seed(0x9A17);
    int32_t cu[65], sk[64], plan[100];
    for (int it = 0; it < 500; ++it) {
        int32_t n = rng_int(1, 64);
        cu[0] = 0;
        for (int32_t b = 0; b < n; ++b) {
            int32_t q = rng_int(0, 2) ? 1 : rng_int(1, 300);
            cu[b + 1] = cu[b] + q;
            sk[b] = q + rng_int(0, 20000);
        }
        fa_split_params p;
        memset(&p, 0, sizeof p);
        p.num_reqs = n;
        p.cu_seqlens_q = cu;
        p.seqused_k = sk;
        const int32_t hkv[4] = {1, 2, 8, 16};
        p.num_heads_kv = hkv[rng_int(0, 3)];
        p.num_heads_q = p.num_heads_kv * rng_int(1, 8);
        p.head_size = 64 * rng_int(1, 4);
        p.causal = rng_int(0, 1);
        p.window.left = rng_int(0, 1) ? -1 : rng_int(0, 4000);
        p.window.right = p.causal ? 0 : -1;
        p.num_sms = rng_int(1, 160);
        p.max_num_splits = rng_int(1, 64);
        p.batch_invariant = (it % 10 == 0);
        p.caps = test_caps();
        int32_t len = 1 + n + rng_int(0, 100 - 1 - n);
        for (int i = 0; i < 100; ++i) plan[i] = -3;
        ASSERT_OK(fa_plan_splits(&p, plan, len));
        check_plan_layout(plan, n, len, p.max_num_splits);
        if (p.batch_invariant) {
            cr_assert_eq(plan[0], 1);
        }
        for (int i = len; i < 100; ++i) cr_assert_eq(plan[i], -3, "written past plan_len");
        /* a split never has less than one key tile of work */
        for (int32_t b = 0; b < n; ++b) {
            int32_t tiles = cdiv32(sk[b] > 0 ? sk[b] : 1, test_tile_n(p.head_size));
            cr_assert_leq(plan[1 + b], tiles > 1 ? tiles : 1, "req %d: %d splits for %d tiles", b,
                          plan[1 + b], tiles);
        }
    }
}

/* The decode cost model's worked example (flashattn.h, above fa__decode_cost): 64 requests x 8
   KV heads at 8192 keys, head 128, bf16, 132 SMs, one split: 512 CTAs share the SMs 3.88 deep,
   one wave of 256 steps at max(1.6, 3.88 * 16384 B / 32768 B/us) = 1.94 us, plus 0.008 us a
   CTA: 500.6 us. Two splits of 128 steps: 1024 CTAs, more than the 6 x 132 resident, so two
   waves of 128 steps at max(1.6, 6 * 0.5) = 3.0 us -> 768 + 8.2 + the combine (6 + 0.4) =
   782.6 us: the planner keeps one split there (the 64 x 8k row of the sweep). */
Test(splits, decode_cost_worked_example)
{
    const fa_backend_caps *cp = test_caps();
    const fa_kernel_dim *kd = fa__kernel_dim(cp, 128);
    cr_assert_not_null(kd);
    double one = fa__decode_cost(cp, kd, 512, 256, 1, 132, 128, 2);
    cr_assert(fabs(one - (256.0 * (512.0 / 132.0) * 16384.0 / 32768.0 + 0.008 * 512)) < 1e-9, "%.6f", one);
    cr_assert(fabs(one - 500.6) < 0.05, "one split: %.3f us, expected 500.6", one);
    double two = fa__decode_cost(cp, kd, 1024, 128, 2, 132, 128, 2);
    cr_assert(fabs(two - (2.0 * 128.0 * 6.0 * 16384.0 / 32768.0 + 0.008 * 1024 + 6.0 + 0.2 * 2)) < 1e-9,
              "%.6f", two);
    cr_assert_gt(two, one, "two splits cost more than one at 64 x 8k");
    /* fp8 halves the bytes of a step: latency-bound again at 1.6 us */
    double fp8 = fa__decode_cost(cp, kd, 512, 256, 1, 132, 128, 1);
    cr_assert(fabs(fp8 - (256.0 * 1.6 + 0.008 * 512)) < 1e-9, "%.6f", fp8);
    /* a backend's constants are what the model uses: a slower step shows up one for one */
    fa_backend_caps slow = *cp;
    slow.dims[3].decode_step_us = 4.0;
    cr_assert(fabs(fa__decode_cost(&slow, &slow.dims[3], 512, 256, 1, 132, 128, 1) -
                   (256.0 * 4.0 + 0.008 * 512)) < 1e-9);
}
