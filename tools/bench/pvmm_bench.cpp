// pvmm-bench: what pvmm costs against the raw API it wraps, measured in the same process and run.
// Every table prints pvmm's time, the alternative's, and their ratio. Sections:
//   overhead  create / reserve / map / grant / unmap / release / free: pvmm against the raw calls
//   growth    (cuda) to 8 GiB in 256 MiB steps: growable_buffer vs a raw cuMem loop vs cudaMalloc+copy+cudaFree
//   batching  (cuda) to 2 GiB in 2 MiB steps: growable_buffer chunk sizes vs the naive create/map/grant per step
//   peer      (cuda, 2 GPUs) copy into GPU 1 from GPU 0 memory through a pvmm peer mapping vs cudaMemcpyPeer
//   sharing   export -> send fd -> import -> map -> first read: pvmm vs the raw calls
//   pinned    (cuda) pinned allocate vs cuMemHostAlloc, register vs cuMemHostRegister; H2D and D2H bandwidth,
//             pinned vs pageable, 4 KiB to 1 GiB
//   pools     (cuda) warm allocate+free on a stream vs cuMemAllocFromPoolAsync/cuMemFreeAsync, vs cuMemAlloc/cuMemFree,
//             and cold (threshold 0) vs warm (threshold max)
// Ratios marked "interleaved" come from rounds that alternate pvmm and the alternative in a random order: the ratio
// printed is the median of the per-round ratios, with their interquartile range; "within noise" where it holds 1.
// Usage: pvmm-bench [section ...]   (default: all that apply here)
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <pvmm/pvmm.hpp>
#include <pvmm/testing.hpp>

#if PVMM_BENCH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#else
#include <fcntl.h>
#include <sys/mman.h>
#endif

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "pvmm-bench: %s failed\n", what);
    std::exit(1);
  }
}

#if PVMM_BENCH_CUDA
#define CU(call) check((call) == CUDA_SUCCESS, #call)
#define CUDART(call) check((call) == cudaSuccess, #call)
#endif

void header() {
  auto b = pvmm::query_backend();
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  fmt::print("pvmm-bench  backend={}  {}  {}\n", b.name, b.driver_version, date);
  int n = pvmm::device_count().value();
  for (int d = 0; d < n; ++d) fmt::print("  device {}: {}\n", d, pvmm::query_device(d).value().name);
}

void row(const std::string& what, double pvmm_s, double other_s, const char* unit_scale = "us") {
  double scale = std::string(unit_scale) == "ms" ? 1e3 : 1e6;
  fmt::print("  {:<44} {:>11.2f} {:>11.2f} {:>8.3f}x\n", what, pvmm_s * scale, other_s * scale,
             other_s > 0 ? pvmm_s / other_s : 0.0);
}

