// Host backend, feature "pool": a real stream-ordered suballocator. Each pool is one sparse memfd (of its maximum
// size, or the machine's memory) mapped once; it commits 2 MiB chunks (fallocate) as blocks need them and gives
// them back by punching holes, so "reserved" is what the file really holds. A free is enqueued on its stream and
// completes in that stream's order; who may reuse a freed block follows the pool's reuse policies, decided from
// the streams' recorded ordering and progress (worker_stream.hpp).
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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

struct block {
  std::size_t size = 0;
  enum class state { live, pending, free } what = state::live;
  std::shared_ptr<worker_stream> freed_on;  // pending/free: the stream the free was enqueued on
  std::uint64_t free_sequence = 0;          // ... and its place there
  std::uint64_t generation = 0;             // bumped at each reuse: a late free task leaves a reused block alone
};

struct host_pool {
  ~host_pool() {
    if (base) ::munmap(base, capacity);
    if (fd >= 0) ::close(fd);
  }
  std::mutex lock;
  int fd = -1;
  unsigned char* base = nullptr;
  std::size_t capacity = 0;  // the file's size: the pool's maximum
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
  if (::ftruncate(pool->fd, static_cast<off_t>(pool->capacity)) != 0)
    return errno_error(errc::out_of_memory, "ftruncate", errno, "sizing the pool's sparse file");
  void* base = ::mmap(nullptr, pool->capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, pool->fd, 0);
  if (base == MAP_FAILED) return errno_error(errc::out_of_memory, "mmap", errno, "mapping the pool");
  pool->base = static_cast<unsigned char*>(base);
  pool->committed.assign(pool->capacity / chunk, false);
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
    pool->blocks[offset] = block{*need, block::state::live, nullptr, 0, 0};
    pool->end = offset + *need;
  }
  pool->used += *need;
  pool->used_high = std::max(pool->used_high, pool->used);
  return static_cast<void*>(pool->base + offset);
}

status free_to_pool(void* pointer, stream_handle s, int) {
  auto pool = pool_of(pointer);
  if (!pool) return make_error(errc::invalid_argument, fmt::format("{} is not host pool memory", pointer));
  auto on = find_stream(s);
  if (!on) return unknown_stream(s);
  std::lock_guard<std::mutex> guard(pool->lock);
  const std::size_t offset = static_cast<std::size_t>(static_cast<unsigned char*>(pointer) - pool->base);
  auto it = pool->blocks.find(offset);
  if (it == pool->blocks.end() || it->second.what != block::state::live)
    return make_error(errc::invalid_argument, fmt::format("{} is not a live allocation of the pool", pointer));
  block& b = it->second;
  const std::uint64_t generation = b.generation, size = b.size;
  b.what = block::state::pending;
  b.freed_on = on;
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

}  // namespace pvmm::detail::backend
