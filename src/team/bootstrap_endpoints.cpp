// The endpoints adapter: node-local processes meet at a named pvmm endpoint. Rank 0 listens and relays: every
// other rank sends its contribution to the root, which answers each with everything. A peer that exits closes
// its socket, which the root sees at once (peer_lost naming the rank and its pid, from SO_PEERCRED); the root's
// failure or an abort reaches every rank as an abort message (naming the aborting rank) and then as EOF.
// Point-to-point messages go direct, not through the root (the root relays only while it is in a call): each
// rank listens at "<name>#p2p-<rank>", and a sender opens one connection to each peer it sends to, on first use.
// Nothing a peer sends sizes an allocation before it is checked against what that step may carry.
#include "team/bootstrap_endpoints.hpp"

namespace pvmm::detail::endpoints {

void endpoint_bootstrap::tell(const ipc::connection& c, int to, const header& h, const std::string& text) const {
  if (!c.valid() || c.aborted()) return;
  const detail::operation quiet{"pvmm::bootstrap::abort"};
  (void)send_message(c, to, h, text.data(), deadline_in(std::chrono::milliseconds(0)), quiet);
}

error endpoint_bootstrap::fail(error e) {
  std::string text = e.message();
  if (text.size() > max_abort_text) text.resize(max_abort_text);
  header h;
  h.what = kind::abort;
  const int aborted = aborted_rank_;
  h.rank = aborted >= 0 ? aborted : rank_;
  h.aborted = aborted >= 0 ? 1 : 0;
  h.code = static_cast<std::int32_t>(e.code);
  h.total = text.size();
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (r != rank_) tell(peers_[r], r, h, text);
  std::vector<std::pair<int, const ipc::connection*>> out;
  {
    std::lock_guard<std::mutex> lock(links_);
    for (const auto& [r, c] : out_)
      if (c.valid()) out.emplace_back(r, &c);
  }
  for (const auto& [r, c] : out) tell(*c, r, h, text);
  return e;
}

ipc::connection& endpoint_bootstrap::link(std::map<int, ipc::connection>& links, int r) {
  std::lock_guard<std::mutex> lock(links_);
  return links[r];
}

void endpoint_bootstrap::adopt(std::map<int, ipc::connection>& links, int r, ipc::connection c) {
  std::lock_guard<std::mutex> lock(links_);
  links[r] = std::move(c);
  if (links_closed_) links[r].abort();
}

status endpoint_bootstrap::do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t id,
                                        deadline until) {
  const detail::operation op{"pvmm::bootstrap::allgather"};
  auto* out = static_cast<std::uint8_t*>(all);
  if (bytes > 0) std::memcpy(out + rank_ * bytes, mine, bytes);
  return rank_ == 0 ? gather_at_root(out, bytes, id, until, op)
                    : join_root(static_cast<const std::uint8_t*>(mine), out, bytes, id, until, op);
}

status endpoint_bootstrap::join_root(const std::uint8_t* mine, std::uint8_t* out, std::size_t bytes, std::uint64_t id,
                                     deadline until, const detail::operation& op) {
  header h;
  h.sequence = id;
  h.rank = rank_;
  h.what = kind::gather;
  h.total = bytes;
  if (auto ok = send_message(peers_[0], 0, h, mine, until, op); !ok) {
    // The root may have failed the collective already and closed: its account of why waits in this socket.
    if (ok.code() == errc::peer_lost)
      if (auto why = receive_chunk(peers_[0], 0, deadline_in(root_grace), op); !why)
        return fail(std::move(why).error());
    return fail(std::move(ok).error());
  }
  // The root's deadline passes when this rank's does: wait a little longer for its account of who is missing,
  // rather than blaming the root (bounded: the root answers or closes within the grace).
  const std::uint64_t total = bytes * static_cast<std::uint64_t>(size_);
  auto back =
      receive_message(peers_[0], 0, detail::later(until, root_grace), exactly(kind::result, id, total, who(0), op), op);
  if (!back) return fail(std::move(back).error());
  if (bytes > 0) std::memcpy(out, back->body.data(), total);
  return {};
}

status endpoint_bootstrap::gather_at_root(std::uint8_t* out, std::size_t bytes, std::uint64_t id, deadline until,
                                          const detail::operation& op) {
  // Take every rank's contribution in whatever order they come, so one late rank does not hide a dead one.
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
    if (n < 0)  // no revents to read and no deadline seen: without this the loop would spin forever
      return fail(op.fail(errc::system_error, fmt::format("poll failed: {}", std::strerror(errno))));
    if (n == 0) {
      if (until != deadline::max() && std::chrono::steady_clock::now() < until) continue;  // a slice of a long wait
      return fail(did_not_arrive(ranks, id));
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      const int r = ranks[i];
      auto expect = [&](const header& h) -> status {
        PVMM_TRY(exactly(kind::gather, id, h.total, who(r), op)(h));
        if (h.total != bytes) return gave_bytes(r, h.total, id, 0, bytes);
        return {};
      };
      auto got = receive_message(peers_[r], r, until, expect, op);
      if (!got) return fail(std::move(got).error());
      if (bytes > 0) std::memcpy(out + r * bytes, got->body.data(), bytes);
      done[r] = true;
      --left;
    }
  }
  header h;
  h.sequence = id;
  h.what = kind::result;
  h.total = bytes * static_cast<std::uint64_t>(size_);
  for (int r = 1; r < size_; ++r)
    if (auto ok = send_message(peers_[r], r, h, out, until, op); !ok)
      return fail(explain_loss(r, std::move(ok).error(), op));
  return {};
}

