// Multicast through pvmm, verified without a multicast object ever existing: the driver table is replaced
// by the fake driver with the calls under test recording themselves and their arguments. (Creating a real multicast
// object on shared GPU machines can take them down; real-hardware tests run only with PVMM_ENABLE_MULTICAST_TESTS=1.)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/team_multicast.hpp>

#include "fake_driver.hpp"

namespace {

std::vector<std::string> calls;  // the recorded driver calls, in order
int import_fd_number = -1;
constexpr CUmemGenericAllocationHandle fake_multicast = 0xC0FFEE;
constexpr CUmemGenericAllocationHandle fake_memory = 0xBEEF;
constexpr CUdeviceptr fake_address = 0x7f0000000000ULL;
CUdeviceptr next_address = fake_address;  // reservations follow one another from fake_address, 1 GiB apart
constexpr std::size_t two_mib = std::size_t{2} << 20;

void record(std::string s) { calls.push_back(std::move(s)); }

CUresult attribute(int* v, CUdevice_attribute a, CUdevice) {
  *v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED || a == CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED ||
       a == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED;
  return CUDA_SUCCESS;
}
CUresult mem_create(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* p, unsigned long long) {
  record(fmt::format("cuMemCreate(size={:#x}, device={})", size, p->location.id));
  *h = fake_memory;
  return CUDA_SUCCESS;
}
CUresult mem_release(CUmemGenericAllocationHandle h) {
  record(fmt::format("cuMemRelease({:#x})", h));
  return CUDA_SUCCESS;
}
CUresult reserve(CUdeviceptr* p, size_t size, size_t, CUdeviceptr, unsigned long long) {
  record(fmt::format("cuMemAddressReserve(size={:#x})", size));
  *p = next_address;
  next_address += CUdeviceptr{1} << 30;
  return CUDA_SUCCESS;
}
CUresult address_free(CUdeviceptr p, size_t size) {
  record(fmt::format("cuMemAddressFree({:#x}, {:#x})", p, size));
  return CUDA_SUCCESS;
}
CUresult mem_map(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long) {
  record(fmt::format("cuMemMap({:#x}, size={:#x}, offset={:#x}, handle={:#x})", p, size, offset, h));
  return CUDA_SUCCESS;
}
CUresult mem_unmap(CUdeviceptr p, size_t size) {
  record(fmt::format("cuMemUnmap({:#x}, {:#x})", p, size));
  return CUDA_SUCCESS;
}
CUresult set_access(CUdeviceptr p, size_t size, const CUmemAccessDesc* d, size_t n) {
  std::string who;
  for (size_t i = 0; i < n; ++i) who += fmt::format("{}dev{}:{}", i ? "," : "", d[i].location.id, int(d[i].flags));
  record(fmt::format("cuMemSetAccess({:#x}, {:#x}, [{}])", p, size, who));
  return CUDA_SUCCESS;
}
CUresult export_handle(void* out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t, unsigned long long) {
  record(fmt::format("cuMemExportToShareableHandle({:#x}, type={})", h, int(t)));
  *static_cast<int*>(out) = ::dup(0);
  return CUDA_SUCCESS;
}
CUresult import_handle(CUmemGenericAllocationHandle* h, void* os_handle, CUmemAllocationHandleType t) {
  record(fmt::format("cuMemImportFromShareableHandle(fd={}, type={})",
                     static_cast<int>(reinterpret_cast<std::uintptr_t>(os_handle)), int(t)));
  *h = fake_multicast + 1;
  return CUDA_SUCCESS;
}
CUresult mc_granularity(size_t* g, const CUmulticastObjectProp* p, CUmulticastGranularity_flags f) {
  record(fmt::format("cuMulticastGetGranularity(devices={}, flags={})", p->numDevices, int(f)));
  *g = f == CU_MULTICAST_GRANULARITY_MINIMUM ? two_mib : 2 * two_mib;
  return CUDA_SUCCESS;
}
CUresult mc_create(CUmemGenericAllocationHandle* h, const CUmulticastObjectProp* p) {
  record(
      fmt::format("cuMulticastCreate(devices={}, size={:#x}, handleTypes={})", p->numDevices, p->size, p->handleTypes));
  *h = fake_multicast;
  return CUDA_SUCCESS;
}
CUresult mc_add(CUmemGenericAllocationHandle h, CUdevice d) {
  record(fmt::format("cuMulticastAddDevice({:#x}, {})", h, d));
  return CUDA_SUCCESS;
}
CUresult mc_bind(CUmemGenericAllocationHandle mc, size_t mc_offset, CUmemGenericAllocationHandle mem, size_t mem_offset,
                 size_t size, unsigned long long) {
  record(fmt::format("cuMulticastBindMem({:#x}, {:#x}, {:#x}, {:#x}, {:#x})", mc, mc_offset, mem, mem_offset, size));
  return CUDA_SUCCESS;
}
CUresult mc_unbind(CUmemGenericAllocationHandle mc, CUdevice d, size_t offset, size_t size) {
  record(fmt::format("cuMulticastUnbind({:#x}, {}, {:#x}, {:#x})", mc, d, offset, size));
  return CUDA_SUCCESS;
}

// The recorded calls are `expected`; each call that differs is named.
void check_calls(const std::vector<std::string>& expected) {
  CHECK(calls == expected);
  for (std::size_t i = 0; i < std::max(calls.size(), expected.size()); ++i)
    if (i >= calls.size() || i >= expected.size() || calls[i] != expected[i])
      MESSAGE("call ", i, ": got '", (i < calls.size() ? calls[i] : "-"), "' expected '",
              (i < expected.size() ? expected[i] : "-"), "'");
}

pvmm::cuda::driver_api recording_table() {
  pvmm::cuda::driver_api t = pvmm::cuda::fake::table(2);
  t.cuDeviceGetAttribute = attribute;
  t.cuMemCreate = mem_create;
  t.cuMemRelease = mem_release;
  t.cuMemAddressReserve = reserve;
  t.cuMemAddressFree = address_free;
  t.cuMemMap = mem_map;
  t.cuMemUnmap = mem_unmap;
  t.cuMemSetAccess = set_access;
  t.cuMemExportToShareableHandle = export_handle;
  t.cuMemImportFromShareableHandle = import_handle;
  t.cuMulticastGetGranularity = mc_granularity;
  t.cuMulticastCreate = mc_create;
  t.cuMulticastAddDevice = mc_add;
  t.cuMulticastBindMem = mc_bind;
  t.cuMulticastUnbind = mc_unbind;
  return t;
}

}  // namespace

