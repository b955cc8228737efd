// pvmm-bench teams, all-reduce (cuda, built with a CUDA compiler): the one-shot all-reduce kernel both sides run.
// Each block meets its peers' same-numbered block at a barrier (so a block's inputs are in place), sums its share
// of every rank's input (float4 loads, grid-stride) into this rank's output, and meets them again (so no rank
// refills a slot a peer still reads). Every rank launches the same grid for a size, so block b reads the same
// indices on every rank and the block-level barriers suffice. One thread per block does the barrier;
// __syncthreads orders the block around it (the pattern of PyTorch's sync_remote_blocks).
//   pvmm: window_view::barrier(channel = block), data through window_view::peer(r).
//   raw:  cuMemAlloc buffers shared with cuIpc (what PyTorch's IPC path and NCCL's legacy P2P use), flags after
//         the data: flags[block][src] (uint32), each barrier writing its epoch with a system-scope release store
//         (libcu++ atomic_ref) and spinning on acquire loads against %globaltimer: the same steps, by hand.
// Both barriers give up after 10 s (a dead peer ends the kernel, never hangs the GPU); the host sees it in a flag.
// Everything runs on the runtime's current device: the rank's (team_ranks.cpp sets it), one GPU per rank or all on
// device 0; across GPUs the raw side's cuIpcOpenMemHandle enables peer access (the bench only puts ranks on
// separate GPUs where every pair can access each other), and pvmm's window grants this rank's device.
//   nccl (--compare nccl, built with NCCL): ncclAllReduce on the same buffers' shapes, its own kernels.
// PVMM_BENCH_ALLREDUCE=two-shot (or auto: one-shot up to 256 KiB a block) runs pvmm's side through
// pvmm/team_collectives.hpp instead: block b all-reduces slice b of the input on channel b.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cuda/atomic>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <pvmm/team_collectives.hpp>
#include <pvmm/team_device.hpp>

#if PVMM_BENCH_NCCL
#include <nccl.h>
#endif

#include "bench.hpp"
#include "team_allreduce.hpp"

// float4 sums for pvmm/team_collectives.hpp's templates (argument-dependent lookup: float4 is a global type).
__device__ inline float4& operator+=(float4& a, const float4& b) {
  a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
  return a;
}

namespace bench::allreduce {
namespace {

constexpr int threads = 512;
constexpr std::uint64_t barrier_timeout_ns = 10000000000ull;

__device__ std::uint64_t now_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct pvmm_team {
  pvmm::window_view view;
  __device__ int size() const { return view.size; }
  __device__ const float4* input(int r) const { return static_cast<const float4*>(view.peer(r)); }
  __device__ bool barrier(int block, int) const { return view.barrier(block, barrier_timeout_ns); }
};

struct raw_team {
  char* slots[max_ranks] = {};  // every rank's buffer as opened here (this rank's own included)
  std::uint64_t flags_at = 0;   // where the flags start in each buffer
  int rank = 0, ranks = 0;
  std::uint32_t epoch = 0;  // this launch's first barrier; its second is epoch + 1

