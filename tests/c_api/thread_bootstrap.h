/* A bootstrap written in C (pvmm_bootstrap_ops): the ranks are threads of this process, meeting at a mutex.
 * What an MPI- or PMIx-based runtime writes over its own collectives; used by the C tests and the C consumer. */
#ifndef PVMM_C_TEST_THREAD_BOOTSTRAP_H
#define PVMM_C_TEST_THREAD_BOOTSTRAP_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pvmm/pvmm.h>

typedef struct tb_group {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int size;
  int arrived, leaving, complete, aborted_by;
  size_t bytes;
  unsigned char* buffer;
  int destroyed; /* ranks whose destroy callback ran */
} tb_group;

typedef struct tb_rank {
  tb_group* group;
  int rank;
} tb_rank;

static int tb_group_init(tb_group* g, int size) {
  pthread_condattr_t attr;
  memset(g, 0, sizeof *g);
  g->size = size;
  g->aborted_by = -1;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cond, &attr);
  pthread_condattr_destroy(&attr);
  return pthread_mutex_init(&g->mutex, NULL);
}

static void tb_group_destroy(tb_group* g) {
  free(g->buffer);
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->mutex);
}

/* Waits on the group's condition until `deadline_ns` (CLOCK_MONOTONIC); 0 when woken, ETIMEDOUT after. */
static int tb_wait(tb_group* g, int64_t deadline_ns) {
  struct timespec at;
  if (deadline_ns == INT64_MAX) return pthread_cond_wait(&g->cond, &g->mutex);
  at.tv_sec = (time_t)(deadline_ns / 1000000000);
  at.tv_nsec = (long)(deadline_ns % 1000000000);
  return pthread_cond_timedwait(&g->cond, &g->mutex, &at);
}

static int tb_fail(tb_group* g, int status, const char* detail) {
  pthread_mutex_unlock(&g->mutex);
  pvmm_bootstrap_fail_detail(detail);
  return status;
}

static int tb_allgather(void* context, const void* mine, size_t bytes, void* all, uint64_t collective,
                        int64_t deadline_ns) {
  tb_rank* self = (tb_rank*)context;
  tb_group* g = self->group;
  char text[128];
  (void)collective;
  pthread_mutex_lock(&g->mutex);
  while (g->leaving > 0 && g->aborted_by < 0) { /* the previous collective is still being read */
    if (tb_wait(g, deadline_ns) == ETIMEDOUT) return tb_fail(g, pvmm_status_timeout, "c threads: previous round");
  }
  if (g->aborted_by >= 0) {
    snprintf(text, sizeof text, "c threads: rank %d aborted", g->aborted_by);
    return tb_fail(g, pvmm_status_peer_lost, text);
  }
  if (g->arrived == 0) {
    free(g->buffer);
    g->buffer = (unsigned char*)malloc((size_t)g->size * bytes + 1);
    g->bytes = bytes;
    if (g->buffer == NULL) return tb_fail(g, pvmm_status_out_of_memory, "c threads: malloc");
  } else if (g->bytes != bytes) {
    snprintf(text, sizeof text, "c threads: %zu bytes where the others gave %zu", bytes, g->bytes);
    return tb_fail(g, pvmm_status_team_mismatch, text);
  }
  memcpy(g->buffer + (size_t)self->rank * bytes, mine, bytes);
  if (++g->arrived == g->size) {
    g->complete = 1;
    pthread_cond_broadcast(&g->cond);
  }
  while (!g->complete && g->aborted_by < 0) {
    if (tb_wait(g, deadline_ns) == ETIMEDOUT) {
      snprintf(text, sizeof text, "c threads: %d of %d ranks arrived before the deadline", g->arrived, g->size);
      return tb_fail(g, pvmm_status_timeout, text);
    }
  }
  if (!g->complete) {
    snprintf(text, sizeof text, "c threads: rank %d aborted", g->aborted_by);
    return tb_fail(g, pvmm_status_peer_lost, text);
  }
  memcpy(all, g->buffer, (size_t)g->size * bytes);
  if (++g->leaving == g->size) { /* the last one out resets the round */
    g->arrived = g->leaving = g->complete = 0;
    pthread_cond_broadcast(&g->cond);
  }
  pthread_mutex_unlock(&g->mutex);
  return pvmm_status_ok;
}

