// copy_async between every pair of memory kinds (pageable, VMM mapping, pool, managed, pinned, registered): the
// bytes arrive, checked through another path than the copy (memcpy for host-reachable memory, the testing
// helpers for VMM mappings, a copy into pageable memory for pool memory); and a pageable source may be overwritten
// as soon as the call returns, whatever the destination.
#include <memory>

#include "memory.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
constexpr std::size_t bytes = 64 * 1024;

/// One end of a copy: where the bytes are, and how to put them there and read them back without the copy.
struct end {
  const char* name;
  void* data;
  memory_kind kind;
};

struct ends {
  std::vector<char> pageable = std::vector<char>(bytes);
  vmm_range vmm;
  memory_pool pool;
  pool_allocation in_pool;
  managed_allocation managed;
  pinned_allocation pinned;
  std::unique_ptr<registered_range> registered;
  std::vector<end> all;
};

void write(const end& e, const std::vector<std::uint32_t>& words, stream_ref s) {
  if (e.kind == memory_kind::device) return write_words(e.data, words);
  if (e.kind == memory_kind::pool) {  // pool memory is the device's: reached through a pageable copy
    PVMM_CHECK_OK(s.copy_async(e.data, words.data(), bytes));
    PVMM_CHECK_OK(s.synchronize());
    return;
  }
  std::memcpy(e.data, words.data(), bytes);
}

std::vector<std::uint32_t> read(const end& e, stream_ref s) {
  if (e.kind == memory_kind::device) return read_words(e.data, bytes);
  std::vector<std::uint32_t> back(bytes / sizeof(std::uint32_t));
  if (e.kind == memory_kind::pool) {
    PVMM_CHECK_OK(s.copy_async(back.data(), e.data, bytes));
    PVMM_CHECK_OK(s.synchronize());
  } else {
    std::memcpy(back.data(), e.data, bytes);
  }
  return back;
}
}  // namespace

TEST_SUITE("pointer") {
  PVMM_CASE("copy_async moves the bytes between every pair of memory kinds, each checked through another path") {
    PVMM_REQUIRE_DEVICE();
    auto s = stream::create(0).value();
    ends e;
    e.all.push_back({"pageable", e.pageable.data(), memory_kind::none});
    e.vmm = vmm_range::make(bytes);
    e.all.push_back({"vmm", e.vmm.mapped(), memory_kind::device});
    if (caps().pools.supported) {
      e.pool = memory_pool::create({}).value();
      e.in_pool = e.pool.allocate(bytes, s).value();
      e.all.push_back({"pool", e.in_pool.data(), memory_kind::pool});
    }
    if (caps().managed.supported) {
      e.managed = managed_allocation::create(bytes).value();
      e.all.push_back({"managed", e.managed.data(), memory_kind::managed});
    }
    if (caps().host_memory.pinned) {
      e.pinned = pinned_allocation::create(bytes).value();
      e.all.push_back({"pinned", e.pinned.data(), memory_kind::pinned});
    }
    if (caps().host_memory.registration) {
      const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
      e.registered = std::make_unique<registered_range>(registered_range::make({}, (bytes + page - 1) / page));
      e.all.push_back({"registered", e.registered->pages + e.registered->page, memory_kind::registered});
    }
    if (e.all.size() < 6) MESSAGE("some kinds are missing here: " << 6 - e.all.size() << " (capabilities)");
    for (const auto& to : e.all) CHECK(query_pointer(to.data).value().kind == to.kind);
    std::uint32_t seed = 1;
    for (const auto& from : e.all)
      for (const auto& to : e.all) {
        if (from.data == to.data) continue;
        CAPTURE(from.name);
        CAPTURE(to.name);
        const auto words = pattern(bytes, ++seed);
        write(from, words, s);
        PVMM_CHECK_OK(s.copy_async(to.data, from.data, bytes));
        if (from.kind == memory_kind::none) std::memset(from.data, 0, bytes);  // pageable: reusable at once
        PVMM_CHECK_OK(s.synchronize());
        CHECK(read(to, s) == words);
      }
    if (e.in_pool) PVMM_CHECK_OK(e.in_pool.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
  }
}
