#include "learner/blas_kernels.h"

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace kvlearn {

std::string BlasKernels() {
  // Looked up, not linked: LibTorch loads the BLAS Debian's alternatives
  // choose, which may not be OpenBLAS.
  using Text = const char* (*)();
  const auto config = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  const auto core = reinterpret_cast<Text>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (config == nullptr || core == nullptr) {
    return "not OpenBLAS: the process has no openblas_get_config (see libblas.so.3's alternative)";
  }
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  return absl::StrCat(config(), "; kernels ", core(), "; OPENBLAS_CORETYPE",
                      chosen != nullptr ? absl::StrCat("=", chosen) : std::string(" unset"));
}

}  // namespace kvlearn
