// The signal module: one kernel running pvmm/team_device.hpp's functions, compiled to PTX at build time (nvcc -ptx,
// cmake: pvmm_embed_signal_module) and embedded in libpvmm_cuda and in libpvmm_hip on HIP's NVIDIA platform, which
// load it with cuModuleLoadData / hipModuleLoadData: the libraries stay driver-only and the driver JITs the PTX for
// whatever GPU it finds. Its parameters are signal_kernel_arguments' (signal_module.hpp), in this order.
#include <pvmm/team_device.hpp>

extern "C" __global__ void pvmm_signal_kernel(pvmm::window_view view, unsigned op, int peer, int channel,
                                              unsigned long long timeout_ns, unsigned long long value,
                                              unsigned aborted_by) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  // team_device.hpp's one dispatch (the host backend runs the same); an expiry is in the error record
  (void)pvmm::detail::run_signal_op(view, static_cast<pvmm::detail::signal_op>(op), peer, channel, timeout_ns, value,
                                    aborted_by);
  __threadfence_system();  // what the stream runs next sees what the wait acquired
}
