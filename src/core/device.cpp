// Hot layout: known_reservation_unit and known_device_count are listed by mangled name in cmake/hot_layout.ld; a rename
// or a new signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// pvmm/device.hpp: the backend, its devices and granularities; and the caches the neutral layer uses.
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include <pvmm/device.hpp>

#include "backend/dmabuf.hpp"
#include "backend/fabric.hpp"
#include "backend/managed.hpp"
#include "backend/multicast.hpp"
#include "backend/pinned.hpp"
#include "backend/pool.hpp"
#include "backend/posix_fd.hpp"
#include "backend/vmm.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"

namespace pvmm {
namespace detail {

bool numa_node_exists(int node) {
  return node >= 0 && ::access(fmt::format("/sys/devices/system/node/node{}", node).c_str(), F_OK) == 0;
}

// The device count is fixed once the driver has started; a count of 0 is not cached (nothing to speed up).
// Process-wide because the driver is.
std::atomic<int> known_device_count{0};

result<int> cached_device_count() {
  if (int n = known_device_count.load(std::memory_order_relaxed); n > 0) return n;
  auto count = call_backend("device_count", [] { return backend::device_count(); });
  if (count && *count > 0) known_device_count.store(*count, std::memory_order_relaxed);
  return count;
}

result<granularity> cached_granularity(const allocation_properties& p) {
  // Asking the driver twice per create (minimum and recommended) would add measurable time to every allocation.
  struct entry {
    allocation_properties key;
    granularity value;
  };
  static std::mutex cache_mutex;
  static std::vector<entry> cache;
  auto same = [&](const allocation_properties& k) {
    return k.location == p.location && k.exportable == p.exportable && k.gpu_direct_rdma == p.gpu_direct_rdma &&
           k.compression == p.compression;
  };
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    for (auto& e : cache)
      if (same(e.key)) return e.value;
  }
  auto g = call_backend("allocation_granularity", [&] { return backend::allocation_granularity(p); });
  if (!g) return g;
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() < 64) cache.push_back({p, *g});
  return g;
}

namespace {
/// Every feature fills its own record.
result<capabilities> ask_capabilities(int ordinal) {
  capabilities c;
  PVMM_TRY_ASSIGN(vmm, call_backend("vmm_capabilities", [&] { return backend::vmm_capabilities(ordinal); }));
  c.vmm = vmm;
  PVMM_TRY_ASSIGN(posix_fd, call_backend("posix_fd_capability", [&] { return backend::posix_fd_capability(ordinal); }));
  PVMM_TRY_ASSIGN(fabric, call_backend("fabric_capability", [&] { return backend::fabric_capability(ordinal); }));
  PVMM_TRY_ASSIGN(multicast,
                  call_backend("multicast_capability", [&] { return backend::multicast_capability(ordinal); }));
  c.sharing.posix_fd = c.vmm.supported && posix_fd;
  c.sharing.fabric = c.vmm.supported && fabric;
  PVMM_TRY_ASSIGN(dmabuf, call_backend("dmabuf_capability", [&] { return backend::dmabuf_capability(ordinal); }));
  c.sharing.dmabuf = c.vmm.supported && dmabuf;
  c.multicast.supported = multicast;
  PVMM_TRY_ASSIGN(pools, call_backend("pool_capabilities", [&] { return backend::pool_capabilities(ordinal); }));
  c.pools = pools;
  PVMM_TRY_ASSIGN(managed,
                  call_backend("managed_capabilities", [&] { return backend::managed_capabilities(ordinal); }));
  c.managed = managed;
  PVMM_TRY_ASSIGN(host_memory,
                  call_backend("host_memory_capabilities", [&] { return backend::host_memory_capabilities(ordinal); }));
  c.host_memory = host_memory;
  return c;
}
}  // namespace

result<capabilities> device_capabilities(int ordinal) {
  static std::mutex cache_mutex;
  static std::vector<std::pair<bool, capabilities>> cache;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (ordinal >= 0 && static_cast<std::size_t>(ordinal) < cache.size() && cache[ordinal].first)
      return cache[ordinal].second;
  }
  PVMM_TRY_ASSIGN(c, ask_capabilities(ordinal));
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() <= static_cast<std::size_t>(ordinal)) cache.resize(ordinal + 1);
  cache[ordinal] = {true, c};
  return c;
}

