// team::split (MPI_Comm_split, NVSHMEM's team_split_strided): one allgather on the parent team, then a team over a
// sub-bootstrap that maps sub-ranks onto parent ranks and runs its collectives over the parent bootstrap's tagged
// send/receive. No new rendezvous: the parent's transport carries everything, under the parent's deadlines and
// abort.
//
// The sub-bootstrap's allgather: every member sends a fixed header (magic, collective, byte count) and its bytes to
// sub-rank 0 on the sub-team's parent tag; sub-rank 0 checks the headers, drains what each announced, and sends
// every member one fixed result header (its verdict) and, when the counts agreed, the gathered bytes. So a member
// that gives another count is team_mismatch on every member, and the parent bootstrap's receives never see a count
// they did not expect (which would break the parent).
//
// Tags: a sub-team's messages use one parent tag, split_tag_first + 256 * depth + (the split's number % 256), where
// depth is 0 for a split of a team over a user's bootstrap and one more per nested split. Two sub-teams of one split
// share a tag but no pair of ranks; sub-teams of different splits of one team use different tags (up to 256 alive).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>

#include <pvmm/team.hpp>

#include <fmt/format.h>

#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/team_state.hpp"

namespace pvmm {
namespace detail {
namespace {

constexpr int split_tags_per_depth = 256;
constexpr int split_max_depth = 8;  // split_tag_first + 8 * 256 stays below 32767, the least MPI_TAG_UB

struct split_header {
  static constexpr std::uint32_t magic_value = 0x53545650;  // "PVTS"
  std::uint32_t magic = magic_value;
  std::int32_t failed = 0;  // result only: the errc the root saw (0: none)
  std::uint64_t collective = 0;
  std::uint64_t bytes = 0;  // a member's count; in a result, the count the root agreed
  char failure[160] = {};   // result only: what the root saw
};

// A bootstrap over some ranks of a parent bootstrap (sub-rank i is parent rank members[i]).
class split_bootstrap final : public bootstrap {
 public:
  split_bootstrap(std::shared_ptr<bootstrap> parent, std::vector<int> members, std::vector<int> nodes, int depth,
                  int tag)
      : parent_(std::move(parent)), members_(std::move(members)), nodes_(std::move(nodes)), depth_(depth), tag_(tag) {
    rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), parent_->rank()) - members_.begin());
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (nodes_[i] != nodes_[rank_]) continue;
      if (static_cast<int>(i) < rank_) ++local_rank_;
      ++local_size_;
    }
    name_ = fmt::format("split of {}", parent_->adapter());
  }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(members_.size()); }
  int node() const noexcept override { return nodes_[rank_]; }
  int local_rank() const noexcept override { return local_rank_; }
  int local_size() const noexcept override { return local_size_; }
  const char* adapter() const noexcept override { return name_.c_str(); }
  int depth() const noexcept { return depth_; }

 private:
  // The parent's error for sub-rank `r`, naming it in both numberings.
  error about(int r, error e) const {
    e.detail = fmt::format("sub-team rank {} (parent rank {}): {}", r, members_[r], e.detail);
    return e;
  }
  status send_to(int r, const void* data, std::size_t bytes, deadline until) {
    return send_tagged(r, tag_, data, bytes, until);
  }
  status receive_from(int r, void* data, std::size_t bytes, deadline until) {
    return do_receive(r, tag_, data, bytes, until);
  }

  status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t collective,
                      deadline until) override {
    auto* out = static_cast<unsigned char*>(all);
    if (bytes > 0) std::memcpy(out + static_cast<std::size_t>(rank_) * bytes, mine, bytes);
    if (rank_ != 0) return member_gather(mine, bytes, out, collective, until);
    return root_gather(bytes, out, collective, until);
  }

  status member_gather(const void* mine, std::size_t bytes, unsigned char* out, std::uint64_t collective,
                       deadline until) {
    split_header h;
    h.collective = collective;
    h.bytes = bytes;
    PVMM_TRY(send_to(0, &h, sizeof h, until));
    if (bytes > 0) PVMM_TRY(send_to(0, mine, bytes, until));
    split_header result;
    PVMM_TRY(receive_from(0, &result, sizeof result, until));
    if (result.magic != split_header::magic_value || result.collective != collective ||
        !std::memchr(result.failure, 0, sizeof result.failure)) {
      error e;
      e.code = errc::protocol_error;
      e.detail = fmt::format("sub-team rank 0 (parent rank {}) answered collective {} with a malformed result",
                             members_[0], collective);
      return e;
    }
    if (result.failed != 0) {
      error e;
      e.code = peer_errc(result.failed);
      e.detail = fmt::format("sub-team rank 0 (parent rank {}) refused collective {}: {}", members_[0], collective,
                             result.failure);
      return e;
    }
    if (result.bytes != bytes) return gave_bytes(0, result.bytes, collective, rank_, bytes);
    std::vector<unsigned char> gathered(bytes * members_.size());
    if (!gathered.empty()) PVMM_TRY(receive_from(0, gathered.data(), gathered.size(), until));
    for (std::size_t r = 0; r < members_.size(); ++r)
      if (static_cast<int>(r) != rank_) std::memcpy(out + r * bytes, gathered.data() + r * bytes, bytes);
    return {};
  }

  status root_gather(std::size_t bytes, unsigned char* out, std::uint64_t collective, deadline until) {
    std::optional<error> refused;
    std::vector<unsigned char> scratch;
    for (int r = 1; r < size(); ++r) {
      split_header h;
      PVMM_TRY(receive_from(r, &h, sizeof h, until));
      if (h.magic != split_header::magic_value || h.collective != collective) {
        error e;
        e.code = errc::protocol_error;
        e.detail = fmt::format("sub-team rank {} (parent rank {}) sent no header of collective {}", r, members_[r],
                               collective);
        return e;  // its stream is out of step: nothing more can be read from it
      }
      if (h.bytes == bytes) {
        if (bytes > 0) PVMM_TRY(receive_from(r, out + static_cast<std::size_t>(r) * bytes, bytes, until));
        continue;
      }
      if (!refused) refused = gave_bytes(r, h.bytes, collective, 0, bytes);
      if (h.bytes > (std::size_t{1} << 30)) return *refused;  // not drained: the member fails at its deadline
      // Drained, in step, through one bounded buffer: what a member announces never sizes an allocation.
      scratch.resize(std::min<std::size_t>(h.bytes, 64 * 1024));
      for (std::uint64_t left = h.bytes; left > 0;) {
        const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(left, scratch.size()));
        PVMM_TRY(receive_from(r, scratch.data(), piece, until));
        left -= piece;
      }
    }
    split_header result;
    result.collective = collective;
    result.bytes = bytes;
    if (refused) {
      result.failed = static_cast<std::int32_t>(refused->code);
      std::strncpy(result.failure, refused->detail.c_str(), sizeof result.failure - 1);
    }
    for (int r = 1; r < size(); ++r) {
      PVMM_TRY(send_to(r, &result, sizeof result, until));
      if (!refused && bytes > 0) PVMM_TRY(send_to(r, out, bytes * members_.size(), until));
    }
    if (refused) return *refused;
    return {};
  }

  // Point-to-point messages travel as the parent's, to the parent rank, with the same tag: a sub-team shares its
  // parent's tag space (team::split_tag_first). A nested split's tags (depth > 0) pass through here.
  status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline until) override {
    return send_tagged(peer, tag, data, bytes, until);
  }
  status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until) override {
    auto got = parent_->receive(members_[peer], tag, data, bytes, until);
    if (!got) return about(peer, std::move(got).error());
    return {};
  }
  status send_tagged(int peer, int tag, const void* data, std::size_t bytes, deadline until) {
    auto sent = parent_->send(members_[peer], tag, data, bytes, until);
    if (!sent) return about(peer, std::move(sent).error());
    return {};
  }

  // A sub-team shares its parent's transport: giving up on one gives up on both (it is the one way to wake a
  // member waiting in the parent's receive).
  void do_abort() noexcept override { parent_->abort(); }

  std::shared_ptr<bootstrap> parent_;
  std::vector<int> members_, nodes_;
  int depth_ = 0, tag_ = 0, rank_ = 0, local_rank_ = 0, local_size_ = 0;
  std::string name_;
};

