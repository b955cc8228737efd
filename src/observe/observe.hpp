// The seeing side of pvmm (pvmm/snapshot.hpp): snapshot providers, labels and the allocate/free history.
//
// Providers: each subsystem that holds memory describes it itself. It defines one `provider` at namespace scope
// (static storage: registered before main by its constructor, never unregistered) whose `collect` adds segments to
// the collector. Lower `order` runs first, and a segment added there claims its base address: a provider of plain
// ranges (reservations) skips a range an owner built on it already described (a caching allocator's region, with
// its blocks). `collect` runs with no pvmm lock held by the caller; it may take its own subsystem's locks but must
// call no user code and no backend (a snapshot makes no driver call). It may throw std::bad_alloc (the snapshot
// fails with out_of_memory); nothing else.
//
// Labels: an owner built on the public API (a team window, the sleeping allocator) names the ranges it holds with
// set_label(base, text) and clears it with clear_label(base); the reservation provider shows the label. Rare calls
// (creation, teardown), one mutex.
//
// History: record(...) is the hook on the allocate/free paths: one relaxed load while recording is off.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <pvmm/snapshot.hpp>

namespace pvmm::detail::observe {

/// What providers add to: the snapshot under construction and the base addresses described so far.
class collector {
 public:
  explicit collector(memory_snapshot& into) : into_(into) {}
  /// Adds a segment, which claims its address. Blocks should tile it (finish() fills gaps as inactive).
  void add(snapshot_segment segment);
  /// Whether a segment starting at `address` was added already (by a lower-order provider).
  bool claimed(std::uintptr_t address) const { return claimed_.count(address) != 0; }
  /// Numbers owners (a pool, an allocator) from 1 in the order they are first seen: segment_pool_id's second half.
  std::int64_t number_of(const void* owner);

 private:
  memory_snapshot& into_;
  std::unordered_set<std::uintptr_t> claimed_;
  std::vector<const void*> owners_;
};

struct provider {
  enum order_value : int { owners = 10, ranges = 100 };
  provider(const char* name, int order, void (*collect)(collector&)) noexcept;
  provider(const provider&) = delete;
  provider& operator=(const provider&) = delete;

  const char* name;
  int order;
  void (*collect)(collector&);
  provider* next = nullptr;
};

/// The live objects of one owner type, for its provider. T holds a `listed<T>` member; its creation calls
/// enter(this) once the object is complete, and its destructor leave() before it changes anything (~listed leaves
/// too). for_each holds the list's lock while it visits, so leave() waits until a visit is over; the visitor takes
/// the object's own lock (list lock, then object lock: an object never takes the list's lock holding its own).
template <class T>
class listed {
 public:
  listed() noexcept = default;
  listed(const listed&) = delete;
  listed& operator=(const listed&) = delete;
  ~listed() { leave(); }
  void enter(T* owner) noexcept {
    std::lock_guard<std::mutex> guard(all().lock);
    try {
      all().items.push_back(owner);
      owner_ = owner;
    } catch (...) {  // out of memory: the object is left out of snapshots, nothing else
    }
  }
  void leave() noexcept {
    if (owner_ == nullptr) return;
    std::lock_guard<std::mutex> guard(all().lock);
    auto& v = all().items;
    for (auto it = v.begin(); it != v.end(); ++it)
      if (*it == owner_) {
        v.erase(it);
        break;
      }
    owner_ = nullptr;
  }
  template <class F>
  static void for_each(F&& f) {
    std::lock_guard<std::mutex> guard(all().lock);
    for (T* p : all().items) f(*p);
  }

 private:
  struct list {
    std::mutex lock;
    std::vector<T*> items;
  };
  static list& all() {
    static auto* l = new list;  // never destroyed: objects may outlive the statics
    return *l;
  }
  T* owner_ = nullptr;
};

/// Runs every provider, in order, into `into` (segments sorted by device and address afterwards).
void collect_all(memory_snapshot& into);

// ---- labels ----
void set_label(const void* base, std::string text) noexcept;
void clear_label(const void* base) noexcept;
/// The label of the range starting at `base`, or "".
std::string label_of(const void* base);

/// A label that goes with its owner: cleared when this is destroyed or set again (declare it after the range it
/// names, so it is cleared before the range is freed and its address reused).
class scoped_label {
 public:
  scoped_label() noexcept = default;
  scoped_label(scoped_label&& o) noexcept : base_(o.base_) { o.base_ = nullptr; }
  scoped_label& operator=(scoped_label&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = o.base_;
      o.base_ = nullptr;
    }
    return *this;
  }
  ~scoped_label() { reset(); }
  void set(const void* base, std::string text) noexcept {
    reset();
    base_ = base;
    set_label(base, std::move(text));
  }
  void reset() noexcept {
    if (base_ != nullptr) clear_label(base_);
    base_ = nullptr;
  }

 private:
  const void* base_ = nullptr;
};

// ---- history ----
enum class action : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  segment_map,
  segment_unmap,
  snapshot,
};
const char* action_name(action a) noexcept;

/// Nonzero while recording (the ring's capacity). Hidden: the hot paths read it PC-relative.
[[gnu::visibility("hidden")]] extern std::atomic<std::size_t> history_capacity;

void record_slow(action a, const void* address, std::size_t size, int device, std::uintptr_t stream) noexcept;

/// Whether history is on: the hooks whose arguments cost something to compute test this first.
inline bool recording() noexcept { return __builtin_expect(history_capacity.load(std::memory_order_relaxed) != 0, 0); }

/// The hook: records an event when history is on; one relaxed load when it is off.
inline void record(action a, const void* address, std::size_t size, int device = 0,
                   std::uintptr_t stream = 0) noexcept {
  if (__builtin_expect(history_capacity.load(std::memory_order_relaxed) != 0, 0))
    record_slow(a, address, size, device, stream);
}

/// As record, with the device computed (device()) only when recording.
template <class Device>
inline void record_on(action a, const void* address, std::size_t size, Device&& device,
                      std::uintptr_t stream = 0) noexcept {
  if (__builtin_expect(history_capacity.load(std::memory_order_relaxed) != 0, 0))
    record_slow(a, address, size, device(), stream);
}

/// Appends the kept events to the snapshot's device traces, oldest first.
void copy_history(memory_snapshot& into);

}  // namespace pvmm::detail::observe
