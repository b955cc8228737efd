// One live range of every kind of memory pvmm makes, for the pointer cases: each made on device 0, with a way to
// write and read its bytes that does not go through copy_async (so a copy is checked through another path).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "support.hpp"

namespace pvmm_test {

constexpr std::size_t pointer_mib = std::size_t{1} << 20;

/// A VMM range: 4 granules reserved, the second mapped and granted to device 0 (and the host where it may).
struct vmm_range {
  pvmm::address_reservation range;
  pvmm::physical_allocation memory;
  static vmm_range make() {
    vmm_range v;
    const std::size_t g = granule();
    v.range = pvmm::address_reservation::reserve(4 * g).value();
    v.memory = pvmm::physical_allocation::create(g, default_properties()).value();
    v.range.map_and_grant(g, v.memory, {rw()}).value();
    return v;
  }
  char* mapped() const { return range.at<char>(granule()); }
};

/// Host memory the program owns (mmap), four pages, of which the middle two are registered.
struct registered_range {
  char* pages = nullptr;
  std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  pvmm::host_registration registration;
  static registered_range make(const pvmm::pinned_options& options = {}) {
    registered_range r;
    void* p = ::mmap(nullptr, 4 * r.page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    r.pages = static_cast<char*>(p);
    r.registration = pvmm::host_registration::create(r.pages + r.page, 2 * r.page, options).value();
    return r;
  }
  registered_range() = default;
  registered_range(registered_range&& o) noexcept
      : pages(o.pages), page(o.page), registration(std::move(o.registration)) {
    o.pages = nullptr;
  }
  registered_range& operator=(registered_range&&) = delete;
  ~registered_range() {
    (void)registration.release();
    if (pages) ::munmap(pages, 4 * page);
  }
};

}  // namespace pvmm_test
