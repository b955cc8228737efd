// pool_reuse: when does a stream-ordered pool hand a block freed on stream s1 to an allocation on stream s2?
//
// Raw runtime calls only (no pvmm). One source, two variants:
//   default       the CUDA runtime API (cudaMemPoolCreate, cudaMallocFromPoolAsync, cudaFreeAsync, ...)
//   -DPROBE_HIP   the same calls through HIP's headers (hip*), e.g. on HIP's NVIDIA platform with
//                 -D__HIP_PLATFORM_NVIDIA__ -I <hip-nvidia>/include
//
// For each size (2 MiB, 256 B), each policy setting (all off; FollowEventDependencies, AllowOpportunistic,
// AllowInternalDependencies each alone; all on) and each situation below, a fresh pool (release threshold UINT64_MAX,
// maxSize 1 GiB) and two fresh non-blocking streams: allocate S on s1 (completed and synchronised), free it on s1,
// create the situation, allocate S on s2 and compare addresses. When s2 did not get the block, allocate S on s1 again
// and report whether s1 gets it back.
//   a  free pending: s1 is held by a host function blocking on a host-side std::atomic flag; the free is enqueued
//      behind it; the flag is released by the host after the s2 allocation (a watchdog releases it after 5 s)
//   b  free completed on the GPU, not observed by the host: no sync, sleep 50 ms after the free
//   c  cudaStreamSynchronize(s1) after the free
//   c' cudaStreamQuery(s1) polled until it returns success (host observes completion without a blocking sync)
//   d  cudaEventSynchronize on an event recorded on s1 after the free
//   e  cudaDeviceSynchronize after the free
//   f  cudaStreamWaitEvent(s2, event recorded on s1 after the free), no host sync (s1 idle: the free may be done)
//   f' as f, but s1 held as in a (free pending): s2 depends on the free, which has not run yet
//   g  control: s1 allocates again after its own free, no sync
//   FULL rows: a, b, c' and f' again with a pool that cannot grow (maxSize 2 MiB, filled with blocks of size S
//      before the free), so that s2 can only get the freed block or fail: do the policies reuse under pressure?
// Cells: reused        s2 got the same address
//        reused+wait   s2 got it while the free was pending, and s2 then reported not-ready (the driver made s2
//                      wait for s1); in f' s2 waits anyway, because of the event
//        not/s1-back   s2 got another address; a later allocation on s1 got the block back
//        not           s2 got another address and s1 did not get it back either
//        OOM[/s1-back] the allocation on s2 failed with out-of-memory (FULL rows) [and s1 then got the block]
// Every wait is bounded; no managed memory; no multicast; GPU settings untouched.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "probe_api.hpp"
#include "stream_hold.hpp"

