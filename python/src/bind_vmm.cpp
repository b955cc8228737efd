// Physical allocations and reservations: pvmm.PhysicalAllocation, pvmm.Reservation (map, unmap, set_access).
#include <nanobind/stl/string.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_physical : owner<pvmm::physical_allocation> {};
/// What is mapped in a reservation and whether this device may touch it: offset -> (size, accessible). Views of
/// the reservation must lie in accessible mappings (reading an unmapped or inaccessible part faults). GIL held.
struct mapping_table {
  std::map<std::size_t, std::pair<std::size_t, bool>> ranges;
  void check(std::size_t offset, std::size_t bytes) const {
    std::size_t at = offset;
    const std::size_t end = offset + bytes;
    while (at < end) {
      auto it = ranges.upper_bound(at);
      if (it == ranges.begin()) break;
      --it;
      if (at >= it->first + it->second.first || !it->second.second) break;
      at = it->first + it->second.first;
    }
    if (at < end)
      raise(pvmm::errc::not_mapped, "pvmm.Reservation.view",
            "the view reaches a part of the reservation that is not mapped, or not accessible (access \"none\")",
            "offset=" + std::to_string(offset) + ", bytes=" + std::to_string(bytes) +
                ", first_unreadable=" + std::to_string(at),
            "map memory there (grant=True), or view only the mapped part (view(offset=...))");
  }
  /// Marks the mappings inside [offset, offset + size) accessible or not.
  void set(std::size_t offset, std::size_t size, bool accessible) {
    for (auto& [at, r] : ranges)
      if (at >= offset && at + r.first <= offset + size) r.second = accessible;
  }
};

struct py_reservation : owner<pvmm::address_reservation> {
  std::shared_ptr<mapping_table> mappings = std::make_shared<mapping_table>();
};

pvmm::access parse_access(const std::string& mode) {
  if (mode == "none") return pvmm::access::none;
  if (mode == "read") return pvmm::access::read;
  if (mode == "read_write") return pvmm::access::read_write;
  raise(pvmm::errc::invalid_argument, "pvmm.Reservation.set_access", "unknown access mode", "access=" + mode,
        "one of \"none\", \"read\", \"read_write\"");
}

}  // namespace

void bind_vmm(nb::module_& m) {
  closable(
      nb::class_<py_physical>(m, "PhysicalAllocation", "Physical memory (no address until mapped in a Reservation)."))
      .def_static(
          "create",
          [](std::size_t size, int device, bool exportable) {
            py_physical p;
            p.device = device;
            p.h.reset(std::make_shared<pvmm::physical_allocation>(
                unwrap(pvmm::physical_allocation::create(size, device_props(device, exportable)))));
            return p;
          },
          "size"_a, "device"_a = 0, "exportable"_a = false)
      .def_prop_ro("size", [](const py_physical& p) { return p.h.use("size")->size(); })
      .def(
          "export_fd", [](const py_physical& p) { return unwrap(p.h.use("export_fd")->export_posix_fd()).detach(); },
          "A POSIX fd for another process (created with exportable=True); the caller owns it.")
      .def_static(
          "import_fd",
          [](int fd, std::size_t size, int device) {
            py_physical p;
            p.device = device;
            p.h.reset(std::make_shared<pvmm::physical_allocation>(
                unwrap(pvmm::physical_allocation::import_posix_fd(fd, size))));
            return p;
          },
          "fd"_a, "size"_a, "device"_a = 0, "Imports an exported allocation (the fd stays the caller's).")
      .def("__repr__", [](const py_physical& p) {
        auto o = p.h.try_use();
        return o ? "<pvmm.PhysicalAllocation size=" + std::to_string(o->size()) + ">"
                 : std::string("<pvmm.PhysicalAllocation closed>");
      });

  auto reservation = nb::class_<py_reservation>(m, "Reservation", "A range of virtual addresses to map memory in.",
                                                nb::type_slots(buffer_slots<py_reservation>()));
  reservation
      .def_static(
          "reserve",
          [](std::size_t size, int device) {
            py_reservation r;
            r.device = device;
            r.h.reset(std::make_shared<pvmm::address_reservation>(unwrap(pvmm::address_reservation::reserve(size))));
            r.check_view = [table = r.mappings](std::size_t offset, std::size_t bytes) { table->check(offset, bytes); };
            return r;
          },
          "size"_a, "device"_a = 0)
      .def(
          "map",
          [](py_reservation& r, std::size_t offset, const py_physical& memory, bool grant) {
            auto range = r.h.use("map");
            auto phys = memory.h.use("map");
            const pvmm::access_descriptor access{pvmm::location::device(r.device), pvmm::access::read_write};
            void* p = grant ? unwrap(range->map_and_grant(offset, *phys, {access})) : unwrap(range->map(offset, *phys));
            r.mappings->ranges[offset] = {phys->size(), grant};
            return reinterpret_cast<std::uintptr_t>(p);
          },
          "offset"_a, "memory"_a, "grant"_a = true, "Maps all of `memory` at `offset` (granting read-write access).")
      .def(
          "unmap",
          [](py_reservation& r, std::size_t offset, std::size_t size) {
            auto range = r.h.begin_reshape("unmap");
            unwrap(range->unmap(offset, size));
            auto& ranges = r.mappings->ranges;
            for (auto it = ranges.lower_bound(offset); it != ranges.end() && it->first < offset + size;)
              it = ranges.erase(it);
          },
          "offset"_a, "size"_a, "Unmaps; BusyError (a BufferError) while a view of the reservation is alive.")
      .def(
          "set_access",
          [](py_reservation& r, std::size_t offset, std::size_t size, const std::string& mode) {
            const pvmm::access a = parse_access(mode);
            auto range = r.h.begin_reshape("set_access");
            const pvmm::access_descriptor d{pvmm::location::device(r.device), a};
            unwrap(range->set_access(offset, size, {d}));
            r.mappings->set(offset, size, a != pvmm::access::none);
            // Views are exported read-only once any range is not read-write (until all of it is again).
            if (a != pvmm::access::read_write)
              r.restricted = true;
            else if (offset == 0 && size == range->size())
              r.restricted = false;
          },
          "offset"_a, "size"_a, "access"_a = "read_write",
          "\"none\", \"read\" or \"read_write\" for this device. Views taken after a range was set to \"read\" are "
          "read-only (NumPy's flags.writeable, DLPack's READ_ONLY flag, __cuda_array_interface__'s data[1]); "
          "BusyError (a BufferError) while a view is alive.")
      .def_prop_ro("mapping_count", [](const py_reservation& r) { return r.h.use("mapping_count")->mapping_count(); });
  bind_memory(
      reservation, "Reservation", [](const pvmm::address_reservation& r) { return r.address(); },
      [](const pvmm::address_reservation& r) { return r.size(); });
}

}  // namespace pvmm_py
