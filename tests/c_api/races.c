/* A release racing a use of the same handle (issue 47 item 14): for every kind a thread can create alone, one thread
 * keeps reading the handle while another releases it. pvmm.h's promise: the racing call finishes on the object it
 * had looked up (an ok answer with the real value) or sees a dead handle (pvmm_status_already_released); never an
 * ok answer with a torn value (size 0, NULL), never a crash. The registry makes it so for every kind alike
 * (src/c_api/common.hpp: teardown runs when the last reference drops); 12 of the 15 kinds are raced here. Each kind
 * runs in a child process with a timeout, so a crash fails that kind only. Run under host-tsan and host-asan too (the C
 * tests are built in every preset). 20 rounds a kind take ~2 s on 2 cores at load 10; with the registry's reference
 * counting undone (release() in place under a call in flight), allocation, reservation, pinned, managed, pool, stream,
 * growable and window failed within 20 rounds in each of 6 runs. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* Rounds per kind: argv[1] overrides (to hunt a rare race by hand). */
enum { default_rounds = 20, chunk = 2 << 20 };
static int rounds = default_rounds;

typedef struct race {
  const char* name;
  int (*create)(uint64_t* id);                 /* 0 when made; 2 when the backend lacks it (skipped) */
  pvmm_status (*read)(uint64_t id, int* torn); /* *torn = 1 for an ok answer with a wrong value */
  pvmm_status (*release)(uint64_t id);
} race;

/* What every kind shares, given one body: a make's answer (0 made with its id in *id; 2 when may_lack and the
 * backend lacks the kind; 1 otherwise), a read's verdict (*torn = 1 for an ok answer with a wrong value), the
 * release of the handle {id}, the make of a kind that pvmm_<kind>_create makes alone, and the reader of a kind that
 * answers a (pointer, size) pair. */
static int made(pvmm_status s, int may_lack, const uint64_t* handle, uint64_t* id) {
  if (may_lack && s == pvmm_status_not_supported) return 2;
  if (s != pvmm_status_ok) return 1;
  *id = *handle;
  return 0;
}
static pvmm_status judged(pvmm_status s, int wrong, int* torn) {
  *torn = s == pvmm_status_ok && wrong;
  return s;
}
#define RELEASE_OF(kind)                           \
  static pvmm_status release_##kind(uint64_t id) { \
    pvmm_##kind handle = {id};                     \
    return pvmm_##kind##_release(handle);          \
  }
#define MAKE_OF(kind, may_lack, ...)                                                   \
  static int make_##kind(uint64_t* id) {                                               \
    pvmm_##kind handle;                                                                \
    return made(pvmm_##kind##_create(__VA_ARGS__, &handle), may_lack, &handle.id, id); \
  }
#define READ_SPAN_OF(kind, call, wrong)                                             \
  static pvmm_status read_##kind(uint64_t id, int* torn) {                          \
    pvmm_##kind handle = {id};                                                      \
    void* data = NULL;                                                              \
    size_t size = 0;                                                                \
    pvmm_status s = call(handle, &data, &size); /* before the verdict reads them */ \
    return judged(s, (wrong), torn);                                                \
  }

static int make_allocation(uint64_t* id) {
  pvmm_allocation_properties p = PVMM_INIT(pvmm_allocation_properties);
  p.location.kind = pvmm_location_device;
  pvmm_allocation a;
  return made(pvmm_allocation_create(chunk, &p, &a), 0, &a.id, id);
}
static pvmm_status read_allocation(uint64_t id, int* torn) {
  pvmm_allocation a = {id};
  size_t size = 0;
  pvmm_status s = pvmm_allocation_size(a, &size);
  return judged(s, size != chunk, torn);
}
RELEASE_OF(allocation)

MAKE_OF(reservation, 0, chunk, 0, NULL)
static pvmm_status read_reservation(uint64_t id, int* torn) {
  pvmm_reservation r = {id};
  size_t size = 0;
  void* address = NULL;
  pvmm_status s = pvmm_reservation_size(r, &size);
  if (s == pvmm_status_ok) s = pvmm_reservation_address(r, &address);
  return judged(s, size != chunk || address == NULL, torn);
}
RELEASE_OF(reservation)

MAKE_OF(pinned, 0, 4096, NULL)
READ_SPAN_OF(pinned, pvmm_pinned_data, data == NULL || size != 4096)
RELEASE_OF(pinned)

