// ipc_ring: N exec'd processes, one allocation each, exported to all (the cuda-samples memMapIPCDrv flow,
// through pvmm). The launcher listens on a name; each worker connects to it, publishes its allocation's fd and
// receives everyone's. Every worker writes its slot of every other's buffer; then each checks its own.
//   ipc_ring [N]         launcher: starts N workers (default 4) and relays fds between them
// One source: built as C++ it writes through pvmm's testing copies (any backend, the host one included); built
// as CUDA (ipc_ring_gpu.cu) or HIP (hipcc -x hip) each worker runs in a GPU context of its own (cuCtxCreate on
// CUDA) and launches kernels on its own stream, as the sample does; it checks that pvmm's calls left that
// context current. Workers write only to peers whose memory their device can reach (can_access_peer).
// Exits non-zero on a wrong answer.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define RING_KERNELS 1
#include "gpu.hpp"
#if !defined(__HIPCC__)
#include <cuda.h>  // cuCtxCreate: the ring's own context
#endif
__global__ void store(unsigned* slot, unsigned value) { *slot = value; }
#else
#define RING_KERNELS 0
#endif

extern char** environ;

namespace {

using namespace std::chrono_literals;

#if RING_KERNELS
void gpu_check(GPU(Error_t) rc, const char* what) {
  if (rc != GPU(Success)) throw std::runtime_error(std::string(what) + ": " + GPU(GetErrorString)(rc));
}
#endif

/// Where the worker's device work goes: its own context and stream with kernels, else pvmm's testing copies.
class device_work {
 public:
  explicit device_work(int device) : device_(device) {
#if RING_KERNELS
#if defined(__HIPCC__)
    gpu_check(hipSetDevice(device), "hipSetDevice");
#else
    CUdevice dev = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, device) != CUDA_SUCCESS)
      throw std::runtime_error("cuInit/cuDeviceGet failed");
#if CUDA_VERSION >= 12050
    if (cuCtxCreate(&context_, nullptr, 0, dev) != CUDA_SUCCESS) throw std::runtime_error("cuCtxCreate failed");
#else
    if (cuCtxCreate(&context_, 0, dev) != CUDA_SUCCESS) throw std::runtime_error("cuCtxCreate failed");
#endif
#endif
    gpu_check(GPU(StreamCreate)(&stream_), "StreamCreate");
#endif
  }
  device_work(const device_work&) = delete;
  device_work& operator=(const device_work&) = delete;
  ~device_work() {
#if RING_KERNELS
    (void)GPU(StreamDestroy)(stream_);
#if !defined(__HIPCC__)
    (void)cuCtxDestroy(context_);
#endif
#endif
  }

  void write(unsigned* slot, unsigned value) {
#if RING_KERNELS
    still_current();
    store<<<1, 1, 0, stream_>>>(slot, value);
    gpu_check(GPU(GetLastError)(), "kernel launch");
    gpu_check(GPU(StreamSynchronize)(stream_), "StreamSynchronize");
#else
    pvmm::testing::copy_to_mapping(slot, &value, sizeof value, device_).value();
#endif
  }

  void read(unsigned* to, const unsigned* from, std::size_t count) {
#if RING_KERNELS
    still_current();
    gpu_check(GPU(MemcpyAsync)(to, from, count * sizeof(unsigned), GPU(MemcpyDeviceToHost), stream_), "MemcpyAsync");
    gpu_check(GPU(StreamSynchronize)(stream_), "StreamSynchronize");
#else
    pvmm::testing::copy_from_mapping(to, from, count * sizeof(unsigned), device_).value();
#endif
  }

 private:
  /// pvmm needs a context for some calls; it must hand the program's own back every time.
  void still_current() const {
#if RING_KERNELS && !defined(__HIPCC__)
    CUcontext current = nullptr;
    if (cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != context_)
      throw std::runtime_error("FAIL: the program's own context is no longer current after pvmm calls");
#endif
  }
  int device_;
#if RING_KERNELS
  GPU(Stream_t) stream_{};
#if !defined(__HIPCC__)
  CUcontext context_ = nullptr;
#endif
#endif
};

std::string text(const pvmm::ipc::received& m) { return std::string(m.payload.begin(), m.payload.end()); }
void say(const pvmm::ipc::connection& c, const std::string& s) { c.send(nullptr, 0, s.data(), s.size()).value(); }
unsigned value_of(int writer, int owner) {
  return 1000u * static_cast<unsigned>(writer) + static_cast<unsigned>(owner);
}

