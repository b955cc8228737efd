// pvmm/detail/device_primitives.hpp - what pvmm/team_device.hpp's calls are made of, one definition per compiler
// (nvcc, hipcc, a host compiler): system-scope atomics, the wait clock, the abort word's load, and the thread-group
// scopes' leader, synchronisation and vote. Not a public interface: include pvmm/team_device.hpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PVMM_HOST_DEVICE __host__ __device__
#else
#define PVMM_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define PVMM_DEVICE_CUDA 1
#elif defined(__HIP_DEVICE_COMPILE__)
#define PVMM_DEVICE_HIP 1
#else
#include <chrono>
#include <thread>
#endif

namespace pvmm {

struct thread_scope;
struct warp_scope;
struct block_scope;

namespace detail {
// System-scope atomics and clock, one definition per compiler.
PVMM_HOST_DEVICE inline std::uint64_t signal_load_acquire(const std::uint64_t* p) {
#if defined(PVMM_DEVICE_CUDA)
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#elif defined(PVMM_DEVICE_HIP)
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}
PVMM_HOST_DEVICE inline void signal_add_release(std::uint64_t* p, std::uint64_t value = 1) {
#if defined(PVMM_DEVICE_CUDA)
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(value) : "memory");
#elif defined(PVMM_DEVICE_HIP)
  __hip_atomic_fetch_add(p, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  __atomic_fetch_add(p, value, __ATOMIC_RELEASE);
#endif
}
PVMM_HOST_DEVICE inline void signal_store_release(std::uint64_t* p, std::uint64_t value) {
#if defined(PVMM_DEVICE_CUDA)
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(value) : "memory");
#elif defined(PVMM_DEVICE_HIP)
  __hip_atomic_store(p, value, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  __atomic_store_n(p, value, __ATOMIC_RELEASE);
#endif
}
/// Raises `*p` to `value` unless it already compares at or past it (wrap-safe, as the driver's GEQ stream wait:
/// the difference's sign), with acquire-release compare-and-swaps; returns what it held before. A peer's later
/// count is kept, and a value a peer wrote that is "behind" in the wrap-safe order (even one far above in unsigned
/// terms) is replaced. Gives up after 64 contended tries (the driver path repeats its releases).
PVMM_HOST_DEVICE inline std::uint64_t signal_raise(std::uint64_t* p, std::uint64_t value) {
  std::uint64_t old = signal_load_acquire(p);
  const std::uint64_t first = old;
  for (int tries = 0; tries < 64 && static_cast<std::int64_t>(old - value) < 0; ++tries) {
#if defined(PVMM_DEVICE_CUDA)
    std::uint64_t prev;
    asm volatile("atom.acq_rel.sys.global.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(prev)
                 : "l"(p), "l"(old), "l"(value)
                 : "memory");
    if (prev == old) break;
    old = prev;
#elif defined(PVMM_DEVICE_HIP)
    if (__hip_atomic_compare_exchange_strong(p, &old, value, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE,
                                             __HIP_MEMORY_SCOPE_SYSTEM))
      break;
#else
    if (__atomic_compare_exchange_n(p, &old, value, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) break;
#endif
  }
  return first;
}
/// A full system-scope fence (a wait's last look at its counter comes after its look at the abort words).
PVMM_HOST_DEVICE inline void fence_system() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
  __threadfence_system();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}
/// The host's abort word, read by a spinning wait: volatile, so each look reaches memory (pinned host memory on
/// the GPUs, written by the host thread that aborts).
PVMM_HOST_DEVICE inline std::uint32_t abort_word_load(const std::uint32_t* p) {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
  return *static_cast<const volatile std::uint32_t*>(p);
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}
PVMM_HOST_DEVICE inline std::uint64_t signal_clock_ns(std::uint32_t wall_clock_khz) {
#if defined(PVMM_DEVICE_CUDA)
  (void)wall_clock_khz;
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif defined(PVMM_DEVICE_HIP)
  return wall_clock64() * 1000000ull / (wall_clock_khz ? wall_clock_khz : 100000u);
#else
  (void)wall_clock_khz;
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#endif
}

/// A scope's leader, its synchronisation, and the group's result (every thread gets the leader's).
template <class Scope>
struct group;
template <>
struct group<thread_scope> {
  /// This thread's index in the group, and the group's size (for loops a group shares).
  PVMM_HOST_DEVICE static unsigned index() { return 0; }
  PVMM_HOST_DEVICE static unsigned count() { return 1; }
  PVMM_HOST_DEVICE static bool leader() { return true; }
  PVMM_HOST_DEVICE static void sync() {}
  PVMM_HOST_DEVICE static bool all(bool ok) { return ok; }
};
template <>
struct group<warp_scope> {
  PVMM_HOST_DEVICE static unsigned index() {
#if defined(PVMM_DEVICE_CUDA)
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
#elif defined(PVMM_DEVICE_HIP)
    return __lane_id();
#else
    return 0;
#endif
  }
  PVMM_HOST_DEVICE static unsigned count() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    return warpSize;
#else
    return 1;
#endif
  }
  PVMM_HOST_DEVICE static bool leader() {
#if defined(PVMM_DEVICE_CUDA)
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane == 0;
#elif defined(PVMM_DEVICE_HIP)
    return __lane_id() == 0;
#else
    return true;
#endif
  }
  PVMM_HOST_DEVICE static void sync() {
#if defined(PVMM_DEVICE_CUDA)
    __syncwarp();
#elif defined(PVMM_DEVICE_HIP)
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
  }
  PVMM_HOST_DEVICE static bool all(bool ok) {
#if defined(PVMM_DEVICE_CUDA)
    return __all_sync(0xffffffffu, ok) != 0;
#elif defined(PVMM_DEVICE_HIP)
    sync();
    return __all(ok) != 0;
#else
    return ok;
#endif
  }
};
template <>
struct group<block_scope> {
  PVMM_HOST_DEVICE static unsigned index() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
#else
    return 0;
#endif
  }
  PVMM_HOST_DEVICE static unsigned count() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    return blockDim.x * blockDim.y * blockDim.z;
#else
    return 1;
#endif
  }
  PVMM_HOST_DEVICE static bool leader() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
#else
    return true;
#endif
  }
  PVMM_HOST_DEVICE static void sync() {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    __syncthreads();
#endif
  }
  PVMM_HOST_DEVICE static bool all(bool ok) {
#if defined(PVMM_DEVICE_CUDA) || defined(PVMM_DEVICE_HIP)
    return __syncthreads_and(ok) != 0;
#else
    return ok;
#endif
  }
};
}  // namespace detail
}  // namespace pvmm
