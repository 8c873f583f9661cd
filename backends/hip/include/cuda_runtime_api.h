/* backends/hip/include/cuda_runtime_api.h - the CUDA runtime names that the C sources use
   (backends/nccl/fa_nccl.c; tests/gpu/test_gpu_ops.c, test_gpu_checks.c and test_gpu_graph.c,
   which capture graphs, copy and time with events), mapped to HIP for ROCm: put this folder first on the include
   path (-Ibackends/hip/include) and compile them unchanged. Plain C; the C++/HIP backend sources
   use backends/cuda/vendor.cuh instead. A name missing here is a compile error, never a
   fallback. */
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
#define cudaStreamCreate hipStreamCreate
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamCaptureModeGlobal hipStreamCaptureModeGlobal
/* CUDA 12's three-argument form; HIP's hipGraphInstantiate keeps the old five arguments */
#define cudaGraphInstantiate hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphGetNodes hipGraphGetNodes
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy

#endif /* FA_RCCL_CUDA_RUNTIME_API_H */
