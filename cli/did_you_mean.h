// "Did you mean" for the command line: the known name closest to what was
// typed, for an unknown subcommand or flag. CLI11 alone says "A subcommand is
// required" for `kvlearn comapre` and "The following arguments were not
// expected" for `--pool-fration`, which names the mistake but not the fix.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "CLI/CLI.hpp"

namespace kvlearn {

// Edit distance (insertions, deletions, substitutions, and a swap of two
// neighbouring characters counted as one edit).
size_t EditDistance(std::string_view a, std::string_view b);

// The name in `names` closest to `typed`, or "" when none is within
// max(2, |typed| / 3) edits (a guess further off would mislead).
std::string ClosestName(std::string_view typed, std::span<const std::string> names);

// For argv whose first argument names no subcommand of `app`: a one-line
// message naming it, the closest subcommand and the list of them; "" when
// argv[1] is a subcommand, a flag or absent.
std::string UnknownSubcommandMessage(const CLI::App& app, int argc, const char* const* argv);

// For a parse error of `app` whose cause is an unknown flag: the same error
// with "did you mean --x?" for each unknown --flag of argv that is close to a
// flag of the subcommand being parsed (or the root). "" when no suggestion.
std::string UnknownFlagSuggestions(const CLI::App& app, int argc, const char* const* argv);

}  // namespace kvlearn
