// pvmm/team_collectives.hpp - collective building blocks over a symmetric window, made of pvmm/team_device.hpp's
// calls: one-shot and two-shot all-reduce, reduce-scatter and all-gather (sums), for a kernel author to call or copy.
// The same header compiles under nvcc, hipcc and a host compiler; in host code the calls run on host memory (the
// host backend's windows), which is how CI checks them (tests/team/collectives.cpp).
//
// Data: rank r's operand is `count` elements of T at byte `offset` of its own slot (window_view::peer(r)); results
// are written in place in the slots (one_shot_all_reduce_sum and all_reduce_sum also into `out`). Every peer's slot
// must be mapped (symmetric_window::all_mapped). Rank r's chunk is elements [chunk_begin(r), chunk_begin(r + 1)):
// count / size each, the first count % size ranks one more.
// Groups: every thread of one group per rank calls (Scope: block_scope, warp_scope or thread_scope; in host code the
// calling thread); the group's threads share the loops, and the barriers are the group's (team_device.hpp).
// Synchronisation: one signal channel per collective in flight, used by nothing else meanwhile. Each call starts
// with a barrier (every operand is in place) and ends with one (no peer still reads this rank's slot), so a rank may
// rewrite its slot once the call returns. Every barrier is bounded by `timeout_ns` from its start; false when one
// expired or the team aborted (recorded for signal_status()), and the results are then undefined.
// Cost per rank: one-shot reads (size - 1) x count elements behind two barriers; two-shot reads 2 (size - 1) / size
// x count behind three. all_reduce_sum picks one-shot up to `one_shot_bytes` (256 KiB by default, where
// torch SymmetricMemory and NCCL switch on NVLink; measure yours with pvmm-bench teams).
#pragma once

#include <cstddef>
#include <cstdint>

#include <pvmm/team_device.hpp>

namespace pvmm {

/// Where rank `r`'s chunk of `count` elements begins, for `ranks` ranks (chunk_begin(ranks) == count).
PVMM_HOST_DEVICE inline std::size_t chunk_begin(std::size_t count, int r, int ranks) {
  const std::size_t n = static_cast<std::size_t>(ranks), i = static_cast<std::size_t>(r);
  const std::size_t rest = count % n;
  return i * (count / n) + (i < rest ? i : rest);
}

namespace detail {
template <class T>
PVMM_HOST_DEVICE inline T* slot_at(const window_view& v, int r, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(v.peer(r)) + offset);
}
// Every element of this rank's chunk summed over the ranks, written to `into` (the chunk's own place when `into` is
// this rank's slot). The group's threads take elements in turn.
template <class T, class Scope>
PVMM_HOST_DEVICE inline void sum_range(const window_view& v, std::size_t offset, std::size_t begin, std::size_t end,
                                       T* into) {
  for (std::size_t i = begin + group<Scope>::index(); i < end; i += group<Scope>::count()) {
    T sum = slot_at<T>(v, 0, offset)[i];
    for (int r = 1; r < v.size; ++r) sum += slot_at<T>(v, r, offset)[i];
    into[i] = sum;
  }
}
// Every peer's chunk of its slot copied into the same chunk of `mine` (this rank's slot). The group's threads take
// elements in turn.
template <class T, class Scope>
PVMM_HOST_DEVICE inline void gather_chunks(const window_view& v, std::size_t offset, std::size_t count, T* mine) {
  for (int q = 0; q < v.size; ++q) {
    if (q == v.rank) continue;
    const T* const theirs = slot_at<T>(v, q, offset);
    const std::size_t end = chunk_begin(count, q + 1, v.size);
    for (std::size_t i = chunk_begin(count, q, v.size) + group<Scope>::index(); i < end; i += group<Scope>::count())
      mine[i] = theirs[i];
  }
}
}  // namespace detail

/// Sum of every rank's operand into `out` (this rank's memory, not a slot of the window), every rank reading every
/// peer's whole operand: the fewest barriers, for small counts.
template <class T, class Scope>
PVMM_HOST_DEVICE bool one_shot_all_reduce_sum(Scope s, const window_view& v, std::size_t offset, std::size_t count,
                                              T* out, int channel, std::uint64_t timeout_ns) {
  if (!v.barrier(s, channel, timeout_ns)) return false;
  detail::sum_range<T, Scope>(v, offset, 0, count, out);
  return v.barrier(s, channel, timeout_ns);
}

/// Reduce-scatter, in place: afterwards rank r's chunk of its own slot holds the sum of every rank's chunk r (the
/// rest of its slot is as it was).
template <class T, class Scope>
PVMM_HOST_DEVICE bool reduce_scatter_sum(Scope s, const window_view& v, std::size_t offset, std::size_t count,
                                         int channel, std::uint64_t timeout_ns) {
  if (!v.barrier(s, channel, timeout_ns)) return false;
  detail::sum_range<T, Scope>(v, offset, chunk_begin(count, v.rank, v.size), chunk_begin(count, v.rank + 1, v.size),
                              detail::slot_at<T>(v, v.rank, offset));
  return v.barrier(s, channel, timeout_ns);
}

/// All-gather, in place: rank r's chunk of its own slot is copied into chunk r of every rank's slot.
template <class T, class Scope>
PVMM_HOST_DEVICE bool all_gather(Scope s, const window_view& v, std::size_t offset, std::size_t count, int channel,
                                 std::uint64_t timeout_ns) {
  if (!v.barrier(s, channel, timeout_ns)) return false;
  T* const mine = detail::slot_at<T>(v, v.rank, offset);
  detail::gather_chunks<T, Scope>(v, offset, count, mine);
  return v.barrier(s, channel, timeout_ns);
}

/// Two-shot all-reduce, in place in every slot: reduce-scatter, then all-gather (three barriers: the reduce-scatter's
/// closing barrier is the all-gather's opening one).
template <class T, class Scope>
PVMM_HOST_DEVICE bool two_shot_all_reduce_sum(Scope s, const window_view& v, std::size_t offset, std::size_t count,
                                              int channel, std::uint64_t timeout_ns) {
  if (!v.barrier(s, channel, timeout_ns)) return false;
  T* const mine = detail::slot_at<T>(v, v.rank, offset);
  detail::sum_range<T, Scope>(v, offset, chunk_begin(count, v.rank, v.size), chunk_begin(count, v.rank + 1, v.size),
                              mine);
  if (!v.barrier(s, channel, timeout_ns)) return false;
  detail::gather_chunks<T, Scope>(v, offset, count, mine);
  return v.barrier(s, channel, timeout_ns);
}

/// The sum of every rank's operand in `out` (this rank's memory, or its own slot's operand itself): one-shot up to
/// `one_shot_bytes`, two-shot beyond (which also leaves the sum in every slot).
template <class T, class Scope>
PVMM_HOST_DEVICE bool all_reduce_sum(Scope s, const window_view& v, std::size_t offset, std::size_t count, T* out,
                                     int channel, std::uint64_t timeout_ns,
                                     std::size_t one_shot_bytes = std::size_t{256} << 10) {
  T* const mine = detail::slot_at<T>(v, v.rank, offset);
  if (count * sizeof(T) <= one_shot_bytes && out != mine)
    return one_shot_all_reduce_sum<T>(s, v, offset, count, out, channel, timeout_ns);
  if (!two_shot_all_reduce_sum<T>(s, v, offset, count, channel, timeout_ns)) return false;
  if (out != mine)
    for (std::size_t i = detail::group<Scope>::index(); i < count; i += detail::group<Scope>::count()) out[i] = mine[i];
  detail::group<Scope>::sync();
  return true;
}

}  // namespace pvmm
