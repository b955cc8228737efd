// pinned_pool: page-locked staging blocks cached per size class, reused once an event recorded at their free has
// completed; new blocks from a host-located driver pool or from pinned allocations (pvmm/pinned_pool.hpp).
#include <pvmm/pinned_pool.hpp>

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <pvmm/device.hpp>
#include <pvmm/memory_pool.hpp>
#include <pvmm/pinned.hpp>

#include "alloc/allocator_shell.hpp"
#include "core/checked_math.hpp"
#include "core/device.hpp"
#include "core/operation.hpp"
#include "stream/stream_checks.hpp"

namespace pvmm {

// Named, not anonymous: the library is a unity build, and these names are common.
namespace detail::staging {
constexpr std::size_t page = 4096;  // pinned memory's granularity on every backend (hip64: 4 KiB)
// As the caching allocator's size classes: at most 1/4 of a request wasted, few classes to keep blocks of.
constexpr unsigned classes_per_doubling = 4;

/// `size` rounded up to a page, then to one of classes_per_doubling steps between two powers of two; nothing when
/// it cannot be represented.
std::optional<std::size_t> class_size(std::size_t size) noexcept {
  auto paged = checked_round_up(size, page);
  if (!paged) return std::nullopt;
  std::size_t e = 0;
  while (e + 1 < 8 * sizeof(std::size_t) && (std::size_t{1} << (e + 1)) < *paged) ++e;  // 2^e < paged <= 2^(e+1)
  const std::size_t step = std::max(page, (std::size_t{1} << e) / classes_per_doubling);
  return checked_round_up(*paged, step);
}

struct block {
  void* ptr = nullptr;
  std::size_t size = 0;       // its class size
  std::size_t requested = 0;  // bytes asked for while allocated
  bool live = false;
  event freed;               // recorded on the stream of its last use at deallocate (cached blocks)
  bool freed_done = false;   // the host has seen `freed` complete
  pinned_allocation memory;  // pinned_source::pinned_allocations: the block's memory
};
}  // namespace detail::staging

struct pinned_pool::state {
  using block = detail::staging::block;

  pinned_pool_options options;
  pinned_source source = pinned_source::pinned_allocations;
  memory_pool pool;  // driver_pool: where blocks come from (declared before `own`, destroyed after it)
  stream own;        // driver_pool: the stream blocks are allocated and given back on
  mutable std::mutex lock;
  std::unordered_map<void*, std::unique_ptr<block>> blocks;  // every block, live or cached, by address
  std::map<std::size_t, std::deque<block*>> cached;          // by class size, oldest free first
  detail::shell::event_cache events;                         // events recorded at frees, reused
  pinned_pool_stats st;

  ~state() { (void)give_back_cached(nullptr); }

  void note() { detail::shell::note_peaks(st); }

  /// Whether the host has seen b's free complete (asks its event; `blocking` synchronizes it).
  bool settled(block& b, bool blocking) {
    if (!b.freed_done) {
      if (blocking) {
        b.freed_done = b.freed.synchronize().has_value();
      } else {
        auto q = b.freed.query();
        b.freed_done = q && *q;
      }
    }
    return b.freed_done;
  }

  /// A cached block of class `size` whose free has completed, taken out of the cache; null when none is.
  block* take_cached(std::size_t size) {
    auto it = cached.find(size);
    if (it == cached.end()) return nullptr;
    auto& list = it->second;
    for (auto b = list.begin(); b != list.end(); ++b) {
      if (!settled(**b, false)) {
        ++st.passed_over;
        continue;
      }
      block* found = *b;
      list.erase(b);
      events.give_back(std::move(found->freed));
      --st.cached_blocks;
      ++st.cache_hits;
      return found;
    }
    return nullptr;
  }

  /// A new block of class `size` (not yet recorded).
  result<std::unique_ptr<block>> make_block(std::size_t size, const detail::operation& op) {
    auto b = std::make_unique<block>();
    b->size = size;
    if (source == pinned_source::driver_pool) {
      auto p = pool.allocate_async(size, own);
      if (!p) return op.wrap(std::move(p).error());
      // A pool allocation is usable once its stream has reached it: the host writes it as soon as allocate returns.
      if (auto ok = own.synchronize(); !ok) {
        (void)pool.free_async(*p, own);
        return op.wrap(std::move(ok).error());
      }
      b->ptr = *p;
    } else {
      pinned_options o;
      auto caps = detail::device_capabilities(options.device);
      if (!caps) return op.wrap(std::move(caps).error());
      o.mapped = caps->host_memory.mapped;
      auto m = pinned_allocation::create(size, o);
      if (!m) return op.wrap(std::move(m).error());
      b->ptr = m->data();
      b->memory = std::move(*m);
    }
    return b;
  }

  /// Gives one block's memory back to where it came from (its uses have completed).
  status give_back(block& b) {
    if (source == pinned_source::driver_pool) return pool.free_async(b.ptr, own);
    return b.memory.release();
  }

