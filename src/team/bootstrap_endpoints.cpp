// The endpoints adapter: node-local processes meet at a named pvmm endpoint. Rank 0 listens and relays: every
// other rank sends its contribution to the root, which answers each with everything. A peer that exits closes
// its socket, which the root sees at once (peer_lost naming the rank and its pid, from SO_PEERCRED); the root's
// failure or an abort reaches every rank as an abort message and then as EOF.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <pvmm/endpoint.hpp>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

constexpr std::uint32_t header_magic = 0x54425650;  // "PVBT"
constexpr std::size_t chunk_bytes = 32 * 1024;      // one message's payload: well under the socket's buffer
constexpr auto root_grace = std::chrono::milliseconds(500);

enum class kind : std::uint32_t { hello = 1, welcome, gather, result, abort };

struct header {
  std::uint32_t magic = header_magic;
  kind what = kind::hello;
  std::uint64_t sequence = 0;
  std::uint64_t total = 0;  // bytes of the whole message (its chunks follow back to back)
  std::int32_t rank = 0;
  std::int32_t size = 0;
  std::int32_t node = 0;
  std::int32_t pid = 0;
  std::int32_t code = 0;  // abort: the errc the group failed with (0: peer_lost)
  std::int32_t reserved = 0;
};

struct message {
  header head;
  std::vector<std::uint8_t> body;
};

class endpoint_bootstrap final : public bootstrap {
 public:
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return nodes_[rank_]; }
  int local_rank() const noexcept override { return detail::position_in_node(nodes_, rank_).local_rank; }
  int local_size() const noexcept override { return detail::position_in_node(nodes_, rank_).local_size; }

  static result<std::shared_ptr<bootstrap>> start(std::string_view name, int rank, int size, deadline until, int node,
                                                  const detail::operation& op);
  status allgather(const void* mine, std::size_t bytes, void* all, deadline until) override;
  status barrier(deadline until) override {
    std::uint8_t one = 1;
    std::vector<std::uint8_t> all(size_);
    return allgather(&one, 1, all.data(), until);
  }
  void abort() noexcept override;
  ~endpoint_bootstrap() override { drain(deadline_in(root_grace)); }

 private:
  status send_message(int to, const header& h, const void* body, deadline until, const detail::operation& op) const;
  result<message> receive_chunk(int from, deadline until, const detail::operation& op) const;
  result<message> receive_message(int from, deadline until, const detail::operation& op) const;
  error fail(error e);  // records e, tells the peers, returns the recorded error
  // Reads and drops what peers still send, until they are quiet for a moment or `until`: a socket closed with
  // messages unread resets the peer's end (ECONNRESET), losing the abort message queued for it there.
  void drain(deadline until) const noexcept;
  std::string who(int r) const { return fmt::format("rank {} (pid {})", r, pids_.empty() ? 0 : pids_[r]); }

  int rank_ = 0;
  int size_ = 0;
  std::vector<int> nodes_;
  std::vector<std::int32_t> pids_;
  std::vector<ipc::connection> peers_;  // root: one per rank (its own empty); others: [0] is the root
  std::uint64_t sequence_ = 0;
  detail::broken_state broken_;
};

status endpoint_bootstrap::send_message(int to, const header& h, const void* body, deadline until,
                                        const detail::operation& op) const {
  const auto* bytes = static_cast<const std::uint8_t*>(body);
  std::vector<std::uint8_t> buffer;
  std::size_t sent = 0;
  do {  // at least one message, even for 0 bytes
    const std::size_t n = std::min<std::size_t>(chunk_bytes, h.total - sent);
    buffer.resize(sizeof(header) + n);
    std::memcpy(buffer.data(), &h, sizeof(header));
    if (n > 0) std::memcpy(buffer.data() + sizeof(header), bytes + sent, n);
    if (auto ok = peers_[to].send(nullptr, 0, buffer.data(), buffer.size(), detail::time_left(until)); !ok)
      return op.wrap(std::move(ok).error());
    sent += n;
  } while (sent < h.total);
  return {};
}

