// The conformance suite's child process: exec'd fresh (a fork after GPU initialisation cannot use the GPU).
//   pvmm_conformance_child <socket> import-write <device> <size> <expected-seed> <write-seed>
//       receives one fd, imports it, maps it for <device>, checks the parent's data, writes its own
//   pvmm_conformance_child <socket> import-buffer <device> <expected-seed> <write-seed>
//       receives a buffer descriptor with its fds, rebuilds the buffer, checks, writes
//   pvmm_conformance_child <socket> endpoint-import <name> <device> <expected-seed> <write-seed>
//       connects to the named endpoint, then as import-buffer over that connection (answers there too)
//   pvmm_conformance_child <socket> pool-import <device> <expected-seed> <write-seed>
//       receives two pools and a pointer exported from the first; checks the importer's bad inputs, imports the
//       pointer, checks the parent's data, writes its own and frees first
//   pvmm_conformance_child <socket> pin-over-limit
//       drops CAP_IPC_LOCK, lowers RLIMIT_MEMLOCK to 64 KiB and checks that pinning 1 MiB is out_of_memory with a
//       hint naming the limit, for an allocation and for a registration
//   pvmm_conformance_child <socket> die-mid-transfer
//       sends the first message of a transfer, then dies before the second
//   pvmm_conformance_child <socket> hold-fd
//       opens a pipe holding "hello from the child", tells the parent the read end's number, and waits
//   pvmm_conformance_child <socket> stream-without-threads
//       (root drops to nobody) lowers RLIMIT_NPROC to 0 and checks that stream::create is system_error naming
//       the limit, leaking no stream, thread or fd; then, the limit restored, that a stream works ("skip: why")
//   netns-connect, export-and-die, pool-cycles: see child_lifecycle.cpp
// Each answers "ok" or the error over the socket (exit status 0 or 1).
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <pvmm/pvmm.hpp>

#include "child_lifecycle.hpp"
#include "data.hpp"
#include "open_fds.hpp"

