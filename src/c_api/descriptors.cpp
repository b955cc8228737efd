// The C interface: descriptors of multi-chunk buffers (pvmm/pvmm.h over pvmm/descriptor.hpp).
#include <cstring>

#include <pvmm/descriptor.hpp>
#include <pvmm/growable_buffer.hpp>

#include "c_api/common.hpp"
#include "c_api/convert.hpp"

using namespace pvmm::c_api;

extern "C" {

pvmm_status pvmm_growable_export(pvmm_growable buffer, unsigned kind, uint8_t* bytes, size_t capacity, size_t* length,
                                 int* fds, size_t fd_capacity, size_t* fd_count) noexcept {
  constexpr const char* op = "pvmm_growable_export";
  return guard(op, [&] {
    PVMM_C_NEED(length, op);
    PVMM_C_NEED(fd_count, op);
    if (bytes == nullptr && capacity != 0) return null_argument(op, "bytes");
    if (fds == nullptr && fd_capacity != 0) return null_argument(op, "fds");
    if (kind != pvmm_handle_posix_fd && kind != pvmm_handle_fabric) {
      return fail(pvmm::errc::invalid_argument, op,
                  "kind " + std::to_string(kind) + " is not pvmm_handle_posix_fd (1) or pvmm_handle_fabric (2)");
    }
    PVMM_C_FIND(pvmm::growable_buffer, growable, b, buffer, op);
    PVMM_C_TRY(exported, pvmm::export_buffer(*b, static_cast<pvmm::handle_types>(kind)));
    const std::vector<std::uint8_t> serialized = exported->descriptor.serialize();
    *length = serialized.size();
    *fd_count = exported->fds.size();
    if (serialized.size() > capacity || exported->fds.size() > fd_capacity) {
      return fail(pvmm::errc::out_of_range, op,
                  "the descriptor needs " + std::to_string(serialized.size()) + " bytes and " +
                      std::to_string(exported->fds.size()) + " fds; the buffers hold " + std::to_string(capacity) +
                      " and " + std::to_string(fd_capacity) + " (no fd was kept)");
    }
    if (!serialized.empty()) std::memcpy(bytes, serialized.data(), serialized.size());
    for (std::size_t i = 0; i < exported->fds.size(); ++i) fds[i] = exported->fds[i].detach();
    return pvmm_status_ok;
  });
}

pvmm_status pvmm_import_buffer(const uint8_t* bytes, size_t length, const int* fds, size_t fd_count,
                               const pvmm_access_descriptor* grants, size_t grant_count, pvmm_imported* out) noexcept {
  constexpr const char* op = "pvmm_import_buffer";
  return guard(op, [&] {
    PVMM_C_NEED(bytes, op);
    PVMM_C_NEED(out, op);
    if (fds == nullptr && fd_count != 0) return null_argument(op, "fds");
    PVMM_C_TRY(list, to_grants(grants, grant_count, op));
    PVMM_C_TRY(descriptor, pvmm::buffer_descriptor::parse(bytes, length, fd_count));
    return adopt_result(kind::imported, pvmm::import_buffer(*descriptor, fds, fd_count, pvmm::access_list(*list)), out);
  });
}

pvmm_status pvmm_imported_data(pvmm_imported buffer, void** data, size_t* size) noexcept {
  return data_entry<pvmm::imported_buffer>(kind::imported, buffer.id, "pvmm_imported_data", data, size);
}

pvmm_status pvmm_imported_release(pvmm_imported buffer) noexcept {
  constexpr const char* op = "pvmm_imported_release";
  return guard(op, [&] {
    PVMM_C_TRY(b, take(kind::imported, buffer.id, op));
    return pvmm_status_ok;  // the destructor (of the last reference) unmaps the range, frees it and drops the chunks'
                            // references
  });
}

}  // extern "C"
