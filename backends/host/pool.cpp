// Host backend, feature "pool": a real stream-ordered suballocator. Each pool is one sparse memfd (of its maximum
// size, or the machine's memory) mapped once; it commits 2 MiB chunks (fallocate) as blocks need them and gives
// them back by punching holes, so "reserved" is what the file really holds. A free is enqueued on its stream and
// completes in that stream's order; who may reuse a freed block follows the pool's reuse policies, decided from
// the streams' recorded ordering and progress (worker_stream.hpp).
//
// Sharing: the file is what another process imports (a dup of the memfd over SCM_RIGHTS). Past the pool's memory
// the file holds a control table (per 256-byte unit: a generation, odd while the block that starts there is live,
// and a count of importers) and a header page, so both processes see which exports are stale and which blocks an
// importer still holds.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backend/pool.hpp"
#include "checked_math.hpp"
#include "host.hpp"
#include "propagate.hpp"
#include "worker_stream.hpp"

namespace pvmm::detail::backend {
namespace host {
namespace {

constexpr std::size_t chunk = std::size_t{2} << 20;  // like CUDA's pool granularity
constexpr std::size_t alignment = 256;               // of every block, as the drivers align pool allocations

/// Shared between the exporter and importers (in the file): generation odd while live; importers holding it.
struct unit_state {
  std::atomic<std::uint32_t> generation;
  std::atomic<std::uint32_t> importers;
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared between processes");

/// The last page of a pool's file.
struct file_header {
  char magic[8];
  std::uint64_t capacity;
};
constexpr char header_magic[8] = {'p', 'v', 'm', 'm', 'p', 'o', 'o', 'l'};

/// A pointer export's driver record, as this backend writes it.
struct pointer_record {
  std::uint32_t magic;
  std::uint32_t generation;
  std::uint64_t offset;
  std::uint64_t size;  // the block's
  std::uint64_t capacity;
};
constexpr std::uint32_t pointer_magic = 0x706d7670;  // "pvmp"
static_assert(sizeof(pointer_record) <= sizeof(pool_pointer_record), "fits the drivers' 64 bytes");

std::size_t table_bytes(std::size_t capacity) {
  return (capacity / alignment * sizeof(unit_state) + page_size() - 1) / page_size() * page_size();
}
std::size_t file_bytes(std::size_t capacity) { return capacity + table_bytes(capacity) + page_size(); }

struct block {
  std::size_t size = 0;
  enum class state { live, pending, free } what = state::live;
  std::shared_ptr<worker_stream> freed_on;      // pending/free: the stream the free was enqueued on
  std::uint64_t free_sequence = 0;              // ... and its place there
  std::uint64_t generation = 0;                 // bumped at each reuse: a late free task leaves a reused block alone
  std::shared_ptr<worker_stream> allocated_on;  // live: the stream it was allocated on ...
  std::uint64_t allocated_after = 0;            // ... and its place there, which the host must see done
};

struct host_pool {
  ~host_pool() {
    if (base) ::munmap(base, file_bytes(capacity));
    if (fd >= 0) ::close(fd);
  }
  std::mutex lock;
  int fd = -1;  // -1 in an importer, which only maps the file
  bool imported = false;
  unsigned char* base = nullptr;
  std::size_t capacity = 0;  // the pool's maximum; the file holds the control table and header past it
  unit_state& unit(std::size_t offset) { return reinterpret_cast<unit_state*>(base + capacity)[offset / alignment]; }
  std::vector<bool> committed;
  std::size_t committed_chunks = 0;
  std::map<std::size_t, block> blocks;  // by offset; [0, end) is covered by blocks
  std::size_t end = 0;
  std::uint64_t used = 0, used_high = 0, reserved_high = 0;
  std::uint64_t threshold = 0;  // the drivers' default
  bool follow = true, opportunistic = true, internal = true;
  int device = 0;

  std::uint64_t reserved() const { return static_cast<std::uint64_t>(committed_chunks) * chunk; }

