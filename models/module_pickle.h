// A TorchScript module's data.pkl read without LibTorch: the module's class
// and its tensor attributes (name, storage record, element type, view).
//
// The pickle is evaluated, not trusted: only the opcodes of protocol 2 that
// LibTorch writes for a module's state, and only three callables (the
// module's own class, torch._utils._rebuild_tensor_v2 and
// collections.OrderedDict); anything else, a pop past the stack or a MARK, a
// memo entry never stored, a length past the input or objects nested deeper
// than a module's state needs, is refused with INVALID_ARGUMENT naming the
// byte offset and opcode. Nothing is executed and no class is compiled.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvlearn {

enum class PickledDtype { kFloat32, kFloat64 };

inline size_t DtypeBytes(PickledDtype d) { return d == PickledDtype::kFloat32 ? 4 : 8; }

// A tensor as the pickle states it. Its bytes are the archive's record
// "data/<storage_key>"; sizes, strides and the offset are in elements and are
// NOT checked against that record here (the caller has it).
struct PickledTensor {
  std::string storage_key;
  PickledDtype dtype = PickledDtype::kFloat32;
  int64_t storage_offset = 0;
  std::vector<int64_t> sizes, strides;
};

// A module's state as its pickle builds it.
struct ModuleState {
  // The Python module TorchScript names the class under: "__torch__" for a
  // class defined in the script that saved it (and for LibTorch's), else
  // "__torch__.<module>". Its source is the archive's record
  // code/<this, dots as slashes>.py.
  std::string class_module;
  std::map<std::string, PickledTensor> tensors;  // the state's tensor entries by name
};

// Evaluates `pickle`, which must build one object of the TorchScript class
// `class_name` ("KvlearnReuseMlp", under any module) with a dict as its
// state, and returns its tensor entries (other entries are skipped).
absl::StatusOr<ModuleState> ReadModulePickle(std::string_view pickle, std::string_view class_name);

}  // namespace kvlearn