result<message> endpoint_bootstrap::receive_chunk(int from, deadline until, const detail::operation& op) const {
  auto got = peers_[from].receive(0, sizeof(header) + chunk_bytes, detail::time_left(until));
  if (!got) {
    auto e = std::move(got).error();
    if (e.code == errc::peer_lost) e.detail = fmt::format("{} is gone: {}", who(from), e.detail);
    if (e.code == errc::timeout) e.detail = fmt::format("{} sent nothing before the deadline", who(from));
    return op.wrap(std::move(e));
  }
  message m;
  if (got->payload.size() < sizeof(header))
    return op.fail(errc::protocol_error,
                   fmt::format("{} sent {} bytes, short of a header", who(from), got->payload.size()));
  std::memcpy(&m.head, got->payload.data(), sizeof(header));
  if (m.head.magic != header_magic)
    return op.fail(errc::protocol_error, fmt::format("{} sent a foreign message", who(from)));
  if (m.head.what == kind::abort) {  // every rank fails with the group's error, as the rank that saw it first
    const std::string text(got->payload.begin() + sizeof(header), got->payload.end());
    return op.fail(m.head.code == 0 ? errc::peer_lost : detail::peer_errc(m.head.code),
                   fmt::format("{} stopped the group: {}", who(m.head.rank), text));
  }
  m.body.assign(got->payload.begin() + sizeof(header), got->payload.end());
  return m;
}

result<message> endpoint_bootstrap::receive_message(int from, deadline until, const detail::operation& op) const {
  PVMM_TRY_ASSIGN(first, receive_chunk(from, until, op));
  if (first.head.total > (std::uint64_t{1} << 32))
    return op.fail(errc::protocol_error, fmt::format("{} announced {} bytes", who(from), first.head.total));
  first.body.reserve(first.head.total);
  while (first.body.size() < first.head.total) {
    PVMM_TRY_ASSIGN(more, receive_chunk(from, until, op));
    if (more.head.sequence != first.head.sequence || more.head.what != first.head.what ||
        first.body.size() + more.body.size() > first.head.total)
      return op.fail(errc::protocol_error, fmt::format("{} sent chunks out of order", who(from)));
    first.body.insert(first.body.end(), more.body.begin(), more.body.end());
  }
  if (first.body.size() != first.head.total)
    return op.fail(errc::protocol_error,
                   fmt::format("{} sent {} bytes for {}", who(from), first.body.size(), first.head.total));
  return first;
}

error endpoint_bootstrap::fail(error e) {
  const error recorded = broken_.set(std::move(e));
  const std::string text = recorded.message();
  header h;
  h.what = kind::abort;
  h.rank = rank_;
  h.code = static_cast<std::int32_t>(recorded.code);
  h.total = text.size();
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (r != rank_ && peers_[r].valid()) {
      const detail::operation quiet{"pvmm::bootstrap::abort (endpoints)"};
      (void)send_message(r, h, text.data(), deadline_in(std::chrono::milliseconds(0)), quiet);
    }
  return recorded;
}