/// pvmm against an alternative, measured in interleaved rounds (each returns seconds per operation).
struct comparison {
  double pvmm_s = 0, other_s = 0;    // medians
  double ratio = 0, q1 = 0, q3 = 0;  // median per-round ratio and its interquartile range
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

[[maybe_unused]] comparison interleaved(int rounds, const std::function<double()>& pvmm_op,
                                        const std::function<double()>& other_op) {
  std::mt19937 order(12345);
  std::vector<double> a, b, ratios;
  (void)pvmm_op(), (void)other_op();  // warm-up round, not counted
  for (int r = 0; r < rounds; ++r) {
    double x, y;
    if (order() & 1) {
      x = pvmm_op(), y = other_op();
    } else {
      y = other_op(), x = pvmm_op();
    }
    a.push_back(x), b.push_back(y), ratios.push_back(x / y);
  }
  return {median(a), median(b), quantile(ratios, 0.5), quantile(ratios, 0.25), quantile(ratios, 0.75)};
}

[[maybe_unused]] void spread_row(const std::string& what, const comparison& c) {
  const bool noise = c.q1 <= 1.0 && 1.0 <= c.q3;
  fmt::print("  {:<44} {:>11.3f} {:>11.3f} {:>8.3f}x  [{:.3f}-{:.3f}]{}\n", what, c.pvmm_s * 1e6, c.other_s * 1e6,
             c.ratio, c.q1, c.q3, noise ? "  within noise" : "");
}

// ---- overhead ------------------------------------------------------------------------------------------------

struct op_times {
  std::vector<double> create, reserve, map, grant, unmap, release, free;
};

void overhead() {
  const int rounds = 7, per_round = 64;
  pvmm::allocation_properties props;
  const std::size_t size = pvmm::query_granularity(props).value().recommended;
  op_times p, r;
  auto time_pvmm = [&] {
    std::vector<pvmm::physical_allocation> mem(per_round);
    std::vector<pvmm::address_reservation> ranges(per_round);
    double t[7] = {};
    auto t0 = clock_type::now();
    for (auto& m : mem) m = pvmm::physical_allocation::create(props, size).value();
    t[0] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) x = pvmm::address_reservation::reserve(size).value();
    t[1] = seconds_since(t0), t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) check(ranges[i].map(0, mem[i], 0, size).has_value(), "map");
    t[2] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges)
      check(x.set_access(0, size, {{pvmm::location::device(0), pvmm::access::read_write}}).has_value(), "grant");
    t[3] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) check(x.unmap(0, size).has_value(), "unmap");
    t[4] = seconds_since(t0), t0 = clock_type::now();
    for (auto& m : mem) check(m.release().has_value(), "release");
    t[5] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) check(x.release().has_value(), "free");
    t[6] = seconds_since(t0);
    p.create.push_back(t[0] / per_round), p.reserve.push_back(t[1] / per_round), p.map.push_back(t[2] / per_round);
    p.grant.push_back(t[3] / per_round), p.unmap.push_back(t[4] / per_round), p.release.push_back(t[5] / per_round);
    p.free.push_back(t[6] / per_round);
  };
  auto time_raw = [&] {
    double t[7] = {};
#if PVMM_BENCH_CUDA
    std::vector<CUmemGenericAllocationHandle> mem(per_round);
    std::vector<CUdeviceptr> ranges(per_round);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc desc{};
    desc.location = prop.location;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    auto t0 = clock_type::now();
    for (auto& m : mem) CU(cuMemCreate(&m, size, &prop, 0));
    t[0] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemAddressReserve(&x, size, 0, 0, 0));
    t[1] = seconds_since(t0), t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) CU(cuMemMap(ranges[i], size, 0, mem[i], 0));
    t[2] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemSetAccess(x, size, &desc, 1));
    t[3] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemUnmap(x, size));
    t[4] = seconds_since(t0), t0 = clock_type::now();
    for (auto& m : mem) CU(cuMemRelease(m));
    t[5] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) CU(cuMemAddressFree(x, size));
    t[6] = seconds_since(t0);
