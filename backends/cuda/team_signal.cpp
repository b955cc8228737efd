// CUDA backend, feature "team_signal": one-thread launches of the embedded signal module's kernel
// (src/backend/signal_module.hpp), whose waits read %globaltimer, and the driver path's cuStreamWriteValue64 /
// cuStreamWaitValue64 (no timeout of their own: src/team/stream_waits.cpp releases them at their deadline).
#include "backend/team_signal.hpp"
#include "backend/signal_module.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
const char signal_ptx[] =
#include "signal_kernels_ptx.inc"
    ;

result<CUfunction> kernel_of_current_context() {
  CUcontext context = nullptr;
  PVMM_CU(cuCtxGetCurrent, &context);
  return signal_kernel_in<CUcontext, CUfunction>(context, []() -> result<CUfunction> {
    CUmodule module = nullptr;
    PVMM_CU(cuModuleLoadData, &module, signal_ptx);
    CUfunction f = nullptr;
    PVMM_CU(cuModuleGetFunction, &f, module, signal_kernel_name);
    return f;
  });
}
}  // namespace

const char* stream_signals_missing(int) noexcept {
  const auto& a = api();
  if (a.cuModuleLoadData == nullptr || a.cuModuleGetFunction == nullptr || a.cuLaunchKernel == nullptr)
    return "the CUDA driver lacks cuModuleLoadData / cuLaunchKernel";
  return nullptr;
}

const char* same_context_waits_missing(int) noexcept { return same_context_waits_reason; }

status enqueue_signal(const signal_work& work, stream_handle s, int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_TRY_ASSIGN(f, kernel_of_current_context());
  signal_kernel_arguments arguments(work);
  PVMM_CU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, native(s), arguments.params(), nullptr);
  keep_until_run(work, s, device);
  return {};
}

const char* stream_memops_missing(int ordinal) noexcept {
  if (const char* missing = stream_signals_missing(ordinal)) return missing;
  const auto& a = api();
  if (a.cuStreamWriteValue64 == nullptr || a.cuStreamWaitValue64 == nullptr)
    return "the CUDA driver lacks cuStreamWriteValue64 / cuStreamWaitValue64 (CUDA 12.0)";
  const auto has = has_attribute(ordinal, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
  if (!has || !*has) return "this device does not take 64-bit stream memory operations";
  return nullptr;
}

status enqueue_stream_write(std::uint64_t* at, std::uint64_t value, stream_handle s, int, bool fenced) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuStreamWriteValue64, native(s), reinterpret_cast<CUdeviceptr>(at), value,
          fenced ? CU_STREAM_WRITE_VALUE_DEFAULT : CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
  return {};
}

status enqueue_stream_wait(const std::uint64_t* at, std::uint64_t value, stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuStreamWaitValue64, native(s), reinterpret_cast<CUdeviceptr>(at), value, CU_STREAM_WAIT_VALUE_GEQ);
  return {};
}

namespace {
using lane = release_lane<CUcontext, CUstream, CUfunction>;

// The lane's context (cuCtxCreate leaves it current on this thread: popped before returning), a non-blocking stream
// and the kernel in it.
result<lane> make_lane(int ordinal) {
  if (api().cuCtxCreate_v2 == nullptr || api().cuCtxDestroy == nullptr)
    return make_error(errc::not_supported, "the CUDA driver lacks cuCtxCreate / cuCtxDestroy");
  PVMM_TRY_ASSIGN(dev, device_of(ordinal));
  lane l;
  PVMM_CU(cuCtxCreate_v2, &l.context, 0, dev);
  CUcontext popped = nullptr;
  (void)api().cuCtxPopCurrent(&popped);  // cuCtxCreate made it current here
  auto made = [&]() -> result<lane> {
    PVMM_TRY_ASSIGN(scope, context_scope::of_context(l.context));
    PVMM_CU(cuStreamCreate, &l.stream, CU_STREAM_NON_BLOCKING);
    PVMM_TRY_ASSIGN(f, kernel_of_current_context());
    l.kernel = f;
    // One launch that does nothing (an operation the kernel does not know), so the context's first launch, and
    // whatever the driver opens for it, comes now and not with the first release.
    signal_work idle;
    idle.op = static_cast<signal_op>(0xff);
    signal_kernel_arguments arguments(idle);
    PVMM_CU(cuLaunchKernel, l.kernel, 1, 1, 1, 1, 1, 1, 0, l.stream, arguments.params(), nullptr);
    PVMM_CU(cuStreamSynchronize, l.stream);
    return l;
  }();
  if (!made) (void)api().cuCtxDestroy(l.context);  // with its stream and module: nothing of it is kept
  return made;
}

// The device's lane, made the first time (prepare_releases, with the first driver-path window).
result<lane> lane_of(int device) {
  return release_lane_of<lane>(device, [&] { return make_lane(device); });
}
}  // namespace

status enqueue_release(const signal_work& work, int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(l, lane_of(device));
  PVMM_TRY_ASSIGN(scope, context_scope::of_context(l.context));
  signal_kernel_arguments arguments(work);
  PVMM_CU(cuLaunchKernel, l.kernel, 1, 1, 1, 1, 1, 1, 0, l.stream, arguments.params(), nullptr);
  return {};
}

status prepare_releases(int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY(lane_of(device));
  return {};
}

status finish_releases(int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(l, lane_of(device));
  PVMM_TRY_ASSIGN(scope, context_scope::of_context(l.context));
  PVMM_CU(cuStreamSynchronize, l.stream);
  return {};
}

std::uint32_t wall_clock_khz(int) noexcept { return 0; }

}  // namespace pvmm::detail::backend