  /// Gives back committed chunks that hold no live or pending block, from the top, while more than `keep` stays.
  void trim(std::uint64_t keep) {
    for (std::size_t c = committed.size(); c-- > 0 && reserved() > keep;) {
      if (!committed[c] || reserved() - chunk < keep) continue;
      const std::size_t lo = c * chunk, hi = lo + chunk;
      bool busy = false;
      auto it = blocks.upper_bound(lo);
      if (it != blocks.begin()) --it;
      for (; it != blocks.end() && it->first < hi; ++it)
        if (it->first + it->second.size > lo && it->second.what != block::state::free) {
          busy = true;
          break;
        }
      if (busy) continue;
      if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(lo), chunk) != 0) continue;
      committed[c] = false;
      --committed_chunks;
    }
  }

  /// Commits every chunk under [offset, offset + size).
  status commit(std::size_t offset, std::size_t size) {
    for (std::size_t c = offset / chunk; c * chunk < offset + size; ++c) {
      if (committed[c]) continue;
      if (::fallocate(fd, 0, static_cast<off_t>(c * chunk), chunk) != 0)
        return errno_error(errc::out_of_memory, "fallocate", errno, "committing a pool chunk");
      committed[c] = true;
      ++committed_chunks;
    }
    reserved_high = std::max(reserved_high, reserved());
    return {};
  }

  /// Whether memory freed as `b` may be handed to work on `on` now, and a wait `on` needs first (internal).
  bool reusable(const block& b, worker_stream& on, bool& needs_wait) const {
    needs_wait = false;
    if (b.freed_on.get() == &on) return true;  // stream order alone makes it safe
    if (follow && on.ordered_after(b.freed_on.get()) >= b.free_sequence) return true;
    if (opportunistic && b.what == block::state::free) return true;
    if (internal) {
      needs_wait = b.what == block::state::pending;
      return true;
    }
    return false;
  }
};

// The live pools by handle, and default pools by device. Process-wide because handles are; a handle the caller
// passes is looked up here, never dereferenced.
std::mutex registry_lock;
std::unordered_map<std::uint64_t, std::shared_ptr<host_pool>> pools;
std::unordered_map<int, std::uint64_t> default_pools;

std::uint64_t handle_of(const std::shared_ptr<host_pool>& p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p.get()));
}

std::shared_ptr<host_pool> find_pool(pool_handle h) {
  std::lock_guard<std::mutex> guard(registry_lock);
  auto it = pools.find(h.value);
  return it == pools.end() ? nullptr : it->second;
}

/// The pool and offset a pointer belongs to (pools, and the pool allocations in them, by address).
std::shared_ptr<host_pool> pool_of(const void* p) {
  std::lock_guard<std::mutex> guard(registry_lock);
  for (auto& [h, pool] : pools) {
    auto* at = static_cast<const unsigned char*>(p);
    if (at >= pool->base && at < pool->base + pool->capacity) return pool;
  }
  return nullptr;
}

error unknown_pool(pool_handle h) {
  return make_error(errc::invalid_handle, fmt::format("{:#x} is not a live pool of the host backend", h.value));
}

result<std::shared_ptr<host_pool>> make_pool(std::size_t max_size, int device) {
  auto pool = std::make_shared<host_pool>();
  pool->device = device;
  std::size_t capacity = max_size;
  if (capacity == 0) {  // no limit: as much as the machine has
    const auto pages = static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES));
    capacity = pages * page_size();
  }
  auto rounded = checked_round_up(capacity, chunk);
  if (!rounded) return make_error(errc::out_of_memory, fmt::format("a pool of {:#x} bytes cannot exist", max_size));
  pool->capacity = *rounded;
  pool->fd = ::memfd_create("pvmm-pool", MFD_CLOEXEC);
  if (pool->fd < 0) return errno_error(errc::system_error, "memfd_create", errno);
  if (::ftruncate(pool->fd, static_cast<off_t>(file_bytes(pool->capacity))) != 0)
    return errno_error(errc::out_of_memory, "ftruncate", errno, "sizing the pool's sparse file");
  void* base =
      ::mmap(nullptr, file_bytes(pool->capacity), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, pool->fd, 0);
  if (base == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "mapping the pool");
  pool->base = static_cast<unsigned char*>(base);
  pool->committed.assign(pool->capacity / chunk, false);
  file_header header{};
  std::memcpy(header.magic, header_magic, sizeof header_magic);
  header.capacity = pool->capacity;
  std::memcpy(pool->base + file_bytes(pool->capacity) - page_size(), &header, sizeof header);
  return pool;
}

