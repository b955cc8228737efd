// Host backend, feature "pool": the backend's entry points over a real stream-ordered suballocator
// (pool_state.hpp). It commits 2 MiB chunks (fallocate) as blocks need them and gives them back by punching holes,
// so "reserved" is what the file really holds. A free is enqueued on its stream and completes in that stream's
// order; who may reuse a freed block follows the pool's reuse policies (may_reuse, pool_blocks.cpp), decided from
// the streams' recorded ordering and progress (worker_stream.hpp).
//
// Sharing: the sealed file (pool_file.cpp) is what another process imports (a dup of the memfd over SCM_RIGHTS).
// Its control table tells an importer which exports are stale and how large each live block is; the exporter
// only writes it. The exporter cannot see an importer's use through anything it owns, so, as on the drivers, the
// importer frees first: that is the caller's rule.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "backend/pool.hpp"
#include "core/checked_math.hpp"
#include "core/propagate.hpp"
#include "host.hpp"
#include "pool_state.hpp"
#include "worker_stream.hpp"

namespace pvmm::detail::backend {
namespace host {
namespace {

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

}  // namespace

void release_above_thresholds() {
  std::vector<std::shared_ptr<host_pool>> all;
  {
    std::lock_guard<std::mutex> guard(registry_lock);
    for (auto& [h, pool] : pools) all.push_back(pool);
  }
  for (auto& pool : all) {
    std::lock_guard<std::mutex> guard(pool->lock);
    if (pool->reserved() > pool->threshold) pool->trim(pool->threshold, host_pool::trim_rule::at_most_keep);
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
      pool->policy.follow = value != 0;
      return {};
    case pool_attribute::reuse_opportunistic:
      pool->policy.opportunistic = value != 0;
      return {};
    case pool_attribute::reuse_internal_dependencies:
      pool->policy.internal = value != 0;
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
      return std::uint64_t{pool->policy.follow};
    case pool_attribute::reuse_opportunistic:
      return std::uint64_t{pool->policy.opportunistic};
    case pool_attribute::reuse_internal_dependencies:
      return std::uint64_t{pool->policy.internal};
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
  pool->trim(keep, host_pool::trim_rule::at_least_keep);
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
  auto need = checked_round_up(size, pool_alignment);
  if (!need) return make_error(errc::out_of_memory, fmt::format("{:#x} bytes cannot exist", size));
  std::vector<std::shared_ptr<worker_stream>> held;  // let go after the lock: a stream's teardown runs its work
  host_pool::placement at;
  std::uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> guard(pool->lock);
    PVMM_TRY_ASSIGN(taken, pool->take(*need, size, on, held));
    at = std::move(taken);
    generation = pool->blocks.find(at.offset)->second.generation;
  }
  // Enqueued without the pool's lock: on a stream that has stopped, work runs inline, and pool work takes it.
  if (at.wait_on) on->enqueue_wait(at.wait_on, at.wait_for);  // internal dependencies: the driver adds the wait
  const std::uint64_t after = on->enqueue([] {});  // the allocation is a step in the stream's order, as on the GPUs
  std::lock_guard<std::mutex> guard(pool->lock);
  auto it = pool->blocks.find(at.offset);
  if (it != pool->blocks.end() && it->second.generation == generation) it->second.allocated_after = after;
  return static_cast<void*>(pool->base + at.offset);
}

status free_to_pool(void* pointer, stream_handle s, int) {
  auto pool = pool_of(pointer);
  if (!pool) return make_error(errc::invalid_argument, fmt::format("{} is not host pool memory", pointer));
  auto on = find_stream(s);
  if (!on) return unknown_stream(s);
  // An importer's free ends its own use; the exporter keeps no count of importers (a peer could forge one).
  if (pool->imported) return {};
  const std::size_t offset = static_cast<std::size_t>(static_cast<unsigned char*>(pointer) - pool->base);
  std::size_t size = 0;
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> guard(pool->lock);
    auto it = pool->blocks.find(offset);
    if (it == pool->blocks.end() || it->second.what != pool_block::state::live)
      return make_error(errc::invalid_argument, fmt::format("{} is not a live allocation of the pool", pointer));
    size = it->second.size;
    ticket = pool->release(offset, on);
  }
  // The free completes in the stream's order (enqueued without the lock, as in allocate_from_pool).
  const std::uint64_t sequence = on->enqueue([pool, size, ticket] {
    std::lock_guard<std::mutex> guard(pool->lock);
    pool->completed(size, ticket);
  });
  std::lock_guard<std::mutex> guard(pool->lock);
  pool->enqueued(ticket, sequence);
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
  std::shared_ptr<worker_stream> allocated_on;  // let go after the lock, as in allocate_from_pool
  std::lock_guard<std::mutex> guard(pool->lock);
  const auto offset = static_cast<std::size_t>(static_cast<const unsigned char*>(pointer) - pool->base);
  auto it = pool->blocks.find(offset);
  if (it == pool->blocks.end() || it->second.what != pool_block::state::live)
    return make_error(errc::invalid_argument, fmt::format("{} is not a live allocation of the pool", pointer));
  const pool_block& b = it->second;
  allocated_on = b.allocated_on.lock();
  // As CUDA refuses an allocation the host has not seen done. A stream that is gone drained its queue.
  const bool seen =
      b.allocated_after != sequence_unknown && (!allocated_on || allocated_on->observed() >= b.allocated_after);
  if (!seen)
    return make_error(errc::invalid_argument,
                      fmt::format("{} is not known complete: synchronize its stream before exporting it", pointer));
  pointer_record r{pointer_magic, 0, b.generation, offset, b.requested, pool->capacity};
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
  if (r.offset % pool_alignment != 0 || r.offset >= pool->capacity || r.size == 0 ||
      r.size > pool->capacity - r.offset || r.generation % 2 == 0)
    return make_error(errc::invalid_handle,
                      fmt::format("the record's block [{:#x}, +{:#x}) cannot be in this pool", r.offset, r.size));
  if (size != r.size)
    return make_error(errc::invalid_handle, fmt::format("the export says {:#x} bytes, its record {:#x}", size, r.size));
  // The exporter's table: read generation, size, generation, so a block reused meanwhile is not taken for this one.
  auto& u = pool->unit(r.offset);
  const std::uint64_t before = u.generation.load(), held = u.size.load(), after = u.generation.load();
  if (before != r.generation || after != before)
    return make_error(errc::invalid_handle, "the exported allocation has been freed since it was exported (stale)");
  if (held != r.size)
    return make_error(
        errc::invalid_handle,
        fmt::format("the record says the block holds {:#x} bytes, the exporter's table {:#x}", r.size, held),
        "send the pool_pointer_export as export_pointer made it");
  return static_cast<void*>(pool->base + r.offset);
}

}  // namespace pvmm::detail::backend
