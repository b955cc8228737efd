// pvmm never leaves the caller's current CUDA context changed. Programs that run in a context of their own
// (cuCtxCreate, as cuda-samples do) launch into whatever is current after a pvmm call, so query_memory and the
// testing copies, which need a context, must put the caller's back. Checked twice: against a driver table that
// keeps a context stack the way the driver does (runs anywhere), and against the real driver with a
// user-created context (on a GPU machine).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <cstdio>
#include <vector>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#include "fake_driver.hpp"

namespace {

constexpr std::size_t two_mib = std::size_t{2} << 20;

// ---- the fake driver with a per-thread context stack, like the driver's ----
thread_local std::vector<CUcontext> stack;
CUcontext seen_by_last_call = nullptr;  // the context current when the last memory call ran

CUcontext fake(std::uintptr_t v) { return reinterpret_cast<CUcontext>(v); }
CUcontext current() { return stack.empty() ? nullptr : stack.back(); }

CUresult primary_retain(CUcontext* c, CUdevice d) {
  *c = fake(0x2000 + static_cast<std::uintptr_t>(d));
  return CUDA_SUCCESS;
}
CUresult get_current(CUcontext* c) {
  *c = current();
  return CUDA_SUCCESS;
}
CUresult set_current(CUcontext c) {  // replaces the top of the stack (pushes onto an empty one)
  if (stack.empty())
    stack.push_back(c);
  else
    stack.back() = c;
  return CUDA_SUCCESS;
}
CUresult push(CUcontext c) {
  stack.push_back(c);
  return CUDA_SUCCESS;
}
CUresult pop(CUcontext* c) {
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (c) *c = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult synchronize() { return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
CUresult mem_info(size_t* free, size_t* total) {
  seen_by_last_call = current();
  *free = 1 << 30;
  *total = 2u << 30;
  return CUDA_SUCCESS;
}
CUresult htod(CUdeviceptr, const void*, size_t) {
  seen_by_last_call = current();
  return CUDA_SUCCESS;
}
CUresult dtoh(void*, CUdeviceptr, size_t) {
  seen_by_last_call = current();
  return CUDA_SUCCESS;
}

pvmm::cuda::driver_api context_stack_table() {
  pvmm::cuda::driver_api t = pvmm::cuda::fake::table(2);
  t.cuDevicePrimaryCtxRetain = primary_retain;
  t.cuCtxGetCurrent = get_current;
  t.cuCtxSetCurrent = set_current;
  t.cuCtxPushCurrent = push;
  t.cuCtxPopCurrent = pop;
  t.cuCtxSynchronize = synchronize;
  t.cuMemGetInfo = mem_info;
  // The copies' range check asks which access the copying device has (testing.hpp: it needs access); the generic
  // fake entry answers none, the grant made below is read_write.
  t.cuMemGetAccess = [](unsigned long long* flags, const CUmemLocation*, CUdeviceptr) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return CUDA_SUCCESS;
  };
  t.cuMemcpyHtoD = htod;
  t.cuMemcpyDtoH = dtoh;
  return t;
}

}  // namespace

TEST_CASE("query_memory and the testing copies run in the primary context and give the caller's back") {
  const pvmm::cuda::fake::installed_table driver(context_stack_table());
  const CUcontext user = fake(0x1111), primary1 = fake(0x2001);

  {  // every pvmm object goes before the real driver table comes back: its destructors call the fake one
    pvmm::allocation_properties p;
    p.location = pvmm::location::device(1);
    auto memory = pvmm::physical_allocation::create(two_mib, p).value();
    auto range = pvmm::address_reservation::reserve(two_mib).value();
    REQUIRE(range.map_and_grant(0, memory, {{pvmm::location::device(1), pvmm::access::read_write}}).has_value());
    char byte = 7;

    SUBCASE("a context of the user's own is current") {
      stack = {user};
      REQUIRE(pvmm::query_memory(1).has_value());
      CHECK(seen_by_last_call == primary1);
      CHECK(stack == std::vector<CUcontext>{user});
      REQUIRE(pvmm::testing::copy_to_mapping(range.address(), &byte, 1, 1).has_value());
      CHECK(seen_by_last_call == primary1);
      CHECK(stack == std::vector<CUcontext>{user});
      REQUIRE(pvmm::testing::copy_from_mapping(&byte, range.address(), 1, 1).has_value());
      CHECK(seen_by_last_call == primary1);
      CHECK(stack == std::vector<CUcontext>{user});
    }
    SUBCASE("no context is current: none is left current") {
      stack.clear();
      REQUIRE(pvmm::query_memory(1).has_value());
      CHECK(seen_by_last_call == primary1);
      CHECK(stack.empty());
      REQUIRE(pvmm::testing::copy_to_mapping(range.address(), &byte, 1, 1).has_value());
      CHECK(stack.empty());
    }
    SUBCASE("the primary context is already current: nothing is pushed") {
      stack = {primary1};
      REQUIRE(pvmm::query_memory(1).has_value());
      CHECK(seen_by_last_call == primary1);
      CHECK(stack == std::vector<CUcontext>{primary1});
    }
    SUBCASE("another device's primary context is current: it stays current") {
      stack = {fake(0x2000)};
      REQUIRE(pvmm::query_memory(1).has_value());
      CHECK(seen_by_last_call == primary1);
      CHECK(stack == std::vector<CUcontext>{fake(0x2000)});
    }
    stack = {primary1};
    CHECK(range.unmap(0, two_mib).has_value());
  }
}

namespace {
// The real driver's context calls, opened the way pvmm opens it (the test binary starts without a driver).
using ctx_create_v2 = CUresult (*)(CUcontext*, unsigned int, CUdevice);
using ctx_destroy_v2 = CUresult (*)(CUcontext);
using ctx_get = CUresult (*)(CUcontext*);
using get_proc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
}  // namespace

TEST_CASE("a program in a context it created (cuCtxCreate) still has it current after pvmm calls") {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib || !pvmm::query_backend().available || pvmm::device_count().value() == 0) {
    std::printf("[pvmm-skip] no CUDA driver or device here\n");
    return;
  }
  auto proc = reinterpret_cast<get_proc>(::dlsym(lib, "cuGetProcAddress_v2"));
  REQUIRE(reinterpret_cast<void*>(proc) != nullptr);
  ctx_create_v2 create = nullptr;
  ctx_destroy_v2 destroy = nullptr;
  ctx_get get = nullptr;
  CUdriverProcAddressQueryResult found{};
  REQUIRE(proc("cuCtxCreate", reinterpret_cast<void**>(&create), 3020, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
          CUDA_SUCCESS);
  REQUIRE(proc("cuCtxDestroy", reinterpret_cast<void**>(&destroy), 4000, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
          CUDA_SUCCESS);
  REQUIRE(proc("cuCtxGetCurrent", reinterpret_cast<void**>(&get), 4000, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
          CUDA_SUCCESS);

  CUcontext own = nullptr;
  REQUIRE(create(&own, 0, 0) == CUDA_SUCCESS);  // current from here on
  auto current = [&] {
    CUcontext c = nullptr;
    REQUIRE(get(&c) == CUDA_SUCCESS);
    return c;
  };
  REQUIRE(current() == own);
  {
    REQUIRE(pvmm::query_memory(0).has_value());
    CHECK(current() == own);
    pvmm::allocation_properties p;
    const std::size_t size = pvmm::query_granularity(p).value().minimum;
    auto memory = pvmm::physical_allocation::create(size, p).value();
    auto range = pvmm::address_reservation::reserve(size).value();
    REQUIRE(range.map_and_grant(0, memory, {{pvmm::location::device(0), pvmm::access::read_write}}).has_value());
    CHECK(current() == own);
    std::vector<unsigned> out(size / sizeof(unsigned)), in(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<unsigned>(i * 2654435761u);
    REQUIRE(pvmm::testing::copy_to_mapping(range.address(), out.data(), size, 0).has_value());
    CHECK(current() == own);
    REQUIRE(pvmm::testing::copy_from_mapping(in.data(), range.address(), size, 0).has_value());
    CHECK(current() == own);
    CHECK(in == out);
    // Stream-ordered pool calls on a stream of pvmm's (the primary context) while the program's context is current:
    // the driver takes them, or pvmm enters the stream's context for them; either way the program's stays current.
    auto s = pvmm::stream::create(0).value();
    CHECK(current() == own);
    auto pool = pvmm::memory_pool::create({}).value();
    auto block = pool.allocate(size, s).value();
    CHECK(current() == own);
    REQUIRE(s.copy_async(block.data(), out.data(), size).has_value());
    REQUIRE(s.copy_async(in.data(), block.data(), size).has_value());
    REQUIRE(block.free_async(s).has_value());
    REQUIRE(s.synchronize().has_value());
    CHECK(current() == own);
    CHECK(in == out);
  }
  CHECK(destroy(own) == CUDA_SUCCESS);
}
