/* gpu_family.h - the kernel family of a CUDA backend under test (every GPU test program that
   creates one calls gt_apply_family after fa_cuda_backend_create). */
#ifndef GPU_FAMILY_H
#define GPU_FAMILY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa_cuda.h"

/* The kernel families of a CUDA backend under test: FA_GPU_FAMILY=mma_sync in the environment
   runs the program with the mma.sync family only (run_gpu_tests.sh runs the attention programs
   once per family), FA_GPU_FAMILY=wgmma with the wgmma family for every call it takes (decode
   included); otherwise the backend's default (auto). Prints what head 128's prefill calls use.
   0, or -1 when the family cannot be set. */
static inline int gt_apply_family(fa_backend *be)
{
#ifdef GT_GPU_IS_CPU
    (void)be;
    return 0;
#else   /* !GT_GPU_IS_CPU */
    const char *f = getenv("FA_GPU_FAMILY");
    int i;
    if (f != NULL && strcmp(f, "mma_sync") == 0 &&
        fa_cuda_backend_set_family(be, FA_CUDA_FAMILY_MMA_SYNC) != FA_OK) {
        printf("# fa_cuda_backend_set_family(mma_sync) failed\n");
        return -1;
    }
    if (f != NULL && strcmp(f, "wgmma") == 0 &&
        fa_cuda_backend_set_family(be, FA_CUDA_FAMILY_WGMMA) != FA_OK) {
        printf("# fa_cuda_backend_set_family(wgmma) failed\n");
        return -1;
    }
    for (i = 0; i < be->caps.num_dims; ++i)
        if (be->caps.dims[i].head_dim == 128)
            printf("# family: %s (head 128 prefill: %s)\n", f != NULL ? f : "auto",
                   be->caps.dims[i].prefill_family == FA_KERNEL_FAMILY_WGMMA ? "wgmma" : "mma_sync");
    return 0;
#endif  /* GT_GPU_IS_CPU */
}

#endif /* GPU_FAMILY_H */
