// pvmm-bench traces: PyTorch's caching allocator (libc10), behind an interface that passes no standard library
// type, so that traces_torch.cpp can be compiled with the C++ ABI torch was built with (tools/CMakeLists.txt finds
// it) while the rest of the bench keeps pvmm's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bench::torch_side {
void init();                                          ///< once per process
void* allocate(std::size_t size, void* cuda_stream);  ///< null where torch refused (its exception stays inside)
void deallocate(void* pointer);                       ///< in the order of the stream it was allocated on
std::uint64_t peak_reserved();                        ///< device 0, since reset_peak
void reset_peak();
void empty_cache();
}  // namespace bench::torch_side
