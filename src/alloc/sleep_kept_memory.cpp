// The page-locked host memory a sleeping allocator holds between sleeps: stores kept from a wake
// (keep_host_memory) or made ahead of a sleep (prepare_host_memory), the one a sleep of a pinned tag takes, and trim.
#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "alloc/sleeping_state.hpp"

namespace pvmm {

using detail::sleeping::empty_text;
using detail::sleeping::host_store;
using detail::sleeping::selected;

namespace {
constexpr std::size_t none = static_cast<std::size_t>(-1);

/// The kept store a sleep of `tag` needing `bytes` takes: the one prepared for the tag that fits, else the smallest
/// that fits among those prepared for no tag (a store prepared for another tag stays for it); `none`: no store.
std::size_t pick_kept(const std::vector<std::shared_ptr<host_store>>& kept, std::size_t bytes, const std::string& tag) {
  std::size_t best = none;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const host_store& s = *kept[i];
    if (s.bytes < bytes || (!s.prepared_for.empty() && s.prepared_for != tag)) continue;
    if (!s.prepared_for.empty()) return i;
    if (best == none || s.bytes < kept[best]->bytes) best = i;
  }
  return best;
}
}  // namespace

result<std::shared_ptr<host_store>> sleeping_allocator::state::pinned_store(const tag_policy& p, const std::string& tag,
                                                                            std::size_t bytes,
                                                                            const detail::operation& op) {
  {
    std::lock_guard<std::mutex> guard(lock);
    if (const std::size_t i = pick_kept(spare_pinned, bytes, tag); i != none) {
      auto s = std::move(spare_pinned[i]);
      spare_pinned.erase(spare_pinned.begin() + static_cast<std::ptrdiff_t>(i));
      return s;
    }
  }
  return host_store::create(p, bytes, register_host, op);
}

void sleeping_allocator::state::keep_unused(std::map<std::string, std::shared_ptr<host_store>>& stores) {
  std::lock_guard<std::mutex> guard(lock);
  for (auto& [tag, s] : stores)
    if (s && s->kept && s.use_count() == 1) spare_pinned.push_back(std::move(s));
}

void sleeping_allocator::state::recycle(std::vector<std::shared_ptr<host_store>>& stores) {
  if (!options.keep_host_memory) return;
  // One store holds a tag's copies: kept once no entry holds it any more (every share left is in `stores`).
  std::sort(stores.begin(), stores.end());
  for (std::size_t i = 0; i < stores.size();) {
    std::size_t j = i;
    while (j < stores.size() && stores[j] == stores[i]) ++j;
    auto& s = stores[i];
    if (s && s->kind == sleep_policy::offload_pinned && static_cast<std::size_t>(s.use_count()) == j - i) {
      auto keep = s;
      for (std::size_t k = i; k < j; ++k) stores[k].reset();
      keep->prepared_for.clear();  // kept from a wake: any tag's next sleep may take it
      keep->kept = true;
      spare_pinned.push_back(std::move(keep));
    }
    i = j;
  }
}

status sleeping_allocator::state::prepare_pinned(const std::vector<std::string>& tags, const detail::operation& op) {
  // What the next sleep of `tags` copies into a pinned store, per tag (as do_sleep plans it), less what a kept
  // store covers (taken in the order do_sleep takes them: by tag, the smallest that fits).
  copy_plan need;
  {
    std::lock_guard<std::mutex> guard(lock);
    for (const auto& [address, e] : entries)
      if (!e->asleep && !e->moving && selected(*e, tags))
        if (auto copied = plan_copy(need, *e, op); !copied) return std::move(copied).error();
    auto kept = spare_pinned;  // matched as pinned_store will take them
    for (auto& [tag, t] : need) {
      if (t.first.policy != sleep_policy::offload_pinned) t.second = 0;  // its sleep page-locks nothing
      if (t.second == 0) continue;
      if (const std::size_t i = pick_kept(kept, t.second, tag); i != none) {
        kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(i));
        t.second = 0;
      }
    }
  }
  std::vector<std::shared_ptr<host_store>> made;  // dropped, all of them, when one fails
  for (auto& [tag, t] : need) {
    if (t.second == 0) continue;
    auto s = host_store::create(t.first, t.second, register_host, op);
    if (!s) {
      error err = std::move(s).error();
      err.detail = fmt::format("tag '{}': {}", tag, err.detail);
      return err;
    }
    (*s)->prepared_for = tag;
    (*s)->kept = true;
    made.push_back(std::move(s).value());
  }
  std::lock_guard<std::mutex> guard(lock);
  for (auto& s : made) spare_pinned.push_back(std::move(s));
  return {};
}

status sleeping_allocator::prepare_host_memory(const std::vector<std::string>& tags) {
  const detail::operation op{"pvmm::sleeping_allocator::prepare_host_memory"};
  if (!state_) return op.fail(errc::already_released, empty_text);
  return state_->prepare_pinned(tags, op);
}

status sleeping_allocator::trim_host_memory() {
  const detail::operation op{"pvmm::sleeping_allocator::trim_host_memory"};
  if (!state_) return op.fail(errc::already_released, empty_text);
  std::vector<std::shared_ptr<detail::sleeping::host_store>> gone;  // freed after the lock
  std::lock_guard<std::mutex> guard(state_->lock);
  state_->reap_pending();
  gone.swap(state_->spare_pinned);
  return {};
}

}  // namespace pvmm