result<bool> endpoint_bootstrap::wait_watching(int fd, deadline until, const detail::operation& op) {
  std::vector<int> watched;  // ranks whose group connection may carry an abort: every rank for the root, else the root
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (r != rank_ && peers_[r].valid()) watched.push_back(r);
  for (;;) {
    std::vector<pollfd> fds{{fd, POLLIN, 0}};
    for (int r : watched) fds.push_back({peers_[r].native_handle(), POLLIN, 0});
    const auto wait = detail::time_left(until);
    const int ms = wait == ipc::wait_forever ? -1 : static_cast<int>(std::min<long long>(wait.count(), 1 << 30));
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n < 0 && errno != EINTR)
      return op.fail(errc::system_error, fmt::format("poll failed: {}", std::strerror(errno)));
    if (fds[0].revents) return true;
    if (n == 0 && (until != deadline::max() && std::chrono::steady_clock::now() >= until)) return false;
    for (std::size_t i = fds.size(); i-- > 1;) {
      if (!fds[i].revents) continue;
      const int r = watched[i - 1];
      header h;
      const auto got = ::recv(fds[i].fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
      if (got == static_cast<ssize_t>(sizeof h) && h.magic == header_magic && h.what == kind::abort)
        if (auto told = receive_chunk(peers_[r], r, until, op); !told) return std::move(told).error();
      // Anything else (the next collective's message, EOF) is not this wait's concern: stop watching it.
      watched.erase(watched.begin() + static_cast<std::ptrdiff_t>(i - 1));
    }
  }
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

void endpoint_bootstrap::do_abort() noexcept {
  try {
    aborted_rank_ = rank_;
    (void)fail(failed_by(rank_, abort_code()));  // the header carries this rank's errc to the peers
  } catch (...) {                                // formatting failed: still end the connections below
  }
  for (auto& c : peers_) c.abort();  // wakes this rank's waits; peers see EOF
  p2p_.abort();                      // wakes a receive waiting for a peer's first point-to-point connection
  std::lock_guard<std::mutex> lock(links_);
  links_closed_ = true;
  for (auto& [r, c] : out_) c.abort();
  for (auto& [r, c] : in_) c.abort();
}

// The root: accepts the other ranks. A connection that does not say hello within hello_bound, says something
// else, or comes from another user is a stranger's: dropped, and the root goes on accepting the real ranks.
status endpoint_bootstrap::accept_ranks(const ipc::listener& listening, std::string_view name, deadline until,
                                        const detail::operation& op) {
  struct pending {
    ipc::connection c;
    deadline bound;
  };
  std::vector<pending> waiting;
  auto missing = [&] {
    std::vector<int> m;
    for (int r = 1; r < size_; ++r)
      if (!peers_[r].valid()) m.push_back(r);
    return m;
  };
  for (int joined = 1; joined < size_;) {
    std::vector<pollfd> fds{{listening.native_handle(), POLLIN, 0}};
    deadline next = until;
    for (auto& p : waiting) {
      fds.push_back({p.c.native_handle(), POLLIN, 0});
      next = std::min(next, p.bound);
    }
    const auto wait = detail::time_left(next);
    const int ms = wait == ipc::wait_forever ? -1 : static_cast<int>(std::min<long long>(wait.count(), 1 << 30));
    if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR)
      return op.fail(errc::system_error, fmt::format("poll failed: {}", std::strerror(errno)));
    const auto now = std::chrono::steady_clock::now();
    for (std::size_t i = waiting.size(); i-- > 0;) {
      auto& p = waiting[i];
      bool drop = now >= p.bound;
      if (fds[i + 1].revents) {
        drop = true;
        auto got = receive_chunk(p.c, size_, now, op);
        const header* h = got ? &got->head : nullptr;
        if (h && h->what == kind::hello && h->total == 0 && got->body.empty()) {
          if (h->size != size_ || h->rank <= 0 || h->rank >= size_ || peers_[h->rank].valid())
            return op.fail(errc::team_mismatch,
                           fmt::format("a process (pid {}) joined as rank {} of {}; this group "
                                       "has {} ranks and that rank is {}",
                                       h->pid, h->rank, h->size, size_,
                                       h->rank > 0 && h->rank < size_ ? "taken" : "not one of them"));
          nodes_[h->rank] = h->node;
          // Errors name a rank's pid as the kernel recorded it at connect (SO_PEERCRED), not as the rank said it.
          auto credentials = p.c.peer();
          pids_[h->rank] = credentials ? credentials->pid : h->pid;
          peers_[h->rank] = std::move(p.c);
          ++joined;
        }
      }
      if (drop) waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (fds[0].revents) {
      auto c = listening.accept(std::chrono::milliseconds(0));
      if (c)
        waiting.push_back({std::move(*c), detail::later(std::chrono::steady_clock::now(), hello_bound)});
      else if (c.code() != errc::peer_rejected && c.code() != errc::timeout)
        return std::move(c).error();  // another user's process is dropped; anything else fails the group
    }
    if (joined < size_ && std::chrono::steady_clock::now() >= until)
      return op.fail(errc::timeout, fmt::format("{} did not connect to endpoint \"{}\" before the deadline",
                                                detail::rank_list(missing()), name));
  }
  return {};
}

status endpoint_bootstrap::welcome_ranks(deadline until, const detail::operation& op) {
  std::vector<std::int32_t> table(nodes_.begin(), nodes_.end());
  table.insert(table.end(), pids_.begin(), pids_.end());
  header welcome;
  welcome.what = kind::welcome;
  welcome.total = table.size() * sizeof(std::int32_t);
  for (int r = 1; r < size_; ++r)
    if (auto ok = send_message(peers_[r], r, welcome, table.data(), until, op); !ok)
      return explain_loss(r, std::move(ok).error(), op);
  return {};
}

result<std::shared_ptr<bootstrap>> endpoint_bootstrap::start(std::string_view name, int rank, int size, deadline until,
                                                             int node, const detail::operation& op) {
  auto self = std::make_shared<endpoint_bootstrap>();
  self->rank_ = rank;
  self->size_ = size;
  self->name_ = std::string(name);
  self->peers_.resize(rank == 0 ? size : 1);
  self->nodes_.assign(static_cast<std::size_t>(size), 0);
  self->pids_.assign(static_cast<std::size_t>(size), 0);
  self->nodes_[rank] = node;
  self->pids_[rank] = static_cast<std::int32_t>(::getpid());
  // Listening before the group forms, so a message sent to this rank waits in the backlog, not in its sender.
  if (auto p2p = ipc::listener::listen(p2p_name(name, rank)))
    self->p2p_ = std::move(*p2p);
  else
    self->p2p_unavailable_ = op.wrap(std::move(p2p).error());
  if (rank != 0) {
    PVMM_TRY_ASSIGN(c, ipc::connect(name, detail::time_left(until)));
    self->peers_[0] = std::move(c);
    if (auto root = self->peers_[0].peer()) self->pids_[0] = root->pid;  // the kernel's word, in this pid namespace
    header hello;
    hello.rank = rank;
    hello.size = size;
    hello.node = node;
    hello.pid = self->pids_[rank];
    PVMM_TRY(self->send_message(self->peers_[0], 0, hello, nullptr, until, op));
    const std::uint64_t table_bytes = 2 * static_cast<std::uint64_t>(size) * sizeof(std::int32_t);
    // As in a collective: the root's account of who did not connect comes at the deadline, so wait a grace longer.
    auto welcome = self->receive_message(self->peers_[0], 0, detail::later(until, root_grace),
                                         exactly(kind::welcome, 0, table_bytes, self->who(0), op), op);
    if (!welcome) return std::move(welcome).error();
    std::vector<std::int32_t> table(2 * static_cast<std::size_t>(size));
    std::memcpy(table.data(), welcome->body.data(), welcome->body.size());
    const std::int32_t root_pid = self->pids_[0];
    self->nodes_.assign(table.begin(), table.begin() + size);
    self->pids_.assign(table.begin() + size, table.end());
    if (root_pid != 0) self->pids_[0] = root_pid;
  } else {
    PVMM_TRY_ASSIGN(listening, ipc::listener::listen(name));
    if (auto ok = self->accept_ranks(listening, name, until, op); !ok) return self->fail(std::move(ok).error());
    if (auto ok = self->welcome_ranks(until, op); !ok) return self->fail(std::move(ok).error());
  }
  self->place_ranks();
  return std::shared_ptr<bootstrap>(std::move(self));
}

}  // namespace pvmm::detail::endpoints

namespace pvmm {

result<std::shared_ptr<bootstrap>> make_endpoint_bootstrap(std::string_view name, int rank, int size,
                                                           std::chrono::milliseconds timeout,
                                                           const bootstrap_options& options) {
  auto args = [&] {
    return fmt::format("name=\"{}\", rank={}, size={}, timeout={}ms", name, rank, size, timeout.count());
  };
  const detail::operation op{"pvmm::make_endpoint_bootstrap", args};
  PVMM_TRY(detail::check_rank_arguments(rank, size, timeout, op));
  try {
    return detail::endpoints::endpoint_bootstrap::start(name, rank, size, deadline_in(timeout),
                                                        options.node < 0 ? 0 : options.node, op);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out while the group formed");
  }
}

}  // namespace pvmm
