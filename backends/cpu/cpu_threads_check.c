/* cpu_threads_check.c - the CPU backend and the fake comm used from several threads at once.

   A self-checking program (exit status 0 = pass) without Criterion, so that it also runs under
   ThreadSanitizer (Criterion's forked test boxes do not start under it):

     meson setup build-tsan -Dcuda=disabled -Db_sanitize=thread && ninja -C build-tsan
     meson test -C build-tsan cpu_threads        (or ./build-tsan/backends/cpu/cpu_threads_check)

   Two threads make ops of one backend fail over and over, each with its own message, while two
   more run a valid cache write + attention on it; then one fake-comm rank aborts the group while
   the other waits in a collective, and a group times out. Any message read from the wrong
   thread, a wrong result or a hang (alarm) fails it; TSan reports any data race. */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200112L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200112L
#endif

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fa_cpu.h"
#include "fa_fake_comm.h"

enum { ROUNDS = 3000, D = 8, BS = 16, NB = 4 };

static fa_backend *g_be;
static int g_bad[4];

static void *fail_fill(void *p)   /* "cpu fill: pitch 8 ..." */
{
    unsigned char buf[64];
    int i;
    (void)p;
    for (i = 0; i < ROUNDS; ++i) {
        if (g_be->ops.fill(g_be->ctx, buf, 8, 0, 16, 2) != FA_ERR_INVALID_ARG ||
            strncmp(g_be->ops.last_error(g_be->ctx), "cpu fill: pitch 8", 17) != 0)
            g_bad[0]++;
    }
    return NULL;
}

static void *fail_dcp(void *p)    /* "cpu dcp_correct: world_size 0 ..." */
{
    fa_dcp_correct_args c;
    int i;
    (void)p;
    memset(&c, 0, sizeof c);
    c.dtype = FA_DTYPE_F32;
    c.num_heads = 1;
    c.head_size = 64;
    for (i = 0; i < ROUNDS; ++i) {
        if (g_be->ops.dcp_correct(g_be->ctx, &c) != FA_ERR_INVALID_ARG ||
            strncmp(g_be->ops.last_error(g_be->ctx), "cpu dcp_correct: world_size 0", 29) != 0)
            g_bad[1]++;
    }
    return NULL;
}

/* a thread's own cache (1 head, D 8, 4 blocks of 16) and one query over its 3 keys */
static void *run_ops(void *p)
{
    const int who = (int)(size_t)p;
    float key[3 * D], kc[NB * BS * D], vc[NB * BS * D], q[D], out[D], lse[1];
    int64_t slot[3] = {16 + 0, 16 + 1, 16 + 2};   /* block 1 */
    int32_t cu_q[2] = {0, 1}, used[1] = {3}, bt[1] = {1};
    fa_cache_write_args w;
    fa_attn_args a;
    int i, r;
    for (i = 0; i < 3 * D; ++i)
        key[i] = (float)(i / D + 1) + 10.0f * (float)who;   /* value row j = j + 1 + 10 who */
    for (i = 0; i < D; ++i) q[i] = 0.0f; /* equal logits: out = mean */
    memset(&w, 0, sizeof w);
    w.key = key;
    w.value = key;
    w.key_token_stride = w.value_token_stride = D;
    w.kv_dtype = w.cache_dtype = FA_DTYPE_F32;
    w.key_cache = kc;
    w.value_cache = vc;
    w.cache_block_stride = BS * D;
    w.cache_row_stride = D;
    w.cache_head_stride = D;
    w.slot_mapping = slot;
    w.num_blocks = NB;
    w.num_tokens = 3;
    w.num_heads_kv = 1;
    w.head_size = D;
    w.block_size = BS;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.q_token_stride = D;
    a.q_head_stride = D;
    a.q_dtype = FA_DTYPE_F32;
    a.k = kc;
    a.v = vc;
    a.kv_dtype = FA_DTYPE_F32;
    a.k_block_stride = a.v_block_stride = BS * D;
    a.k_row_stride = a.v_row_stride = D;
    a.k_head_stride = a.v_head_stride = D;
    a.out = out;
    a.out_token_stride = D;
    a.out_head_stride = D;
    a.lse = lse;
    a.lse_head_stride = 1;
    a.cu_seqlens_q = cu_q;
    a.seqused_k = used;
    a.block_table = bt;
    a.block_table_stride = 1;
    a.num_blocks = NB;
    a.num_seqs = 1;
    a.num_tokens = 1;
    a.max_seqlen_q = 1;
    a.max_seqlen_k = 3;
    a.num_heads_q = 1;
    a.num_heads_kv = 1;
    a.head_size = D;
    a.block_size = BS;
    a.softmax_scale = 1.0f;
    a.window_left = a.window_right = -1;
    a.num_splits = 1;
    for (r = 0; r < ROUNDS / 10; ++r) {
        memset(kc, 0, sizeof kc);
        memset(vc, 0, sizeof vc);
        if (g_be->ops.reshape_and_cache(g_be->ctx, &w) != FA_OK ||
            g_be->ops.check(g_be->ctx, FA_OP_ATTENTION, &a) != FA_OK ||
            g_be->ops.attention(g_be->ctx, &a) != FA_OK || out[0] != 2.0f + 10.0f * (float)who)
            g_bad[2 + who]++;
    }
    return NULL;
}

