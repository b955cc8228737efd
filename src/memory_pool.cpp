// Stream-ordered memory pools: validation, ownership (a pool lives while its owner or an allocation does), the
// raw allocations each pool has handed out (so a foreign pointer or a second free is refused before the driver),
// and the one definition of high marks.
#include <pvmm/memory_pool.hpp>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "backend/pool.hpp"
#include "describe.hpp"
#include "device.hpp"
#include "operation.hpp"
#include "ownership.hpp"
#include "stream_checks.hpp"

namespace pvmm {
namespace detail {

struct pool_state {
  pool_state(pool_handle h, int d, bool o) : handle(h), device(d), owned(o) { ++live_pools; }
  pool_state(const pool_state&) = delete;
  pool_state& operator=(const pool_state&) = delete;
  ~pool_state() {
    if (owned) (void)backend::destroy_pool(handle);  // teardown: never fault-injected
    --live_pools;
  }
  const pool_handle handle;
  const int device;
  const bool owned;
  std::mutex lock;
  std::unordered_map<void*, std::size_t> live;  // allocations handed out and not yet freed
};

namespace {

error empty_pool(const operation& op) {
  return op.fail(errc::already_released, "this memory_pool is empty (released or moved from)");
}

result<void*> allocate(pool_state& pool, std::size_t size, stream_ref on, const operation& op) {
  if (size == 0) return op.fail(errc::invalid_size, "size is zero");
  PVMM_TRY(check_stream(on, op));
  PVMM_TRY_ASSIGN(p, op.step("allocate_from_pool", [&] {
    return backend::allocate_from_pool(pool.handle, size, on.native_handle(), on.device());
  }));
  std::lock_guard<std::mutex> guard(pool.lock);
  pool.live.emplace(p, size);
  ++live_pool_allocations;
  return p;
}

status free(pool_state& pool, void* pointer, stream_ref on, const operation& op) {
  PVMM_TRY(check_stream(on, op));
  {
    std::lock_guard<std::mutex> guard(pool.lock);
    auto it = pool.live.find(pointer);
    if (it == pool.live.end())
      return op.fail(
          errc::invalid_argument,
          fmt::format("{} is not a live allocation of this pool (freed already, or another pool's)", pointer));
    pool.live.erase(it);  // claimed: a second free of the same pointer is refused from here on
  }
  auto ok = op.step("free_to_pool", [&] { return backend::free_to_pool(pointer, on.native_handle(), on.device()); });
  if (!ok) {
    std::lock_guard<std::mutex> guard(pool.lock);
    pool.live.emplace(pointer, 0);  // still live: the caller may try again
    return ok;
  }
  --live_pool_allocations;
  return {};
}

status set_attributes(pool_handle h, const pool_properties& p, const operation& op) {
  using backend::pool_attribute;
  const std::pair<pool_attribute, std::uint64_t> values[] = {
      {pool_attribute::release_threshold, p.release_threshold},
      {pool_attribute::reuse_follow_event_dependencies, p.reuse_follow_event_dependencies},
      {pool_attribute::reuse_opportunistic, p.reuse_opportunistic},
      {pool_attribute::reuse_internal_dependencies, p.reuse_internal_dependencies},
  };
  for (auto [which, value] : values)
    PVMM_TRY(op.step("set_pool_attribute", [&, w = which, v = value] { return backend::set_pool_attribute(h, w, v); }));
  return {};
}

}  // namespace
}  // namespace detail

// ---- pool_allocation ----

pool_allocation::pool_allocation(pool_allocation&& other) noexcept
    : pool_(std::move(other.pool_)), data_(other.data_), size_(other.size_), stream_(other.stream_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

pool_allocation& pool_allocation::operator=(pool_allocation&& other) noexcept {
  if (this != &other) {
    if (valid()) (void)free_async(stream_);
    pool_ = std::move(other.pool_);
    data_ = other.data_;
    size_ = other.size_;
    stream_ = other.stream_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

pool_allocation::~pool_allocation() {
  if (valid()) (void)free_async(stream_);
}

status pool_allocation::free_async(stream_ref on) noexcept {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", data_, on.native_handle().value); };
  const detail::operation op{"pvmm::pool_allocation::free_async", args};
  if (!valid()) return op.fail(errc::already_released, "this pool_allocation is empty (freed or moved from)");
  PVMM_TRY(detail::free(*pool_, data_, on, op));
  data_ = nullptr;
  size_ = 0;
  pool_.reset();  // the pool may go now; a pending free keeps the driver's pool alive on every backend
  return {};
}

// ---- memory_pool ----

memory_pool::memory_pool() noexcept = default;
memory_pool::memory_pool(memory_pool&&) noexcept = default;
memory_pool& memory_pool::operator=(memory_pool&&) noexcept = default;
memory_pool::~memory_pool() = default;
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
  PVMM_TRY_ASSIGN(h, op.step("create_pool", [&] { return detail::backend::create_pool(p); }));
  auto state = std::make_shared<detail::pool_state>(h, device, true);  // destroys the pool if a step fails
  PVMM_TRY(detail::set_attributes(h, p, op));
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
  return memory_pool(std::make_shared<detail::pool_state>(h, device, false));
}

result<pool_allocation> memory_pool::allocate(std::size_t size, stream_ref on) const {
  auto args = [&] { return fmt::format("size={:#x}, stream={:#x}", size, on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::allocate", args};
  if (!state_) return detail::empty_pool(op);
  PVMM_TRY_ASSIGN(p, detail::allocate(*state_, size, on, op));
  return pool_allocation(state_, p, size, on);
}

result<void*> memory_pool::allocate_async(std::size_t size, stream_ref on) const {
  auto args = [&] { return fmt::format("size={:#x}, stream={:#x}", size, on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::allocate_async", args};
  if (!state_) return detail::empty_pool(op);
  return detail::allocate(*state_, size, on, op);
}

status memory_pool::free_async(void* pointer, stream_ref on) const {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", pointer, on.native_handle().value); };
  const detail::operation op{"pvmm::memory_pool::free_async", args};
  if (!state_) return detail::empty_pool(op);
  return detail::free(*state_, pointer, on, op);
}

result<pool_usage> memory_pool::usage() const {
  const detail::operation op{"pvmm::memory_pool::usage"};
  if (!state_) return detail::empty_pool(op);
  using detail::backend::pool_attribute;
  auto get = [&](pool_attribute which) {
    return op.step("get_pool_attribute", [&] { return detail::backend::get_pool_attribute(state_->handle, which); });
  };
  pool_usage u;
  PVMM_TRY_ASSIGN(rc, get(pool_attribute::reserved_current));
  PVMM_TRY_ASSIGN(rh, get(pool_attribute::reserved_high));
  PVMM_TRY_ASSIGN(uc, get(pool_attribute::used_current));
  PVMM_TRY_ASSIGN(uh, get(pool_attribute::used_high));
  // A reset sets a high mark to the current value on CUDA and to 0 on HIP: pvmm reports CUDA's meaning everywhere.
  u.reserved_current = rc;
  u.reserved_high = std::max(rh, rc);
  u.used_current = uc;
  u.used_high = std::max(uh, uc);
  return u;
}

status memory_pool::reset_high_marks() const {
  const detail::operation op{"pvmm::memory_pool::reset_high_marks"};
  if (!state_) return detail::empty_pool(op);
  using detail::backend::pool_attribute;
  for (auto which : {pool_attribute::reserved_high, pool_attribute::used_high})
    PVMM_TRY(
        op.step("set_pool_attribute", [&] { return detail::backend::set_pool_attribute(state_->handle, which, 0); }));
  return {};
}

status memory_pool::set_release_threshold(std::uint64_t bytes) const {
  auto args = [&] { return fmt::format("bytes={:#x}", bytes); };
  const detail::operation op{"pvmm::memory_pool::set_release_threshold", args};
  if (!state_) return detail::empty_pool(op);
  return op.step("set_pool_attribute", [&] {
    return detail::backend::set_pool_attribute(state_->handle, detail::backend::pool_attribute::release_threshold,
                                               bytes);
  });
}

status memory_pool::trim_to(std::size_t keep) const {
  auto args = [&] { return fmt::format("keep={:#x}", keep); };
  const detail::operation op{"pvmm::memory_pool::trim_to", args};
  if (!state_) return detail::empty_pool(op);
  return op.step("trim_pool", [&] { return detail::backend::trim_pool(state_->handle, keep); });
}

status memory_pool::set_access(access_list grants) const {
  auto args = [&] { return fmt::format("grants={}", grants.size()); };
  const detail::operation op{"pvmm::memory_pool::set_access", args};
  if (!state_) return detail::empty_pool(op);
  if (grants.empty()) return op.fail(errc::invalid_argument, "no access grants given");
  std::vector<access_descriptor> others;  // the pool's own device is not the driver's to change
  for (const auto& g : grants) {
    if (g.location.type != location::kind::device)
      return op.fail(errc::invalid_location,
                     fmt::format("pools grant devices only, not {}", detail::describe(g.location)));
    PVMM_TRY(detail::check_location(g.location, op));
    if (g.location.id == state_->device) {
      if (g.access != access::read_write)
        return op.fail(errc::invalid_argument,
                       fmt::format("the pool's own device {} always has read_write access", state_->device));
      continue;
    }
    others.push_back(g);
  }
  if (others.empty()) return {};
  return op.step("set_pool_access",
                 [&] { return detail::backend::set_pool_access(state_->handle, others.data(), others.size()); });
}

result<access> memory_pool::query_access(location where) const {
  auto args = [&] { return fmt::format("location={}", detail::describe(where)); };
  const detail::operation op{"pvmm::memory_pool::query_access", args};
  if (!state_) return detail::empty_pool(op);
  if (where.type != location::kind::device)
    return op.fail(errc::invalid_location, fmt::format("pools grant devices only, not {}", detail::describe(where)));
  PVMM_TRY(detail::check_location(where, op));
  if (where.id == state_->device) return access::read_write;
  return op.step("get_pool_access", [&] { return detail::backend::get_pool_access(state_->handle, where); });
}

status memory_pool::release() noexcept {
  const detail::operation op{"pvmm::memory_pool::release"};
  if (!state_) return detail::empty_pool(op);
  state_.reset();
  return {};
}

int memory_pool::device() const noexcept { return state_ ? state_->device : -1; }
bool memory_pool::owned() const noexcept { return state_ && state_->owned; }
pool_handle memory_pool::native_handle() const noexcept { return state_ ? state_->handle : pool_handle{}; }

}  // namespace pvmm