namespace {

struct policy {
  const char* label;
  int follow, opportunistic, internal;
};
const policy policies[] = {
    {"all-off", 0, 0, 0},       {"follow-only", 1, 0, 0}, {"opport-only", 0, 1, 0},
    {"internal-only", 0, 0, 1}, {"all-on", 1, 1, 1},
};

enum situation {
  a_pending,
  b_done_unobserved,
  c_stream_sync,
  c_stream_query,
  d_event_sync,
  e_device_sync,
  f_wait_event,
  f_wait_event_pending,
  g_same_stream
};
// full: the pool cannot grow (maxSize 2 MiB, filled up before the free), so s2 can only get the freed block or fail.
struct row {
  situation sit;
  bool full;
  const char* label;
};
const row rows[] = {
    {a_pending, false, "a pending free (s1 held)"},
    {b_done_unobserved, false, "b done on GPU, not observed"},
    {c_stream_sync, false, "c StreamSynchronize(s1)"},
    {c_stream_query, false, "c' StreamQuery(s1)==success"},
    {d_event_sync, false, "d EventSynchronize(ev on s1)"},
    {e_device_sync, false, "e DeviceSynchronize"},
    {f_wait_event, false, "f s2 StreamWaitEvent(ev on s1)"},
    {f_wait_event_pending, false, "f' as f, s1 held (pending)"},
    {g_same_stream, false, "g control: s1 again, same stream"},
    {a_pending, true, "FULL a pending free (s1 held)"},
    {b_done_unobserved, true, "FULL b done on GPU, not observed"},
    {c_stream_query, true, "FULL c' StreamQuery(s1)==success"},
    {f_wait_event_pending, true, "FULL f' StreamWaitEvent, s1 held"},
};
constexpr int row_count = int(sizeof rows / sizeof rows[0]);

constexpr std::size_t full_pool_size = std::size_t(2) << 20;  // maxSize of the FULL rows' pools

struct cell {
  bool reused = false, s1_back = false, s2_waits = false, watchdog = false, oom = false, setup_failed = false;
  bool blocked = false, skipped = false;  // blocked: the allocation call on s2 itself took over 100 ms
  std::string text() const {
    if (skipped) return "skipped";
    if (setup_failed) return "setup-failed";
    std::string t = reused ? (s2_waits ? "reused+wait" : "reused") : (oom ? "OOM" : "not");
    if (!reused && s1_back) t += "/s1-back";
    if (blocked) t += "!blk";
    if (watchdog) t += "!wd";
    return t;
  }
};

void set_policy(api_pool pool, const policy& p) {
  int follow = p.follow, opportunistic = p.opportunistic, internal = p.internal;
  CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolReuseFollowEventDependencies), &follow));
  CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolReuseAllowOpportunistic), &opportunistic));
  CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolReuseAllowInternalDependencies), &internal));
  int back[3] = {-1, -1, -1};
  CHECK(API(MemPoolGetAttribute)(pool, API(MemPoolReuseFollowEventDependencies), &back[0]));
  CHECK(API(MemPoolGetAttribute)(pool, API(MemPoolReuseAllowOpportunistic), &back[1]));
  CHECK(API(MemPoolGetAttribute)(pool, API(MemPoolReuseAllowInternalDependencies), &back[2]));
  if ((back[0] != 0) != (follow != 0) || (back[1] != 0) != (opportunistic != 0) || (back[2] != 0) != (internal != 0)) {
    std::fprintf(stderr, "policy read-back mismatch for %s: %d %d %d\n", p.label, back[0], back[1], back[2]);
    std::exit(2);
  }
}

api_pool make_pool(int device, const policy& p, std::size_t max_size) {
  API(MemPoolProps) props{};
  props.allocType = API(MemAllocationTypePinned);
  props.handleTypes = API(MemHandleTypeNone);
  props.location.type = API(MemLocationTypeDevice);
  props.location.id = device;
  props.maxSize = max_size;  // at most 1 GiB of pool memory
  api_pool pool{};
  if (api_error e = API(MemPoolCreate)(&pool, &props); e != API(Success)) {
    std::printf("detail pool create (maxSize %zu): %s\n", max_size, API(GetErrorName)(e));
    (void)API(GetLastError)();
    return nullptr;
  }
  std::uint64_t threshold = UINT64_MAX;
  CHECK(API(MemPoolSetAttribute)(pool, API(MemPoolAttrReleaseThreshold), &threshold));
  set_policy(pool, p);
  return pool;
}

// Watchdog releases so far: after 4, trials that hold s1 are skipped, to keep the run short if a call blocks.
int watchdog_releases = 0;

