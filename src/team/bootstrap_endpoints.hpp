// The endpoints adapter's shared parts (bootstrap_endpoints.cpp: meeting, the root's relay, abort;
// bootstrap_p2p.cpp: point-to-point messages): the wire header, its limits and the adapter's class.
#pragma once

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

namespace pvmm::detail::endpoints {

constexpr std::uint32_t header_magic = 0x54425650;  // "PVBT"
constexpr std::size_t chunk_bytes = 32 * 1024;      // one message's payload: well under the socket's buffer
constexpr auto root_grace = std::chrono::milliseconds(500);
// A connection to the root that has not said hello in this time is a stranger's, dropped.
constexpr auto hello_bound = std::chrono::milliseconds(1000);
// How often a wait that cannot poll (a connect) looks whether an abort was told.
constexpr auto abort_slice = std::chrono::milliseconds(100);
constexpr std::size_t max_abort_text = 4000;  // an abort's text fits one chunk
// Messages of other tags held for later receives, per rank: what they cost the receiver is bounded, in bytes (each
// counted with kept_overhead for its buffer, queue and map entry: measured, 300 000 one-byte messages on distinct
// tags took 215 MiB) and in count.
constexpr std::uint64_t max_kept_bytes = 256ull << 20;
constexpr std::uint64_t kept_overhead = 1024;
constexpr std::uint64_t max_kept_messages = 16384;
constexpr std::uint64_t kept_cost(std::uint64_t payload) { return payload + kept_overhead; }

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
  std::int32_t aborted = 0;  // abort: 1 when `rank` called abort (with `code`, its first failure's errc)
};

struct message {
  header head;
  std::vector<std::uint8_t> body;
};

// What a step may receive, checked on a message's first chunk before anything is allocated for it.
using expectation = std::function<status(const header&)>;

class endpoint_bootstrap final : public detail::placed_bootstrap {
 public:
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

  std::string name_;
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
  std::uint64_t kept_bytes_ = 0;     // kept_cost of kept_ and partial_ (a message counts from its first chunk)
  std::uint64_t kept_messages_ = 0;  // messages in kept_ and partial_
  std::map<int, message> partial_;   // peer -> the message whose chunks are arriving
};

inline std::string p2p_name(std::string_view name, int r) { return fmt::format("{}#p2p-{}", name, r); }

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

// A message of kind `what` for step `sequence` holding exactly `total` bytes; anything else from `from` is a
// protocol error (a mismatched size in a gather is reported by the caller's own expectation).
inline expectation exactly(kind what, std::uint64_t sequence, std::uint64_t total, std::string from,
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

}  // namespace pvmm::detail::endpoints
