// Messages between the ranks of one node over the team's endpoints (a header and at most one fd), and the
// agreement every collective step ends with. Shared by windows and multicast.
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "sharing/endpoint_path.hpp"
#include "team/bootstrap_common.hpp"
#include "team/team_exchange.hpp"
#include "team/team_state.hpp"

namespace pvmm::detail {

bool team_state::same_process(int a, int b) const {
  const member_record& x = records[a];
  const member_record& y = records[b];
  return x.node == y.node && x.pid_namespace == y.pid_namespace && x.pid == y.pid;
}

bool team_state::same_device(int a, int b) const {
  const member_record& x = records[a];
  const member_record& y = records[b];
  if (x.node != y.node) return false;
  // Without a device identifier (a host backend that could not read the boot id), only ranks of one process are
  // known to name one device alike.
  if (x.identifier[0] == 0 || y.identifier[0] == 0) return x.pid == y.pid && x.device == y.device;
  return std::strncmp(x.identifier, y.identifier, sizeof x.identifier) == 0;
}

std::vector<int> team_state::exited(const std::vector<int>& candidates) const {
  const member_record& me = records[rank()];
  std::vector<int> out;
  for (int r : candidates) {
    const member_record& m = records[r];
    if (m.pid == me.pid || m.node != me.node || m.pid_namespace == 0 || m.pid_namespace != me.pid_namespace) continue;
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(m.pid), 0));
    if (pidfd < 0) {
      if (errno == ESRCH) out.push_back(r);  // gone and reaped
      continue;                              // or no pidfds here (Linux < 5.3): the deadline decides
    }
    pollfd p{pidfd, POLLIN, 0};
    const bool gone = ::poll(&p, 1, 0) == 1;  // a pidfd is readable once its process has exited
    ::close(pidfd);
    if (gone) out.push_back(r);
  }
  return out;
}

