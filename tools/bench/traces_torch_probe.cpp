// Configure-time probe (tools/CMakeLists.txt): traces_torch.cpp compiles and links against the given torch with
// this ABI. Never run; every function is referenced so that the link resolves them all.
#include "traces_torch.hpp"

int main(int argc, char**) {
  if (argc > 100) {
    namespace t = bench::torch_side;
    t::init();
    t::deallocate(t::allocate(1, nullptr));
    t::reset_peak();
    t::empty_cache();
    return static_cast<int>(t::peak_reserved());
  }
  return 0;
}
