// The pinned staging pool's driver calls on the CUDA backend, without a GPU: the fake driver with the calls under
// test recording themselves. From a driver pool: a host-located pool without handle types, device 0 granted
// read_write, threshold UINT64_MAX, each new block allocated on the pool's own stream and that stream synchronized
// before the block is handed out; a cached block reused only once cuEventQuery answers done; trim frees on the own
// stream, synchronizes it and trims the pool to 0. From pinned allocations: cuMemHostAlloc / cuMemFreeHost.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>

#include "fake_driver.hpp"

namespace {

std::vector<std::string> calls;     // the recorded driver calls, in order
CUresult event_now = CUDA_SUCCESS;  // what cuEventQuery answers
CUdeviceptr next_address = 0x7f0000000000ULL;
std::uintptr_t next_event = 0x500;

void record(std::string s) { calls.push_back(std::move(s)); }
std::size_t count(const std::string& prefix) {
  return static_cast<std::size_t>(std::count_if(
      calls.begin(), calls.end(), [&](const std::string& c) { return c.compare(0, prefix.size(), prefix) == 0; }));
}

pvmm::cuda::driver_api recording_table() {
  auto t = pvmm::cuda::fake::table();
  t.cuMemPoolCreate = [](CUmemoryPool* p, const CUmemPoolProps* props) {
    record(fmt::format("cuMemPoolCreate(location={}, handles={})", int(props->location.type), int(props->handleTypes)));
    *p = reinterpret_cast<CUmemoryPool>(std::uintptr_t{0x300});
    return CUDA_SUCCESS;
  };
  t.cuMemPoolSetAccess = [](CUmemoryPool, const CUmemAccessDesc* d, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      record(fmt::format("cuMemPoolSetAccess(type={}, id={}, flags={})", int(d[i].location.type), d[i].location.id,
                         int(d[i].flags)));
    return CUDA_SUCCESS;
  };
  t.cuMemPoolSetAttribute = [](CUmemoryPool, CUmemPool_attribute a, void* v) {
    if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
      record(fmt::format("threshold={:#x}", std::uint64_t{*static_cast<cuuint64_t*>(v)}));
    return CUDA_SUCCESS;
  };
  t.cuMemAllocFromPoolAsync = [](CUdeviceptr* p, std::size_t size, CUmemoryPool, CUstream) {
    record(fmt::format("cuMemAllocFromPoolAsync({:#x})", size));
    *p = next_address;
    next_address += CUdeviceptr{1} << 30;
    return CUDA_SUCCESS;
  };
  t.cuMemFreeAsync = [](CUdeviceptr, CUstream) { return record("cuMemFreeAsync"), CUDA_SUCCESS; };
  t.cuMemPoolTrimTo = [](CUmemoryPool, std::size_t keep) {
    return record(fmt::format("cuMemPoolTrimTo({})", keep)), CUDA_SUCCESS;
  };
  t.cuStreamSynchronize = [](CUstream) { return record("cuStreamSynchronize"), CUDA_SUCCESS; };
  t.cuEventCreate = [](CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(next_event++);
    return CUDA_SUCCESS;
  };
  t.cuEventRecord = [](CUevent, CUstream) { return record("cuEventRecord"), CUDA_SUCCESS; };
  t.cuEventQuery = [](CUevent) { return record("cuEventQuery"), event_now; };
  t.cuEventSynchronize = [](CUevent) { return record("cuEventSynchronize"), CUDA_SUCCESS; };
  t.cuMemHostAlloc = [](void** p, std::size_t size, unsigned) {
    record(fmt::format("cuMemHostAlloc({:#x})", size));
    *p = reinterpret_cast<void*>(next_address);
    next_address += CUdeviceptr{1} << 30;
    return CUDA_SUCCESS;
  };
  t.cuMemFreeHost = [](void*) { return record("cuMemFreeHost"), CUDA_SUCCESS; };
  return t;
}

// 100000 bytes: 25 pages, in the class of 7 x 16 KiB (4 classes between 64 and 128 KiB).
constexpr std::size_t asked = 100000;
const std::string block_size = "0x1c000";

}  // namespace

TEST_CASE("pinned pool from a driver pool: host location, device granted, blocks gated on the free's event") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  auto s = pvmm::stream::create(0).value();
  calls.clear();
  auto pool = pvmm::pinned_pool::create().value();
  CHECK(pool.source() == pvmm::pinned_source::driver_pool);
  CHECK(count("cuMemPoolCreate(location=" + std::to_string(int(CU_MEM_LOCATION_TYPE_HOST)) + ", handles=0)") == 1);
  CHECK(count(fmt::format("cuMemPoolSetAccess(type={}, id=0, flags={})", int(CU_MEM_LOCATION_TYPE_DEVICE),
                          int(CU_MEM_ACCESS_FLAGS_PROT_READWRITE))) == 1);
  CHECK(count("threshold=0xffffffffffffffff") == 1);

  calls.clear();
  void* p = pool.allocate(asked).value();
  CHECK(calls == std::vector<std::string>{"cuMemAllocFromPoolAsync(" + block_size + ")", "cuStreamSynchronize"});
  REQUIRE(pool.deallocate(p, s).has_value());
  CHECK(count("cuEventRecord") == 1);

  event_now = CUDA_ERROR_NOT_READY;  // the copy from p is still pending
  calls.clear();
  void* q = pool.allocate(asked).value();
  CHECK(q != p);
  CHECK(count("cuEventQuery") == 1);
  CHECK(count("cuMemAllocFromPoolAsync") == 1);
  CHECK(pool.stats().passed_over == 1);

  event_now = CUDA_SUCCESS;
  REQUIRE(pool.deallocate(q, s).has_value());
  calls.clear();
  void* r = pool.allocate(asked).value();
  CHECK(r == p);  // the oldest free, now complete: no driver allocation
  CHECK(count("cuMemAllocFromPoolAsync") == 0);
  REQUIRE(pool.deallocate(r, s).has_value());

  calls.clear();
  REQUIRE(pool.trim().has_value());
  CHECK(count("cuMemFreeAsync") == 2);
  CHECK(count("cuStreamSynchronize") == 1);
  CHECK(count("cuMemPoolTrimTo(0)") == 1);
  CHECK(calls.back() == "cuMemPoolTrimTo(0)");
  CHECK(pool.stats().reserved == 0);
  REQUIRE(pool.release().has_value());
}

TEST_CASE("pinned pool from pinned allocations: cuMemHostAlloc per new block, cuMemFreeHost at trim") {
  const pvmm::cuda::fake::installed_table driver(recording_table());
  auto s = pvmm::stream::create(0).value();
  pvmm::pinned_pool_options o;
  o.driver_pool = false;
  calls.clear();
  auto pool = pvmm::pinned_pool::create(o).value();
  CHECK(pool.source() == pvmm::pinned_source::pinned_allocations);
  CHECK(count("cuMemPoolCreate") == 0);
  void* p = pool.allocate(asked).value();
  CHECK(count("cuMemHostAlloc(" + block_size + ")") == 1);
  REQUIRE(pool.deallocate(p, s).has_value());
  calls.clear();
  CHECK(pool.allocate(asked).value() == p);
  CHECK(count("cuMemHostAlloc") == 0);
  REQUIRE(pool.deallocate(p, s).has_value());
  calls.clear();
  REQUIRE(pool.trim().has_value());
  CHECK(count("cuMemFreeHost") == 1);
  REQUIRE(pool.release().has_value());
}
