// The sleeping allocator's sleep and wake: bulk asynchronous copies (direct to page-locked copies, or through the
// staging ring), each allocation unmapped as soon as its copy is seen done, mapped just before its copy is queued.
#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "alloc/sleeping_state.hpp"

namespace pvmm {

using detail::sleeping::entry;
using detail::sleeping::host_store;

namespace detail::sleeping {
/// A slot-sized piece of one allocation's copy through the staging ring.
struct piece {
  entry* e = nullptr;
  std::size_t at = 0;  // offset in the allocation
  std::size_t size = 0;
  host_store* store = nullptr;
  std::size_t host_at = 0;  // offset in the store
  bool last = false;        // the allocation's last piece
};
struct planned_copy {
  entry* e = nullptr;
  std::shared_ptr<host_store> store;
  std::size_t offset = 0;
};
inline void add_pieces(std::vector<piece>& out, entry* e, host_store* store, std::size_t host_at, std::size_t slot) {
  for (std::size_t at = 0; at < e->size; at += slot) {
    const std::size_t n = std::min(slot, e->size - at);
    out.push_back({e, at, n, store, host_at + at, at + n == e->size});
  }
}
}  // namespace detail::sleeping

auto sleeping_allocator::state::plan_copy(copy_plan& plan, const entry& e, const detail::operation& op) const
    -> result<bool> {
  auto& t = plan[e.tag];
  t.first = policy_of(e.tag);
  if (t.first.policy == sleep_policy::discard || (e.copy && t.first.retain_host_copy)) return false;
  if (e.size > static_cast<std::size_t>(-1) - t.second)
    return op.fail(errc::out_of_memory, fmt::format("the host copies of tag '{}' exceed the address space", e.tag));
  t.second += e.size;
  return true;
}

result<event> sleeping_allocator::state::do_sleep(const std::vector<entry*>& moved, stream_ref* on,
                                                  const detail::operation& op) {
  using detail::sleeping::planned_copy;
  auto& eng = engine;
  // Plan: per tag, one host store holding the copies of its allocations (a retained copy is reused as it is).
  copy_plan tags;
  std::vector<entry*> keep;  // nothing to copy: discarded or retained
  {
    std::lock_guard<std::mutex> guard(lock);
    for (entry* e : moved) {
      auto copied = plan_copy(tags, *e, op);
      if (!copied) return std::move(copied).error();
      if (!*copied) keep.push_back(e);
    }
  }
  std::map<std::string, std::shared_ptr<host_store>> stores;
  struct keep_on_failure {  // destroyed after the planned copies below: a store no entry took has one owner left
    state& s;
    std::map<std::string, std::shared_ptr<host_store>>& stores;
    ~keep_on_failure() { s.keep_unused(stores); }
  } keep_unused_stores{*this, stores};
  for (auto& [tag, t] : tags) {
    if (t.second == 0) continue;
    auto s = t.first.policy == sleep_policy::offload_pinned ? pinned_store(t.first, tag, t.second, op)
                                                            : host_store::create(t.first, t.second, register_host, op);
    if (!s) {
      error err = std::move(s).error();
      err.detail = fmt::format("tag '{}': {}", tag, err.detail);
      return err;  // nothing changed
    }
    stores[tag] = std::move(s).value();
  }
  std::vector<planned_copy> direct, staged;
  {
    std::map<std::string, std::size_t> filled;
    for (entry* e : moved) {
      auto it = stores.find(e->tag);
      if (it == stores.end() || std::find(keep.begin(), keep.end(), e) != keep.end()) continue;
      planned_copy c{e, it->second, filled[e->tag]};
      filled[e->tag] += e->size;
      (it->second->kind == sleep_policy::offload_pinned ? direct : staged).push_back(std::move(c));
    }
  }
  notify(moved, backing_event::sleep);  // before any old backing goes; no lock held
  auto finish = [&](entry* e, std::shared_ptr<host_store> store, std::size_t offset) -> status {
    if (auto ok = unmap_release(*e, op); !ok) return ok;
    std::lock_guard<std::mutex> guard(lock);
    if (store) e->copy = std::move(store), e->copy_offset = offset;
    if (!e->copy || policy_of(e->tag).policy == sleep_policy::discard) e->copy.reset();
    e->asleep = true;
    return {};
  };
  auto fail = [&](error err) -> error {
    (void)eng.synchronize_all(op);  // no copy may still write a store this call drops
    return err;
  };
  if (auto ok = eng.ensure_streams(op); !ok) return ok.error();
  if (on)
    if (auto ok = eng.follow(*on, op); !ok) return ok.error();
  // Direct copies first: the device runs them while the host fills and drains the staging ring below.
  for (std::size_t i = 0; i < direct.size(); ++i) {
    auto& s = eng.streams[i % eng.streams.size()];
    auto* e = direct[i].e;
    if (auto ok = s.copy_async(direct[i].store->memory() + direct[i].offset, e->address, e->size); !ok)
      return fail(op.wrap(std::move(ok).error()));
    auto ev = eng.event_at(i, op);
    if (!ev) return fail(std::move(ev).error());
    if (auto ok = (*ev)->record(s); !ok) return fail(op.wrap(std::move(ok).error()));
  }
  if (!staged.empty()) {
    if (auto ok = eng.ensure_ring(op); !ok) return fail(ok.error());
    std::vector<detail::sleeping::piece> pieces;
    for (auto& c : staged) detail::sleeping::add_pieces(pieces, c.e, c.store.get(), c.offset, eng.slot_bytes);
    std::vector<long> in_slot(eng.slots, -1);
    auto* ring = static_cast<unsigned char*>(eng.ring.data());
    auto drain = [&](unsigned slot) -> status {
      const long p = in_slot[slot];
      if (p < 0) return {};
      in_slot[slot] = -1;
      if (auto ok = eng.wait_slot(slot, op); !ok) return ok;
      auto& pc = pieces[static_cast<std::size_t>(p)];
      if (auto ok = pc.store->write(pc.host_at, ring + slot * eng.slot_bytes, pc.size, op); !ok) return ok;
      if (!pc.last) return {};
      for (auto& c : staged)
        if (c.e == pc.e) return finish(c.e, c.store, c.offset);
      return {};
    };
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      const auto slot = static_cast<unsigned>(p % eng.slots);
      if (auto ok = drain(slot); !ok) return fail(ok.error());
      auto& s = eng.streams[p % eng.streams.size()];
      auto& pc = pieces[p];
      if (auto ok =
              s.copy_async(ring + slot * eng.slot_bytes, static_cast<unsigned char*>(pc.e->address) + pc.at, pc.size);
          !ok)
        return fail(op.wrap(std::move(ok).error()));
      if (auto ok = eng.slot_done[slot].record(s); !ok) return fail(op.wrap(std::move(ok).error()));
      eng.slot_used[slot] = true;
      in_slot[slot] = static_cast<long>(p);
    }
    for (std::size_t i = 0; i < eng.slots; ++i)  // the oldest first
      if (auto ok = drain(static_cast<unsigned>((pieces.size() + i) % eng.slots)); !ok) return fail(ok.error());
  }
  for (std::size_t i = 0; i < direct.size(); ++i) {
    if (auto ok = eng.events[i].synchronize(); !ok) return fail(op.wrap(std::move(ok).error()));
    if (auto ok = finish(direct[i].e, direct[i].store, direct[i].offset); !ok) return fail(ok.error());
  }
  if (on && !keep.empty())  // work queued on `on` may still use what is discarded: the unmap follows it
    if (auto ok = on->synchronize(); !ok) return op.wrap(std::move(ok).error());
  for (entry* e : keep)
    if (auto ok = finish(e, nullptr, 0); !ok) return ok.error();
  if (!on) return event{};
  return eng.join_into(*on, op);
}