  /// Waits for every cached block's free and gives the blocks back; a driver pool is trimmed to 0 after. `op`
  /// null: teardown, errors ignored (a block that could not be given back stays cached).
  status give_back_cached(const detail::operation* op) {
    status first;
    auto keep = [&](status s) {
      if (!s && first) first = std::move(s);
    };
    for (auto& [size, list] : cached) {
      for (auto it = list.begin(); it != list.end();) {
        block& b = **it;
        if (!settled(b, true)) {
          keep(op ? status(op->fail(errc::system_error, "an event of a cached block could not be synchronized"))
                  : status{});
          ++it;
          continue;
        }
        if (auto ok = give_back(b); !ok) {
          keep(op ? status(op->wrap(std::move(ok).error())) : status{});
          ++it;
          continue;
        }
        events.give_back(std::move(b.freed));
        st.reserved -= b.size;
        --st.cached_blocks;
        it = list.erase(it);
        blocks.erase(b.ptr);
      }
    }
    if (source == pinned_source::driver_pool && pool) {
      // The frees above run on `own`: synchronized, the memory is unused for the trim (frees the host has not seen
      // complete count as used).
      if (auto ok = own.synchronize(); !ok) keep(op ? status(op->wrap(std::move(ok).error())) : status{});
      if (auto ok = pool.trim_to(0); !ok) keep(op ? status(op->wrap(std::move(ok).error())) : status{});
    }
    events.clear();
    return first;
  }

  result<void*> allocate(std::size_t size, const detail::operation& op) {
    auto cls = detail::staging::class_size(size);
    if (!cls) return op.fail(errc::out_of_memory, "the size rounded up to its class exceeds the address space");
    block* b = take_cached(*cls);
    if (!b) {
      auto made = make_block(*cls, op);
      if (!made && made.code() == errc::out_of_memory) {
        // Pressure: wait for the cached blocks, give them back and try once more.
        if (auto ok = give_back_cached(&op); !ok) return std::move(ok).error();
        made = make_block(*cls, op);
      }
      if (!made) return std::move(made).error();
      b = made->get();
      blocks.emplace(b->ptr, std::move(*made));
      st.reserved += b->size;
      ++st.new_blocks;
    }
    b->live = true;
    b->requested = size;
    b->freed_done = false;
    ++st.live_blocks;
    st.live += size;
    note();
    return b->ptr;
  }

  status deallocate(void* pointer, stream_ref last_use, const detail::operation& op) {
    auto it = blocks.find(pointer);
    if (it == blocks.end() || !it->second->live)
      return op.fail(errc::invalid_argument, it == blocks.end() ? "the pointer was not returned by this pool's allocate"
                                                                : "the pointer was already given back");
    block& b = *it->second;
    auto e = events.record(options.device, last_use, op);
    if (!e) return std::move(e).error();  // the block stays allocated: the caller may retry
    b.freed = std::move(*e);
    b.freed_done = false;
    b.live = false;
    --st.live_blocks;
    st.live -= b.requested;
    ++st.cached_blocks;
    cached[b.size].push_back(&b);
    return {};
  }
};

PVMM_ALLOCATOR_SHELL(pinned_pool, give_back_cached)

int pinned_pool::device() const noexcept { return state_ ? state_->options.device : -1; }
pinned_source pinned_pool::source() const noexcept {
  return state_ ? state_->source : pinned_source::pinned_allocations;
}

result<pinned_pool> pinned_pool::create(const pinned_pool_options& options) {
  auto args = [&] { return fmt::format("device={}, driver_pool={}", options.device, options.driver_pool); };
  const detail::operation op{"pvmm::pinned_pool::create", args};
  if (auto ok = detail::check_location(location::device(options.device), op); !ok) return std::move(ok).error();
  auto caps = detail::device_capabilities(options.device);
  if (!caps) return op.wrap(std::move(caps).error());
  auto s = std::make_unique<state>();
  s->options = options;
  if (options.driver_pool && caps->pools.host_location) {
    s->source = pinned_source::driver_pool;
    pool_properties p;
    p.location = location::host();
    p.release_threshold = std::numeric_limits<std::uint64_t>::max();  // kept for the next new block; trim gives back
    auto pool = memory_pool::create(p);
    if (!pool) return op.wrap(std::move(pool).error());
    // A host pool's memory is the host's alone until a device is granted (cuMemPoolCreate's documentation).
    if (auto ok = pool->set_access({{location::device(options.device), access::read_write}}); !ok)
      return op.wrap(std::move(ok).error());
    auto own = stream::create(options.device);
    if (!own) return op.wrap(std::move(own).error());
    s->pool = std::move(*pool);
    s->own = std::move(*own);
  } else if (!caps->host_memory.pinned) {
    return op.fail(errc::not_supported,
                   fmt::format("device {} has neither host memory pools nor pinned memory", options.device),
                   "capabilities.pools.host_location, capabilities.host_memory.pinned");
  }
  return pinned_pool(std::move(s));
}

result<void*> pinned_pool::allocate(std::size_t size) {
  auto args = [&] { return fmt::format("size={:#x}", size); };
  const detail::operation op{"pvmm::pinned_pool::allocate", args};
  if (!state_) return detail::shell::empty_owner(op, "pinned_pool");
  if (size == 0) return op.fail(errc::invalid_size, "size is 0");
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->allocate(size, op);
}

status pinned_pool::deallocate(void* pointer, stream_ref last_use) {
  auto args = [&] { return fmt::format("pointer={}, stream={:#x}", pointer, last_use.native_handle().value); };
  const detail::operation op{"pvmm::pinned_pool::deallocate", args};
  if (!state_) return detail::shell::empty_owner(op, "pinned_pool");
  if (auto ok = detail::shell::check_stream_of(last_use, state_->options.device, op, "pool's events"); !ok) return ok;
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->deallocate(pointer, last_use, op);
}

pinned_pool_stats pinned_pool::stats() const noexcept {
  if (!state_) return {};
  std::lock_guard<std::mutex> hold(state_->lock);
  return state_->st;
}

}  // namespace pvmm
