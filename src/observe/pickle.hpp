// A minimal pickle writer (protocol 2): dicts, lists, 2-tuples, str, int, bool, None - what PyTorch's memory snapshot
// uses, written as a stream of opcodes (no memo: nothing is shared).
//
// Why our own: no library does this well for a C++ library to depend on. Debian packages no C++ pickle writer;
// libtorch's (torch::pickle_save) writes TorchScript's IValues and brings all of libtorch; the others (Razorvine's
// for .NET, Python's own) need another runtime. The subset needed is nine opcodes, checked by Python's own
// pickletools and pickle.loads in python/tests/test_snapshot.py.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pvmm::detail::observe {

class pickle_writer {
 public:
  pickle_writer() { out_ += "\x80\x02"; }  // PROTO 2

  void none() { out_ += 'N'; }
  void boolean(bool v) { out_ += v ? '\x88' : '\x89'; }  // NEWTRUE / NEWFALSE
  void integer(std::int64_t v);
  void unsigned_integer(std::uint64_t v);
  void string(std::string_view s);

  // Containers: begin, then the items (a dict's as key, value, key, value...), then end.
  void begin_dict() { out_ += "}("; }    // EMPTY_DICT MARK
  void end_dict() { out_ += 'u'; }       // SETITEMS
  void begin_list() { out_ += "]("; }    // EMPTY_LIST MARK
  void end_list() { out_ += 'e'; }       // APPENDS
  void tuple2_end() { out_ += '\x86'; }  // TUPLE2 of the last two values written

  /// A dict's key.
  void key(std::string_view k) { string(k); }

  /// The finished pickle (STOP appended once).
  std::string finish() {
    out_ += '.';
    return std::move(out_);
  }

 private:
  /// LONG1: the value's two's complement, little-endian, in as few bytes as keep its sign.
  void long1(const unsigned char* bytes, int count);
  std::string out_;
};

}  // namespace pvmm::detail::observe