/// Maps a pool file another process exported; invalid_handle for anything else (it came from a peer).
result<std::shared_ptr<host_pool>> map_imported(int fd, int device) {
  if (::fcntl(fd, F_GET_SEALS) < 0)
    return make_error(errc::invalid_handle, fmt::format("fd {} is not a memfd, so not a host-backend pool", fd));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(errc::invalid_handle, "fstat", errno);
  const auto total = static_cast<std::size_t>(st.st_size);
  file_header header{};
  if (total < page_size() ||
      ::pread(fd, &header, sizeof header, static_cast<off_t>(total - page_size())) !=
          static_cast<ssize_t>(sizeof header) ||
      std::memcmp(header.magic, header_magic, sizeof header_magic) != 0)
    return make_error(errc::invalid_handle, fmt::format("fd {} does not hold a host-backend pool", fd));
  if (header.capacity % chunk != 0 || header.capacity > total || file_bytes(header.capacity) != total)
    return make_error(errc::invalid_handle, fmt::format("fd {}: a pool of {:#x} bytes cannot be {:#x} bytes long", fd,
                                                        header.capacity, total));
  auto pool = std::make_shared<host_pool>();
  pool->imported = true;
  pool->device = device;
  pool->capacity = header.capacity;
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "mapping the imported pool");
  pool->base = static_cast<unsigned char*>(base);
  return pool;
}

}  // namespace

bool is_pool_memory(const void* p) { return pool_of(p) != nullptr; }

void release_above_thresholds() {
  std::vector<std::shared_ptr<host_pool>> all;
  {
    std::lock_guard<std::mutex> guard(registry_lock);
    for (auto& [h, pool] : pools) all.push_back(pool);
  }
  for (auto& pool : all) {
    std::lock_guard<std::mutex> guard(pool->lock);
    if (pool->reserved() > pool->threshold) pool->trim(pool->threshold);
  }
}

}  // namespace host

using namespace host;

result<capabilities::pool_features> pool_capabilities(int) {
  capabilities::pool_features f;
  f.supported = true;
  f.host_location = true;  // all of this backend's memory is host memory
  f.max_size = true;       // the pool's file is max_size long
  f.ipc_posix_fd = true;   // the file is what another process imports
  return f;
}

result<pool_handle> create_pool(const pool_properties& p) {
  PVMM_TRY_ASSIGN(pool, make_pool(p.max_size, p.location.type == location::kind::device ? p.location.id : 0));
  std::lock_guard<std::mutex> guard(registry_lock);
  pools.emplace(handle_of(pool), pool);
  return pool_handle{handle_of(pool)};
}

result<pool_handle> default_pool(int device) {
  {
    std::lock_guard<std::mutex> guard(registry_lock);
    if (auto it = default_pools.find(device); it != default_pools.end()) return pool_handle{it->second};
  }
  PVMM_TRY_ASSIGN(pool, make_pool(0, device));
  std::lock_guard<std::mutex> guard(registry_lock);
  if (auto it = default_pools.find(device); it != default_pools.end()) return pool_handle{it->second};  // raced
  pools.emplace(handle_of(pool), pool);
  default_pools.emplace(device, handle_of(pool));
  return pool_handle{handle_of(pool)};
}

status destroy_pool(pool_handle h) {
  std::lock_guard<std::mutex> guard(registry_lock);
  if (pools.erase(h.value) == 0) return unknown_pool(h);
  return {};  // pending frees hold the pool until they have run
}

status set_pool_attribute(pool_handle h, pool_attribute which, std::uint64_t value) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  std::lock_guard<std::mutex> guard(pool->lock);
  switch (which) {
    case pool_attribute::release_threshold:
      pool->threshold = value;
      return {};
    case pool_attribute::reuse_follow_event_dependencies:
      pool->follow = value != 0;
      return {};
    case pool_attribute::reuse_opportunistic:
      pool->opportunistic = value != 0;
      return {};
    case pool_attribute::reuse_internal_dependencies:
      pool->internal = value != 0;
      return {};
    case pool_attribute::reserved_high:
      pool->reserved_high = pool->reserved();
      return {};
    case pool_attribute::used_high:
      pool->used_high = pool->used;
      return {};
    default:
      return make_error(errc::invalid_argument, "this pool attribute cannot be set");
  }
}

