// pvmm-info --check's exec'd children: a fresh copy of this program (a forked child cannot use a GPU the parent
// initialised), given one end of a socket pair; it answers "ok" or what went wrong, in one message.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/testing.hpp>

#include "info.hpp"

extern char** environ;

namespace pvmm_info {

outcome spawn_child(const std::string& mode, const std::vector<std::string>& args, child& out) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return {outcome::fail, fmt::format("socketpair: {}", std::strerror(errno))};
  int child_end = ::fcntl(sv[1], F_DUPFD, 0);  // without close-on-exec: the child's end survives exec
  ::close(sv[1]);
  if (child_end < 0) {
    ::close(sv[0]);
    return {outcome::fail, fmt::format("fcntl(F_DUPFD): {}", std::strerror(errno))};
  }
  std::vector<std::string> words{"/proc/self/exe", mode, std::to_string(child_end)};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, words[0].c_str(), nullptr, nullptr, argv.data(), environ);
  ::close(child_end);
  if (rc != 0) {
    ::close(sv[0]);
    return {outcome::fail, fmt::format("posix_spawn: {}", std::strerror(rc))};
  }
  out = {sv[0], pid};
  return {outcome::pass, ""};
}

outcome finish_child(child& c) {
  auto reply = pvmm::ipc::receive_fds(c.socket, 0, 4096, std::chrono::milliseconds(60000));
  ::close(c.socket);
  int st = 0;
  ::waitpid(c.pid, &st, 0);
  c = {};
  if (!reply) return {outcome::fail, reply.error().message()};
  std::string text(reply->payload.begin(), reply->payload.end());
  if (text != "ok") return {outcome::fail, "child: " + text};
  return {outcome::pass, ""};
}

namespace {

int answer(int sock, const std::string& text) {
  (void)pvmm::ipc::send_fds(sock, nullptr, 0, text.data(), text.size());
  return text == "ok" ? 0 : 1;
}

}  // namespace

int serve_import(int sock, std::size_t size) {
  try {
    auto message = pvmm::ipc::receive_fds(sock, 1, 16).value();
    if (message.fds.size() != 1) return answer(sock, "no fd arrived");
    auto memory = pvmm::physical_allocation::import_posix_fd(message.fds[0].get(), size).value();
    auto range = pvmm::address_reservation::reserve(size).value();
    void* p = range.map_and_grant(0, memory, 0, size, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
    std::vector<unsigned char> seen(size);
    pvmm::testing::copy_from_mapping(seen.data(), p, size).value();
    for (auto b : seen)
      if (b != 0x5A) return answer(sock, "the parent's bytes did not arrive");
    std::vector<unsigned char> mine(size, 0xC3);
    pvmm::testing::copy_to_mapping(p, mine.data(), size).value();
    return answer(sock, "ok");
  } catch (const pvmm::exception& e) {
    return answer(sock, e.what());
  }
}

int serve_pool_import(int sock) {
  try {
    auto exported = pvmm::ipc::receive_pool(sock).value();
    auto message = pvmm::ipc::receive_exactly(sock, 0, sizeof(pvmm::pool_pointer_export)).value();
    pvmm::pool_pointer_export record;
    if (message.payload.size() != sizeof record)
      return answer(sock,
                    fmt::format("the pointer export has {} bytes, not {}", message.payload.size(), sizeof record));
    std::memcpy(&record, message.payload.data(), sizeof record);
    auto pool = pvmm::memory_pool::import_posix_fd(exported, 0).value();
    auto s = pvmm::stream::create(0).value();
    auto memory = pool.import_pointer(record, s).value();
    const std::size_t size = memory.size();
    std::vector<unsigned char> seen(size);
    s.copy_async(seen.data(), memory.data(), size).value();
    s.synchronize().value();
    if (auto why = compare_pattern(seen.data(), size, 31); !why.empty())
      return answer(sock, "the parent's bytes did not arrive: " + why);
    const auto mine = pattern(size, 32);
    s.copy_async(memory.data(), mine.data(), size).value();
    memory.free_async(s).value();  // the importer frees before the exporter does
    s.synchronize().value();
    return answer(sock, "ok");
  } catch (const pvmm::exception& e) {
    return answer(sock, e.what());
  }
}

}  // namespace pvmm_info