MAKE_OF(managed, 1, 4096, pvmm_attach_global)
READ_SPAN_OF(managed, pvmm_managed_data, data == NULL || size < 4096)
RELEASE_OF(managed)

static int make_pool(uint64_t* id) {
  pvmm_pool_options o = PVMM_INIT(pvmm_pool_options);
  pvmm_pool p;
  return made(pvmm_pool_create(&o, &p), 1, &p.id, id);
}
static pvmm_status read_pool(uint64_t id, int* torn) {
  pvmm_pool p = {id};
  uint64_t reserved = 1, used = 1;
  pvmm_status s = pvmm_pool_usage(p, &reserved, &used);
  return judged(s, used != 0, torn);
}
RELEASE_OF(pool)

MAKE_OF(stream, 0, 0)
static pvmm_status read_stream(uint64_t id, int* torn) {
  pvmm_stream st = {id};
  pvmm_stream_ref ref = {0, -1};
  pvmm_status s = pvmm_stream_native(st, &ref);
  return judged(s, ref.native == 0, torn);
}
RELEASE_OF(stream)

MAKE_OF(event, 0, 0)
static pvmm_status read_event(uint64_t id, int* torn) {
  pvmm_event e = {id};
  int done = -1;
  pvmm_status s = pvmm_event_query(e, &done);
  return judged(s, done != 1, torn);
}
RELEASE_OF(event)

static int make_bootstrap(uint64_t* id) {
  pvmm_bootstrap b;
  return made(pvmm_bootstrap_create_threads(1, &b), 0, &b.id, id);
}
static pvmm_status read_bootstrap(uint64_t id, int* torn) {
  pvmm_bootstrap b = {id};
  int rank = -1, size = -1;
  pvmm_status s = pvmm_bootstrap_rank(b, &rank, &size);
  return judged(s, rank != 0 || size != 1, torn);
}
RELEASE_OF(bootstrap)

static int make_team(uint64_t* id) {
  pvmm_bootstrap b;
  if (pvmm_bootstrap_create_threads(1, &b) != pvmm_status_ok) return 1;
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  pvmm_team t;
  pvmm_status s = pvmm_team_create(b, &o, &t);
  pvmm_bootstrap_release(b);
  return made(s, 0, &t.id, id);
}
static pvmm_status read_team(uint64_t id, int* torn) {
  pvmm_team t = {id};
  int rank = -1, size = -1, device = -1, nodes = -1;
  pvmm_status s = pvmm_team_info(t, &rank, &size, &device, &nodes);
  return judged(s, rank != 0 || size != 1 || nodes != 1, torn);
}
RELEASE_OF(team)

static int make_listener(uint64_t* id) {
  char name[64];
  static int serial = 0;
  snprintf(name, sizeof name, "pvmm-c-race-%d-%d", (int)getpid(), serial++);
  pvmm_listener l;
  return made(pvmm_listen(name, &l), 0, &l.id, id);
}
static pvmm_status read_listener(uint64_t id, int* torn) {
  pvmm_listener l = {id};
  pvmm_connection c;
  pvmm_status s = pvmm_listener_accept(l, 0, &c); /* nobody connects: timeout while alive */
  *torn = s == pvmm_status_ok;
  return s == pvmm_status_timeout ? pvmm_status_ok : s;
}
RELEASE_OF(listener)

static int make_growable(uint64_t* id) {
  pvmm_growable_options o = PVMM_INIT(pvmm_growable_options);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  o.access = &rw;
  o.access_count = 1;
  o.chunk_size = chunk; /* the 64 MiB default chunk makes a round ~70 ms on the host backend */
  o.reserve_size = 2 * chunk;
  pvmm_growable g;
  if (pvmm_growable_create(&o, &g) != pvmm_status_ok || pvmm_growable_resize(g, chunk, NULL) != pvmm_status_ok)
    return 1;
  *id = g.id;
  return 0;
}
READ_SPAN_OF(growable, pvmm_growable_data, data == NULL || size == 0)
RELEASE_OF(growable)

static int make_window(uint64_t* id) {
  uint64_t team_id;
  if (make_team(&team_id) != 0) return 1;
  pvmm_team t = {team_id};
  pvmm_window_options o = PVMM_INIT(pvmm_window_options);
  o.size = 4096;
  pvmm_window w;
  pvmm_status s = pvmm_window_create(t, &o, &w);
  pvmm_team_release(t); /* the window keeps its team */
  return made(s, 0, &w.id, id);
}
READ_SPAN_OF(window, pvmm_window_base, data == NULL || size == 0) /* the base and the stride */
RELEASE_OF(window)

