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

static pvmm_allocation_properties device0(void) {
  pvmm_allocation_properties p = PVMM_INIT(pvmm_allocation_properties);
  p.location.kind = pvmm_location_device;
  return p;
}

static int make_allocation(uint64_t* id) {
  pvmm_allocation_properties p = device0();
  pvmm_allocation a;
  if (pvmm_allocation_create(chunk, &p, &a) != pvmm_status_ok) return 1;
  *id = a.id;
  return 0;
}
static pvmm_status read_allocation(uint64_t id, int* torn) {
  pvmm_allocation a = {id};
  size_t size = 0;
  pvmm_status s = pvmm_allocation_size(a, &size);
  *torn = s == pvmm_status_ok && size != chunk;
  return s;
}
static pvmm_status release_allocation(uint64_t id) {
  pvmm_allocation a = {id};
  return pvmm_allocation_release(a);
}

static int make_reservation(uint64_t* id) {
  pvmm_reservation r;
  if (pvmm_reservation_create(chunk, 0, NULL, &r) != pvmm_status_ok) return 1;
  *id = r.id;
  return 0;
}
static pvmm_status read_reservation(uint64_t id, int* torn) {
  pvmm_reservation r = {id};
  size_t size = 0;
  void* address = NULL;
  pvmm_status s = pvmm_reservation_size(r, &size);
  if (s == pvmm_status_ok) s = pvmm_reservation_address(r, &address);
  *torn = s == pvmm_status_ok && (size != chunk || address == NULL);
  return s;
}
static pvmm_status release_reservation(uint64_t id) {
  pvmm_reservation r = {id};
  return pvmm_reservation_release(r);
}

static int make_pinned(uint64_t* id) {
  pvmm_pinned p;
  if (pvmm_pinned_create(4096, NULL, &p) != pvmm_status_ok) return 1;
  *id = p.id;
  return 0;
}
static pvmm_status read_pinned(uint64_t id, int* torn) {
  pvmm_pinned p = {id};
  void* data = NULL;
  size_t size = 0;
  pvmm_status s = pvmm_pinned_data(p, &data, &size);
  *torn = s == pvmm_status_ok && (data == NULL || size != 4096);
  return s;
}
static pvmm_status release_pinned(uint64_t id) {
  pvmm_pinned p = {id};
  return pvmm_pinned_release(p);
}

static int make_managed(uint64_t* id) {
  pvmm_managed m;
  pvmm_status s = pvmm_managed_create(4096, pvmm_attach_global, &m);
  if (s == pvmm_status_not_supported) return 2;
  if (s != pvmm_status_ok) return 1;
  *id = m.id;
  return 0;
}
static pvmm_status read_managed(uint64_t id, int* torn) {
  pvmm_managed m = {id};
  void* data = NULL;
  size_t size = 0;
  pvmm_status s = pvmm_managed_data(m, &data, &size);
  *torn = s == pvmm_status_ok && (data == NULL || size < 4096);
  return s;
}
static pvmm_status release_managed(uint64_t id) {
  pvmm_managed m = {id};
  return pvmm_managed_release(m);
}

static int make_pool(uint64_t* id) {
  pvmm_pool_options o = PVMM_INIT(pvmm_pool_options);
  pvmm_pool p;
  pvmm_status s = pvmm_pool_create(&o, &p);
  if (s == pvmm_status_not_supported) return 2;
  if (s != pvmm_status_ok) return 1;
  *id = p.id;
  return 0;
}
static pvmm_status read_pool(uint64_t id, int* torn) {
  pvmm_pool p = {id};
  uint64_t reserved = 1, used = 1;
  pvmm_status s = pvmm_pool_usage(p, &reserved, &used);
  *torn = s == pvmm_status_ok && used != 0;
  return s;
}
static pvmm_status release_pool(uint64_t id) {
  pvmm_pool p = {id};
  return pvmm_pool_release(p);
}

static int make_stream(uint64_t* id) {
  pvmm_stream s;
  if (pvmm_stream_create(0, &s) != pvmm_status_ok) return 1;
  *id = s.id;
  return 0;
}
static pvmm_status read_stream(uint64_t id, int* torn) {
  pvmm_stream st = {id};
  pvmm_stream_ref ref = {0, -1};
  pvmm_status s = pvmm_stream_native(st, &ref);
  *torn = s == pvmm_status_ok && ref.native == 0;
  return s;
}
static pvmm_status release_stream(uint64_t id) {
  pvmm_stream s = {id};
  return pvmm_stream_release(s);
}

static int make_event(uint64_t* id) {
  pvmm_event e;
  if (pvmm_event_create(0, &e) != pvmm_status_ok) return 1;
  *id = e.id;
  return 0;
}
static pvmm_status read_event(uint64_t id, int* torn) {
  pvmm_event e = {id};
  int done = -1;
  pvmm_status s = pvmm_event_query(e, &done);
  *torn = s == pvmm_status_ok && done != 1;
  return s;
}
static pvmm_status release_event(uint64_t id) {
  pvmm_event e = {id};
  return pvmm_event_release(e);
}

