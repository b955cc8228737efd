// Teams and symmetric windows as Python objects: the holders bind_team.cpp and bind_window.cpp share.
#pragma once

#include <memory>

#include <pvmm/team.hpp>

#include "holder.hpp"

namespace pvmm_py {

struct py_team {
  holder<pvmm::team> h;
};

/// A window with its team: the team lives while the window does (a window's release talks to the peers).
struct window_share {
  std::shared_ptr<pvmm::team> team;
  pvmm::symmetric_window window;
  window_share() = default;
  window_share(const window_share&) = delete;
  window_share& operator=(const window_share&) = delete;
  ~window_share() {  // release() may wait for peers: never with the GIL held
    if (PyGILState_Check()) {
      nanobind::gil_scoped_release release;
      (void)window.release();
    } else {
      (void)window.release();
    }
  }
};

struct py_window {
  holder<window_share> h;
};

}  // namespace pvmm_py
