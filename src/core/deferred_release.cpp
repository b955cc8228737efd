// core/deferred_release.hpp: the list host functions hand their holders to.
#include "core/deferred_release.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace pvmm::detail {
namespace {
struct deferred_list {
  std::mutex lock;
  std::vector<std::shared_ptr<const void>*> held;
};
// Never destroyed: a host function may still run while the process exits.
deferred_list& deferred() noexcept {
  static auto* list = new deferred_list;
  return *list;
}
struct source_list {
  std::mutex lock;
  std::vector<deferred_source*> sources;
};
source_list& sources() noexcept {
  static auto* list = new source_list;
  return *list;
}
}  // namespace

void add_deferred_source(deferred_source* source) noexcept {
  auto& s = sources();
  const std::lock_guard<std::mutex> hold(s.lock);
  try {
    s.sources.push_back(source);
  } catch (...) {  // not listed: its entries are collected by its own enqueues and watchdog instead
  }
}

void remove_deferred_source(deferred_source* source) noexcept {
  auto& s = sources();
  const std::lock_guard<std::mutex> hold(s.lock);
  s.sources.erase(std::remove(s.sources.begin(), s.sources.end(), source), s.sources.end());
}

void defer_release(std::shared_ptr<const void>* held) noexcept {
  if (held == nullptr) return;
  auto& d = deferred();
  const std::lock_guard<std::mutex> hold(d.lock);
  try {
    d.held.push_back(held);
  } catch (...) {  // no memory for the entry: the holder stays (kept for good, not torn down in a host function)
  }
}

void release_deferred() noexcept {
  {
    auto& s = sources();
    const std::lock_guard<std::mutex> hold(s.lock);
    for (deferred_source* source : s.sources) source->collect();
  }
  std::vector<std::shared_ptr<const void>*> batch;
  {
    auto& d = deferred();
    const std::lock_guard<std::mutex> hold(d.lock);
    if (d.held.empty()) return;
    batch.swap(d.held);
  }
  for (auto* held : batch) delete held;  // outside the lock: a teardown may defer or release again
}

}  // namespace pvmm::detail