result<event> sleeping_allocator::state::do_wake(const std::vector<entry*>& moved, stream_ref* on,
                                                 const detail::operation& op) {
  auto& eng = engine;
  if (auto ok = eng.ensure_streams(op); !ok) return ok.error();
  if (on)
    if (auto ok = eng.follow(*on, op); !ok) return ok.error();
  notify(moved, backing_event::wake);  // before the new backing is mapped; no lock held
  std::vector<entry*> mapped;
  const entry* current = nullptr;
  auto fail = [&](error err) -> error {
    (void)eng.synchronize_all(op);
    for (entry* e : mapped) (void)unmap_release(*e, op);  // asleep again; every host copy is kept
    if (!current && !moved.empty()) current = moved.front();
    if (current) {
      err.detail = fmt::format("waking tag '{}' ({} bytes at {}): {}", current->tag, current->size, current->address,
                               err.detail);
      err.hint = "nothing was lost: the host copies are kept; free device memory and call wake again";
    }
    return err;
  };
  auto map_one = [&](entry* e) -> status {
    current = e;
    if (auto ok = map_new(*e, op); !ok) return ok;
    mapped.push_back(e);
    return {};
  };
  std::vector<detail::sleeping::piece> pieces;
  std::size_t direct = 0;
  for (entry* e : moved) {
    if (!e->copy) {
      if (auto ok = map_one(e); !ok) return fail(ok.error());
    } else if (e->copy->kind == sleep_policy::offload_pinned) {
      if (auto ok = map_one(e); !ok) return fail(ok.error());
      auto& s = eng.streams[direct++ % eng.streams.size()];
      if (auto ok = s.copy_async(e->address, e->copy->memory() + e->copy_offset, e->size); !ok)
        return fail(op.wrap(std::move(ok).error()));
    } else {
      detail::sleeping::add_pieces(pieces, e, e->copy.get(), e->copy_offset, eng.slot_bytes);
    }
  }
  if (!pieces.empty()) {
    if (auto ok = eng.ensure_ring(op); !ok) return fail(ok.error());
    auto* ring = static_cast<unsigned char*>(eng.ring.data());
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      auto& pc = pieces[p];
      if (pc.at == 0)
        if (auto ok = map_one(pc.e); !ok) return fail(ok.error());
      current = pc.e;
      const auto slot = static_cast<unsigned>(p % eng.slots);
      if (auto ok = eng.wait_slot(slot, op); !ok) return fail(ok.error());
      if (auto ok = pc.store->read(pc.host_at, ring + slot * eng.slot_bytes, pc.size, op); !ok) return fail(ok.error());
      auto& s = eng.streams[p % eng.streams.size()];
      if (auto ok =
              s.copy_async(static_cast<unsigned char*>(pc.e->address) + pc.at, ring + slot * eng.slot_bytes, pc.size);
          !ok)
        return fail(op.wrap(std::move(ok).error()));
      if (auto ok = eng.slot_done[slot].record(s); !ok) return fail(op.wrap(std::move(ok).error()));
      eng.slot_used[slot] = true;
    }
  }
  result<event> done = event{};
  if (on) {
    done = eng.join_into(*on, op);
  } else if (auto ok = eng.synchronize_all(op); !ok) {
    done = ok.error();
  }
  if (!done) return fail(std::move(done).error());
  std::vector<std::shared_ptr<host_store>> released;  // freed after the lock (or once `on` passed the copies)
  {
    std::lock_guard<std::mutex> guard(lock);
    for (entry* e : moved) {
      e->asleep = false;
      if (e->copy && !policy_of(e->tag).retain_host_copy) released.push_back(std::move(e->copy));
    }
    if (!on) recycle(released);
    if (on && !released.empty()) {
      auto keep = event::create(on->device());
      if (keep && keep->record(*on)) {
        pending.push_back({std::move(keep).value(), std::move(released)});
      } else {
        (void)on->synchronize();
      }
    }
  }
  return done;
}

}  // namespace pvmm
