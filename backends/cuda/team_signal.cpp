// CUDA backend, feature "team_signal": one-thread launches of the embedded signal module's kernel
// (signal_kernels.cu). cuStreamWaitValue has no timeout, so waits are a kernel that reads %globaltimer.
#include <mutex>
#include <utility>
#include <vector>

#include "backend/team_signal.hpp"
#include "driver.hpp"

namespace pvmm::detail::backend {
using namespace pvmm::cuda;

namespace {
const char signal_ptx[] =
#include "signal_kernels_ptx.inc"
    ;

// The kernel loaded in each context that asked: a module lives as long as its context, so it is loaded once per
// context and never unloaded (global state, for that reason: loading costs a JIT of the PTX).
struct loaded_kernels {
  std::mutex lock;
  std::vector<std::pair<CUcontext, CUfunction>> by_context;
};
loaded_kernels& kernels() {
  static loaded_kernels k;
  return k;
}

result<CUfunction> kernel_of_current_context() {
  CUcontext context = nullptr;
  PVMM_CU(cuCtxGetCurrent, &context);
  loaded_kernels& k = kernels();
  const std::lock_guard<std::mutex> hold(k.lock);
  for (const auto& [c, f] : k.by_context)
    if (c == context) return f;
  CUmodule module = nullptr;
  PVMM_CU(cuModuleLoadData, &module, signal_ptx);
  CUfunction f = nullptr;
  PVMM_CU(cuModuleGetFunction, &f, module, "pvmm_signal_kernel");
  k.by_context.emplace_back(context, f);
  return f;
}
}  // namespace

const char* stream_signals_missing(int) noexcept {
  const auto& a = api();
  if (a.cuModuleLoadData == nullptr || a.cuModuleGetFunction == nullptr || a.cuLaunchKernel == nullptr)
    return "the CUDA driver lacks cuModuleLoadData / cuLaunchKernel";
  return nullptr;
}

status enqueue_signal(const signal_work& work, stream_handle s, int) {
  PVMM_REQUIRE_DRIVER();
  PVMM_TRY_ASSIGN(scope, context_scope::of_stream(native(s)));
  PVMM_TRY_ASSIGN(f, kernel_of_current_context());
  window_view view = work.view;
  unsigned op = static_cast<unsigned>(work.op);
  int peer = work.peer, channel = work.channel;
  unsigned long long timeout_ns = work.timeout_ns;
  void* params[] = {&view, &op, &peer, &channel, &timeout_ns};
  PVMM_CU(cuLaunchKernel, f, 1, 1, 1, 1, 1, 1, 0, native(s), params, nullptr);
  return {};
}

std::uint32_t wall_clock_khz(int) noexcept { return 0; }

}  // namespace pvmm::detail::backend
