// The endpoints adapter: node-local processes meet at a named pvmm endpoint. Rank 0 listens and relays: every
// other rank sends its contribution to the root, which answers each with everything. A peer that exits closes
// its socket, which the root sees at once (peer_lost naming the rank and its pid, from SO_PEERCRED); the root's
// failure or an abort reaches every rank as an abort message (naming the aborting rank) and then as EOF.
// Point-to-point messages go direct, not through the root (the root relays only while it is in a call): each
// rank listens at "<name>#p2p-<rank>", and a sender opens one connection to each peer it sends to, on first use.
// Nothing a peer sends sizes an allocation before it is checked against what that step may carry.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include <pvmm/endpoint.hpp>

#include <fmt/format.h>

#include "core/operation.hpp"
#include "team/bootstrap_common.hpp"

namespace pvmm {
namespace {

constexpr std::uint32_t header_magic = 0x54425650;  // "PVBT"
constexpr std::size_t chunk_bytes = 32 * 1024;      // one message's payload: well under the socket's buffer
constexpr auto root_grace = std::chrono::milliseconds(500);
// A connection to the root that has not said hello in this time is a stranger's, dropped.
constexpr auto hello_bound = std::chrono::milliseconds(1000);
// How often a wait that cannot poll (a connect) looks whether an abort was told.
constexpr auto abort_slice = std::chrono::milliseconds(100);
constexpr std::size_t max_abort_text = 4000;            // an abort's text fits one chunk
constexpr std::uint64_t max_kept_bytes = 256ull << 20;  // messages of other tags held for later receives, per rank

enum class kind : std::uint32_t { hello = 1, welcome, gather, result, abort, message };

struct header {
  std::uint32_t magic = header_magic;
  kind what = kind::hello;
  std::uint64_t sequence = 0;  // a collective's number; a message's tag
  std::uint64_t total = 0;     // bytes of the whole message (its chunks follow back to back)
  std::int32_t rank = 0;       // the sender; for an abort of a rank, that rank
  std::int32_t size = 0;
  std::int32_t node = 0;
  std::int32_t pid = 0;
  std::int32_t code = 0;     // abort: the errc the group failed with (0: peer_lost)
  std::int32_t aborted = 0;  // abort: 1 when `rank` called abort (the text is then only "rank N aborted")
};

struct message {
  header head;
  std::vector<std::uint8_t> body;
};

// What a step may receive, checked on a message's first chunk before anything is allocated for it.
using expectation = std::function<status(const header&)>;

class endpoint_bootstrap final : public bootstrap {
 public:
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  int node() const noexcept override { return nodes_[rank_]; }
  int local_rank() const noexcept override { return positions_[rank_].local_rank; }
  int local_size() const noexcept override { return positions_[rank_].local_size; }
  const char* adapter() const noexcept override { return "endpoints"; }

  static result<std::shared_ptr<bootstrap>> start(std::string_view name, int rank, int size, deadline until, int node,
                                                  const detail::operation& op);
  ~endpoint_bootstrap() override { drain(deadline_in(root_grace)); }

 private:
  status do_allgather(const void* mine, std::size_t bytes, void* all, std::uint64_t id, deadline until) override;
  // A failed send or receive fails the group, as a collective does: told to the peers (an abort heard here reaches
  // the ranks this one relays to).
  status do_send(int peer, int tag, const void* data, std::size_t bytes, deadline until) override {
    if (auto ok = send_to(peer, tag, data, bytes, until); !ok) return fail(std::move(ok).error());
    return {};
  }
  status do_receive(int peer, int tag, void* data, std::size_t bytes, deadline until) override {
    if (auto ok = receive_from(peer, tag, data, bytes, until); !ok) return fail(std::move(ok).error());
    return {};
  }
  status send_to(int peer, int tag, const void* data, std::size_t bytes, deadline until);
  status receive_from(int peer, int tag, void* data, std::size_t bytes, deadline until);
  void do_abort() noexcept override;

