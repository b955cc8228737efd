// Devices and the backend: backend(), device_count(), device(), granularity(), query_pointer().
#include <nanobind/stl/string.h>

#include <cstdint>

#include "common.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

nb::dict to_dict(const pvmm::pointer_attributes& a) {
  static const char* kinds[] = {"none", "device", "pool", "managed", "pinned", "registered"};
  return dict_of("kind", kinds[static_cast<int>(a.kind)], "base", reinterpret_cast<std::uintptr_t>(a.base), "size",
                 a.size, "device", a.device, "mapped", a.mapped);
}

nb::dict capabilities_dict(const pvmm::capabilities& c) {
  return dict_of("vmm", c.vmm.supported, "posix_fd", c.sharing.posix_fd, "fabric", c.sharing.fabric, "multicast",
                 c.multicast.supported, "pools", c.pools.supported, "pool_ipc", c.pools.ipc_posix_fd, "managed",
                 c.managed.supported, "concurrent_managed_access", c.managed.concurrent_access, "pinned",
                 c.host_memory.pinned, "registration", c.host_memory.registration, "mapped_host_memory",
                 c.host_memory.mapped);
}

}  // namespace

pvmm::allocation_properties device_props(int device, bool exportable) {
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(device);
  if (exportable) p.exportable = pvmm::handle_types::posix_fd;
  return p;
}

void bind_device(nb::module_& m) {
  m.def("backend", [] {
    auto b = pvmm::query_backend();
    return dict_of("name", b.name, "available", b.available, "runtime_version", b.runtime_version, "driver_version",
                   b.driver_version, "unavailable_reason", b.unavailable_reason);
  });
  m.def("device_count", [] { return unwrap(pvmm::device_count()); });
  m.def(
      "device",
      [](int ordinal) {
        auto i = unwrap(pvmm::query_device(ordinal));
        return dict_of("ordinal", i.ordinal, "name", i.name, "identifier", i.identifier, "total_memory", i.total_memory,
                       "capabilities", capabilities_dict(i.capabilities));
      },
      "ordinal"_a = 0);
  m.def(
      "granularity",
      [](int device) {
        auto g = unwrap(pvmm::query_granularity(device_props(device, false)));
        return nb::make_tuple(g.minimum, g.recommended);
      },
      "device"_a = 0, "(minimum, recommended) sizes for physical allocations on `device`.");
  m.def(
      "query_memory",
      [](int device) {
        auto i = unwrap(pvmm::query_memory(device));
        return nb::make_tuple(i.free, i.total);
      },
      "device"_a = 0,
      "(free, total) bytes of `device`'s memory now (host backend: the host's RAM, shared with everything else).");
  m.def(
      "query_pointer",
      [](std::uintptr_t address) { return to_dict(unwrap(pvmm::query_pointer(reinterpret_cast<void*>(address)))); },
      "address"_a);
}

}  // namespace pvmm_py
