// team_kernel: several processes on one GPU share memory through a symmetric window, with kernels on both sides.
//
// Each rank writes its own slot with a kernel, the ranks meet at the bootstrap's barrier, and a second kernel
// reads every peer's slot through the flat window (rank r at base() + r * stride()) and counts the words that
// are not what their writer put there. The count is copied back and printed. Ranks that share one GPU import
// each other's memory like any peer's (the anchors refuse this or call it experimental).
// One source for CUDA (nvcc) and HIP (hipcc).
//
//   pvmm_example_team_kernel --spawn 4      four processes (one GPU is enough), meeting at a pvmm endpoint
// Without a device it prints "[pvmm-skip]" and succeeds. Rank 0 prints one line; FAIL and nonzero otherwise.
#include "gpu.hpp"

#include <cstdint>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>

#include "team_launch.hpp"

namespace {

constexpr const char* name = "team_kernel";
constexpr std::size_t words_per_rank = std::size_t{1} << 20;  // 4 MiB of 32-bit words in each slot

__host__ __device__ std::uint32_t value(int rank, std::size_t i) {
  return static_cast<std::uint32_t>(rank) * 0x9e3779b9u + static_cast<std::uint32_t>(i);
}

__global__ void fill(std::uint32_t* slot, int rank, std::size_t words) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    slot[i] = value(rank, i);
}

// wrong[r] counts the words of rank r's slot, read through the flat window, that differ from what r wrote.
__global__ void verify(const unsigned char* base, std::size_t stride, int ranks, std::size_t words,
                       unsigned long long* wrong) {
  for (int r = 0; r < ranks; ++r) {
    const auto* slot = reinterpret_cast<const std::uint32_t*>(base + r * stride);
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
      if (slot[i] != value(r, i)) atomicAdd(&wrong[r], 1ull);
  }
}

int write_then_read(std::shared_ptr<pvmm::bootstrap> ranks) {
  const int me = ranks->rank();
  auto options = team_example::options_for(*ranks);
  options.device = 0;  // every process on one GPU: the case the anchors refuse
  auto team = pvmm::team::create(ranks, options).value();
  pvmm::window_options wo;
  wo.size = words_per_rank * sizeof(std::uint32_t);
  wo.timeout = team_example::collective_timeout;
  auto window = pvmm::symmetric_window::create(team, wo).value();
  const int n = window.size();
  if (!team_example::all_mapped(name, window)) return 1;
  if (!gpu_ok(name, GPU(SetDevice)(team.device()), "set device", me)) return 1;

  // 1. Write the own slot with a kernel; it has finished before this rank reaches the barrier.
  fill<<<256, 256>>>(static_cast<std::uint32_t*>(window.local()), me, words_per_rank);
  if (!gpu_ok(name, GPU(DeviceSynchronize)(), "fill kernel", me)) return 1;
  ranks->barrier(pvmm::deadline_in(team_example::collective_timeout)).value();

  // 2. Read every slot through the flat window with a kernel; count what differs.
  unsigned long long* wrong = nullptr;
  if (!gpu_ok(name, GPU(Malloc)(&wrong, sizeof(unsigned long long) * n), "allocate the counters", me)) return 1;
  int status = 0;
  std::vector<unsigned long long> counted(n);
  if (!gpu_ok(name, GPU(Memset)(wrong, 0, sizeof(unsigned long long) * n), "clear the counters", me)) status = 1;
  if (status == 0) {
    verify<<<256, 256>>>(static_cast<const unsigned char*>(window.base()), window.stride(), n, words_per_rank, wrong);
    if (!gpu_ok(name, GPU(DeviceSynchronize)(), "verify kernel", me) ||
        !gpu_ok(name, GPU(Memcpy)(counted.data(), wrong, sizeof(unsigned long long) * n, GPU(MemcpyDeviceToHost)),
                "copy the counters back", me))
      status = 1;
  }
  (void)GPU(Free)(wrong);
  if (status != 0) return status;
  for (int r = 0; r < n; ++r)
    if (counted[r] != 0) {
      std::printf("%s: rank %d: FAIL: %llu words of rank %d's slot differ\n", name, me, counted[r], r);
      return 1;
    }

  if (me == 0)
    std::printf(
        "%s: %d processes on device %d wrote their slots with a kernel and read every peer's: 0 wrong words: "
        "ok\n",
        name, n, team.device());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return team_example::launch(name, argc, argv, write_then_read); }
