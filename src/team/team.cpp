// Team creation: one allgather of every rank's identity, checked for agreement, and the node-local listener.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include <pvmm/device.hpp>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"
#include "team/no_throw.hpp"
#include "team/team_exchange.hpp"
#include "team/team_state.hpp"

namespace pvmm {
namespace detail {

std::string team_state::endpoint_of(int r) const { return fmt::format("pvmm-team-{:016x}-{}", id, r); }

void team_state::adopt(const std::shared_ptr<peer_mappings>& m) {
  {
    const std::lock_guard<std::mutex> hold(mappings_lock);
    mappings.erase(std::remove_if(mappings.begin(), mappings.end(), [](const auto& w) { return w.expired(); }),
                   mappings.end());
    mappings.push_back(m);
  }
  // An abort between this object's last step and here found nothing to unmap: do it now.
  if (aborted.load(std::memory_order_acquire)) m->unmap_peers(aborted_reason(rank()));
}

void team_state::unmap_peers() noexcept {
  std::vector<std::shared_ptr<peer_mappings>> live;
  std::string why;
  try {
    why = aborted_reason(rank());
    const std::lock_guard<std::mutex> hold(mappings_lock);
    for (const auto& w : mappings)
      if (auto m = w.lock()) live.push_back(std::move(m));
  } catch (...) {  // no memory for the list: nothing unmapped here; releasing the objects still gives it all back
    return;
  }
  // Outside the lock: each object takes its own, which a step in progress holds until it sees the abort.
  for (const auto& m : live) m->unmap_peers(why);
}

void team_state::watch_peers() noexcept {
  try {
    const std::lock_guard<std::mutex> hold(watch_lock);
    if (watch_tried) return;
    watch_tried = true;
    const member_record& me = records[rank()];
    std::vector<std::pair<int, std::int64_t>> peers;
    for (const member_record& m : records)
      if (m.rank != me.rank && m.node == me.node && m.pid != me.pid && m.pid_namespace != 0 &&
          m.pid_namespace == me.pid_namespace)
        peers.emplace_back(m.rank, m.pid);
    // The watch outlives no member it reports into (it is the last member, joined first), so `this` is safe there.
    watch = peer_watch::start(peers, [this](int r) {
      std::vector<std::shared_ptr<peer_mappings>> live;
      {
        const std::lock_guard<std::mutex> lock(mappings_lock);
        for (const auto& w : mappings)
          if (auto m = w.lock()) live.push_back(std::move(m));
      }
      for (const auto& m : live) m->peer_exited(r);
      // Letting go of `live` may end this team (the watch's thread then lets go of itself): nothing after it.
    });
  } catch (...) {  // no memory for the list: nothing is watched (the waits keep their deadlines)
  }
}

std::vector<int> team_state::node_ranks() const {
  std::vector<int> out;
  for (const auto& m : members)
    if (m.node == members[rank()].node) out.push_back(m.rank);
  return out;
}

namespace {

// 64 random bits: names this team's endpoints, so two teams on one machine never meet by accident.
std::uint64_t random_id() {
  std::random_device source;
  return (std::uint64_t{source()} << 32) ^ source();
}

void copy_text(char* to, std::size_t capacity, const std::string& text) {
  std::strncpy(to, text.c_str(), capacity - 1);
}

// The handle types this rank's window memory carries: POSIX fds where the backend has them (node-local peers),
// fabric handles where it has them and a peer is on another node.
allocation_properties window_properties(const team_options& o, const device_info& device, bool other_nodes) {
  allocation_properties p;
  p.location = location::device(o.device);
  if (device.capabilities.sharing.posix_fd) p.exportable = p.exportable | handle_types::posix_fd;
  if (other_nodes && device.capabilities.sharing.fabric) p.exportable = p.exportable | handle_types::fabric;
  return p;
}

member_record my_record(const bootstrap& b, const team_options& o, const device_info& device) {
  member_record m;
  m.rank = b.rank();
  m.size = b.size();
  m.node = b.node();
  m.device = o.device;
  m.pid = ::getpid();
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) == 0) m.pid_namespace = ns.st_ino;
  m.team_id = random_id();
  m.secret[0] = random_id();  // names this rank to peers whose pid namespace is not its own
  m.secret[1] = random_id();
  copy_text(m.backend, sizeof m.backend, query_backend().name);
  copy_text(m.identifier, sizeof m.identifier, device.identifier);
  const bool other_nodes = b.local_size() < b.size();
  if (auto g = query_granularity(window_properties(o, device, other_nodes))) m.granularity = g->minimum;
  if (auto g = reservation_granularity()) m.reservation_granularity = *g;
  m.posix_fd = device.capabilities.sharing.posix_fd;
  m.fabric = device.capabilities.sharing.fabric;
  return m;
}

// A record's text field, to its terminating nul (a record without one is refused first).
std::string text_of(const char* field, std::size_t capacity) { return std::string(field, strnlen(field, capacity)); }

// Granularities are powers of two within what any backend uses (CUDA's largest is 2 MiB): anything else is a
// forged or corrupted record, which would fail later as unaligned memory or a stride that wraps.
constexpr std::uint64_t largest_granularity = std::uint64_t{1} << 30;
bool plausible_granularity(std::uint64_t g) { return g != 0 && (g & (g - 1)) == 0 && g <= largest_granularity; }

// Rank `r`'s record on its own: every field a later step trusts is checked here, naming the rank.
status check_member(const member_record& m, std::size_t r, std::size_t n, const operation& op) {
  if (m.magic != member_record::magic_value || m.version != member_record::version_value)
    return op.fail(errc::team_mismatch, fmt::format("rank {} runs team protocol version {} (this is {})", r, m.version,
                                                    member_record::version_value));
  if (m.rank != static_cast<std::int32_t>(r) || m.size != static_cast<std::int32_t>(n))
    return op.fail(errc::team_mismatch, fmt::format("the record in slot {} says rank {} of {}", r, m.rank, m.size));
  std::string bad;
  if (!std::memchr(m.backend, 0, sizeof m.backend) || !std::memchr(m.identifier, 0, sizeof m.identifier))
    bad = "a backend name or device identifier without its terminating nul";
  else if (m.node < 0 || m.device < 0 || m.pid <= 0)
    bad = fmt::format("node {}, device {}, pid {}", m.node, m.device, m.pid);
  else if (!plausible_granularity(m.granularity) || !plausible_granularity(m.reservation_granularity))
    bad = fmt::format("granularities {:#x} and {:#x} (powers of two up to {:#x} expected)", m.granularity,
                      m.reservation_granularity, largest_granularity);
  if (!bad.empty()) return op.fail(errc::protocol_error, fmt::format("rank {}'s identity record has {}", r, bad));
  return {};
}

// Every rank checks every record, so all see the same mismatch and fail alike.
status check_agreement(const std::vector<member_record>& all, const operation& op) {
  const member_record& root = all[0];
  for (std::size_t r = 0; r < all.size(); ++r) {
    const member_record& m = all[r];
    PVMM_TRY(check_member(m, r, all.size(), op));
    if (std::strncmp(m.backend, root.backend, sizeof m.backend) != 0)
      return op.fail(errc::team_mismatch,
                     fmt::format("rank {} runs the {} backend and rank 0 the {} backend", r,
                                 text_of(m.backend, sizeof m.backend), text_of(root.backend, sizeof root.backend)),
                     "build every rank with the same PVMM_BACKEND");
  }
  return {};
}

}  // namespace
}  // namespace detail