// Trials print one detail line each; the tables come at the end.
cell trial(int device, std::size_t size, const policy& p, const row& rw) {
  const situation sit = rw.sit;
  if ((sit == a_pending || sit == f_wait_event_pending) && watchdog_releases >= 4) {
    std::printf("detail size=%zu policy=%s sit=%-34s skipped (4 watchdog releases already)\n", size, p.label, rw.label);
    cell c;
    c.skipped = true;
    return c;
  }
  api_pool pool = make_pool(device, p, rw.full ? full_pool_size : std::size_t(1) << 30);
  if (!pool) {
    cell c;
    c.setup_failed = true;
    return c;
  }
  api_stream s1{}, s2{};
  CHECK(API(StreamCreateWithFlags)(&s1, API(StreamNonBlocking)));
  CHECK(API(StreamCreateWithFlags)(&s2, API(StreamNonBlocking)));
  api_event ev{};
  CHECK(API(EventCreateWithFlags)(&ev, API(EventDisableTiming)));

  void* p1 = nullptr;
  if (api_error e = API(MallocFromPoolAsync)(&p1, size, pool, s1); e != API(Success)) {
    std::printf("detail size=%zu policy=%s sit=%-34s first allocation: %s\n", size, p.label, rw.label,
                API(GetErrorName)(e));
    (void)API(GetLastError)();
    cell c;
    c.setup_failed = true;
    CHECK(API(EventDestroy)(ev));
    CHECK(API(StreamDestroy)(s1));
    CHECK(API(StreamDestroy)(s2));
    CHECK(API(MemPoolDestroy)(pool));
    return c;
  }
  CHECK(API(MemsetAsync)(p1, 0x5a, size, s1));
  // A full pool: fill what is left with blocks of the same size, kept until the end of the trial.
  std::vector<void*> fillers;
  int filler_failures = 0;
  while (rw.full && fillers.size() < full_pool_size / size + 1) {
    void* f = nullptr;
    api_error e = API(MallocFromPoolAsync)(&f, size, pool, s1);
    if (e != API(Success)) {
      (void)API(GetLastError)();
      ++filler_failures;
      break;
    }
    fillers.push_back(f);
  }
  CHECK(API(StreamSynchronize)(s1));      // the allocation itself is complete and observed; only the free is under test
  if (rw.full && filler_failures == 0) {  // the pool did not fill up: the row would not mean what it says
    std::printf("detail size=%zu policy=%s sit=%-34s pool did not fill (%zu fillers)\n", size, p.label, rw.label,
                fillers.size());
    cell c;
    c.setup_failed = true;
    for (void* f : fillers) CHECK(API(FreeAsync)(f, s1));
    CHECK(API(FreeAsync)(p1, s1));
    CHECK(API(DeviceSynchronize)());
    CHECK(API(EventDestroy)(ev));
    CHECK(API(StreamDestroy)(s1));
    CHECK(API(StreamDestroy)(s2));
    CHECK(API(MemPoolDestroy)(pool));
    return c;
  }

  const bool held = sit == a_pending || sit == f_wait_event_pending;
  hold h;
  if (held) h.start(s1);
  CHECK(API(FreeAsync)(p1, s1));

  switch (sit) {
    case a_pending:
      break;
    case b_done_unobserved:
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      break;
    case c_stream_sync:
      CHECK(API(StreamSynchronize)(s1));
      break;
    case c_stream_query: {
      const auto deadline = clock_type::now() + std::chrono::seconds(5);
      api_error e;
      while ((e = API(StreamQuery)(s1)) == API(ErrorNotReady) && clock_type::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (e != API(Success)) std::fprintf(stderr, "StreamQuery(s1): %s\n", API(GetErrorName)(e));
      break;
    }
    case d_event_sync:
      CHECK(API(EventRecord)(ev, s1));
      CHECK(API(EventSynchronize)(ev));
      break;
    case e_device_sync:
      CHECK(API(DeviceSynchronize)());
      break;
    case f_wait_event:
    case f_wait_event_pending:
      CHECK(API(EventRecord)(ev, s1));
      CHECK(API(StreamWaitEvent)(s2, ev, 0));
      break;
    case g_same_stream:
      break;
  }

  api_stream second = sit == g_same_stream ? s1 : s2;
  void* q = nullptr;
  cell c;
  const auto q_start = clock_type::now();
  api_error qe = API(MallocFromPoolAsync)(&q, size, pool, second);
  const double q_ms = std::chrono::duration<double, std::milli>(clock_type::now() - q_start).count();
  c.blocked = q_ms > 100.0;
  if (qe == API(ErrorMemoryAllocation)) {
    (void)API(GetLastError)();
    c.oom = true;
    q = nullptr;
  } else {
    CHECK(qe);
  }
  c.reused = q == p1;
  api_error s2_state = API(Success);
  if (held) {
    s2_state = API(StreamQuery)(s2);
    c.s2_waits = s2_state == API(ErrorNotReady);
  }
  void* r = nullptr;
  if (!c.reused && sit != g_same_stream) {
    api_error re = API(MallocFromPoolAsync)(&r, size, pool, s1);
    if (re == API(ErrorMemoryAllocation)) {
      (void)API(GetLastError)();
      r = nullptr;
    } else {
      CHECK(re);
    }
    c.s1_back = r == p1;
  }
  if (held) h.release();
  c.watchdog = h.watchdog_fired.load() != 0;
  watchdog_releases += c.watchdog;

  std::printf(
      "detail size=%zu policy=%s sit=%-34s fillers=%zu p1=%p s2got=%p (%s, %.3f ms) (%+lld) s1again=%p s2query=%s -> "
      "%s\n",
      size, p.label, rw.label, fillers.size(), p1, q, API(GetErrorName)(qe), q_ms,
      q ? (long long)((char*)q - (char*)p1) : 0LL, r, held ? API(GetErrorName)(s2_state) : "-", c.text().c_str());

  if (q) CHECK(API(FreeAsync)(q, second));
  for (void* f : fillers) CHECK(API(FreeAsync)(f, s1));
  if (r) CHECK(API(FreeAsync)(r, s1));
  CHECK(API(DeviceSynchronize)());
  CHECK(API(EventDestroy)(ev));
  CHECK(API(StreamDestroy)(s1));
  CHECK(API(StreamDestroy)(s2));
  CHECK(API(MemPoolDestroy)(pool));
  return c;
}

}  // namespace

