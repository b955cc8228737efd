// sleeping_allocator: entries, tags, policies, generations and callbacks (include/pvmm/sleeping_allocator.hpp);
// the copies of sleep and wake are in sleep_copies.cpp.
#include <algorithm>
#include <new>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <pvmm/device.hpp>

#include "alloc/sleeping_state.hpp"
#include "core/checked_math.hpp"
#include "core/pimpl_moves.hpp"

namespace pvmm {

using detail::sleeping::entry;

using detail::sleeping::empty_text;
using detail::sleeping::selected;

entry* sleeping_allocator::state::find_containing(const void* p) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = entries.upper_bound(at);
  if (it == entries.begin()) return nullptr;
  --it;
  return at - it->first < it->second->size ? it->second.get() : nullptr;
}

bool sleeping_allocator::state::overlaps_entry(std::uintptr_t at, std::size_t size) const {
  auto it = entries.lower_bound(at);
  if (it != entries.end() && it->first - at < size) return true;  // an entry starts inside the range
  if (it == entries.begin()) return false;
  --it;
  return at - it->first < it->second->size;  // the entry before it reaches into the range
}

result<address_reservation> sleeping_allocator::state::reserve_apart(std::size_t size, const detail::operation& op) {
  auto reserve = [&]() -> result<address_reservation> {
    auto range = address_reservation::reserve(size, granularity);
    if (!range) return op.wrap(std::move(range).error());
    return range;
  };
  if (!release_range) return reserve();  // every entry's range stays reserved: nothing to land on
  // Each try that lands on an entry's range covers `size` bytes of it, held until the end of the call: the driver
  // gives every try a different range, so the tries are bounded by the entries' bytes (an entry put to sleep
  // meanwhile is in `entries` already, whose ranges are counted at the first collision).
  const std::lock_guard<std::mutex> reserving(reserve_lock);
  std::size_t bound = 0;
  std::vector<address_reservation> held;  // ranges of sleeping entries: given back before `reserving` ends
  for (;;) {
    PVMM_TRY_ASSIGN(range, reserve());
    {
      std::lock_guard<std::mutex> guard(lock);
      if (!overlaps_entry(reinterpret_cast<std::uintptr_t>(range.address()), size)) return range;
      if (bound == 0) {
        bound = 2;
        for (const auto& [at, e] : entries) bound += e->size / size + 1;
      }
    }
    if (held.size() + 1 >= bound)
      return op.fail(errc::address_unavailable,
                     fmt::format("{} reservations in a row landed on the ranges of this allocator's sleeping "
                                 "allocations (release_address_range)",
                                 held.size() + 1),
                     "wake or free the sleeping allocations, or keep release_address_range off");
    try {
      held.push_back(std::move(range));
    } catch (const std::bad_alloc&) {
      return op.fail(errc::out_of_memory, "no host memory to hold a reservation aside");
    }
  }
}

tag_policy sleeping_allocator::state::policy_of(const std::string& tag) const {
  auto it = policies.find(tag);
  return it == policies.end() ? tag_policy{} : it->second;
}

void sleeping_allocator::state::reap_pending() {
  for (auto it = pending.begin(); it != pending.end();) {
    auto done = it->done.query();
    if (done && *done) {
      recycle(it->stores);
      it = pending.erase(it);
    } else
      ++it;
  }
}

result<std::vector<entry*>> sleeping_allocator::state::begin(const std::vector<std::string>& tags, bool for_sleep,
                                                             const detail::operation& op) {
  std::lock_guard<std::mutex> guard(lock);
  if (transition)
    return op.fail(errc::busy, "another sleep or wake of this allocator is running",
                   "one runs at a time; retry once it returned");
  reap_pending();
  std::vector<entry*> moved;
  for (auto& [address, e] : entries) {
    if (e->asleep == for_sleep || !selected(*e, tags)) continue;
    e->moving = true;
    moved.push_back(e.get());
  }
  transition = true;
  return moved;
}

void sleeping_allocator::state::end(const std::vector<entry*>& moved) {
  std::lock_guard<std::mutex> guard(lock);
  for (entry* e : moved) e->moving = false;
  transition = false;
}

