// The store adapter: ranks meet through a key-value store the caller provides (torch's c10d Store, etcd-like).
// Collective n publishes "<prefix>/<n>/<rank>" and reads every other rank's key. Waits are sliced so an abort
// published under "<prefix>/abort" is seen within a slice, not at the deadline.
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

constexpr auto slice = std::chrono::milliseconds(50);

class store_bootstrap final : public bootstrap {
 public:
  store_bootstrap(key_value_store store, std::string prefix, int rank, int size)
      : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return nodes_[rank_]; }
  int local_rank() const noexcept override { return detail::position_in_node(nodes_, rank_).local_rank; }
  int local_size() const noexcept override { return detail::position_in_node(nodes_, rank_).local_size; }

  status find_nodes(int node, deadline until) {
    std::vector<std::uint64_t> keys(size_);
    const std::uint64_t mine = detail::node_key(node);
    PVMM_TRY(allgather(&mine, sizeof mine, keys.data(), until));
    nodes_ = detail::number_nodes(keys);
    return {};
  }

  status allgather(const void* mine, std::size_t bytes, void* all, deadline until) override {
    const std::uint64_t id = sequence_;  // this collective's number
    auto args = [&] {
      return fmt::format("prefix=\"{}\", rank={}, bytes={}, collective={}", prefix_, rank_, bytes, id);
    };
    const detail::operation op{"pvmm::bootstrap::allgather (store)", args};
    if (bytes > 0 && (!mine || !all)) return op.fail(errc::invalid_argument, "mine and all must not be null");
    PVMM_TRY(broken_.check());
    ++sequence_;
    const auto* in = static_cast<const std::uint8_t*>(mine);
    if (auto ok = store_.set(key(id, rank_), std::vector<std::uint8_t>(in, in + bytes)); !ok)
      return broken_.set(op.wrap(std::move(ok).error()));
    auto* out = static_cast<std::uint8_t*>(all);
    for (int r = 0; r < size_; ++r) {
      auto value = wait_for_key(key(id, r), until, op);
      if (!value) {
        if (value.code() != errc::timeout) return broken_.set(std::move(value).error());
        std::vector<int> missing{r};  // name every rank still missing, not only the first
        for (int q = r + 1; q < size_; ++q)
          if (!store_.get(key(id, q), std::chrono::steady_clock::now())) missing.push_back(q);
        return broken_.set(op.fail(errc::timeout, fmt::format("{} did not arrive at collective {} before the deadline",
                                                              detail::rank_list(missing), id)));
      }
      if (value->size() != bytes)
        return broken_.set(op.fail(errc::team_mismatch, fmt::format("rank {} gave {} bytes to collective {}, rank {} "
                                                                    "gave {}",
                                                                    r, value->size(), id, rank_, bytes)));
      if (bytes > 0) std::memcpy(out + r * bytes, value->data(), bytes);
    }
    return {};
  }

  status barrier(deadline until) override {
    std::uint8_t one = 1;
    std::vector<std::uint8_t> all(size_);
    return allgather(&one, 1, all.data(), until);
  }

  void abort() noexcept override {
    try {
      const detail::operation op{"pvmm::bootstrap::abort (store)"};
      const std::string text = fmt::format("rank {} aborted", rank_);
      broken_.set(op.fail(errc::peer_lost, text));
      (void)store_.set(prefix_ + "/abort", std::vector<std::uint8_t>(text.begin(), text.end()));
    } catch (...) {  // the store threw or memory ran out: this rank is aborted already
    }
  }

 private:
  std::string key(std::uint64_t id, int r) const { return fmt::format("{}/{}/{}", prefix_, id, r); }

  result<std::vector<std::uint8_t>> wait_for_key(const std::string& k, deadline until, const detail::operation& op) {
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      const deadline step = until - now > slice ? now + slice : until;
      auto value = store_.get(k, step);
      if (value || value.code() != errc::timeout) return value;
      if (auto aborted = store_.get(prefix_ + "/abort", std::chrono::steady_clock::now()))
        return op.fail(errc::peer_lost, std::string(aborted->begin(), aborted->end()));
      if (step == until) return value;
    }
  }

  key_value_store store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::vector<int> nodes_;
  std::uint64_t sequence_ = 0;
  detail::broken_state broken_;
};

struct memory_store_state {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::vector<std::uint8_t>> values;
};

}  // namespace

result<std::shared_ptr<bootstrap>> make_store_bootstrap(key_value_store store, std::string prefix, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const bootstrap_options& options) {
  auto args = [&] {
    return fmt::format("prefix=\"{}\", rank={}, size={}, timeout={}ms", prefix, rank, size, timeout.count());
  };
  const detail::operation op{"pvmm::make_store_bootstrap", args};
  PVMM_TRY(detail::check_rank_arguments(rank, size, timeout, op));
  if (!store.set || !store.get) return op.fail(errc::invalid_argument, "the store needs both set and get");
  auto self = std::make_shared<store_bootstrap>(std::move(store), std::move(prefix), rank, size);
  PVMM_TRY(self->find_nodes(options.node, deadline_in(timeout)));
  return std::shared_ptr<bootstrap>(std::move(self));
}

key_value_store make_memory_store() {
  auto state = std::make_shared<memory_store_state>();
  key_value_store s;
  s.set = [state](const std::string& key, const std::vector<std::uint8_t>& value) -> status {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->values[key] = value;
    state->changed.notify_all();
    return {};
  };
  s.get = [state](const std::string& key, deadline until) -> result<std::vector<std::uint8_t>> {
    std::unique_lock<std::mutex> lock(state->mutex);
    auto present = [&] { return state->values.count(key) > 0; };
    const bool found = until == deadline::max() ? (state->changed.wait(lock, present), true)
                                                : state->changed.wait_until(lock, until, present);
    if (!found) {
      const detail::operation op{"pvmm::memory_store::get"};
      return op.fail(errc::timeout, fmt::format("key \"{}\" was not set before the deadline", key));
    }
    return state->values[key];
  };
  return s;
}

}  // namespace pvmm
