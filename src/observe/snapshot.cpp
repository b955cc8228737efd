// pvmm/snapshot.hpp: the providers' registry, labels, the history ring, take_memory_snapshot.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/deferred_release.hpp"
#include "core/enum_text.hpp"
#include "core/operation.hpp"
#include "core/spin_lock.hpp"
#include "observe/observe.hpp"

namespace pvmm {

std::size_t snapshot_segment::allocated_size() const noexcept {
  std::size_t n = 0;
  for (const auto& b : blocks) n += b.state == block_state::active_allocated ? b.size : 0;
  return n;
}
std::size_t snapshot_segment::active_size() const noexcept {
  std::size_t n = 0;
  for (const auto& b : blocks) n += b.state != block_state::inactive ? b.size : 0;
  return n;
}
std::size_t snapshot_segment::requested_size() const noexcept {
  std::size_t n = 0;
  for (const auto& b : blocks) n += b.state != block_state::inactive ? b.requested_size : 0;
  return n;
}

namespace detail::observe {

// ---- providers ----
namespace {
spin_lock providers_lock;       // constant-initialized: providers register during static initialization
provider* providers = nullptr;  // sorted by order
}  // namespace

provider::provider(const char* n, int o, void (*c)(collector&)) noexcept : name(n), order(o), collect(c) {
  std::lock_guard<spin_lock> guard(providers_lock);
  provider** at = &providers;
  while (*at != nullptr && (*at)->order <= order) at = &(*at)->next;
  next = *at;
  *at = this;
}

void collector::add(snapshot_segment segment) {
  // The blocks tile the segment: what no block covers is inactive (segsum asserts the sizes sum to total_size).
  std::vector<snapshot_block> tiled;
  tiled.reserve(segment.blocks.size() + 1);
  std::uintptr_t at = segment.address;
  const std::uintptr_t end = segment.address + segment.total_size;
  std::sort(segment.blocks.begin(), segment.blocks.end(),
            [](const snapshot_block& a, const snapshot_block& b) { return a.address < b.address; });
  for (auto& b : segment.blocks) {
    if (b.address < at || b.address + b.size > end || b.size == 0) continue;  // overlapping or outside: dropped
    if (b.address > at) tiled.push_back({at, b.address - at, 0, block_state::inactive, {}});
    at = b.address + b.size;
    tiled.push_back(std::move(b));
  }
  if (at < end) tiled.push_back({at, end - at, 0, block_state::inactive, {}});
  segment.blocks = std::move(tiled);
  claimed_.insert(segment.address);
  into_.segments.push_back(std::move(segment));
}

std::int64_t collector::number_of(const void* owner) {
  auto it = std::find(owners_.begin(), owners_.end(), owner);
  if (it != owners_.end()) return static_cast<std::int64_t>(it - owners_.begin()) + 1;
  owners_.push_back(owner);
  return static_cast<std::int64_t>(owners_.size());
}

void collect_all(memory_snapshot& into) {
  collector c(into);
  // The list only grows before main (static providers); walking it needs no lock once that is over, but a library
  // loaded later registers then: take the lock to read each link.
  for (provider* p =
           [] {
             std::lock_guard<spin_lock> guard(providers_lock);
             return providers;
           }();
       p != nullptr;) {
    p->collect(c);
    std::lock_guard<spin_lock> guard(providers_lock);
    p = p->next;
  }
  std::stable_sort(into.segments.begin(), into.segments.end(),
                   [](const snapshot_segment& a, const snapshot_segment& b) {
                     return a.device != b.device ? a.device < b.device : a.address < b.address;
                   });
}

// ---- labels ----
namespace {
std::mutex labels_lock;
std::unordered_map<const void*, std::string>& labels() {
  static auto* map = new std::unordered_map<const void*, std::string>;  // never destroyed: owners outlive statics
  return *map;
}
}  // namespace

void set_label(const void* base, std::string text) noexcept {
  try {
    std::lock_guard<std::mutex> guard(labels_lock);
    labels()[base] = std::move(text);
  } catch (...) {  // a label is a nicety: out of memory leaves the range unlabelled
  }
}
void clear_label(const void* base) noexcept {
  try {
    std::lock_guard<std::mutex> guard(labels_lock);
    labels().erase(base);
  } catch (...) {
  }
}
std::string label_of(const void* base) {
  std::lock_guard<std::mutex> guard(labels_lock);
  auto it = labels().find(base);
  return it == labels().end() ? std::string() : it->second;
}

// ---- history ----
std::atomic<std::size_t> history_capacity{0};

const char* action_name(action a) noexcept {
  static constexpr const char* texts[] = {"alloc",        "free_requested", "free_completed", "segment_alloc",
                                          "segment_free", "segment_map",    "segment_unmap",  "snapshot"};
  return enum_text(a, texts, "unknown");
}

namespace {
struct event {
  action what;
  int device;
  const void* address;
  std::size_t size;
  std::uintptr_t stream;
  std::int64_t time_us;
};
spin_lock history_lock;  // held for a copy into the ring; never across anything else
std::vector<event>& ring() {
  static auto* r = new std::vector<event>;  // never destroyed: frees at exit may still record
  return *r;
}
std::uint64_t recorded = 0;  // events ever written to the ring (the next slot is recorded % size)
}  // namespace

void record_slow(action a, const void* address, std::size_t size, int device, std::uintptr_t stream) noexcept {
  const auto now =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::lock_guard<spin_lock> guard(history_lock);
  auto& r = ring();
  if (r.empty()) return;  // turned off meanwhile
  r[recorded % r.size()] = event{a, device, address, size, stream, static_cast<std::int64_t>(now)};
  ++recorded;
}

void copy_history(memory_snapshot& into) {
  std::vector<event> kept;
  {
    std::lock_guard<spin_lock> guard(history_lock);
    const auto& r = ring();
    const std::uint64_t n = std::min<std::uint64_t>(recorded, r.size());
    kept.reserve(n);
    for (std::uint64_t i = recorded - n; i < recorded; ++i) kept.push_back(r[i % r.size()]);
  }
  for (const auto& e : kept) {
    const std::size_t d = e.device < 0 ? 0 : static_cast<std::size_t>(e.device);
    if (into.device_traces.size() <= d) into.device_traces.resize(d + 1);
    into.device_traces[d].push_back(
        trace_entry{action_name(e.what), reinterpret_cast<std::uintptr_t>(e.address), e.size, e.stream, e.time_us});
  }
}

}  // namespace detail::observe

result<memory_snapshot> take_memory_snapshot() {
  const detail::operation op{"pvmm::take_memory_snapshot"};
  // What finished stream work held (a window released under queued signal work) is let go of first: a snapshot
  // shows what the caller still owns, as query_live_objects counts it (core/deferred_release.hpp).
  detail::release_deferred();
  try {
    memory_snapshot s;
    detail::observe::record(detail::observe::action::snapshot, nullptr, 0);
    detail::observe::collect_all(s);
    detail::observe::copy_history(s);
    int devices = 1;
    for (const auto& seg : s.segments) devices = std::max(devices, seg.device + 1);
    if (s.device_traces.size() < static_cast<std::size_t>(devices)) s.device_traces.resize(devices);
    return s;
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out while describing pvmm's memory");
  }
}

status record_memory_history(std::size_t max_entries) {
  auto args = [&] { return fmt::format("max_entries={}", max_entries); };
  const detail::operation op{"pvmm::record_memory_history", args};
  constexpr std::size_t most = std::size_t{1} << 24;
  if (max_entries > most)
    return op.fail(errc::invalid_argument, fmt::format("max_entries is above {} (the ring's bound)", most),
                   "keep fewer events (each takes 48 bytes)");
  namespace o = detail::observe;
  std::vector<o::event> fresh;
  try {
    fresh.resize(max_entries);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out for the history ring");
  }
  {
    std::lock_guard<detail::spin_lock> guard(o::history_lock);
    o::ring().swap(fresh);
    o::recorded = 0;
    o::history_capacity.store(max_entries, std::memory_order_relaxed);
  }
  return {};  // `fresh` (the old ring) is freed outside the lock
}

std::size_t memory_history_capacity() noexcept {
  return detail::observe::history_capacity.load(std::memory_order_relaxed);
}

}  // namespace pvmm