void sleeping_allocator::state::notify(const std::vector<entry*>& moved, backing_event why) {
  std::vector<detail::sleeping::callback_slot> calls;
  std::vector<std::uint64_t> generations;
  {
    std::lock_guard<std::mutex> guard(lock);
    calls = callbacks;
    for (entry* e : moved) {
      generations.push_back(e->generation);
      if (why != backing_event::free) e->generation = next_generation++;
    }
  }
  if (calls.empty()) return;
  for (std::size_t i = 0; i < moved.size(); ++i) {
    backing_change c;
    c.address = moved[i]->address;
    c.size = moved[i]->size;
    c.old_generation = generations[i];
    c.new_generation = why == backing_event::free ? 0 : moved[i]->generation;
    c.reason = why;
    c.tag = moved[i]->tag.c_str();
    for (const auto& call : calls) call.fn(c, call.user);  // no lock held: a callback may call the allocator
  }
}

status sleeping_allocator::state::map_new(entry& e, const detail::operation& op) {
  bool reserved_here = false;
  if (release_range && !e.range.valid()) {
    auto range = [&] {
      const std::lock_guard<std::mutex> reserving(reserve_lock);
      return address_reservation::reserve(e.size, granularity, e.address);
    }();
    if (!range) return op.wrap(std::move(range).error());
    if (range->address() != e.address)
      return op.fail(errc::address_unavailable,
                     fmt::format("the range {} of tag '{}' was taken while it slept (reserved again at {})", e.address,
                                 e.tag, range->address()),
                     "keep release_address_range off where the address space is contended");
    e.range = std::move(range).value();
    reserved_here = true;
  }
  // A failure below leaves the entry as asleep as it was: with release_range, not even the range stays reserved.
  auto undo = [&](error err) -> error {
    if (reserved_here) (void)e.range.release();
    return op.wrap(std::move(err));
  };
  allocation_properties props;
  props.location = location::device(options.device);
  auto memory = physical_allocation::create(e.size, props);
  if (!memory) return undo(std::move(memory).error());
  const access_descriptor grant{location::device(options.device), access::read_write};
  auto mapped = e.range.map_and_grant(0, *memory, {grant});
  if (!mapped) return undo(std::move(mapped).error());
  e.memory = std::move(memory).value();
  return {};
}

status sleeping_allocator::state::unmap_release(entry& e, const detail::operation& op) {
  if (auto ok = e.range.unmap(0, e.size); !ok) return op.wrap(std::move(ok).error());
  (void)e.memory.release();
  if (release_range) (void)e.range.release();  // the exact range is reserved again at wake (ROCm gives VRAM back)
  return {};
}

PVMM_PIMPL_MOVES(sleeping_allocator)
sleeping_allocator::~sleeping_allocator() { (void)release(); }

result<sleeping_allocator> sleeping_allocator::create(const sleeping_options& options) {
  auto args = [&] {
    return fmt::format("device={}, copy_streams={}, staging_slots={}, staging_slot_bytes={:#x}", options.device,
                       options.copy_streams, options.staging_slots, options.staging_slot_bytes);
  };
  const detail::operation op{"pvmm::sleeping_allocator::create", args};
  if (options.copy_streams == 0 || options.copy_streams > 64)
    return op.fail(errc::invalid_argument, "copy_streams must be 1 to 64");
  if (options.staging_slots < 2 || options.staging_slots > 1024)
    return op.fail(errc::invalid_argument, "staging_slots must be 2 to 1024");
  if (options.staging_slot_bytes == 0 || options.staging_slot_bytes % 4096 != 0 ||
      options.staging_slot_bytes > (std::size_t{1} << 32))
    return op.fail(errc::invalid_argument, "staging_slot_bytes must be a multiple of 4 KiB, at most 4 GiB");
  allocation_properties props;
  props.location = location::device(options.device);
  auto g = query_granularity(props);
  if (!g) return op.wrap(std::move(g).error());
  auto s = std::make_unique<state>();
  s->options = options;
  s->granularity = std::max<std::size_t>(g->minimum, 1);
  s->release_range = options.release_address_range.value_or(query_backend().name == "hip");
  auto host = query_device(0);  // host memory's capabilities are device 0's, as pinned memory reads them
  if (!host) return op.wrap(std::move(host).error());
  s->register_host = host->capabilities.host_memory.registration;
  s->engine.device = options.device;
  s->engine.stream_count = options.copy_streams;
  s->engine.slots = options.staging_slots;
  s->engine.slot_bytes = options.staging_slot_bytes;
  s->listed.enter(s.get());
  return sleeping_allocator(std::move(s));
}