#else
    std::vector<int> mem(per_round);
    std::vector<void*> ranges(per_round);
    auto t0 = clock_type::now();
    for (auto& m : mem) {
      m = memfd_create("raw", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      check(m >= 0 && ftruncate(m, static_cast<off_t>(size)) == 0, "memfd");
      check(fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0, "seal");
    }
    t[0] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) x = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    t[1] = seconds_since(t0), t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i)
      check(mmap(ranges[i], size, PROT_NONE, MAP_SHARED | MAP_FIXED, mem[i], 0) != MAP_FAILED, "map");
    t[2] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) check(mprotect(x, size, PROT_READ | PROT_WRITE) == 0, "mprotect");
    t[3] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges)
      check(mmap(x, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED,
            "unmap");
    t[4] = seconds_since(t0), t0 = clock_type::now();
    for (auto& m : mem) close(m);
    t[5] = seconds_since(t0), t0 = clock_type::now();
    for (auto& x : ranges) munmap(x, size);
    t[6] = seconds_since(t0);
#endif
    r.create.push_back(t[0] / per_round), r.reserve.push_back(t[1] / per_round), r.map.push_back(t[2] / per_round);
    r.grant.push_back(t[3] / per_round), r.unmap.push_back(t[4] / per_round), r.release.push_back(t[5] / per_round);
    r.free.push_back(t[6] / per_round);
  };
  time_pvmm(), time_raw();  // warm-up round, discarded
  p = {}, r = {};
  for (int i = 0; i < rounds; ++i) {
    if (i % 2)
      time_pvmm(), time_raw();
    else
      time_raw(), time_pvmm();
  }
  fmt::print("\noverhead: {} rounds x {} operations on {} chunks, median per operation (target <= 1.02x)\n", rounds,
             per_round, size >> 20 ? fmt::format("{} MiB", size >> 20) : fmt::format("{} KiB", size >> 10));
  fmt::print("  {:<44} {:>11} {:>11} {:>9}\n", "operation", "pvmm us", "raw us", "ratio");
  const char* raw_names[] =
#if PVMM_BENCH_CUDA
      {"cuMemCreate", "cuMemAddressReserve", "cuMemMap",        "cuMemSetAccess",
       "cuMemUnmap",  "cuMemRelease",        "cuMemAddressFree"};
#else
      {"memfd_create+ftruncate+seal",
       "mmap PROT_NONE",
       "mmap MAP_FIXED|MAP_SHARED",
       "mprotect",
       "mmap over (unmap)",
       "close",
       "munmap"};
#endif
  const char* names[] = {"create", "reserve", "map", "grant", "unmap", "release", "free"};
  std::vector<double>* pv[] = {&p.create, &p.reserve, &p.map, &p.grant, &p.unmap, &p.release, &p.free};
  std::vector<double>* rv[] = {&r.create, &r.reserve, &r.map, &r.grant, &r.unmap, &r.release, &r.free};
  double ptotal = 0, rtotal = 0;
  for (int i = 0; i < 7; ++i) {
    row(fmt::format("{} vs {}", names[i], raw_names[i]), median(*pv[i]), median(*rv[i]));
    ptotal += median(*pv[i]), rtotal += median(*rv[i]);
  }
  row("whole lifecycle", ptotal, rtotal);
}

// ---- sharing -------------------------------------------------------------------------------------------------

void sharing() {
  pvmm::allocation_properties props;
  props.exportable = pvmm::handle_types::posix_fd;
  if (!pvmm::query_device(0).value().capabilities.sharing.posix_fd) return;
  const std::size_t size = pvmm::query_granularity(props).value().recommended;
  int sv[2];
  check(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  auto exporter = pvmm::physical_allocation::create(props, size).value();
  const int rounds = 41;
  std::vector<double> pv, rv;
  unsigned char byte = 0;
  for (int i = 0; i < rounds; ++i) {
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
    pv.push_back(seconds_since(t0));
#if PVMM_BENCH_CUDA
    t0 = clock_type::now();
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
      CUmemAccessDesc desc{};
      desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      CU(cuMemSetAccess(p, size, &desc, 1));
      CU(cuMemcpyDtoH(&byte, p, 1));
      CU(cuMemUnmap(p, size));
      CU(cuMemAddressFree(p, size));
      CU(cuMemRelease(h));
    }
    rv.push_back(seconds_since(t0));
#endif
  }
  close(sv[0]), close(sv[1]);
  fmt::print(
      "\nsharing: export -> send fd -> import -> reserve -> map -> grant -> first read -> teardown ({} rounds)\n",
      rounds);
  fmt::print("  {:<44} {:>11} {:>11} {:>9}\n", "", "pvmm us", "raw us", "ratio");
  row("round trip (median)", median(pv), rv.empty() ? 0 : median(rv));
}

#if PVMM_BENCH_CUDA
// ---- growth --------------------------------------------------------------------------------------------------

