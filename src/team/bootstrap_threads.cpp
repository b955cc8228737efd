// The threads adapter: ranks are threads of one process meeting in one shared group. Rounds are keyed by a
// per-rank sequence number, so a fast rank may start the next collective while a slow one still copies out.
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

struct round {
  std::vector<std::vector<std::uint8_t>> data;
  std::vector<bool> arrived;
  int count = 0;
  int left = 0;
};

// One point-to-point message in flight, keyed by (from, to).
struct mailbox {
  std::map<std::pair<int, int>, std::vector<std::vector<std::uint8_t>>> queued;
};

struct thread_group {
  explicit thread_group(int n, std::vector<int> nodes) : size(n), node_of_rank(std::move(nodes)) {}
  const int size;
  const std::vector<int> node_of_rank;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::uint64_t, round> rounds;
  mailbox mail;
  detail::broken_state broken;  // group-wide: one rank's failure or abort fails every rank's next call
};

template <class Ready>
bool wait_for(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, deadline until, Ready ready) {
  if (until == deadline::max()) {
    cv.wait(lock, ready);
    return true;
  }
  return cv.wait_until(lock, until, ready);
}

class thread_bootstrap final : public bootstrap {
 public:
  thread_bootstrap(std::shared_ptr<thread_group> group, int rank)
      : group_(std::move(group)), rank_(rank), position_(detail::position_in_node(group_->node_of_rank, rank)) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return group_->size; }
  int node() const noexcept override { return group_->node_of_rank[rank_]; }
  int local_rank() const noexcept override { return position_.local_rank; }
  int local_size() const noexcept override { return position_.local_size; }

  status allgather(const void* mine, std::size_t bytes, void* all, deadline until) override {
    const std::uint64_t id = sequence_;  // this collective's number
    auto args = [&] { return fmt::format("rank={}, bytes={}, collective={}", rank_, bytes, id); };
    const detail::operation op{"pvmm::bootstrap::allgather (threads)", args};
    if (bytes > 0 && (!mine || !all)) return op.fail(errc::invalid_argument, "mine and all must not be null");
    std::unique_lock<std::mutex> lock(group_->mutex);
    PVMM_TRY(group_->broken.check());
    ++sequence_;
    round& r = group_->rounds[id];
    if (r.data.empty()) {
      r.data.resize(group_->size);
      r.arrived.assign(group_->size, false);
    }
    const auto* in = static_cast<const std::uint8_t*>(mine);
    r.data[rank_].assign(in, in + bytes);
    r.arrived[rank_] = true;
    ++r.count;
    group_->changed.notify_all();
    (void)wait_for(lock, group_->changed, until, [&] { return r.count == group_->size || group_->broken.is_set(); });
    // A collective every rank arrived at has completed, whatever broke the group since (a rank that left it and
    // aborted at once): as with the endpoints and store adapters, its result is delivered.
    if (r.count != group_->size) {
      if (auto broken = group_->broken.check(); !broken) return std::move(broken).error();
      std::vector<int> missing;
      for (int i = 0; i < group_->size; ++i)
        if (!r.arrived[i]) missing.push_back(i);
      auto e = op.fail(errc::timeout, fmt::format("{} did not arrive at collective {} before the deadline",
                                                  detail::rank_list(missing), id));
      group_->changed.notify_all();  // the others fail with the same error now, not at their own deadlines
      return group_->broken.set(std::move(e));
    }
    for (int i = 0; i < group_->size; ++i)
      if (r.data[i].size() != bytes) {
        auto e = op.fail(errc::team_mismatch, fmt::format("rank {} gave {} bytes to collective {}, rank {} gave {}", i,
                                                          r.data[i].size(), id, rank_, bytes));
        group_->broken.set(e);
        group_->changed.notify_all();
        return e;
      }
    auto* out = static_cast<std::uint8_t*>(all);
    for (int i = 0; i < group_->size && bytes > 0; ++i) std::memcpy(out + i * bytes, r.data[i].data(), bytes);
    if (++r.left == group_->size) group_->rounds.erase(id);
    return {};
  }

  status barrier(deadline until) override {
    std::uint8_t one = 1;
    std::vector<std::uint8_t> all(group_->size);
    return allgather(&one, 1, all.data(), until);
  }

  status send(int peer, const void* data, std::size_t bytes, deadline) override {
    auto args = [&] { return fmt::format("rank={}, peer={}, bytes={}", rank_, peer, bytes); };
    const detail::operation op{"pvmm::bootstrap::send (threads)", args};
    if (peer < 0 || peer >= group_->size) return op.fail(errc::invalid_argument, "no such rank");
    std::lock_guard<std::mutex> lock(group_->mutex);
    PVMM_TRY(group_->broken.check());
    const auto* in = static_cast<const std::uint8_t*>(data);
    group_->mail.queued[{rank_, peer}].emplace_back(in, in + bytes);
    group_->changed.notify_all();
    return {};
  }

  status receive(int peer, void* data, std::size_t bytes, deadline until) override {
    auto args = [&] { return fmt::format("rank={}, peer={}, bytes={}", rank_, peer, bytes); };
    const detail::operation op{"pvmm::bootstrap::receive (threads)", args};
    if (peer < 0 || peer >= group_->size) return op.fail(errc::invalid_argument, "no such rank");
    std::unique_lock<std::mutex> lock(group_->mutex);
    auto& queue = group_->mail.queued[{peer, rank_}];
    const bool arrived =
        wait_for(lock, group_->changed, until, [&] { return !queue.empty() || group_->broken.is_set(); });
    PVMM_TRY(group_->broken.check());
    if (!arrived)
      return group_->broken.set(op.fail(errc::timeout, fmt::format("rank {} sent nothing before the deadline", peer)));
    if (queue.front().size() != bytes)
      return group_->broken.set(op.fail(
          errc::team_mismatch, fmt::format("rank {} sent {} bytes, {} expected", peer, queue.front().size(), bytes)));
    if (bytes > 0) std::memcpy(data, queue.front().data(), bytes);
    queue.erase(queue.begin());
    return {};
  }

  void abort() noexcept override {
    try {
      std::lock_guard<std::mutex> lock(group_->mutex);
      const detail::operation op{"pvmm::bootstrap::abort (threads)"};
      group_->broken.set(op.fail(errc::peer_lost, fmt::format("rank {} aborted the group", rank_)));
      group_->changed.notify_all();
    } catch (...) {  // a failed allocation of the message: the abort must still not throw
    }
  }

 private:
  std::shared_ptr<thread_group> group_;
  const int rank_;
  const detail::node_position position_;
  std::uint64_t sequence_ = 0;
};

}  // namespace

result<std::vector<std::shared_ptr<bootstrap>>> make_thread_bootstraps(int size, std::vector<int> node_of_rank) {
  auto args = [&] { return fmt::format("size={}, nodes={}", size, node_of_rank.size()); };
  const detail::operation op{"pvmm::make_thread_bootstraps", args};
  if (size <= 0) return op.fail(errc::invalid_argument, "a group has at least one rank");
  if (node_of_rank.empty()) node_of_rank.assign(size, 0);
  if (static_cast<int>(node_of_rank.size()) != size)
    return op.fail(errc::invalid_argument, fmt::format("{} nodes given for {} ranks", node_of_rank.size(), size));
  auto group = std::make_shared<thread_group>(size, std::move(node_of_rank));
  std::vector<std::shared_ptr<bootstrap>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_shared<thread_bootstrap>(group, r));
  return ranks;
}

}  // namespace pvmm
