// A structural check of a pickle (protocol 2, the subset LibTorch writes for
// a module's data.pkl) before LibTorch's Unpickler reads it. That unpickler
// trusts its input: it pops from an empty stack, indexes past marks and
// reserves whatever string length a file states (found by
// fuzz/model_file_fuzzer: SIGSEGV in Unpickler::readInstruction on a BUILD
// with nothing on the stack). This walks the opcodes once, simulating only
// the stack depth, marks and memo, and refuses anything that would make the
// unpickler read outside its stack, memo or input.
//
// Not a security boundary for arbitrary pickles: it accepts only opcodes
// torch writes, and says nothing about the objects they build (LibTorch
// checks those itself, with exceptions).
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace kvlearn {

// OK if `pickle` is a well-formed sequence of supported opcodes ending in
// STOP with exactly one object on the stack; else INVALID_ARGUMENT naming the
// byte offset and the opcode.
absl::Status CheckPickleStructure(std::string_view pickle);

}  // namespace kvlearn
