// Probe: what an importer keeps when the process that exported its memory dies (issue 27), through pvmm on the
// configured backend (built as pvmm-probe-exporter-death with the tools; tools/probes/run.sh runs the cuda and
// hip-nvidia builds). For each case a fresh importer process execs an exporter, which exports, sends, and kills
// itself (SIGKILL) when told; the importer then reads, writes and releases what it imported. One line per case:
//   exporter_death <case>: mapping <readable|fault> data <intact|lost> release <ok|error>
// Cases: memory-mapped (imported and mapped before the death), memory-in-flight (fd received before the death,
// imported after), pool-pointer (pool and pointer imported before), pool-in-flight (received before, imported after).
// An importer that crashes (a device fault) is reported as "mapping fault data lost release error".
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

extern char** environ;

namespace {

using namespace std::chrono_literals;
constexpr std::size_t pool_bytes = std::size_t{1} << 20;

struct record {
  std::uint64_t memory_size = 0;
  pvmm::pool_id pool;
  pvmm::pool_pointer_export pointer;
};

std::vector<std::uint32_t> pattern(std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint32_t> v(bytes / 4);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = seed * 2654435761u + static_cast<std::uint32_t>(i);
  return v;
}

pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

bool is_pool_case(const std::string& c) { return c.rfind("pool", 0) == 0; }

int exporter(const std::string& which, int sock) {
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(0);
  p.exportable = pvmm::handle_types::posix_fd;
  record r;
  std::vector<pvmm::owned_fd> fds;
  pvmm::physical_allocation memory;
  pvmm::memory_pool pool;
  pvmm::stream s = pvmm::stream::create(0).value();
  pvmm::pool_allocation block;
  if (!is_pool_case(which)) {
    r.memory_size = pvmm::query_granularity(p).value().minimum;
    memory = pvmm::physical_allocation::create(r.memory_size, p).value();
    auto range = pvmm::address_reservation::reserve(r.memory_size).value();
    void* at = range.map_and_grant(0, memory, 0, r.memory_size, {{p.location, pvmm::access::read_write}}).value();
    const auto words = pattern(r.memory_size, 71);
    pvmm::testing::copy_to_mapping(at, words.data(), r.memory_size, 0).value();
    fds.push_back(memory.export_posix_fd().value());
  } else {
    pvmm::pool_properties pp;
    pp.exportable = pvmm::handle_types::posix_fd;
    pool = pvmm::memory_pool::create(pp).value();
    block = pool.allocate(pool_bytes, s).value();
    const auto words = pattern(pool_bytes, 72);
    s.copy_async(block.data(), words.data(), pool_bytes).value();
    s.synchronize().value();
    auto exported = pool.export_posix_fd().value();
    r.pool = exported.id;
    r.pointer = block.export_pointer().value();
    fds.push_back(std::move(exported.fd));
  }
  pvmm::ipc::send_fds(sock, fds, &r, sizeof r).value();
  (void)pvmm::ipc::receive_fds(sock, 0, 16, 120s);  // "die"
  ::raise(SIGKILL);
  return 1;
}

int importer(const char* self, const std::string& which) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 2;
  const int child_end = ::fcntl(sv[1], F_DUPFD, 0);  // survives exec
  const pid_t pid = spawn({self, "exporter", which, std::to_string(child_end)});
  ::close(child_end);
  ::close(sv[1]);
  auto message = pvmm::ipc::receive_fds(sv[0], 1, sizeof(record), 120s).value();
  record r;
  std::memcpy(&r, message.payload.data(), sizeof r);
  const bool in_flight = which.find("in-flight") != std::string::npos;
  auto die = [&] {
    (void)pvmm::ipc::send_fds(sv[0], nullptr, 0, "die", 3);
    int status = 0;
    ::waitpid(pid, &status, 0);
  };
  auto s = pvmm::stream::create(0).value();
  bool readable = false, intact = false, released = false;
  if (!is_pool_case(which)) {
    const std::size_t size = r.memory_size;
    if (in_flight) die();
    auto memory = pvmm::physical_allocation::import_posix_fd(message.fds[0].get(), size).value();
    message.fds.clear();
    auto range = pvmm::address_reservation::reserve(size).value();
    void* at = range.map_and_grant(0, memory, 0, size, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
    if (!in_flight) die();
    std::vector<std::uint32_t> seen(size / 4);
    readable = static_cast<bool>(pvmm::testing::copy_from_mapping(seen.data(), at, size, 0));
    intact = readable && seen == pattern(size, 71);
    const auto mine = pattern(size, 5);
    if (readable && pvmm::testing::copy_to_mapping(at, mine.data(), size, 0) &&
        pvmm::testing::copy_from_mapping(seen.data(), at, size, 0))
      intact = intact && seen == mine;
    released = range.unmap(0, size) && memory.release();
  } else {
    if (in_flight) die();
    auto pool = pvmm::memory_pool::import_posix_fd(pvmm::pool_export{std::move(message.fds[0]), r.pool}, 0).value();
    auto block = pool.import_pointer(r.pointer, s).value();
    if (!in_flight) die();
    std::vector<std::uint32_t> seen(pool_bytes / 4);
    readable = s.copy_async(seen.data(), block.data(), pool_bytes) && s.synchronize();
    intact = readable && seen == pattern(pool_bytes, 72);
    released = block.free_async(s) && s.synchronize() && pool.release();
  }
  std::printf("exporter_death %s: mapping %s data %s release %s\n", which.c_str(), readable ? "readable" : "fault",
              intact ? "intact" : "lost", released ? "ok" : "error");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[1]) == "exporter") return exporter(argv[2], std::atoi(argv[3]));
    if (argc == 3 && std::string(argv[1]) == "importer") return importer(argv[0], argv[2]);
  } catch (const pvmm::exception& e) {
    std::printf("exporter_death %s: error %s\n", argc > 2 ? argv[2] : "?", e.what());
    return 1;
  }
  auto backend = pvmm::query_backend();
  std::printf("backend %s%s%s\n", backend.name.c_str(),
              backend.available ? "" : ": unavailable: ", backend.available ? "" : backend.unavailable_reason.c_str());
  std::fflush(stdout);
  int overall = 0;
  for (const char* which : {"memory-mapped", "memory-in-flight", "pool-pointer", "pool-in-flight"}) {
    const pid_t pid = spawn({argv[0], "importer", which});
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("exporter_death %s: mapping fault data lost release error (importer %s %d)\n", which,
                  WIFEXITED(status) ? "exited" : "killed by signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      overall = 1;
    }
    std::fflush(stdout);
  }
  return overall;
}