std::size_t used_bytes(std::size_t baseline_free) {
  std::size_t free = 0, total = 0;
  CUDART(cudaMemGetInfo(&free, &total));
  return baseline_free > free ? baseline_free - free : 0;
}

// Each growth variant runs in a fresh process (this program, re-executed): in one process, whichever
// variant runs after multi-GiB releases pays for the driver reclaiming them, which no sleep reliably avoids.
struct growth_result {
  double seconds = 0;
  std::size_t peak = 0;
  double first_use = 0;  // pvmm's once-per-process queries (capabilities, granularities), timed apart
};

/// The hand-written loop pvmm is measured against: reserve once, then a create + map + grant per step.
/// Returns the seconds it took; the reservation and handles are left for the caller to tear down.
double raw_cumem_growth(std::size_t target, std::size_t step, CUdeviceptr& base,
                        std::vector<CUmemGenericAllocationHandle>& handles) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemAccessDesc desc{};
  desc.location = prop.location;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto t0 = clock_type::now();
  CU(cuMemAddressReserve(&base, target, 0, 0, 0));
  for (std::size_t s = 0; s < target; s += step) {
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, step, &prop, 0));
    CU(cuMemMap(base + s, step, 0, h, 0));
    CU(cuMemSetAccess(base + s, step, &desc, 1));
    handles.push_back(h);
  }
  return seconds_since(t0);
}

growth_result growth_variant(const std::string& which) {
  const std::size_t step = std::size_t{256} << 20, target = std::size_t{8} << 30;
  std::size_t free0 = 0, total = 0;
  CUDART(cudaMemGetInfo(&free0, &total));
  growth_result r;
  const bool sample = which.find("peak") != std::string::npos;
  if (which.rfind("pvmm", 0) == 0) {
    // pvmm caches device capabilities and granularities on first use; an allocator pays that once at start-up,
    // so it is measured apart from the growth.
    auto w0 = clock_type::now();
    pvmm::allocation_properties props;
    check(pvmm::query_device(0).has_value() && pvmm::query_granularity(props).has_value(), "first use");
    check(pvmm::address_reservation::reserve(step).has_value(), "first use");
    r.first_use = seconds_since(w0);
    pvmm::growable_options o;
    o.access = {{pvmm::location::device(0), pvmm::access::read_write}};
    o.chunk_size = step;
    o.reserve_size = target;
    auto t0 = clock_type::now();
    auto buffer = pvmm::growable_buffer::create(o).value();
    r.seconds = seconds_since(t0);
    for (std::size_t s = step; s <= target; s += step) {
      auto r0 = clock_type::now();
      check(buffer.resize(s).has_value(), "resize");
      r.seconds += seconds_since(r0);
      if (sample) r.peak = std::max(r.peak, used_bytes(free0));  // untimed, and only in the peak runs
    }
  } else if (which == "raw") {
    CUdeviceptr base;
    std::vector<CUmemGenericAllocationHandle> handles;
    r.seconds = raw_cumem_growth(target, step, base, handles);
  } else {  // cudaMalloc(new) + copy + cudaFree(old)
    void* old = nullptr;
    std::size_t old_size = 0;
    for (std::size_t s = step; s <= target; s += step) {
      auto r0 = clock_type::now();
      void* fresh = nullptr;
      CUDART(cudaMalloc(&fresh, s));
      if (old) CUDART(cudaMemcpy(fresh, old, old_size, cudaMemcpyDeviceToDevice));
      CUDART(cudaDeviceSynchronize());
      r.seconds += seconds_since(r0);
      if (sample) r.peak = std::max(r.peak, used_bytes(free0));  // while old and new coexist
      r0 = clock_type::now();
      if (old) CUDART(cudaFree(old));
      r.seconds += seconds_since(r0);
      old = fresh, old_size = s;
    }
  }
  return r;  // the process exits next: teardown is not measured for any variant
}

