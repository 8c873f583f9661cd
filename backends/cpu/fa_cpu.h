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
     - paged block_size: any positive value (the multiple-of-16 rule is the header's).
     - head_size: multiple of 8 in [8, 256] for every op, as in the rest of the library.
     - an empty side of a merge, or an empty rank in dcp_correct, is skipped, never multiplied
       by 0: a NaN there does not reach the output.
     - the metadata (cu_seqlens, seqused_k, used block ids, split_plan) is host memory here and
       is checked before anything is written.

   Concurrency: a backend holds no mutable state besides its last error message, so several
   threads may call its ops at once (the message is then that of one of the failures).
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
