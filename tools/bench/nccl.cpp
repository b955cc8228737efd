// pvmm-bench nccl (cuda): NCCL's ncclMemAlloc / ncclMemFree (one cuMem allocation that every peer GPU can
// access) against pvmm doing the same job: the same properties (posix fd, fabric where the device has it,
// GPUDirect RDMA where it has that), the size rounded to the recommended granularity, one mapping granted to
// this GPU and every GPU that can access it. Built when nccl.h and libnccl are found (tools/CMakeLists.txt).
// ncclMemAlloc only queries the multicast granularity; neither side creates a multicast object.
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "bench.hpp"

#if PVMM_BENCH_NCCL
#include <nccl.h>
#endif

namespace bench {

#if PVMM_BENCH_NCCL
namespace {

/// What ncclMemAlloc hands out, made with pvmm: the owners keep it alive; dropping them unmaps and frees.
struct pvmm_peer_buffer {
  pvmm::physical_allocation memory;
  pvmm::address_reservation range;
};

pvmm_peer_buffer pvmm_alloc(std::size_t size, const pvmm::allocation_properties& props,
                            const std::vector<pvmm::access_descriptor>& grants, std::size_t unit) {
  const std::size_t rounded = (size + unit - 1) / unit * unit;
  pvmm_peer_buffer b;
  b.memory = pvmm::physical_allocation::create(rounded, props).value();
  b.range = pvmm::address_reservation::reserve(rounded, unit).value();
  check(b.range.map_and_grant(0, b.memory, 0, rounded, grants).has_value(), "map_and_grant");
  return b;
}

}  // namespace

void nccl() {
  int version = 0;
  check(ncclGetVersion(&version) == ncclSuccess, "ncclGetVersion");
  const auto device = pvmm::query_device(0).value();
  pvmm::allocation_properties props;
  props.exportable = pvmm::handle_types::posix_fd;
  if (device.capabilities.sharing.fabric) props.exportable = props.exportable | pvmm::handle_types::fabric;
  props.gpu_direct_rdma = device.capabilities.vmm.gpu_direct_rdma;
  const std::size_t unit = pvmm::query_granularity(props).value().recommended;
  // Fabric needs IMEX as well as the device: like NCCL, fall back to posix fd when it is refused (NCCL asks the
  // driver again on every call; pvmm's side asks once here).
  if (!pvmm::physical_allocation::create(unit, props)) props.exportable = pvmm::handle_types::posix_fd;
  std::vector<pvmm::access_descriptor> grants{{pvmm::location::device(0), pvmm::access::read_write}};
  const int n = pvmm::device_count().value();
  for (int d = 1; d < n; ++d)
    if (auto peer = pvmm::can_access_peer(d, 0); peer && *peer)
      grants.push_back({pvmm::location::device(d), pvmm::access::read_write});
  CUDART(cudaSetDevice(0));
  {  // NCCL's first call loads its driver entry points: not part of the comparison
    void* p = nullptr;
    check(ncclMemAlloc(&p, unit) == ncclSuccess && ncclMemFree(p) == ncclSuccess, "ncclMemAlloc warm-up");
  }
  const int rounds = 21;
  fmt::print(
      "\nnccl: allocate + free of peer-accessible memory, NCCL {} ncclMemAlloc/ncclMemFree against pvmm doing the "
      "same ({} GPU(s) granted, {}{}), {} interleaved rounds\n",
      version, grants.size(), props.exportable == pvmm::handle_types::posix_fd ? "posix fd" : "posix fd + fabric",
      props.gpu_direct_rdma ? ", GPUDirect RDMA" : "", rounds);
  table_header("pvmm us", "nccl us");
  for (std::size_t size : {std::size_t{2} << 20, std::size_t{64} << 20, std::size_t{1} << 30}) {
    const int per_round = size >= (std::size_t{1} << 30) ? 2 : 8;
    auto pvmm_pair = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < per_round; ++i) (void)pvmm_alloc(size, props, grants, unit);
      return seconds_since(t0) / per_round;
    };
    auto nccl_pair = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < per_round; ++i) {
        void* p = nullptr;
        check(ncclMemAlloc(&p, size) == ncclSuccess, "ncclMemAlloc");
        check(ncclMemFree(p) == ncclSuccess, "ncclMemFree");
      }
      return seconds_since(t0) / per_round;
    };
    spread_row(fmt::format("alloc + free vs ncclMemAlloc/ncclMemFree, {} MiB", size >> 20),
               interleaved(rounds, pvmm_pair, nccl_pair));
  }
}
#else
void nccl() {
  fmt::print(
      "\nnccl: [pvmm-skip] not built: nccl.h and libnccl were not found at configure time "
      "(set PVMM_NCCL_ROOT, or install NCCL)\n");
}
#endif

}  // namespace bench