growth_result run_growth_variant(const std::string& which) {
  std::string command = "/proc/" + std::to_string(::getpid()) + "/exe --growth-variant " + which;
  growth_result r;
  if (std::FILE* p = ::popen(command.c_str(), "r")) {
    if (std::fscanf(p, "%lf %zu %lf", &r.seconds, &r.peak, &r.first_use) != 3) r.seconds = -1;
    ::pclose(p);
  }
  check(r.seconds >= 0, "growth variant process");
  return r;
}

void growth() {
  const std::size_t step = std::size_t{256} << 20, target = std::size_t{8} << 30;
  std::vector<double> pvmm_runs, raw_runs, malloc_runs, first_use;
  for (int round = 0; round < 3; ++round) {
    auto p = run_growth_variant("pvmm");
    pvmm_runs.push_back(p.seconds);
    first_use.push_back(p.first_use);
    raw_runs.push_back(run_growth_variant("raw").seconds);
    malloc_runs.push_back(run_growth_variant("malloc").seconds);
  }
  const std::size_t pvmm_peak = run_growth_variant("pvmm-peak").peak;
  const std::size_t malloc_peak = run_growth_variant("malloc-peak").peak;
  const double pvmm_s = median(pvmm_runs), raw_s = median(raw_runs), malloc_s = median(malloc_runs);
  fmt::print(
      "\ngrowth: to 8 GiB in 256 MiB steps, each variant in a fresh process, median of 3 "
      "(targets: <= 1.1x the raw loop; >= 50x faster than cudaMalloc+copy)\n");
  fmt::print("  {:<44} {:>11} {:>11} {:>9}\n", "", "pvmm ms", "other ms", "ratio");
  row("growable_buffer vs raw cuMem loop", pvmm_s, raw_s, "ms");
  row("growable_buffer vs cudaMalloc+copy+cudaFree", pvmm_s, malloc_s, "ms");
  fmt::print(
      "  pvmm's first use in a process (capability and granularity queries, cached after): {:.2f} ms, "
      "not in the table\n",
      median(first_use) * 1e3);
  fmt::print(
      "  cudaMalloc+copy is {:.1f}x slower; peak device memory: pvmm {} MiB, cudaMalloc+copy {} MiB "
      "(final size + one chunk = {} MiB)\n",
      malloc_s / pvmm_s, pvmm_peak >> 20, malloc_peak >> 20, (target + step) >> 20);
}

void settle() {
  CUDART(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::seconds(1));
}

void batching() {
  const std::size_t step = std::size_t{2} << 20, target = std::size_t{2} << 30;
  std::vector<double> naive_runs;
  for (int round = 0; round < 3; ++round) {
    settle();
    CUdeviceptr base;
    std::vector<CUmemGenericAllocationHandle> handles;
    naive_runs.push_back(raw_cumem_growth(target, step, base, handles));
    CU(cuMemUnmap(base, target));
    for (auto h : handles) CU(cuMemRelease(h));
    CU(cuMemAddressFree(base, target));
  }
  const double naive_s = median(naive_runs);
  fmt::print(
      "\nbatching: to 2 GiB in 2 MiB steps; growable_buffer chunk size vs naive create/map/grant per step; "
      "median of 3, teardown excluded (target >= 5x faster)\n");
  fmt::print("  {:<44} {:>11} {:>11} {:>9}\n", "", "pvmm ms", "naive ms", "ratio");
  double best = 1e9;
  std::size_t best_chunk = 0;
  for (std::size_t chunk_mib : {2, 8, 32, 64, 128, 256}) {
    pvmm::growable_options o;
    o.access = {{pvmm::location::device(0), pvmm::access::read_write}};
    o.chunk_size = chunk_mib << 20;
    o.reserve_size = target;
    std::vector<double> runs;
    for (int round = 0; round < 3; ++round) {
      settle();
      auto t0 = clock_type::now();
      auto buffer = pvmm::growable_buffer::create(o).value();
      for (std::size_t s = step; s <= target; s += step) check(buffer.resize(s).has_value(), "resize");
      runs.push_back(seconds_since(t0));
    }
    double t = median(runs);
    row(fmt::format("growable_buffer, chunk {:>3} MiB", chunk_mib), t, naive_s, "ms");
    if (t < best) best = t, best_chunk = chunk_mib;
  }
  fmt::print("  best: {} MiB chunks, {:.1f}x faster than naive\n", best_chunk, naive_s / best);
}

