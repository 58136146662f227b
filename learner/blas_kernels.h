// Which matrix kernels training runs on. LibTorch's CPU matrix products go to
// the system BLAS, which on Debian is OpenBLAS: it picks its kernels by CPU
// (or by $OPENBLAS_CORETYPE), and its AVX-512 and AVX2 kernels round
// differently, so the same seed trains slightly different weights on
// different CPUs. `kvlearn train` prints this line and records it in the
// model file (ModelMetadata::training_blas) so a model says what trained it.
//
// Thread-safety: safe from any thread (reads the process's symbols and
// environment).
#pragma once

#include <string>

namespace kvlearn {

// "OpenBLAS 0.3.21 ... MAX_THREADS=64; kernels Haswell; OPENBLAS_CORETYPE=Haswell"
// (or "...; OPENBLAS_CORETYPE unset"), from OpenBLAS's own
// openblas_get_config() and openblas_get_corename(); "not OpenBLAS: ..." when
// the process has no OpenBLAS loaded.
std::string BlasKernels();

}  // namespace kvlearn
