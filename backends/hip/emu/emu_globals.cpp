// backends/hip/emu/emu_globals.cpp - the emulated thread indices, barrier and shuffle buffer.
#include "vendor.cuh"
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
std::barrier<> *g_bar;
float g_shfl[1024];