namespace {
// How often a wait on a peer looks whether the peer's process is still there.
constexpr std::chrono::milliseconds liveness_slice{100};
// A rank sends its message as soon as it is connected: a connection not known by its pid (a rank of another pid
// namespace, or a stranger) that sent nothing in this long is a stranger's, dropped so the real peer is served.
constexpr std::chrono::milliseconds identify_bound{2000};

// Whether rank `r`'s pid means the same here (an unknown namespace, 0, is not known to).
bool pid_means_same(const team_state& t, int r) {
  const std::uint64_t ns = t.records[r].pid_namespace;
  return ns != 0 && ns == t.records[t.rank()].pid_namespace;
}

// "rank 2 (pid 1234)", the pid as the rank's kernel gave it.
std::string who(const team_state& t, int r) {
  return fmt::format("rank {} (pid {}{})", r, t.records[r].pid, pid_means_same(t, r) ? "" : " in its pid namespace");
}

std::string who(const team_state& t, const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + who(t, r);
  return out.empty() ? "no rank" : out;
}

// An endpoint's error, said as rank `r`'s.
error about(const team_state& t, int r, error e, const operation& op) {
  e.detail = fmt::format("{}: {}", who(t, r), e.detail);
  return op.wrap(std::move(e));
}

error exited_while_waiting(const team_state& t, const std::vector<int>& gone, const char* what, std::uint32_t step,
                           const operation& op) {
  return op.fail(errc::peer_lost, fmt::format("{} exited while this rank waited for {} {} (team step {})", who(t, gone),
                                              gone.size() == 1 ? "its" : "their", what, step));
}

// What a stranger's connection was, for the error should the step still fail.
struct stranger_notes {
  int count = 0;
  std::string last;
  void add(std::string why) {
    ++count;
    last = std::move(why);
  }
  std::string text() const {
    return count == 0 ? std::string()
                      : fmt::format(" ({} connection(s) from no rank dropped; the last: {})", count, last);
  }
};

// One accepted connection's verdict: a checked message, or a stranger (`stranger` says why), or an error.
struct verdict {
  std::optional<received_message> message;
  std::string stranger;
};

// The node-local ranks (not this one) whose pid, in this pid namespace, is `pid`.
std::vector<int> ranks_with_pid(const team_state& t, std::int64_t pid) {
  std::vector<int> out;
  for (int r : t.node_ranks())
    if (r != t.rank() && pid_means_same(t, r) && t.records[r].pid == pid) out.push_back(r);
  return out;
}

bool any_other_namespace(const team_state& t) {
  const auto node = t.node_ranks();
  return std::any_of(node.begin(), node.end(), [&](int r) { return r != t.rank() && !pid_means_same(t, r); });
}

// Judges connection `c`: its SO_PEERCRED pid names the ranks it may be (`senders`); where none, only a rank of
// another pid namespace may be behind it, and its message must carry that rank's secret.
result<verdict> judge(const team_state& t, const ipc::connection& c, std::uint32_t step,
                      const std::vector<int>& waiting, const char* what, deadline until, const operation& op) {
  auto credentials = c.peer();
  if (!credentials) return op.wrap(std::move(credentials).error());
  const ipc::peer_credentials cred = *credentials;
  const std::vector<int> senders = ranks_with_pid(t, cred.pid);
  const bool known = !senders.empty();
  if (!known && !any_other_namespace(t)) return verdict{{}, fmt::format("pid {} is no rank's", cred.pid)};
  // A known rank's message is awaited in slices too: this rank's abort, or the sender's exit, cuts the wait.
  const deadline give_up = known ? until : std::min(until, later(std::chrono::steady_clock::now(), identify_bound));
  auto got = c.receive(1, sizeof(team_message), std::min(time_left(give_up), liveness_slice));
  while (!got && got.code() == errc::timeout && time_left(give_up).count() > 0) {
    PVMM_TRY(check_aborted(t, op));
    if (known)
      if (const auto gone = t.exited(senders); !gone.empty()) return exited_while_waiting(t, gone, what, step, op);
    got = c.receive(1, sizeof(team_message), std::min(time_left(give_up), liveness_slice));
  }
  if (!got && !known) return verdict{{}, fmt::format("pid {} sent nothing: {}", cred.pid, got.error().detail)};
  if (!got) {
    error e = std::move(got).error();
    e.detail = fmt::format("{} connected for team step {}: {}", who(t, senders), step, e.detail);
    return op.wrap(std::move(e));
  }
  // What is wrong with a message: a stranger's where no rank has the sender's pid, else the rank's own fault.
  auto wrong = [&](std::string why) -> result<verdict> {
    if (!known) return verdict{{}, fmt::format("pid {}: {}", cred.pid, why)};
    return op.fail(errc::protocol_error, fmt::format("{} sent {}", who(t, senders), why));
  };
  received_message out;
  team_message& m = out.header;
  if (got->payload.size() != sizeof m) return wrong(fmt::format("{} bytes, not a team message", got->payload.size()));
  std::memcpy(&m, got->payload.data(), sizeof m);
  if (m.magic != team_message::magic_value || m.team_id != t.id || (m.step != step && m.step != m.abort_step))
    return wrong(fmt::format("a message for team {:x} step {} (expected {:x} step {})", m.team_id, m.step, t.id, step));
  const auto node = t.node_ranks();
  if (m.rank == t.rank() || std::find(node.begin(), node.end(), m.rank) == node.end())
    return wrong(fmt::format("a message as rank {}, no peer on this node", m.rank));
  const bool claimed =
      known ? std::find(senders.begin(), senders.end(), m.rank) != senders.end() : !pid_means_same(t, m.rank);
  if (!claimed || m.secret[0] != t.records[m.rank].secret[0] || m.secret[1] != t.records[m.rank].secret[1])
    return wrong(fmt::format("a message as {} without being it", who(t, m.rank)));
  if (m.step == m.abort_step) return op.fail(errc::peer_lost, aborted_reason(m.rank));  // any node-local rank's
  if (std::find(waiting.begin(), waiting.end(), m.rank) == waiting.end())
    return op.fail(errc::protocol_error,
                   fmt::format("{} sent a {} it was not asked for (twice)", who(t, m.rank), what));
  if ((m.has_fd != 0) != (got->fds.size() == 1))
    return op.fail(errc::protocol_error,
                   fmt::format("{} announced {} fd and sent {}", who(t, m.rank), m.has_fd, got->fds.size()));
  if (m.has_fd) out.fd = std::move(got->fds[0]);
  return verdict{std::move(out), {}};
}
}  // namespace

std::string aborted_reason(int rank) { return fmt::format("rank {} aborted its team (team::abort)", rank); }

status check_aborted(const team_state& t, const operation& op) {
  if (!t.aborted.load(std::memory_order_acquire)) return {};
  return op.fail(errc::peer_lost, aborted_reason(t.rank()));
}

void tell_abort(const team_state& t) noexcept {
  if (!t.listener.valid()) return;  // no node-local peer
  try {
    team_message m;
    m.step = team_message::abort_step;
    m.team_id = t.id;
    m.rank = t.rank();
    m.failed = static_cast<std::int32_t>(errc::peer_lost);
    m.secret[0] = t.records[t.rank()].secret[0];
    m.secret[1] = t.records[t.rank()].secret[1];
    for (int to : t.node_ranks()) {
      if (to == t.rank()) continue;
      ipc::peer_rule rule = ipc::peer_rule::same_user();
      if (pid_means_same(t, to)) rule.pid = static_cast<pid_t>(t.records[to].pid);
      // One attempt, no wait: a fresh connection's first small message fits its buffer.
      if (auto c = ipc::connect(t.endpoint_of(to), std::chrono::milliseconds(0), rule))
        (void)c->send(nullptr, 0, &m, sizeof m, std::chrono::milliseconds(0));
    }
  } catch (...) {  // memory ran out for a name or an error's text: the bootstrap still tells the peers
  }
}

