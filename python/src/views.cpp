// DLPack views of memory owners: dtypes, device labels, and the one function that makes an array (checked bounds,
// the export pin, the read-only flag).
#include "views.hpp"

#include <nanobind/ndarray.h>

#include <map>

namespace pvmm_py {

namespace {

nb::dlpack::dtype parse_dtype(const std::string& name) {
  static const std::map<std::string, nb::dlpack::dtype> known = {
      {"uint8", nb::dtype<std::uint8_t>()},
      {"int8", nb::dtype<std::int8_t>()},
      {"uint16", nb::dtype<std::uint16_t>()},
      {"int16", nb::dtype<std::int16_t>()},
      {"uint32", nb::dtype<std::uint32_t>()},
      {"int32", nb::dtype<std::int32_t>()},
      {"uint64", nb::dtype<std::uint64_t>()},
      {"int64", nb::dtype<std::int64_t>()},
      {"float32", nb::dtype<float>()},
      {"float64", nb::dtype<double>()},
      {"float16", {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}},
      {"bfloat16", {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}},
      {"bool", {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1}},
  };
  auto it = known.find(name);
  if (it == known.end())
    raise(pvmm::errc::invalid_argument, "pvmm.view", "unknown dtype", "dtype=" + name,
          "one of uint8..uint64, int8..int64, float16, bfloat16, float32, float64, bool");
  return it->second;
}

}  // namespace

void throw_exported(const char* operation, std::size_t exports) {
  raise(pvmm::errc::busy, operation,
        std::to_string(exports) + " view(s) of this memory are alive (view(), __dlpack__, a buffer export)",
        "exports=" + std::to_string(exports),
        "views pin the memory: delete them (del array) before resizing, unmapping, changing access or freeing");
}

void throw_reshaping(const char* operation) {
  raise(pvmm::errc::busy, operation, "another thread is resizing, unmapping or freeing this memory", {},
        "take the view after that call returns");
}

std::pair<int, int> dlpack_device(memory_label label, int device) {
  if (backend_is("host")) return {nb::device::cpu::value, 0};
  const bool rocm = PVMM_PY_ROCM != 0;  // hip on AMD; hip on HIP's NVIDIA platform labels as cuda
  switch (label) {
    case memory_label::pinned:
      return {rocm ? nb::device::rocm_host::value : nb::device::cuda_host::value, 0};
    case memory_label::managed:
      return {nb::device::cuda_managed::value, device};
    case memory_label::device:
    default:
      return {rocm ? nb::device::rocm::value : nb::device::cuda::value, device};
  }
}

nb::object make_view(std::unique_ptr<export_pin> pin, void* data, std::size_t size, memory_label label, int device,
                     const view_spec& spec) {
  const nb::dlpack::dtype dtype = parse_dtype(spec.dtype);
  const std::size_t item = dtype.bits / 8;
  const std::size_t offset = spec.offset;
  std::vector<std::size_t> dims;
  if (spec.shape) {
    dims = *spec.shape;
  } else {
    dims.push_back(offset <= size ? (size - offset) / item : 0);
  }
  std::size_t bytes = item;
  for (std::size_t d : dims) bytes *= d;
  if (offset > size || bytes > size - offset)
    raise(pvmm::errc::out_of_range, "pvmm.view",
          "the view would end past the memory's " + std::to_string(size) + " bytes",
          "offset=" + std::to_string(offset) + ", bytes=" + std::to_string(bytes));
  auto* keep = pin.release();
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<export_pin*>(p); });
  const auto [type, id] = dlpack_device(label, device);
  void* first = static_cast<unsigned char*>(data) + offset;
  if (spec.read_only)
    return nb::cast(
        nb::ndarray<nb::array_api, nb::ro>(first, dims.size(), dims.data(), owner, nullptr, dtype, type, id));
  return nb::cast(nb::ndarray<nb::array_api>(first, dims.size(), dims.data(), owner, nullptr, dtype, type, id));
}

}  // namespace pvmm_py
