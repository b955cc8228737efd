// HIP backend, feature "stream": hipStream*, hipEvent*, hipLaunchHostFunc, hipMemcpyAsync (on the stream's device).
#include "backend/stream.hpp"
#include "runtime.hpp"

namespace pvmm::detail::backend {
using namespace hip;

namespace {
/// A stream or event: created on `device` (HIP creates both on the current device) by `create` (named `call`).
template <class Handle, class Native>
result<Handle> create_on(int device, hipError_t (*create)(Native*, unsigned), unsigned flags, const char* call) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> result<Handle> {
    Native made = nullptr;
    if (hipError_t rc = create(&made, flags); rc != hipSuccess) return failure(rc, call);
    return handle_of<Handle>(made);
  });
}
/// A stream's or event's query answer: true once its work is done, false while it is pending, else the failure.
result<bool> completion(hipError_t rc, const char* call) {
  if (rc == hipSuccess) return true;
  if (rc == hipErrorNotReady) {
    forget_last_error();  // an answer, not a failure (some runtimes record it)
    return false;
  }
  return failure(rc, call);
}
}  // namespace

result<stream_handle> create_stream(int device) {
  return create_on<stream_handle>(device, hipStreamCreateWithFlags, hipStreamNonBlocking, "hipStreamCreateWithFlags");
}

status destroy_stream(stream_handle s) { return PVMM_HIP_STATUS(hipStreamDestroy, native(s)); }

status synchronize_stream(stream_handle s, int) { return PVMM_HIP_STATUS(hipStreamSynchronize, native(s)); }

result<bool> query_stream(stream_handle s, int) {
  PVMM_REQUIRE_RUNTIME();
  return completion(hipStreamQuery(native(s)), "hipStreamQuery");
}

status wait_event(stream_handle s, int, event_handle e) {
  return PVMM_HIP_STATUS(hipStreamWaitEvent, native(s), native(e), 0);
}

namespace {
#if defined(__HIP_PLATFORM_NVIDIA__)
// HIP's NVIDIA platform declares hipStreamIsCapturing for nvcc only: the CUDA runtime's call it forwards to.
hipError_t stream_is_capturing(hipStream_t s, bool* capturing) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const hipError_t rc = hipCUDAErrorTohipError(cudaStreamIsCapturing(s, &capture));
  *capturing = capture != cudaStreamCaptureStatusNone;
  return rc;
}
#else
hipError_t stream_is_capturing(hipStream_t s, bool* capturing) {
  hipStreamCaptureStatus capture = hipStreamCaptureStatusNone;
  const hipError_t rc = hipStreamIsCapturing(s, &capture);
  *capturing = capture != hipStreamCaptureStatusNone;
  return rc;
}
#endif
}  // namespace

result<bool> stream_capturing(stream_handle s, int) {
  PVMM_REQUIRE_RUNTIME();
  bool capturing = false;
  PVMM_HIP(stream_is_capturing, native(s), &capturing);
  return capturing;
}

status launch_host_function(stream_handle s, int, void (*fn)(void*), void* data) {
  PVMM_REQUIRE_RUNTIME();
  // A stream callback runs it: hipLaunchHostFunc is declared for nvcc only on HIP's NVIDIA platform, and ROCm 5.2's
  // library does not export it; hipStreamAddCallback exists everywhere.
  struct call {
    void (*fn)(void*);
    void* data;
  };
  auto* c = new call{fn, data};
  auto trampoline = [](hipStream_t, hipError_t, void* p) {
    auto* me = static_cast<call*>(p);
    me->fn(me->data);
    delete me;
  };
  if (hipError_t rc = hipStreamAddCallback(native(s), trampoline, c, 0); rc != hipSuccess) {
    delete c;
    return failure(rc, "hipStreamAddCallback");
  }
  return {};
}

status copy_async(void* destination, const void* source, std::size_t size, stream_handle s, int device, source_read) {
  PVMM_REQUIRE_RUNTIME();
  return on_device(device, [&]() -> status {
    PVMM_HIP(hipMemcpyAsync, destination, source, size, hipMemcpyDefault, native(s));
    return {};
  });
}

result<event_handle> create_event(int device) {
  return create_on<event_handle>(device, hipEventCreateWithFlags, hipEventDisableTiming, "hipEventCreateWithFlags");
}

status destroy_event(event_handle e) { return PVMM_HIP_STATUS(hipEventDestroy, native(e)); }

status record_event(event_handle e, stream_handle s, int) {
  return PVMM_HIP_STATUS(hipEventRecord, native(e), native(s));
}

status synchronize_event(event_handle e) { return PVMM_HIP_STATUS(hipEventSynchronize, native(e)); }

result<bool> query_event(event_handle e) {
  PVMM_REQUIRE_RUNTIME();
  return completion(hipEventQuery(native(e)), "hipEventQuery");
}

}  // namespace pvmm::detail::backend