  status gather_at_root(std::uint8_t* out, std::size_t bytes, std::uint64_t id, deadline until,
                        const detail::operation& op);
  status join_root(const std::uint8_t* mine, std::uint8_t* out, std::size_t bytes, std::uint64_t id, deadline until,
                   const detail::operation& op);
  status accept_ranks(const ipc::listener& listening, std::string_view name, deadline until,
                      const detail::operation& op);
  status welcome_ranks(deadline until, const detail::operation& op);
  result<const ipc::connection*> incoming(int peer, deadline until, const detail::operation& op);
  // Accepts one point-to-point connection waiting on p2p_ (none: returns at once) and adopts it once its hello
  // came; a stranger's is dropped.
  status accept_p2p(deadline until, const detail::operation& op);
  // Reads the next chunk `peer` sent on `c` into its message in progress; a whole message is kept for the receive
  // of its tag. A receive waiting for tag `tag` (-1: none) of `bytes` checks the size on the first chunk; other
  // tags' messages are bounded by max_kept_bytes. Chunk by chunk, so two ranks reading each other never wait on
  // a message the other has yet to send.
  status take_chunk(const ipc::connection& c, int peer, int tag, std::size_t bytes, deadline until,
                    const detail::operation& op);
  // send_message for point-to-point: while `c` takes no more (the peer is sending too), this rank reads what
  // its peers send it (kept for its receives), accepts their connections and watches for aborts, so two ranks
  // sending each other more than a socket buffer both go on.
  status send_p2p(const ipc::connection& c, int to, const header& h, const void* body, deadline until,
                  const detail::operation& op);
  ipc::connection& link(std::map<int, ipc::connection>& links, int r);
  // Waits until `fd` is readable or `until` passes (false), watching the group's connections meanwhile: an abort
  // told there ends the wait with it, so a rank waiting for a message hears of an abort at once.
  result<bool> wait_watching(int fd, deadline until, const detail::operation& op);
  void adopt(std::map<int, ipc::connection>& links, int r, ipc::connection c);

  status send_message(const ipc::connection& c, int to, const header& h, const void* body, deadline until,
                      const detail::operation& op) const;
  result<message> receive_chunk(const ipc::connection& c, int from, deadline until, const detail::operation& op) const;
  result<message> receive_message(const ipc::connection& c, int from, deadline until, const expectation& expect,
                                  const detail::operation& op) const;
  // An I/O error with rank `r`: when r is gone, the account it left in the socket (its abort) is the error.
  error explain_loss(int r, error e, const detail::operation& op) const;
  error fail(error e);  // tells the peers, returns e
  void tell(const ipc::connection& c, int to, const header& h, const std::string& text) const;
  // Reads and drops what peers still send, until they are quiet for a moment or `until`: a socket closed with
  // messages unread resets the peer's end (ECONNRESET), losing the abort message queued for it there.
  void drain(deadline until) const noexcept;
  std::string who(int r) const {
    return r >= 0 && r < static_cast<int>(pids_.size()) && pids_[r] != 0 ? fmt::format("rank {} (pid {})", r, pids_[r])
                                                                         : fmt::format("rank {}", r);
  }

