// Hot layout: new_reservation_state, reservation_recycler and thread_cache are listed by mangled name in
// cmake/hot_layout.ld; a rename or a new signature drops one out of the layout (the CTest tools/hot_layout says so).
//
// Where reservation states come from and go: a small per-thread cache of torn-down states, so that reserving
// allocates nothing in the steady state and a recycled state keeps its mapping table's storage (the first map
// into a new reservation allocates nothing either). A heap allocation and free each cost about as much as the
// rest of pvmm's bookkeeping around a sub-microsecond driver call (pvmm-own-cost).
#include <cstddef>
#include <new>

#include "core/ownership.hpp"

namespace pvmm::detail {
namespace {

constexpr std::size_t cached_states = 64;       // per thread (a few KiB); more are deleted
constexpr std::size_t kept_table_capacity = 8;  // larger mapping tables give their storage back

/// Per thread, so that taking and giving back a state needs no lock; a state freed on another thread than the
/// one that made it simply joins that thread's cache. Trivially destructible, so it needs no guard on access
/// and stays readable while static owners are destroyed after the thread's teardown (`gone` then says so).
struct state_cache {
  reservation_state* states[cached_states];
  std::size_t count;
  bool armed;  // the teardown below is registered for this thread
  bool gone;   // the teardown ran: states are deleted instead of kept
};
thread_local state_cache cache;

/// Deletes the thread's cached states when the thread ends. Touched once per thread, by its first recycling.
struct cache_teardown {
  bool touched = false;
  ~cache_teardown() {
    cache.gone = true;
    while (cache.count) delete cache.states[--cache.count];
  }
};
thread_local cache_teardown teardown;

/// The thread's cache, out of line and `const` (as glibc's __errno_location is): a caller looks it up once, where
/// GCC otherwise called __tls_get_addr again for each member it touched (three calls per recycling).
[[gnu::noinline, gnu::const]] state_cache& thread_cache() noexcept { return cache; }

}  // namespace

std::unique_ptr<reservation_state, reservation_recycler> new_reservation_state(void* address,
                                                                               std::size_t size) noexcept {
  state_cache& c = thread_cache();
  reservation_state* state = c.count ? c.states[--c.count] : nullptr;
  if (!state) state = new (std::nothrow) reservation_state;
  if (!state) return nullptr;
  state->address = address;
  state->size = size;
  state->freed = false;
  return std::unique_ptr<reservation_state, reservation_recycler>(state);
}

void reservation_recycler::operator()(reservation_state* state) const noexcept {
  if (!state->freed) {  // release() already emptied and freed it otherwise (then no other thread can reach it)
    (void)state->unmap_all();
    (void)state->free_range();
  }
  if (state->mappings.capacity() > kept_table_capacity) flat_map<std::size_t, mapping_record>().swap(state->mappings);
  state->mappings.clear();
  state_cache& c = thread_cache();
  if (c.gone || c.count == cached_states) {
    delete state;
    return;
  }
  if (!c.armed) c.armed = teardown.touched = true;
  c.states[c.count++] = state;
}

}  // namespace pvmm::detail
