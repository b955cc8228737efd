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
  range_registry::range entry = entry_of(p, size, by);
  bool counted = false;  // after the orphaning count: counted here (a raw free's failure puts its pointer back)
  if (!(by == holder::raw ? range_registry::add(entry, orphan_set, counted) : range_registry::add(entry)))
    return recorded::no_memory;
  if (counted) ++orphan_raw_left;
  return recorded::added;
}

std::optional<std::size_t> pool_state::live_size(const void* p) const {
  if (auto found = range_registry::find_start(p, memory_kind::pool, this)) return found->size;
  return std::nullopt;
}

// owner_gone counts the raw allocations still live with every registry shard locked (count_and_mark), and sets
// orphan_set before the locks are given back; a raw free reads orphan_set under the lock of the shard it removes
// its pointer from (take_live), so it either removed it before the count (not counted, and it saw no flag) or after
// (counted, and it saw the flag and counts itself off). A raw pointer put back after a failed free does the same
// (add_live). No allocation is made after the owner is gone (allocating is one of its calls).
void pool_state::owner_gone(std::shared_ptr<pool_state> state) noexcept {
  if (!state) return;
  pool_state& self = *state;
  if (!self.raw_ever.load(std::memory_order_relaxed)) return;  // never a raw allocation: nothing to outlive
  std::lock_guard<spin_lock> guard(self.lock);
  if (self.orphaned) return;
  const std::size_t live =
      range_registry::count_and_mark(memory_kind::pool, &self, static_cast<std::uint8_t>(holder::raw), self.orphan_set);
  if (live == 0) return;        // the state goes with `state`, after the guard
  self.orphan_raw_left = live;  // the frees counted off from here on wait for the lock to do it
  self.orphaned = std::move(state);
}

std::shared_ptr<pool_state> pool_state::take_orphan_if_done() noexcept {
  std::lock_guard<spin_lock> guard(lock);
  if (orphan_raw_left != 0) return nullptr;
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
