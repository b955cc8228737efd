// Stream contract cases on every backend: borrowed native streams, and copies from pageable host memory that the
// caller reuses as soon as copy_async returns.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {}  // namespace

TEST_SUITE("stream") {
  PVMM_CASE("a borrowed native stream carries copies, allocations and frees, its owner outlives the borrower") {
    PVMM_REQUIRE_POOLS();
    auto owner = stream::create(0).value();
    auto pool = memory_pool::create({}).value();
    const auto streams = query_live_objects().streams;
    const auto words = pattern(mib, 93);
    std::vector<std::uint32_t> back(words.size());
    {
      const stream_ref borrowed(owner.native_handle(), owner.device());
      auto m = pool.allocate(mib, borrowed).value();
      void* raw = pool.allocate_async(mib, borrowed).value();
      PVMM_CHECK_OK(borrowed.copy_async(m.data(), words.data(), mib));
      PVMM_CHECK_OK(borrowed.copy_async(raw, m.data(), mib));
      PVMM_CHECK_OK(borrowed.copy_async(back.data(), raw, mib));
      PVMM_CHECK_OK(pool.free_async(raw, borrowed));
      PVMM_CHECK_OK(m.free_async(borrowed));
      PVMM_CHECK_OK(borrowed.synchronize());
      CHECK(borrowed.query().value());
      CHECK(query_live_objects().streams == streams);  // borrowing made no stream
    }
    CHECK(back == words);
    CHECK(pool.usage().value().used_current == 0);  // frees on the borrowed stream ran on the owner's
    // The borrower is gone; the owner's stream is untouched and still works.
    CHECK(owner.valid());
    CHECK(query_live_objects().streams == streams);
    auto m = pool.allocate(mib, owner).value();
    PVMM_CHECK_OK(owner.copy_async(m.data(), words.data(), mib));
    std::vector<std::uint32_t> again(words.size());
    PVMM_CHECK_OK(owner.copy_async(again.data(), m.data(), mib));
    PVMM_CHECK_OK(m.free_async(owner));
    PVMM_CHECK_OK(owner.synchronize());
    CHECK(again == words);
    const stream_handle native = owner.native_handle();
    PVMM_CHECK_OK(owner.release());
    if (query_backend().name == "host") {  // a handle the host backend never gave out, or one released, is refused
      PVMM_CHECK_ERRC(stream_ref(stream_handle{0x1234}, 0).synchronize(), errc::invalid_handle);
      PVMM_CHECK_ERRC(stream_ref(native, 0).synchronize(), errc::invalid_handle);
    }
  }

  PVMM_CASE("copy_async from pageable host memory: the caller may overwrite the source once the call returns") {
    PVMM_REQUIRE_POOLS();
    auto pool = memory_pool::create({}).value();
    auto s = stream::create(0).value();
    const std::size_t size = 8 * mib;
    auto m = pool.allocate(size, s).value();
    // Earlier work on the stream (20 ms) that a copy reading its source in stream order would run after.
    PVMM_CHECK_OK(
        s.launch_host_function([](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, nullptr));
    const auto old = pattern(size, 94);
    auto source = old;  // plain std::vector memory: pageable
    PVMM_CHECK_OK(s.copy_async(m.data(), source.data(), size));
    std::fill(source.begin(), source.end(), 0xdeadbeefu);  // reused at once, as the drivers allow
    std::vector<std::uint32_t> back(old.size());
    PVMM_CHECK_OK(s.copy_async(back.data(), m.data(), size));
    PVMM_CHECK_OK(m.free_async(s));
    PVMM_CHECK_OK(s.synchronize());
    CHECK(back == old);
  }
}  // TEST_SUITE