/* A kind's row: its name and its make_, read_ and release_ functions. */
#define RACE(kind) \
  { #kind, make_##kind, read_##kind, release_##kind }
static const race races[] = {
    RACE(allocation), RACE(reservation), RACE(pinned), RACE(managed),  RACE(pool),     RACE(stream),
    RACE(event),      RACE(bootstrap),   RACE(team),   RACE(listener), RACE(growable), RACE(window),
};

typedef struct reader_state {
  const race* r;
  uint64_t id;
  atomic_int started;
  int torn, unexpected, reads;
} reader_state;

static void* reader(void* arg) {
  reader_state* st = (reader_state*)arg;
  for (;;) {
    int torn = 0;
    pvmm_status s = st->r->read(st->id, &torn);
    ++st->reads;
    atomic_store(&st->started, 1);
    if (torn) ++st->torn;
    if (s == pvmm_status_already_released) return NULL;
    if (s != pvmm_status_ok) {
      ++st->unexpected;
      fprintf(stderr, "%s: the racing read returned %s: %s\n", st->r->name, pvmm_status_name(s),
              pvmm_last_error_message());
      return NULL;
    }
  }
}

/* One kind, in this (child) process: 0 passed, 1 failed, 2 skipped. */
static int run_race(const race* r) {
  for (int round = 0; round < rounds; ++round) {
    reader_state st = {r, 0, 0, 0, 0, 0};
    int made = r->create(&st.id);
    if (made != 0) return made;
    pthread_t t;
    if (pthread_create(&t, NULL, reader, &st) != 0) return 1;
    while (!atomic_load(&st.started)) sched_yield(); /* the reader is inside its first call (2 cores shared) */
    pvmm_status released = r->release(st.id);
    pthread_join(t, NULL);
    if (released != pvmm_status_ok || st.torn || st.unexpected) {
      fprintf(stderr, "%s round %d: release %s, %d torn reads of %d, %d unexpected\n", r->name, round,
              pvmm_status_name(released), st.torn, st.reads, st.unexpected);
      return 1;
    }
    int torn = 0;
    if (r->read(st.id, &torn) != pvmm_status_already_released) return 1;
  }
  return 0;
}

/* Whether the backend has a device (CI builds the GPU backends where there is none): the kinds that need one are
 * reported skipped there. Asked in each kind's child, never in this parent: a GPU driver initialised before a fork
 * does not work in the forked child (CUDA answers CUDA_ERROR_NOT_INITIALIZED there, HIP on NVIDIA an initialisation
 * error), so a parent that asked first made every GPU kind fail in 1 ms. */
static int have_device(void) {
  pvmm_backend_info here = PVMM_INIT(pvmm_backend_info);
  int devices = 0;
  return pvmm_query_backend(&here) == pvmm_status_ok && here.available &&
         pvmm_device_count(&devices) == pvmm_status_ok && devices > 0;
}

enum { child_no_device = 3 };

static int needs_device(const race* r) { return strcmp(r->name, "bootstrap") != 0 && strcmp(r->name, "listener") != 0; }

int main(int argc, char** argv) {
  if (argc > 1) rounds = atoi(argv[1]);
  for (size_t i = 0; i < sizeof races / sizeof races[0]; ++i) {
    const int64_t began = pvmm_monotonic_ns();
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
      alarm(30);
      _exit(needs_device(&races[i]) && !have_device() ? child_no_device : run_race(&races[i]));
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == child_no_device) {
      printf("[pvmm-skip] %s: needs a device, the backend has none here\n", races[i].name);
      continue;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
      printf("[pvmm-skip] %s: the backend lacks it\n", races[i].name);
      continue;
    }
    ++check_count;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++check_failures;
      if (WIFSIGNALED(status))
        fprintf(stderr, "%s: the child died of signal %d (%s)\n", races[i].name, WTERMSIG(status),
                strsignal(WTERMSIG(status)));
      else
        fprintf(stderr, "%s: the race failed (exit %d)\n", races[i].name, WEXITSTATUS(status));
    }
    printf("%s: %d rounds in %.0f ms\n", races[i].name, rounds, (double)(pvmm_monotonic_ns() - began) / 1e6);
  }
  return check_summary("c_api/races");
}
