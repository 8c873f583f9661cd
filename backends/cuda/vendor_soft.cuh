// vendor_soft.cuh - software bf16 and OCP fp8 for HIP toolkits that lack them (included by
// vendor.cuh only; FA_SOFT_BF16 / FA_SOFT_FP8 say which). ROCm 5.x has no __hip_bfloat16
// intrinsics (only the hip_bfloat16 class) and no OCP fp8 (ROCm 6.0-6.2 only the FNUZ formats,
// which store other bits). The HIP-on-NVIDIA build uses these too, so that they are tested
// against the CPU reference on a GPU.
//
// Semantics are those of the CUDA intrinsics they stand in for:
//   __float2bfloat16_rn   round to nearest even; NaN -> a quiet NaN of the same sign
//   __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt)
//                         round to nearest even on the fp8 grid (subnormals included);
//                         finite overflow and +-inf saturate to +-max (448 E4M3, 57344 E5M2);
//                         NaN -> 0x7f with the sign bit of x (E4M3 and E5M2)
//   fa_soft_fp8_to_float  exact decode (E4M3: S.1111.111 is NaN, no infinity; E5M2 is the
//                         upper byte of an IEEE half)
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)

#if FA_SOFT_BF16
struct fa_soft_bf16 {
    unsigned short x;
};
__host__ __device__ __forceinline__ float fa_soft_bf16_to_float(fa_soft_bf16 v) {
    union {
        uint32_t u;
        float f;
    } c;
    c.u = (uint32_t)v.x << 16;
    return c.f;
}
__host__ __device__ __forceinline__ fa_soft_bf16 fa_soft_float_to_bf16_rn(float f) {
    union {
        uint32_t u;
        float f;
    } c;
    c.f = f;
    fa_soft_bf16 r;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) {
        r.x = (unsigned short)((c.u >> 16) | 0x0040u);   // quiet NaN, sign kept
    } else {
        r.x = (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
    }
    return r;
}
__host__ __device__ __forceinline__ fa_soft_bf16 fa_soft_ushort_as_bf16(unsigned short x) {
    fa_soft_bf16 r;
    r.x = x;
    return r;
}
__host__ __device__ __forceinline__ unsigned short fa_soft_bf16_as_ushort(fa_soft_bf16 v) { return v.x; }

#define __nv_bfloat16 fa_soft_bf16
#define __bfloat162float fa_soft_bf16_to_float
#define __float2bfloat16_rn fa_soft_float_to_bf16_rn
#define __float2bfloat16 fa_soft_float_to_bf16_rn
#define __ushort_as_bfloat16 fa_soft_ushort_as_bf16
#define __bfloat16_as_ushort fa_soft_bf16_as_ushort
#endif  // FA_SOFT_BF16

#if FA_SOFT_FP8
typedef unsigned char fa_soft_fp8_storage_t;
typedef unsigned short fa_soft_fp8x2_storage_t;
enum fa_soft_fp8_interpretation_t { FA_SOFT_E4M3 = 0, FA_SOFT_E5M2 = 1 };
enum fa_soft_saturation_t { FA_SOFT_NOSAT = 0, FA_SOFT_SATFINITE = 1 };

__device__ __forceinline__ float fa_soft_pow2(int e) {   // 2^e for -126 <= e <= 127
    return __uint_as_float((uint32_t)(e + 127) << 23);
}