TEST_CASE("multicast: create, add devices, bind, map, grant, export, unbind, release - the exact driver calls") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  {
    REQUIRE(pvmm::query_device(0).value().capabilities.multicast.supported);
    pvmm::multicast_properties props;
    props.team_size = 2;
    props.size = 2 * two_mib;
    props.exportable = pvmm::handle_types::posix_fd;
    auto g = pvmm::multicast_granularity(props).value();
    CHECK(g.minimum == two_mib);
    CHECK(g.recommended == 2 * two_mib);
    calls.clear();
    next_address = fake_address;

    auto mc = pvmm::multicast_object::create(props).value();
    CHECK(mc.add_device(0).has_value());
    CHECK(mc.add_device(1).has_value());
    pvmm::allocation_properties mp;
    mp.location = pvmm::location::device(0);
    auto memory = pvmm::physical_allocation::create(2 * two_mib, mp).value();
    CHECK(mc.bind_memory(0, memory, 0, 2 * two_mib).has_value());
    // Bad input never reaches the driver.
    CHECK(mc.bind_memory(two_mib, memory, 0, 2 * two_mib).code() == pvmm::errc::out_of_range);
    CHECK(mc.add_device(7).code() == pvmm::errc::invalid_device);
    auto range = pvmm::address_reservation::reserve(2 * two_mib).value();
    CHECK(range.map(0, mc, 0, 2 * two_mib).has_value());
    CHECK(range.set_access(0, 2 * two_mib, {{pvmm::location::device(0), pvmm::access::read_write}}).has_value());
    auto fd = mc.export_posix_fd().value();
    CHECK(fd.valid());
    {
      // The importing side: the same object, by value of the fd; released once, on its own.
      auto imported = pvmm::multicast_object::import_posix_fd(fd.get(), 2 * two_mib).value();
      CHECK(imported.native_handle().value == fake_multicast + 1);
      import_fd_number = fd.get();
    }
    CHECK(range.unmap(0, 2 * two_mib).has_value());
    CHECK(mc.unbind(0, 0, 2 * two_mib).has_value());
    CHECK(mc.release().has_value());
    CHECK(memory.release().has_value());
    CHECK(range.release().has_value());
  }
  const std::vector<std::string> expected{
      "cuMulticastGetGranularity(devices=2, flags=0)",
      "cuMulticastGetGranularity(devices=2, flags=1)",
      "cuMulticastCreate(devices=2, size=0x400000, handleTypes=1)",
      "cuMulticastAddDevice(0xc0ffee, 0)",
      "cuMulticastAddDevice(0xc0ffee, 1)",
      "cuMemCreate(size=0x400000, device=0)",
      "cuMulticastBindMem(0xc0ffee, 0x0, 0xbeef, 0x0, 0x400000)",
      "cuMemAddressReserve(size=0x400000)",
      "cuMemMap(0x7f0000000000, size=0x400000, offset=0x0, handle=0xc0ffee)",
      "cuMemSetAccess(0x7f0000000000, 0x400000, [dev0:3])",
      "cuMemExportToShareableHandle(0xc0ffee, type=1)",
      fmt::format("cuMemImportFromShareableHandle(fd={}, type=1)", import_fd_number),
      "cuMemRelease(0xc0ffef)",
      "cuMemUnmap(0x7f0000000000, 0x400000)",
      "cuMulticastUnbind(0xc0ffee, 0, 0x0, 0x400000)",
      "cuMemRelease(0xc0ffee)",
      "cuMemRelease(0xbeef)",
      "cuMemAddressFree(0x7f0000000000, 0x400000)",
  };
  check_calls(expected);
}

