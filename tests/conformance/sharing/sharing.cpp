// Export and import: in one process, and with a separately exec'd process over a Unix socket.
#include <string>

#include "posix_fd_export.hpp"

using namespace pvmm;
using namespace pvmm_test;

TEST_SUITE("sharing") {
  PVMM_CASE("export as POSIX fd and import in the same process: one memory, two allocations") {
    PVMM_REQUIRE_DEVICE();
    if (!posix_fd_exports_or_refused()) return;
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(2 * g).value();
    range.map_and_grant(0, memory, 0, g, {rw()}).value();
    write_words(range.address(), pattern(g, 20));
    physical_allocation imported;
    {
      owned_fd fd = memory.export_posix_fd().value();
      CHECK(fd.valid());
      imported = physical_allocation::import_posix_fd(fd.get(), g).value();
    }  // invariant 7: the fd is closed here; the import holds its own reference
    CHECK(imported.size() == g);
    CHECK(imported.properties().value().location == location::device(0));
    range.map_and_grant(g, imported, 0, g, {rw()}).value();
    CHECK(read_words(range.at(g), g) == pattern(g, 20));
    write_words(range.at(g), pattern(g, 21));
    CHECK(read_words(range.address(), g) == pattern(g, 21));
  }

  PVMM_CASE("an exported fd keeps the memory alive after every owner is gone") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    owned_fd fd;
    {
      auto memory = physical_allocation::create(g, default_properties()).value();
      auto range = address_reservation::reserve(g).value();
      range.map_and_grant(0, memory, 0, g, {rw()}).value();
      write_words(range.address(), pattern(g, 22));
      fd = memory.export_posix_fd().value();
    }
    auto again = physical_allocation::import_posix_fd(fd.get(), g).value();
    fd.reset();
    auto range = address_reservation::reserve(g).value();
    CHECK(read_words(range.map_and_grant(0, again, 0, g, {rw()}).value(), g) == pattern(g, 22));
  }

  PVMM_CASE("export to a separately exec'd process over SCM_RIGHTS: the child writes, the parent sees it") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(g).value();
    range.map_and_grant(0, memory, 0, g, {rw()}).value();
    write_words(range.address(), pattern(g, 30));
    auto [sock, pid] = spawn_child({"import-write", "0", std::to_string(g), "30", "31"});
    send_for_import(sock, memory);
    auto reply = ipc::receive_fds(sock, 0, 4096, std::chrono::milliseconds(60000));
    PVMM_CHECK_OK(reply);
    if (reply) {
      std::string text(reply->payload.begin(), reply->payload.end());
      CHECK_MESSAGE(text == "ok", "child said: " << text);
    }
    ::close(sock);
    CHECK(wait_child(pid) == 0);
    CHECK(read_words(range.address(), g) == pattern(g, 31));
  }

  PVMM_CASE("fabric handles: a round trip, or the exact refusal") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    allocation_properties p = default_properties();
    p.exportable = handle_types::fabric;
    auto memory = physical_allocation::create(g, p);
    if (!caps().sharing.fabric) {
      PVMM_CHECK_ERRC(memory, errc::not_supported);
      return;
    }
    if (!memory) {
      PVMM_CHECK_ERRC(memory, errc::not_permitted);
      CHECK(memory.error().hint.find("IMEX") != std::string::npos);
      return;
    }
    auto handle = memory->export_fabric();
    if (!handle) {
      PVMM_CHECK_ERRC(handle, errc::not_permitted);
      return;
    }
    auto range = address_reservation::reserve(2 * g).value();
    range.map_and_grant(0, *memory, 0, g, {rw()}).value();
    write_words(range.address(), pattern(g, 40));
    auto imported = physical_allocation::import_fabric(*handle, g).value();
    range.map_and_grant(g, imported, 0, g, {rw()}).value();
    CHECK(read_words(range.at(g), g) == pattern(g, 40));
  }

}  // TEST_SUITE
