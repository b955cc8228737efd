// The threads adapter: ranks are threads of one process meeting in one shared group. Rounds are keyed by the
// collective's number, so a fast rank may start the next collective while a slow one still copies out.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

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

using bytes_t = std::vector<std::uint8_t>;

struct thread_group {
  thread_group(int n, std::vector<int> nodes)
      : size(n), node_of_rank(std::move(nodes)), positions(detail::positions_in_nodes(node_of_rank)) {}
  const int size;
  const std::vector<int> node_of_rank;
  const std::vector<detail::node_position> positions;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::uint64_t, round> rounds;
  std::map<std::tuple<int, int, int>, std::deque<bytes_t>> mail;  // (from, to, tag) -> messages in order
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
  thread_bootstrap(std::shared_ptr<thread_group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return group_->size; }
  int node() const noexcept override { return group_->node_of_rank[rank_]; }
  int local_rank() const noexcept override { return group_->positions[rank_].local_rank; }
  int local_size() const noexcept override { return group_->positions[rank_].local_size; }
  const char* adapter() const noexcept override { return "threads"; }

 private:
  // Fails the group with `e` and wakes every rank, so the others fail with it now, not at their deadlines.
  error fail_group(error e) {
    group_->changed.notify_all();
    return group_->broken.set(std::move(e));
  }

  status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t id, deadline until) override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    PVMM_TRY(group_->broken.check());
    round& r = group_->rounds[id];
    if (r.data.empty()) {  // made whole before it is kept: memory running out leaves no half-made round
      std::vector<std::vector<std::uint8_t>> data(static_cast<std::size_t>(group_->size));
      std::vector<bool> arrived(static_cast<std::size_t>(group_->size), false);
      r.data = std::move(data);
      r.arrived = std::move(arrived);
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
      PVMM_TRY(group_->broken.check());
      std::vector<int> missing;
      for (int i = 0; i < group_->size; ++i)
        if (!r.arrived[i]) missing.push_back(i);
      return fail_group(did_not_arrive(missing, id));
    }
    for (int i = 0; i < group_->size; ++i)
      if (r.data[i].size() != bytes) return fail_group(gave_bytes(i, r.data[i].size(), id, rank_, bytes));
    auto* out = static_cast<std::uint8_t*>(all);
    for (int i = 0; i < group_->size && bytes > 0; ++i) std::memcpy(out + i * bytes, r.data[i].data(), bytes);
    if (++r.left == group_->size) group_->rounds.erase(id);
    return {};
  }

  status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline) override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    PVMM_TRY(group_->broken.check());
    const auto* in = static_cast<const std::uint8_t*>(data);
    group_->mail[{rank_, peer, tag}].emplace_back(in, in + bytes);
    group_->changed.notify_all();
    return {};
  }

  status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until) override {
    const detail::operation op{"pvmm::bootstrap::receive"};
    std::unique_lock<std::mutex> lock(group_->mutex);
    auto& queue = group_->mail[{peer, rank_, tag}];
    const bool arrived =
        wait_for(lock, group_->changed, until, [&] { return !queue.empty() || group_->broken.is_set(); });
    PVMM_TRY(group_->broken.check());
    if (!arrived)
      return fail_group(
          op.fail(errc::timeout, fmt::format("rank {} sent nothing with tag {} before the deadline", peer, tag)));
    if (queue.front().size() != bytes)
      return fail_group(
          op.fail(errc::team_mismatch, fmt::format("rank {} sent {} bytes with tag {}, rank {} expected {}", peer,
                                                   queue.front().size(), tag, rank_, bytes)));
    if (bytes > 0) std::memcpy(data, queue.front().data(), bytes);
    queue.pop_front();
    return {};
  }

  void do_abort() noexcept override {
    try {
      std::lock_guard<std::mutex> lock(group_->mutex);
      (void)fail_group(failed_by(rank_, abort_code()));  // the peers fail with this rank's errc
    } catch (...) {  // a failed allocation of the message: the abort must still not throw
      group_->changed.notify_all();
    }
  }

  std::shared_ptr<thread_group> group_;
  const int rank_;
};

}  // namespace

result<std::vector<std::shared_ptr<bootstrap>>> make_thread_bootstraps(int size, std::vector<int> node_of_rank) {
  auto args = [&] { return fmt::format("size={}, nodes={}", size, node_of_rank.size()); };
  const detail::operation op{"pvmm::make_thread_bootstraps", args};
  try {
    PVMM_TRY(detail::check_rank_arguments(0, size, std::chrono::milliseconds(0), op));
    if (node_of_rank.empty()) node_of_rank.assign(static_cast<std::size_t>(size), 0);
    if (static_cast<int>(node_of_rank.size()) != size)
      return op.fail(errc::invalid_argument, fmt::format("{} nodes given for {} ranks", node_of_rank.size(), size));
    auto group = std::make_shared<thread_group>(size, std::move(node_of_rank));
    std::vector<std::shared_ptr<bootstrap>> ranks;
    ranks.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) ranks.push_back(std::make_shared<thread_bootstrap>(group, r));
    return ranks;
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out for the group");
  }
}

}  // namespace pvmm