  __device__ int size() const { return ranks; }
  __device__ const float4* input(int r) const { return reinterpret_cast<const float4*>(slots[r]); }
  __device__ std::uint32_t& flag(int owner, int block, int src) const {
    return reinterpret_cast<std::uint32_t*>(slots[owner] + flags_at)[block * max_ranks + src];
  }
  __device__ bool barrier(int block, int second) const {
    using system_flag = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>;
    const std::uint32_t e = epoch + static_cast<std::uint32_t>(second);
    for (int r = 0; r < ranks; ++r)
      if (r != rank) system_flag(flag(r, block, rank)).store(e, cuda::memory_order_release);
    const std::uint64_t start = now_ns();
    for (int r = 0; r < ranks; ++r) {
      if (r == rank) continue;
      const system_flag mine(flag(rank, block, r));
      while (static_cast<std::int32_t>(mine.load(cuda::memory_order_acquire) - e) < 0)
        if (now_ns() - start >= barrier_timeout_ns) return false;
    }
    return true;
  }
};

template <class Team>
__global__ void one_shot_all_reduce(Team team, float4* out, std::size_t count4, int* expired) {
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = team.barrier(blockIdx.x, 0);  // every rank's input is in place
  __syncthreads();
  if (ok) {
    const float4* in[max_ranks];
    const int n = team.size();
    for (int r = 0; r < n; ++r) in[r] = team.input(r);
    for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count4;
         i += std::size_t{gridDim.x} * blockDim.x) {
      float4 sum = make_float4(0, 0, 0, 0);
      for (int r = 0; r < n; ++r) {
        const float4 x = in[r][i];
        sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
      }
      out[i] = sum;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && !(ok && team.barrier(blockIdx.x, 1))) atomicExch(expired, 1);  // my slot is free again
}

// pvmm's side through pvmm/team_collectives.hpp (PVMM_BENCH_ALLREDUCE=two-shot or auto): block b all-reduces slice b
// of the input on channel b; two-shot in place in the slots (then copied to the output), auto choosing one-shot up
// to 256 KiB a block.
__global__ void collective_all_reduce(pvmm::window_view view, float4* out, std::size_t count4, std::size_t one_shot,
                                      int* expired) {
  const std::size_t per = (count4 + gridDim.x - 1) / gridDim.x;
  const std::size_t first = blockIdx.x * per;
  const std::size_t begin = first < count4 ? first : count4;
  const std::size_t end = count4 - begin < per ? count4 : begin + per;
  const bool ok = pvmm::all_reduce_sum<float4>(pvmm::block_scope{}, view, begin * sizeof(float4), end - begin,
                                               out + begin, static_cast<int>(blockIdx.x), barrier_timeout_ns, one_shot);
  if (threadIdx.x == 0 && !ok) atomicExch(expired, 1);
}

// What both GPU sides share: the stream, the output and the expiry flag.
class gpu_reducer : public reducer {
 public:
  explicit gpu_reducer(std::size_t max_count) : max_blocks_(static_cast<std::size_t>(gpu_max_blocks())) {
    CUDART(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDART(cudaMalloc(&out_, max_count * sizeof(float)));
    CUDART(cudaMalloc(&expired_, sizeof(int)));
    CUDART(cudaMemset(expired_, 0, sizeof(int)));
  }
  ~gpu_reducer() override {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaFree(out_);
    (void)cudaFree(expired_);
    (void)cudaStreamDestroy(stream_);
  }
  void fill(const std::vector<float>& input) override {
    CUDART(cudaMemcpy(input_slot(), input.data(), input.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  void finish() override { CUDART(cudaStreamSynchronize(stream_)); }  // bounded: the kernel's barriers are
  void poison(std::size_t count) override {
    CUDART(cudaMemsetAsync(out_, 0xff, count * sizeof(float), stream_));  // all-ones bits: NaN
  }
  std::vector<float> output(std::size_t count) override {
    std::vector<float> out(count);
    CUDART(cudaMemcpy(out.data(), out_, count * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
  }
  std::string expired() override {
    int e = 0;
    CUDART(cudaMemcpy(&e, expired_, sizeof e, cudaMemcpyDeviceToHost));
    return e != 0 ? "a device barrier expired" : "";
  }

 protected:
  virtual void* input_slot() = 0;
  cudaStream_t stream() const { return stream_; }
  float* out() const { return static_cast<float*>(out_); }
  int blocks_for(std::size_t count) const {
    const std::size_t wanted = (count / 4 + threads - 1) / threads;  // one float4 a thread, or grid-stride
    return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(wanted, max_blocks_)));
  }
  template <class Team>
  void launch(const Team& team, std::size_t count) {
    one_shot_all_reduce<<<blocks_for(count), threads, 0, stream()>>>(team, reinterpret_cast<float4*>(out()), count / 4,
                                                                     expired_);
    CUDART(cudaGetLastError());
  }
  void launch_collective(const pvmm::window_view& view, std::size_t count, std::size_t one_shot) {
    collective_all_reduce<<<blocks_for(count), threads, 0, stream()>>>(view, reinterpret_cast<float4*>(out()),
                                                                       count / 4, one_shot, expired_);
    CUDART(cudaGetLastError());
  }

 private:
  std::size_t max_blocks_;  // the SM count: the window's signal channels, the raw side's flag rows
  cudaStream_t stream_ = nullptr;
  void* out_ = nullptr;
  int* expired_ = nullptr;
};

class pvmm_reducer final : public gpu_reducer {
 public:
  pvmm_reducer(const pvmm::symmetric_window& w, std::size_t max_count) : gpu_reducer(max_count), window_(w) {
    auto v = w.view();
    check(v.has_value(), "symmetric_window::view");
    team_.view = *v;
    const char* algorithm = std::getenv("PVMM_BENCH_ALLREDUCE");  // unset: the bench's own one-shot kernel
    if (algorithm != nullptr && std::string(algorithm) == "two-shot") one_shot_ = 0;
    if (algorithm != nullptr && std::string(algorithm) == "auto") one_shot_ = std::size_t{256} << 10;
    if (one_shot_ != unset) CUDART(cudaMalloc(&pristine_, max_count * sizeof(float)));
  }
  ~pvmm_reducer() override {
    if (pristine_ != nullptr) (void)cudaFree(pristine_);
  }
  void fill(const std::vector<float>& input) override {
    gpu_reducer::fill(input);
    if (pristine_ != nullptr)  // two-shot sums in place: the check refills the slot from here
      CUDART(cudaMemcpy(pristine_, input.data(), input.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  void poison(std::size_t count) override {
    gpu_reducer::poison(count);
    if (pristine_ != nullptr)
      CUDART(cudaMemcpyAsync(input_slot(), pristine_, count * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  }
  void enqueue(std::size_t count) override {
    if (one_shot_ == unset)
      launch(team_, count);
    else
      launch_collective(team_.view, count, one_shot_);
  }
  std::string expired() override {
    std::string e = gpu_reducer::expired();
    if (auto s = window_.signal_status(); !s) e += ": " + s.error().message();
    return e;
  }

 private:
  void* input_slot() override { return window_.local(); }
  static constexpr std::size_t unset = ~std::size_t{0};
  const pvmm::symmetric_window& window_;
  pvmm_team team_;
  std::size_t one_shot_ = unset;  // PVMM_BENCH_ALLREDUCE: team_collectives.hpp's bytes for one-shot
  void* pristine_ = nullptr;
};

class raw_reducer final : public gpu_reducer {
 public:
  raw_reducer(pvmm::bootstrap& ranks, std::size_t max_count) : gpu_reducer(max_count), ranks_(ranks) {
    check(ranks.size() <= max_ranks, "at most 8 ranks");
    const std::size_t flags_bytes = sizeof(std::uint32_t) * max_ranks * static_cast<std::size_t>(gpu_max_blocks());
    team_.flags_at = (max_count * sizeof(float) + 255) / 256 * 256;
    team_.rank = ranks.rank();
    team_.ranks = ranks.size();
    team_.epoch = 1;
    CU(cuMemAlloc(&mine_, team_.flags_at + flags_bytes));
    CU(cuMemsetD8(mine_, 0, team_.flags_at + flags_bytes));  // synchronous: zero before any peer has the handle
    CUipcMemHandle handle{};
    CU(cuIpcGetMemHandle(&handle, mine_));
    std::vector<CUipcMemHandle> all(static_cast<std::size_t>(ranks.size()));
    check(ranks.allgather(&handle, sizeof handle, all.data(), pvmm::deadline_in(std::chrono::seconds(30))).has_value(),
          "allgather of the cuIpc handles");
    for (int r = 0; r < ranks.size(); ++r) {
      CUdeviceptr p = mine_;
      if (r != ranks.rank())
        CU(cuIpcOpenMemHandle(&p, all[static_cast<std::size_t>(r)], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
      team_.slots[r] = reinterpret_cast<char*>(p);
    }
  }
  ~raw_reducer() override {
    (void)cudaDeviceSynchronize();
    for (int r = 0; r < team_.ranks; ++r)
      if (r != team_.rank) (void)cuIpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(team_.slots[r]));
    (void)ranks_.barrier(pvmm::deadline_in(std::chrono::seconds(30)));  // every peer closed mine before it goes
    (void)cuMemFree(mine_);
  }
  void enqueue(std::size_t count) override {
    launch(team_, count);
    team_.epoch += 2;
  }

 private:
  void* input_slot() override { return team_.slots[team_.rank]; }
  pvmm::bootstrap& ranks_;
  CUdeviceptr mine_ = 0;
  raw_team team_;
};

#if PVMM_BENCH_NCCL
#define NCCL(call) ::bench::check((call) == ncclSuccess, #call)

class nccl_reducer final : public gpu_reducer {
 public:
  nccl_reducer(pvmm::bootstrap& ranks, std::size_t max_count) : gpu_reducer(max_count) {
    CUDART(cudaMalloc(&input_, max_count * sizeof(float)));
    // Never a multicast object: NVLS (NVLink SHARP) is NCCL's multicast path; CollNet is the network's. Set before
    // NCCL's first call here (it caches its parameters when first read). ncclCommInitRank has no timeout: a peer
    // that never comes is the parent's deadline.
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    ::setenv("NCCL_COLLNET_ENABLE", "0", 1);
    ncclUniqueId id{};
    if (ranks.rank() == 0) NCCL(ncclGetUniqueId(&id));
    std::vector<ncclUniqueId> all(static_cast<std::size_t>(ranks.size()));
    check(ranks.allgather(&id, sizeof id, all.data(), pvmm::deadline_in(std::chrono::seconds(30))).has_value(),
          "allgather of NCCL's unique id");
    NCCL(ncclCommInitRank(&comm_, ranks.size(), all[0], ranks.rank()));
  }
  ~nccl_reducer() override {
    (void)cudaStreamSynchronize(stream());
    (void)ncclCommDestroy(comm_);
    (void)cudaFree(input_);
  }
  void enqueue(std::size_t count) override {
    NCCL(ncclAllReduce(input_, out(), count, ncclFloat, ncclSum, comm_, stream()));
  }
  // NCCL's kernels wait for their peers without a timeout: the stream is polled against a deadline, and NCCL's
  // own errors are looked at while it waits.
  void finish() override {
    const auto until = clock_type::now() + std::chrono::seconds(10);
    cudaError_t e;
    while ((e = cudaStreamQuery(stream())) == cudaErrorNotReady) {
      if (!expired().empty() || clock_type::now() > until) {
        std::fprintf(stderr, "pvmm-bench: FAIL: teams all-reduce, NCCL's side: %s\n",
                     expired().empty() ? "ncclAllReduce not done within 10 s" : expired().c_str());
        std::exit(1);  // exiting tears the communicator and the stuck kernel down
      }
    }
    CUDART(e);
  }
  std::string expired() override {
    ncclResult_t async = ncclSuccess;
    NCCL(ncclCommGetAsyncError(comm_, &async));
    return async == ncclSuccess ? "" : std::string("NCCL: ") + ncclGetErrorString(async);
  }

 private:
  void* input_slot() override { return input_; }
  void* input_ = nullptr;
  ncclComm_t comm_ = nullptr;
};
#endif

}  // namespace

int gpu_max_blocks() {
  int device = 0, sms = 0;
  CUDART(cudaGetDevice(&device));
  CUDART(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

std::unique_ptr<reducer> gpu_pvmm_reducer(const pvmm::symmetric_window& window, std::size_t max_count) {
  return std::make_unique<pvmm_reducer>(window, max_count);
}

std::unique_ptr<reducer> gpu_raw_reducer(pvmm::bootstrap& ranks, std::size_t max_count) {
  return std::make_unique<raw_reducer>(ranks, max_count);
}

#if PVMM_BENCH_NCCL
std::unique_ptr<reducer> gpu_nccl_reducer(pvmm::bootstrap& ranks, std::size_t max_count) {
  return std::make_unique<nccl_reducer>(ranks, max_count);
}
#endif

}  // namespace bench::allreduce
