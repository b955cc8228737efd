// Hardening round 3 (issue 23): stream cases, each pinning a defect an attacker found.
#include <dirent.h>

#include "memory_kinds.hpp"

using namespace pvmm;
using namespace pvmm_test;
using namespace std::chrono_literals;

namespace {

/// The host backend's streams are its own threads; the GPU drivers' are not (cases about those threads skip).
#define PVMM_REQUIRE_HOST_STREAMS()                                                           \
  PVMM_REQUIRE_HOST_BACKEND(                                                                  \
      "the case is about the host backend's worker threads; a driver's streams have none of " \
      "ours")

}  // namespace

TEST_SUITE("stream") {
  PVMM_CASE("stream::create never throws: no thread left to start is system_error naming the limit, leaking nothing") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_STREAMS();
    auto [sock, pid] = spawn_child({"stream-without-threads"});
    auto verdict = ipc::receive_fds(sock, 0, 4096, 60s);
    const std::string said = verdict ? std::string(verdict->payload.begin(), verdict->payload.end())
                                     : "no answer: " + verdict.error().message();
    const int status = wait_child(pid);
    ::close(sock);
    PVMM_SKIP_UNLESS(said.rfind("skip: ", 0) != 0, said.substr(6));  // the child could not set the case up
    CHECK_MESSAGE(said == "ok", said);
    CHECK_MESSAGE(status == 0, "the child exited with " << status);
  }

  PVMM_CASE("a released stream's handle is invalid_handle everywhere, even once a new stream takes its place") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_STREAMS();
    auto first = stream::create(0).value();
    const stream_ref stale = first;
    PVMM_CHECK_OK(first.release());
    // The next stream is allocated where the first one was (an address-keyed handle would come back).
    auto second = stream::create(0).value();
    CHECK(second.native_handle().value != stale.native_handle().value);
    auto e = event::create(0).value();
    PVMM_CHECK_ERRC(e.record(stale), errc::invalid_handle);
    PVMM_CHECK_ERRC(stale.synchronize(), errc::invalid_handle);
    PVMM_CHECK_ERRC(stale.query(), errc::invalid_handle);
    PVMM_CHECK_ERRC(stale.wait(e), errc::invalid_handle);
    int ran = 0;
    PVMM_CHECK_ERRC(stale.launch_host_function([](void* p) { ++*static_cast<int*>(p); }, &ran), errc::invalid_handle);
    std::uint32_t from = 0x5eed, to = 0;
    PVMM_CHECK_ERRC(stale.copy_async(&to, &from, sizeof from), errc::invalid_handle);
    auto pool = memory_pool::default_pool(0);
    if (pool) PVMM_CHECK_ERRC(pool->allocate(4096, stale), errc::invalid_handle);
    // Nothing of that reached the new stream; it works.
    PVMM_CHECK_OK(second.copy_async(&to, &from, sizeof from));
    PVMM_CHECK_OK(second.synchronize());
    CHECK(ran == 0);
    CHECK(to == 0x5eed);
    // An event's handle is not a stream's, nor the other way round.
    PVMM_CHECK_ERRC(stream_ref(stream_handle{e.native_handle().value}, 0).synchronize(), errc::invalid_handle);
  }

  PVMM_CASE("a released event's handle is never reused by a new event") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_STREAMS();
    auto first = event::create(0).value();
    const auto stale = first.native_handle().value;
    PVMM_CHECK_OK(first.release());
    auto second = event::create(0).value();
    CHECK(second.native_handle().value != stale);
    auto s = stream::create(0).value();
    CHECK(second.native_handle().value != s.native_handle().value);
    PVMM_CHECK_OK(second.record(s));
    PVMM_CHECK_OK(second.synchronize());
  }

  PVMM_CASE("a released stream's thread is joined once its work is done, even while an event recorded on it lives") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_HOST_STREAMS();
    const std::size_t threads = live_thread_count();
    auto s = stream::create(0).value();
    CHECK(live_thread_count() == threads + 1);
    std::uint32_t from = 0xfeed, to = 0;
    PVMM_CHECK_OK(s.copy_async(&to, &from, sizeof from));
    auto e = event::create(0).value();
    PVMM_CHECK_OK(e.record(s));
    PVMM_CHECK_OK(s.release());
    CHECK(to == 0xfeed);  // release waited for the work
    CHECK_MESSAGE(live_thread_count() == threads, "the released stream's worker thread still runs");
    // The event still answers, and another stream can still wait for it.
    CHECK(e.query().value());
    PVMM_CHECK_OK(e.synchronize());
    auto other = stream::create(0).value();
    PVMM_CHECK_OK(other.wait(e));
    std::uint32_t again = 0;
    PVMM_CHECK_OK(other.copy_async(&again, &to, sizeof to));
    PVMM_CHECK_OK(other.synchronize());
    CHECK(again == 0xfeed);
  }
}  // TEST_SUITE