result<void*> sleeping_allocator::allocate(std::size_t size) {
  if (!state_) return detail::operation{"pvmm::sleeping_allocator::allocate"}.fail(errc::already_released, empty_text);
  return allocate(size, current_tag());
}

result<void*> sleeping_allocator::allocate(std::size_t size, std::string_view tag) {
  auto args = [&] { return fmt::format("size={:#x}, tag='{}'", size, tag); };
  const detail::operation op{"pvmm::sleeping_allocator::allocate", args};
  if (!state_) return op.fail(errc::already_released, empty_text);
  if (size == 0) return op.fail(errc::invalid_size, "size is 0");
  auto& s = *state_;
  if (size > static_cast<std::size_t>(-1) - (s.granularity - 1))
    return op.fail(errc::out_of_memory, "the size rounded up to the granularity exceeds the address space");
  auto e = std::make_unique<entry>();
  e->tag = std::string(tag);
  e->size = (size + s.granularity - 1) / s.granularity * s.granularity;
  // Never on a sleeping entry's range (free in the driver with release_range): its wake reserves it again, and
  // entries are found by address.
  auto range = s.reserve_apart(e->size, op);
  if (!range) return std::move(range).error();
  e->range = std::move(range).value();
  e->address = e->range.address();
  if (auto ok = s.map_new(*e, op); !ok) return std::move(ok).error();
  void* address = e->address;
  std::lock_guard<std::mutex> guard(s.lock);
  e->generation = s.next_generation++;
  s.entries.emplace(reinterpret_cast<std::uintptr_t>(address), std::move(e));
  return address;
}

status sleeping_allocator::deallocate(void* pointer) {
  auto args = [&] { return fmt::format("pointer={}", pointer); };
  const detail::operation op{"pvmm::sleeping_allocator::deallocate", args};
  if (!state_) return op.fail(errc::already_released, empty_text);
  auto& s = *state_;
  std::vector<entry*> one;
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.entries.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == s.entries.end())
      return op.fail(errc::invalid_argument,
                     "the pointer is not an allocation of this allocator (freed already, or another's)");
    if (it->second->moving) return op.fail(errc::busy, "a sleep, wake or free of this allocation is running");
    it->second->moving = true;
    one.push_back(it->second.get());
  }
  s.notify(one, backing_event::free);
  std::unique_ptr<entry> gone;  // unmapped and released after the lock
  {
    std::lock_guard<std::mutex> guard(s.lock);
    auto it = s.entries.find(reinterpret_cast<std::uintptr_t>(pointer));
    gone = std::move(it->second);
    s.entries.erase(it);
  }
  return {};
}

status sleeping_allocator::set_policy(std::string_view tag, const tag_policy& policy) {
  auto args = [&] { return fmt::format("tag='{}', policy={}", tag, static_cast<int>(policy.policy)); };
  const detail::operation op{"pvmm::sleeping_allocator::set_policy", args};
  if (!state_) return op.fail(errc::already_released, empty_text);
  if (static_cast<int>(policy.policy) < 0 || static_cast<int>(policy.policy) > 3)
    return op.fail(errc::invalid_argument, "policy is not a sleep_policy");
  std::lock_guard<std::mutex> guard(state_->lock);
  state_->policies.insert_or_assign(std::string(tag), policy);
  return {};
}

result<tag_policy> sleeping_allocator::policy(std::string_view tag) const {
  if (!state_) return detail::operation{"pvmm::sleeping_allocator::policy"}.fail(errc::already_released, empty_text);
  std::lock_guard<std::mutex> guard(state_->lock);
  return state_->policy_of(std::string(tag));
}

std::string sleeping_allocator::current_tag() const {
  if (!state_) return "default";
  std::lock_guard<std::mutex> guard(state_->lock);
  return state_->current_tag;
}

std::string sleeping_allocator::exchange_tag(std::string tag) {
  if (!state_) return "default";
  std::lock_guard<std::mutex> guard(state_->lock);
  std::swap(state_->current_tag, tag);
  return tag;
}

