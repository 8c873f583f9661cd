/* fa_cpu.h - the CPU reference backend of flashattn (plain C99, host memory)

   Every op of fa_backend_ops runs on the host in straightforward loops: "device" pointers are
   host pointers. Attention sums are accumulated in double, the result is rounded once to the
   output dtype. It is the oracle the GPU backends are tested against, so it favours being
   obviously right over being fast.

   Also: software fp8 / f16 / bf16 conversions (round-to-nearest-even), usable by tests.

   Choices where fa_attn_args leaves room (the GPU backends should match them):
     - max_seqlen_q / max_seqlen_k are not used: windows are never clamped by them.
     - split-KV (num_splits > 1): sequence b gets s = split_plan[1 + b] (or num_splits) splits
       of ceil(ceil(Lk / block_size) / s) * block_size keys each (whole blocks; units of 1 key
       for a dense call with block_size 0); every partial is really written to split_out /
       split_lse, the sink joins split 0 only, then the combine of SEMANTICS 9.4.
     - split_plan[1 + b] == 0: sequence b does nothing, its out / lse rows stay as they were.
     - work_counters: never read or written (the loops need no work counter); only its
       alignment is checked (4 bytes, fa_bu_check_attention), so the words stay as given.
     - paged block_size: any positive value (the multiple-of-16 rule is the header's).
     - head_size: multiple of 8 in [8, 256] for every op, as in the rest of the library.
     - an empty side of a merge, or an empty rank in dcp_correct, is skipped, never multiplied
       by 0: a NaN there does not reach the output.
     - the metadata (cu_seqlens, seqused_k, used block ids, split_plan) is host memory here and
       is checked before anything is written.
     - bounds: reshape_and_cache rejects a slot at or past num_blocks * block_size, attention a
       block id outside [0, num_blocks) among the columns it reads (ceil(seqused_k / block_size)
       of each sequence with queries and work planned), both with FA_ERR_INVALID_ARG before
       anything is written. num_blocks > 0 is required (the header fills it from the cache's
       shape[1]). Every offset is computed in 64 bits, and a view whose offsets would overflow
       int64 is rejected.
     - ops.check runs the very function each op runs first (so they never disagree): the dtype
       checks, then the structural checks every backend shares (backends/common/
       fa_backend_util.h: fa_bu_check_cache_write / _attention / _merge / _dcp_correct; the CPU
       takes any positive block size), then the CPU's own (metadata, bounds, int64 offsets).
       Messages start with "cpu <op>:" and name the field and its value (a dtype as its enum
       number and name, "kv_dtype 4 (fp8_e4m3)"). An attention call with num_seqs 0 does nothing
       and needs only sane scalars (heads, head size, dtypes).
     - caps: the CUDA kernels' facts as calibrated on the H200 (so the planner plans for the CPU
       what it plans for the GPU); align_bytes 1 (no rule beyond the natural alignment of each
       dtype, which C demands of the pointers anyway).

   Concurrency: several threads may call the ops of one backend at once. The error message is
   per thread: ops.last_error returns the calling thread's last failure of this backend ("" if
   the thread's last failure was another backend's, or none).

   Test hooks (fault injection, fa_cpu_backend_options): the Nth alloc, the Nth copy / copy_2d, or
   the Nth call of one device op fails once, as a device would; every other call works. An
   injected op failure happens after the op's checks passed (ops.check still says FA_OK), writes
   nothing and returns FA_ERR_BACKEND with "cpu <op>: injected failure at call N". Counting
   starts at creation or at fa_cpu_backend_set_options; calls of ops.check are not counted.
*/
#ifndef FA_CPU_H
#define FA_CPU_H

#include <stdint.h>

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CPU backend (name "cpu", compute capability 0.0, a nominal 132 SMs for
   planning). FA_ERR_INVALID_ARG when out is NULL, FA_ERR_OUT_OF_MEMORY if malloc fails. */
fa_status fa_cpu_backend_create(fa_backend **out);

/* Test hooks. Zero-initialise, then set what should fail; a field left 0 injects nothing. */
typedef struct fa_cpu_backend_options {
    int64_t fail_alloc_at;   /* > 0: the Nth ops.alloc call fails with FA_ERR_OUT_OF_MEMORY
                                ("cpu alloc: injected failure at call N"), *ptr = NULL */
    int64_t fail_copy_at;    /* > 0: the Nth ops.copy or ops.copy_2d call (one count) fails with
                                FA_ERR_BACKEND, copying nothing */
    fa_op fail_op;           /* the device op that fail_op_at applies to */
    int64_t fail_op_at;      /* > 0: the Nth call of fail_op fails with FA_ERR_BACKEND after its
                                checks passed, writing nothing */
} fa_cpu_backend_options;

/* fa_cpu_backend_create with test hooks (opts NULL = none: the same as fa_cpu_backend_create).
   Same errors. */
fa_status fa_cpu_backend_create_ex(const fa_cpu_backend_options *opts, fa_backend **out);

/* Re-arms the hooks of a CPU backend (opts NULL disarms) and restarts their counts at 0, e.g.
   after a builder was created. Not concurrently with the backend's ops. FA_ERR_INVALID_ARG when
   be is NULL or not a CPU backend. */
fa_status fa_cpu_backend_set_options(fa_backend *be, const fa_cpu_backend_options *opts);

/* Destroys a backend made by fa_cpu_backend_create (NULL is a no-op). */
void fa_cpu_backend_destroy(fa_backend *be);

/* float -> fp8 (fmt FA_DTYPE_FP8_E4M3 or FA_DTYPE_FP8_E5M2) like CUDA's
   __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...): round-to-nearest-even, subnormals kept,
   finite overflow and +-inf clamp to +-max (448 for E4M3, 57344 for E5M2), NaN stays NaN
   (0x7F / 0xFF, sign kept). Any other fmt returns 0. */
uint8_t fa_cpu_float_to_fp8(float x, fa_dtype fmt);

/* fp8 -> float (exact). Any other fmt returns NaN. */
float fa_cpu_fp8_to_float(uint8_t v, fa_dtype fmt);

/* IEEE binary16 and bfloat16 <-> float. float -> 16 bit: round-to-nearest-even, overflow to
   +-inf, subnormals kept, NaN stays a quiet NaN (sign kept). 16 bit -> float: exact. */
uint16_t fa_cpu_float_to_half(float x);
float fa_cpu_half_to_float(uint16_t h);
uint16_t fa_cpu_float_to_bf16(float x);
float fa_cpu_bf16_to_float(uint16_t b);

#ifdef __cplusplus
}
#endif

#endif /* FA_CPU_H */
