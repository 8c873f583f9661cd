// vendor.cuh - the one place where the CUDA backend meets its toolkit.
//
// Every .cu file of backends/cuda includes this (through fa_cuda_internal.cuh) and then speaks
// CUDA runtime names only. Three ways to compile them:
//
//   nvcc                       plain CUDA: the CUDA headers, no mapping.
//   hipcc (ROCm, AMD)          __HIP_PLATFORM_AMD__: the HIP headers, and every CUDA name the
//                              backend uses #defined to its HIP twin (the list below).
//   nvcc + HIP headers         __HIP_PLATFORM_NVIDIA__ (backends/hip/run_hip_on_nvidia.sh): the
//                              same mapping, resolved by HIP's NVIDIA headers back to CUDA. It
//                              runs the HIP source path (mapping, portable attention, the
//                              software fp8 / bf16 of old ROCm, 64-wide groups) on an NVIDIA GPU.
//
// FA_HIP is 1 in both HIP builds. A name missing here is a compile error on HIP, never a silent
// fallback: add the mapping next to the others when a new name is used (see backends/hip/README.md).
//
// Also defined here, for every build:
//   FA_WARP_SIZE            lanes of a hardware warp / wavefront (32 NVIDIA, 64 CDNA), a constant
//   fa_lane_mask_t          an integer with one bit per lane (uint32_t / uint64_t)
//   FA_FULL_LANE_MASK       every lane
//   fa_shfl_xor(m, v, o, w) butterfly shuffle within groups of w lanes (w <= FA_WARP_SIZE)
//   fa_fp8_to_float(b, e5m2) one OCP fp8 byte (E4M3, or E5M2 when e5m2) -> float, exact
//   FA_SOFT_FP8 / FA_SOFT_BF16  1 where the toolkit has no OCP fp8 / __hip_bfloat16 (ROCm < 6.3 /
//                              < 6.0, and the HIP-on-NVIDIA build, which tests that path): the
//                              __nv_* names then map to the software versions in vendor_soft.cuh
#pragma once

#include <stdint.h>

// clang's HIP mode (__HIP__) is how hipcc shows itself before hip_common.h has defined
// __HIP_PLATFORM_AMD__ (ROCm 5.2's hipcc puts no platform macro on the command line).
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP__)
#define FA_HIP 1
#else   // !(defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP__))
#define FA_HIP 0
#endif  // defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_NVIDIA__) || defined(__HIP__)

#if FA_HIP

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

#if defined(__HIP_PLATFORM_AMD__) && __has_include(<hip/hip_bf16.h>)
#include <hip/hip_bf16.h>
#define FA_SOFT_BF16 0
#else   // !(defined(__HIP_PLATFORM_AMD__) && __has_include(<hip/hip_bf16.h>))
#define FA_SOFT_BF16 1
#endif  // defined(__HIP_PLATFORM_AMD__) && __has_include(<hip/hip_bf16.h>)

// OCP E4M3 / E5M2 (what the cache stores) arrived in ROCm 6.3's hip_fp8.h; earlier ones have
// only the FNUZ formats, which store other bits: those use the software conversions.
#if defined(__HIP_PLATFORM_AMD__) && defined(HIP_VERSION) && HIP_VERSION >= 60300000 && \
    __has_include(<hip/hip_fp8.h>)
#include <hip/hip_fp8.h>
#define FA_SOFT_FP8 0
#else   // !(AMD && ROCm >= 6.3 && hip_fp8.h)
#define FA_SOFT_FP8 1
#endif  // AMD && ROCm >= 6.3 && hip_fp8.h

// ---- runtime: errors, devices, streams, memory -------------------------------------------------
#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError fa_hip_get_last_error   // nodiscard in HIP; the backend discards it
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaGetDevice hipGetDevice
#define cudaSetDevice fa_hip_set_device          // likewise (restoring the caller's device)
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrMaxSharedMemoryPerMultiprocessor hipDeviceAttributeMaxSharedMemoryPerMultiprocessor
#if defined(__HIP_PLATFORM_AMD__)
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#else   // !defined(__HIP_PLATFORM_AMD__): HIP 5.2's NVIDIA headers do not map the opt-in limit
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeMaxSharedMemoryPerBlock
#endif  // defined(__HIP_PLATFORM_AMD__)
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
#define cudaStream_t hipStream_t
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMalloc hipMalloc
#define cudaFree fa_hip_free                      // likewise
// mapped (zero-copy) pinned host memory: the backend's device error word
#define cudaHostAlloc hipHostMalloc            // hipHostAlloc is deprecated (a warning)
#if defined(__HIP_PLATFORM_AMD__)   // on NVIDIA these are CUDA's own macros (hipHostMalloc* name them)
#define cudaHostAllocMapped hipHostMallocMapped
#define cudaHostAllocPortable hipHostMallocPortable
#endif  // defined(__HIP_PLATFORM_AMD__)
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaFreeHost fa_hip_host_free            // likewise (freeing on a failure path)
#define cudaMemcpyKind hipMemcpyKind
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpy hipMemcpy   // (tests/gpu/test_gpu_portable.cu)
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpy2DAsync hipMemcpy2DAsync
#define cudaMemset hipMemset   // (tests/gpu/test_gpu_portable.cu)
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemset2DAsync hipMemset2DAsync