namespace {
/// The four public forms of sleep and wake, one body: the empty owner refused, then the state's move_tags.
template <class State>
result<event> move_tags_of(const std::unique_ptr<State>& state, const char* name, const std::vector<std::string>& tags,
                           bool for_sleep, stream_ref* on) {
  const detail::operation op{name};
  if (!state) return op.fail(errc::already_released, empty_text);
  return state->move_tags(tags, for_sleep, on, op);
}
/// The synchronous forms' answer: the outcome, without an event.
status without_event(result<event>&& done) {
  if (!done) return std::move(done).error();
  return {};
}
}  // namespace

result<event> sleeping_allocator::sleep(const std::vector<std::string>& tags, stream_ref on) {
  return move_tags_of(state_, "pvmm::sleeping_allocator::sleep", tags, true, &on);
}

status sleeping_allocator::sleep(const std::vector<std::string>& tags) {
  return without_event(move_tags_of(state_, "pvmm::sleeping_allocator::sleep", tags, true, nullptr));
}

result<event> sleeping_allocator::wake(const std::vector<std::string>& tags, stream_ref on) {
  return move_tags_of(state_, "pvmm::sleeping_allocator::wake", tags, false, &on);
}

status sleeping_allocator::wake(const std::vector<std::string>& tags) {
  return without_event(move_tags_of(state_, "pvmm::sleeping_allocator::wake", tags, false, nullptr));
}

status sleeping_allocator::drop_host_copies(const std::vector<std::string>& tags) {
  const detail::operation op{"pvmm::sleeping_allocator::drop_host_copies"};
  if (!state_) return op.fail(errc::already_released, empty_text);
  std::vector<std::shared_ptr<detail::sleeping::host_store>> gone;  // freed after the lock
  std::lock_guard<std::mutex> guard(state_->lock);
  for (auto& [address, e] : state_->entries)
    if (!e->asleep && !e->moving && selected(*e, tags) && e->copy) gone.push_back(std::move(e->copy));
  return {};
}

status sleeping_allocator::read_host_copy(const void* pointer, std::size_t offset, void* out, std::size_t size) const {
  auto args = [&] { return fmt::format("pointer={}, offset={:#x}, size={:#x}", pointer, offset, size); };
  const detail::operation op{"pvmm::sleeping_allocator::read_host_copy", args};
  if (!state_) return op.fail(errc::already_released, empty_text);
  if (!out && size) return op.fail(errc::invalid_argument, "out is null");
  std::shared_ptr<detail::sleeping::host_store> store;
  std::size_t at = 0;
  {
    std::lock_guard<std::mutex> guard(state_->lock);
    const entry* e = state_->find_containing(pointer);
    if (!e) return op.fail(errc::invalid_argument, "the pointer is in no allocation of this allocator");
    if (!e->copy || e->moving)
      return op.fail(errc::invalid_argument,
                     fmt::format("the allocation of tag '{}' has no host copy now ({})", e->tag,
                                 e->moving   ? "a sleep or wake is moving it"
                                 : e->asleep ? "discarded"
                                             : "awake"),
                     "read it while it sleeps with an offload policy, or with retain_host_copy");
    const std::size_t start = static_cast<std::size_t>(static_cast<const unsigned char*>(pointer) -
                                                       static_cast<const unsigned char*>(e->address));
    if (offset > e->size - start || size > e->size - start - offset)
      return op.fail(errc::out_of_range, "the range runs past the allocation");
    store = e->copy;
    at = e->copy_offset + start + offset;
  }
  return store->read(at, out, size, op);
}

status sleeping_allocator::release() noexcept {
  const detail::operation op{"pvmm::sleeping_allocator::release"};
  if (!state_) return op.fail(errc::already_released, empty_text);
  {
    std::lock_guard<std::mutex> guard(state_->lock);
    if (state_->transition) return op.fail(errc::busy, "a sleep or wake of this allocator is running");
  }
  (void)state_->engine.synchronize_all(op);
  state_.reset();  // each entry's mapping goes with its reservation, then its memory; host copies after
  return {};
}

int sleeping_allocator::device() const noexcept { return state_ ? state_->options.device : -1; }
std::size_t sleeping_allocator::granularity() const noexcept { return state_ ? state_->granularity : 0; }

}  // namespace pvmm
