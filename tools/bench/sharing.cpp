// pvmm-bench sharing: export -> send fd -> import -> map -> first read, pvmm against the raw calls.
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#include "bench.hpp"

namespace bench {

void sharing() {
  pvmm::allocation_properties props;
  props.exportable = pvmm::handle_types::posix_fd;
  if (!pvmm::query_device(0).value().capabilities.sharing.posix_fd) return;
  const std::size_t size = pvmm::query_granularity(props).value().recommended;
  int sv[2];
  check(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  auto exporter = pvmm::physical_allocation::create(size, props).value();
  const int rounds = 41;
  unsigned char byte = 0;
  auto pvmm_trip = [&] {
    auto t0 = clock_type::now();
    {
      auto fd = exporter.export_posix_fd().value();
      int raw = fd.get();
      check(pvmm::ipc::send_fds(sv[0], &raw, 1, "x", 1).has_value(), "send");
      auto got = pvmm::ipc::receive_fds(sv[1], 1, 16).value();
      auto imported = pvmm::physical_allocation::import_posix_fd(got.fds[0].get(), size).value();
      auto range = pvmm::address_reservation::reserve(size).value();
      void* p =
          range.map_and_grant(0, imported, 0, size, {{pvmm::location::device(0), pvmm::access::read_write}}).value();
      check(pvmm::testing::copy_from_mapping(&byte, p, 1).has_value(), "read");
    }
    return seconds_since(t0);
  };
#if PVMM_BENCH_CUDA
  auto raw_trip = [&] {
    auto t0 = clock_type::now();
    {
      int fd = -1;
      CU(cuMemExportToShareableHandle(&fd, static_cast<CUmemGenericAllocationHandle>(exporter.native_handle().value),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      check(pvmm::ipc::send_fds(sv[0], &fd, 1, "x", 1).has_value(), "send");  // the same transport for both
      auto got = pvmm::ipc::receive_fds(sv[1], 1, 16).value();
      close(fd);
      CUmemGenericAllocationHandle h;
      CU(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(got.fds[0].get())),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      CUdeviceptr p;
      CU(cuMemAddressReserve(&p, size, 0, 0, 0));
      CU(cuMemMap(p, size, 0, h, 0));
      const CUmemAccessDesc desc = raw_read_write();
      CU(cuMemSetAccess(p, size, &desc, 1));
      CU(cuMemcpyDtoH(&byte, p, 1));
      CU(cuMemUnmap(p, size));
      CU(cuMemAddressFree(p, size));
      CU(cuMemRelease(h));
    }
    return seconds_since(t0);
  };
#endif
  fmt::print(
      "\nsharing: export -> send fd -> import -> reserve -> map -> grant -> first read -> teardown, {} interleaved "
      "rounds\n",
      rounds);
#if PVMM_BENCH_CUDA
  table_header("pvmm us", "raw us");
  spread_row("round trip vs the raw cuMem calls", interleaved(rounds, pvmm_trip, raw_trip));
#else
  std::vector<double> trips;
  for (int i = 0; i < rounds; ++i) trips.push_back(pvmm_trip());
  fmt::print("  round trip through pvmm: {:.2f} us median (the host backend has no separate raw API to compare)\n",
             median(trips) * 1e6);
#endif
  close(sv[0]), close(sv[1]);
}

}  // namespace bench