namespace {

int answer(int sock, const std::string& text) {
  (void)pvmm::ipc::send_fds(sock, nullptr, 0, text.data(), text.size());
  return text == "ok" ? 0 : 1;
}

int import_write(int sock, int device, std::size_t size, std::uint32_t expected_seed, std::uint32_t write_seed) {
  auto message = pvmm::ipc::receive_fds(sock, 1, 64).value();
  if (message.fds.size() != 1) return answer(sock, "expected one fd");
  auto memory = pvmm::physical_allocation::import_posix_fd(message.fds[0].get(), size).value();
  message.fds.clear();  // closing the fd after import leaves the import intact
  auto range = pvmm::address_reservation::reserve(size).value();
  void* p =
      range.map_and_grant(0, memory, 0, size, {{pvmm::location::device(device), pvmm::access::read_write}}).value();
  if (pvmm_test::read_words(p, size) != pvmm_test::pattern(size, expected_seed))
    return answer(sock, "the parent's data did not arrive");
  pvmm_test::write_words(p, pvmm_test::pattern(size, write_seed));
  return answer(sock, "ok");
}

int import_buffer(int sock, int device, std::uint32_t expected_seed, std::uint32_t write_seed) {
  auto message = pvmm::ipc::receive_fds(sock, 64, 1 << 16, std::chrono::milliseconds(10000), nullptr).value();
  auto descriptor =
      pvmm::buffer_descriptor::parse(message.payload.data(), message.payload.size(), message.fds.size()).value();
  std::vector<int> fds;
  for (auto& fd : message.fds) fds.push_back(fd.get());
  auto buffer = pvmm::import_buffer(descriptor, fds.data(), fds.size(),
                                    {{pvmm::location::device(device), pvmm::access::read_write}})
                    .value();
  message.fds.clear();
  if (pvmm_test::read_words(buffer.data(), buffer.size()) != pvmm_test::pattern(buffer.size(), expected_seed))
    return answer(sock, "the parent's data did not arrive in the same layout");
  pvmm_test::write_words(buffer.data(), pvmm_test::pattern(buffer.size(), write_seed));
  return answer(sock, "ok");
}

int endpoint_import(const std::string& name, int device, std::uint32_t expected_seed, std::uint32_t write_seed) {
  auto peer = pvmm::ipc::connect(name).value();
  auto message = peer.receive(64, 1 << 16).value();
  auto descriptor =
      pvmm::buffer_descriptor::parse(message.payload.data(), message.payload.size(), message.fds.size()).value();
  auto buffer =
      pvmm::import_buffer(descriptor, message.fds, {{pvmm::location::device(device), pvmm::access::read_write}})
          .value();
  message.fds.clear();
  if (pvmm_test::read_words(buffer.data(), buffer.size()) != pvmm_test::pattern(buffer.size(), expected_seed))
    return answer(peer.native_handle(), "the parent's data did not arrive in the same layout");
  pvmm_test::write_words(buffer.data(), pvmm_test::pattern(buffer.size(), write_seed));
  return answer(peer.native_handle(), "ok");
}

#define PVMM_CHILD_EXPECT(expr, expected, what)                                                               \
  do {                                                                                                        \
    auto r_ = (expr);                                                                                         \
    if (r_.code() != (expected))                                                                              \
      return answer(sock, std::string(what) + ": " + (r_ ? std::string("succeeded") : r_.error().message())); \
  } while (0)

int pool_import(int sock, int device, std::uint32_t expected_seed, std::uint32_t write_seed) {
  auto first = pvmm::ipc::receive_pool(sock).value();
  auto second = pvmm::ipc::receive_pool(sock).value();
  auto message = pvmm::ipc::receive_exactly(sock, 0, sizeof(pvmm::pool_pointer_export)).value();
  pvmm::pool_pointer_export record;
  if (message.payload.size() != sizeof record) return answer(sock, "the pointer export has the wrong size");
  std::memcpy(&record, message.payload.data(), sizeof record);
  auto pool = pvmm::memory_pool::import_posix_fd(first, device).value();
  auto other = pvmm::memory_pool::import_posix_fd(second, device).value();
  first.fd.reset();  // the import stays after the fd is closed
  auto s = pvmm::stream::create(device).value();
  if (!pool.imported() || pool.id() != first.id) return answer(sock, "the imported pool does not say so");
  PVMM_CHILD_EXPECT(pool.allocate(4096, s), pvmm::errc::invalid_argument, "allocate from an imported pool");
  PVMM_CHILD_EXPECT(pool.export_posix_fd(), pvmm::errc::invalid_argument, "export an imported pool");
  PVMM_CHILD_EXPECT(other.import_pointer(record, s), pvmm::errc::invalid_handle, "import into the wrong pool");
  auto empty = record;
  empty.size = 0;
  PVMM_CHILD_EXPECT(pool.import_pointer(empty, s), pvmm::errc::invalid_handle, "import a zero-size record");
  auto memory = pool.import_pointer(record, s).value();
  // A second import of the same record is refused and must leave the first intact (CUDA returns the same pointer
  // without counting imports: freeing the duplicate would free the first; measured, tools/probes).
  PVMM_CHILD_EXPECT(pool.import_pointer(record, s), pvmm::errc::busy, "import the same pointer twice");
  const std::size_t size = memory.size();
  std::vector<std::uint32_t> seen(size / sizeof(std::uint32_t));
  s.copy_async(seen.data(), memory.data(), size).value();
  s.synchronize().value();
  if (seen != pvmm_test::pattern(size, expected_seed)) return answer(sock, "the parent's data did not arrive");
  const auto mine = pvmm_test::pattern(size, write_seed);
  s.copy_async(memory.data(), mine.data(), size).value();
  memory.free_async(s).value();  // the importer frees first
  s.synchronize().value();
  return answer(sock, "ok");
}

int pin_over_limit(int sock) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return answer(sock, "capget failed");
  for (auto& d : data) {
    d.effective &= ~(1u << CAP_IPC_LOCK);
    d.permitted &= ~(1u << CAP_IPC_LOCK);
  }
  if (::syscall(SYS_capset, &header, data) != 0) return answer(sock, "capset failed");
  rlimit low{64 << 10, 64 << 10};
  if (::setrlimit(RLIMIT_MEMLOCK, &low) != 0) return answer(sock, "setrlimit failed");
  auto named = [](const pvmm::error& e) { return e.hint.find("RLIMIT_MEMLOCK") != std::string::npos; };
  auto pinned = pvmm::pinned_allocation::create(1 << 20);
  if (pinned.code() != pvmm::errc::out_of_memory || !named(pinned.error()))
    return answer(sock, "pinning over the limit: " + (pinned ? std::string("succeeded") : pinned.error().message()));
  std::vector<char> mine(1 << 20);
  auto registered = pvmm::register_host_memory(mine.data(), mine.size());
  if (registered.code() != pvmm::errc::out_of_memory || !named(registered.error()))
    return answer(
        sock, "registering over the limit: " + (registered ? std::string("succeeded") : registered.error().message()));
  if (pvmm::unregister_host_memory(mine.data()).code() != pvmm::errc::not_registered)
    return answer(sock, "a refused registration was recorded");
  return answer(sock, "ok");
}

