// Memory running out inside a C call (issue 47 item 22): every allocation after the first `k` of a call throws
// std::bad_alloc, for k = 0, 1, 2, ... until the call succeeds. The C guard, the team layer's wrapper and the
// bootstrap's must answer pvmm_status_out_of_memory (or succeed) without allocating on that path: an allocation
// there throws again inside a noexcept function, std::terminate. Runs in a child process with a timeout, so an abort
// fails this case only. Built as C++ to replace the global operator new.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include <pvmm/pvmm.h>

namespace {
thread_local long allowed = -1;  // allocations left before bad_alloc; -1: no limit
}

void* operator new(std::size_t size) {
  if (allowed == 0) throw std::bad_alloc();
  if (allowed > 0) --allowed;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

int failures = 0;

/// Runs `call` with k = 0, 1, ... allocations allowed until it succeeds (at most `limit`); every failure must be
/// out_of_memory with a message. Returns 0 when all answers were statuses.
template <class Call, class Undo>
int sweep(const char* name, Call call, Undo undo, long limit) {
  for (long k = 0; k < limit; ++k) {
    allowed = k;
    const pvmm_status s = call();
    allowed = -1;
    if (s == pvmm_status_ok) {
      undo();
      return 0;
    }
    if (s != pvmm_status_out_of_memory || pvmm_last_error_message()[0] == '\0') {
      std::fprintf(stderr, "%s with %ld allocations: %s (%s)\n", name, k, pvmm_status_name(s),
                   pvmm_last_error_message());
      return 1;
    }
  }
  std::fprintf(stderr, "%s: never succeeded within %ld allocations\n", name, limit);
  return 1;
}

int all_sweeps() {
  int bad = 0;
  pvmm_allocation_properties p = PVMM_INIT(pvmm_allocation_properties);
  pvmm_allocation a{};
  bad += sweep(
      "pvmm_allocation_create", [&] { return pvmm_allocation_create(2 << 20, &p, &a); },
      [&] { pvmm_allocation_release(a); }, 400);
  pvmm_bootstrap b{};
  bad += sweep(
      "pvmm_bootstrap_create_threads", [&] { return pvmm_bootstrap_create_threads(1, &b); }, [] {}, 400);
  pvmm_bootstrap_release(b);
  // A call that failed inside a bootstrap breaks it (the bootstrap contract): each round gets a fresh one, made
  // with no limit, and the previous round's released.
  bool made = false;
  auto fresh = [&] {
    const long keep = allowed;
    allowed = -1;
    if (made) pvmm_bootstrap_release(b);
    made = pvmm_bootstrap_create_threads(1, &b) == pvmm_status_ok;
    allowed = keep;
  };
  int mine = 7, all = 0;
  bad += sweep(
      "pvmm_bootstrap_allgather",
      [&] {
        fresh();
        return pvmm_bootstrap_allgather(b, &mine, sizeof mine, &all, INT64_MAX);
      },
      [] {}, 400);
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  pvmm_team t{};
  bad += sweep(
      "pvmm_team_create",
      [&] {
        fresh();
        return pvmm_team_create(b, &o, &t);
      },
      [&] { pvmm_team_release(t); }, 2000);
  if (made) pvmm_bootstrap_release(b);
  return bad;
}

}  // namespace

int main() {
  // The sweeps create device memory and teams: a GPU backend built where there is no device (CI) reports a skip.
  // The child asks, never this parent: a GPU driver initialised before a fork does not work in the forked child
  // (every call there failed with backend_unavailable on cuda and backend_error on hip-nvidia).
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    alarm(60);
    pvmm_backend_info here = PVMM_INIT(pvmm_backend_info);
    int devices = 0;
    if (pvmm_query_backend(&here) != pvmm_status_ok || !here.available ||
        pvmm_device_count(&devices) != pvmm_status_ok || devices < 1) {
      std::printf("[pvmm-skip] c_api/out_of_memory: the %s backend has no device here: %s\n", here.name,
                  here.unavailable_reason);
      std::fflush(nullptr);
      _exit(77);
    }
    _exit(all_sweeps() == 0 ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return 0;
  if (WIFSIGNALED(status)) {
    std::fprintf(stderr, "the child died of signal %d (%s): an out-of-memory path allocated\n", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    ++failures;
  } else if (WEXITSTATUS(status) != 0) {
    ++failures;
  }
  std::printf("c_api/out_of_memory: 1 check, %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