static void tb_abort(void* context) {
  tb_rank* self = (tb_rank*)context;
  pthread_mutex_lock(&self->group->mutex);
  if (self->group->aborted_by < 0) self->group->aborted_by = self->rank;
  pthread_cond_broadcast(&self->group->cond);
  pthread_mutex_unlock(&self->group->mutex);
}

static void tb_destroy(void* context) {
  tb_rank* self = (tb_rank*)context;
  pthread_mutex_lock(&self->group->mutex);
  ++self->group->destroyed;
  pthread_mutex_unlock(&self->group->mutex);
}

/* The ops table of rank `self->rank` (barrier, send and receive left to pvmm's defaults). */
static pvmm_bootstrap_ops tb_ops(tb_rank* self) {
  pvmm_bootstrap_ops ops;
  memset(&ops, 0, sizeof ops);
  ops.version = PVMM_BOOTSTRAP_OPS_VERSION;
  ops.struct_size = (uint32_t)sizeof ops;
  ops.context = self;
  ops.rank = self->rank;
  ops.size = self->group->size;
  ops.node = 0;
  ops.local_rank = self->rank;
  ops.local_size = self->group->size;
  ops.adapter = "c-threads";
  ops.allgather = tb_allgather;
  ops.abort = tb_abort;
  ops.destroy = tb_destroy;
  return ops;
}

/* What a rank makes over its thread bootstrap: the bootstrap (tb_ops), a team and one window, made in that order by
   tb_join and given back in reverse by tb_leave. */
typedef struct tb_member {
  pvmm_bootstrap boot;
  pvmm_team team;
  pvmm_window window;
} tb_member;

/* Makes m's bootstrap, team and window. On a failure it gives back what it made and returns the failure's status
   (the last error says why). */
static pvmm_status tb_join(tb_rank* self, const pvmm_team_options* topts, const pvmm_window_options* wopts,
                           tb_member* m) {
  pvmm_bootstrap_ops ops = tb_ops(self);
  pvmm_status s;
  memset(m, 0, sizeof *m);
  s = pvmm_bootstrap_create(&ops, &m->boot);
  if (s != pvmm_status_ok) return s;
  s = pvmm_team_create(m->boot, topts, &m->team);
  if (s == pvmm_status_ok) {
    s = pvmm_window_create(m->team, wopts, &m->window);
    if (s == pvmm_status_ok) return s;
    pvmm_team_release(m->team);
  }
  pvmm_bootstrap_release(m->boot);
  return s;
}

/* Gives back m's window, team and bootstrap, all three whatever happens; the first failure's status. */
static pvmm_status tb_leave(tb_member* m) {
  pvmm_status s = pvmm_window_release(m->window), t = pvmm_team_release(m->team), b = pvmm_bootstrap_release(m->boot);
  return s != pvmm_status_ok ? s : t != pvmm_status_ok ? t : b;
}

/* Runs rank_main(self) for every rank of `group` (tb_group_init'ed; at most TB_MAX_RANKS), each on a thread of its
   own, and waits for them all. Returns how many ranks failed: rank_main returned 0, or its thread did not start. */
enum { TB_MAX_RANKS = 16 };
typedef struct tb_thread {
  tb_rank self;
  int (*rank_main)(tb_rank* self);
  int ok;
} tb_thread;

static void* tb_thread_main(void* argument) {
  tb_thread* t = (tb_thread*)argument;
  t->ok = t->rank_main(&t->self);
  return NULL;
}

static int tb_run_ranks(tb_group* group, int (*rank_main)(tb_rank* self)) {
  tb_thread threads[TB_MAX_RANKS];
  pthread_t ids[TB_MAX_RANKS];
  int started[TB_MAX_RANKS];
  int r, failed = 0;
  if (group->size > TB_MAX_RANKS) return group->size;
  for (r = 0; r < group->size; ++r) {
    threads[r].self.group = group;
    threads[r].self.rank = r;
    threads[r].rank_main = rank_main;
    threads[r].ok = 0;
    started[r] = pthread_create(&ids[r], NULL, tb_thread_main, &threads[r]) == 0;
  }
  for (r = 0; r < group->size; ++r) {
    if (started[r]) pthread_join(ids[r], NULL);
    failed += !threads[r].ok;
  }
  return failed;
}

#endif /* PVMM_C_TEST_THREAD_BOOTSTRAP_H */
