/* A C11 program that uses pvmm only through its installed C interface (pvmm/pvmm.h):
 * 1. a memory-type detector (what UCX's detect_memory_type and Open MPI's check_addr ask) over every kind of memory;
 * 2. export/import between two processes: this program exports an allocation as a POSIX fd and runs itself again
 *    (fork + exec) with the fd; the child imports and maps it, checks the parent's bytes and writes its answer;
 * 3. a team of threads over a bootstrap written in C (tests/c_api/thread_bootstrap.h), with a symmetric window.
 * Built with -std=c11 -Wall -Wextra -Werror -pedantic. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pvmm/pvmm.h>

#include "thread_bootstrap.h"

#define TRY(call)                                                                                   \
  do {                                                                                              \
    if ((call) != pvmm_status_ok) {                                                                 \
      fprintf(stderr, "FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, pvmm_last_error_message()); \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)

static const char* kind_name(int kind) {
  static const char* const names[] = {"none", "device", "pool", "managed", "pinned", "registered"};
  return kind >= 0 && kind <= 5 ? names[kind] : "?";
}

static int detect(const char* what, const void* address, int expected) {
  pvmm_pointer_attributes a = PVMM_INIT(pvmm_pointer_attributes);
  TRY(pvmm_query_pointer(address, &a));
  printf("  %-20s kind=%-10s base=%p size=%zu device=%d\n", what, kind_name(a.kind), a.base, a.size, a.device);
  if (a.kind != expected) {
    fprintf(stderr, "FAIL: %s is %s, expected %s\n", what, kind_name(a.kind), kind_name(expected));
    return 1;
  }
  return 0;
}

static int detector(void) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_allocation memory;
  pvmm_reservation range;
  pvmm_pinned pinned;
  pvmm_managed managed;
  size_t gran = 0;
  void *mapped = NULL, *host = NULL, *unified = NULL;
  int stack = 0, failures = 0;
  char* heap = (char*)malloc(64);
  printf("memory-type detector:\n");
  TRY(pvmm_query_granularity(&props, &gran, NULL));
  TRY(pvmm_allocation_create(gran, &props, &memory));
  TRY(pvmm_reservation_create(gran, 0, NULL, &range));
  TRY(pvmm_reservation_map(range, 0, memory, 0, gran, &mapped));
  TRY(pvmm_reservation_set_access(range, 0, gran, &rw, 1));
  TRY(pvmm_pinned_create(4096, NULL, &pinned));
  TRY(pvmm_pinned_data(pinned, &host, NULL));
  TRY(pvmm_managed_create(4096, pvmm_attach_global, &managed));
  TRY(pvmm_managed_data(managed, &unified, NULL));
  failures += detect("VMM mapping", (char*)mapped + 16, pvmm_memory_device);
  failures += detect("pinned host memory", host, pvmm_memory_pinned);
  failures += detect("managed memory", unified, pvmm_memory_managed);
  failures += detect("malloc", heap, pvmm_memory_none);
  failures += detect("stack", &stack, pvmm_memory_none);
  TRY(pvmm_managed_release(managed));
  TRY(pvmm_pinned_release(pinned));
  TRY(pvmm_reservation_unmap(range, 0, gran));
  TRY(pvmm_reservation_release(range));
  TRY(pvmm_allocation_release(memory));
  free(heap);
  return failures;
}

/* The child: imports fd `fd` of `size` bytes, checks the parent's bytes, writes its answer at byte 1. */
static int child(int fd, size_t size) {
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_allocation imported;
  pvmm_reservation range;
  void* at = NULL;
  unsigned char seen = 0, answer = 0xc3;
  TRY(pvmm_allocation_import_posix_fd(fd, size, &imported));
  close(fd);
  TRY(pvmm_reservation_create(size, 0, NULL, &range));
  TRY(pvmm_reservation_map(range, 0, imported, 0, size, &at));
  TRY(pvmm_reservation_set_access(range, 0, size, &rw, 1));
  TRY(pvmm_copy_from_mapping(&seen, at, 1, -1));
  if (seen != 0xa5) {
    fprintf(stderr, "FAIL: the child read 0x%x, the parent wrote 0xa5\n", seen);
    return 1;
  }
  TRY(pvmm_copy_to_mapping((unsigned char*)at + 1, &answer, 1, -1));
  TRY(pvmm_reservation_unmap(range, 0, size));
  TRY(pvmm_reservation_release(range));
  TRY(pvmm_allocation_release(imported));
  return 0;
}

