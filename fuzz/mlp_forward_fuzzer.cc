// Fuzzes CheckMlpForward (models/mlp_forward_check.h) with arbitrary bytes as
// the TorchScript source of a model file's class. Through model_file_fuzzer
// the source is deflated and CRC-checked, so mutations rarely reach the
// parser; here they all do. The first byte sets the layer count (1-8). It
// must accept or refuse with a message free of control bytes, never crash, and
// a source it accepts for n layers computes n layers, so n + 1 is refused.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "models/mlp_forward_check.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t layers = 1 + data[0] % 8;
  const std::string_view source(reinterpret_cast<const char*>(data + 1), size - 1);
  const absl::Status s = kvlearn::CheckMlpForward(source, "KvlearnReuseMlp", layers);
  if (!s.ok()) {
    Check(s.code() == absl::StatusCode::kInvalidArgument);
    Check(!s.message().empty());
    for (char c : s.message()) Check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
    return 0;
  }
  Check(!kvlearn::CheckMlpForward(source, "KvlearnReuseMlp", layers + 1).ok());
  return 0;
}
