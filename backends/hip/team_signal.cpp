// HIP backend on HIP's NVIDIA platform, feature "team_signal": one-thread launches of the embedded signal module's
// kernel (src/backend/signal_module.hpp: the PTX the cuda backend loads), through hipModuleLoadData /
// hipModuleGetFunction / hipModuleLaunchKernel, which forward to cuModule* / cuLaunchKernel there. On AMD the
// backend links src/backend/unsupported/team_signal.cpp instead (a code object per gfx target would be needed).
#if !defined(__HIP_PLATFORM_NVIDIA__)
#error "backends/hip/team_signal.cpp is for HIP's NVIDIA platform; AMD builds link the unsupported team_signal"
#endif
#include "backend/team_signal.hpp"
#include "backend/signal_module.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

namespace {
const char signal_ptx[] =
#include "signal_kernels_ptx.inc"
    ;

result<hipFunction_t> kernel_of_current_context() {
  hipCtx_t context = nullptr;
  PVMM_HIP(hipCtxGetCurrent, &context);
  return signal_kernel_in<hipCtx_t, hipFunction_t>(context, []() -> result<hipFunction_t> {
    hipModule_t module = nullptr;
    PVMM_HIP(hipModuleLoadData, &module, signal_ptx);
    hipFunction_t f = nullptr;
    PVMM_HIP(hipModuleGetFunction, &f, module, signal_kernel_name);
    return f;
  });
}
}  // namespace

const char* stream_signals_missing(int) noexcept { return nullptr; }

const char* same_context_waits_missing(int) noexcept { return same_context_waits_reason; }

status enqueue_signal(const signal_work& work, stream_handle s, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> status {
    // Makes the device's primary context current: on a thread that never used the runtime, hipGetDevice already
    // answers 0 (so on_device sets nothing) while no context is current, and the module load needs one (the cuda
    // backend enters the stream's context instead).
    PVMM_HIP(hipSetDevice, device);
    PVMM_TRY_ASSIGN(f, kernel_of_current_context());
    signal_kernel_arguments arguments(work);
    PVMM_HIP(hipModuleLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, native(s), arguments.params(), nullptr);
    keep_until_run(work, s, device);
    return {};
  });
}

// The driver path's stream memory operations. HIP's NVIDIA headers declare hipStreamWriteValue64 /
// hipStreamWaitValue64 for nvcc only (as hipLaunchHostFunc), so the backend calls the driver entry points they forward
// to (hipStream_t is CUstream there). hipDeviceAttributeCanUseStreamWaitValue reads CUDA's deprecated v1 attribute (0
// on CUDA 13, where the operations work): every device CUDA 12 supports takes them.
namespace {
hipError_t stream_write_value64(hipStream_t s, std::uint64_t* at, std::uint64_t value, bool fenced) {
  return hipCUResultTohipError(
      cuStreamWriteValue64(s, reinterpret_cast<CUdeviceptr>(at), value,
                           fenced ? CU_STREAM_WRITE_VALUE_DEFAULT : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
}
hipError_t stream_wait_value64(hipStream_t s, const std::uint64_t* at, std::uint64_t value) {
  return hipCUResultTohipError(
      cuStreamWaitValue64(s, reinterpret_cast<CUdeviceptr>(at), value, CU_STREAM_WAIT_VALUE_GEQ));
}
}  // namespace

const char* stream_memops_missing(int) noexcept { return nullptr; }

status enqueue_stream_write(std::uint64_t* at, std::uint64_t value, stream_handle s, int device, bool fenced) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> status {
    PVMM_HIP(stream_write_value64, native(s), at, value, fenced);
    return {};
  });
}

status enqueue_stream_wait(const std::uint64_t* at, std::uint64_t value, stream_handle s, int device) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> status {
    PVMM_HIP(stream_wait_value64, native(s), at, value);
    return {};
  });
}

namespace {
using lane = release_lane<CUcontext, hipStream_t, hipFunction_t>;

hipError_t create_context(CUcontext* out, int ordinal) {
  CUdevice dev = 0;
  if (CUresult rc = cuDeviceGet(&dev, ordinal); rc != CUDA_SUCCESS) return hipCUResultTohipError(rc);
#if CUDA_VERSION >= 13000
  return hipCUResultTohipError(cuCtxCreate(out, nullptr, 0, dev));
#else
  return hipCUResultTohipError(cuCtxCreate(out, 0, dev));
#endif
}
hipError_t push_context(CUcontext c) { return hipCUResultTohipError(cuCtxPushCurrent(c)); }
hipError_t pop_context() {
  CUcontext popped = nullptr;
  return hipCUResultTohipError(cuCtxPopCurrent(&popped));
}
hipError_t synchronize_in(CUcontext c, hipStream_t s) {
  if (CUresult rc = cuCtxPushCurrent(c); rc != CUDA_SUCCESS) return hipCUResultTohipError(rc);
  const hipError_t rc = hipStreamSynchronize(s);
  (void)pop_context();
  return rc;
}

// The lane's context (the driver's cuCtxCreate, which HIP forwards to and leaves current: kept current while the
// stream and module are made in it, then popped), a non-blocking stream and the kernel in it.
result<lane> make_lane(int ordinal) {
  lane l;
  PVMM_HIP(create_context, &l.context, ordinal);
  auto made = [&]() -> result<lane> {
    PVMM_HIP(hipStreamCreateWithFlags, &l.stream, hipStreamNonBlocking);
    hipModule_t module = nullptr;
    PVMM_HIP(hipModuleLoadData, &module, signal_ptx);
    PVMM_HIP(hipModuleGetFunction, &l.kernel, module, signal_kernel_name);
    // One launch that does nothing, so the context's first launch comes now, not with the first release.
    signal_work idle;
    idle.op = static_cast<signal_op>(0xff);
    signal_kernel_arguments arguments(idle);
    PVMM_HIP(hipModuleLaunchKernel, l.kernel, 1, 1, 1, 1, 1, 1, 0, l.stream, arguments.params(), nullptr);
    PVMM_HIP(hipStreamSynchronize, l.stream);
    return l;
  }();
  (void)pop_context();
  if (!made) (void)cuCtxDestroy(l.context);  // with its stream and module: nothing of it is kept
  return made;
}

// The device's lane, made the first time (prepare_releases, with the first driver-path window).
result<lane> lane_of(int device) {
  return release_lane_of<lane>(device, [&] { return make_lane(device); });
}
}  // namespace

status enqueue_release(const signal_work& work, int device) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_TRY_ASSIGN(l, lane_of(device));
  PVMM_HIP(push_context, l.context);
  signal_kernel_arguments arguments(work);
  const hipError_t rc = hipModuleLaunchKernel(l.kernel, 1, 1, 1, 1, 1, 1, 0, l.stream, arguments.params(), nullptr);
  (void)pop_context();
  if (rc != hipSuccess) return failure(rc, "hipModuleLaunchKernel");
  return {};
}

status prepare_releases(int device) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_TRY(lane_of(device));
  return {};
}

status finish_releases(int device) {
  PVMM_REQUIRE_RUNTIME();
  PVMM_TRY_ASSIGN(l, lane_of(device));
  PVMM_HIP(synchronize_in, l.context, l.stream);
  return {};
}

std::uint32_t wall_clock_khz(int) noexcept { return 0; }  // %globaltimer counts nanoseconds

}  // namespace pvmm::detail::backend
