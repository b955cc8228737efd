// The planted one-byte overrun (pvmm::register_with_nvtx, issue 50 item 4): a kernel writes one byte past a
// 1000-byte caching-allocator block. The block is 1024 bytes (512-byte rounding) inside a mapped chunk, so without
// NVTX registration no tool can see the overrun; with it, compute-sanitizer's memcheck must report it:
//   compute-sanitizer --tool memcheck --error-exitcode 9 pvmm_cuda_nvtx_overrun on    -> exit 9, "Invalid __global__
//                                                                                        write of size 1"
//   compute-sanitizer --tool memcheck --error-exitcode 9 pvmm_cuda_nvtx_overrun off   -> exit 0
//   (a second argument "big": the block spans two 4 MiB chunks, the region two mappings)
// (tools/gpu-nvtx-check.sh runs both). Without a tool it runs anywhere a CUDA driver is, writes the byte and exits
// 0; where there is none it prints [pvmm-skip] (a CTest case skipped).
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <cuda.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/snapshot.hpp>

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

template <class F>
F load(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

int fail(const char* what, CUresult r) {
  std::fprintf(stderr, "nvtx_overrun: %s failed (CUresult %d)\n", what, static_cast<int>(r));
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  const bool on = argc > 1 && std::string(argv[1]) == "on";
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
  auto launch = load<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**)>(lib, "cuLaunchKernel");
  auto synchronize = load<CUresult (*)(CUstream)>(lib, "cuStreamSynchronize");
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cu_init == nullptr || cu_init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
      pvmm::device_count().value_or(0) < 1) {
    std::printf("[pvmm-skip] nvtx_overrun: no usable CUDA device\n");
    return 0;
  }
  if (auto r = retain(&context, device); r != CUDA_SUCCESS) return fail("cuDevicePrimaryCtxRetain", r);
  if (auto r = set_current(context); r != CUDA_SUCCESS) return fail("cuCtxSetCurrent", r);  // NVTX after CUDA init

  if (auto ok = pvmm::register_with_nvtx(on); !ok) {
    std::fprintf(stderr, "%s\n", ok.error().message().c_str());
    return 1;
  }
  auto s = pvmm::stream::create(0).value();
  auto cache = pvmm::caching_allocator::create({}).value();
  // "big": a block over two chunks (a region of several mappings registered as one heap).
  const std::size_t asked = argc > 2 && std::string(argv[2]) == "big" ? (std::size_t{5} << 20) + 1000 : 1000;
  void* block = cache.allocate(asked, s).value();
  CUmodule module = nullptr;
  CUfunction poke = nullptr;
  if (auto r = load_data(&module, poke_ptx); r != CUDA_SUCCESS) return fail("cuModuleLoadData", r);
  if (auto r = get_function(&poke, module, "poke"); r != CUDA_SUCCESS) return fail("cuModuleGetFunction", r);
  auto native = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(block);
  unsigned long long offset = asked;  // one byte past what was asked for
  void* params[] = {&p, &offset};
  if (auto r = launch(poke, 1, 1, 1, 1, 1, 1, 0, native, params, nullptr); r != CUDA_SUCCESS)
    return fail("cuLaunchKernel", r);
  if (auto r = synchronize(native); r != CUDA_SUCCESS) return fail("cuStreamSynchronize", r);
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
