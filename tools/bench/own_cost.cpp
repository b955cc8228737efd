// pvmm-own-cost: what pvmm itself adds to each driver call, measured against a null CUDA driver.
//
// The CUDA backend's driver table is swapped (install_driver_api) for entries that return at once, counting
// their calls. Each row times pvmm's operation and the same driver calls made straight through that table, in
// interleaved rounds, and prints the nanoseconds pvmm adds (median of per-round differences, with the IQR)
// and the driver calls each operation made. No GPU is needed, and no GPU timing noise hides a few nanoseconds:
// this is the number the "at most 30 ns added" target is about (pvmm-bench measures the same operations
// against the real driver, where these nanoseconds sit inside the driver's own time).
// Usage: pvmm-own-cost [operations per round] [only the rows whose name contains this]
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"
#include "driver_api.hpp"

namespace {

// ---- the null driver ---------------------------------------------------------------------------------------

enum entry_id : int {
#define PVMM_NULL_ID(name, version) id_##name,
  PVMM_CUDA_ENTRY_POINTS(PVMM_NULL_ID)
#undef PVMM_NULL_ID
      entry_count
};
const char* const entry_names[] = {
#define PVMM_NULL_NAME(name, version) #name,
    PVMM_CUDA_ENTRY_POINTS(PVMM_NULL_NAME)
#undef PVMM_NULL_NAME
};

// Written from the measuring thread only; read after. Relaxed: counting must cost next to nothing.
std::array<std::uint64_t, entry_count> calls{};
std::array<std::uint64_t, entry_count> timed_calls{};  // the calls made in the last timed part

template <class T>
void zero_output(T* p) {
  // Scalars, enums and pointers only: a pointer to an opaque handle struct is an input.
  if constexpr (!std::is_const_v<T> && (std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_pointer_v<T>))
    if (p) *p = T{};
}
template <class T>
void zero_output(T) {}

/// The default entry: counts the call, zeroes every output argument, succeeds.
template <int Id, class F>
struct null_entry;
template <int Id, class... A>
struct null_entry<Id, CUresult (*)(A...)> {
  static CUresult call(A... a) {
    ++calls[Id];
    (zero_output(a), ...);
    return CUDA_SUCCESS;
  }
};

std::uintptr_t next_address = std::uintptr_t{1} << 40;  // fake, never dereferenced
std::uintptr_t bump(std::size_t size) {
  const std::uintptr_t p = next_address;
  next_address += (size + (std::size_t{2} << 20) - 1) & ~((std::size_t{2} << 20) - 1);
  return p;
}
CUmemGenericAllocationHandle next_handle = 1;

pvmm::cuda::driver_api null_driver() {
  pvmm::cuda::driver_api t;
#define PVMM_NULL_SET(name, version) t.name = &null_entry<id_##name, decltype(&::name)>::call;
  PVMM_CUDA_ENTRY_POINTS(PVMM_NULL_SET)
#undef PVMM_NULL_SET
  t.cuDriverGetVersion = [](int* v) { return ++calls[id_cuDriverGetVersion], *v = 13000, CUDA_SUCCESS; };
  t.cuGetErrorName = [](CUresult, const char** s) { return *s = "CUDA_ERROR_NULL", CUDA_SUCCESS; };
  t.cuGetErrorString = [](CUresult, const char** s) { return *s = "null driver", CUDA_SUCCESS; };
  t.cuDeviceGet = [](CUdevice* d, int ordinal) { return ++calls[id_cuDeviceGet], *d = ordinal, CUDA_SUCCESS; };
  t.cuDeviceGetCount = [](int* n) { return ++calls[id_cuDeviceGetCount], *n = 1, CUDA_SUCCESS; };
  t.cuDeviceGetName = [](char* name, int length, CUdevice) {
    std::snprintf(name, static_cast<std::size_t>(length), "null driver device");
    return CUDA_SUCCESS;
  };
  t.cuDeviceGetAttribute = [](int* v, CUdevice_attribute, CUdevice) {
    return ++calls[id_cuDeviceGetAttribute], *v = 1, CUDA_SUCCESS;  // every feature present
  };
  t.cuDeviceTotalMem = [](std::size_t* b, CUdevice) { return *b = std::size_t{80} << 30, CUDA_SUCCESS; };
  t.cuMemGetInfo = [](std::size_t* f, std::size_t* b) { return *f = *b = std::size_t{80} << 30, CUDA_SUCCESS; };
  t.cuMemGetAllocationGranularity = [](std::size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
    return ++calls[id_cuMemGetAllocationGranularity], *g = std::size_t{2} << 20, CUDA_SUCCESS;
  };
  t.cuDevicePrimaryCtxRetain = [](CUcontext* c, CUdevice) {
    return *c = reinterpret_cast<CUcontext>(std::uintptr_t{0x100}), CUDA_SUCCESS;
  };
  t.cuCtxGetCurrent = [](CUcontext* c) {
    return ++calls[id_cuCtxGetCurrent], *c = reinterpret_cast<CUcontext>(std::uintptr_t{0x100}), CUDA_SUCCESS;
  };
  t.cuCtxPopCurrent = [](CUcontext* c) {
    return ++calls[id_cuCtxPopCurrent], *c = reinterpret_cast<CUcontext>(std::uintptr_t{0x100}), CUDA_SUCCESS;
  };
  t.cuStreamCreate = [](CUstream* s, unsigned) {
    return *s = reinterpret_cast<CUstream>(std::uintptr_t{0x200}), CUDA_SUCCESS;
  };
  t.cuStreamGetCtx = [](CUstream, CUcontext* c) {
    return ++calls[id_cuStreamGetCtx], *c = reinterpret_cast<CUcontext>(std::uintptr_t{0x100}), CUDA_SUCCESS;
  };
  t.cuMemPoolCreate = [](CUmemoryPool* p, const CUmemPoolProps*) {
    return *p = reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x300}), CUDA_SUCCESS;
  };
  t.cuMemAllocFromPoolAsync = [](CUdeviceptr* p, std::size_t size, CUmemoryPool, CUstream) {
    return ++calls[id_cuMemAllocFromPoolAsync], *p = bump(size), CUDA_SUCCESS;
  };
  t.cuMemAddressReserve = [](CUdeviceptr* p, std::size_t size, std::size_t, CUdeviceptr, unsigned long long) {
    return ++calls[id_cuMemAddressReserve], *p = bump(size), CUDA_SUCCESS;
  };
  t.cuMemCreate = [](CUmemGenericAllocationHandle* h, std::size_t, const CUmemAllocationProp*, unsigned long long) {
    return ++calls[id_cuMemCreate], *h = next_handle++, CUDA_SUCCESS;
  };
  t.cuMemHostAlloc = [](void** p, std::size_t size, unsigned) {
    return ++calls[id_cuMemHostAlloc], *p = reinterpret_cast<void*>(bump(size)), CUDA_SUCCESS;
  };
  t.cuMemHostGetDevicePointer = [](CUdeviceptr* d, void* p, unsigned) {
    return ++calls[id_cuMemHostGetDevicePointer], *d = reinterpret_cast<CUdeviceptr>(p), CUDA_SUCCESS;
  };
  t.cuMulticastCreate = nullptr;  // never, not even against a null driver
  return t;
}

