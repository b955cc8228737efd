// ipc_ring: N exec'd processes, one allocation each, exported to all (the cuda-samples memMapIPCDrv flow,
// through pvmm). Every process writes its slot of every other's buffer; then each checks its own.
//   ipc_ring [N]         launcher: starts N workers (default 4) and relays fds between them
// Exits non-zero on a wrong answer.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

extern char** environ;

namespace {

using namespace std::chrono_literals;

std::string text(const pvmm::ipc::received& m) { return std::string(m.payload.begin(), m.payload.end()); }
void say(int sock, const std::string& s) { pvmm::ipc::send_fds(sock, nullptr, 0, s.data(), s.size()).value(); }

int worker(int rank, int peers, int sock) {
  const int device = rank % pvmm::device_count().value();
  pvmm::allocation_properties props;
  props.location = pvmm::location::device(device);
  props.exportable = pvmm::handle_types::posix_fd;
  const std::size_t size = pvmm::query_granularity(props).value().minimum;
  const pvmm::access_descriptor rw{pvmm::location::device(device), pvmm::access::read_write};

  auto mine = pvmm::physical_allocation::create(props, size).value();
  auto own_range = pvmm::address_reservation::reserve(size).value();
  auto* own = static_cast<unsigned*>(own_range.map_and_grant(0, mine, 0, size, {rw}).value());
  std::vector<unsigned> zero(static_cast<std::size_t>(peers), 0);
  pvmm::testing::copy_to_mapping(own, zero.data(), zero.size() * sizeof(unsigned)).value();

  {  // publish: my fd to the launcher
    auto fd = mine.export_posix_fd().value();
    int raw = fd.get();
    pvmm::ipc::send_fds(sock, &raw, 1, &rank, sizeof rank).value();
  }
  // everyone's fds, in rank order
  auto all = pvmm::ipc::receive_fds(sock, static_cast<std::size_t>(peers), 64, 60s, nullptr).value();
  if (all.fds.size() != static_cast<std::size_t>(peers)) return 1;
  std::vector<pvmm::address_reservation> views;
  for (int other = 0; other < peers; ++other) {
    if (other == rank) continue;
    auto theirs = pvmm::physical_allocation::import_posix_fd(all.fds[other].get(), size).value();
    views.push_back(pvmm::address_reservation::reserve(size).value());
    auto* slots = static_cast<unsigned*>(views.back().map_and_grant(0, theirs, 0, size, {rw}).value());
    unsigned value = 1000u * static_cast<unsigned>(rank) + static_cast<unsigned>(other);
    pvmm::testing::copy_to_mapping(slots + rank, &value, sizeof value).value();
  }
  all.fds.clear();  // the imports hold their own references
  say(sock, "written");
  if (text(pvmm::ipc::receive_fds(sock, 0, 16, 60s).value()) != "verify") return 1;
  std::vector<unsigned> got(static_cast<std::size_t>(peers));
  pvmm::testing::copy_from_mapping(got.data(), own, got.size() * sizeof(unsigned)).value();
  for (int other = 0; other < peers; ++other) {
    unsigned want = other == rank ? 0u : 1000u * static_cast<unsigned>(other) + static_cast<unsigned>(rank);
    if (got[other] != want) {
      say(sock, "rank " + std::to_string(rank) + ": slot " + std::to_string(other) + " holds " +
                    std::to_string(got[other]) + ", expected " + std::to_string(want));
      return 1;
    }
  }
  say(sock, "ok");
  return 0;
}

int launcher(int peers) {
  std::vector<int> socks;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < peers; ++rank) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 1;
    int child_end = ::fcntl(sv[1], F_DUPFD, 0);  // survives exec
    ::close(sv[1]);
    std::string self = "/proc/self/exe", mode = "--worker", r = std::to_string(rank), n = std::to_string(peers),
                s = std::to_string(child_end);
    char* argv[] = {self.data(), mode.data(), r.data(), n.data(), s.data(), nullptr};
    pid_t pid;
    if (::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ) != 0) return 1;
    ::close(child_end);
    socks.push_back(sv[0]);
    pids.push_back(pid);
  }
  int failures = 0;
  try {
    std::vector<pvmm::owned_fd> fds(static_cast<std::size_t>(peers));
    for (int rank = 0; rank < peers; ++rank) {
      auto m = pvmm::ipc::receive_fds(socks[rank], 1, sizeof(int), 60s, nullptr).value();
      fds[rank] = std::move(m.fds.at(0));
    }
    std::vector<int> raw;
    for (auto& fd : fds) raw.push_back(fd.get());
    for (int rank = 0; rank < peers; ++rank) pvmm::ipc::send_fds(socks[rank], raw.data(), raw.size(), "all", 3).value();
    for (int rank = 0; rank < peers; ++rank)
      if (text(pvmm::ipc::receive_fds(socks[rank], 0, 64, 60s).value()) != "written") ++failures;
    for (int rank = 0; rank < peers; ++rank) say(socks[rank], "verify");
    for (int rank = 0; rank < peers; ++rank) {
      auto verdict = text(pvmm::ipc::receive_fds(socks[rank], 0, 256, 60s).value());
      if (verdict != "ok") {
        std::printf("ipc_ring: %s\n", verdict.c_str());
        ++failures;
      }
    }
  } catch (const pvmm::exception& e) {
    std::printf("ipc_ring: %s\n", e.what());
    ++failures;
  }
  for (int rank = 0; rank < peers; ++rank) {
    ::close(socks[rank]);
    int st = 0;
    ::waitpid(pids[rank], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failures;
  }
  if (failures) {
    std::printf("ipc_ring: FAIL (%d)\n", failures);
    return 1;
  }
  std::printf("ipc_ring: ok: %d processes each wrote its slot of every other's buffer\n", peers);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto backend = pvmm::query_backend();
  if (!backend.available || pvmm::device_count().value() == 0) {
    std::printf("ipc_ring: no device (%s)\n", backend.unavailable_reason.c_str());
    return 0;
  }
  if (!pvmm::query_device(0).value().capabilities.sharing.posix_fd) {
    std::printf("ipc_ring: device 0 has no POSIX fd handles\n");
    return 0;
  }
  try {
    if (argc == 5 && std::string(argv[1]) == "--worker")
      return worker(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
    return launcher(argc > 1 ? std::atoi(argv[1]) : 4);
  } catch (const pvmm::exception& e) {
    std::printf("ipc_ring: %s\n", e.what());
    return 1;
  }
}
