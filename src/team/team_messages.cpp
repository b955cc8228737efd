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

#include "team/bootstrap_common.hpp"
#include "team/team_exchange.hpp"
#include "team/team_state.hpp"

namespace pvmm::detail {

bool team_state::same_device(int a, int b) const {
  const member_record& x = records[a];
  const member_record& y = records[b];
  if (x.node != y.node) return false;
  // Without a device identifier (host backend), ranks of one process name devices alike.
  if (x.identifier[0] == 0 || y.identifier[0] == 0) return x.pid == y.pid && x.device == y.device;
  return std::strncmp(x.identifier, y.identifier, sizeof x.identifier) == 0;
}

int team_state::first_exited(const std::vector<int>& candidates) const {
  const member_record& me = records[rank()];
  for (int r : candidates) {
    const member_record& m = records[r];
    if (m.pid == me.pid || m.node != me.node || m.pid_namespace == 0 || m.pid_namespace != me.pid_namespace) continue;
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(m.pid), 0));
    if (pidfd < 0) {
      if (errno == ESRCH) return r;  // gone and reaped
      continue;                      // no pidfds here (Linux < 5.3): the deadline decides
    }
    pollfd p{pidfd, POLLIN, 0};
    const bool exited = ::poll(&p, 1, 0) == 1;  // a pidfd is readable once its process has exited
    ::close(pidfd);
    if (exited) return r;
  }
  return -1;
}

namespace {
// How often a wait on a peer looks whether the peer's process is still there.
constexpr std::chrono::milliseconds liveness_slice{100};

error exited_while_waiting(const team_state& t, int r, const char* what, std::uint32_t step, const operation& op) {
  return op.fail(errc::peer_lost, fmt::format("rank {} (pid {}) exited while this rank waited for its {} (team step "
                                              "{})",
                                              r, t.records[r].pid, what, step));
}
}  // namespace

std::string aborted_reason(int rank) { return fmt::format("rank {} aborted its team (team::abort)", rank); }

status check_aborted(const team_state& t, const operation& op) {
  if (!t.aborted.load(std::memory_order_acquire)) return {};
  return op.fail(errc::peer_lost, aborted_reason(t.rank()));
}

status send_message(const team_state& t, int to, team_message m, int fd, deadline until, const operation& op) {
  m.team_id = t.id;
  m.rank = t.rank();
  m.has_fd = fd >= 0;
  // Every listener existed at the team's creation: while `to`'s is not answering, look whether it exited.
  for (;;) {
    auto c = ipc::connect(t.endpoint_of(to), std::min(time_left(until), liveness_slice));
    if (c) return op.step("send", [&] { return c->send(&fd, fd >= 0 ? 1 : 0, &m, sizeof m, time_left(until)); });
    if (c.code() != errc::timeout) return op.wrap(std::move(c).error());
    PVMM_TRY(check_aborted(t, op));
    if (t.first_exited({to}) == to) return exited_while_waiting(t, to, "connection", m.step, op);
    if (time_left(until).count() == 0)
      return op.fail(errc::timeout,
                     fmt::format("rank {}'s team endpoint accepted no connection for team step {} before the deadline",
                                 to, m.step));
  }
}

result<received_message> receive_message(team_state& t, std::uint32_t step, const std::vector<int>& waiting,
                                         const char* what, deadline until, const operation& op) {
  // Accepts in slices; between them a rank whose process exited is peer_lost at once, not at the deadline.
  ipc::connection c;
  for (;;) {
    auto accepted = t.listener.accept(std::min(time_left(until), liveness_slice));
    if (accepted) {
      c = std::move(*accepted);
      break;
    }
    if (accepted.code() != errc::timeout) return op.wrap(std::move(accepted).error());
    PVMM_TRY(check_aborted(t, op));
    if (const int gone = t.first_exited(waiting); gone >= 0) return exited_while_waiting(t, gone, what, step, op);
    if (time_left(until).count() == 0)
      return op.fail(errc::timeout,
                     fmt::format("{} sent no {} for team step {} before the deadline", rank_list(waiting), what, step));
  }
  PVMM_TRY_ASSIGN(got, op.step("receive", [&] { return c.receive(1, sizeof(team_message), time_left(until)); }));
  received_message out;
  team_message& m = out.header;
  if (got.payload.size() != sizeof m)
    return op.fail(errc::protocol_error, fmt::format("a peer sent {} bytes, not a team message", got.payload.size()));
  std::memcpy(&m, got.payload.data(), sizeof m);
  if (m.magic != team_message::magic_value || m.team_id != t.id || m.step != step)
    return op.fail(errc::protocol_error, fmt::format("a peer sent a message for team {:x} step {} (expected {:x} "
                                                     "step {})",
                                                     m.team_id, m.step, t.id, step));
  if (std::find(waiting.begin(), waiting.end(), m.rank) == waiting.end())
    return op.fail(errc::protocol_error,
                   fmt::format("rank {} sent a {} it was not asked for (twice, or not on this node)", m.rank, what));
  auto cred = c.peer();
  if (cred && cred->pid != t.records[m.rank].pid)
    return op.fail(errc::protocol_error,
                   fmt::format("process {} claimed to be rank {} (pid {})", cred->pid, m.rank, t.records[m.rank].pid));
  if ((m.has_fd != 0) != (got.fds.size() == 1))
    return op.fail(errc::protocol_error,
                   fmt::format("rank {} announced {} fd and sent {}", m.rank, m.has_fd, got.fds.size()));
  if (m.has_fd) out.fd = std::move(got.fds[0]);
  return out;
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
