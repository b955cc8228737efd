// pool_import_twice: what does a process get when it imports the same pool pointer twice?
//
// Raw runtime calls only (no pvmm). One source, two variants: default = CUDA runtime API; -DPROBE_HIP = hip* calls
// through HIP's headers (on NVIDIA: -D__HIP_PLATFORM_NVIDIA__ -I <hip-nvidia>/include).
//
// Parent: creates an IPC-capable pool (handleTypes = POSIX file descriptor, release threshold UINT64_MAX), allocates
// 2 MiB from it, fills it with a pattern, exports the pool (an fd) and the pointer (64 bytes), and posix_spawns a fresh
// copy of this binary ("child <socket fd>": a child forked after CUDA init could not use the GPU). It sends the pool fd
// (SCM_RIGHTS) and the 64 bytes over a socketpair, and waits (bounded) for the child to exit; then it frees.
// Child: imports the pool, imports the same pointer twice, and reports:
//   - whether both imports succeed and return the same address;
//   - after freeing one import (free-async + stream sync): whether the other is still usable (a device-to-host copy
//     succeeds and reads the parent's pattern) and what freeing it returns.
// Every wait is bounded (socket poll 20 s, child exit 60 s, then SIGKILL of that child only).
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "probe_api.hpp"

extern char** environ;

namespace {

constexpr std::size_t block_size = std::size_t(2) << 20;
constexpr int child_socket_fd = 100;  // where posix_spawn puts the child's end of the socketpair

struct message {
  unsigned char export_data[64];
  std::uint64_t size;
};
static_assert(sizeof(API(MemPoolPtrExportData)) == 64, "export data is 64 bytes");

std::uint32_t pattern(std::size_t i) { return std::uint32_t(i * 2654435761u) ^ 0xA5A5C3C3u; }

/// A socket message carrying a `message` and room for one fd (SCM_RIGHTS), as sendmsg and recvmsg take it.
struct fd_envelope {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov;
  msghdr header{};
  explicit fd_envelope(message& msg) : iov{&msg, sizeof msg} {
    header.msg_iov = &iov;
    header.msg_iovlen = 1;
    header.msg_control = control;
    header.msg_controllen = sizeof control;
  }
  fd_envelope(const fd_envelope&) = delete;  // the header points into the envelope
  fd_envelope& operator=(const fd_envelope&) = delete;
};

const char* name(api_error e) { return API(GetErrorName)(e); }

void banner(const char* role) {
  int driver = 0, runtime = 0;
  CHECK(API(DriverGetVersion)(&driver));
  CHECK(API(RuntimeGetVersion)(&runtime));
  DEVICE_PROP prop{};
  CHECK(API(GetDeviceProperties)(&prop, 0));
  std::printf("%s: api=%s pid=%d device 0 \"%s\" driverGetVersion=%d runtimeGetVersion=%d\n", role, API_NAME,
              int(getpid()), prop.name, driver, runtime);
  std::fflush(stdout);
}

// Checks the pattern over the whole block; returns the number of mismatching words.
std::size_t mismatches(const std::vector<std::uint32_t>& host) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < host.size(); ++i) bad += host[i] != pattern(i);
  return bad;
}

int child_main(int sock) {
  pollfd pfd{sock, POLLIN, 0};
  if (poll(&pfd, 1, 20000) != 1) {
    std::printf("child: no message from the parent within 20 s\n");
    return 3;
  }
  message msg{};
  fd_envelope envelope(msg);
  msghdr& mh = envelope.header;
  ssize_t got = recvmsg(sock, &mh, MSG_WAITALL);
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  if (got != ssize_t(sizeof msg) || !cm || cm->cmsg_type != SCM_RIGHTS) {
    std::printf("child: bad message (%zd bytes)\n", got);
    return 3;
  }
  int pool_fd = -1;
  std::memcpy(&pool_fd, CMSG_DATA(cm), sizeof pool_fd);

  CHECK(API(SetDevice)(0));
  banner("child");
  api_pool pool{};
  api_error e = API(MemPoolImportFromShareableHandle)(&pool, (void*)(std::uintptr_t)pool_fd,
                                                      API(MemHandleTypePosixFileDescriptor), 0);
  std::printf("child: import pool: %s\n", name(e));
  if (e != API(Success)) return 4;

  API(MemPoolPtrExportData) data{};
  std::memcpy(&data, msg.export_data, sizeof data);
  void* a = nullptr;
  void* b = nullptr;
  api_error ea = API(MemPoolImportPointer)(&a, pool, &data);
  api_error eb = API(MemPoolImportPointer)(&b, pool, &data);
  std::printf("child: import pointer #1: %s -> %p\n", name(ea), a);
  std::printf("child: import pointer #2: %s -> %p\n", name(eb), b);
  std::printf("child: RESULT both imports succeed: %s; same address: %s\n",
              (ea == API(Success) && eb == API(Success)) ? "yes" : "no",
              (ea == API(Success) && eb == API(Success)) ? (a == b ? "yes" : "no") : "n/a");

  std::vector<std::uint32_t> host(msg.size / sizeof(std::uint32_t));
  if (ea == API(Success)) {
    api_error ec = API(Memcpy)(host.data(), a, msg.size, API(MemcpyDeviceToHost));
    std::printf("child: read import #1 before any free: %s, mismatching words %zu of %zu\n", name(ec),
                ec == API(Success) ? mismatches(host) : host.size(), host.size());
  }
  api_stream s{};
  CHECK(API(StreamCreateWithFlags)(&s, API(StreamNonBlocking)));
  if (ea == API(Success) && eb == API(Success)) {
    api_error ef = API(FreeAsync)(a, s);
    api_error es = API(StreamSynchronize)(s);
    std::printf("child: free import #1 (free-async): %s; stream sync: %s\n", name(ef), name(es));
    std::fill(host.begin(), host.end(), 0u);
    api_error ec = API(Memcpy)(host.data(), b, msg.size, API(MemcpyDeviceToHost));
    std::size_t bad = ec == API(Success) ? mismatches(host) : host.size();
    std::printf("child: RESULT read import #2 after freeing #1: %s, mismatching words %zu of %zu -> %s\n", name(ec),
                bad, host.size(), (ec == API(Success) && bad == 0) ? "still usable" : "NOT usable");
    api_error ef2 = API(FreeAsync)(b, s);
    api_error es2 = API(StreamSynchronize)(s);
    std::printf("child: RESULT free import #2: free-async %s; stream sync %s\n", name(ef2), name(es2));
    api_error last = API(GetLastError)();
    std::printf("child: last error after both frees: %s\n", name(last));
  } else if (ea == API(Success)) {
    api_error ef = API(FreeAsync)(a, s);
    api_error es = API(StreamSynchronize)(s);
    std::printf("child: free import #1: %s; stream sync: %s\n", name(ef), name(es));
  }
  // Is the context still healthy (a sticky error would fail this too)?
  void* probe = nullptr;
  api_error health = API(Malloc)(&probe, 256);
  if (health == API(Success)) (void)API(Free)(probe);
  std::printf("child: context health check (malloc 256 B): %s\n", name(health));
  api_error ed = API(StreamDestroy)(s);
  api_error ep = API(MemPoolDestroy)(pool);
  std::printf("child: stream destroy %s; imported pool destroy %s\n", name(ed), name(ep));
  close(pool_fd);
  std::fflush(stdout);
  return 0;
}

