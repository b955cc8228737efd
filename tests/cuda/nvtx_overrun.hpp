// What the two halves of pvmm_cuda_nvtx_overrun share: nvtx_overrun.cpp (the pvmm modes, main) and
// nvtx_overrun_raw.cpp (the raw modes, pvmm out of the way) take the driver's entries from libcuda by name and report
// a failed call the same way.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <string>

#include <cuda.h>

/// The entry `name` of the opened driver `lib` as an F (null where the driver lacks it).
template <class F>
F load(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

/// Says which driver call failed with what; returns the program's exit status for it (1).
inline int fail(const char* what, CUresult r) {
  std::fprintf(stderr, "nvtx_overrun: %s failed (CUresult %d)\n", what, static_cast<int>(r));
  return 1;
}

/// Runs raw mode `mode` (raw-malloc, raw-vmm, raw-vmm2) with the context current; `poke(p, offset)` launches the
/// one-byte write and synchronizes. Returns the exit status.
int run_raw(void* lib, const std::string& mode, int (*poke)(CUdeviceptr, unsigned long long));