void pools() {
  if (!pvmm::query_device(0).value().capabilities.pools.supported) {
    fmt::print("\npools: skipped (device 0 has no memory pools)\n");
    return;
  }
  const int rounds = 41, per_round = 256;
  auto s = pvmm::stream::create(0).value();
  auto native_stream = reinterpret_cast<CUstream>(static_cast<std::uintptr_t>(s.native_handle().value));
  auto pool = pvmm::memory_pool::create({}).value();  // threshold: keep everything (pvmm's default)
  auto native_pool = reinterpret_cast<CUmemoryPool>(static_cast<std::uintptr_t>(pool.native_handle().value));
  fmt::print(
      "\npools: warm allocate + free on one stream, {} per round, {} interleaved rounds (targets: <= 1.02x the "
      "raw pool calls; >= 20x faster than cuMemAlloc at 2 MiB)\n",
      per_round, rounds);
  fmt::print("  {:<44} {:>11} {:>11} {:>9}  {}\n", "", "pvmm us", "other us", "ratio", "IQR");
  for (std::size_t size : {std::size_t{2} << 20, std::size_t{128} << 20}) {
    const std::string mib = fmt::format("{} MiB", size >> 20);
    auto pvmm_pair = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < per_round; ++i) {
        void* p = pool.allocate_async(size, s).value();
        check(pool.free_async(p, s).has_value(), "free_async");
      }
      const double t = seconds_since(t0) / per_round;
      check(s.synchronize().has_value(), "synchronize");
      return t;
    };
    auto raw_pair = [&] {
      auto t0 = clock_type::now();
      for (int i = 0; i < per_round; ++i) {
        CUdeviceptr p;
        CU(cuMemAllocFromPoolAsync(&p, size, native_pool, native_stream));
        CU(cuMemFreeAsync(p, native_stream));
      }
      const double t = seconds_since(t0) / per_round;
      CU(cuStreamSynchronize(native_stream));
      return t;
    };
    auto plain_pair = [&] {
      const int n = 16;  // cuMemAlloc is slow: fewer per round
      auto t0 = clock_type::now();
      for (int i = 0; i < n; ++i) {
        CUdeviceptr p;
        CU(cuMemAlloc(&p, size));
        CU(cuMemFree(p));
      }
      return seconds_since(t0) / n;
    };
    spread_row("pool vs cuMemAllocFromPoolAsync/FreeAsync, " + mib, interleaved(rounds, pvmm_pair, raw_pair));
    auto against_plain = interleaved(rounds, pvmm_pair, plain_pair);
    spread_row("pool vs cuMemAlloc/cuMemFree, " + mib, against_plain);
    fmt::print("  {:<44} {:.1f}x faster\n", "", 1.0 / against_plain.ratio);
  }
  // Cold: with threshold 0 every synchronize gives the memory back, so each allocation reserves it again.
  auto cold_pool = pvmm::memory_pool::create([] {
                     pvmm::pool_properties p;
                     p.release_threshold = 0;
                     return p;
                   }())
                       .value();
  fmt::print("  cold (threshold 0) vs warm (threshold max): allocate + free + synchronize, median of {} rounds\n",
             rounds);
  for (std::size_t size : {std::size_t{2} << 20, std::size_t{128} << 20}) {
    auto cycle = [&](const pvmm::memory_pool& which) {
      const int n = 16;
      auto t0 = clock_type::now();
      for (int i = 0; i < n; ++i) {
        void* p = which.allocate_async(size, s).value();
        check(which.free_async(p, s).has_value(), "free_async");
        check(s.synchronize().has_value(), "synchronize");
      }
      return seconds_since(t0) / n;
    };
    auto c = interleaved(
        rounds, [&] { return cycle(cold_pool); }, [&] { return cycle(pool); });
    spread_row(fmt::format("cold vs warm, {} MiB", size >> 20), c);
  }
}