status endpoint_bootstrap::allgather(const void* mine, std::size_t bytes, void* all, deadline until) {
  const std::uint64_t id = sequence_;  // this collective's number
  auto args = [&] { return fmt::format("rank={}, bytes={}, collective={}", rank_, bytes, id); };
  const detail::operation op{"pvmm::bootstrap::allgather (endpoints)", args};
  if (bytes > 0 && (!mine || !all)) return op.fail(errc::invalid_argument, "mine and all must not be null");
  PVMM_TRY(broken_.check());
  ++sequence_;
  auto* out = static_cast<std::uint8_t*>(all);
  if (bytes > 0) std::memcpy(out + rank_ * bytes, mine, bytes);
  header h;
  h.sequence = id;
  h.rank = rank_;
  if (rank_ != 0) {
    h.what = kind::gather;
    h.total = bytes;
    if (auto ok = send_message(0, h, mine, until, op); !ok) {
      // The root may have failed the collective already and closed: its account of why waits in this socket.
      if (ok.code() == errc::peer_lost)
        if (auto why = receive_message(0, deadline_in(root_grace), op); !why) return fail(std::move(why).error());
      return fail(std::move(ok).error());
    }
    // The root's deadline passes when this rank's does: wait a little longer for its account of who is missing,
    // rather than blaming the root (bounded: the root answers or closes within the grace).
    auto back = receive_message(0, until == deadline::max() ? until : until + root_grace, op);
    if (!back) return fail(std::move(back).error());
    if (back->head.what != kind::result || back->head.sequence != id || back->body.size() != bytes * size_)
      return fail(op.fail(errc::team_mismatch, fmt::format("the root answered collective {} with {} bytes, {} expected",
                                                           id, back->body.size(), bytes * size_)));
    if (bytes > 0) std::memcpy(out, back->body.data(), bytes * size_);
    return {};
  }
  // The root: take every rank's contribution in whatever order they come, so one late rank does not hide a dead one.
  std::vector<bool> done(size_, false);
  done[0] = true;
  for (int left = size_ - 1; left > 0;) {
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    for (int r = 1; r < size_; ++r)
      if (!done[r]) {
        fds.push_back({peers_[r].native_handle(), POLLIN, 0});
        ranks.push_back(r);
      }
    const auto wait = detail::time_left(until);
    const int ms = wait == ipc::wait_forever ? -1 : static_cast<int>(std::min<long long>(wait.count(), 1 << 30));
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0)
      return fail(op.fail(errc::timeout, fmt::format("{} did not arrive at collective {} before the deadline",
                                                     detail::rank_list(ranks), id)));
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      const int r = ranks[i];
      auto got = receive_message(r, until, op);
      if (!got) return fail(std::move(got).error());
      if (got->head.what != kind::gather || got->head.sequence != id)
        return fail(op.fail(errc::protocol_error,
                            fmt::format("{} sent message {} to collective {}", who(r), got->head.sequence, id)));
      if (got->body.size() != bytes)
        return fail(op.fail(errc::team_mismatch, fmt::format("{} gave {} bytes to collective {}, rank 0 gave {}",
                                                             who(r), got->body.size(), id, bytes)));
      if (bytes > 0) std::memcpy(out + r * bytes, got->body.data(), bytes);
      done[r] = true;
      --left;
    }
  }
  h.what = kind::result;
  h.total = bytes * size_;
  for (int r = 1; r < size_; ++r)
    if (auto ok = send_message(r, h, out, until, op); !ok) return fail(std::move(ok).error());
  return {};
}

