// Streams and events: real ordering on every backend (the host backend's streams are worker threads).
#include <atomic>
#include <chrono>
#include <thread>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {
/// One granule of device 0 memory, mapped and granted.
struct device_buffer {
  std::size_t size = granule();
  physical_allocation memory = physical_allocation::create(size, default_properties()).value();
  address_reservation range = address_reservation::reserve(reservation_granularity().value()).value();
  void* data = range.map_and_grant(0, memory, {rw()}).value();
  ~device_buffer() { (void)range.unmap(0, size); }
};
}  // namespace

TEST_SUITE("stream") {
  PVMM_CASE("data written on one stream is read on another after an event") {
    PVMM_REQUIRE_DEVICE();
    device_buffer buffer;
    auto writer = stream::create(0).value();
    auto reader = stream::create(0).value();
    auto written = event::create(0).value();
    const auto words = pattern(buffer.size, 71);
    PVMM_CHECK_OK(writer.copy_async(buffer.data, words.data(), buffer.size));
    PVMM_CHECK_OK(written.record(writer));
    PVMM_CHECK_OK(reader.wait(written));
    CHECK(read_back(reader, buffer.data, buffer.size) == words);
    CHECK(written.query().value());
  }

  PVMM_CASE("a blocked stream is not complete, later work and its events wait, a host function runs in order") {
    PVMM_REQUIRE_DEVICE();
    auto s = stream::create(0).value();
    auto after = event::create(0).value();
    gate g;
    PVMM_CHECK_OK(s.launch_host_function(gate::hold, &g));
    std::atomic<int> order{0};
    auto second = [](void* p) { static_cast<std::atomic<int>*>(p)->store(2); };
    PVMM_CHECK_OK(s.launch_host_function(second, &order));
    PVMM_CHECK_OK(after.record(s));
    while (!g.entered) std::this_thread::sleep_for(1ms);
    CHECK_FALSE(s.query().value());
    CHECK_FALSE(after.query().value());
    CHECK(order.load() == 0);
    g.open = true;
    PVMM_CHECK_OK(after.synchronize());
    CHECK(order.load() == 2);
    CHECK(s.query().value());
  }

  PVMM_CASE("a pageable source may be reused as soon as copy_async returns") {
    PVMM_REQUIRE_DEVICE();
    device_buffer buffer;
    auto s = stream::create(0).value();
    auto words = pattern(buffer.size, 72);
    const auto sent = words;
    PVMM_CHECK_OK(s.copy_async(buffer.data, words.data(), buffer.size));
    std::fill(words.begin(), words.end(), 0u);  // reused at once
    PVMM_CHECK_OK(s.synchronize());
    CHECK(read_words(buffer.data, buffer.size) == sent);
  }

  PVMM_CASE("an event never recorded is complete, and waiting on it waits for nothing") {
    PVMM_REQUIRE_DEVICE();
    auto s = stream::create(0).value();
    auto e = event::create(0).value();
    CHECK(e.query().value());
    PVMM_CHECK_OK(e.synchronize());
    PVMM_CHECK_OK(s.wait(e));
    PVMM_CHECK_OK(s.synchronize());
  }

  PVMM_CASE("streams and events: every bad input has its error, before any driver call") {
    PVMM_REQUIRE_DEVICE();
    const int n = device_count().value();  // a backend call: before counting
    const std::size_t calls = testing::backend_call_count();
    PVMM_CHECK_ERRC(stream_ref().synchronize(), errc::invalid_argument);
    PVMM_CHECK_ERRC(stream_ref().query(), errc::invalid_argument);
    PVMM_CHECK_ERRC(stream::create(n), errc::invalid_device);
    PVMM_CHECK_ERRC(stream::create(-1), errc::invalid_device);
    PVMM_CHECK_ERRC(event::create(n), errc::invalid_device);
    PVMM_CHECK_ERRC(stream_ref(stream_handle{1}, n).synchronize(), errc::invalid_device);
    CHECK(testing::backend_call_count() == calls);
    auto s = stream::create(0).value();
    PVMM_CHECK_ERRC(s.launch_host_function(nullptr, nullptr), errc::invalid_argument);
    PVMM_CHECK_ERRC(s.copy_async(nullptr, &calls, sizeof calls), errc::invalid_argument);
    PVMM_CHECK_OK(s.copy_async(nullptr, nullptr, 0));  // nothing to copy
    event empty;
    PVMM_CHECK_ERRC(s.wait(empty), errc::already_released);
    PVMM_CHECK_ERRC(empty.record(s), errc::already_released);
    PVMM_CHECK_ERRC(empty.release(), errc::already_released);
    PVMM_CHECK_OK(s.release());
    PVMM_CHECK_ERRC(s.release(), errc::already_released);
    PVMM_CHECK_ERRC(s.synchronize(), errc::invalid_argument);  // released: empty
  }

  PVMM_CASE("a stream's destructor lets its work finish first") {
    PVMM_REQUIRE_DEVICE();
    std::atomic<int> ran{0};
    {
      auto s = stream::create(0).value();
      auto slow = [](void* p) {
        std::this_thread::sleep_for(20ms);
        static_cast<std::atomic<int>*>(p)->fetch_add(1);
      };
      for (int i = 0; i < 3; ++i) PVMM_CHECK_OK(s.launch_host_function(slow, &ran));
    }
    CHECK(ran.load() == 3);
  }
}  // TEST_SUITE
