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
  std::lock_guard<spin_lock> guard(lock);  // one step with raw_live: a raw free never sees it behind the registry
  if (range_registry::find_start(p, memory_kind::pool, this)) return recorded::present;
  range_registry::range entry;
  entry.base = p, entry.size = size, entry.kind = memory_kind::pool, entry.device = device, entry.owner = this;
  entry.holder = static_cast<std::uint8_t>(by);
  if (!range_registry::add(entry)) return recorded::no_memory;
  if (by == holder::raw) ++raw_live;
  return recorded::added;
}

std::optional<std::size_t> pool_state::take_live(const void* p, holder by, bool& other) {
  std::lock_guard<spin_lock> guard(lock);
  range_registry::range taken;
  const auto done = range_registry::remove(p, memory_kind::pool, this, static_cast<std::uint8_t>(by), &taken);
  other = done == range_registry::removal::held_otherwise;
  if (done != range_registry::removal::removed) return std::nullopt;
  if (by == holder::raw) --raw_live;
  return taken.size;
}

std::optional<std::size_t> pool_state::live_size(const void* p) const {
  if (auto found = range_registry::find_start(p, memory_kind::pool, this)) return found->size;
  return std::nullopt;
}

void pool_state::owner_gone(std::shared_ptr<pool_state> state) noexcept {
  if (!state) return;
  std::lock_guard<spin_lock> guard(state->lock);
  if (state->raw_live != 0 && !state->orphaned) state->orphaned = std::move(state);
}

std::shared_ptr<pool_state> pool_state::take_orphan_if_done() noexcept {
  std::lock_guard<spin_lock> guard(lock);
  if (raw_live != 0) return nullptr;
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