/* fake comm: rank 0 waits in all_gather, rank 1 aborts the group */
static fa_comm *g_comms;
static fa_status g_st0;

static void *rank_wait(void *p)
{
    float s[4] = {0, 0, 0, 0}, r[8];
    (void)p;
    g_st0 = g_comms[0].all_gather(g_comms[0].ctx, s, r, 4, FA_DTYPE_F32);
    return NULL;
}

static void *rank_abort(void *p)
{
    struct timespec pause = {0, 20 * 1000 * 1000};
    (void)p;
    nanosleep(&pause, NULL);
    fa_fake_comm_abort(&g_comms[1]);
    return NULL;
}

int main(void)
{
    pthread_t t[4];
    float s[4] = {0, 0, 0, 0}, rv[8];
    int i, fails = 0;

    alarm(120); /* a hang fails */
    if (fa_cpu_backend_create(&g_be) != FA_OK) return 2;
    pthread_create(&t[0], NULL, fail_fill, NULL);
    pthread_create(&t[1], NULL, fail_dcp, NULL);
    pthread_create(&t[2], NULL, run_ops, (void *)(size_t)0);
    pthread_create(&t[3], NULL, run_ops, (void *)(size_t)1);
    for (i = 0; i < 4; ++i) pthread_join(t[i], NULL);
    for (i = 0; i < 4; ++i)
        if (g_bad[i]) {
            fprintf(stderr, "thread %d: %d wrong results or messages\n", i, g_bad[i]);
            fails++;
        }
    if (strcmp(g_be->ops.last_error(g_be->ctx), "") != 0) {
        fprintf(stderr, "the main thread reads another thread's message: %s\n",
                g_be->ops.last_error(g_be->ctx));
        fails++;
    }
    fa_cpu_backend_destroy(g_be);

    /* abort wakes a waiting rank */
    if (fa_fake_comm_group_create(2, &g_comms) != FA_OK) return 2;
    fa_fake_comm_group_set_timeout(g_comms, 0);
    pthread_create(&t[0], NULL, rank_wait, NULL);
    pthread_create(&t[1], NULL, rank_abort, NULL);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    if (g_st0 != FA_ERR_BACKEND ||
        strstr(g_comms[0].last_error(g_comms[0].ctx), "peer rank 1 aborted") == NULL) {
        fprintf(stderr, "abort: rank 0 got %d: %s\n", (int)g_st0, g_comms[0].last_error(g_comms[0].ctx));
        fails++;
    }
    /* reset, then a timeout (rank 1 never comes) */
    fa_fake_comm_group_reset(g_comms);
    fa_fake_comm_group_set_timeout(g_comms, 50);
    if (g_comms[0].all_gather(g_comms[0].ctx, s, rv, 4, FA_DTYPE_F32) != FA_ERR_BACKEND ||
        strstr(g_comms[0].last_error(g_comms[0].ctx), "rank(s) 1 did not arrive") == NULL) {
        fprintf(stderr, "timeout: %s\n", g_comms[0].last_error(g_comms[0].ctx));
        fails++;
    }
    fa_fake_comm_group_destroy(g_comms);
    printf("cpu_threads_check: %s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
