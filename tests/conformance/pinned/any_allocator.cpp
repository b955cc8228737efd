// The shared "any allocator" bodies for page-locked host memory, both kinds: pinned allocations, and registrations
// (host_registration) of memory the test maps itself. Written through the host pointer, read back in a stream's
// order. Not shareable between processes: no allocation stands behind it to export.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "any_allocator.hpp"

namespace {
using pvmm_test::any_allocator::host_visible_memory;

std::string pinned_unavailable(bool registration) {
  if (auto why = pvmm_test::no_device_reason(); !why.empty()) return why;
  const auto host = pvmm_test::caps().host_memory;
  if (!host.pinned) return "the device lacks page-locked host memory";
  if (registration && !host.registration) return "the device lacks host memory registration";
  return {};
}

struct pinned_memory : host_visible_memory {
  static constexpr const char* name = "pinned";
  using block = pvmm::pinned_allocation;
  static std::string unavailable() { return pinned_unavailable(false); }
  /// What the system answers for a lock it cannot make, as pinned.hpp says for RLIMIT_MEMLOCK.
  static pvmm::errc impossible_size_error() { return pvmm::errc::out_of_memory; }
  static pvmm::result<block> allocate(std::size_t size) { return pvmm::pinned_allocation::create(size); }
  static void* address(const block& b) { return b.data(); }
  static pvmm::status release(block& b) { return b.release(); }
  static pvmm::result<view> share(const block& b) { return share_address(b.data()); }
};

struct registered_memory : host_visible_memory {
  static constexpr const char* name = "registered";
  /// Pages the test maps itself (unmapped last) and their registration.
  struct block {
    void* data = MAP_FAILED;
    std::size_t mapped = 0;
    pvmm::host_registration registration;
    block(void* d, std::size_t n) : data(d), mapped(n) {}
    block(block&& other) noexcept
        : data(other.data), mapped(other.mapped), registration(std::move(other.registration)) {
      other.data = MAP_FAILED;
    }
    block& operator=(block&&) = delete;
    ~block() {
      registration = pvmm::host_registration();  // unregistered before its pages go
      if (data != MAP_FAILED) ::munmap(data, mapped);
    }
  };
  static std::string unavailable() { return pinned_unavailable(true); }
  /// The range [pointer, pointer + SIZE_MAX) wraps around the address space.
  static pvmm::errc impossible_size_error() { return pvmm::errc::out_of_range; }
  /// Maps the pages `size` bytes need and registers `size` bytes of them. A size no mapping can have (0, SIZE_MAX)
  /// is registered on one page, so that the refusal is pvmm's.
  static pvmm::result<block> allocate(std::size_t size) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const bool mappable = size != 0 && size <= (std::size_t{1} << 30);
    const std::size_t mapped = mappable ? (size + page - 1) / page * page : page;
    block b(::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), mapped);
    if (b.data == MAP_FAILED) {  // the test's own failure, not pvmm's (no REQUIRE: threads call this too)
      pvmm::error e;
      e.code = pvmm::errc::system_error;
      e.operation = "mmap of the test's own pages";
      e.detail = std::strerror(errno);
      return e;
    }
    auto registration = pvmm::host_registration::create(b.data, size);
    if (!registration) return std::move(registration).error();
    b.registration = std::move(*registration);
    return b;
  }
  static void* address(const block& b) { return b.data; }
  static pvmm::status release(block& b) { return b.registration.release(); }
  static pvmm::result<view> share(const block& b) { return share_address(b.data); }
};
}  // namespace

TEST_SUITE("pinned") {
  PVMM_ANY_ALLOCATOR_CASES(pinned_memory)
  PVMM_ANY_ALLOCATOR_CASES(registered_memory)
}
