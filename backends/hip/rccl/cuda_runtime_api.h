/* backends/hip/rccl/cuda_runtime_api.h - the CUDA runtime names of backends/nccl/fa_nccl.c,
   mapped to HIP, for building that comm against RCCL (whose API is NCCL's) on ROCm: put this
   folder first on the include path (-Ibackends/hip/rccl) and compile fa_nccl.c unchanged.
   Plain C (fa_nccl.c is C99); the C++ backend sources use backends/cuda/vendor.cuh instead. */
#ifndef FA_RCCL_CUDA_RUNTIME_API_H
#define FA_RCCL_CUDA_RUNTIME_API_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif /* __HIP_PLATFORM_AMD__ */
#include <hip/hip_runtime_api.h>

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
#define cudaStream_t hipStream_t

#endif /* FA_RCCL_CUDA_RUNTIME_API_H */