status send_message(const team_state& t, int to, team_message m, int fd, deadline until, const operation& op) {
  m.team_id = t.id;
  m.rank = t.rank();
  m.has_fd = fd >= 0;
  m.secret[0] = t.records[t.rank()].secret[0];
  m.secret[1] = t.records[t.rank()].secret[1];
  // Only `to`'s process gets the message and fd: its pid where it means the same here, else its user.
  ipc::peer_rule rule = ipc::peer_rule::same_user();
  if (pid_means_same(t, to)) rule.pid = static_cast<pid_t>(t.records[to].pid);
  // Every listener existed at the team's creation: while `to`'s is not answering, look whether it exited.
  PVMM_TRY(check_aborted(t, op));
  for (;;) {
    auto c = ipc::connect(t.endpoint_of(to), std::min(time_left(until), liveness_slice), rule);
    if (c) {
      auto sent = c->send(&fd, fd >= 0 ? 1 : 0, &m, sizeof m, time_left(until));
      if (!sent) return about(t, to, std::move(sent).error(), op);
      return {};
    }
    if (c.code() != errc::timeout) return about(t, to, std::move(c).error(), op);
    PVMM_TRY(check_aborted(t, op));
    if (!t.exited({to}).empty()) return exited_while_waiting(t, {to}, "connection", m.step, op);
    // Its listener lives as long as its team: gone means it released (or aborted and left) its team.
    if (ipc::probe::nobody_listens(t.endpoint_of(to)))
      return op.fail(errc::peer_lost, fmt::format("{} left the team (its team endpoint is gone) before team step {}",
                                                  who(t, to), m.step));
    if (time_left(until).count() == 0)
      return op.fail(errc::timeout, fmt::format("{}'s team endpoint accepted no connection for team step {} before "
                                                "the deadline",
                                                who(t, to), m.step));
  }
}

result<received_message> receive_message(team_state& t, std::uint32_t step, const std::vector<int>& waiting,
                                         const char* what, deadline until, const operation& op) {
  // Accepts in slices; between them a rank whose process exited is peer_lost at once, not at the deadline. A
  // stranger's connection is dropped (another user's by accept itself) and the wait goes on.
  stranger_notes strangers;
  for (;;) {
    auto accepted = t.listener.accept(std::min(time_left(until), liveness_slice));
    if (accepted) {
      PVMM_TRY_ASSIGN(v, judge(t, *accepted, step, waiting, what, until, op));
      if (v.message) return std::move(*v.message);
      strangers.add(std::move(v.stranger));  // its connection closes here
    } else if (accepted.code() == errc::peer_rejected) {
      strangers.add(accepted.error().detail);
    } else if (accepted.code() != errc::timeout) {
      return op.wrap(std::move(accepted).error());
    }
    // Also after a stranger: a stream of them never holds the step past its deadline or an abort.
    PVMM_TRY(check_aborted(t, op));
    if (const auto gone = t.exited(waiting); !gone.empty()) return exited_while_waiting(t, gone, what, step, op);
    if (time_left(until).count() == 0)
      return op.fail(errc::timeout, fmt::format("{} sent no {} for team step {} before the deadline{}", who(t, waiting),
                                                what, step, strangers.text()));
  }
}

step_envelope make_envelope(std::uint32_t step, const std::optional<error>& failed) {
  step_envelope e;
  e.step = step;
  if (failed) {
    e.failed = static_cast<std::int32_t>(failed->code);
    std::strncpy(e.failure, failed->message().c_str(), sizeof e.failure - 1);
  }
  return e;
}

status check_envelope(const step_envelope& e, int r, std::uint32_t step, const char* what, const operation& op) {
  if (e.magic != step_envelope::magic_value)
    return op.fail(errc::team_mismatch,
                   fmt::format("rank {} sent no team record ({}): another pvmm version?", r, what));
  if (e.step != step)
    return op.fail(errc::team_mismatch,
                   fmt::format("rank {} is at team step {}, this rank at {} ({})", r, e.step, step, what));
  return {};
}

status step_outcome(const std::vector<const step_envelope*>& all, int me, const std::optional<error>& mine,
                    const char* what, const operation& op) {
  if (mine) return *mine;  // this rank's own failure, as it happened here
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const step_envelope& e = *all[r];
    if (e.failed == 0) continue;
    if (r == me)  // an envelope this rank did not send (a forged or corrupted record)
      return op.fail(errc::protocol_error, fmt::format("rank {}'s own record came back failed ({})", r, what));
    return op.fail(peer_errc(e.failed), fmt::format("rank {} failed ({}): {}", r, what,
                                                    std::string(e.failure, strnlen(e.failure, sizeof e.failure))));
  }
  return {};
}

status agree(team_state& t, std::uint32_t step, const std::optional<error>& mine, const char* what, deadline until,
             const operation& op) {
  PVMM_TRY(check_aborted(t, op));
  const std::uint8_t nothing = 0;  // the outcome travels in the envelope alone
  auto all = all_gather(*t.ranks, step, nothing, mine, what, until, op);
  if (!all) return std::move(all).error();
  return {};
}

}  // namespace pvmm::detail
