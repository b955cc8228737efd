/* pvmm's C interface doing real work on the configured backend, teams: a team of threads over a bootstrap written
 * in C (thread_bootstrap.h) with a symmetric window, and a C bootstrap whose callbacks fail. No fd is leaked.
 * Plain C11. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "functional.h"
#include "thread_bootstrap.h"

/* ---- a team of 3 threads over the C bootstrap ---- */

/* Whether the backend is a GPU's (not "host"): its stream-ordered waits between thread ranks are refused. Set once
   by everything() before any thread starts. */
static int on_gpu_backend;
/* The windows' signal path (a pvmm_stream_signal_path): team_over_c_bootstrap runs with each. With old_caller, the
   options' struct_size ends before stream_signals (a caller compiled before it) and the field holds garbage: it must
   not be read (the kernel path). Before the field was 64-bit it lay in the old struct's padding and was read. */
static int signal_path, old_caller;
enum { ranks = 3 };

/* One rank's team and window over the C bootstrap; 1 when all it saw was right. */
static int run_rank(tb_rank* self) {
  pvmm_team_options topts = PVMM_INIT(pvmm_team_options);
  pvmm_window_options wopts = PVMM_INIT(pvmm_window_options);
  tb_member m;
  int rank = -1, size = 0, peer, good;
  void* local = NULL;
  size_t bytes = 0;
  topts.timeout_ms = 20000;
  wopts.size = 4096;
  wopts.timeout_ms = 20000;
  wopts.signal_channels = 1;
  wopts.stream_signals = signal_path;
  if (old_caller) wopts.struct_size = offsetof(pvmm_window_options, stream_signals);
  if (tb_join(self, &topts, &wopts, &m) != pvmm_status_ok) {
    fprintf(stderr, "rank %d: %s\n", self->rank, pvmm_last_error_message());
    return 0;
  }
  good = pvmm_team_info(m.team, &rank, &size, NULL, NULL) == pvmm_status_ok && rank == self->rank && size == ranks &&
         pvmm_window_peer(m.window, rank, &local, &bytes) == pvmm_status_ok && bytes >= 4096;
  if (good) {
    unsigned char mark = (unsigned char)(0x40 + rank);
    good = pvmm_copy_to_mapping(local, &mark, 1, -1) == pvmm_status_ok &&
           pvmm_copy_to_mapping((unsigned char*)local + bytes - 1, &mark, 1, -1) == pvmm_status_ok;
  }
  good = good && pvmm_bootstrap_barrier(m.boot, pvmm_monotonic_ns() + 20000000000LL) == pvmm_status_ok;
  for (peer = 0; good && peer < ranks; ++peer) {
    unsigned char* theirs = NULL;
    unsigned char first_byte = 0, last_byte = 0;
    good = pvmm_window_peer(m.window, peer, (void**)&theirs, &bytes) == pvmm_status_ok &&
           pvmm_copy_from_mapping(&first_byte, theirs, 1, -1) == pvmm_status_ok &&
           pvmm_copy_from_mapping(&last_byte, theirs + bytes - 1, 1, -1) == pvmm_status_ok &&
           first_byte == 0x40 + peer && last_byte == 0x40 + peer;
  }
  good = good && pvmm_bootstrap_barrier(m.boot, pvmm_monotonic_ns() + 20000000000LL) == pvmm_status_ok;
  if (good) { /* two stream-ordered barriers on the signal pads, where the backend has signal kernels */
    pvmm_stream stream;
    pvmm_stream_ref on;
    void* const* table = NULL;
    pvmm_status first;
    good = pvmm_window_device_pointer_table(m.window, &table) == pvmm_status_ok && table != NULL &&
           pvmm_stream_create(0, &stream) == pvmm_status_ok;
    if (good) {
      good = pvmm_stream_native(stream, &on) == pvmm_status_ok;
      first = good ? pvmm_window_barrier(m.window, 0, on, 10000) : pvmm_status_ok;
      if (good && on_gpu_backend) /* thread ranks on one GPU share a context: refused, naming it */
        good = first == pvmm_status_not_supported &&
               strstr(pvmm_last_error_message(), "of this window are in one process on one device") != NULL;
      else if (good)
        good = first == pvmm_status_ok && pvmm_window_barrier(m.window, 0, on, 10000) == pvmm_status_ok &&
               pvmm_stream_synchronize(on) == pvmm_status_ok && pvmm_window_signal_status(m.window) == pvmm_status_ok;
      good = pvmm_stream_release(stream) == pvmm_status_ok && good;
    }
  }
  if (!good) fprintf(stderr, "rank %d: %s\n", self->rank, pvmm_last_error_message());
  return tb_leave(&m) == pvmm_status_ok && good;
}

