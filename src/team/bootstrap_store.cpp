// The store adapter: ranks meet through a key-value store the caller provides (torch's c10d Store, etcd-like).
// Collective n publishes "<prefix>/<n>/<rank>" and reads every other rank's key; message n from rank a to rank b
// with tag t is "<prefix>/p2p/<a>/<b>/<t>/<n>". Waits are sliced so an abort published under "<prefix>/abort" is
// seen within a slice, not at the deadline.
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

constexpr auto slice = std::chrono::milliseconds(50);

// The abort key's value: who aborted, with which errc (0, as older records hold: peer_lost), and the first
// collective it had not completed (collectives before it stay completed on every rank, as in the other adapters).
struct abort_record {
  std::int32_t rank = 0;
  std::int32_t code = 0;
  std::uint64_t collective = 0;
};

class store_bootstrap final : public detail::placed_bootstrap {
 public:
  store_bootstrap(key_value_store store, std::string prefix, int rank, int size)
      : placed_bootstrap(rank, size), store_(std::move(store)), prefix_(std::move(prefix)) {}

  const char* adapter() const noexcept override { return "store"; }

  status find_nodes(int node, deadline until) {
    std::vector<std::uint64_t> keys(size_);
    const std::uint64_t mine = detail::node_key(node);
    PVMM_TRY(allgather(&mine, sizeof mine, keys.data(), until));
    nodes_ = detail::number_nodes(keys);
    place_ranks();
    return {};
  }

 private:
  status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t id, deadline until) override {
    const auto* in = static_cast<const std::uint8_t*>(mine);
    PVMM_TRY(store_.set(key(id, rank_), std::vector<std::uint8_t>(in, in + bytes)));
    auto* out = static_cast<std::uint8_t*>(all);
    for (int r = 0; r < size_; ++r) {
      PVMM_TRY_ASSIGN(value, wait_for_key(key(id, r), until));
      if (!value) {
        std::vector<int> missing{r};  // name every rank still missing, not only the first
        for (int q = r + 1; q < size_; ++q)
          if (!store_.get(key(id, q), std::chrono::steady_clock::now())) missing.push_back(q);
        return did_not_arrive(missing, id);
      }
      if (value->size() != bytes) return gave_bytes(r, value->size(), id, rank_, bytes);
      if (bytes > 0) std::memcpy(out + r * bytes, value->data(), bytes);
    }
    // A rank that aborted inside this collective fails it on every rank that looks after, even where every key
    // arrived (it published its own before it gave up).
    return check_abort(id);
  }

  status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline) override {
    const auto* in = static_cast<const std::uint8_t*>(data);
    const std::uint64_t n = sent_[{peer, tag}]++;
    return store_.set(p2p_key(rank_, peer, tag, n), std::vector<std::uint8_t>(in, in + bytes));
  }

  status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until) override {
    const detail::operation op{"pvmm::bootstrap::receive"};
    std::uint64_t& n = received_[{peer, tag}];
    PVMM_TRY_ASSIGN(value, wait_for_key(p2p_key(peer, rank_, tag, n), until));
    if (!value) {
      return op.fail(errc::timeout, fmt::format("rank {} sent nothing with tag {} before the deadline", peer, tag));
    }
    if (value->size() != bytes)
      return op.fail(errc::team_mismatch, fmt::format("rank {} sent {} bytes with tag {}, rank {} expected {}", peer,
                                                      value->size(), tag, rank_, bytes));
    if (bytes > 0) std::memcpy(data, value->data(), bytes);
    ++n;
    return {};
  }

  void do_abort() noexcept override {
    try {
      abort_record a;
      a.rank = rank_;
      a.code = static_cast<std::int32_t>(abort_code());
      a.collective = collectives_completed();
      const auto* p = reinterpret_cast<const std::uint8_t*>(&a);
      (void)store_.set(abort_key(), std::vector<std::uint8_t>(p, p + sizeof a));
    } catch (...) {  // the store threw or memory ran out: this rank is aborted already
    }
  }

  std::string key(std::uint64_t id, int r) const { return fmt::format("{}/{}/{}", prefix_, id, r); }
  std::string p2p_key(int from, int to, int tag, std::uint64_t n) const {
    return fmt::format("{}/p2p/{}/{}/{}/{}", prefix_, from, to, tag, n);
  }
  std::string abort_key() const { return prefix_ + "/abort"; }

  // The aborting rank's failure (its errc, checked: a value no errc has is protocol_error) when one aborted before
  // completing collective `before` (every collective when `before` is the largest number).
  status check_abort(std::uint64_t before = UINT64_MAX) {
    auto value = store_.get(abort_key(), std::chrono::steady_clock::now());
    if (!value) return {};
    const detail::operation op{"pvmm::bootstrap (store)"};
    abort_record a;
    if (value->size() != sizeof a)
      return op.fail(errc::protocol_error,
                     fmt::format("the abort key holds {} bytes, not {}", value->size(), sizeof a));
    std::memcpy(&a, value->data(), sizeof a);
    if (a.rank < 0 || a.rank >= size_)
      return op.fail(errc::protocol_error, fmt::format("the abort key names rank {} of {}", a.rank, size_));
    if (a.collective > before) return {};
    return failed_by(a.rank, a.code == 0 ? errc::peer_lost : detail::peer_errc(a.code));
  }

  // Waits in slices, so an abort is seen within one slice, not at the deadline. Empty: the deadline passed without
  // the key; an error: the store's, or a peer's abort (whose errc may be timeout too: kept apart from the empty).
  result<std::optional<std::vector<std::uint8_t>>> wait_for_key(const std::string& k, deadline until) {
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      const deadline step = until - now > slice ? now + slice : until;
      auto value = store_.get(k, step);
      if (value) return std::optional<std::vector<std::uint8_t>>(std::move(*value));
      if (value.code() != errc::timeout) return std::move(value).error();
      PVMM_TRY(check_abort());
      if (step == until) return std::optional<std::vector<std::uint8_t>>();
    }
  }

  key_value_store store_;
  std::string prefix_;
  std::map<std::pair<int, int>, std::uint64_t> sent_, received_;  // (peer, tag) -> messages so far
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
  try {
    auto self = std::make_shared<store_bootstrap>(std::move(store), std::move(prefix), rank, size);
    PVMM_TRY(self->find_nodes(options.node, deadline_in(timeout)));
    return std::shared_ptr<bootstrap>(std::move(self));
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out for the bootstrap");
  }
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
