// The C interface of memory snapshots (pvmm/c/snapshot.h over pvmm/snapshot.hpp).
#include <cstdlib>
#include <cstring>

#include <pvmm/snapshot.hpp>

#include "c_api/common.hpp"

using namespace pvmm::c_api;

extern "C" {

pvmm_status pvmm_dump_snapshot(const char* path) noexcept {
  constexpr const char* op = "pvmm_dump_snapshot";
  return guard(op, [&]() -> pvmm_status {
    if (path == nullptr) return null_argument(op, "path");
    return report(pvmm::dump_snapshot(path));
  });
}

pvmm_status pvmm_snapshot_pickle(void** data, size_t* size) noexcept {
  constexpr const char* op = "pvmm_snapshot_pickle";
  return guard(op, [&]() -> pvmm_status {
    if (data == nullptr) return null_argument(op, "data");
    if (size == nullptr) return null_argument(op, "size");
    PVMM_C_TRY(snapshot, pvmm::take_memory_snapshot());
    PVMM_C_TRY(bytes, pvmm::snapshot_pickle(*snapshot));
    void* buffer = std::malloc(bytes->size() == 0 ? 1 : bytes->size());
    if (buffer == nullptr) return fail(pvmm::errc::out_of_memory, op, "memory ran out for the pickle's buffer");
    std::memcpy(buffer, bytes->data(), bytes->size());
    *data = buffer;
    *size = bytes->size();
    return pvmm_status_ok;
  });
}

void pvmm_snapshot_free(void* data) noexcept { std::free(data); }

pvmm_status pvmm_record_memory_history(size_t max_entries) noexcept {
  return guard("pvmm_record_memory_history",
               [&]() -> pvmm_status { return report(pvmm::record_memory_history(max_entries)); });
}

}  // extern "C"
