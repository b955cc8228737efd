// The C interface: physical allocations, reservations, mappings and access (pvmm/pvmm.h over pvmm/allocation.hpp
// and pvmm/reservation.hpp).
#include <cstring>

#include <pvmm/allocation.hpp>
#include <pvmm/dmabuf.hpp>
#include <pvmm/reservation.hpp>
#include <pvmm/testing.hpp>

#include "c_api/common.hpp"
#include "c_api/convert.hpp"
#include "core/propagate.hpp"

using namespace pvmm::c_api;
using pvmm::address_reservation;
using pvmm::physical_allocation;

extern "C" {

pvmm_status pvmm_allocation_create(size_t size, const pvmm_allocation_properties* properties,
                                   pvmm_allocation* out) noexcept {
  constexpr const char* op = "pvmm_allocation_create";
  return guard(op, [&] {
    PVMM_C_NEED(out, op);
    PVMM_C_TRY(p, to_properties(properties, op));
    return adopt_result(kind::allocation, physical_allocation::create(size, *p), out);
  });
}

pvmm_status pvmm_allocation_retain(const void* address, pvmm_allocation* out) noexcept {
  return create_entry(kind::allocation, "pvmm_allocation_retain", out,
                      [&] { return physical_allocation::retain(address); });
}

pvmm_status pvmm_allocation_release(pvmm_allocation allocation) noexcept {
  return release_entry<physical_allocation>(kind::allocation, allocation.id, "pvmm_allocation_release");
}

pvmm_status pvmm_allocation_size(pvmm_allocation allocation, size_t* size) noexcept {
  return read_entry<physical_allocation>(kind::allocation, allocation.id, "pvmm_allocation_size", size, "size",
                                         [](const physical_allocation& a) { return a.size(); });
}

pvmm_status pvmm_allocation_export_posix_fd(pvmm_allocation allocation, int* fd) noexcept {
  return value_entry<physical_allocation>(kind::allocation, allocation.id, "pvmm_allocation_export_posix_fd", fd, "fd",
                                          [](physical_allocation& a) -> pvmm::result<int> {
                                            PVMM_TRY_ASSIGN(exported, a.export_posix_fd());
                                            return exported.detach();
                                          });
}

pvmm_status pvmm_allocation_import_posix_fd(int fd, size_t size, pvmm_allocation* out) noexcept {
  return create_entry(kind::allocation, "pvmm_allocation_import_posix_fd", out,
                      [&] { return physical_allocation::import_posix_fd(fd, size); });
}

pvmm_status pvmm_allocation_export_fabric(pvmm_allocation allocation, pvmm_fabric_handle* handle) noexcept {
  return value_entry<physical_allocation>(kind::allocation, allocation.id, "pvmm_allocation_export_fabric", handle,
                                          "handle", [](physical_allocation& a) -> pvmm::result<pvmm_fabric_handle> {
                                            PVMM_TRY_ASSIGN(exported, a.export_fabric());
                                            pvmm_fabric_handle out;
                                            static_assert(sizeof out.bytes == sizeof exported.bytes,
                                                          "pvmm_fabric_handle is pvmm::fabric_handle");
                                            std::memcpy(out.bytes, exported.bytes.data(), sizeof out.bytes);
                                            return out;
                                          });
}

pvmm_status pvmm_allocation_import_fabric(const pvmm_fabric_handle* handle, size_t size,
                                          pvmm_allocation* out) noexcept {
  constexpr const char* op = "pvmm_allocation_import_fabric";
  return guard(op, [&] {
    PVMM_C_NEED(handle, op);
    PVMM_C_NEED(out, op);
    pvmm::fabric_handle h;
    std::memcpy(h.bytes.data(), handle->bytes, sizeof handle->bytes);
    return adopt_result(kind::allocation, physical_allocation::import_fabric(h, size), out);
  });
}

pvmm_status pvmm_reservation_create(size_t size, size_t alignment, const void* fixed_address,
                                    pvmm_reservation* out) noexcept {
  return create_entry(kind::reservation, "pvmm_reservation_create", out,
                      [&] { return address_reservation::reserve(size, alignment, fixed_address); });
}

pvmm_status pvmm_reservation_release(pvmm_reservation reservation) noexcept {
  constexpr const char* op = "pvmm_reservation_release";
  return guard(op, [&] {
    // Checked before the handle dies: the C++ release refuses while mappings remain, and the handle stays usable.
    PVMM_C_FIND(address_reservation, reservation, r, reservation, op);
    if (r->mapping_count() != 0) return report(r->release());
    PVMM_C_TRY(taken, take(kind::reservation, reservation.id, op));
    if (auto* alone = taken->alone<address_reservation>()) return report(alone->release());
    return pvmm_status_ok;  // torn down when the call inside it ends
  });
}

pvmm_status pvmm_reservation_address(pvmm_reservation reservation, void** address) noexcept {
  return read_entry<address_reservation>(kind::reservation, reservation.id, "pvmm_reservation_address", address,
                                         "address", [](const address_reservation& r) { return r.address(); });
}

pvmm_status pvmm_reservation_size(pvmm_reservation reservation, size_t* size) noexcept {
  return read_entry<address_reservation>(kind::reservation, reservation.id, "pvmm_reservation_size", size, "size",
                                         [](const address_reservation& r) { return r.size(); });
}

pvmm_status pvmm_reservation_map(pvmm_reservation reservation, size_t offset, pvmm_allocation memory,
                                 size_t memory_offset, size_t size, void** address) noexcept {
  constexpr const char* op = "pvmm_reservation_map";
  return guard(op, [&] {
    PVMM_C_FIND(address_reservation, reservation, r, reservation, op);
    PVMM_C_FIND(physical_allocation, allocation, a, memory, op);
    PVMM_C_TRY(mapped, r->map(offset, *a, memory_offset, size));
    if (address != nullptr) *address = *mapped;
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_reservation_unmap(pvmm_reservation reservation, size_t offset, size_t size) noexcept {
  constexpr const char* op = "pvmm_reservation_unmap";
  return guard(op, [&] {
    PVMM_C_FIND(address_reservation, reservation, r, reservation, op);
    return report(r->unmap(offset, size));
  });
}

pvmm_status pvmm_reservation_set_access(pvmm_reservation reservation, size_t offset, size_t size,
                                        const pvmm_access_descriptor* grants, size_t count) noexcept {
  constexpr const char* op = "pvmm_reservation_set_access";
  return guard(op, [&] {
    PVMM_C_FIND(address_reservation, reservation, r, reservation, op);
    PVMM_C_TRY(list, to_grants(grants, count, op));
    return report(r->set_access(offset, size, pvmm::access_list(*list)));
  });
}

pvmm_status pvmm_query_access(pvmm_location where, const void* address, int* access) noexcept {
  constexpr const char* op = "pvmm_query_access";
  return guard(op, [&] {
    PVMM_C_NEED(access, op);
    PVMM_C_TRY(l, to_location(where, op));
    PVMM_C_TRY(a, pvmm::query_access(*l, address));
    *access = static_cast<int>(*a);
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_copy_to_mapping(void* destination, const void* source, size_t size, int device) noexcept {
  constexpr const char* op = "pvmm_copy_to_mapping";
  return guard(op, [&] { return report(pvmm::testing::copy_to_mapping(destination, source, size, device)); });
}

pvmm_status pvmm_copy_from_mapping(void* destination, const void* source, size_t size, int device) noexcept {
  constexpr const char* op = "pvmm_copy_from_mapping";
  return guard(op, [&] { return report(pvmm::testing::copy_from_mapping(destination, source, size, device)); });
}

pvmm_status pvmm_export_dmabuf(const void* address, size_t size, pvmm_dmabuf_piece* pieces, size_t capacity,
                               size_t* count) noexcept {
  constexpr const char* op = "pvmm_export_dmabuf";
  return guard(op, [&] {
    PVMM_C_NEED(count, op);
    if (pieces == nullptr && capacity != 0) return null_argument(op, "pieces");
    PVMM_C_TRY(exported, pvmm::export_dmabuf(address, size));
    *count = exported->size();
    if (exported->size() > capacity) {
      return fail(pvmm::errc::out_of_range, op,
                  "the range needs " + std::to_string(exported->size()) + " pieces; capacity is " +
                      std::to_string(capacity) + " (no fd was kept)");
    }
    for (std::size_t i = 0; i < exported->size(); ++i) {
      auto& piece = (*exported)[i];
      pieces[i] = {piece.fd.detach(), piece.address, piece.size};
    }
    return pvmm_status_ok;
  });
}

}  // extern "C"