team::team(std::shared_ptr<detail::team_state> state) noexcept : state_(std::move(state)) {}

result<team> team::create(std::shared_ptr<bootstrap> ranks, const team_options& options) {
  return detail::no_throw<result<team>>("pvmm::team::create", [&]() -> result<team> {
    // Read now: `ranks` moves into the team state below, and later errors still name the caller's arguments.
    const int rank_arg = ranks ? ranks->rank() : -1, size_arg = ranks ? ranks->size() : -1;
    auto args = [&] {
      return fmt::format("rank={}, size={}, device={}, timeout={}ms", rank_arg, size_arg, options.device,
                         options.timeout.count());
    };
    const detail::operation op{"pvmm::team::create", args};
    if (!ranks) return op.fail(errc::invalid_argument, "no bootstrap given");
    if (options.timeout.count() < 0) return op.fail(errc::invalid_argument, "the timeout is negative");
    const deadline until = deadline_in(options.timeout);
    // A local failure is still announced (its errc in the record), so the other ranks fail at once naming this
    // rank rather than at their deadline.
    auto device = query_device(options.device);
    detail::member_record mine;
    std::optional<error> failed;
    if (!device)
      failed = op.wrap(std::move(device).error());
    else if (mine = detail::my_record(*ranks, options, *device); !mine.granularity || !mine.reservation_granularity)
      failed = op.fail(errc::backend_error, fmt::format("device {} answered no granularity", options.device));
    bool exchanged = false;
    auto gathered = detail::all_gather(*ranks, 0, mine, failed, "allgather identities", until, op, &exchanged);
    if (!gathered && !exchanged) return std::move(gathered).error();  // the bootstrap failed: it tells the peers
    // From here on a failure may be this rank's alone (bytes its bootstrap handed it wrong, a listener that would
    // not open): it travels in a second agreement that closes the step, so every rank fails at once naming it.
    const std::shared_ptr<bootstrap> group = ranks;
    std::shared_ptr<detail::team_state> made;
    auto outcome = [&]() -> status {
      if (!gathered) return std::move(gathered).error();
      const auto& all = *gathered;
      PVMM_TRY(detail::check_agreement(all, op));
      auto state = std::make_shared<detail::team_state>();
      state->ranks = std::move(ranks);
      state->options = options;
      if (state->options.access_devices.empty()) state->options.access_devices = {options.device};
      state->records = all;
      state->id = all[0].team_id;
      state->handles =
          detail::window_properties(options, *device, state->ranks->local_size() < state->size()).exportable;
      for (const auto& m : all)
        state->slot_unit = std::max<std::size_t>({state->slot_unit, m.granularity, m.reservation_granularity});
      std::vector<int> node_ids;  // nodes numbered by their lowest rank
      for (const auto& m : all) {
        int index = 0;
        while (index < static_cast<int>(node_ids.size()) && node_ids[index] != m.node) ++index;
        if (index == static_cast<int>(node_ids.size())) node_ids.push_back(m.node);
      }
      state->node_count = static_cast<int>(node_ids.size());
      const int me = state->rank();
      std::vector<int> seen_on_node(node_ids.size(), 0);
      for (const auto& m : all) {
        team_member t;
        t.rank = m.rank;
        t.node = static_cast<int>(std::find(node_ids.begin(), node_ids.end(), m.node) - node_ids.begin());
        t.local_rank = seen_on_node[t.node]++;
        t.pid = m.pid;
        t.device = m.device;
        state->members.push_back(t);
      }
      for (auto& t : state->members) t.same_device = state->same_device(me, t.rank);
      if (state->node_ranks().size() > 1) {
        auto listening = ipc::listener::listen(state->endpoint_of(me));
        if (!listening) return op.wrap(std::move(listening).error());
        state->listener = std::move(*listening);
      }
      made = std::move(state);
      return {};
    }();
    std::optional<error> late;
    if (!outcome) late = std::move(outcome).error();
    // The closing agreement: every rank's listener exists before any rank makes a window.
    const std::uint8_t nothing = 0;
    auto closed = detail::all_gather(*group, 0, nothing, late, "agree the team is made", until, op);
    if (!closed) return std::move(closed).error();
    return team(std::move(made));
  });
}

status team::release() noexcept { return detail::release_local(state_, "pvmm::team::release", "team"); }

void team::abort() noexcept {
  if (!state_) return;
  state_->aborted.store(true, std::memory_order_release);
  state_->ranks->abort();       // wakes a collective in progress, and tells the other ranks
  detail::tell_abort(*state_);  // a node-local peer waiting in a step's fd ring waits on the team endpoint, not there
  state_->unmap_peers();
}

int team::rank() const noexcept { return state_ ? state_->rank() : -1; }
int team::size() const noexcept { return state_ ? state_->size() : 0; }
int team::device() const noexcept { return state_ ? state_->options.device : -1; }
int team::node_count() const noexcept { return state_ ? state_->node_count : 0; }
const std::vector<team_member>& team::members() const noexcept {
  static const std::vector<team_member> none;  // an empty team's answer; immutable, so safe to share
  return state_ ? state_->members : none;
}
bool team::same_node(int peer) const noexcept {
  return state_ && peer >= 0 && peer < size() && state_->members[peer].node == state_->members[rank()].node;
}
bootstrap& team::ranks() const noexcept { return *state_->ranks; }

}  // namespace pvmm