static int make_bootstrap(uint64_t* id) {
  pvmm_bootstrap b;
  if (pvmm_bootstrap_create_threads(1, &b) != pvmm_status_ok) return 1;
  *id = b.id;
  return 0;
}
static pvmm_status read_bootstrap(uint64_t id, int* torn) {
  pvmm_bootstrap b = {id};
  int rank = -1, size = -1;
  pvmm_status s = pvmm_bootstrap_rank(b, &rank, &size);
  *torn = s == pvmm_status_ok && (rank != 0 || size != 1);
  return s;
}
static pvmm_status release_bootstrap(uint64_t id) {
  pvmm_bootstrap b = {id};
  return pvmm_bootstrap_release(b);
}

static int make_team(uint64_t* id) {
  pvmm_bootstrap b;
  if (pvmm_bootstrap_create_threads(1, &b) != pvmm_status_ok) return 1;
  pvmm_team_options o = PVMM_INIT(pvmm_team_options);
  pvmm_team t;
  pvmm_status s = pvmm_team_create(b, &o, &t);
  pvmm_bootstrap_release(b);
  if (s != pvmm_status_ok) return 1;
  *id = t.id;
  return 0;
}
static pvmm_status read_team(uint64_t id, int* torn) {
  pvmm_team t = {id};
  int rank = -1, size = -1, device = -1, nodes = -1;
  pvmm_status s = pvmm_team_info(t, &rank, &size, &device, &nodes);
  *torn = s == pvmm_status_ok && (rank != 0 || size != 1 || nodes != 1);
  return s;
}
static pvmm_status release_team(uint64_t id) {
  pvmm_team t = {id};
  return pvmm_team_release(t);
}

static int make_listener(uint64_t* id) {
  char name[64];
  static int serial = 0;
  snprintf(name, sizeof name, "pvmm-c-race-%d-%d", (int)getpid(), serial++);
  pvmm_listener l;
  if (pvmm_listen(name, &l) != pvmm_status_ok) return 1;
  *id = l.id;
  return 0;
}
static pvmm_status read_listener(uint64_t id, int* torn) {
  pvmm_listener l = {id};
  pvmm_connection c;
  pvmm_status s = pvmm_listener_accept(l, 0, &c); /* nobody connects: timeout while alive */
  *torn = s == pvmm_status_ok;
  return s == pvmm_status_timeout ? pvmm_status_ok : s;
}
static pvmm_status release_listener(uint64_t id) {
  pvmm_listener l = {id};
  return pvmm_listener_release(l);
}

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
static pvmm_status read_growable(uint64_t id, int* torn) {
  pvmm_growable g = {id};
  void* data = NULL;
  size_t size = 0;
  pvmm_status s = pvmm_growable_data(g, &data, &size);
  *torn = s == pvmm_status_ok && (data == NULL || size == 0);
  return s;
}
static pvmm_status release_growable(uint64_t id) {
  pvmm_growable g = {id};
  return pvmm_growable_release(g);
}

static int make_window(uint64_t* id) {
  uint64_t team_id;
  if (make_team(&team_id) != 0) return 1;
  pvmm_team t = {team_id};
  pvmm_window_options o = PVMM_INIT(pvmm_window_options);
  o.size = 4096;
  pvmm_window w;
  pvmm_status s = pvmm_window_create(t, &o, &w);
  pvmm_team_release(t); /* the window keeps its team */
  if (s != pvmm_status_ok) return 1;
  *id = w.id;
  return 0;
}
static pvmm_status read_window(uint64_t id, int* torn) {
  pvmm_window w = {id};
  void* base = NULL;
  size_t stride = 0;
  pvmm_status s = pvmm_window_base(w, &base, &stride);
  *torn = s == pvmm_status_ok && (base == NULL || stride == 0);
  return s;
}
static pvmm_status release_window(uint64_t id) {
  pvmm_window w = {id};
  return pvmm_window_release(w);
}

static const race races[] = {
    {"allocation", make_allocation, read_allocation, release_allocation},
    {"reservation", make_reservation, read_reservation, release_reservation},
    {"pinned", make_pinned, read_pinned, release_pinned},
    {"managed", make_managed, read_managed, release_managed},
    {"pool", make_pool, read_pool, release_pool},
    {"stream", make_stream, read_stream, release_stream},
    {"event", make_event, read_event, release_event},
    {"bootstrap", make_bootstrap, read_bootstrap, release_bootstrap},
    {"team", make_team, read_team, release_team},
    {"listener", make_listener, read_listener, release_listener},
    {"growable", make_growable, read_growable, release_growable},
    {"window", make_window, read_window, release_window},
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
 * reported skipped there. */
static int have_device(void) {
  pvmm_backend_info here = PVMM_INIT(pvmm_backend_info);
  int devices = 0;
  return pvmm_query_backend(&here) == pvmm_status_ok && here.available &&
         pvmm_device_count(&devices) == pvmm_status_ok && devices > 0;
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atoi(argv[1]);
  const int device = have_device();
  for (size_t i = 0; i < sizeof races / sizeof races[0]; ++i) {
    if (!device && strcmp(races[i].name, "bootstrap") != 0 && strcmp(races[i].name, "listener") != 0) {
      printf("[pvmm-skip] %s: needs a device, the backend has none here\n", races[i].name);
      continue;
    }
    const int64_t began = pvmm_monotonic_ns();
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
      alarm(30);
      _exit(run_race(&races[i]));
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
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