// ---- measuring ---------------------------------------------------------------------------------------------

using bench::clock_type;
using bench::quantile;
double ns_since(clock_type::time_point t) { return bench::seconds_since(t) * 1e9; }

/// One operation measured: `pvmm_op(n)` and `raw_op(n)` each do n operations and return the nanoseconds the
/// timed part took (set-up and teardown outside the clock).
struct measured {
  std::string name;
  std::function<double(int)> pvmm_op, raw_op;
};

// 64 live objects per round, as pvmm-bench's overhead rounds hold; many short rounds keep the median steady.
int per_round = 64;
const int rounds = 101;

void report(const measured& m) {
  std::mt19937 order(7);
  std::vector<double> added, pv, rv;
  (void)m.pvmm_op(per_round), (void)m.raw_op(per_round);  // warm-up
  (void)m.pvmm_op(1);
  std::string driver_calls;
  for (int i = 0; i < entry_count; ++i)
    if (timed_calls[i] != 0)
      driver_calls += fmt::format("{}{}{}", driver_calls.empty() ? "" : " ", entry_names[i],
                                  timed_calls[i] > 1 ? fmt::format("x{}", timed_calls[i]) : "");
  for (int r = 0; r < rounds; ++r) {
    double a, b;
    if (order() & 1)
      a = m.pvmm_op(per_round), b = m.raw_op(per_round);
    else
      b = m.raw_op(per_round), a = m.pvmm_op(per_round);
    pv.push_back(a / per_round), rv.push_back(b / per_round), added.push_back((a - b) / per_round);
  }
  fmt::print("  {:<26} {:>9.1f} {:>9.1f} {:>9.1f}  [{:>6.1f} {:>6.1f}]  {}\n", m.name, quantile(pv, 0.5),
             quantile(rv, 0.5), quantile(added, 0.5), quantile(added, 0.25), quantile(added, 0.75),
             driver_calls.empty() ? "(none)" : driver_calls);
}