void endpoint_bootstrap::drain(deadline until) const noexcept {
  constexpr int quiet_ms = 50;
  std::vector<pollfd> fds;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (r != rank_ && peers_[r].valid()) fds.push_back({peers_[r].native_handle(), POLLIN, 0});
  while (!fds.empty() && std::chrono::steady_clock::now() < until) {
    if (::poll(fds.data(), fds.size(), quiet_ms) <= 0) return;  // quiet (or interrupted): nothing left to lose
    for (std::size_t i = 0; i < fds.size();) {
      char byte;
      const bool readable = fds[i].revents != 0;
      const bool closed =
          readable && ::recv(fds[i].fd, &byte, sizeof byte, MSG_DONTWAIT | MSG_TRUNC) <= 0 && errno != EAGAIN;
      if (closed) {
        fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      fds[i++].revents = 0;
    }
  }
}

void endpoint_bootstrap::abort() noexcept {
  try {
    const detail::operation op{"pvmm::bootstrap::abort (endpoints)"};
    fail(op.fail(errc::peer_lost, fmt::format("rank {} aborted", rank_)));
  } catch (...) {  // formatting failed: still shut the sockets below
  }
  for (auto& c : peers_)
    if (c.valid()) ::shutdown(c.native_handle(), SHUT_RDWR);  // wakes this rank's waits; peers see EOF
}

result<std::shared_ptr<bootstrap>> endpoint_bootstrap::start(std::string_view name, int rank, int size, deadline until,
                                                             int node, const detail::operation& op) {
  auto self = std::make_shared<endpoint_bootstrap>();
  self->rank_ = rank;
  self->size_ = size;
  self->peers_.resize(rank == 0 ? size : 1);
  header hello;
  hello.rank = rank;
  hello.size = size;
  hello.node = node;
  hello.pid = static_cast<std::int32_t>(::getpid());
  if (rank != 0) {
    PVMM_TRY_ASSIGN(c, ipc::connect(name, detail::time_left(until)));
    self->peers_[0] = std::move(c);
    PVMM_TRY(self->send_message(0, hello, nullptr, until, op));
    PVMM_TRY_ASSIGN(welcome, self->receive_message(0, until, op));
    const std::size_t n = static_cast<std::size_t>(size);
    if (welcome.head.what != kind::welcome || welcome.body.size() != 2 * n * sizeof(std::int32_t))
      return op.fail(errc::team_mismatch, "the root's welcome does not describe this group");
    std::vector<std::int32_t> table(2 * n);
    std::memcpy(table.data(), welcome.body.data(), welcome.body.size());
    self->nodes_.assign(table.begin(), table.begin() + size);
    self->pids_.assign(table.begin() + size, table.end());
    if (auto root = self->peers_[0].peer()) self->pids_[0] = root->pid;  // the kernel's word, in this pid namespace
    return std::shared_ptr<bootstrap>(std::move(self));
  }
  PVMM_TRY_ASSIGN(listening, ipc::listener::listen(name));
  std::vector<std::int32_t> nodes(size, 0), pids(size, 0);
  nodes[0] = node;
  pids[0] = hello.pid;
  for (int joined = 1; joined < size; ++joined) {
    auto c = listening.accept(detail::time_left(until));
    if (!c) {
      std::vector<int> missing;
      for (int r = 1; r < size; ++r)
        if (!self->peers_[r].valid()) missing.push_back(r);
      auto e = std::move(c).error();
      if (e.code == errc::timeout)
        e = op.fail(errc::timeout, fmt::format("{} did not connect to endpoint \"{}\" before the deadline",
                                               detail::rank_list(missing), name));
      return self->fail(std::move(e));
    }
    self->peers_.push_back(std::move(*c));  // parked at the end until its hello says which rank it is
    auto got = self->receive_message(size, until, op);
    if (!got) return self->fail(std::move(got).error());
    const header& h = got->head;
    if (h.what != kind::hello || h.size != size || h.rank <= 0 || h.rank >= size || self->peers_[h.rank].valid()) {
      auto e = op.fail(errc::team_mismatch, fmt::format("a process (pid {}) joined as rank {} of {}; this group has "
                                                        "{} ranks and that rank is {}",
                                                        h.pid, h.rank, h.size, size,
                                                        h.rank > 0 && h.rank < size ? "taken" : "not one of them"));
      return self->fail(std::move(e));
    }
    self->peers_[h.rank] = std::move(self->peers_.back());
    self->peers_.pop_back();
    nodes[h.rank] = h.node;
    // Errors name a rank's pid as the kernel recorded it at connect (SO_PEERCRED), not as the rank said it.
    auto credentials = self->peers_[h.rank].peer();
    pids[h.rank] = credentials ? credentials->pid : h.pid;
  }
  std::vector<std::int32_t> table(nodes);
  table.insert(table.end(), pids.begin(), pids.end());
  header welcome;
  welcome.what = kind::welcome;
  welcome.total = table.size() * sizeof(std::int32_t);
  for (int r = 1; r < size; ++r)
    if (auto ok = self->send_message(r, welcome, table.data(), until, op); !ok)
      return self->fail(std::move(ok).error());
  self->nodes_.assign(nodes.begin(), nodes.end());
  self->pids_ = pids;
  return std::shared_ptr<bootstrap>(std::move(self));
}

}  // namespace

result<std::shared_ptr<bootstrap>> make_endpoint_bootstrap(std::string_view name, int rank, int size,
                                                           std::chrono::milliseconds timeout,
                                                           const bootstrap_options& options) {
  auto args = [&] {
    return fmt::format("name=\"{}\", rank={}, size={}, timeout={}ms", name, rank, size, timeout.count());
  };
  const detail::operation op{"pvmm::make_endpoint_bootstrap", args};
  PVMM_TRY(detail::check_rank_arguments(rank, size, timeout, op));
  return endpoint_bootstrap::start(name, rank, size, deadline_in(timeout), options.node < 0 ? 0 : options.node, op);
}

}  // namespace pvmm
