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

/// A VMM range: n granules mapped at granule 1 of n + 3 reserved (n: enough for `mapped_bytes`, at least 1),
/// granted to device 0.
struct vmm_range {
  pvmm::address_reservation range;
  pvmm::physical_allocation memory;
  static vmm_range make(std::size_t mapped_bytes = 0) {
    vmm_range v;
    const std::size_t g = granule();
    const std::size_t n = mapped_bytes <= g ? 1 : (mapped_bytes + g - 1) / g;
    v.range = pvmm::address_reservation::reserve((n + 3) * g).value();
    v.memory = pvmm::physical_allocation::create(n * g, default_properties()).value();
    v.range.map_and_grant(g, v.memory, {rw()}).value();
    return v;
  }
  char* mapped() const { return range.at<char>(granule()); }
};

/// Host memory the program owns (mmap): `pages_registered` pages registered, with an unregistered page either side.
struct registered_range {
  char* pages = nullptr;
  std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::size_t count = 0;  // pages registered
  pvmm::host_registration registration;
  static registered_range make(const pvmm::pinned_options& options = {}, std::size_t pages_registered = 2) {
    registered_range r;
    r.count = pages_registered;
    void* p = ::mmap(nullptr, r.mapped_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    r.pages = static_cast<char*>(p);
    r.registration = pvmm::host_registration::create(r.pages + r.page, r.count * r.page, options).value();
    return r;
  }
  std::size_t mapped_size() const { return (count + 2) * page; }
  registered_range() = default;
  registered_range(registered_range&& o) noexcept
      : pages(o.pages), page(o.page), count(o.count), registration(std::move(o.registration)) {
    o.pages = nullptr;
  }
  registered_range& operator=(registered_range&&) = delete;
  ~registered_range() {
    (void)registration.release();
    if (pages) ::munmap(pages, mapped_size());
  }
};

}  // namespace pvmm_test
