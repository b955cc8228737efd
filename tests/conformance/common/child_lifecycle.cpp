// The child program's lifecycle modes (issue 27), dispatched from child_main.cpp:
//   netns-connect <abstract-name> <path>
//       enters a new network namespace; checks that the abstract name is unreachable from there with a hint naming
//       network namespaces and path names ("ready"), then connects to the path, receives a pipe's read end and sends
//       back what it read through it ("skip: why" when no network namespace can be made)
//   export-and-die <device>
//       exports physical memory (fd) and, where pools can be shared, a pool and a pointer in it, all holding a
//       pattern; sends them; waits for "die" and kills itself (SIGKILL)
//   pool-cycles <device> <n>
//       n times: imports the pool the parent sends and a pointer in it, checks the parent's data, writes its own,
//       frees first, drops the pool; then checks that its own fds and live objects are back
#include "child_lifecycle.hpp"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>

#include "data.hpp"
#include "open_fds.hpp"

namespace pvmm_test {
namespace {

using namespace std::chrono_literals;

void say(int sock, const std::string& text) { (void)pvmm::ipc::send_fds(sock, nullptr, 0, text.data(), text.size()); }

int answer(int sock, const std::string& text) {
  say(sock, text);
  return text == "ok" ? 0 : 1;
}

std::string text_of(const pvmm::ipc::received& m) { return std::string(m.payload.begin(), m.payload.end()); }

template <class R>
std::string outcome(const R& r) {
  return r ? std::string("succeeded") : r.error().message();
}

int netns_connect(int sock, const std::string& abstract, const std::string& path) {
  if (::unshare(CLONE_NEWNET) != 0)
    return answer(sock, std::string("skip: unshare(CLONE_NEWNET) failed: ") + std::strerror(errno));
  auto hidden = pvmm::ipc::connect(abstract, 300ms);
  if (hidden.code() != pvmm::errc::timeout)
    return answer(sock, "an abstract name across network namespaces: expected timeout, " + outcome(hidden));
  const std::string& hint = hidden.error().hint;
  if (hint.find("network namespace") == std::string::npos || hint.find("path name") == std::string::npos)
    return answer(sock, "the timeout's hint names neither network namespaces nor path names: " + hint);
  say(sock, "ready");
  auto peer = pvmm::ipc::connect(path, 10s).value();
  auto message = peer.receive_exactly(1, 64).value();
  char text[64] = {};
  const ssize_t n = ::read(message.fds[0].get(), text, sizeof text);
  if (n <= 0) return answer(sock, "nothing to read through the fd that crossed the namespace");
  const std::string back = "read: " + std::string(text, static_cast<std::size_t>(n));
  peer.send(nullptr, 0, back.data(), back.size()).value();
  return answer(sock, "ok");
}

int export_and_die(int sock, int device) {
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(device);
  p.exportable = pvmm::handle_types::posix_fd;
  const std::size_t g = pvmm::query_granularity(p).value().minimum;
  auto memory = pvmm::physical_allocation::create(g, p).value();
  auto range = pvmm::address_reservation::reserve(g).value();
  void* at = range.map_and_grant(0, memory, 0, g, {{p.location, pvmm::access::read_write}}).value();
  write_words(at, pattern(g, exporter_death_seed));
  exporter_death_record record;
  record.memory_size = g;
  std::vector<pvmm::owned_fd> fds;
  fds.push_back(memory.export_posix_fd().value());
  // What dies with the process: the pool, its allocation, the stream (none freed: the process is killed).
  pvmm::memory_pool pool;
  pvmm::stream s;
  pvmm::pool_allocation block;
  if (pvmm::query_device(device).value().capabilities.pools.ipc_posix_fd) {
    pvmm::pool_properties pp;
    pp.location = p.location;
    pp.exportable = pvmm::handle_types::posix_fd;
    pool = pvmm::memory_pool::create(pp).value();
    s = pvmm::stream::create(device).value();
    block = pool.allocate(exporter_death_pool_bytes, s).value();
    const auto words = pattern(exporter_death_pool_bytes, exporter_death_seed + 1);
    s.copy_async(block.data(), words.data(), exporter_death_pool_bytes).value();
    s.synchronize().value();
    auto exported = pool.export_posix_fd().value();  // the pool before its pointers
    record.pool = exported.id;
    record.pointer = block.export_pointer().value();
    record.has_pool = 1;
    fds.push_back(std::move(exported.fd));
  }
  pvmm::ipc::send_fds(sock, fds, &record, sizeof record).value();
  auto order = pvmm::ipc::receive_fds(sock, 0, 16, 60s).value();
  if (text_of(order) != "die") return answer(sock, "expected 'die'");
  ::raise(SIGKILL);
  return 1;
}

int pool_cycles(int sock, int device, int cycles) {
  auto s = pvmm::stream::create(device).value();
  const auto live = pvmm::query_live_objects();
  const std::size_t fds = open_fd_count();
  for (int i = 0; i < cycles; ++i) {
    auto pool = pvmm::memory_pool::import_posix_fd(pvmm::ipc::receive_pool(sock).value(), device).value();
    auto message = pvmm::ipc::receive_exactly(sock, 0, sizeof(pvmm::pool_pointer_export)).value();
    pvmm::pool_pointer_export record;
    if (message.payload.size() != sizeof record) return answer(sock, "the pointer export has the wrong size");
    std::memcpy(&record, message.payload.data(), sizeof record);
    auto memory = pool.import_pointer(record, s).value();
    const std::size_t size = memory.size();
    std::vector<std::uint32_t> seen(size / sizeof(std::uint32_t));
    s.copy_async(seen.data(), memory.data(), size).value();
    s.synchronize().value();
    if (seen != pattern(size, static_cast<std::uint32_t>(i)))
      return answer(sock, "cycle " + std::to_string(i) + ": the parent's data did not arrive");
    const auto mine = pattern(size, static_cast<std::uint32_t>(1000 + i));
    s.copy_async(memory.data(), mine.data(), size).value();
    memory.free_async(s).value();  // the importer frees first
    s.synchronize().value();
    say(sock, "cycle done");
  }
  if (!(pvmm::query_live_objects() == live) || open_fd_count() != fds)
    return answer(sock, "the importer's fds or live objects changed over the cycles");
  return answer(sock, "ok");
}

}  // namespace

int run_lifecycle_mode(int sock, const std::string& mode, int argc, char** argv) {
  if (mode == "netns-connect" && argc == 5) return netns_connect(sock, argv[3], argv[4]);
  if (mode == "export-and-die" && argc == 4) return export_and_die(sock, std::atoi(argv[3]));
  if (mode == "pool-cycles" && argc == 5) return pool_cycles(sock, std::atoi(argv[3]), std::atoi(argv[4]));
  return -1;
}

}  // namespace pvmm_test
