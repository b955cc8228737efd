// The fd transport and buffer descriptors: peer credentials, pidfd_getfd, peers that die, descriptors that lie.
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <string>

#include "buffers.hpp"

using namespace pvmm;
using namespace pvmm_test;

namespace {
/// `count` chunks of a granule holding pattern(count granules, seed), seen through `view`, and their export as POSIX
/// fds: what a buffer's exporter holds.
struct exported_chunks {
  address_reservation view;
  std::vector<physical_allocation> chunks;
  exported_buffer exported;
  exported_chunks(std::size_t count, std::uint32_t seed)
      : view(address_reservation::reserve(count * granule()).value()),
        chunks(granule_allocations(count)),
        exported(map_and_export()) {
    write_words(view.address(), pattern(view.size(), seed));
  }
  exported_buffer map_and_export() {
    const std::size_t g = granule();
    for (std::size_t i = 0; i < chunks.size(); ++i) view.map(i * g, chunks[i], 0, g).value();
    view.set_access(0, view.size(), {rw()}).value();
    return export_buffer(chunks, handle_types::posix_fd).value();
  }
};
}  // namespace

TEST_SUITE("transport") {
  PVMM_CASE("several fds in one message, each received fd owned") {
    socket_pair s;
    int p1[2], p2[2];
    REQUIRE(::pipe(p1) == 0);
    REQUIRE(::pipe(p2) == 0);
    int send[] = {p1[1], p2[1]};
    PVMM_CHECK_OK(ipc::send_fds(s.a, send, 2, "two", 3));
    auto got = ipc::receive_fds(s.b, 4, 16).value();
    REQUIRE(got.fds.size() == 2);
    CHECK(std::string(got.payload.begin(), got.payload.end()) == "two");
    CHECK(::write(got.fds[1].get(), "x", 1) == 1);  // the received fd is the pipe's write end
    char c = 0;
    CHECK(::read(p2[0], &c, 1) == 1);
    CHECK(c == 'x');
    for (int fd : {p1[0], p1[1], p2[0], p2[1]}) ::close(fd);
  }

  PVMM_CASE("peer credentials: the same user passes, another uid is rejected and the fds are closed") {
    socket_pair s;
    auto who = ipc::query_peer(s.b).value();
    CHECK(who.pid == ::getpid());
    CHECK(who.uid == ::geteuid());
    PVMM_CHECK_OK(ipc::check_peer(s.b, ipc::peer_rule::same_user()));
    ipc::peer_rule stranger;
    stranger.uid = ::geteuid() + 1;
    PVMM_CHECK_ERRC(ipc::check_peer(s.b, stranger), errc::peer_rejected);
    int p[2];
    REQUIRE(::pipe(p) == 0);
    PVMM_CHECK_OK(ipc::send_fds(s.a, &p[0], 1, "x", 1));
    PVMM_CHECK_ERRC(ipc::receive_fds(s.b, 1, 16, std::chrono::milliseconds(1000), &stranger), errc::peer_rejected);
    ::close(p[0]);
    ::close(p[1]);  // the leak check proves the rejected message's fd was closed
  }

  PVMM_CASE("a peer that dies mid-transfer: the first message arrives, the second reports the closed peer") {
    auto [sock, pid] = spawn_child({"die-mid-transfer"});
    auto first = ipc::receive_fds(sock, 1, 64, std::chrono::milliseconds(10000));
    PVMM_CHECK_OK(first);
    const auto lost = ipc::receive_fds(sock, 4, 64, std::chrono::milliseconds(10000));
    PVMM_CHECK_ERRC(lost, errc::peer_lost);
    CHECK(lost.error().detail.find("closed the connection") != std::string::npos);
    ::close(sock);
    CHECK(wait_child(pid) == 3);
  }

  PVMM_CASE("pidfd_getfd takes a child's fd, or says exactly which permission is missing") {
    auto [sock, pid] = spawn_child({"hold-fd"});
    auto number = ipc::receive_fds(sock, 0, 32).value();
    int remote = std::stoi(std::string(number.payload.begin(), number.payload.end()));
    auto taken = ipc::take_fd_from_process(pid, remote);
    if (taken) {
      char text[32] = {};
      CHECK(::read(taken->get(), text, sizeof text) > 0);
      CHECK(std::string(text) == "hello from the child");
    } else if (taken.code() == errc::not_permitted) {
      CHECK(taken.error().hint.find("ptrace_scope") != std::string::npos);
    } else {
      CHECK_MESSAGE(taken.code() == errc::not_supported, taken.error().message());
    }
    // A fd the child does not have: "no such fd" where taking is allowed, the same refusal where it is not.
    PVMM_CHECK_ERRC(ipc::take_fd_from_process(pid, 987654), taken ? errc::invalid_argument : taken.code());
    ::close(sock);
    CHECK(wait_child(pid) == 0);
  }

  PVMM_CASE("pidfd_getfd: a process that does not exist") {
    auto r = ipc::take_fd_from_process(0x3ffffff0, 0);
    CHECK_MESSAGE((r.code() == errc::invalid_argument || r.code() == errc::not_supported), r.error().message());
  }

  PVMM_CASE("a descriptor survives serialization exactly") {
    buffer_descriptor d;
    d.device = 3;
    d.size = 3 * 4096;
    for (std::uint32_t i = 0; i < 3; ++i) {
      chunk_descriptor c;
      c.offset = i * 4096u;
      c.size = 4096;
      c.fd_slot = 2 - i;
      c.fabric.bytes[i] = 0xAB;
      d.chunks.push_back(c);
    }
    auto bytes = d.serialize();
    auto back = buffer_descriptor::parse(bytes.data(), bytes.size(), 3).value();
    CHECK(back.device == 3);
    CHECK(back.size == d.size);
    REQUIRE(back.chunks.size() == 3);
    for (int i = 0; i < 3; ++i) {
      CHECK(back.chunks[i].offset == d.chunks[i].offset);
      CHECK(back.chunks[i].fd_slot == d.chunks[i].fd_slot);
      CHECK(back.chunks[i].fabric == d.chunks[i].fabric);
    }
  }

  PVMM_CASE("malformed descriptors are rejected, each with its reason") {
    buffer_descriptor d;
    d.size = 2 * 4096;
    d.chunks = {chunk_descriptor{0, 4096, 0, {}}, chunk_descriptor{4096, 4096, 1, {}}};
    const auto good = d.serialize();
    auto reject = [](std::vector<std::uint8_t> bytes, std::size_t fds, const char* why) {
      auto r = buffer_descriptor::parse(bytes.data(), bytes.size(), fds);
      CHECK_MESSAGE(r.code() == errc::protocol_error, why);
      if (!r) CHECK_MESSAGE(r.error().detail.find(why) != std::string::npos, r.error().detail);
    };
    reject(std::vector<std::uint8_t>(good.begin(), good.begin() + 20), 2, "shorter than");
    reject(std::vector<std::uint8_t>(good.begin(), good.end() - 1), 2, "truncated");
    auto extra = good;
    extra.push_back(0);
    reject(extra, 2, "trailing bytes");
    auto bad_magic = good;
    bad_magic[0] = 'X';
    reject(bad_magic, 2, "magic");
    auto bad_version = good;
    bad_version[8] = 9;
    reject(bad_version, 2, "version");
    reject(good, 1, "fd slot 1");  // only one fd arrived
    auto lie = d;
    lie.chunks[1].offset = 8192;  // a gap
    reject(lie.serialize(), 2, "starts at");
    lie = d;
    lie.size = 3 * 4096;  // says more than the chunks cover
    reject(lie.serialize(), 2, "cover");
    lie = d;
    lie.chunks[1].fd_slot = 0;
    reject(lie.serialize(), 2, "used twice");
    lie = d;
    lie.chunks[0].size = 0;
    reject(lie.serialize(), 2, "size 0");
    auto reserved = good;          // found by fuzz_descriptor_parse: a nonzero reserved field was accepted and lost
    reserved[32 + 8 + 8 + 4] = 1;  // header, then chunk 0: offset, size, fd slot, reserved
    reject(reserved, 2, "reserved");
    PVMM_CHECK_ERRC(buffer_descriptor::parse(nullptr, 0, 0), errc::protocol_error);
  }

  PVMM_CASE("a descriptor that lies about a chunk's size is refused at import, and nothing stays") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    exported_chunks buffer(2, 90);
    auto d = buffer.exported.descriptor;
    d.chunks[1].size *= 2;  // the second chunk claims twice its size
    d.size += buffer.exported.descriptor.chunks[1].size;
    const auto fds = raw_fds(buffer.exported.fds);
    const auto live = query_live_objects();
    auto r = import_buffer(d, fds.data(), fds.size(), {rw()});
    CHECK_FALSE(r.has_value());
    CHECK_MESSAGE(r.code() == errc::protocol_error, r.error().message());
    CHECK(query_live_objects() == live);
  }

  PVMM_CASE("a multi-chunk buffer rebuilt with the same layout in the same process") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    exported_chunks buffer(3, 91);
    auto bytes = buffer.exported.descriptor.serialize();
    auto parsed = buffer_descriptor::parse(bytes.data(), bytes.size(), buffer.exported.fds.size()).value();
    const auto fds = raw_fds(buffer.exported.fds);
    auto imported = import_buffer(parsed, fds.data(), fds.size(), {rw()}).value();
    buffer.exported.fds.clear();
    CHECK(imported.size() == buffer.view.size());
    CHECK(read_words(imported.data(), imported.size()) == pattern(buffer.view.size(), 91));
  }

  PVMM_CASE("owned fds compose: export_buffer's fds are sent, received, imported with run-time grants, aligned") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    exported_chunks buffer(2, 92);
    auto bytes = buffer.exported.descriptor.serialize();
    socket_pair s;
    PVMM_CHECK_OK(ipc::send_fds(s.a, buffer.exported.fds, bytes.data(), bytes.size()));
    buffer.exported.fds.clear();
    auto got = ipc::receive_exactly(s.b, 2, bytes.size()).value();
    auto parsed = buffer_descriptor::parse(got.payload.data(), got.payload.size(), got.fds.size()).value();
    // The grants a program builds at start-up: every device that can reach device 0's memory.
    std::vector<access_descriptor> grants;
    for (int d = 0; d < device_count().value(); ++d)
      if (can_access_peer(d, 0).value()) grants.push_back(rw(d));
    const std::size_t alignment = 4 * reservation_granularity().value();
    auto imported = import_buffer(parsed, got.fds, grants, alignment).value();
    got.fds.clear();  // the imports hold their own references
    CHECK(reinterpret_cast<std::uintptr_t>(imported.data()) % alignment == 0);
    CHECK(read_words(imported.data(), imported.size()) == pattern(buffer.view.size(), 92));
    for (const auto& g : grants) CHECK(query_access(g.location, imported.data()).value() == access::read_write);
    PVMM_CHECK_ERRC(import_buffer(parsed, std::vector<owned_fd>{}, grants), errc::protocol_error);
  }

  PVMM_CASE("receive_exactly: a message with fewer or more fds than expected is refused and its fds closed") {
    socket_pair s;
    int p[2];
    REQUIRE(::pipe(p) == 0);
    const std::size_t before = open_fd_count();
    int three[] = {p[0], p[1], p[0]};
    PVMM_CHECK_OK(ipc::send_fds(s.a, three, 3, "x", 1));
    auto more = ipc::receive_exactly(s.b, 2, 16);
    PVMM_CHECK_ERRC(more, errc::protocol_error);
    CHECK(more.error().detail.find("3 fd(s), 2 expected") != std::string::npos);
    PVMM_CHECK_OK(ipc::send_fds(s.a, three, 1, "x", 1));
    auto fewer = ipc::receive_exactly(s.b, 2, 16);
    PVMM_CHECK_ERRC(fewer, errc::protocol_error);
    CHECK(fewer.error().detail.find("1 fd(s), 2 expected") != std::string::npos);
    CHECK(open_fd_count() == before);
    PVMM_CHECK_OK(ipc::send_fds(s.a, three, 2, "x", 1));
    CHECK(ipc::receive_exactly(s.b, 2, 16).value().fds.size() == 2);
    ::close(p[0]);
    ::close(p[1]);
  }

  PVMM_CASE("map_and_grant and set_access take grants built at run time") {
    PVMM_REQUIRE_DEVICE();
    const std::size_t g = granule();
    auto memory = physical_allocation::create(g, default_properties()).value();
    auto range = address_reservation::reserve(reservation_granularity().value()).value();
    std::vector<access_descriptor> grants{ro()};
    void* at = range.map_and_grant(0, memory, grants).value();
    CHECK(query_access(location::device(0), at).value() == access::read);
    const std::array<access_descriptor, 1> writable{rw()};
    PVMM_CHECK_OK(range.set_access(0, g, writable));
    CHECK(query_access(location::device(0), at).value() == access::read_write);
    PVMM_CHECK_ERRC(range.set_access(0, g, std::vector<access_descriptor>{}), errc::invalid_argument);
    PVMM_CHECK_OK(range.unmap(0, g));
  }

  PVMM_CASE("a growable buffer exported to an exec'd process: it rebuilds the layout, writes, the exporter sees it") {
    PVMM_REQUIRE_DEVICE();
    PVMM_REQUIRE_CAPABILITY(caps().sharing.posix_fd, "POSIX fd handles");
    growable_options o = granule_chunks(0);
    auto buffer = growable_buffer::create(o).value();
    buffer.resize(3 * o.chunk_size).value();
    write_words(buffer.data(), pattern(buffer.size(), 92));
    auto exported = export_buffer(buffer, handle_types::posix_fd).value();
    auto bytes = exported.descriptor.serialize();
    const auto fds = raw_fds(exported.fds);
    auto [sock, pid] = spawn_child({"import-buffer", "0", "92", "93"});
    PVMM_CHECK_OK(ipc::send_fds(sock, fds.data(), fds.size(), bytes.data(), bytes.size()));
    exported.fds.clear();
    auto reply = ipc::receive_fds(sock, 0, 4096, std::chrono::milliseconds(60000));
    ::close(sock);
    CHECK(wait_child(pid) == 0);
    REQUIRE(reply);
    CHECK(std::string(reply->payload.begin(), reply->payload.end()) == "ok");
    CHECK(read_words(buffer.data(), buffer.size()) == pattern(buffer.size(), 93));
  }

}  // TEST_SUITE