int parent_main(const char* self) {
  CHECK(API(SetDevice)(0));
  banner("parent");
  API(MemPoolProps) props{};
  props.allocType = API(MemAllocationTypePinned);
  props.handleTypes = API(MemHandleTypePosixFileDescriptor);
  props.location.type = API(MemLocationTypeDevice);
  props.location.id = 0;
  api_pool pool{};
  CHECK(API(MemPoolCreate)(&pool, &props));
  std::uint64_t threshold = UINT64_MAX;
  CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolAttrReleaseThreshold), &threshold));
  api_stream s{};
  CHECK(API(StreamCreateWithFlags)(&s, API(StreamNonBlocking)));
  void* block = nullptr;
  CHECK(API(MallocFromPoolAsync)(&block, block_size, pool, s));
  std::vector<std::uint32_t> host(block_size / sizeof(std::uint32_t));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = pattern(i);
  CHECK(API(MemcpyAsync)(block, host.data(), block_size, API(MemcpyHostToDevice), s));
  CHECK(API(StreamSynchronize)(s));  // the allocation and the pattern are complete before the child imports

  int pool_fd = -1;
  CHECK(API(MemPoolExportToShareableHandle)(&pool_fd, pool, API(MemHandleTypePosixFileDescriptor), 0));
  API(MemPoolPtrExportData) data{};
  CHECK(API(MemPoolExportPointer)(&data, block));
  std::printf("parent: pool fd %d, block %p (%zu B) exported\n", pool_fd, block, block_size);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::perror("socketpair");
    return 2;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], child_socket_fd);  // dup2 clears close-on-exec on the copy
  std::string fd_text = std::to_string(child_socket_fd);
  char* argv[] = {const_cast<char*>(self), const_cast<char*>("child"), fd_text.data(), nullptr};
  std::fflush(stdout);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (rc != 0) {
    std::printf("parent: posix_spawn failed: %s\n", std::strerror(rc));
    return 2;
  }

  message msg{};
  std::memcpy(msg.export_data, &data, sizeof msg.export_data);
  msg.size = block_size;
  fd_envelope envelope(msg);
  msghdr& mh = envelope.header;
  cmsghdr* cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &pool_fd, sizeof pool_fd);
  if (sendmsg(sv[0], &mh, MSG_NOSIGNAL) != ssize_t(sizeof msg)) std::perror("sendmsg");

  int status = 0;
  bool exited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    std::printf("parent: child %d did not exit within 60 s: SIGKILL\n", int(pid));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  std::printf("parent: child exit %s %d\n", WIFEXITED(status) ? "status" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  close(sv[0]);

  // The parent's block must still hold the pattern; then free it and destroy the pool.
  std::fill(host.begin(), host.end(), 0u);
  CHECK(API(Memcpy)(host.data(), block, block_size, API(MemcpyDeviceToHost)));
  std::printf("parent: own block after the child: mismatching words %zu\n", mismatches(host));
  CHECK(API(FreeAsync)(block, s));
  CHECK(API(StreamSynchronize)(s));
  CHECK(API(StreamDestroy)(s));
  CHECK(API(MemPoolDestroy)(pool));
  close(pool_fd);
  return exited && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "child") == 0) return child_main(std::atoi(argv[2]));
  return parent_main(argv[0]);
}
