/* backends/hip/include/nccl.h - NCCL's API from RCCL (ROCm installs it as rccl/rccl.h; ROCm < 5
   as rccl.h). With -Ibackends/hip/include first on the include path, backends/nccl/fa_nccl.c
   builds against RCCL unchanged. */
#ifndef FA_RCCL_NCCL_H
#define FA_RCCL_NCCL_H
#include "cuda_runtime_api.h"
#if __has_include(<rccl/rccl.h>)
#include <rccl/rccl.h>
#elif __has_include(<rccl.h>)
#include <rccl.h>
#else /* no RCCL */
#error "RCCL not found (rccl/rccl.h): install ROCm's rccl-dev, or add its include folder"
#endif /* __has_include(<rccl/rccl.h>) */
#endif /* FA_RCCL_NCCL_H */