int main() {
  int driver = 0, runtime = 0, device = 0;
  CHECK(API(SetDevice)(device));
  CHECK(API(DriverGetVersion)(&driver));
  CHECK(API(RuntimeGetVersion)(&runtime));
  DEVICE_PROP prop{};
  CHECK(API(GetDeviceProperties)(&prop, device));
  int pools_supported = 0;
  CHECK(API(DeviceGetAttribute)(&pools_supported, POOLS_SUPPORTED_ATTR, device));
  std::printf(
      "pool_reuse api=%s (%s) device=%d \"%s\" cc=%d.%d driverGetVersion=%d runtimeGetVersion=%d pools=%d "
      "host function via %s\n",
      API_NAME, API_LABEL, device, prop.name, prop.major, prop.minor, driver, runtime, pools_supported, HOST_FN_CALL);
  if (!pools_supported) return 3;

  const std::size_t sizes[] = {std::size_t(2) << 20, 256};
  std::vector<std::string> tables;
  for (std::size_t size : sizes) {
    std::vector<std::vector<cell>> grid(row_count, std::vector<cell>(5));
    for (int pi = 0; pi < 5; ++pi)
      for (int si = 0; si < row_count; ++si) {
        grid[si][pi] = trial(device, size, policies[pi], rows[si]);
      }
    char line[512];
    std::string t;
    std::snprintf(line, sizeof line, "\n%s, size %zu B: block freed on s1, next allocation on s2\n", API_LABEL, size);
    t += line;
    std::snprintf(line, sizeof line, "| %-34s |", "situation \\ policies");
    t += line;
    for (const auto& p : policies) {
      std::snprintf(line, sizeof line, " %-13s |", p.label);
      t += line;
    }
    t += "\n|" + std::string(36, '-') + "|";
    for (int pi = 0; pi < 5; ++pi) t += std::string(15, '-') + "|";
    t += "\n";
    for (int si = 0; si < row_count; ++si) {
      std::snprintf(line, sizeof line, "| %-34s |", rows[si].label);
      t += line;
      for (int pi = 0; pi < 5; ++pi) {
        std::snprintf(line, sizeof line, " %-13s |", grid[si][pi].text().c_str());
        t += line;
      }
      t += "\n";
    }
    tables.push_back(t);
  }
  for (const auto& t : tables) std::fputs(t.c_str(), stdout);
  std::printf("watchdog releases: %d (0 expected)\n", watchdog_releases);
  return watchdog_releases ? 1 : 0;
}