static void team_over_c_bootstrap(void) {
  tb_group group;
  tb_group_init(&group, ranks);
  CHECK(tb_run_ranks(&group, run_rank) == 0);
  CHECK(group.destroyed == ranks); /* every rank's destroy ran once its last reference went */
  tb_group_destroy(&group);
}

/* A callback that fails: its status and detail come back, and the bootstrap stays broken (the base's contract). */
static int failing_allgather(void* c, const void* m, size_t b, void* a, uint64_t n, int64_t d) {
  (void)c, (void)m, (void)b, (void)a, (void)n, (void)d;
  pvmm_bootstrap_fail_detail("the runtime's allgather lost rank 1");
  return pvmm_status_peer_lost;
}
static int strange_allgather(void* c, const void* m, size_t b, void* a, uint64_t n, int64_t d) {
  (void)c, (void)m, (void)b, (void)a, (void)n, (void)d;
  return 777;
}
static void abort_nothing(void* c) { (void)c; }

static void failing_callbacks(void) {
  tb_group group;
  tb_rank self;
  pvmm_bootstrap_ops ops;
  pvmm_bootstrap boot;
  int mine = 1, all[2];
  tb_group_init(&group, 2);
  self.group = &group;
  self.rank = 0;
  ops = tb_ops(&self);
  ops.allgather = failing_allgather;
  ops.abort = abort_nothing;
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, &mine, sizeof mine, all, INT64_MAX), pvmm_status_peer_lost,
               "the runtime's allgather lost rank 1");
  CHECK_STATUS(pvmm_bootstrap_barrier(boot, INT64_MAX), pvmm_status_peer_lost, "lost rank 1"); /* broken */
  CHECK_OK(pvmm_bootstrap_release(boot));
  ops.allgather = strange_allgather;
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_allgather(boot, &mine, sizeof mine, all, pvmm_monotonic_ns() + 1000000000LL),
               pvmm_status_backend_error, "777 is not a pvmm_status");
  CHECK_OK(pvmm_bootstrap_release(boot));
  CHECK_OK(pvmm_bootstrap_create(&ops, &boot));
  CHECK_STATUS(pvmm_bootstrap_send(boot, 1, 0, &mine, sizeof mine, INT64_MAX), pvmm_status_not_supported,
               "pvmm_bootstrap_ops.send is NULL");
  CHECK_OK(pvmm_bootstrap_release(boot));
  CHECK(group.destroyed == 3);
  tb_group_destroy(&group);
}

static void everything(const pvmm_backend_info* backend, const pvmm_device_info* device) {
  (void)device;
  on_gpu_backend = strcmp(backend->name, "host") != 0; /* before any thread starts */
  signal_path = pvmm_stream_signals_kernel;
  team_over_c_bootstrap();
  signal_path = pvmm_stream_signals_driver;
  team_over_c_bootstrap();
  signal_path = 99;
  old_caller = 1;
  team_over_c_bootstrap();
  failing_callbacks();
}

int main(void) { return functional_main("c_api/functional_team", everything); }
