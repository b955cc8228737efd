// core/deferred_release.hpp: the list host functions hand their holders to.
#include "core/deferred_release.hpp"

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
}  // namespace

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
