// sleeping_allocator: what callers read (tags, sizes, generations, statistics) and the backing callbacks.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "alloc/sleeping_state.hpp"

namespace pvmm {

using detail::sleeping::entry;

using detail::sleeping::empty_text;

namespace {

/// A query of the allocation holding `pointer`: read(its entry), or the failure (an empty owner, a pointer in no
/// allocation of this allocator).
template <class State, class Read>
auto read_containing(const std::unique_ptr<State>& state, const char* name, const void* pointer, Read read)
    -> result<decltype(read(std::declval<const entry&>()))> {
  const detail::operation op{name};
  if (!state) return op.fail(errc::already_released, empty_text);
  std::lock_guard<std::mutex> guard(state->lock);
  const entry* e = state->find_containing(pointer);
  if (!e) return op.fail(errc::invalid_argument, "the pointer is in no allocation of this allocator");
  return read(*e);
}

}  // namespace

result<std::string> sleeping_allocator::tag_of(const void* pointer) const {
  return read_containing(state_, "pvmm::sleeping_allocator::tag_of", pointer, [](const entry& e) { return e.tag; });
}

std::size_t sleeping_allocator::size_of(const void* pointer) const noexcept {
  if (!state_) return 0;
  std::lock_guard<std::mutex> guard(state_->lock);
  auto it = state_->entries.find(reinterpret_cast<std::uintptr_t>(pointer));
  return it == state_->entries.end() ? 0 : it->second->size;
}

result<std::uint64_t> sleeping_allocator::generation_of(const void* pointer) const {
  return read_containing(state_, "pvmm::sleeping_allocator::generation_of", pointer,
                         [](const entry& e) { return e.generation; });
}

result<bool> sleeping_allocator::asleep(const void* pointer) const {
  return read_containing(state_, "pvmm::sleeping_allocator::asleep", pointer, [](const entry& e) { return e.asleep; });
}

result<std::uint64_t> sleeping_allocator::add_backing_callback(backing_callback callback, void* user_data) {
  const detail::operation op{"pvmm::sleeping_allocator::add_backing_callback"};
  if (!state_) return op.fail(errc::already_released, empty_text);
  if (!callback) return op.fail(errc::invalid_argument, "callback is null");
  std::lock_guard<std::mutex> guard(state_->lock);
  const std::uint64_t id = state_->next_callback++;
  state_->callbacks.push_back({id, callback, user_data});
  return id;
}

status sleeping_allocator::remove_backing_callback(std::uint64_t id) {
  const detail::operation op{"pvmm::sleeping_allocator::remove_backing_callback"};
  if (!state_) return op.fail(errc::already_released, empty_text);
  std::lock_guard<std::mutex> guard(state_->lock);
  auto& v = state_->callbacks;
  auto it = std::find_if(v.begin(), v.end(), [&](const auto& c) { return c.id == id; });
  if (it == v.end()) return op.fail(errc::invalid_argument, fmt::format("no backing callback has id {}", id));
  v.erase(it);
  return {};
}

namespace {
sleeping_stats count_entries(const sleeping_allocator::state& s, const std::string* tag) {
  std::lock_guard<std::mutex> guard(s.lock);
  sleeping_stats out;
  for (const auto& [address, e] : s.entries) {
    if (tag && e->tag != *tag) continue;
    ++out.allocations;
    out.reserved_bytes += e->size;
    if (e->asleep)
      ++out.asleep;
    else
      out.resident_bytes += e->size;
    if (e->copy) out.offloaded_bytes += e->size;
  }
  out.staging_bytes = s.engine.ring_bytes.load(std::memory_order_relaxed);
  for (const auto& spare : s.spare_pinned) out.kept_host_bytes += spare->bytes;
  return out;
}
}  // namespace

sleeping_stats sleeping_allocator::stats() const noexcept {
  return state_ ? count_entries(*state_, nullptr) : sleeping_stats{};
}
sleeping_stats sleeping_allocator::stats(std::string_view tag) const noexcept {
  if (!state_) return {};
  const std::string t(tag);
  return count_entries(*state_, &t);
}

}  // namespace pvmm
