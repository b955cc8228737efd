// Several devices: per-device access control, striping, read-only peers, and cross-device export/import.
#include "posix_fd_export.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("multi-device") {
  PVMM_CASE("access granted to the peer device, and only to it") {
    PVMM_REQUIRE_DEVICES(2);
    const std::size_t g = granule(0);
    auto memory = physical_allocation::create(g, default_properties(0)).value();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map_and_grant(0, memory, 0, g, {rw(1)}).value();
    CHECK(query_access(location::device(1), p).value() == access::read_write);
    CHECK(query_access(location::device(0), p).value() == access::none);
    write_words(p, pattern(g, 70), 1);  // the peer writes into device 0's memory
    CHECK(read_words(p, g, 1) == pattern(g, 70));
    PVMM_CHECK_OK(range.set_access(0, g, {rw(0)}));
    CHECK(read_words(p, g, 0) == pattern(g, 70));
  }

  PVMM_CASE("one reservation striped with chunks from every device") {
    PVMM_REQUIRE_DEVICES(2);
    const int devices = device_count().value();
    std::size_t g = 0;
    for (int d = 0; d < devices; ++d) g = std::max(g, granule(d));
    const std::size_t chunks = 2 * static_cast<std::size_t>(devices);
    auto range = address_reservation::reserve(chunks * g).value();
    std::vector<physical_allocation> memory;
    for (std::size_t i = 0; i < chunks; ++i) {
      int d = static_cast<int>(i % devices);
      memory.push_back(physical_allocation::create(g, default_properties(d)).value());
      range.map(i * g, memory.back(), 0, g).value();
    }
    std::vector<access_descriptor> all;
    for (int d = 0; d < devices; ++d) all.push_back(rw(d));
    PVMM_CHECK_OK(range.set_access(0, chunks * g, all.data(), all.size()));
    auto words = pattern(chunks * g, 71);
    write_words(range.address(), words, 0);
    for (int d = 0; d < devices; ++d) CHECK(read_words(range.address(), chunks * g, d) == words);
    for (std::size_t i = 0; i < chunks; ++i)
      CHECK(memory[i].properties().value().location == location::device(static_cast<int>(i % devices)));
  }

  PVMM_CASE("a peer reads through a read-only grant") {
    PVMM_REQUIRE_DEVICES(2);
    const std::size_t g = granule(0);
    auto memory = physical_allocation::create(g, default_properties(0)).value();
    auto range = address_reservation::reserve(g).value();
    void* p = range.map(0, memory, 0, g).value();
    PVMM_CHECK_OK(range.set_access(0, g, {rw(0), ro(1)}));
    CHECK(query_access(location::device(1), p).value() == access::read);
    write_words(p, pattern(g, 72), 0);
    CHECK(read_words(p, g, 1) == pattern(g, 72));
  }

  PVMM_CASE("exported on device 0, imported, mapped and written on device 1 by an exec'd process") {
    PVMM_REQUIRE_DEVICES(2);
    PVMM_REQUIRE_CAPABILITY(caps(0).sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule(0);
    auto memory = physical_allocation::create(g, default_properties(0)).value();
    auto range = address_reservation::reserve(g).value();
    range.map_and_grant(0, memory, 0, g, {rw(0)}).value();
    write_words(range.address(), pattern(g, 73));
    auto [sock, pid] = spawn_child({"import-write", "1", std::to_string(g), "73", "74"});
    send_for_import(sock, memory);
    auto reply = ipc::receive_fds(sock, 0, 4096, std::chrono::milliseconds(60000));
    ::close(sock);
    CHECK(wait_child(pid) == 0);
    REQUIRE(reply);
    CHECK(std::string(reply->payload.begin(), reply->payload.end()) == "ok");
    CHECK(read_words(range.address(), g, 0) == pattern(g, 74));
  }

}  // TEST_SUITE