result<std::uint64_t> get_pool_attribute(pool_handle h, pool_attribute which) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  std::lock_guard<std::mutex> guard(pool->lock);
  switch (which) {
    case pool_attribute::release_threshold:
      return pool->threshold;
    case pool_attribute::reuse_follow_event_dependencies:
      return std::uint64_t{pool->follow};
    case pool_attribute::reuse_opportunistic:
      return std::uint64_t{pool->opportunistic};
    case pool_attribute::reuse_internal_dependencies:
      return std::uint64_t{pool->internal};
    case pool_attribute::reserved_current:
      return pool->reserved();
    case pool_attribute::reserved_high:
      return pool->reserved_high;
    case pool_attribute::used_current:
      return pool->used;
    case pool_attribute::used_high:
      return pool->used_high;
  }
  return make_error(errc::invalid_argument, "unknown pool attribute");
}

status trim_pool(pool_handle h, std::size_t keep) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  std::lock_guard<std::mutex> guard(pool->lock);
  pool->trim(keep);
  return {};
}

status set_pool_access(pool_handle h, const access_descriptor*, std::size_t) {
  // The neutral layer passes only other devices' grants, and this backend has one device.
  return find_pool(h) ? status{} : status{unknown_pool(h)};
}

result<access> get_pool_access(pool_handle h, location) {
  if (!find_pool(h)) return unknown_pool(h);
  return access::read_write;
}

result<void*> allocate_from_pool(pool_handle h, std::size_t size, stream_handle s, int) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  auto on = find_stream(s);
  if (!on) return unknown_stream(s);
  auto need = checked_round_up(size, alignment);
  if (!need) return make_error(errc::out_of_memory, fmt::format("{:#x} bytes cannot exist", size));
  std::lock_guard<std::mutex> guard(pool->lock);
  // First fit among freed blocks this stream may reuse; else at the end.
  std::size_t offset = pool->end;
  bool reuse = false, wait = false;
  for (auto& [off, b] : pool->blocks) {
    if (b.what == block::state::live || b.size < *need) continue;
    bool needs_wait = false;
    if (!pool->reusable(b, *on, needs_wait)) continue;
    offset = off;
    reuse = true;
    wait = needs_wait;
    break;
  }
  if (!reuse && (*need > pool->capacity || pool->end > pool->capacity - *need))
    return make_error(errc::out_of_memory,
                      fmt::format("the pool's maximum size {:#x} would be exceeded ({:#x} in blocks, {:#x} asked)",
                                  pool->capacity, pool->end, *need),
                      "free earlier allocations (and synchronize), or create the pool with a larger max_size");
  PVMM_TRY(pool->commit(offset, *need));
  if (reuse) {
    block& b = pool->blocks[offset];
    if (wait) on->enqueue_wait(b.freed_on, b.free_sequence);  // internal dependencies: the driver adds the wait
    if (b.size > *need) {                                     // split: the rest stays free as it was
      block rest = b;
      rest.size = b.size - *need;
      pool->blocks.emplace(offset + *need, rest);
    }
    b.size = *need;
    b.what = block::state::live;
    b.freed_on.reset();
    ++b.generation;
  } else {
    pool->blocks[offset] = block{*need, block::state::live, nullptr, 0, 0, nullptr, 0};
    pool->end = offset + *need;
  }
  block& made = pool->blocks[offset];
  made.allocated_on = on;
  made.allocated_after = on->enqueue([] {});  // the allocation is a step in the stream's order, as on the GPUs
  pool->used += *need;
  pool->used_high = std::max(pool->used_high, pool->used);
  auto& u = pool->unit(offset);
  u.generation.store((u.generation.load() | 1u) + 2u);  // odd: live, and unlike any earlier life of this block
  return static_cast<void*>(pool->base + offset);
}