// float -> OCP fp8, saturating to the largest finite value (the only mode the backend uses).
__device__ __forceinline__ fa_soft_fp8_storage_t fa_soft_cvt_float_to_fp8(float x, fa_soft_saturation_t sat,
                                                                          fa_soft_fp8_interpretation_t fmt) {
    (void)sat;
    const bool e5 = fmt == FA_SOFT_E5M2;
    const int mbits = e5 ? 2 : 3, bias = e5 ? 15 : 7;
    const float maxv = e5 ? 57344.0f : 448.0f;
    const uint32_t u = __float_as_uint(x);
    const uint32_t sign = (u >> 24) & 0x80u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (fa_soft_fp8_storage_t)(sign | 0x7fu);   // NaN
    float a = fabsf(x);
    if (!(a < maxv)) return (fa_soft_fp8_storage_t)(sign | (e5 ? 0x7bu : 0x7eu));      // >= max, inf
    const int emin = 1 - bias;                   // exponent of the smallest normal
    int e = (int)((__float_as_uint(a) >> 23) & 0xffu) - 127;
    if (e < emin) e = emin;                      // subnormal (or zero): the quantum of emin
    const float q = fa_soft_pow2(e - mbits);     // the fp8 ulp at a's binade
    float r = rintf(a / q) * q;                  // nearest even (a / q is exact: q is 2^k)
    if (r > maxv) r = maxv;
    if (r == 0.0f) return (fa_soft_fp8_storage_t)sign;
    int er = (int)((__float_as_uint(r) >> 23) & 0xffu) - 127;   // rounding may move a binade up
    uint32_t bits;
    if (er < emin) {                              // subnormal: exponent field 0
        bits = (uint32_t)(r / fa_soft_pow2(emin - mbits));
    } else {
        const uint32_t m = (uint32_t)(r / fa_soft_pow2(er - mbits)) - (1u << mbits);
        bits = ((uint32_t)(er + bias) << mbits) | m;
    }
    return (fa_soft_fp8_storage_t)(sign | bits);
}

// Two floats -> two fp8 bytes, x.x in the low byte (the CUDA intrinsic's order).
__device__ __forceinline__ fa_soft_fp8x2_storage_t
fa_soft_cvt_float2_to_fp8x2(float2 x, fa_soft_saturation_t sat, fa_soft_fp8_interpretation_t fmt) {
    const uint32_t lo = fa_soft_cvt_float_to_fp8(x.x, sat, fmt);
    const uint32_t hi = fa_soft_cvt_float_to_fp8(x.y, sat, fmt);
    return (fa_soft_fp8x2_storage_t)(lo | (hi << 8));
}

__device__ __forceinline__ float fa_soft_fp8_to_float(uint32_t byte, bool e5m2) {
    const uint32_t b = byte & 0xffu, sign = (b & 0x80u) << 24;
    if (e5m2) {   // the upper byte of an IEEE half: rebias 5 -> 8 exponent bits
        const uint32_t e = (b >> 2) & 0x1fu, m = b & 3u;
        if (e == 31u) return __uint_as_float(sign | 0x7f800000u | (m << 21));   // inf / NaN
        if (e == 0u) return __uint_as_float(sign) + (sign ? -1.0f : 1.0f) * (float)m * fa_soft_pow2(-16);
        return __uint_as_float(sign | ((e + 112u) << 23) | (m << 21));
    }
    const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
    if (e == 15u && m == 7u) return __uint_as_float(sign | 0x7fc00000u);      // NaN (no inf)
    if (e == 0u) return (sign ? -1.0f : 1.0f) * (float)m * fa_soft_pow2(-9);
    return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

#define __nv_fp8_storage_t fa_soft_fp8_storage_t
#define __nv_fp8x2_storage_t fa_soft_fp8x2_storage_t
#define __nv_fp8_interpretation_t fa_soft_fp8_interpretation_t
#define __nv_saturation_t fa_soft_saturation_t
#define __NV_E4M3 FA_SOFT_E4M3
#define __NV_E5M2 FA_SOFT_E5M2
#define __NV_SATFINITE FA_SOFT_SATFINITE
#define __nv_cvt_float_to_fp8 fa_soft_cvt_float_to_fp8
#define __nv_cvt_float2_to_fp8x2 fa_soft_cvt_float2_to_fp8x2
#endif  // FA_SOFT_FP8

#endif  // defined(__CUDACC__) || defined(__HIPCC__)
