// Devices and the backend: backend(), device_count(), device(), granularity(), query_pointer().
#include <nanobind/stl/string.h>

#include <cstdint>

#include "common.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

nb::dict to_dict(const pvmm::pointer_attributes& a) {
  static const char* kinds[] = {"none", "device", "pool", "managed", "pinned", "registered"};
  nb::dict d;
  d["kind"] = kinds[static_cast<int>(a.kind)];
  d["base"] = reinterpret_cast<std::uintptr_t>(a.base);
  d["size"] = a.size;
  d["device"] = a.device;
  d["mapped"] = a.mapped;
  return d;
}

nb::dict capabilities_dict(const pvmm::capabilities& c) {
  nb::dict d;
  d["vmm"] = c.vmm.supported;
  d["posix_fd"] = c.sharing.posix_fd;
  d["fabric"] = c.sharing.fabric;
  d["multicast"] = c.multicast.supported;
  d["pools"] = c.pools.supported;
  d["pool_ipc"] = c.pools.ipc_posix_fd;
  d["managed"] = c.managed.supported;
  d["concurrent_managed_access"] = c.managed.concurrent_access;
  d["pinned"] = c.host_memory.pinned;
  d["registration"] = c.host_memory.registration;
  d["mapped_host_memory"] = c.host_memory.mapped;
  return d;
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
    nb::dict d;
    d["name"] = b.name;
    d["available"] = b.available;
    d["runtime_version"] = b.runtime_version;
    d["driver_version"] = b.driver_version;
    d["unavailable_reason"] = b.unavailable_reason;
    return d;
  });
  m.def("device_count", [] { return unwrap(pvmm::device_count()); });
  m.def(
      "device",
      [](int ordinal) {
        auto i = unwrap(pvmm::query_device(ordinal));
        nb::dict d;
        d["ordinal"] = i.ordinal;
        d["name"] = i.name;
        d["identifier"] = i.identifier;
        d["total_memory"] = i.total_memory;
        d["capabilities"] = capabilities_dict(i.capabilities);
        return d;
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
