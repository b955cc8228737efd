// Page-locked host memory: async copies from pinned memory; a pageable source reused right after copy_async returns;
// the device pointer; registration of memory the program has, twice and unknown; a lock the system refuses
// (RLIMIT_MEMLOCK, in a child without CAP_IPC_LOCK); every bad input with its error.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

/// Device memory of `size` bytes mapped for device 0 (every backend has VMM).
struct device_buffer {
  physical_allocation memory;
  address_reservation range;
  void* data = nullptr;
  explicit device_buffer(std::size_t size) {
    const std::size_t g = granule();
    const std::size_t rounded = (size + g - 1) / g * g;
    memory = physical_allocation::create(rounded, default_properties()).value();
    range = address_reservation::reserve(rounded).value();
    data = range.map_and_grant(0, memory, {rw()}).value();
  }
  ~device_buffer() { (void)range.unmap(0, memory.size()); }
};

/// Page-aligned memory the program owns, outside pvmm.
struct program_memory {
  void* data;
  std::size_t size;
  explicit program_memory(std::size_t n) : size(n) {
    data = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(data != MAP_FAILED);
  }
  ~program_memory() { ::munmap(data, size); }
};
}  // namespace

TEST_SUITE("pinned") {
  PVMM_CASE("copies from pinned memory run in stream order and bring the data back") {
    PVMM_REQUIRE_PINNED();
    const std::size_t size = 4 * mib;
    auto source = pinned_allocation::create(size).value();
    auto target = pinned_allocation::create(size).value();
    device_buffer device(size);
    auto s = stream::create(0).value();
    const auto words = pattern(size, 41);
    std::memcpy(source.data(), words.data(), size);
    PVMM_CHECK_OK(s.copy_async(device.data, source.data(), size));
    PVMM_CHECK_OK(s.copy_async(target.data(), device.data, size));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(std::memcmp(target.data(), words.data(), size) == 0);
  }

  PVMM_CASE("a pageable source may be reused as soon as copy_async returns") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t size = 4 * mib;
    device_buffer device(size);
    auto s = stream::create(0).value();
    auto source = pattern(size, 42);
    const auto expected = source;
    PVMM_CHECK_OK(s.copy_async(device.data, source.data(), size));
    std::fill(source.begin(), source.end(), 0xdeadbeefu);  // at once: the copy must not see this
    std::vector<std::uint32_t> back(expected.size());
    PVMM_CHECK_OK(s.copy_async(back.data(), device.data, size));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(back == expected);
  }

  PVMM_CASE("the device pointer of pinned memory reaches the same bytes") {
    PVMM_REQUIRE_PINNED();
    PVMM_REQUIRE_CAPABILITY(caps().host_memory.mapped, "mapped page-locked memory");
    auto memory = pinned_allocation::create(mib).value();
    void* on_device = memory.device_pointer(0).value();
    if (caps().host_memory.device_pointer_is_host_pointer) CHECK(on_device == memory.data());
    const auto words = pattern(mib, 43);
    std::memcpy(memory.data(), words.data(), mib);
    auto s = stream::create(0).value();
    CHECK(read_back(s, on_device, mib) == words);
    PVMM_CHECK_ERRC(memory.device_pointer(99), errc::invalid_device);
    auto unmapped = pinned_allocation::create(mib, {true, false, false}).value();
    PVMM_CHECK_ERRC(unmapped.device_pointer(0), errc::invalid_argument);
  }

  PVMM_CASE("registered memory: copies through it, registering twice and unregistering the unknown are refused") {
    PVMM_REQUIRE_PINNED();
    PVMM_REQUIRE_CAPABILITY(caps().host_memory.registration, "host memory registration");
    program_memory mine(2 * mib);
    auto* p = static_cast<char*>(mine.data);
    {
      auto held = host_registration::create(p, mib).value();
      PVMM_CHECK_ERRC(host_registration::create(p, mib), errc::already_registered);
      PVMM_CHECK_ERRC(register_host_memory(p + 4096, 8192), errc::already_registered);            // inside it
      PVMM_CHECK_ERRC(register_host_memory(p - 4096 + mib, 2 * 4096), errc::already_registered);  // across its end
      PVMM_CHECK_ERRC(unregister_host_memory(p + 4096), errc::not_registered);                    // not its start
      PVMM_CHECK_OK(register_host_memory(p + mib, mib));                                          // next to it: fine
      PVMM_CHECK_OK(unregister_host_memory(p + mib));
      const auto words = pattern(mib, 44);
      std::memcpy(p, words.data(), mib);
      device_buffer device(mib);
      auto s = stream::create(0).value();
      PVMM_CHECK_OK(s.copy_async(device.data, p, mib));
      CHECK(read_back(s, device.data, mib) == words);
      if (caps().host_memory.mapped && caps().host_memory.device_pointer_is_host_pointer)
        CHECK(held.device_pointer(0).value() == static_cast<void*>(p));
    }
    PVMM_CHECK_ERRC(unregister_host_memory(p), errc::not_registered);  // the owner unregistered it
  }

  PVMM_CASE("page-locked memory: every bad input, with its error") {
    PVMM_REQUIRE_PINNED();
    PVMM_CHECK_ERRC(pinned_allocation::create(0), errc::invalid_size);
    program_memory mine(mib);
    PVMM_CHECK_ERRC(register_host_memory(nullptr, mib), errc::invalid_argument);
    PVMM_CHECK_ERRC(register_host_memory(mine.data, 0), errc::invalid_size);
    PVMM_CHECK_ERRC(register_host_memory(mine.data, mib, {true, true, true}),
                    errc::invalid_argument);  // write-combined
    PVMM_CHECK_ERRC(unregister_host_memory(mine.data), errc::not_registered);
    auto memory = pinned_allocation::create(mib).value();
    check_release_twice(memory);
    PVMM_CHECK_ERRC(memory.device_pointer(0), errc::already_released);
  }

  PVMM_CASE(
      "host backend: a lock over RLIMIT_MEMLOCK is out_of_memory naming the limit (a child without CAP_IPC_LOCK)") {
    PVMM_REQUIRE_PINNED();
    PVMM_REQUIRE_HOST_BACKEND(
        "the GPU drivers pin through their own kernel module, which RLIMIT_MEMLOCK does not bound");
    auto [sock, pid] = spawn_child({"pin-over-limit"});
    auto verdict = ipc::receive_fds(sock, 0, 4096, 60s).value();
    CHECK(std::string(verdict.payload.begin(), verdict.payload.end()) == "ok");
    CHECK(wait_child(pid) == 0);
    ::close(sock);
  }
}  // TEST_SUITE
