// Python exception classes, generated from PVMM_ERRC_LIST: pvmm.PvmmError and one subclass per errc value, and the
// translator that raises them from a pvmm::exception with the whole error record.
#include <nanobind/stl/string.h>

#include <map>
#include <string>

#include "common.hpp"

namespace pvmm_py {

namespace {

PyObject* base_error = nullptr;
std::map<int, PyObject*> error_classes;

std::string class_name(const char* errc_name) {
  std::string out;
  bool upper = true;
  for (const char* c = errc_name; *c; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(*c - 'a' + 'A') : *c;
    upper = false;
  }
  return out.size() > 5 && out.compare(out.size() - 5, 5, "Error") == 0 ? out : out + "Error";  // no ErrorError
}

}  // namespace

void set_python_error(const pvmm::error& e) {
  auto it = error_classes.find(static_cast<int>(e.code));
  PyObject* type = it == error_classes.end() ? base_error : it->second;
  nb::object instance = nb::steal(PyObject_CallFunction(type, "s", e.message().c_str()));
  if (!instance.is_valid()) return;  // the call set an exception of its own
  instance.attr("code") = pvmm::to_string(e.code);
  instance.attr("value") = static_cast<int>(e.code);
  instance.attr("operation") = e.operation;
  instance.attr("arguments") = e.arguments;
  instance.attr("detail") = e.detail;
  instance.attr("native_name") = e.native_name;
  instance.attr("native_code") = e.native_code;
  instance.attr("hint") = e.hint;
  PyErr_SetObject(type, instance.ptr());
}

void bind_errors(nb::module_& m) {
  // Named after the module as imported ("pvmm._pvmm"; "_pvmm" when stubgen imports it alone), so that stubgen
  // lists the classes in the stub.
  const std::string module = nb::cast<std::string>(m.attr("__name__"));
  base_error = PyErr_NewExceptionWithDoc((module + ".PvmmError").c_str(),
                                         "Base of every pvmm error. Fields: code (errc name), value (errc value), "
                                         "operation, arguments, detail, native_name, native_code, hint.",
                                         PyExc_RuntimeError, nullptr);
  m.attr("PvmmError") = nb::handle(base_error);
  nb::dict errc;
  // BusyError is also a BufferError: what refuses to resize or unmap memory with live views raises what Python's
  // own types (bytearray, mmap) raise there.
  auto make_class = [](const std::string& name, const char* doc, bool buffer_error) {
    if (!buffer_error) return PyErr_NewExceptionWithDoc(name.c_str(), doc, base_error, nullptr);
    nb::object bases = nb::make_tuple(nb::handle(base_error), nb::handle(PyExc_BufferError));
    return PyErr_NewExceptionWithDoc(name.c_str(), doc, bases.ptr(), nullptr);
  };
#define PVMM_PY_ERROR(name, value, meaning)                                                                \
  {                                                                                                        \
    const std::string cls = class_name(#name);                                                             \
    PyObject* type = make_class(module + "." + cls, meaning, value == static_cast<int>(pvmm::errc::busy)); \
    m.attr(cls.c_str()) = nb::handle(type);                                                                \
    error_classes[value] = type;                                                                           \
    errc[#name] = nb::make_tuple(value, meaning, nb::handle(type));                                        \
  }
  PVMM_ERRC_LIST(PVMM_PY_ERROR)
#undef PVMM_PY_ERROR
  m.attr("ERRC") = errc;

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const pvmm::exception& ex) {
      set_python_error(ex.error());
    }
  });
}

}  // namespace pvmm_py
