/* A C11 program that uses pvmm only through its installed C interface (pvmm/pvmm.h):
 * 1. a memory-type detector (what UCX's detect_memory_type and Open MPI's check_addr ask) over every kind of memory;
 * 2. export/import between two processes: this program exports an allocation as a POSIX fd and runs itself again
 *    (fork + exec) with the fd; the child imports and maps it, checks the parent's bytes and writes its answer;
 * 3. a stream-ordered pool shared between two processes (where the device shares pools): the pool's fd, identity
 *    and one allocation's record go to the child over pvmm's fd transport (a named endpoint); the child imports the
 *    pool and the allocation, checks the parent's bytes, writes its answer and frees before the parent does;
 * 4. a team of threads over a bootstrap written in C (tests/c_api/thread_bootstrap.h), with a symmetric window.
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

/* What the pool's exporter sends beside the pool's fd, in one message. */
typedef struct shared_pool {
  pvmm_pool_id id;
  pvmm_pool_pointer_export record;
} shared_pool;

/* The child: connects to the parent's endpoint `name`, imports the pool and the allocation it sends. */
static int pool_child(const char* name) {
  pvmm_connection parent;
  pvmm_stream stream;
  pvmm_stream_ref on;
  pvmm_pool imported;
  pvmm_pool_allocation held;
  shared_pool message;
  void* at = NULL;
  size_t fd_count = 0, bytes = 0;
  int fd = -1;
  unsigned char seen = 0, answer = 0xe7;
  TRY(pvmm_connect(name, 30000, &parent));
  TRY(pvmm_connection_receive(parent, &fd, 1, &fd_count, &message, sizeof message, &bytes, 30000));
  if (fd_count != 1 || bytes != sizeof message) {
    fprintf(stderr, "FAIL: the child got %zu fds and %zu bytes\n", fd_count, bytes);
    return 1;
  }
  TRY(pvmm_stream_create(0, &stream));
  TRY(pvmm_stream_native(stream, &on));
  TRY(pvmm_pool_import_posix_fd(fd, &message.id, 0, &imported));
  close(fd);
  TRY(pvmm_pool_import_pointer(imported, &message.record, on, &held));
  TRY(pvmm_pool_allocation_data(held, &at, NULL));
  TRY(pvmm_copy_from_mapping(&seen, at, 1, 0));
  if (seen != 0x5c) {
    fprintf(stderr, "FAIL: the child read 0x%x from the pool, the parent wrote 0x5c\n", seen);
    return 1;
  }
  TRY(pvmm_copy_to_mapping((unsigned char*)at + 1, &answer, 1, 0));
  TRY(pvmm_pool_allocation_free_async(held, on)); /* the importer frees before the exporter */
  TRY(pvmm_stream_synchronize(on));
  TRY(pvmm_pool_release(imported));
  TRY(pvmm_connection_send(parent, NULL, 0, &answer, 1, 30000));
  TRY(pvmm_connection_release(parent));
  TRY(pvmm_stream_release(stream));
  return 0;
}

