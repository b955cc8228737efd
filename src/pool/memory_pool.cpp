// Stream-ordered memory pools: validation, ownership (a pool lives while its owner or an allocation does), the
// raw allocations each pool has handed out (so a foreign pointer or a second free is refused before the driver),
// the one definition of high marks, and the checks of sharing (exportable, imported, the pool's identity).
#include <pvmm/memory_pool.hpp>

#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "backend/pool.hpp"
#include "backend/stream.hpp"
#include "core/describe.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "core/ownership.hpp"
#include "observe/observe.hpp"
#include "pool/pool_state.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {
namespace detail {

namespace {

bool exportable(const pool_state& pool) { return pool.id != pool_id{} && !pool.imported; }

result<pool_id> random_id(const operation& op) {
  pool_id id;
  std::size_t got = 0;
  while (got < id.bytes.size()) {
    const ssize_t n = ::getrandom(id.bytes.data() + got, id.bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return op.fail(errc::system_error, fmt::format("getrandom failed: {}", std::strerror(errno)));
    got += static_cast<std::size_t>(n);
  }
  if (id == pool_id{}) id.bytes[0] = 1;  // zero means "not exportable"
  return id;
}

// allocate, free and free_raw inline into their public callers: each layer cost a frame and a status passed up
// (about 30 instructions a layer on the pool pair; pvmm-own-cost).
[[gnu::always_inline]] inline result<void*> allocate(pool_state& pool, std::size_t size, stream_ref on,
                                                     pool_state::holder by, const operation& op) {
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  if (pool.imported)
    return op.fail(errc::invalid_argument, "an imported pool cannot allocate (its memory is the exporter's)",
                   "allocate in the exporting process and send a pool_pointer_export");
  PVMM_TRY(check_stream(on, op));
  PVMM_TRY_ASSIGN(p, op.step("allocate_from_pool", [&] {
    return backend::allocate_from_pool(pool.handle, size, on.native_handle(), on.device());
  }));
  observe::record(observe::action::alloc, p, size, pool.device, on.native_handle().value);  // here: fewer live values
  if (pool.add_new(p, size, by) == pool_state::recorded::no_memory) {
    (void)backend::free_to_pool(p, on.native_handle(), on.device());  // rollback: never fault-injected
    observe::record(observe::action::free_completed, p, size, pool.device, on.native_handle().value);
    return op.fail(errc::out_of_memory, "no host memory to record the allocation; it was freed");
  }
  return p;
}

/// Frees `pointer`, held `by` the caller's kind of owner (of `known_size` bytes where the caller knows it, else 0).
/// Teardown (an owner's destructor) bypasses fault injection: injecting there would only simulate the leak the
/// destructor exists to prevent.
/// `orphan_counted`: set when a raw pointer of an orphaned pool was counted off (pool_state::take_live).
[[gnu::always_inline]] inline status free(pool_state& pool, void* pointer, stream_ref on, pool_state::holder by,
                                          bool teardown, const operation& op, bool& orphan_counted,
                                          std::size_t known_size = 0) {
  PVMM_TRY(check_stream(on, op));
  // Claimed: a second free of the same pointer is refused from here on.
  bool held_otherwise = false;
  const std::optional<std::size_t> size = pool.take_live(pointer, by, held_otherwise, orphan_counted, known_size);
  if (held_otherwise)
    return op.fail(errc::invalid_argument, fmt::format("{} is owned by a pool_allocation", pointer),
                   "free it through its owner (pool_allocation::free_async), which otherwise frees it again");
  if (!size)
    return op.fail(errc::invalid_argument,
                   fmt::format("{} is not a live allocation of this pool (freed already, or another pool's)", pointer));
  // Recorded as the free goes to the driver (a failed one is rare, and the pointer stays live then).
  observe::record(observe::action::free_completed, pointer, *size, pool.device, on.native_handle().value);
  auto call = [&] { return backend::free_to_pool(pointer, on.native_handle(), on.device()); };
  auto ok = teardown ? call() : op.step("free_to_pool", call);
  if (!ok) {
    // Still live: the caller may try again (an owner's teardown cannot, and its record would outlive the pool).
    // Counted live either way (query_live_objects counts records, and these).
    if (teardown || pool.add_live(pointer, *size, by) == pool_state::recorded::no_memory) ++unfreed_pool_allocations;
    return teardown ? status(op.wrap(std::move(ok).error())) : ok;
  }
  return {};
}

/// Frees a raw pointer of `pool`; an orphaned pool (owner gone) goes with its last raw allocation.
[[gnu::always_inline]] inline status free_raw(const std::shared_ptr<pool_state>& pool, void* pointer, stream_ref on,
                                              const operation& op) {
  bool orphan_counted = false;
  PVMM_TRY(free(*pool, pointer, on, pool_state::holder::raw, false, op, orphan_counted));
  if (orphan_counted) (void)pool->take_orphan_if_done();  // the reference goes here, outside the pool's lock
  return {};
}

result<pool_pointer_export> export_pointer(const pool_state& pool, const void* pointer, const operation& op) {
  if (pool.imported) return op.fail(errc::invalid_argument, "an imported pool's allocations cannot be exported again");
  if (!exportable(pool))
    return op.fail(errc::handle_type_not_requested, "this pool was not created exportable",
                   "create the pool with exportable = handle_types::posix_fd");
  if (!pool.exported)
    return op.fail(errc::invalid_argument, "the pool itself has not been exported yet",
                   "call export_posix_fd before exporting its allocations (CUDA refuses them until then: measured "
                   "on driver 580)");
  pool_pointer_export out;
  const std::optional<std::size_t> size = pool.live_size(pointer);
  if (!size) return op.fail(errc::invalid_argument, fmt::format("{} is not a live allocation of this pool", pointer));
  out.size = *size;
  PVMM_TRY_ASSIGN(record,
                  op.step("export_pool_pointer", [&] { return backend::export_pool_pointer(pool.handle, pointer); }));
  out.data = record;
  out.pool = pool.id;
  return out;
}

}  // namespace
}  // namespace detail

// ---- pool_allocation ----

void pool_allocation::teardown(holder& region) noexcept {
  // Never the stream it was allocated on: that one is borrowed and may be gone (Python picks destruction order).
  // The pool's own stream lives as long as the pool state this allocation keeps alive.
  // Synchronized after: the memory is back in the pool for every stream (rule 1) once the destructor returns.
  const std::shared_ptr<detail::pool_state> pool = region.pool_;
  const stream_ref own = pool->teardown_stream();
  if (free_in_order(region, own, true, "pvmm::pool_allocation::~pool_allocation"))
    (void)detail::backend::synchronize_stream(own.native_handle(), own.device());
}

status pool_allocation::free_async(stream_ref on) noexcept {
  return free_in_order(*this, on, false, "pvmm::pool_allocation::free_async");
}

status pool_allocation::release() noexcept {
  return free_in_order(*this, stream_, false, "pvmm::pool_allocation::release");
}

status pool_allocation::free_in_order(holder& region, stream_ref on, bool teardown, const char* name) noexcept {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", region.data_, on.native_handle().value); };
  const detail::operation op{name, args};
  if (!region.holds()) return op.fail(errc::already_released, "this pool_allocation is empty (freed or moved from)");
  bool orphan_counted = false;  // never: the owner's allocations are not raw
  PVMM_TRY(detail::free(*region.pool_, region.data_, on, detail::pool_state::holder::owner, teardown, op,
                        orphan_counted, region.size_));
  region.clear();  // the pool may go now; a pending free keeps the driver's pool alive on every backend
  return {};
}

result<pool_pointer_export> pool_allocation::export_pointer() const {
  auto args = [&] { return fmt::format("pointer={}", data_); };
  const detail::operation op{"pvmm::pool_allocation::export_pointer", args};
  if (!valid()) return op.fail(errc::already_released, "this pool_allocation is empty (freed or moved from)");
  return detail::export_pointer(*pool_, data_, op);
}

// ---- memory_pool ----

memory_pool& memory_pool::operator=(memory_pool&& other) noexcept {
  if (this != &other) {
    detail::pool_state::owner_gone(std::move(state_));
    state_ = std::move(other.state_);
  }
  return *this;
}
memory_pool::~memory_pool() { detail::pool_state::owner_gone(std::move(state_)); }
memory_pool::memory_pool(std::shared_ptr<detail::pool_state> state) noexcept : state_(std::move(state)) {}

result<memory_pool> memory_pool::create(const pool_properties& p) {
  auto args = [&] {
    return fmt::format("location={}, max_size={:#x}, release_threshold={:#x}", detail::describe(p.location), p.max_size,
                       p.release_threshold);
  };
  const detail::operation op{"pvmm::memory_pool::create", args};
  PVMM_TRY(detail::check_location(p.location, op));
  const int device = detail::device_of(p.location);
  PVMM_TRY_ASSIGN(caps, detail::device_capabilities(device));
  const bool host = p.location.type != location::kind::device;
  if (host ? !caps.pools.host_location : !caps.pools.supported)
    return op.fail(errc::not_supported,
                   fmt::format("device {} has no memory pools{}", device, host ? " of host memory" : ""),
                   host ? "capabilities.pools.host_location" : "capabilities.pools.supported");
  if (p.max_size != 0 && !caps.pools.max_size)
    return op.fail(errc::not_supported, fmt::format("device {} does not enforce a pool's maximum size", device),
                   "create the pool with max_size 0 (capabilities.pools.max_size)");
  pool_id id;
  if (p.exportable != handle_types::none) {
    if (p.exportable != handle_types::posix_fd)
      return op.fail(errc::not_supported, "pools are exported as POSIX fd only",
                     "create the pool with exportable = handle_types::posix_fd");
    if (host)
      return op.fail(errc::not_supported, "pools of host memory cannot be exported (CUDA's are not IPC-capable)",
                     "use a device-located pool, or share host memory as a physical_allocation");
    if (!caps.pools.ipc_posix_fd)
      return op.fail(errc::not_supported, fmt::format("device {} cannot export pools as POSIX fd", device),
                     "capabilities.pools.ipc_posix_fd");
    PVMM_TRY_ASSIGN(fresh, detail::random_id(op));
    id = fresh;
  }
  PVMM_TRY_ASSIGN(h, op.step("create_pool", [&] { return detail::backend::create_pool(p); }));
  // Destroys the pool if a later step fails.
  auto state = std::make_shared<detail::pool_state>(h, device, detail::pool_state::origin::created, id);
  state->host_located = host;
  PVMM_TRY(detail::set_attributes(h, p.release_threshold, p.reuse_follow_event_dependencies, p.reuse_opportunistic,
                                  p.reuse_internal_dependencies, op));
  return memory_pool(std::move(state));
}

result<memory_pool> memory_pool::default_pool(int device) {
  auto args = [&] { return fmt::format("device={}", device); };
  const detail::operation op{"pvmm::memory_pool::default_pool", args};
  PVMM_TRY(detail::check_location(location::device(device), op));
  PVMM_TRY_ASSIGN(caps, detail::device_capabilities(device));
  if (!caps.pools.supported)
    return op.fail(errc::not_supported, fmt::format("device {} has no memory pools", device),
                   "capabilities.pools.supported");
  PVMM_TRY_ASSIGN(h, op.step("default_pool", [&] { return detail::backend::default_pool(device); }));
  return memory_pool(std::make_shared<detail::pool_state>(h, device, detail::pool_state::origin::default_pool));
}

result<memory_pool> memory_pool::import_posix_fd(const pool_export& from, int device) {
  auto args = [&] { return fmt::format("fd={}, device={}", from.fd.get(), device); };
  const detail::operation op{"pvmm::memory_pool::import_posix_fd", args};
  PVMM_TRY(detail::check_location(location::device(device), op));
  if (!from.fd.valid()) return op.fail(errc::invalid_handle, "the pool_export holds no fd");
  if (from.id == pool_id{})
    return op.fail(errc::invalid_handle, "the pool_export has no pool identity (not made by export_posix_fd)");
  PVMM_TRY_ASSIGN(caps, detail::device_capabilities(device));
  if (!caps.pools.ipc_posix_fd)
    return op.fail(errc::not_supported, fmt::format("device {} cannot import pools as POSIX fd", device),
                   "capabilities.pools.ipc_posix_fd");
  PVMM_TRY_ASSIGN(h, op.fd_step("import_pool_posix_fd",
                                [&] { return detail::backend::import_pool_posix_fd(from.fd.get(), device); }));
  return memory_pool(std::make_shared<detail::pool_state>(h, device, detail::pool_state::origin::imported, from.id));
}

result<pool_export> memory_pool::export_posix_fd() const {
  const detail::operation op{"pvmm::memory_pool::export_posix_fd"};
  if (!state_) return detail::empty_pool(op);
  if (state_->imported) return op.fail(errc::invalid_argument, "an imported pool cannot be exported again");
  if (!detail::exportable(*state_))
    return op.fail(errc::handle_type_not_requested, "this pool was not created exportable",
                   "create the pool with exportable = handle_types::posix_fd");
  PVMM_TRY_ASSIGN(
      fd, op.fd_step("export_pool_posix_fd", [&] { return detail::backend::export_pool_posix_fd(state_->handle); }));
  state_->exported = true;
  return pool_export{std::move(fd), state_->id};
}

result<pool_pointer_export> memory_pool::export_pointer(const void* pointer) const {
  auto args = [&] { return fmt::format("pointer={}", pointer); };
  const detail::operation op{"pvmm::memory_pool::export_pointer", args};
  if (!state_) return detail::empty_pool(op);
  return detail::export_pointer(*state_, pointer, op);
}

result<pool_allocation> memory_pool::import_pointer(const pool_pointer_export& from, stream_ref free_on) const {
  auto args = [&] { return fmt::format("size={:#x}, free_on={:#x}", from.size, free_on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::import_pointer", args};
  if (!state_) return detail::empty_pool(op);
  if (!state_->imported)
    return op.fail(errc::invalid_argument, "import_pointer needs a pool made by import_posix_fd",
                   "import the exporter's pool first, then its pointers into it");
  if (from.pool != state_->id)
    return op.fail(errc::invalid_handle,
                   "the pointer was exported from another pool than the one this was imported from");
  if (from.size == 0) return op.fail(errc::invalid_handle, "the pool_pointer_export's size is zero");
  PVMM_TRY(detail::check_stream(free_on, op));
  PVMM_TRY_ASSIGN(p, op.step("import_pool_pointer", [&] {
    return detail::backend::import_pool_pointer(state_->handle, from.data, static_cast<std::size_t>(from.size));
  }));
  if (auto added = state_->add_live(p, static_cast<std::size_t>(from.size), detail::pool_state::holder::owner);
      added != detail::pool_state::recorded::added) {
    // Imported twice: the drivers hand back the first import's pointer without counting imports (CUDA and HIP on
    // NVIDIA, measured in tools/probes), so there is nothing to undo, and a free here would end the first import.
    if (added == detail::pool_state::recorded::present)
      return op.fail(errc::busy, fmt::format("{} is imported already in this process", p),
                     "keep using the first import's owner");
    (void)detail::backend::free_to_pool(p, free_on.native_handle(), free_on.device());  // rollback: not injected
    return op.fail(errc::out_of_memory, "no host memory to record the import; it was undone");
  }
  return pool_allocation(state_, p, static_cast<std::size_t>(from.size), free_on);
}

result<pool_allocation> memory_pool::allocate(std::size_t size, stream_ref on) const {
  auto args = [&] { return fmt::format("size={:#x}, stream={:#x}", size, on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::allocate", args};
  if (!state_) return detail::empty_pool(op);
  PVMM_TRY_ASSIGN(p, detail::allocate(*state_, size, on, detail::pool_state::holder::owner, op));
  return pool_allocation(state_, p, size, on);
}

result<void*> memory_pool::allocate_async(std::size_t size, stream_ref on) const {
  auto args = [&] { return fmt::format("size={:#x}, stream={:#x}", size, on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::allocate_async", args};
  if (!state_) return detail::empty_pool(op);
  return detail::allocate(*state_, size, on, detail::pool_state::holder::raw, op);
}

status memory_pool::free_async(void* pointer, stream_ref on) const {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", pointer, on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::free_async", args};
  if (!state_) return detail::empty_pool(op);
  return detail::free_raw(state_, pointer, on, op);
}

status memory_pool::release() noexcept {
  const detail::operation op{"pvmm::memory_pool::release"};
  if (!state_) return detail::empty_pool(op);
  detail::pool_state::owner_gone(std::move(state_));
  return {};
}

status free_async(void* pointer, stream_ref on) {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", pointer, on.native_handle().value); };
  const detail::operation op{"pvmm::free_async", args};
  auto pool = detail::pool_holding_raw(pointer);
  if (!pool)
    return op.fail(errc::invalid_argument,
                   fmt::format("{} is not a live raw allocation of any pool (freed already, or not from "
                               "memory_pool::allocate_async)",
                               pointer),
                   "a pool_allocation is freed through its owner");
  return detail::free_raw(pool, pointer, on, op);
}

int memory_pool::device() const noexcept { return state_ ? state_->device : -1; }
bool memory_pool::owned() const noexcept { return state_ && state_->owned; }
bool memory_pool::imported() const noexcept { return state_ && state_->imported; }
pool_id memory_pool::id() const noexcept { return state_ ? state_->id : pool_id{}; }
pool_handle memory_pool::native_handle() const noexcept { return state_ ? state_->handle : pool_handle{}; }

}  // namespace pvmm
