// pool_ipc: cuda-samples' streamOrderedAllocationIPC flow on pvmm. The parent creates an exportable pool, allocates
// one buffer per child from it and starts N exec'd children; each receives the pool and its buffer's pointer
// export, imports both, fills the buffer with its rank in stream order, frees it (the importer frees first) and
// says so; the parent checks every buffer, then frees them.
//   pool_ipc [N]     parent (default 2 children)
// One source: built as C++ the children fill through pvmm's stream copies (any backend, the host one included);
// built as CUDA (pool_ipc_gpu.cu) or HIP (hipcc -x hip) they launch a kernel on the pvmm stream's native handle.
// Exits non-zero on a wrong answer.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define POOL_KERNELS 1
#include "gpu.hpp"
__global__ void fill(unsigned* p, std::size_t n, unsigned value) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = value;
}
#else
#define POOL_KERNELS 0
#endif

extern char** environ;

namespace {
using namespace std::chrono_literals;
constexpr std::size_t words = std::size_t{1} << 20;  // 4 MiB per child

void fill_in_order(const pvmm::stream& s, unsigned* p, unsigned value) {
#if POOL_KERNELS
  auto native = reinterpret_cast<GPU(Stream_t)>(static_cast<std::uintptr_t>(s.native_handle().value));
  fill<<<static_cast<unsigned>((words + 255) / 256), 256, 0, native>>>(p, words, value);
  if (GPU(GetLastError)() != GPU(Success)) throw std::runtime_error("kernel launch failed");
#else
  std::vector<unsigned> host(words, value);
  s.copy_async(p, host.data(), words * sizeof(unsigned)).value();  // a pageable source is read before this returns
#endif
}

int child(int sock, int rank) {
  auto pool = pvmm::memory_pool::import_posix_fd(pvmm::ipc::receive_pool(sock, 60s).value(), 0).value();
  auto message = pvmm::ipc::receive_exactly(sock, 0, sizeof(pvmm::pool_pointer_export), 60s).value();
  pvmm::pool_pointer_export record;
  if (message.payload.size() != sizeof record) throw std::runtime_error("a pointer export has the wrong size");
  std::memcpy(&record, message.payload.data(), sizeof record);
  auto s = pvmm::stream::create(0).value();
  auto buffer = pool.import_pointer(record, s).value();
  fill_in_order(s, static_cast<unsigned*>(buffer.data()), static_cast<unsigned>(rank + 1));
  buffer.free_async(s).value();  // the importer frees first ...
  s.synchronize().value();       // ... and the parent hears of it only after the work is done
  const char done[] = "done";
  pvmm::ipc::send_fds(sock, nullptr, 0, done, sizeof done).value();
  return 0;
}

int parent(int children) {
  auto caps = pvmm::query_device(0).value().capabilities;
  if (!caps.pools.ipc_posix_fd) {
    std::printf("pool_ipc: device 0 cannot share pools (capabilities.pools.ipc_posix_fd)\n");
    return 0;
  }
  pvmm::pool_properties props;
  props.exportable = pvmm::handle_types::posix_fd;
  auto pool = pvmm::memory_pool::create(props).value();
  auto s = pvmm::stream::create(0).value();
  std::vector<pvmm::pool_allocation> buffers;
  for (int i = 0; i < children; ++i) buffers.push_back(pool.allocate(words * sizeof(unsigned), s).value());
  s.synchronize().value();  // the allocations are complete before any child uses them

  std::vector<int> sockets;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < children; ++rank) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return 1;
    const int end = ::fcntl(sv[1], F_DUPFD, 0);  // survives exec
    ::close(sv[1]);
    std::string self = "/proc/self/exe", mode = "--child", fd = std::to_string(end), r = std::to_string(rank);
    char* argv[] = {self.data(), mode.data(), fd.data(), r.data(), nullptr};
    pid_t pid;
    const int rc = ::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ);
    ::close(end);
    if (rc != 0) return 1;
    sockets.push_back(sv[0]);
    pids.push_back(pid);
    pvmm::ipc::send_pool(sv[0], pool.export_posix_fd().value()).value();
    const auto record = buffers[rank].export_pointer().value();
    pvmm::ipc::send_fds(sv[0], nullptr, 0, &record, sizeof record).value();
  }
  int failures = 0;
  for (int rank = 0; rank < children; ++rank) {
    auto reply = pvmm::ipc::receive_fds(sockets[rank], 0, 64, 120s);
    int status = 0;
    ::waitpid(pids[rank], &status, 0);
    ::close(sockets[rank]);
    if (!reply || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("pool_ipc: FAIL: child %d did not finish\n", rank);
      ++failures;
    }
  }
  std::vector<unsigned> back(words);
  for (int rank = 0; rank < children; ++rank) {
    s.copy_async(back.data(), buffers[rank].data(), words * sizeof(unsigned)).value();
    s.synchronize().value();
    for (std::size_t i = 0; i < words; ++i)
      if (back[i] != static_cast<unsigned>(rank + 1)) {
        std::printf("pool_ipc: FAIL: buffer %d word %zu holds %u\n", rank, i, back[i]);
        ++failures;
        break;
      }
    buffers[rank].free_async(s).value();  // the exporter frees after its importer
  }
  s.synchronize().value();
  if (failures == 0) std::printf("pool_ipc: %d children filled their buffers from one shared pool: ok\n", children);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[1]) == "--child") return child(std::atoi(argv[2]), std::atoi(argv[3]));
    auto backend = pvmm::query_backend();
    if (!backend.available || pvmm::device_count().value() == 0) {
      std::printf("pool_ipc: no device (%s)\n", backend.unavailable_reason.c_str());
      return 0;
    }
    return parent(argc > 1 ? std::atoi(argv[1]) : 2);
  } catch (const std::exception& e) {
    std::printf("pool_ipc: FAIL: %s\n", e.what());
    return 1;
  }
}