int stream_without_threads(int sock) {
  // Root is exempt from RLIMIT_NPROC: become nobody (the capabilities go with root), still readable in /proc.
  if (::geteuid() == 0 &&
      (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0))
    return answer(sock, std::string("skip: cannot drop root to nobody: ") + std::strerror(errno));
  ::prctl(PR_SET_DUMPABLE, 1);
  rlimit saved{};
  if (::getrlimit(RLIMIT_NPROC, &saved) != 0) return answer(sock, "getrlimit failed");
  const auto live = pvmm::query_live_objects();
  const std::size_t threads = pvmm_test::live_thread_count(), fds = pvmm_test::open_fd_count();
  rlimit none{0, saved.rlim_max};
  if (::setrlimit(RLIMIT_NPROC, &none) != 0) return answer(sock, "setrlimit failed");
  auto refused = pvmm::stream::create(0);
  ::setrlimit(RLIMIT_NPROC, &saved);
  if (refused) return answer(sock, "stream::create succeeded with RLIMIT_NPROC at 0");
  const auto& e = refused.error();
  if (e.code != pvmm::errc::system_error || e.native_name != "EAGAIN" ||
      e.hint.find("RLIMIT_NPROC") == std::string::npos || e.hint.find("pids") == std::string::npos)
    return answer(sock, "expected system_error, EAGAIN and a hint naming RLIMIT_NPROC and pids: " + e.message());
  if (!(pvmm::query_live_objects() == live) || pvmm_test::live_thread_count() != threads ||
      pvmm_test::open_fd_count() != fds)
    return answer(sock, "the refused stream left a stream, thread or fd behind");
  auto s = pvmm::stream::create(0).value();
  int ran = 0;
  s.launch_host_function([](void* p) { *static_cast<int*>(p) = 1; }, &ran).value();
  s.synchronize().value();
  return answer(sock, ran == 1 ? "ok" : "the stream made after the limit was restored did not run its work");
}

int hold_fd(int sock) {
  int p[2];
  if (::pipe(p) != 0) return answer(sock, "pipe failed");
  const char text[] = "hello from the child";
  if (::write(p[1], text, sizeof text) != static_cast<ssize_t>(sizeof text)) return answer(sock, "write failed");
  ::close(p[1]);
  std::string number = std::to_string(p[0]);
  (void)pvmm::ipc::send_fds(sock, nullptr, 0, number.data(), number.size());
  char c;
  while (::read(sock, &c, 1) > 0) {
  }  // until the parent closes its end
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const int sock = std::atoi(argv[1]);
  const std::string mode = argv[2];
  try {
    if (mode == "import-write" && argc == 7)
      return import_write(sock, std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10),
                          static_cast<std::uint32_t>(std::atoi(argv[5])),
                          static_cast<std::uint32_t>(std::atoi(argv[6])));
    if (mode == "import-buffer" && argc == 6)
      return import_buffer(sock, std::atoi(argv[3]), static_cast<std::uint32_t>(std::atoi(argv[4])),
                           static_cast<std::uint32_t>(std::atoi(argv[5])));
    if (mode == "endpoint-import" && argc == 7)
      return endpoint_import(argv[3], std::atoi(argv[4]), static_cast<std::uint32_t>(std::atoi(argv[5])),
                             static_cast<std::uint32_t>(std::atoi(argv[6])));
    if (mode == "pool-import" && argc == 6)
      return pool_import(sock, std::atoi(argv[3]), static_cast<std::uint32_t>(std::atoi(argv[4])),
                         static_cast<std::uint32_t>(std::atoi(argv[5])));
    if (mode == "die-mid-transfer") {
      const char first[] = "first half";
      (void)pvmm::ipc::send_fds(sock, nullptr, 0, first, sizeof first);
      ::_exit(3);  // dies before the message with the fds
    }
    if (mode == "hold-fd") return hold_fd(sock);
    if (mode == "pin-over-limit") return pin_over_limit(sock);
    if (mode == "stream-without-threads") return stream_without_threads(sock);
    if (const int status = pvmm_test::run_lifecycle_mode(sock, mode, argc, argv); status >= 0) return status;
    return 2;
  } catch (const pvmm::exception& e) {
    return answer(sock, e.what());
  }
}
