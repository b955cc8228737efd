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

result<std::shared_ptr<host_store>> sleeping_allocator::state::pinned_store(const tag_policy& p, std::size_t bytes,
                                                                            const detail::operation& op) {
  {
    std::lock_guard<std::mutex> guard(lock);
    auto best = spare_pinned.end();
    for (auto it = spare_pinned.begin(); it != spare_pinned.end(); ++it)
      if ((*it)->bytes >= bytes && (best == spare_pinned.end() || (*it)->bytes < (*best)->bytes)) best = it;
    if (best != spare_pinned.end()) {
      auto s = std::move(*best);
      spare_pinned.erase(best);
      return s;
    }
  }
  return host_store::create(p, bytes, op);
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
      spare_pinned.push_back(std::move(keep));
    }
    i = j;
  }
}

status sleeping_allocator::state::prepare_pinned(const std::vector<std::string>& tags, const detail::operation& op) {
  // What the next sleep of `tags` copies into a pinned store, per tag (as do_sleep plans it), less what a kept
  // store covers (taken in the order do_sleep takes them: by tag, the smallest that fits).
  std::map<std::string, std::pair<tag_policy, std::size_t>> need;
  {
    std::lock_guard<std::mutex> guard(lock);
    for (const auto& [address, e] : entries) {
      if (e->asleep || e->moving || !selected(*e, tags)) continue;
      auto& t = need[e->tag];
      t.first = policy_of(e->tag);
      if (t.first.policy != sleep_policy::offload_pinned || (e->copy && t.first.retain_host_copy)) continue;
      t.second = e->size > static_cast<std::size_t>(-1) - t.second ? static_cast<std::size_t>(-1) : t.second + e->size;
    }
    std::vector<std::size_t> kept;
    for (const auto& s : spare_pinned) kept.push_back(s->bytes);
    for (auto& [tag, t] : need) {
      auto best = kept.end();
      for (auto it = kept.begin(); it != kept.end(); ++it)
        if (*it >= t.second && (best == kept.end() || *it < *best)) best = it;
      if (t.second && best != kept.end()) kept.erase(best), t.second = 0;
    }
  }
  std::vector<std::shared_ptr<host_store>> made;  // dropped, all of them, when one fails
  for (auto& [tag, t] : need) {
    if (t.second == 0) continue;
    auto s = host_store::create(t.first, t.second, op);
    if (!s) {
      error err = std::move(s).error();
      err.detail = fmt::format("tag '{}': {}", tag, err.detail);
      return err;
    }
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