// A team of one rank: the team's steps in their order, and teardown in the driver's (unmap, unbind, release).
TEST_CASE("team multicast: capability, create, add device, bind the slot, map, grant, released in reverse") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  next_address = fake_address;
  {
    auto ranks = pvmm::make_thread_bootstraps(1).value();
    auto members = pvmm::team::create(ranks[0]).value();
    pvmm::window_options o;
    o.size = two_mib;
    auto window = pvmm::symmetric_window::create(members, o).value();
    calls.clear();
    auto mc = pvmm::team_multicast::create(window).value();
    CHECK(mc.bound_ranks() == std::vector<int>{0});
    CHECK(mc.size() == two_mib);
    CHECK(reinterpret_cast<CUdeviceptr>(mc.address()) == fake_address + (CUdeviceptr{1} << 30));
    CHECK(mc.release().has_value());
    CHECK(mc.release().code() == pvmm::errc::already_released);
  }
  const std::vector<std::string> expected{
      // Every rank's granularity, allgathered before any create; then create's own check.
      "cuMulticastGetGranularity(devices=1, flags=0)",
      "cuMulticastGetGranularity(devices=1, flags=1)",
      "cuMulticastGetGranularity(devices=1, flags=0)",
      "cuMulticastGetGranularity(devices=1, flags=1)",
      "cuMulticastCreate(devices=1, size=0x200000, handleTypes=0)",
      "cuMulticastAddDevice(0xc0ffee, 0)",
      "cuMulticastBindMem(0xc0ffee, 0x0, 0xbeef, 0x0, 0x200000)",
      "cuMemAddressReserve(size=0x200000)",
      "cuMemMap(0x7f0040000000, size=0x200000, offset=0x0, handle=0xc0ffee)",
      "cuMemSetAccess(0x7f0040000000, 0x200000, [dev0:3])",
      "cuMemUnmap(0x7f0040000000, 0x200000)",
      "cuMemAddressFree(0x7f0040000000, 0x200000)",
      "cuMulticastUnbind(0xc0ffee, 0, 0x0, 0x200000)",
      "cuMemRelease(0xc0ffee)",
      "cuMemUnmap(0x7f0000000000, 0x200000)",
      "cuMemRelease(0xbeef)",
      "cuMemAddressFree(0x7f0000000000, 0x200000)",
  };
  check_calls(expected);
}

TEST_CASE("multicast on real hardware only when PVMM_ENABLE_MULTICAST_TESTS=1") {
  const char* enabled = std::getenv("PVMM_ENABLE_MULTICAST_TESTS");
  if (!enabled || std::string(enabled) != "1") {
    std::printf("[pvmm-skip] multicast hardware test: PVMM_ENABLE_MULTICAST_TESTS is not 1\n");
    return;
  }
  if (pvmm::device_count().value() < 1 || !pvmm::query_device(0).value().capabilities.multicast.supported) {
    std::printf("[pvmm-skip] multicast hardware test: device 0 has no multicast\n");
    return;
  }
  pvmm::multicast_properties props;
  props.team_size = 1;
  props.size = pvmm::multicast_granularity(props).value().minimum;
  auto mc = pvmm::multicast_object::create(props).value();
  REQUIRE(mc.add_device(0).has_value());
  pvmm::allocation_properties mp;
  auto memory = pvmm::physical_allocation::create(props.size, mp).value();
  REQUIRE(mc.bind_memory(0, memory, 0, props.size).has_value());
  auto range = pvmm::address_reservation::reserve(props.size).value();
  REQUIRE(range.map(0, mc, 0, props.size).has_value());
  REQUIRE(range.set_access(0, props.size, {{pvmm::location::device(0), pvmm::access::read_write}}).has_value());
  REQUIRE(range.unmap(0, props.size).has_value());
  REQUIRE(mc.unbind(0, 0, props.size).has_value());
}
