// What the stream, pool, managed and pinned cases share: sizes, what each feature needs before a case can run, the
// kernel's view of this process, pages the program maps itself, pools made for a case, and a host function that
// holds a stream.
#pragma once

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>

#include "support.hpp"

namespace pvmm_test {

constexpr std::size_t mib = std::size_t{1} << 20;

inline std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

inline bool host_backend() { return pvmm::query_backend().name == "host"; }

/// Whether the kernel has a mapping at `address` (/proc/self/maps).
inline bool kernel_maps(const void* address) {
  const auto a = reinterpret_cast<unsigned long>(address);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) return true;
  }
  return false;
}

/// An explicit release() that fails (the next backend call injected to fail) keeps `owner` whole: the injected
/// backend_error comes back and the owner still holds the same memory.
template <class Owner>
void check_failed_release_keeps(Owner& owner) {
  void* const data = owner.data();
  pvmm::testing::fail_nth_backend_call(1);
  auto failed = owner.release();
  pvmm::testing::fail_nth_backend_call(0);
  PVMM_CHECK_ERRC(failed, pvmm::errc::backend_error);
  REQUIRE(!failed.has_value());
  CHECK(failed.error().native_name == "PVMM_INJECTED_FAILURE");
  REQUIRE(owner.valid());
  CHECK(owner.data() == data);
}

/// Move-assignment and destructors give back without a fault-injectable step: makes three owners with `make` and
/// holds `hold()` (destroyed first), arms the next backend call to fail, move-assigns one owner over another and lets
/// every one go; no backend call may be counted meanwhile (the armed failure stays armed). Disarms; returns the data
/// of the owner destroyed at scope exit and of the one replaced, both given back.
template <class Make, class Hold>
std::pair<void*, void*> check_teardown_not_injected(Make make, Hold hold) {
  std::pair<void*, void*> gone{};
  std::size_t calls = 0;
  {
    auto dying = make();
    auto target = make();
    auto source = make();
    gone = {dying.data(), target.data()};
    auto held = hold();
    (void)held;
    calls = pvmm::testing::backend_call_count();
    pvmm::testing::fail_nth_backend_call(1);
    target = std::move(source);
    CHECK(target.valid());
    CHECK(pvmm::testing::backend_call_count() == calls);
    pvmm::testing::fail_nth_backend_call(1);  // armed for the destructors, `held`'s the first to run
  }
  CHECK(pvmm::testing::backend_call_count() == calls);
  pvmm::testing::fail_nth_backend_call(0);
  return gone;
}

/// `pages` pages the program maps itself, outside pvmm, with `prot`; unmapped at scope exit (what is still mapped).
struct program_pages {
  char* data;
  std::size_t size;
  explicit program_pages(std::size_t pages, int prot = PROT_READ | PROT_WRITE) : size(pages * page_size()) {
    void* p = ::mmap(nullptr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data = static_cast<char*>(p);
  }
  program_pages(const program_pages&) = delete;
  program_pages& operator=(const program_pages&) = delete;
  ~program_pages() { ::munmap(data, size); }  // munmap of pages unmapped already is fine
};

/// `bytes` copied from `from` on `s` into host memory, once `s` has run the copy (synchronised).
inline std::vector<std::uint32_t> read_back(pvmm::stream& s, const void* from, std::size_t bytes) {
  std::vector<std::uint32_t> back(bytes / sizeof(std::uint32_t));
  PVMM_CHECK_OK(s.copy_async(back.data(), from, bytes));
  PVMM_CHECK_OK(s.synchronize());
  return back;
}

/// Writes pattern(bytes, seed) to `at` by a copy on `s`, and checks that a copy back on `s` reads it.
inline void check_round_trip(pvmm::stream& s, void* at, std::size_t bytes, std::uint32_t seed) {
  const auto words = pattern(bytes, seed);
  PVMM_CHECK_OK(s.copy_async(at, words.data(), bytes));
  CHECK(read_back(s, at, bytes) == words);
}

/// Attaches all of managed `memory` to `s` alone, checks that a copy on `s` writes it in the stream's order after
/// (pattern(size, seed), read by the host once `s` is synchronised), then attaches it to every stream again.
inline void check_attach_to_stream_then_global(pvmm::managed_allocation& memory, pvmm::stream& s, std::uint32_t seed) {
  PVMM_CHECK_OK(pvmm::attach_async(memory.data(), memory.size(), pvmm::attach_mode::single, s));
  const auto words = pattern(memory.size(), seed);
  PVMM_CHECK_OK(s.copy_async(memory.data(), words.data(), memory.size()));
  PVMM_CHECK_OK(s.synchronize());
  CHECK(std::memcmp(memory.data(), words.data(), memory.size()) == 0);
  PVMM_CHECK_OK(pvmm::attach_async(memory.data(), memory.size(), pvmm::attach_mode::global, s));
  PVMM_CHECK_OK(s.synchronize());
}

/// A pool made for one case (REQUIRE: a case cannot go on without it).
inline pvmm::memory_pool make_pool(const pvmm::pool_properties& properties = {}) {
  auto pool = pvmm::memory_pool::create(properties);
  PVMM_REQUIRE_VALUE(pool);
  return std::move(*pool);
}

/// A host function that holds its stream until the test opens the gate, or 10 s have passed (a failing case never
/// hangs on it).
struct gate {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
  static void hold(void* p) {
    auto* g = static_cast<gate*>(p);
    g->entered = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!g->open && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

}  // namespace pvmm_test

/// A device with memory pools.
#define PVMM_REQUIRE_POOLS()                                                    \
  do {                                                                          \
    PVMM_REQUIRE_DEVICE();                                                      \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().pools.supported, "memory pools"); \
  } while (0)
/// Managed memory, with `free_mib` MiB of the device free (a managed request near the limit can hang a GPU).
#define PVMM_REQUIRE_MANAGED(free_mib)                                                       \
  do {                                                                                       \
    PVMM_REQUIRE_DEVICE();                                                                   \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().managed.supported, "managed memory");          \
    PVMM_REQUIRE_CAPABILITY(pvmm::query_memory(0).value().free >= (free_mib)*pvmm_test::mib, \
                            std::to_string(free_mib) + " MiB of free memory");               \
  } while (0)
#define PVMM_REQUIRE_PINNED()                                                                 \
  do {                                                                                        \
    PVMM_REQUIRE_DEVICE();                                                                    \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().host_memory.pinned, "page-locked host memory"); \
  } while (0)
#define PVMM_REQUIRE_REGISTRATION()                                                                  \
  do {                                                                                               \
    PVMM_REQUIRE_PINNED();                                                                           \
    PVMM_REQUIRE_CAPABILITY(pvmm_test::caps().host_memory.registration, "host memory registration"); \
  } while (0)