status free_to_pool(void* pointer, stream_handle s, int) {
  auto pool = pool_of(pointer);
  if (!pool) return make_error(errc::invalid_argument, fmt::format("{} is not host pool memory", pointer));
  auto on = find_stream(s);
  if (!on) return unknown_stream(s);
  const std::size_t offset = static_cast<std::size_t>(static_cast<unsigned char*>(pointer) - pool->base);
  if (pool->imported) {  // the importer's use ends in stream order
    on->enqueue([pool, offset] { pool->unit(offset).importers.fetch_sub(1); });
    return {};
  }
  std::lock_guard<std::mutex> guard(pool->lock);
  auto it = pool->blocks.find(offset);
  if (it == pool->blocks.end() || it->second.what != block::state::live)
    return make_error(errc::invalid_argument, fmt::format("{} is not a live allocation of the pool", pointer));
  auto& u = pool->unit(offset);
  const std::uint32_t live_generation = u.generation.fetch_add(1);  // even: an import from now on is stale
  if (const auto holders = u.importers.load(); holders != 0) {
    u.generation.store(live_generation);
    return make_error(errc::busy, fmt::format("{} is still held by {} importing process(es)", pointer, holders),
                      "the importer frees first (and the exporter frees after it has seen that)");
  }
  block& b = it->second;
  const std::uint64_t generation = b.generation, size = b.size;
  b.what = block::state::pending;
  b.freed_on = on;
  b.allocated_on.reset();
  // The free completes in the stream's order; the pool lock is held, so the task cannot run before these are set.
  b.free_sequence = on->enqueue([pool, offset, generation, size] {
    std::lock_guard<std::mutex> inner(pool->lock);
    pool->used -= size;
    auto found = pool->blocks.find(offset);
    if (found != pool->blocks.end() && found->second.generation == generation &&
        found->second.what == block::state::pending)
      found->second.what = block::state::free;
  });
  return {};
}

result<owned_fd> export_pool_posix_fd(pool_handle h) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  const int fd = ::fcntl(pool->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno_error(errc::system_error, "fcntl(F_DUPFD_CLOEXEC)", errno);
  return owned_fd(fd);
}

result<pool_handle> import_pool_posix_fd(int fd, int device) {
  PVMM_TRY_ASSIGN(pool, map_imported(fd, device));
  std::lock_guard<std::mutex> guard(registry_lock);
  pools.emplace(handle_of(pool), pool);
  return pool_handle{handle_of(pool)};
}

result<pool_pointer_record> export_pool_pointer(pool_handle h, const void* pointer) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  std::lock_guard<std::mutex> guard(pool->lock);
  const auto offset = static_cast<std::size_t>(static_cast<const unsigned char*>(pointer) - pool->base);
  auto it = pool->blocks.find(offset);
  if (it == pool->blocks.end() || it->second.what != block::state::live)
    return make_error(errc::invalid_argument, fmt::format("{} is not a live allocation of the pool", pointer));
  const block& b = it->second;
  if (b.allocated_on->observed() < b.allocated_after)  // as CUDA refuses an allocation the host has not seen done
    return make_error(errc::invalid_argument,
                      fmt::format("{} is not known complete: synchronize its stream before exporting it", pointer));
  pointer_record r{pointer_magic, pool->unit(offset).generation.load(), offset, b.size, pool->capacity};
  pool_pointer_record out{};
  std::memcpy(out.data(), &r, sizeof r);
  return out;
}

result<void*> import_pool_pointer(pool_handle h, const pool_pointer_record& record, std::size_t size) {
  auto pool = find_pool(h);
  if (!pool) return unknown_pool(h);
  pointer_record r{};
  std::memcpy(&r, record.data(), sizeof r);
  if (r.magic != pointer_magic || r.capacity != pool->capacity)
    return make_error(errc::invalid_handle, "the record is not a pointer export of this host-backend pool");
  if (r.offset % alignment != 0 || r.offset >= pool->capacity || r.size > pool->capacity - r.offset || size > r.size ||
      r.generation % 2 == 0)
    return make_error(
        errc::invalid_handle,
        fmt::format("the record's block [{:#x}, +{:#x}) (size {:#x}) cannot be in this pool", r.offset, r.size, size));
  auto& u = pool->unit(r.offset);
  u.importers.fetch_add(1);  // first: the exporter's free sees it, or this sees the exporter's free
  if (u.generation.load() != r.generation) {
    u.importers.fetch_sub(1);
    return make_error(errc::invalid_handle, "the exported allocation has been freed since it was exported (stale)");
  }
  return static_cast<void*>(pool->base + r.offset);
}

}  // namespace pvmm::detail::backend
