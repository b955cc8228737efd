// pvmm-bench traces: PyTorch's caching allocator through libc10 (traces_torch.hpp says why it is apart).
#include "traces_torch.hpp"

#include <c10/cuda/CUDACachingAllocator.h>

namespace bench::torch_side {
namespace alloc = c10::cuda::CUDACachingAllocator;

void init() {
  static const bool once = [] {
    alloc::init(1);
    return true;
  }();
  (void)once;
}
void* allocate(std::size_t size, void* cuda_stream) {
  try {
    return alloc::raw_alloc_with_stream(size, static_cast<cudaStream_t>(cuda_stream));
  } catch (...) {
    return nullptr;
  }
}
void deallocate(void* pointer) { alloc::raw_delete(pointer); }
std::uint64_t peak_reserved() { return static_cast<std::uint64_t>(alloc::getDeviceStats(0).reserved_bytes[0].peak); }
void reset_peak() { alloc::resetPeakStats(0); }
void empty_cache() { alloc::emptyCache(); }
}  // namespace bench::torch_side