// What every rank of the parent says at a split (fixed layout).
struct split_record {
  std::int32_t color = 0;
  std::int32_t key = 0;
  std::int32_t node = 0;
  std::int32_t reserved = 0;
};

}  // namespace
}  // namespace detail

result<team> team::split(int color, int key, std::chrono::milliseconds timeout) {
  auto args = [&] {
    return fmt::format("rank={}, color={}, key={}, timeout={}ms", rank(), color, key, timeout.count());
  };
  const detail::operation op{"pvmm::team::split", args};
  return detail::no_throw<result<team>>(op.name(), [&]() -> result<team> {
    if (!state_) return op.fail(errc::already_released, "this team is empty (released or moved from)");
    detail::team_state& t = *state_;
    // A refused timeout still takes part under the default bound: every rank fails with invalid_argument naming
    // this one, whatever the order the ranks arrive in.
    const deadline until = deadline_in(timeout.count() < 0 ? std::chrono::milliseconds(30000) : timeout);
    const auto* parent_split = dynamic_cast<const detail::split_bootstrap*>(t.ranks.get());
    const int depth = parent_split ? parent_split->depth() + 1 : 0;
    std::optional<error> refused;  // still taking part, so every rank fails at once naming this one
    if (auto bad = detail::check_timeout(timeout, "timeout", op); !bad)
      refused = op.fail(errc::invalid_argument, fmt::format("rank {}: {}", rank(), bad.error().detail));
    else if (depth >= detail::split_max_depth)
      refused = op.fail(errc::not_supported,
                        fmt::format("rank {}: sub-teams nest at most {} deep", rank(), detail::split_max_depth));
    PVMM_TRY(detail::check_aborted(t, op));
    const detail::split_record mine{color < 0 ? -1 : color, key, t.ranks->node(), 0};
    bool exchanged = false;
    auto all = detail::all_gather(*t.ranks, t.next_step++, mine, refused, "allgather colors", until, op, &exchanged);
    if (!all && !exchanged) return std::move(all).error();  // the bootstrap failed: it tells the peers
    // A failure in what this rank received (its bootstrap handed it wrong bytes) may be its alone: it travels in
    // the agreement below, so every rank fails at once naming it.
    if (!all) {
      const std::optional<error> wrong = all.error();
      ++t.splits;
      auto closed = detail::agree(t, t.next_step++, wrong, "sub-team bootstraps made", until, op);
      if (!closed) return std::move(closed).error();  // this rank's own failure (agree answers it first)
      return *wrong;
    }
    const std::uint32_t serial = t.splits++;
    // This rank's sub-team bootstrap, made before a second agreement of every parent rank closes the step: a rank
    // that could not make it (memory) fails every rank alike, and none goes on to the sub-team's creation alone.
    std::shared_ptr<bootstrap> sub;
    auto made_sub = detail::no_throw<status>(op.name(), [&]() -> status {
      if (color < 0) return {};
      std::vector<int> members;
      for (int r = 0; r < size(); ++r)
        if ((*all)[r].color == color) members.push_back(r);
      std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return (*all)[a].key < (*all)[b].key; });
      std::vector<int> nodes;
      for (int r : members) nodes.push_back((*all)[r].node);
      const int tag = split_tag_first + detail::split_tags_per_depth * depth +
                      static_cast<int>(serial % detail::split_tags_per_depth);
      sub = std::make_shared<detail::split_bootstrap>(t.ranks, std::move(members), std::move(nodes), depth, tag);
      return {};
    });
    std::optional<error> failed;
    if (!made_sub) failed = std::move(made_sub).error();
    PVMM_TRY(detail::agree(t, t.next_step++, failed, "sub-team bootstraps made", until, op));
    if (color < 0) return team();
    team_options o = t.options;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    o.timeout = std::max(left, std::chrono::milliseconds(0));
    auto made = team::create(std::move(sub), o);
    if (!made) return op.wrap(std::move(made).error());
    return made;
  });
}

}  // namespace pvmm
