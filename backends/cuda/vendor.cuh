// vendor.cuh - the one place where the CUDA backend meets its toolkit.
//
// Every .cu file of backends/cuda includes this (through fa_cuda_internal.cuh) and then speaks
// CUDA runtime names only. On NVIDIA it includes the CUDA headers. Compiled by hipcc for AMD
// (__HIP_PLATFORM_AMD__), it maps each CUDA name the backend uses to its HIP twin, so the same
// sources build the HIP backend (see backends/hip/README.md). A name missing here is a compile
// error on HIP, never a silent fallback: add the mapping when a new CUDA name is used.
#pragma once

#if defined(__HIP_PLATFORM_AMD__)

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>
#include <hip/hip_fp8.h>

// runtime: errors, devices, streams, memory
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrMaxSharedMemoryPerMultiprocessor hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaStream_t hipStream_t
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemcpyKind hipMemcpyKind
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemset2DAsync hipMemset2DAsync

// 16-bit floats
#define __nv_bfloat16 __hip_bfloat16
#define __nv_bfloat162 __hip_bfloat162

// fp8 (OCP formats; ROCm >= 6.3 provides the OCP, not only the FNUZ, variants)
#define __nv_fp8_storage_t __hip_fp8_storage_t
#define __nv_fp8x2_storage_t __hip_fp8x2_storage_t
#define __nv_fp8_interpretation_t __hip_fp8_interpretation_t
#define __nv_saturation_t __hip_saturation_t
#define __NV_E4M3 __HIP_E4M3
#define __NV_E5M2 __HIP_E5M2
#define __NV_SATFINITE __HIP_SATFINITE
#define __nv_cvt_float_to_fp8 __hip_cvt_float_to_fp8
#define __nv_cvt_float2_to_fp8x2 __hip_cvt_float2_to_fp8x2

// warps: 64 lanes on CDNA
#define FA_WARP_SIZE 64

#else  // !defined(__HIP_PLATFORM_AMD__)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define FA_WARP_SIZE 32

#endif  // defined(__HIP_PLATFORM_AMD__)