// HIP declares hipError_t [[nodiscard]] (C++17); the CUDA code calls a few runtime functions to
// clear or restore state and ignores what they return (a warning, and .ci/run wants none).
// These wrappers return the error in a struct without the attribute; it converts back to
// hipError_t wherever the value is used.
struct fa_hip_result {
    hipError_t e;
    __host__ operator hipError_t() const { return e; }
};
static inline fa_hip_result fa_hip_get_last_error(void) { return fa_hip_result{hipGetLastError()}; }
static inline fa_hip_result fa_hip_set_device(int d) { return fa_hip_result{hipSetDevice(d)}; }
static inline fa_hip_result fa_hip_host_free(void *p) { return fa_hip_result{hipHostFree(p)}; }
static inline fa_hip_result fa_hip_free(void *p) { return fa_hip_result{hipFree(p)}; }

#if defined(__HIP_PLATFORM_AMD__)
// __ldg: HIP has overloads for scalars and a few vectors only; on AMD a read-only load is a
// plain load, so one template covers every type (uint4 and unsigned short included).
template <class T> __device__ __forceinline__ T fa_hip_ldg(const T *p) { return *p; }
#define __ldg fa_hip_ldg
#endif  // defined(__HIP_PLATFORM_AMD__)

// ---- 16-bit floats -----------------------------------------------------------------------------
#if !FA_SOFT_BF16
#define __nv_bfloat16 __hip_bfloat16
#define __nv_bfloat162 __hip_bfloat162
#endif  // !FA_SOFT_BF16

// ---- fp8 (OCP E4M3 / E5M2) ---------------------------------------------------------------------
#if !FA_SOFT_FP8
#define __nv_fp8_storage_t __hip_fp8_storage_t
#define __nv_fp8x2_storage_t __hip_fp8x2_storage_t
#define __nv_fp8_interpretation_t __hip_fp8_interpretation_t
#define __nv_saturation_t __hip_saturation_t
#define __NV_E4M3 __HIP_E4M3
#define __NV_E5M2 __HIP_E5M2
#define __NV_SATFINITE __HIP_SATFINITE
#define __nv_cvt_float_to_fp8 __hip_cvt_float_to_fp8
#define __nv_cvt_float2_to_fp8x2 __hip_cvt_float2_to_fp8x2
#define __nv_cvt_fp8_to_halfraw __hip_cvt_fp8_to_halfraw
#endif  // !FA_SOFT_FP8

#include "vendor_soft.cuh"   // FA_SOFT_FP8 / FA_SOFT_BF16 versions of the __nv_* names

// ---- warps ---------------------------------------------------------------------------------------
#if defined(__HIP_PLATFORM_AMD__)
// 64 lanes on CDNA (gfx908, gfx90a, gfx94x), the targets this backend is built for. RDNA
// (wave32) is not a target: the check below stops a device pass compiled for 32 lanes.
#define FA_WARP_SIZE 64
#if defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != 64
#error "flashattn HIP backend: FA_WARP_SIZE is 64 (CDNA); this target has another wavefront size"
#endif  // defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != 64
typedef uint64_t fa_lane_mask_t;
#define FA_FULL_LANE_MASK (~0ull)
#else   // !defined(__HIP_PLATFORM_AMD__): HIP on NVIDIA
#define FA_WARP_SIZE 32
typedef uint32_t fa_lane_mask_t;
#define FA_FULL_LANE_MASK 0xffffffffu
#endif  // defined(__HIP_PLATFORM_AMD__)

#else   // !FA_HIP

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define FA_SOFT_BF16 0
#define FA_SOFT_FP8 0
#define FA_WARP_SIZE 32
typedef uint32_t fa_lane_mask_t;
#define FA_FULL_LANE_MASK 0xffffffffu

#endif  // FA_HIP

// ---- helpers with one spelling for every build -----------------------------------------------
#if defined(__CUDACC__) || defined(__HIPCC__)

// Butterfly shuffle: v of the lane (lane ^ o), within groups of `width` lanes (a power of two,
// at most FA_WARP_SIZE). AMD: 64-bit masks; ROCm before 6.2 has no *_sync shuffles, and a
// wavefront executes in lock step there, so the mask only documents the participants.
template <class T>
__device__ __forceinline__ T fa_shfl_xor(fa_lane_mask_t mask, T v, int o, int width = FA_WARP_SIZE) {
#if defined(__HIP_PLATFORM_AMD__)
#if defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
    return __shfl_xor_sync(mask, v, o, width);
#else   // !defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
    (void)mask;
    return __shfl_xor(v, o, width);
#endif  // defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
#else   // !defined(__HIP_PLATFORM_AMD__)
    return __shfl_xor_sync(mask, v, o, width);
#endif  // defined(__HIP_PLATFORM_AMD__)
}

// One OCP fp8 byte -> float (exact: every fp8 value is a float; NaN stays NaN).
__device__ __forceinline__ float fa_fp8_to_float(uint32_t byte, bool e5m2) {
#if FA_SOFT_FP8
    return fa_soft_fp8_to_float(byte, e5m2);
#else   // !FA_SOFT_FP8: the toolkit's conversion (fp8 -> f16 is exact)
    const __half_raw h =
        __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte & 0xffu), e5m2 ? __NV_E5M2 : __NV_E4M3);
    return __half2float(__half(h));
#endif  // FA_SOFT_FP8
}

#endif  // defined(__CUDACC__) || defined(__HIPCC__)
