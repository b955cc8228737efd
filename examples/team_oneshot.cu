// team_oneshot: PyTorch SymmetricMemory's one-shot all-reduce, written over pvmm/team_device.hpp.
//
// Every rank copies its input into its own slot; one kernel then meets every peer at a device barrier (signal
// pads, bounded: a dead peer makes the barrier expire, never hang the GPU), sums every peer's slot through the
// flat window into its output, and meets them again so no rank overwrites a slot a peer still reads. The barrier
// runs in one thread of the block; __syncthreads orders the block around it.
// Several processes on one GPU, each its own rank.
//
//   pvmm_example_team_oneshot --spawn 4
// Without a device it prints "[pvmm-skip]" and succeeds. Rank 0 prints one line; FAIL and nonzero otherwise.
#include "gpu.hpp"

#include <cstdint>
#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/team.hpp>
#include <pvmm/team_device.hpp>

#include "team_launch.hpp"

namespace {

constexpr const char* name = "team_oneshot";
constexpr std::size_t words = std::size_t{1} << 18;        // 1 MiB of floats per rank
constexpr std::uint64_t barrier_timeout_ns = 10000000000;  // 10 s: a lost peer ends the kernel, never hangs it

__global__ void one_shot_all_reduce(pvmm::window_view view, float* out, std::size_t n, int* expired) {
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = view.barrier(0, barrier_timeout_ns);  // every input is in its slot
  __syncthreads();
  if (!ok) {
    if (threadIdx.x == 0) *expired = 1;
    return;
  }
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) {
    float sum = 0;
    for (int r = 0; r < view.size; ++r) sum += static_cast<const float*>(view.peer(r))[i];
    out[i] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0 && !view.barrier(0, barrier_timeout_ns)) *expired = 1;  // nobody reads my slot any more
}

int run(std::shared_ptr<pvmm::bootstrap> ranks) {
  const int me = ranks->rank();
  auto options = team_example::options_for(*ranks);
  options.device = 0;
  auto team = pvmm::team::create(ranks, options).value();
  pvmm::window_options wo;
  wo.size = words * sizeof(float);
  wo.signal_channels = 1;
  wo.timeout = team_example::collective_timeout;
  auto window = pvmm::symmetric_window::create(team, wo).value();
  const int n = window.size();
  if (!team_example::all_mapped(name, window)) return 1;
  if (!gpu_ok(name, GPU(SetDevice)(team.device()), "set device", me)) return 1;
  std::vector<float> input(words);
  for (std::size_t i = 0; i < words; ++i) input[i] = static_cast<float>((me + 1) * (i % 97));
  float* out = nullptr;
  int* expired = nullptr;
  if (!gpu_ok(name, GPU(Memcpy)(window.local(), input.data(), words * sizeof(float), GPU(MemcpyHostToDevice)), "input",
              me) ||
      !gpu_ok(name, GPU(Malloc)(&out, words * sizeof(float)), "allocate the output", me) ||
      !gpu_ok(name, GPU(Malloc)(&expired, sizeof(int)), "allocate the flag", me) ||
      !gpu_ok(name, GPU(Memset)(expired, 0, sizeof(int)), "clear the flag", me))
    return 1;
  one_shot_all_reduce<<<1, 512>>>(window.view().value(), out, words, expired);
  std::vector<float> result(words);
  int expired_host = 0;
  const bool copied =
      gpu_ok(name, GPU(DeviceSynchronize)(), "kernel", me) &&
      gpu_ok(name, GPU(Memcpy)(result.data(), out, words * sizeof(float), GPU(MemcpyDeviceToHost)), "copy the output",
             me) &&
      gpu_ok(name, GPU(Memcpy)(&expired_host, expired, sizeof(int), GPU(MemcpyDeviceToHost)), "flag", me);
  (void)GPU(Free)(out);
  (void)GPU(Free)(expired);
  if (!copied) return 1;
  if (expired_host != 0) {
    std::printf("%s: rank %d: FAIL: a device barrier expired: %s\n", name, me,
                window.signal_status().has_value() ? "(no record)" : window.signal_status().error().message().c_str());
    return 1;
  }
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (std::size_t i = 0; i < words; ++i)
    if (result[i] != ranks_sum * static_cast<float>(i % 97)) {
      std::printf("%s: rank %d: FAIL: word %zu is %g, expected %g\n", name, me, i, result[i],
                  ranks_sum * static_cast<float>(i % 97));
      return 1;
    }
  if (me == 0)
    std::printf("%s: %d processes on device %d: one-shot all-reduce of %zu floats over device barriers: ok\n", name, n,
                team.device(), words);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return team_example::launch(name, argc, argv, run); }