void pinned() {
  const int rounds = 21, per_round = 16;
  const std::size_t size = std::size_t{2} << 20;
  fmt::print("\npinned: {} interleaved rounds of {} (target <= 1.02x the raw calls)\n", rounds, per_round);
  fmt::print("  {:<44} {:>11} {:>11} {:>9}  {}\n", "", "pvmm us", "raw us", "ratio", "IQR");
  auto pvmm_alloc = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) check(pvmm::pinned_allocation::create(size).has_value(), "pinned");
    return seconds_since(t0) / per_round;
  };
  auto raw_alloc = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) {
      void* p = nullptr;
      CU(cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
      CU(cuMemFreeHost(p));
    }
    return seconds_since(t0) / per_round;
  };
  spread_row("pinned allocate+free vs cuMemHostAlloc, 2 MiB", interleaved(rounds, pvmm_alloc, raw_alloc));
  std::vector<unsigned char> host(size * per_round);
  auto pvmm_register = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i)
      check(pvmm::host_registration::create(host.data() + i * size, size).has_value(), "register");
    return seconds_since(t0) / per_round;
  };
  auto raw_register = [&] {
    auto t0 = clock_type::now();
    for (int i = 0; i < per_round; ++i) {
      CU(cuMemHostRegister(host.data() + i * size, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
      CU(cuMemHostUnregister(host.data() + i * size));
    }
    return seconds_since(t0) / per_round;
  };
  spread_row("register+unregister vs cuMemHostRegister, 2 MiB", interleaved(rounds, pvmm_register, raw_register));

  fmt::print("  bandwidth through pvmm's stream copies, GB/s (median of 5):\n");
  fmt::print("  {:<12} {:>10} {:>10} {:>10} {:>10}\n", "size", "H2D pin", "H2D page", "D2H pin", "D2H page");
  auto s = pvmm::stream::create(0).value();
  const std::size_t largest = std::size_t{1} << 30;
  CUdeviceptr device = 0;
  CU(cuMemAlloc(&device, largest));
  auto pinned_host = pvmm::pinned_allocation::create(largest).value();
  std::vector<unsigned char> pageable(largest, 1);
  void* d = reinterpret_cast<void*>(static_cast<std::uintptr_t>(device));
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{1} << 20, std::size_t{64} << 20, largest}) {
    const int reps = bytes >= (std::size_t{64} << 20) ? 3 : 50;
    auto bw = [&](void* to, const void* from) {
      std::vector<double> runs;
      for (int r = 0; r < 5; ++r) {
        check(s.synchronize().has_value(), "sync");
        auto t0 = clock_type::now();
        for (int i = 0; i < reps; ++i) check(s.copy_async(to, from, bytes).has_value(), "copy");
        check(s.synchronize().has_value(), "sync");
        runs.push_back(static_cast<double>(bytes) * reps / seconds_since(t0) / 1e9);
      }
      return median(runs);
    };
    fmt::print("  {:<12} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", fmt::format("{} KiB", bytes >> 10),
               bw(d, pinned_host.data()), bw(d, pageable.data()), bw(pinned_host.data(), d), bw(pageable.data(), d));
  }
  CU(cuMemFree(device));
}