static int pool_between_processes(const char* self) {
  pvmm_pool_options options = PVMM_INIT(pvmm_pool_options);
  pvmm_stream stream;
  pvmm_stream_ref on;
  pvmm_pool pool;
  pvmm_listener listener;
  pvmm_connection child;
  shared_pool message;
  void* pointer = NULL;
  char name[64];
  size_t fd_count = 0, bytes = 0;
  int fd = -1, status = 0;
  unsigned char mark = 0x5c, answer = 0, seen = 0;
  pid_t pid;
  options.exportable = pvmm_handle_posix_fd;
  snprintf(name, sizeof name, "pvmm-c-consumer-%ld", (long)getpid());
  TRY(pvmm_stream_create(0, &stream));
  TRY(pvmm_stream_native(stream, &on));
  TRY(pvmm_pool_create(&options, &pool));
  TRY(pvmm_pool_allocate_async(pool, 1 << 20, on, &pointer));
  TRY(pvmm_stream_synchronize(on)); /* complete before it is exported */
  TRY(pvmm_copy_to_mapping(pointer, &mark, 1, 0));
  TRY(pvmm_pool_export_posix_fd(pool, &fd, &message.id));
  TRY(pvmm_pool_export_pointer(pool, pointer, &message.record));
  TRY(pvmm_listen(name, &listener));
  pid = fork();
  if (pid == 0) {
    execl(self, self, "pool-child", name, (char*)NULL);
    _exit(127);
  }
  TRY(pvmm_listener_accept(listener, 30000, &child));
  TRY(pvmm_connection_send(child, &fd, 1, &message, sizeof message, 30000));
  close(fd);
  TRY(pvmm_connection_receive(child, NULL, 0, &fd_count, &answer, 1, &bytes, 60000)); /* after the child freed */
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAIL: the pool's importing child failed (status 0x%x)\n", status);
    return 1;
  }
  TRY(pvmm_copy_from_mapping(&seen, (unsigned char*)pointer + 1, 1, 0));
  printf("a pool shared between two processes: the child read 0x%x and answered 0x%x\n", mark, seen);
  TRY(pvmm_pool_free_async(pool, pointer, on));
  TRY(pvmm_stream_synchronize(on));
  TRY(pvmm_connection_release(child));
  TRY(pvmm_listener_release(listener));
  TRY(pvmm_pool_release(pool));
  TRY(pvmm_stream_release(stream));
  return seen == 0xe7 && answer == 0xe7 ? 0 : 1;
}

enum { ranks = 2 };

/* One rank: writes its mark into its slot, reads its peer's; 1 when it saw the peer's mark. */
static int rank_main(tb_rank* self) {
  pvmm_team_options topts = PVMM_INIT(pvmm_team_options);
  pvmm_window_options wopts = PVMM_INIT(pvmm_window_options);
  tb_member m;
  void *mine = NULL, *theirs = NULL;
  unsigned char mark = (unsigned char)(0x70 + self->rank), seen = 0;
  const int peer = 1 - self->rank;
  wopts.size = 4096;
  TRY(tb_join(self, &topts, &wopts, &m));
  TRY(pvmm_window_peer(m.window, self->rank, &mine, NULL));
  TRY(pvmm_copy_to_mapping(mine, &mark, 1, -1));
  TRY(pvmm_bootstrap_barrier(m.boot, pvmm_monotonic_ns() + 30000000000LL));
  TRY(pvmm_window_peer(m.window, peer, &theirs, NULL));
  TRY(pvmm_copy_from_mapping(&seen, theirs, 1, -1));
  TRY(pvmm_bootstrap_barrier(m.boot, pvmm_monotonic_ns() + 30000000000LL));
  TRY(tb_leave(&m));
  return seen == 0x70 + peer;
}

static int team_of_threads(void) {
  tb_group group;
  int failures;
  tb_group_init(&group, ranks);
  failures = tb_run_ranks(&group, rank_main);
  tb_group_destroy(&group);
  printf("a team of %d threads over a bootstrap written in C: %s\n", ranks, failures ? "FAILED" : "each read its peer");
  return failures;
}

int main(int argc, char** argv) {
  pvmm_backend_info backend = PVMM_INIT(pvmm_backend_info);
  pvmm_device_info device = PVMM_INIT(pvmm_device_info);
  int count = 0, failures = 0;
  if (argc == 4 && strcmp(argv[1], "child") == 0) return child(atoi(argv[2]), (size_t)strtoull(argv[3], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "pool-child") == 0) return pool_child(argv[2]);
  TRY(pvmm_query_backend(&backend));
  TRY(pvmm_device_count(&count));
  if (!backend.available || count == 0) {
    printf("[pvmm-skip] %s backend has no device here: %s\n", backend.name, backend.unavailable_reason);
    return 0;
  }
  printf("pvmm C interface %d, %s backend, %d device(s)\n", pvmm_c_api_version(), backend.name, count);
  failures += detector();
  failures += two_processes(argv[0]);
  TRY(pvmm_query_device(0, &device));
  if (device.pools_ipc_posix_fd)
    failures += pool_between_processes(argv[0]);
  else
    printf("(device 0 does not share pools between processes: pool sharing left out)\n");
  failures += team_of_threads();
  printf("%s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
