// The one record exchange every team step uses: a typed allgather whose records carry the step and the sender's
// local failure in one envelope, checked in one place (PyTorch's StoreExchange::all_gather<T> is the model).
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include <pvmm/bootstrap.hpp>

#include "core/operation.hpp"

namespace pvmm::detail {

/// What travels ahead of every step's record (fixed layout): the step, and this rank's local failure (its errc and
/// text; 0 when none), so a rank that failed still takes part and every rank fails at once naming it.
struct step_envelope {
  static constexpr std::uint32_t magic_value = 0x45545650;  // "PVTE"
  std::uint32_t magic = magic_value;
  std::uint32_t step = 0;
  std::int32_t failed = 0;
  std::int32_t reserved = 0;
  char failure[192] = {};
};

/// One rank's record as it travels: the envelope, then the step's own body.
template <class T>
struct enveloped {
  step_envelope envelope;
  T body;
};

/// The envelope this rank sends for `step`, carrying `failed` when set.
step_envelope make_envelope(std::uint32_t step, const std::optional<error>& failed);

/// Checks envelope `e` of rank `r` for `step`: team_mismatch when it is no envelope of this step.
status check_envelope(const step_envelope& e, int r, std::uint32_t step, const char* what, const operation& op);

/// The step's outcome once every envelope is checked: this rank's own failure (`mine`), else the lowest failed
/// rank's errc and text, named ("rank 2 failed (allgather chunks): ..."), else success.
status step_outcome(const std::vector<const step_envelope*>& all, int me, const std::optional<error>& mine,
                    const char* what, const operation& op);

/// Collective over `ranks`: every rank's `mine` for `step`, in rank order; the step fails alike on every rank when
/// any rank passed a `failed` (the lowest such rank named) or is at another step. The one allgather of team steps.
/// `exchanged` (or null) is set when the bootstrap's allgather itself succeeded: a failure then is in what this
/// rank received (the same on every rank, or this rank's alone when its bootstrap handed it wrong bytes), and the
/// caller can still close the step with its peers; else the bootstrap failed, which tells the peers itself.
template <class T>
result<std::vector<T>> all_gather(bootstrap& ranks, std::uint32_t step, const T& mine,
                                  const std::optional<error>& failed, const char* what, deadline until,
                                  const operation& op, bool* exchanged = nullptr) {
  static_assert(std::is_trivially_copyable_v<T>, "team records travel as bytes");
  enveloped<T> record{make_envelope(step, failed), mine};
  // Every buffer this rank needs is made before the exchange: nothing after it allocates (docs/design.md, "nothing
  // fallible after the agreement"; a failure's own text aside, which only a failed step makes).
  const auto n = static_cast<std::size_t>(ranks.size());
  std::vector<enveloped<T>> all(n);
  std::vector<const step_envelope*> envelopes(n, nullptr);
  std::vector<T> out(n);
  if (exchanged != nullptr) *exchanged = false;
  PVMM_TRY(op.step(what, [&] { return ranks.allgather(&record, sizeof record, all.data(), until); }));
  if (exchanged != nullptr) *exchanged = true;
  for (std::size_t r = 0; r < n; ++r) {
    PVMM_TRY(check_envelope(all[r].envelope, static_cast<int>(r), step, what, op));
    envelopes[r] = &all[r].envelope;
  }
  PVMM_TRY(step_outcome(envelopes, ranks.rank(), failed, what, op));
  for (std::size_t r = 0; r < n; ++r) out[r] = all[r].body;
  return out;
}

}  // namespace pvmm::detail