  int rank_ = 0;
  int size_ = 0;
  std::string name_;
  std::vector<int> nodes_;
  std::vector<detail::node_position> positions_;
  std::vector<std::int32_t> pids_;
  std::vector<ipc::connection> peers_;         // root: one per rank (its own empty); others: [0] is the root
  mutable std::atomic<int> aborted_rank_{-1};  // the rank whose abort this rank heard of (-1: none)
  mutable std::atomic<bool> told_{false};      // a peer's abort message was read (its account of a failure)
  // Point to point: this rank's listener, the connections it opened to each peer, those each peer opened to it,
  // and messages that came for another tag than the one a receive waited for.
  ipc::listener p2p_;
  std::optional<error> p2p_unavailable_;
  // Guarded by links_: abort() walks them from another thread while this rank's thread adds to them (an entry, once
  // valid, is never replaced, and std::map never moves one, so a reference taken under the lock stays good).
  std::map<int, ipc::connection> out_, in_;
  mutable std::mutex links_;
  bool links_closed_ = false;  // abort() ran: a link made after it is ended at once
  std::map<std::pair<int, int>, std::deque<std::vector<std::uint8_t>>> kept_;  // (peer, tag) -> messages
  std::uint64_t kept_bytes_ = 0;    // of kept_ and partial_ (a message counts from its first chunk)
  std::map<int, message> partial_;  // peer -> the message whose chunks are arriving
};

std::string p2p_name(std::string_view name, int r) { return fmt::format("{}#p2p-{}", name, r); }

// Frames `body` (h.total bytes) as chunks of at most chunk_bytes, each behind a copy of `h` — at least one, even for
// 0 bytes — and hands each to `send_chunk(const std::vector<std::uint8_t>&) -> status`, stopping at its first error.
template <class SendChunk>
status send_chunks(const header& h, const void* body, SendChunk&& send_chunk) {
  const auto* bytes = static_cast<const std::uint8_t*>(body);
  std::vector<std::uint8_t> buffer;
  std::size_t sent = 0;
  do {
    const std::size_t n = std::min<std::size_t>(chunk_bytes, h.total - sent);
    buffer.resize(sizeof(header) + n);
    std::memcpy(buffer.data(), &h, sizeof(header));
    if (n > 0) std::memcpy(buffer.data() + sizeof(header), bytes + sent, n);
    PVMM_TRY(send_chunk(buffer));
    sent += n;
  } while (sent < h.total);
  return {};
}

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
      return op.wrap(aborted_by(m.head.rank));
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

// A message of kind `what` for step `sequence` holding exactly `total` bytes; anything else from `from` is a
// protocol error (a mismatched size in a gather is reported by the caller's own expectation).
expectation exactly(kind what, std::uint64_t sequence, std::uint64_t total, std::string from,
                    const detail::operation& op) {
  return [=, &op](const header& h) -> status {
    if (h.what != what || h.sequence != sequence || h.total != total)
      return op.fail(errc::protocol_error, fmt::format("{} sent message {} of kind {} with {} bytes; expected "
                                                       "message {} of kind {} with {} bytes",
                                                       from, h.sequence, static_cast<std::uint32_t>(h.what), h.total,
                                                       sequence, static_cast<std::uint32_t>(what), total));
    return {};
  };
}

error endpoint_bootstrap::explain_loss(int r, error e, const detail::operation& op) const {
  if (e.code != errc::peer_lost || r < 0 || r >= static_cast<int>(peers_.size()) || !peers_[r].valid()) return e;
  told_ = false;
  auto why =
      receive_chunk(peers_[r], r, detail::later(std::chrono::steady_clock::now(), std::chrono::milliseconds(50)), op);
  if (!why && told_) return std::move(why).error();
  return e;
}

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
    if (!waited && h.total > max_kept_bytes - std::min(kept_bytes_, max_kept_bytes))
      return op.fail(errc::protocol_error,
                     fmt::format("{} sent more than {} bytes for tags not yet received", who(peer), max_kept_bytes));
    message m;
    m.head = h;
    m.body.reserve(h.total);
    kept_bytes_ += h.total;
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
  auto& kept = kept_[{peer, tag}];
  for (;;) {
    if (!kept.empty()) {
      if (kept.front().size() != bytes)
        return op.fail(errc::team_mismatch, fmt::format("rank {} sent {} bytes with tag {}, rank {} expected {}", peer,
                                                        kept.front().size(), tag, rank_, bytes));
      if (bytes > 0) std::memcpy(data, kept.front().data(), bytes);
      kept_bytes_ -= bytes;
      kept.pop_front();
      return {};
    }
    PVMM_TRY_ASSIGN(c, incoming(peer, until, op));
    PVMM_TRY_ASSIGN(ready, wait_watching(c->native_handle(), until, op));
    if (!ready)
      return op.fail(errc::timeout, fmt::format("{} sent nothing with tag {} before the deadline", who(peer), tag));
    PVMM_TRY(take_chunk(*c, peer, tag, bytes, until, op));
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
    (void)fail(aborted_by(rank_));
  } catch (...) {  // formatting failed: still end the connections below
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
  self->positions_ = detail::positions_in_nodes(self->nodes_);
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
  try {
    return endpoint_bootstrap::start(name, rank, size, deadline_in(timeout), options.node < 0 ? 0 : options.node, op);
  } catch (const std::bad_alloc&) {
    return op.fail(errc::out_of_memory, "memory ran out while the group formed");
  }
}

}  // namespace pvmm
