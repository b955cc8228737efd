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
/// one that made it simply joins that thread's cache.
struct state_cache {
  reservation_state* states[cached_states];
  std::size_t count;
};
// Two small initial-exec thread-locals: each reserve and free reads them with one load from the thread pointer,
// where the default model for a shared library calls __tls_get_addr (about 20 instructions each time, measured with
// callgrind on pvmm-own-cost). Nine bytes, so a library loaded by dlopen (the Python module) fits glibc's static TLS
// surplus; the cache itself is on the heap. Trivially destructible, so they stay readable while static owners are
// destroyed after the thread's teardown.
[[gnu::tls_model("initial-exec")]] thread_local state_cache* cache;  // null until the thread's first recycling
[[gnu::tls_model("initial-exec")]] thread_local bool gone;           // the teardown ran: states are deleted

/// Deletes the thread's cached states when the thread ends. Touched once per thread, by its first recycling.
struct cache_teardown {
  bool touched = false;
  ~cache_teardown() {
    gone = true;
    if (state_cache* c = cache) {
      cache = nullptr;
      while (c->count) delete c->states[--c->count];
      delete c;
    }
  }
};
thread_local cache_teardown teardown;

/// The thread's cache on its first recycling (null when no memory is left for it).
[[gnu::noinline]] state_cache* arm_cache() noexcept {
  auto* c = new (std::nothrow) state_cache{};
  if (!c) return nullptr;
  teardown.touched = true;  // registers the teardown for this thread
  return cache = c;
}

}  // namespace

std::unique_ptr<reservation_state, reservation_recycler> new_reservation_state(void* address,
                                                                               std::size_t size) noexcept {
  state_cache* const c = cache;
  reservation_state* state = c && c->count ? c->states[--c->count] : nullptr;
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
  state_cache* c = cache;
  if (!c && !gone) c = arm_cache();
  if (!c || c->count == cached_states) {
    delete state;
    return;
  }
  if (state->mappings.capacity() > kept_table_capacity) flat_map<std::size_t, mapping_record>().swap(state->mappings);
  state->mappings.clear();
  c->states[c->count++] = state;
}

}  // namespace pvmm::detail