// Granularities are fixed for the life of the process (process-wide because the driver is).
std::atomic<std::size_t> known_reservation_unit{0};

result<std::size_t> reservation_unit_uncached() {
  PVMM_TRY_ASSIGN(count, cached_device_count());
  std::size_t unit = 0;
  for (int d = 0; d < count; ++d) {
    allocation_properties p;
    p.location = location::device(d);
    PVMM_TRY_ASSIGN(g, cached_granularity(p));
    unit = std::max(unit, g.minimum);
  }
  if (unit == 0) {
    auto b = backend::info();
    return make_error(b.available ? errc::backend_unavailable : b.unavailable_code,
                      b.available ? "no device" : b.unavailable_reason);
  }
  known_reservation_unit.store(unit, std::memory_order_relaxed);
  return unit;
}

status check_location_uncached(location where, const operation& op) {
  switch (where.type) {
    case location::kind::device: {
      auto count = cached_device_count();
      if (!count) return op.wrap(std::move(count).error());
      if (*count == 0) {
        auto b = backend::info();
        return op.fail(b.available ? errc::backend_unavailable : b.unavailable_code,
                       b.available ? "no device" : b.unavailable_reason);
      }
      if (where.id < 0 || where.id >= *count)
        return op.fail(errc::invalid_device,
                       fmt::format("device {} does not exist; {} device(s) present", where.id, *count));
      return {};
    }
    case location::kind::host:
      if (where.id != 0)
        return op.fail(errc::invalid_location, fmt::format("host location id must be 0, got {}", where.id));
      return {};
    case location::kind::host_numa:
      if (!numa_node_exists(where.id))
        return op.fail(errc::invalid_location,
                       fmt::format("NUMA node {} does not exist on this host (/sys/devices/system/node)", where.id));
      return {};
  }
  return op.fail(errc::invalid_location, fmt::format("unknown location kind {}", static_cast<int>(where.type)));
}

}  // namespace detail

backend_info query_backend() { return detail::backend::info(); }

result<int> device_count() {
  return detail::call_backend("device_count", [] { return detail::backend::device_count(); });
}

result<std::size_t> reservation_granularity() { return detail::reservation_unit(); }

result<device_info> query_device(int ordinal) {
  auto args = [&] { return fmt::format("ordinal={}", ordinal); };
  const detail::operation op{"pvmm::query_device", args};
  PVMM_TRY(detail::check_location(location::device(ordinal), op));
  auto info = op.step("device", [&] { return detail::backend::device(ordinal); });
  if (!info) return info;
  auto caps = detail::device_capabilities(ordinal);
  if (!caps) return op.wrap(std::move(caps).error());
  info->capabilities = *caps;
  return info;
}

result<granularity> query_granularity(const allocation_properties& properties) {
  auto args = [&] { return detail::describe(properties); };
  const detail::operation op{"pvmm::query_granularity", args};
  PVMM_TRY(detail::check_location(properties.location, op));
  auto g = detail::cached_granularity(properties);
  if (!g) return op.wrap(std::move(g).error());
  return g;
}

result<bool> can_access_peer(int device, int peer) {
  auto args = [&] { return fmt::format("device={}, peer={}", device, peer); };
  const detail::operation op{"pvmm::can_access_peer", args};
  PVMM_TRY(detail::check_location(location::device(device), op));
  PVMM_TRY(detail::check_location(location::device(peer), op));
  if (device == peer) return true;
  return op.step("can_access_peer", [&] { return detail::backend::can_access_peer(device, peer); });
}

result<memory_info> query_memory(int ordinal) {
  auto args = [&] { return fmt::format("ordinal={}", ordinal); };
  const detail::operation op{"pvmm::query_memory", args};
  PVMM_TRY(detail::check_location(location::device(ordinal), op));
  return op.step("memory", [&] { return detail::backend::memory(ordinal); });
}

}  // namespace pvmm