/// One operation measured with cold caches: before every single call, untimed, `evict` streams through more
/// memory than the core's L2 holds, as a real driver call's own work does between two pvmm calls. Each side's
/// `setup(n)` and `teardown()` run untimed around the n timed `op(i)` calls.
struct measured_cold {
  std::string name;
  std::function<void(int)> pvmm_setup;
  std::function<void(int)> pvmm_op;
  std::function<void()> pvmm_teardown;
  std::function<void(int)> raw_setup;
  std::function<void(int)> raw_op;
  std::function<void()> raw_teardown;
};

std::vector<unsigned char> evict_buffer(std::size_t{8} << 20);  // above the L2 of every host measured
void evict() {
  for (std::size_t i = 0; i < evict_buffer.size(); i += 64)
    evict_buffer[i] = static_cast<unsigned char>(evict_buffer[i] + 1);
}

void report_cold(const measured_cold& m) {
  const int n = 64, cold_rounds = 31;
  auto side = [n](const std::function<void(int)>& setup, const std::function<void(int)>& op,
                  const std::function<void()>& teardown) {
    setup(n);
    double ns = 0;
    for (int i = 0; i < n; ++i) {
      evict();
      auto t0 = clock_type::now();
      op(i);
      ns += ns_since(t0);
    }
    teardown();
    return ns / n;
  };
  std::mt19937 order(11);
  std::vector<double> added, pv, rv;
  (void)side(m.pvmm_setup, m.pvmm_op, m.pvmm_teardown), (void)side(m.raw_setup, m.raw_op, m.raw_teardown);
  for (int r = 0; r < cold_rounds; ++r) {
    double a, b;
    if (order() & 1)
      a = side(m.pvmm_setup, m.pvmm_op, m.pvmm_teardown), b = side(m.raw_setup, m.raw_op, m.raw_teardown);
    else
      b = side(m.raw_setup, m.raw_op, m.raw_teardown), a = side(m.pvmm_setup, m.pvmm_op, m.pvmm_teardown);
    pv.push_back(a), rv.push_back(b), added.push_back(a - b);
  }
  fmt::print("  {:<26} {:>9.1f} {:>9.1f} {:>9.1f}  [{:>6.1f} {:>6.1f}]\n", m.name, quantile(pv, 0.5), quantile(rv, 0.5),
             quantile(added, 0.5), quantile(added, 0.25), quantile(added, 0.75));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) per_round = std::max(1, std::atoi(argv[1]));
  const std::string only = argc > 2 ? argv[2] : "";
  static const pvmm::cuda::driver_api table = null_driver();
  const pvmm::cuda::driver_api* const previous = pvmm::cuda::install_driver_api(&table);
  const auto& t = table;
  {
    const std::size_t size = std::size_t{2} << 20;
    const pvmm::allocation_properties props;
    const std::vector<pvmm::access_descriptor> grant{{pvmm::location::device(0), pvmm::access::read_write}};
    const CUmemAllocationProp prop = bench::raw_device_memory();
    const CUmemAccessDesc desc = bench::raw_read_write();
    // First use (capability and granularity caches) happens here, outside every measurement.
    bench::check(pvmm::query_device(0).has_value() && pvmm::query_granularity(props).has_value(), "first use");

    std::vector<pvmm::physical_allocation> mem;
    std::vector<pvmm::address_reservation> ranges;
    std::vector<CUmemGenericAllocationHandle> handles;
    std::vector<CUdeviceptr> addresses;
    auto timed = [](auto&& f) {
      const auto before = calls;
      auto t0 = clock_type::now();
      f();
      const double ns = ns_since(t0);
      for (int i = 0; i < entry_count; ++i) timed_calls[i] = calls[i] - before[i];
      return ns;
    };
    // Set-up helpers, untimed.
    auto pvmm_setup = [&](int n, bool map) {
      mem.clear(), ranges.clear();
      for (int i = 0; i < n; ++i) {
        mem.push_back(pvmm::physical_allocation::create(size, props).value());
        ranges.push_back(pvmm::address_reservation::reserve(size).value());
        if (map) bench::check(ranges.back().map(0, mem.back(), 0, size).has_value(), "map");
      }
    };
    auto raw_setup = [&](int n) {
      handles.assign(static_cast<std::size_t>(n), 0), addresses.assign(static_cast<std::size_t>(n), 0);
      for (int i = 0; i < n; ++i) {
        t.cuMemCreate(&handles[i], size, &prop, 0);
        t.cuMemAddressReserve(&addresses[i], size, 0, 0, 0);
      }
    };

    std::vector<measured> ops;
    ops.push_back({"create + release",
                   [&](int n) {
                     mem.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& m : mem) m = pvmm::physical_allocation::create(size, props).value();
                       for (auto& m : mem) bench::check(m.release().has_value(), "release");
                     });
                   },
                   [&](int n) {
                     handles.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& h : handles) t.cuMemCreate(&h, size, &prop, 0);
                       for (auto& h : handles) t.cuMemRelease(h);
                     });
                   }});
    ops.push_back({"reserve + free",
                   [&](int n) {
                     ranges.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& r : ranges) r = pvmm::address_reservation::reserve(size).value();
                       for (auto& r : ranges) bench::check(r.release().has_value(), "free");
                     });
                   },
                   [&](int n) {
                     addresses.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (auto& a : addresses) t.cuMemAddressReserve(&a, size, 0, 0, 0);
                       for (auto& a : addresses) t.cuMemAddressFree(a, size);
                     });
                   }});
    ops.push_back({"map + unmap",
                   [&](int n) {
                     pvmm_setup(n, false);
                     return timed([&] {
                       for (int i = 0; i < n; ++i) bench::check(ranges[i].map(0, mem[i], 0, size).has_value(), "map");
                       for (auto& r : ranges) bench::check(r.unmap(0, size).has_value(), "unmap");
                     });
                   },
                   [&](int n) {
                     raw_setup(n);
                     return timed([&] {
                       for (int i = 0; i < n; ++i) t.cuMemMap(addresses[i], size, 0, handles[i], 0);
                       for (auto a : addresses) t.cuMemUnmap(a, size);
                     });
                   }});
    ops.push_back({"set_access",
                   [&](int n) {
                     pvmm_setup(n, true);
                     return timed([&] {
                       for (auto& r : ranges) bench::check(r.set_access(0, size, grant).has_value(), "grant");
                     });
                   },
                   [&](int n) {
                     raw_setup(n);
                     return timed([&] {
                       for (auto a : addresses) t.cuMemSetAccess(a, size, &desc, 1);
                     });
                   }});
    ops.push_back({"lifecycle (all seven)",
                   [&](int n) {
                     mem.resize(static_cast<std::size_t>(n)), ranges.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         mem[i] = pvmm::physical_allocation::create(size, props).value();
                         ranges[i] = pvmm::address_reservation::reserve(size).value();
                         bench::check(ranges[i].map(0, mem[i], 0, size).has_value(), "map");
                         bench::check(ranges[i].set_access(0, size, grant).has_value(), "grant");
                         bench::check(ranges[i].unmap(0, size).has_value(), "unmap");
                         bench::check(mem[i].release().has_value(), "release");
                         bench::check(ranges[i].release().has_value(), "free");
                       }
                     });
                   },
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         CUmemGenericAllocationHandle h;
                         CUdeviceptr a;
                         t.cuMemCreate(&h, size, &prop, 0);
                         t.cuMemAddressReserve(&a, size, 0, 0, 0);
                         t.cuMemMap(a, size, 0, h, 0);
                         t.cuMemSetAccess(a, size, &desc, 1);
                         t.cuMemUnmap(a, size);
                         t.cuMemRelease(h);
                         t.cuMemAddressFree(a, size);
                       }
                     });
                   }});
    // One growth step of a growable_buffer with 2 MiB chunks against the hand-written create/map/grant step.
    ops.push_back({"growth step (2 MiB chunk)",
                   [&](int n) {
                     pvmm::growable_options o;
                     o.access = grant;
                     o.chunk_size = size;
                     o.reserve_size = size * static_cast<std::size_t>(n);
                     auto buffer = pvmm::growable_buffer::create(o).value();
                     return timed([&] {
                       for (int i = 1; i <= n; ++i) bench::check(buffer.resize(size * i).has_value(), "resize");
                     });
                   },
                   [&](int n) {
                     CUdeviceptr base;
                     t.cuMemAddressReserve(&base, size * static_cast<std::size_t>(n), 0, 0, 0);
                     handles.resize(static_cast<std::size_t>(n));
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         t.cuMemCreate(&handles[i], size, &prop, 0);
                         t.cuMemMap(base + size * i, size, 0, handles[i], 0);
                         t.cuMemSetAccess(base + size * i, size, &desc, 1);
                       }
                     });
                   }});
    auto s = pvmm::stream::create(0).value();
    auto pool = pvmm::memory_pool::create({}).value();
    const auto native_pool = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(pool.native_handle().value));
    const auto native_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
    ops.push_back({"pool allocate + free",
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         void* p = pool.allocate_async(size, s).value();
                         bench::check(pool.free_async(p, s).has_value(), "free_async");
                       }
                     });
                   },
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         CUdeviceptr p;
                         t.cuMemAllocFromPoolAsync(&p, size, native_pool, native_stream);
                         t.cuMemFreeAsync(p, native_stream);
                       }
                     });
                   }});
    ops.push_back({"pinned allocate + free",
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i)
                         bench::check(pvmm::pinned_allocation::create(size).has_value(), "pin");
                     });
                   },
                   [&](int n) {
                     return timed([&] {
                       for (int i = 0; i < n; ++i) {
                         void* p;
                         t.cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
                         t.cuMemFreeHost(p);
                       }
                     });
                   }});

    fmt::print("pvmm-own-cost: pvmm against a null CUDA driver (entries return at once), {} rounds x {} operations\n",
               rounds, per_round);
    fmt::print("  {:<26} {:>9} {:>9} {:>9}  {:<15}  {}\n", "operation", "pvmm ns", "raw ns", "added ns", "[IQR]",
               "driver calls pvmm made for one");
    for (const auto& m : ops)
      if (m.name.find(only) != std::string::npos) report(m);

    // The same calls one at a time with the caches evicted before each (what a real driver call leaves).
    auto none = [] {};
    auto pvmm_mapped = [&](int n) { pvmm_setup(n, true); };
    auto pvmm_unmapped = [&](int n) { pvmm_setup(n, false); };
    auto pvmm_reserved = [&](int n) {
      ranges.resize(static_cast<std::size_t>(n));
      for (auto& r : ranges) r = pvmm::address_reservation::reserve(size).value();
    };
    auto pvmm_unmap_all = [&] {
      for (auto& r : ranges) bench::check(r.unmap(0, size).has_value(), "unmap");
    };
    auto pvmm_free_all = [&] { ranges.clear(); };
    auto raw_reserved = [&](int n) {
      addresses.resize(static_cast<std::size_t>(n));
      for (auto& a : addresses) t.cuMemAddressReserve(&a, size, 0, 0, 0);
    };
    auto raw_mapped = [&](int n) {
      raw_setup(n);
      for (int i = 0; i < n; ++i) t.cuMemMap(addresses[i], size, 0, handles[i], 0);
    };
    auto raw_unmap_all = [&] {
      for (auto a : addresses) t.cuMemUnmap(a, size);
    };
    std::vector<measured_cold> cold;
    cold.push_back({"reserve", [&](int n) { ranges.resize(static_cast<std::size_t>(n)); },
                    [&](int i) { ranges[i] = pvmm::address_reservation::reserve(size).value(); }, pvmm_free_all,
                    [&](int n) { addresses.resize(static_cast<std::size_t>(n)); },
                    [&](int i) { t.cuMemAddressReserve(&addresses[i], size, 0, 0, 0); }, none});
    cold.push_back({"free", pvmm_reserved, [&](int i) { bench::check(ranges[i].release().has_value(), "free"); }, none,
                    raw_reserved, [&](int i) { t.cuMemAddressFree(addresses[i], size); }, none});
    cold.push_back({"map", pvmm_unmapped,
                    [&](int i) { bench::check(ranges[i].map(0, mem[i], 0, size).has_value(), "map"); }, pvmm_unmap_all,
                    raw_setup, [&](int i) { t.cuMemMap(addresses[i], size, 0, handles[i], 0); }, raw_unmap_all});
    cold.push_back({"unmap", pvmm_mapped, [&](int i) { bench::check(ranges[i].unmap(0, size).has_value(), "unmap"); },
                    none, raw_mapped, [&](int i) { t.cuMemUnmap(addresses[i], size); }, none});
    cold.push_back({"set_access", pvmm_mapped,
                    [&](int i) { bench::check(ranges[i].set_access(0, size, grant).has_value(), "grant"); },
                    pvmm_unmap_all, raw_mapped, [&](int i) { t.cuMemSetAccess(addresses[i], size, &desc, 1); },
                    raw_unmap_all});
    fmt::print("\ncold caches: each call alone, {} MiB streamed through before it (untimed), 31 rounds x 64 calls\n",
               evict_buffer.size() >> 20);
    fmt::print("  {:<26} {:>9} {:>9} {:>9}  {:<15}\n", "operation", "pvmm ns", "raw ns", "added ns", "[IQR]");
    for (const auto& m : cold)
      if (m.name.find(only) != std::string::npos || only.empty()) report_cold(m);
    mem.clear(), ranges.clear();
  }
  pvmm::cuda::install_driver_api(previous);
  return 0;
}
