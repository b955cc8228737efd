// CUDA backend, feature "stream": cuStream*, cuEvent*, cuLaunchHostFunc, cuMemcpyAsync. Streams and events pvmm
// creates live in the device's primary context; work on any stream runs with that stream's own context current,
// and the caller's is current again afterwards.
#include "backend/stream.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
/// A stream's or event's query answer: true once its work is done, false while it is pending, else the failure.
result<bool> completion(CUresult rc, const char* call) {
  if (rc == CUDA_SUCCESS) return true;
  if (rc == CUDA_ERROR_NOT_READY) return false;
  return failure(rc, call);
}
}  // namespace

result<stream_handle> create_stream(int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(device));
  CUstream s = nullptr;
  PVMM_CU(cuStreamCreate, &s, CU_STREAM_NON_BLOCKING);  // never ordered with the legacy default stream
  return stream_handle{static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(s))};
}

status destroy_stream(stream_handle s) { return PVMM_CU_STATUS(cuStreamDestroy, native(s)); }

status synchronize_stream(stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuStreamSynchronize, native(s));
  return {};
}

result<bool> query_stream(stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  return completion(api().cuStreamQuery(native(s)), "cuStreamQuery");
}

status wait_event(stream_handle s, int, event_handle e) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuStreamWaitEvent, native(s), native(e), 0);
  return {};
}

status launch_host_function(stream_handle s, int, void (*fn)(void*), void* data) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuLaunchHostFunc, native(s), fn, data);
  return {};
}

result<bool> stream_capturing(stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  if (api().cuStreamIsCapturing == nullptr) return false;
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  PVMM_CU(cuStreamIsCapturing, native(s), &capture);
  return capture != CU_STREAM_CAPTURE_STATUS_NONE;
}

status copy_async(void* destination, const void* source, std::size_t size, stream_handle s, int, source_read) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuMemcpyAsync, ptr(destination), ptr(source), size, native(s));  // the driver stages pageable sources
  return {};
}

result<event_handle> create_event(int device) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::primary(device));
  CUevent e = nullptr;
  PVMM_CU(cuEventCreate, &e, CU_EVENT_DISABLE_TIMING);
  return event_handle{static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(e))};
}

status destroy_event(event_handle e) { return PVMM_CU_STATUS(cuEventDestroy, native(e)); }

status record_event(event_handle e, stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_CU(cuEventRecord, native(e), native(s));
  return {};
}

status synchronize_event(event_handle e) { return PVMM_CU_STATUS(cuEventSynchronize, native(e)); }

result<bool> query_event(event_handle e) {
  PVMM_REQUIRE_DRIVER();
  return completion(api().cuEventQuery(native(e)), "cuEventQuery");
}

}  // namespace pvmm::detail::backend