void peer() {
  int n = 0;
  CUDART(cudaGetDeviceCount(&n));
  if (n < 2) {
    fmt::print("\npeer: skipped (needs 2 GPUs, found {})\n", n);
    return;
  }
  const std::size_t size = std::size_t{1} << 30;
  const int reps = 20;
  // Source: GPU 0 memory through pvmm, mapped with access for GPU 1 (and GPU 0).
  pvmm::allocation_properties props;
  auto src_mem = pvmm::physical_allocation::create(props, size).value();
  auto src_range = pvmm::address_reservation::reserve(size).value();
  void* src = src_range.map(0, src_mem, 0, size).value();
  check(src_range
            .set_access(0, size,
                        {{pvmm::location::device(0), pvmm::access::read_write},
                         {pvmm::location::device(1), pvmm::access::read_write}})
            .has_value(),
        "grant");
  void *dst = nullptr, *src_plain = nullptr;
  CUDART(cudaSetDevice(0));
  CUDART(cudaMalloc(&src_plain, size));
  CUDART(cudaSetDevice(1));
  CUDART(cudaMalloc(&dst, size));
  // cudaMemcpyPeer at its best: peer access enabled between the cudaMalloc contexts (pvmm needs none).
  if (cudaDeviceEnablePeerAccess(0, 0) != cudaSuccess) (void)cudaGetLastError();
  cudaStream_t stream;
  CUDART(cudaStreamCreate(&stream));
  auto bandwidth = [&](const std::function<void()>& copy) {
    copy();
    CUDART(cudaStreamSynchronize(stream));
    auto t0 = clock_type::now();
    for (int i = 0; i < reps; ++i) copy();
    CUDART(cudaStreamSynchronize(stream));
    return static_cast<double>(size) * reps / seconds_since(t0) / 1e9;
  };
  (void)bandwidth([&] { CUDART(cudaMemcpyPeerAsync(dst, 1, src_plain, 0, size, stream)); });  // warm both paths
  double through_mapping =
      bandwidth([&] { CUDART(cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, stream)); });
  double memcpy_peer = bandwidth([&] { CUDART(cudaMemcpyPeerAsync(dst, 1, src_plain, 0, size, stream)); });
  fmt::print("\npeer: 1 GiB copies into GPU 1 from GPU 0 memory, {} reps (target >= 0.97x)\n", reps);
  fmt::print("  {:<44} {:>11} {:>11} {:>9}\n", "", "pvmm GB/s", "peer GB/s", "ratio");
  fmt::print("  {:<44} {:>11.1f} {:>11.1f} {:>8.3f}x\n", "pvmm peer mapping vs cudaMemcpyPeer", through_mapping,
             memcpy_peer, through_mapping / memcpy_peer);
  CUDART(cudaStreamDestroy(stream));
  CUDART(cudaFree(dst));
  CUDART(cudaSetDevice(0));
  CUDART(cudaFree(src_plain));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  auto b = pvmm::query_backend();
  if (!b.available || pvmm::device_count().value() == 0) {
    std::printf("pvmm-bench: no device here (%s)\n", b.unavailable_reason.c_str());
    return 0;
  }
#if PVMM_BENCH_CUDA
  CUDART(cudaSetDevice(0));
  CUDART(cudaFree(nullptr));  // create the primary context pvmm also uses
#endif
#if PVMM_BENCH_CUDA
  if (argc == 3 && std::string(argv[1]) == "--growth-variant") {
    auto r = growth_variant(argv[2]);
    std::printf("%.9f %zu %.9f\n", r.seconds, r.peak, r.first_use);
    return 0;
  }
#endif
  std::vector<std::string> sections(argv + 1, argv + argc);
  auto want = [&](const char* s) {
    return sections.empty() || std::find(sections.begin(), sections.end(), s) != sections.end();
  };
  header();
  if (want("overhead")) overhead();
#if PVMM_BENCH_CUDA
  if (want("growth")) growth();
  if (want("batching")) batching();
  if (want("peer")) peer();
  if (want("pools")) pools();
  if (want("pinned")) pinned();
#endif
  if (want("sharing")) sharing();
  return 0;
}
