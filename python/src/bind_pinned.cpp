// Host-visible memory: pvmm.PinnedAllocation, pvmm.ManagedAllocation and the staging pool pvmm.PinnedPool.
#include <cstdint>
#include <memory>

#include "views.hpp"

namespace pvmm_py {

using namespace nb::literals;

namespace {

struct py_pinned : owner<pvmm::pinned_allocation> {};
struct py_managed : owner<pvmm::managed_allocation> {};
struct py_pinned_pool {
  holder<pvmm::pinned_pool> h;
};

/// Memory the program owns (a Python buffer), page-locked: the registration and the buffer it holds.
struct registered_buffer {
  pvmm::host_registration registration;
  Py_buffer view{};
  registered_buffer() = default;
  registered_buffer(const registered_buffer&) = delete;
  registered_buffer& operator=(const registered_buffer&) = delete;
  ~registered_buffer() {
    (void)registration.release();  // unlocks first: the buffer may go after
    nb::gil_scoped_acquire gil;
    PyBuffer_Release(&view);
  }
};
struct py_registered : owner<registered_buffer> {};

/// A memory owner T made from a size alone (T::create(size)) as the Python class Py `name`: create(size) and the
/// methods every memory owner has (bind_memory).
template <class Py, class T>
void bind_sized(nb::module_& m, const char* name, const char* doc, memory_label label) {
  auto cls = nb::class_<Py>(m, name, doc, nb::type_slots(buffer_slots<Py>()));
  cls.def_static(
      "create",
      [label](std::size_t size) {
        Py p;
        p.label = label;
        p.h.reset(std::make_shared<T>(unwrap(T::create(size))));
        return p;
      },
      "size"_a);
  bind_memory(
      cls, name, [](const T& b) { return b.data(); }, [](const T& b) { return b.size(); });
}

}  // namespace

void bind_pinned(nb::module_& m) {
  bind_sized<py_pinned, pvmm::pinned_allocation>(m, "PinnedAllocation", "Page-locked host memory.",
                                                 memory_label::pinned);

  closable(
      nb::class_<py_pinned_pool>(m, "PinnedPool",
                                 "Page-locked staging buffers, reused once the copies that read them have completed "
                                 "(pvmm::pinned_pool)."))
      .def_static(
          "create",
          [](int device, bool driver_pool) {
            pvmm::pinned_pool_options o;
            o.device = device;
            o.driver_pool = driver_pool;
            py_pinned_pool p;
            p.h.reset(std::make_shared<pvmm::pinned_pool>(unwrap(pvmm::pinned_pool::create(o))));
            return p;
          },
          "device"_a = 0, "driver_pool"_a = true)
      .def(
          "allocate",
          [](const py_pinned_pool& p, std::size_t size) {
            return reinterpret_cast<std::uintptr_t>(unwrap(p.h.use("allocate")->allocate(size)));
          },
          "size"_a, "A pointer (int) the host may write at once; give it back with deallocate.")
      .def(
          "deallocate",
          [](const py_pinned_pool& p, std::uintptr_t pointer, nb::handle stream) {
            auto pool = p.h.use("deallocate");
            unwrap(pool->deallocate(reinterpret_cast<void*>(pointer), stream_of(stream, pool->device())));
          },
          "pointer"_a, "stream"_a,
          "Gives the block back in `stream`'s order (a pvmm.Stream or a foreign one): the stream of its last use.")
      .def(
          "trim", [](const py_pinned_pool& p) { call_unlocked(p.h, "trim", [&](auto& o) { return o.trim(); }); },
          "Waits for the cached blocks' copies and gives them back.")
      .def("stats",
           [](const py_pinned_pool& p) {
             const auto st = p.h.use("stats")->stats();
             return dict_of("reserved", st.reserved, "live", st.live, "live_blocks", st.live_blocks, "cached_blocks",
                            st.cached_blocks, "cache_hits", st.cache_hits, "new_blocks", st.new_blocks, "passed_over",
                            st.passed_over);
           })
      .def_prop_ro("source", [](const py_pinned_pool& p) {
        return p.h.use("source")->source() == pvmm::pinned_source::driver_pool ? "driver_pool" : "pinned_allocations";
      });

  auto registered = nb::class_<py_registered>(
      m, "HostRegistration", "Memory the program owns (a NumPy array, a bytearray), page-locked while this lives.",
      nb::type_slots(buffer_slots<py_registered>()));
  registered.def_static(
      "create",
      [](nb::handle buffer, bool mapped) {
        auto r = std::make_shared<registered_buffer>();
        if (PyObject_GetBuffer(buffer.ptr(), &r->view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
          r->view.obj = nullptr;
          throw nb::python_error();
        }
        pvmm::pinned_options o;
        o.mapped = mapped;
        void* data = r->view.buf;
        const auto size = static_cast<std::size_t>(r->view.len);
        {
          nb::gil_scoped_release release;  // page-locking a large range takes a while
          auto made = pvmm::host_registration::create(data, size, o);
          if (!made) {
            nb::gil_scoped_acquire gil;
            PyBuffer_Release(&r->view);
            r->view.obj = nullptr;
            throw pvmm::exception(std::move(made).error());
          }
          r->registration = std::move(*made);
        }
        py_registered p;
        p.label = memory_label::pinned;
        p.h.reset(std::move(r));
        return p;
      },
      "buffer"_a, "mapped"_a = true,
      "Page-locks a writable C-contiguous buffer (a NumPy array, a bytearray): copies from and to it run as from "
      "pinned memory. The buffer is held (not resized or freed) until close().");
  bind_memory(
      registered, "HostRegistration", [](const registered_buffer& b) { return b.registration.data(); },
      [](const registered_buffer& b) { return b.registration.size(); });

  bind_sized<py_managed, pvmm::managed_allocation>(m, "ManagedAllocation", "Managed (unified) memory.",
                                                   memory_label::managed);
}

}  // namespace pvmm_py
