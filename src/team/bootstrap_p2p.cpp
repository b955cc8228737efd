// The endpoints adapter's messages (bootstrap_endpoints.hpp): framing (a header, then chunks; what a step may
// receive checked on the first chunk before anything is allocated) and point-to-point: each rank listens at
// "<name>#p2p-<rank>"; a sender opens one connection to each peer on first use and sends its message in chunks;
// a receiver keeps messages of other tags for later receives, their cost to it bounded in bytes and count.
#include "team/bootstrap_endpoints.hpp"

namespace pvmm::detail::endpoints {

status endpoint_bootstrap::send_message(const ipc::connection& c, int to, const header& h, const void* body,
                                        deadline until, const detail::operation& op) const {
  return send_chunks(h, body, [&](const std::vector<std::uint8_t>& buffer) -> status {
    if (auto ok = c.send(nullptr, 0, buffer.data(), buffer.size(), detail::time_left(until)); !ok) {
      auto e = std::move(ok).error();
      e.detail = fmt::format("sending to {}: {}", who(to), e.detail);
      return op.wrap(std::move(e));
    }
    return {};
  });
}

result<message> endpoint_bootstrap::receive_chunk(const ipc::connection& c, int from, deadline until,
                                                  const detail::operation& op) const {
  auto got = c.receive(0, sizeof(header) + chunk_bytes, detail::time_left(until));
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
  if (m.head.what == kind::abort &&
      from < size_) {  // every rank fails with the group's error, naming the rank it concerns
    told_ = true;
    if (m.head.aborted != 0 && m.head.rank >= 0 && m.head.rank < size_) {
      aborted_rank_ = m.head.rank;
      return op.wrap(failed_by(m.head.rank, m.head.code == 0 ? errc::peer_lost : detail::peer_errc(m.head.code)));
    }
    const std::string text(got->payload.begin() + sizeof(header), got->payload.end());
    return op.fail(m.head.code == 0 ? errc::peer_lost : detail::peer_errc(m.head.code),
                   fmt::format("{} stopped the group: {}", who(from), text));
  }
  m.body.assign(got->payload.begin() + sizeof(header), got->payload.end());
  return m;
}

result<message> endpoint_bootstrap::receive_message(const ipc::connection& c, int from, deadline until,
                                                    const expectation& expect, const detail::operation& op) const {
  PVMM_TRY_ASSIGN(first, receive_chunk(c, from, until, op));
  PVMM_TRY(expect(first.head));  // before the body is sized by what the peer announced
  first.body.reserve(first.head.total);
  while (first.body.size() < first.head.total) {
    PVMM_TRY_ASSIGN(more, receive_chunk(c, from, until, op));
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

error endpoint_bootstrap::explain_loss(int r, error e, const detail::operation& op) const {
  if (e.code != errc::peer_lost || r < 0 || r >= static_cast<int>(peers_.size()) || !peers_[r].valid()) return e;
  told_ = false;
  auto why =
      receive_chunk(peers_[r], r, detail::later(std::chrono::steady_clock::now(), std::chrono::milliseconds(50)), op);
  if (!why && told_) return std::move(why).error();
  return e;
}

result<const ipc::connection*> endpoint_bootstrap::incoming(int peer, deadline until, const detail::operation& op) {
  const ipc::connection& wanted = link(in_, peer);
  while (!wanted.valid()) {
    PVMM_TRY_ASSIGN(ready, wait_watching(p2p_.native_handle(), until, op));
    (void)ready;  // past the deadline, accept finds nothing and says so
    if (!ready) return op.fail(errc::timeout, fmt::format("{} sent nothing before the deadline", who(peer)));
    PVMM_TRY(accept_p2p(until, op));
  }
  return &wanted;
}

status endpoint_bootstrap::accept_p2p(deadline until, const detail::operation& op) {
  auto c = p2p_.accept(std::chrono::milliseconds(0));
  if (!c && (c.code() == errc::timeout || c.code() == errc::peer_rejected))
    return {};                                   // none waiting, or another user's process (not one of the ranks)
  if (!c) return op.wrap(std::move(c).error());  // aborted
  auto hello = receive_chunk(*c, size_, std::min(until, deadline_in(hello_bound)), op);
  if (!hello) return {};  // silent, or gone: a stranger
  const header& h = hello->head;
  if (h.what != kind::hello || h.total != 0 || h.rank < 0 || h.rank >= size_ || h.rank == rank_ ||
      link(in_, h.rank).valid())
    return {};  // garbage: a stranger, not a rank
  adopt(in_, h.rank, std::move(*c));
  return {};
}

status endpoint_bootstrap::take_chunk(const ipc::connection& c, int peer, int tag, std::size_t bytes, deadline until,
                                      const detail::operation& op) {
  PVMM_TRY_ASSIGN(chunk, receive_chunk(c, peer, until, op));
  const header& h = chunk.head;
  auto it = partial_.find(peer);
  if (it == partial_.end()) {
    if (h.what != kind::message || h.sequence > static_cast<std::uint64_t>(INT32_MAX))
      return op.fail(errc::protocol_error, fmt::format("{} sent a message of kind {} with tag {}", who(peer),
                                                       static_cast<std::uint32_t>(h.what), h.sequence));
    const bool waited = tag >= 0 && h.sequence == static_cast<std::uint64_t>(tag);
    if (waited && h.total != bytes)
      return op.fail(errc::team_mismatch, fmt::format("rank {} sent {} bytes with tag {}, rank {} expected {}", peer,
                                                      h.total, tag, rank_, bytes));
    if (!waited &&
        (h.total > max_kept_bytes || kept_cost(h.total) > max_kept_bytes - std::min(kept_bytes_, max_kept_bytes) ||
         kept_messages_ >= max_kept_messages))
      return op.fail(errc::protocol_error,
                     fmt::format("{} sent more than {} bytes or {} messages for tags not yet received (each message "
                                 "counted with {} bytes of overhead)",
                                 who(peer), max_kept_bytes, max_kept_messages, kept_overhead));
    message m;
    m.head = h;
    m.body.reserve(h.total);
    kept_bytes_ += kept_cost(h.total);
    ++kept_messages_;
    it = partial_.emplace(peer, std::move(m)).first;
  } else if (h.sequence != it->second.head.sequence || h.what != it->second.head.what) {
    return op.fail(errc::protocol_error, fmt::format("{} sent chunks out of order", who(peer)));
  }
  message& m = it->second;
  if (chunk.body.size() > m.head.total - m.body.size())
    return op.fail(errc::protocol_error,
                   fmt::format("{} sent more than the {} bytes it announced", who(peer), m.head.total));
  m.body.insert(m.body.end(), chunk.body.begin(), chunk.body.end());
  if (m.body.size() == m.head.total) {
    kept_[{peer, static_cast<int>(m.head.sequence)}].push_back(std::move(m.body));
    partial_.erase(it);
  }
  return {};
}

status endpoint_bootstrap::send_p2p(const ipc::connection& c, int to, const header& h, const void* body, deadline until,
                                    const detail::operation& op) {
  return send_chunks(h, body, [&](const std::vector<std::uint8_t>& buffer) -> status {
    for (;;) {
      auto ok = c.send(nullptr, 0, buffer.data(), buffer.size(), std::chrono::milliseconds(0));
      if (ok) break;
      if (ok.code() != errc::timeout || detail::time_left(until).count() == 0) {
        auto e = std::move(ok).error();
        e.detail = fmt::format("sending to {}: {}", who(to), e.detail);
        return op.wrap(std::move(e));
      }
      // Full: wait for room, reading meanwhile what peers send this rank (they may be waiting for room too).
      std::vector<int> from;
      std::vector<pollfd> fds{{c.native_handle(), POLLOUT, 0}};
      {
        std::lock_guard<std::mutex> lock(links_);
        for (auto& [r, in] : in_)
          if (in.valid()) {
            from.push_back(r);
            fds.push_back({in.native_handle(), POLLIN, 0});
          }
      }
      if (p2p_.valid()) fds.push_back({p2p_.native_handle(), POLLIN, 0});
      // A short slice: AF_UNIX reports POLLOUT only once most of the buffer drained; the send is tried again.
      const int ms = static_cast<int>(std::min<long long>(detail::time_left(until).count(), 10));
      if (::poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR)
        return op.fail(errc::system_error, fmt::format("poll failed: {}", std::strerror(errno)));
      for (std::size_t i = 0; i < from.size(); ++i)
        if (fds[i + 1].revents) PVMM_TRY(take_chunk(link(in_, from[i]), from[i], -1, 0, until, op));
      if (p2p_.valid() && fds.back().revents) PVMM_TRY(accept_p2p(until, op));
      PVMM_TRY_ASSIGN(ready, wait_watching(-1, std::chrono::steady_clock::now(), op));  // an abort told meanwhile
      (void)ready;
      if (broken()) return op.wrap(aborted_by(aborted_rank_.load() >= 0 ? aborted_rank_.load() : rank_));
    }
    return {};
  });
}

status endpoint_bootstrap::send_to(int peer, int tag, const void* data, std::size_t bytes, deadline until) {
  const detail::operation op{"pvmm::bootstrap::send"};
  // Sending needs no listener here: a rank whose own listener failed still sends (its receives say why they fail).
  const ipc::connection& c = link(out_, peer);
  if (!c.valid()) {
    // The peer's listener exists from its creation on; connect in slices, watching for aborts meanwhile.
    for (;;) {
      auto opened = ipc::connect(p2p_name(name_, peer), std::min(detail::time_left(until), abort_slice));
      if (opened) {
        adopt(out_, peer, std::move(*opened));
        break;
      }
      if (opened.code() != errc::timeout || detail::time_left(until).count() == 0) {
        auto e = std::move(opened).error();
        e.detail = fmt::format("{}'s point-to-point endpoint: {}", who(peer), e.detail);
        return op.wrap(std::move(e));
      }
      PVMM_TRY_ASSIGN(ready, wait_watching(-1, std::chrono::steady_clock::now(), op));  // an abort told meanwhile
      (void)ready;
      if (broken()) return op.wrap(aborted_by(aborted_rank_.load() >= 0 ? aborted_rank_.load() : rank_));
    }
    header hello;
    hello.rank = rank_;
    hello.size = size_;
    hello.pid = static_cast<std::int32_t>(::getpid());
    PVMM_TRY(send_message(c, peer, hello, nullptr, until, op));
  }
  header h;
  h.what = kind::message;
  h.sequence = static_cast<std::uint64_t>(tag);
  h.rank = rank_;
  h.total = bytes;
  return send_p2p(c, peer, h, data, until, op);
}

status endpoint_bootstrap::receive_from(int peer, int tag, void* data, std::size_t bytes, deadline until) {
  const detail::operation op{"pvmm::bootstrap::receive"};
  if (p2p_unavailable_) return *p2p_unavailable_;
  for (;;) {
    if (auto it = kept_.find({peer, tag}); it != kept_.end()) {
      auto& kept = it->second;
      if (kept.front().size() != bytes)
        return op.fail(errc::team_mismatch, fmt::format("rank {} sent {} bytes with tag {}, rank {} expected {}", peer,
                                                        kept.front().size(), tag, rank_, bytes));
      if (bytes > 0) std::memcpy(data, kept.front().data(), bytes);
      kept_bytes_ -= kept_cost(bytes);
      --kept_messages_;
      kept.pop_front();
      if (kept.empty()) kept_.erase(it);  // no empty queue stays behind for a tag once received
      return {};
    }
    PVMM_TRY_ASSIGN(c, incoming(peer, until, op));
    PVMM_TRY_ASSIGN(ready, wait_watching(c->native_handle(), until, op));
    if (!ready)
      return op.fail(errc::timeout, fmt::format("{} sent nothing with tag {} before the deadline", who(peer), tag));
    PVMM_TRY(take_chunk(*c, peer, tag, bytes, until, op));
  }
}

}  // namespace pvmm::detail::endpoints
