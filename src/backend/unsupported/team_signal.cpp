// Feature "team_signal" for a backend without stream-ordered signal kernels: the hip backend on AMD. pvmm's signal
// module is PTX (src/backend/signal_kernels.cu), which only NVIDIA's driver loads; AMD would need a code object per
// GPU architecture (gfx target), built with hipcc for each, which pvmm does not build yet. pvmm/team_device.hpp's
// device functions compile under hipcc for users' own kernels.
#include "backend/team_signal.hpp"

namespace pvmm::detail::backend {

const char* stream_signals_missing(int) noexcept {
  return "this backend has no stream-ordered signal kernels: pvmm's signal module is PTX, and AMD GPUs would need a "
         "code object per gfx target, which pvmm does not build yet; call pvmm/team_device.hpp's functions from a "
         "kernel of your own (window.view())";
}

const char* same_context_waits_missing(int) noexcept { return stream_signals_missing(0); }

status enqueue_signal(const signal_work&, stream_handle, int) {
  return make_error(errc::not_supported, stream_signals_missing(0));
}

const char* stream_memops_missing(int) noexcept { return stream_signals_missing(0); }

status enqueue_stream_write(std::uint64_t*, std::uint64_t, stream_handle, int, bool) {
  return make_error(errc::not_supported, stream_signals_missing(0));
}

status enqueue_stream_wait(const std::uint64_t*, std::uint64_t, stream_handle, int) {
  return make_error(errc::not_supported, stream_signals_missing(0));
}

status enqueue_release(const signal_work&, int) { return make_error(errc::not_supported, stream_signals_missing(0)); }

status finish_releases(int) { return {}; }

status prepare_releases(int) { return make_error(errc::not_supported, stream_signals_missing(0)); }

std::uint32_t wall_clock_khz(int) noexcept { return 0; }

}  // namespace pvmm::detail::backend
