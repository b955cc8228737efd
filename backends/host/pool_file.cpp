// Host backend, feature "pool": the pool's file. The exporter's memfd is sized once and sealed against shrinking
// and growing before anyone can reach it (invariants 12 and 16: a peer holding it could otherwise truncate it and
// SIGBUS every process that maps it); an import accepts only a file sealed that way, writable, on tmpfs, with a
// well-formed header. Layout: the pool's memory, the control table (unit_state per 256 bytes), a header page.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/checked_math.hpp"
#include "core/propagate.hpp"
#include "host.hpp"
#include "pool_state.hpp"

namespace pvmm::detail::backend::host {
namespace {

/// The last page of a pool's file.
struct file_header {
  char magic[8];
  std::uint64_t capacity;
  std::uint64_t layout;  // of the control table: a file of another layout is refused
};
constexpr char header_magic[8] = {'p', 'v', 'm', 'm', 'p', 'o', 'o', 'l'};
constexpr std::uint64_t header_layout = 2;  // 2: unit_state holds a 64-bit generation and the block's size

std::size_t table_bytes(std::size_t capacity) {
  return (capacity / pool_alignment * sizeof(unit_state) + page_size() - 1) / page_size() * page_size();
}

/// invalid_handle unless `fd` is sealed against size changes and not against writing.
status check_seals(int fd) {
  PVMM_TRY(check_size_seals(fd, "pool"));
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0)
    return make_error(
        errc::invalid_handle,
        fmt::format("fd {} is sealed against writing (seals {:#x}); a pool is shared read-write", fd, seals));
  return {};
}

}  // namespace

std::size_t pool_file_bytes(std::size_t capacity) { return capacity + table_bytes(capacity) + page_size(); }

host_pool::~host_pool() {
  if (base) ::munmap(base, pool_file_bytes(capacity));
  if (fd >= 0) ::close(fd);
}

result<std::shared_ptr<host_pool>> make_pool(std::size_t max_size, int device) {
  auto pool = std::make_shared<host_pool>();
  pool->device = device;
  std::size_t capacity = max_size;
  if (capacity == 0) {  // no limit: as much as the machine has
    const auto pages = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES));
    capacity = pages * page_size();
  }
  auto rounded = checked_round_up(capacity, pool_granularity);
  if (!rounded || *rounded > (std::size_t{1} << 62))
    return make_error(errc::out_of_memory, fmt::format("a pool of {:#x} bytes cannot exist", max_size));
  pool->capacity = *rounded;
  const std::size_t total = pool_file_bytes(pool->capacity);
  pool->fd = ::memfd_create("pvmm-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (pool->fd < 0) return errno_error(errc::system_error, "memfd_create", errno);
  if (::ftruncate(pool->fd, static_cast<off_t>(total)) != 0)
    return errno_error(errc::out_of_memory, "ftruncate", errno, "sizing the pool's sparse file");
  // Its size is final: sealed before it is mapped or exported. Punching holes (trim) stays allowed.
  if (::fcntl(pool->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return errno_error(errc::system_error, "fcntl(F_ADD_SEALS)", errno, "sealing the pool's file");
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, pool->fd, 0);
  if (base == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "mapping the pool");
  pool->base = static_cast<unsigned char*>(base);
  pool->committed.assign((pool->capacity + pool_chunk - 1) / pool_chunk, false);
  file_header header{};
  std::memcpy(header.magic, header_magic, sizeof header_magic);
  header.capacity = pool->capacity;
  header.layout = header_layout;
  std::memcpy(pool->base + total - page_size(), &header, sizeof header);
  return pool;
}

result<std::shared_ptr<host_pool>> map_imported(int fd, int device) {
  PVMM_TRY(check_seals(fd));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR)
    return make_error(errc::invalid_handle,
                      fmt::format("fd {} is not open for reading and writing; a pool is shared read-write", fd));
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return errno_error(errc::invalid_handle, "fstatfs", errno);
  if (fs.f_type != TMPFS_MAGIC)  // hugetlbfs, say, faults (SIGBUS) when its pages run out
    return make_error(errc::invalid_handle,
                      fmt::format("fd {} is on file system {:#x}, not tmpfs: not a host-backend pool", fd,
                                  static_cast<unsigned long>(fs.f_type)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(errc::invalid_handle, "fstat", errno);
  const auto total = static_cast<std::size_t>(st.st_size);
  file_header header{};
  if (total < page_size() ||
      ::pread(fd, &header, sizeof header, static_cast<off_t>(total - page_size())) !=
          static_cast<ssize_t>(sizeof header) ||
      std::memcmp(header.magic, header_magic, sizeof header_magic) != 0)
    return make_error(errc::invalid_handle, fmt::format("fd {} does not hold a host-backend pool", fd));
  if (header.layout != header_layout)
    return make_error(errc::invalid_handle, fmt::format("fd {} holds a pool of layout {} (this pvmm reads {})", fd,
                                                        header.layout, header_layout));
  if (header.capacity % pool_granularity != 0 || header.capacity > total || pool_file_bytes(header.capacity) != total)
    return make_error(errc::invalid_handle, fmt::format("fd {}: a pool of {:#x} bytes cannot be {:#x} bytes long", fd,
                                                        header.capacity, total));
  auto pool = std::make_shared<host_pool>();
  pool->imported = true;
  pool->device = device;
  pool->capacity = header.capacity;
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    if (e == ENOMEM) return errno_error(errc::out_of_memory, "mmap", e, "mapping the imported pool");
    return errno_error(errc::invalid_handle, "mmap", e, fmt::format("fd {} cannot be mapped read-write", fd));
  }
  pool->base = static_cast<unsigned char*>(base);
  return pool;
}

}  // namespace pvmm::detail::backend::host
