// Teams and symmetric windows as Python objects: the holders bind_team.cpp and bind_window.cpp share.
#pragma once

#include <memory>
#include <utility>

#include <pvmm/team.hpp>

#include "blocking.hpp"
#include "holder.hpp"

namespace pvmm_py {

struct py_team {
  holder<pvmm::team> h;
};

/// A collective object (a window, a heap) with its team: the team lives while the object does (the object's release
/// talks to the peers), and the release never runs with the GIL held.
template <class T>
struct team_share {
  std::shared_ptr<pvmm::team> team;
  T object;
  team_share() = default;
  team_share(const team_share&) = delete;
  team_share& operator=(const team_share&) = delete;
  ~team_share() {
    if (PyGILState_Check()) {
      nanobind::gil_scoped_release release;
      (void)object.release();
    } else {
      (void)object.release();
    }
  }
};
using window_share = team_share<pvmm::symmetric_window>;

/// A collective call on a team's object, run interruptibly (run_interruptible): Ctrl-C or a callback's exception
/// aborts the team, so the peers get peer_lost naming this rank.
template <class F>
auto run_collective(std::shared_ptr<pvmm::team> team, F call) {
  callback_errors errors;
  return unwrap(run_interruptible(
      std::move(call), [team] { team->abort(); }, errors));
}

struct py_window {
  holder<window_share> h;
};

/// A timed collective on the team object behind `h` (a call `name`d "pvmm.Window.grow": the timeout is checked
/// under that name, the use under `use_name`): call(object, timeout), run by run_collective.
template <class T, class Call>
auto timed_collective(const holder<team_share<T>>& h, const char* name, const char* use_name, std::int64_t timeout_ms,
                      Call call) {
  const auto timeout = checked_timeout(timeout_ms, name);
  auto share = h.use(use_name);
  return run_collective(share->team, [share, timeout, call] { return call(share->object, timeout); });
}

/// A new collective object over `team`, as the Python object Py holding it: make() gives the object (run
/// collectively, run_collective).
template <class Py, class T, class Make>
Py make_collective(const std::shared_ptr<pvmm::team>& team, Make make) {
  auto share = std::make_shared<team_share<T>>();
  share->object = run_collective(team, std::move(make));
  share->team = team;
  Py out;
  out.h.reset(std::move(share));
  return out;
}

}  // namespace pvmm_py
