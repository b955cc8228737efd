// A pool's live allocations and lifetime (pool_state.hpp), and the process's pool directory.
#include "pool/pool_state.hpp"

#include <algorithm>
#include <vector>

#include "backend/pool.hpp"
#include "backend/stream.hpp"
#include "core/ownership.hpp"
#include "core/range_registry.hpp"

namespace pvmm::detail {
namespace {

// Every live pool state, so a raw pointer's pool can be found after its owner is gone. Process-wide because raw
// pointers are; a handful of pools per process, so a vector under a mutex (touched at pool creation and
// destruction, and by pvmm::free_async only).
std::mutex directory_lock;
std::vector<pool_state*>& directory() {
  static auto* states = new std::vector<pool_state*>();  // never destroyed: static owners may outlive it
  return *states;
}

}  // namespace

pool_state::pool_state(pool_handle h, int d, origin o, pool_id i)
    : handle(h), device(d), owned(o != origin::default_pool), imported(o == origin::imported), id(i) {
  std::lock_guard<std::mutex> guard(directory_lock);
  directory().push_back(this);  // bad_alloc here propagates before the state exists, as make_shared's would
  ++live_pools;
}

pool_state::~pool_state() {
  {
    std::lock_guard<std::mutex> guard(directory_lock);
    auto& all = directory();
    all.erase(std::find(all.begin(), all.end(), this));
  }
  if (own_stream.value) {  // the destructors' frees complete before the pool goes
    (void)backend::synchronize_stream(own_stream, stream_device());
    (void)backend::destroy_stream(own_stream);
  }
  if (owned) (void)backend::destroy_pool(handle);  // teardown: never fault-injected
  --live_pools;
}

int pool_state::stream_device() const noexcept { return device >= 0 ? device : 0; }

stream_ref pool_state::teardown_stream() noexcept {
  std::lock_guard<std::mutex> guard(stream_lock);
  if (!own_stream.value) {
    auto created = backend::create_stream(stream_device());
    if (!created) return {};
    own_stream = *created;
  }
  return stream_ref(own_stream, stream_device());
}

pool_state::recorded pool_state::add_live(void* p, std::size_t size, holder by) {
  std::lock_guard<spin_lock> guard(lock);  // two imports of one pointer: one records it, the other finds it
  if (range_registry::find_start(p, memory_kind::pool, this)) return recorded::present;
  return add_new(p, size, by);
}

pool_state::recorded pool_state::add_new(void* p, std::size_t size, holder by) {
  range_registry::range entry;
  entry.base = p, entry.size = size, entry.kind = memory_kind::pool, entry.device = device, entry.owner = this;
  entry.holder = static_cast<std::uint8_t>(by);
  // Counted before it is entered: a raw free can find it only after, so the count never goes below zero.
  if (by == holder::raw) raw_live.fetch_add(1);
  if (recent_size.load(std::memory_order_relaxed) != size) recent_size.store(size, std::memory_order_relaxed);
  if (range_registry::add(entry)) return recorded::added;
  if (by == holder::raw) raw_live.fetch_sub(1);  // not entered: no free can have counted it
  return recorded::no_memory;
}

std::optional<std::size_t> pool_state::take_live(const void* p, holder by, bool& other, std::size_t size) {
  range_registry::range taken;
  if (size == 0) size = recent_size.load(std::memory_order_relaxed);  // a hint of the level to probe first
  const auto done = range_registry::remove(p, memory_kind::pool, this, static_cast<std::uint8_t>(by), &taken, size);
  other = done == range_registry::removal::held_otherwise;
  if (done != range_registry::removal::removed) return std::nullopt;
  if (by == holder::raw) raw_live.fetch_sub(1);  // sequentially consistent: pairs with owner_gone
  return taken.size;
}

std::optional<std::size_t> pool_state::live_size(const void* p) const {
  if (auto found = range_registry::find_start(p, memory_kind::pool, this)) return found->size;
  return std::nullopt;
}

// owner_gone and a raw free's take_orphan_if_done pair up without a shared lock on the free's side: owner_gone
// sets orphan_set, then reads raw_live; a free lowers raw_live, then reads orphan_set (both sequentially
// consistent). At least one of them sees the other's write: if owner_gone read raw_live before the last free lowered
// it, that free sees orphan_set and takes the self-reference under the lock; if it read zero, it takes it back itself.
void pool_state::owner_gone(std::shared_ptr<pool_state> state) noexcept {
  if (!state) return;
  pool_state& self = *state;
  std::shared_ptr<pool_state> dropped;  // destroyed outside the lock
  std::lock_guard<spin_lock> guard(self.lock);
  if (self.raw_live.load() == 0 || self.orphaned) return;
  self.orphaned = std::move(state);
  self.orphan_set.store(true);
  if (self.raw_live.load() == 0) dropped = std::move(self.orphaned);  // the last raw free came meanwhile
}

std::shared_ptr<pool_state> pool_state::take_orphan_if_done() noexcept {
  if (!orphan_set.load()) return nullptr;  // the owner lives (or the last free took it): no lock
  std::lock_guard<spin_lock> guard(lock);
  if (raw_live.load() != 0) return nullptr;
  return std::move(orphaned);
}

error empty_pool(const operation& op) {
  return op.fail(errc::already_released, "this memory_pool is empty (released or moved from)");
}

std::shared_ptr<pool_state> pool_holding_raw(const void* p) {
  // Under directory_lock: a state leaves the directory in its destructor, so one found here is not freed meanwhile.
  std::lock_guard<std::mutex> guard(directory_lock);
  auto found = range_registry::find_start(p, memory_kind::pool);
  if (!found || found->holder != static_cast<std::uint8_t>(pool_state::holder::raw)) return nullptr;
  auto& all = directory();
  if (std::find(all.begin(), all.end(), found->owner) == all.end()) return nullptr;
  // Null while its destructor waits for the lock.
  return static_cast<pool_state*>(const_cast<void*>(found->owner))->weak_from_this().lock();
}

}  // namespace pvmm::detail