static int two_processes(const char* self) {
  pvmm_allocation_properties props = PVMM_INIT(pvmm_allocation_properties);
  pvmm_access_descriptor rw = {{pvmm_location_device, 0}, pvmm_access_read_write};
  pvmm_allocation memory;
  pvmm_reservation range;
  size_t gran = 0;
  void* at = NULL;
  int fd = -1, inheritable, status = 0;
  unsigned char mark = 0xa5, answer = 0;
  char fd_text[16], size_text[32];
  pid_t pid;
  props.exportable = pvmm_handle_posix_fd;
  TRY(pvmm_query_granularity(&props, &gran, NULL));
  TRY(pvmm_allocation_create(gran, &props, &memory));
  TRY(pvmm_reservation_create(gran, 0, NULL, &range));
  TRY(pvmm_reservation_map(range, 0, memory, 0, gran, &at));
  TRY(pvmm_reservation_set_access(range, 0, gran, &rw, 1));
  TRY(pvmm_copy_to_mapping(at, &mark, 1, -1));
  TRY(pvmm_allocation_export_posix_fd(memory, &fd));
  inheritable = dup(fd); /* dup clears close-on-exec: the child inherits this one */
  close(fd);
  snprintf(fd_text, sizeof fd_text, "%d", inheritable);
  snprintf(size_text, sizeof size_text, "%zu", gran);
  pid = fork();
  if (pid == 0) {
    execl(self, self, "child", fd_text, size_text, (char*)NULL);
    _exit(127);
  }
  close(inheritable);
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAIL: the importing child failed (status 0x%x)\n", status);
    return 1;
  }
  TRY(pvmm_copy_from_mapping(&answer, (unsigned char*)at + 1, 1, -1));
  printf("export/import between two processes: the child read 0x%x and answered 0x%x\n", mark, answer);
  TRY(pvmm_reservation_unmap(range, 0, gran));
  TRY(pvmm_reservation_release(range));
  TRY(pvmm_allocation_release(memory));
  return answer == 0xc3 ? 0 : 1;
}

enum { ranks = 2 };
typedef struct job {
  tb_rank self;
  int ok;
} job;

static void* rank_main(void* argument) {
  job* j = (job*)argument;
  pvmm_bootstrap_ops ops = tb_ops(&j->self);
  pvmm_team_options topts = PVMM_INIT(pvmm_team_options);
  pvmm_window_options wopts = PVMM_INIT(pvmm_window_options);
  pvmm_bootstrap boot;
  pvmm_team team;
  pvmm_window window;
  void *mine = NULL, *theirs = NULL;
  unsigned char mark = (unsigned char)(0x70 + j->self.rank), seen = 0;
  const int peer = 1 - j->self.rank;
  wopts.size = 4096;
  TRY(pvmm_bootstrap_create(&ops, &boot));
  TRY(pvmm_team_create(boot, &topts, &team));
  TRY(pvmm_window_create(team, &wopts, &window));
  TRY(pvmm_window_peer(window, j->self.rank, &mine, NULL));
  TRY(pvmm_copy_to_mapping(mine, &mark, 1, -1));
  TRY(pvmm_bootstrap_barrier(boot, pvmm_monotonic_ns() + 30000000000LL));
  TRY(pvmm_window_peer(window, peer, &theirs, NULL));
  TRY(pvmm_copy_from_mapping(&seen, theirs, 1, -1));
  j->ok = seen == 0x70 + peer;
  TRY(pvmm_bootstrap_barrier(boot, pvmm_monotonic_ns() + 30000000000LL));
  TRY(pvmm_window_release(window));
  TRY(pvmm_team_release(team));
  TRY(pvmm_bootstrap_release(boot));
  return NULL;
}

static int team_of_threads(void) {
  tb_group group;
  job jobs[ranks];
  pthread_t threads[ranks];
  int r, failures = 0;
  tb_group_init(&group, ranks);
  for (r = 0; r < ranks; ++r) {
    jobs[r].self.group = &group;
    jobs[r].self.rank = r;
    jobs[r].ok = 0;
    pthread_create(&threads[r], NULL, rank_main, &jobs[r]);
  }
  for (r = 0; r < ranks; ++r) {
    pthread_join(threads[r], NULL);
    failures += !jobs[r].ok;
  }
  tb_group_destroy(&group);
  printf("a team of %d threads over a bootstrap written in C: %s\n", ranks, failures ? "FAILED" : "each read its peer");
  return failures;
}

int main(int argc, char** argv) {
  pvmm_backend_info backend = PVMM_INIT(pvmm_backend_info);
  int count = 0, failures = 0;
  if (argc == 4 && strcmp(argv[1], "child") == 0) return child(atoi(argv[2]), (size_t)strtoull(argv[3], NULL, 10));
  TRY(pvmm_query_backend(&backend));
  TRY(pvmm_device_count(&count));
  if (!backend.available || count == 0) {
    printf("[pvmm-skip] %s backend has no device here: %s\n", backend.name, backend.unavailable_reason);
    return 0;
  }
  printf("pvmm C interface %d, %s backend, %d device(s)\n", pvmm_c_api_version(), backend.name, count);
  failures += detector();
  failures += two_processes(argv[0]);
  failures += team_of_threads();
  printf("%s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
