// The driver table's own declaration of what each entry is for (PVMM_CUDA_ENTRY_POINTS: required, optional,
// optional_exact), applied the way the loader applies it to a driver's entries, on fake-driver tables with entries
// taken away: the loader's verdict without a driver that lacks them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <pvmm/pvmm.hpp>

#include "fake_driver.hpp"

using pvmm::cuda::apply_entry_needs;
using pvmm::cuda::driver_api;

TEST_CASE("a table with every entry lacks nothing, at any driver version") {
  driver_api t = pvmm::cuda::fake::table();
  CHECK(apply_entry_needs(t, 13000).empty());
  CHECK((t.cuMemAdvise != nullptr));
}

TEST_CASE("missing required entries are named, with the CUDA version of their ABI") {
  driver_api t = pvmm::cuda::fake::table();
  t.cuMemCreate = nullptr;
  t.cuStreamGetCtx = nullptr;
  CHECK(apply_entry_needs(t, 13000) == "cuStreamGetCtx (CUDA 9.2), cuMemCreate (CUDA 10.2)");
}

TEST_CASE("missing optional entries are no error: the capability that needs them reports itself absent") {
  driver_api t = pvmm::cuda::fake::table(2);
  t.cuMulticastCreate = nullptr;
  t.cuMemPoolCreate = nullptr;
  t.cuMemAdvise_device = nullptr;
  REQUIRE(apply_entry_needs(t, 13000).empty());
  const pvmm::cuda::fake::installed_table driver(t);
  const auto caps = pvmm::query_device(0).value().capabilities;
  CHECK_FALSE(caps.multicast.supported);
  CHECK_FALSE(caps.pools.supported);
  CHECK(caps.managed.supported);  // the location ABI is there
  CHECK(caps.vmm.supported);
}

TEST_CASE("a driver older than the location ABI (12.2) has advice and prefetch only in the device-ordinal ABI") {
  driver_api t = pvmm::cuda::fake::table();
  CHECK(apply_entry_needs(t, 12010).empty());
  CHECK((t.cuMemAdvise == nullptr));
  CHECK((t.cuMemPrefetchAsync == nullptr));
  CHECK((t.cuMemAdvise_device != nullptr));
  driver_api current = pvmm::cuda::fake::table();
  CHECK(apply_entry_needs(current, 12020).empty());
  CHECK((current.cuMemAdvise != nullptr));
}

namespace pvmm::detail {
void note_driver_initialised() noexcept;  // backend/fork_guard.hpp (exported with every pvmm:: symbol)
}

// What a failed driver call says in a child forked after the driver was initialised (backend/fork_guard.hpp), on the
// fake table: cuMemCreate answers CUDA_ERROR_NOT_INITIALIZED, as the real driver does in such a child.
TEST_CASE("a driver failure in a child forked after initialisation is backend_unavailable naming the fork") {
  driver_api t = pvmm::cuda::fake::table();
  t.cuMemCreate = [](CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*, unsigned long long) {
    return CUDA_ERROR_NOT_INITIALIZED;
  };
  const pvmm::cuda::fake::installed_table driver(t);
  pvmm::allocation_properties p;
  p.location = pvmm::location::device(0);
  pvmm::detail::note_driver_initialised();  // as the loader does once cuInit succeeded
  auto here = pvmm::physical_allocation::create(std::size_t{2} << 20, p);
  REQUIRE_FALSE(here.has_value());
  CHECK(here.error().hint.find("forked") == std::string::npos);  // the process that initialised it: no fork hint
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(30);
    auto made = pvmm::physical_allocation::create(std::size_t{2} << 20, p);
    const bool named = !made && made.error().code == pvmm::errc::backend_unavailable &&
                       made.error().hint.find("forked after pvmm initialised the GPU driver in pid " +
                                              std::to_string(::getppid())) != std::string::npos;
    if (!named) std::printf("forked child: %s\n", made ? "allocated" : made.error().message().c_str());
    std::fflush(stdout);
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}
