// The planted one-byte overrun (pvmm::register_with_nvtx, issue 50 item 4): a kernel writes one byte past a
// 1000-byte caching-allocator block. The block is 1024 bytes (512-byte rounding) inside a mapped chunk, so without
// NVTX registration no tool can see the overrun; with it, compute-sanitizer's memcheck must report it:
//   compute-sanitizer --tool memcheck --error-exitcode 9 pvmm_cuda_nvtx_overrun on    -> exit 9, "Invalid __global__
//                                                                                        write of size 1"
//   compute-sanitizer --tool memcheck --error-exitcode 9 pvmm_cuda_nvtx_overrun off   -> exit 0
//   (a second argument "big": the block spans two 4 MiB chunks, its region two pieces in two mappings' heaps)
//   raw-malloc | raw-vmm | raw-vmm2: the same overrun on memory pvmm does not touch (nvtx_overrun_raw.cpp)
// (tools/gpu-nvtx-check.sh runs them all). The CUDA runtime is initialized first (cudaFree(0)): compute-sanitizer
// takes NVTX calls only after it. Without a tool it runs anywhere a CUDA driver is, writes the byte and exits 0;
// where there is none it prints [pvmm-skip] (a CTest case skipped).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/snapshot.hpp>

#include "nvtx_overrun.hpp"

namespace {
// st.global.u8 [p + offset], 7: the smallest store that can overrun by exactly one byte.
const char* const poke_ptx = R"(
.version 7.0
.target sm_52
.address_size 64
.visible .entry poke(.param .u64 p, .param .u64 offset)
{
  .reg .b64 %rd<4>;
  .reg .b16 %rs<2>;
  ld.param.u64 %rd1, [p];
  ld.param.u64 %rd2, [offset];
  cvta.to.global.u64 %rd1, %rd1;
  add.s64 %rd3, %rd1, %rd2;
  mov.u16 %rs1, 7;
  st.global.u8 [%rd3], %rs1;
  ret;
}
)";

// The loaded kernel and the calls that launch it (set in main).
CUfunction poke_fn = nullptr;
CUstream poke_stream = nullptr;
CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                   void**) = nullptr;
CUresult (*synchronize)(CUstream) = nullptr;

/// Writes one byte at p + offset and waits for it.
int poke(CUdeviceptr p, unsigned long long offset) {
  void* params[] = {&p, &offset};
  if (auto r = launch(poke_fn, 1, 1, 1, 1, 1, 1, 0, poke_stream, params, nullptr); r != CUDA_SUCCESS)
    return fail("cuLaunchKernel", r);
  if (auto r = synchronize(poke_stream); r != CUDA_SUCCESS) return fail("cuStreamSynchronize", r);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool on = mode == "on";
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("[pvmm-skip] nvtx_overrun: no CUDA driver here (%s)\n", dlerror());
    return 0;
  }
  auto cu_init = load<CUresult (*)(unsigned)>(lib, "cuInit");
  auto device_get = load<CUresult (*)(CUdevice*, int)>(lib, "cuDeviceGet");
  auto retain = load<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain");
  auto release = load<CUresult (*)(CUdevice)>(lib, "cuDevicePrimaryCtxRelease_v2");
  auto set_current = load<CUresult (*)(CUcontext)>(lib, "cuCtxSetCurrent");
  auto load_data = load<CUresult (*)(CUmodule*, const void*)>(lib, "cuModuleLoadData");
  auto unload = load<CUresult (*)(CUmodule)>(lib, "cuModuleUnload");
  auto get_function = load<CUresult (*)(CUfunction*, CUmodule, const char*)>(lib, "cuModuleGetFunction");
  launch = load<decltype(launch)>(lib, "cuLaunchKernel");
  synchronize = load<decltype(synchronize)>(lib, "cuStreamSynchronize");
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cu_init == nullptr || cu_init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
      pvmm::device_count().value_or(0) < 1) {
    std::printf("[pvmm-skip] nvtx_overrun: no usable CUDA device\n");
    return 0;
  }
  if (auto r = retain(&context, device); r != CUDA_SUCCESS) return fail("cuDevicePrimaryCtxRetain", r);
  if (auto r = set_current(context); r != CUDA_SUCCESS) return fail("cuCtxSetCurrent", r);
  // compute-sanitizer takes NVTX calls only once the CUDA runtime is initialized (its NVTX guide: cudaFree(0)).
  if (auto r = cudaFree(nullptr); r != cudaSuccess) {
    std::fprintf(stderr, "nvtx_overrun: cudaFree(0) failed (%s)\n", cudaGetErrorString(r));
    return 1;
  }
  CUmodule module = nullptr;
  if (auto r = load_data(&module, poke_ptx); r != CUDA_SUCCESS) return fail("cuModuleLoadData", r);
  if (auto r = get_function(&poke_fn, module, "poke"); r != CUDA_SUCCESS) return fail("cuModuleGetFunction", r);
  if (mode.rfind("raw-", 0) == 0) {  // pvmm out of the way (nvtx_overrun_raw.cpp)
    const int rc = run_raw(lib, mode, poke);
    (void)unload(module);
    (void)set_current(nullptr);
    (void)release(device);
    return rc;
  }

  if (auto ok = pvmm::register_with_nvtx(on); !ok) {
    std::fprintf(stderr, "%s\n", ok.error().message().c_str());
    return 1;
  }
  auto s = pvmm::stream::create(0).value();
  poke_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  auto cache = pvmm::caching_allocator::create({}).value();
  // "big": a block over two chunks (its region in two pieces, each in its mapping's heap).
  const std::size_t asked = argc > 2 && std::string(argv[2]) == "big" ? (std::size_t{5} << 20) + 1000 : 1000;
  void* block = cache.allocate(asked, s).value();
  if (int rc = poke(reinterpret_cast<CUdeviceptr>(block), asked); rc != 0) return rc;  // one byte past the block
  std::printf("nvtx_overrun: wrote one byte at offset %zu of a %zu-byte block at %p, NVTX registration %s\n", asked,
              asked, block, on ? "on" : "off");
  (void)cache.deallocate(block, s);
  (void)unload(module);
  (void)cache.release();
  (void)s.release();
  (void)set_current(nullptr);
  (void)release(device);
  return 0;
}