int worker(int rank, int peers, const std::string& name) {
  const int devices = pvmm::device_count().value();
  auto device_of = [&](int r) { return r % devices; };
  const int device = device_of(rank);
  device_work gpu(device);
  auto hub = pvmm::ipc::connect(name, 60s).value();

  pvmm::allocation_properties props;
  props.location = pvmm::location::device(device);
  props.exportable = pvmm::handle_types::posix_fd;
  // The sample's size: enough for every rank's slot, rounded up to what reservations and allocations take.
  const std::size_t wanted = static_cast<std::size_t>(peers) * sizeof(unsigned);
  const std::size_t unit = pvmm::reservation_granularity().value();
  const std::size_t size = (wanted + unit - 1) / unit * unit;
  const pvmm::access_descriptor rw{pvmm::location::device(device), pvmm::access::read_write};

  auto mine = pvmm::physical_allocation::create(size, props).value();
  auto own_range = pvmm::address_reservation::reserve(size).value();
  auto* own = static_cast<unsigned*>(own_range.map_and_grant(0, mine, {rw}).value());
  for (int other = 0; other < peers; ++other) gpu.write(own + other, 0);

  {  // publish: my fd and rank to the hub
    std::vector<pvmm::owned_fd> fd;
    fd.push_back(mine.export_posix_fd().value());
    hub.send(fd, &rank, sizeof rank).value();
  }
  // everyone's fds, in rank order
  auto all = hub.receive_exactly(static_cast<std::size_t>(peers), 64, 60s).value();
  std::vector<pvmm::address_reservation> views;
  for (int other = 0; other < peers; ++other) {
    if (other == rank || !pvmm::can_access_peer(device, device_of(other)).value()) continue;
    auto theirs = pvmm::physical_allocation::import_posix_fd(all.fds[other].get(), size).value();
    views.push_back(pvmm::address_reservation::reserve(size).value());
    auto* slots = static_cast<unsigned*>(views.back().map_and_grant(0, theirs, {rw}).value());
    gpu.write(slots + rank, value_of(rank, other));
  }
  all.fds.clear();  // the imports hold their own references
  say(hub, "written");
  if (text(hub.receive(0, 16, 60s).value()) != "verify") return 1;
  std::vector<unsigned> got(static_cast<std::size_t>(peers));
  gpu.read(got.data(), own, got.size());
  for (int other = 0; other < peers; ++other) {
    const bool reached = other != rank && pvmm::can_access_peer(device_of(other), device).value();
    const unsigned want = reached ? value_of(other, rank) : 0u;
    if (got[other] != want) {
      say(hub, "rank " + std::to_string(rank) + ": slot " + std::to_string(other) + " holds " +
                   std::to_string(got[other]) + ", expected " + std::to_string(want));
      return 1;
    }
  }
  say(hub, "ok");
  return 0;
}

int launcher(int peers) {
  const std::string name = "pvmm-ipc-ring-" + std::to_string(::getpid());
  auto hub = pvmm::ipc::listener::listen(name).value();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < peers; ++rank) {
    std::string self = "/proc/self/exe", mode = "--worker", r = std::to_string(rank), n = std::to_string(peers),
                endpoint = name;
    char* argv[] = {self.data(), mode.data(), r.data(), n.data(), endpoint.data(), nullptr};
    pid_t pid;
    if (::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ) != 0) return 1;
    pids.push_back(pid);
  }
  int failures = 0;
  try {
    // Workers connect in any order; each says its rank with its fd.
    std::vector<pvmm::ipc::connection> workers(static_cast<std::size_t>(peers));
    std::vector<pvmm::owned_fd> fds(static_cast<std::size_t>(peers));
    for (int i = 0; i < peers; ++i) {
      auto c = hub.accept(60s).value();
      auto m = c.receive_exactly(1, sizeof(int), 60s).value();
      int rank = -1;
      if (m.payload.size() == sizeof rank) std::memcpy(&rank, m.payload.data(), sizeof rank);
      if (rank < 0 || rank >= peers || workers[rank]) throw std::runtime_error("a worker sent a bad rank");
      fds[rank] = std::move(m.fds[0]);
      workers[rank] = std::move(c);
    }
    for (auto& w : workers) w.send(fds, "all", 3).value();
    for (auto& w : workers)
      if (text(w.receive(0, 64, 60s).value()) != "written") ++failures;
    for (auto& w : workers) say(w, "verify");
    for (auto& w : workers) {
      auto verdict = text(w.receive(0, 256, 60s).value());
      if (verdict != "ok") {
        std::printf("ipc_ring: %s\n", verdict.c_str());
        ++failures;
      }
    }
  } catch (const std::exception& e) {
    std::printf("ipc_ring: %s\n", e.what());
    ++failures;
  }
  for (pid_t pid : pids) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failures;
  }
  if (failures) {
    std::printf("ipc_ring: FAIL (%d)\n", failures);
    return 1;
  }
  std::printf("ipc_ring: ok: %d processes each wrote its slot of every reachable peer's buffer (%s)\n", peers,
              RING_KERNELS ? "kernels on each process's own stream and context" : "pvmm testing copies");
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
    if (argc == 5 && std::string(argv[1]) == "--worker") return worker(std::atoi(argv[2]), std::atoi(argv[3]), argv[4]);
    return launcher(argc > 1 ? std::atoi(argv[1]) : 4);
  } catch (const std::exception& e) {
    std::printf("ipc_ring: %s\n", e.what());
    return 1;
  }
}
