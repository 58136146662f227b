#include "cli/did_you_mean.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvlearn {

size_t EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance over three rows.
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], before[j - 2] + 1);
      }
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string ClosestName(std::string_view typed, std::span<const std::string> names) {
  const size_t limit = std::max<size_t>(2, typed.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& name : names) {
    const size_t d = EditDistance(typed, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best;
}

namespace {

std::vector<std::string> SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

// The long flags of `app` ("--name").
std::vector<std::string> LongFlags(const CLI::App& app) {
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
  }
  return flags;
}

}  // namespace

std::string UnknownSubcommandMessage(const CLI::App& app, int argc, const char* const* argv) {
  if (argc < 2 || argv[1][0] == '-' || argv[1][0] == '\0') return "";
  const std::string typed = argv[1];
  const std::vector<std::string> names = SubcommandNames(app);
  if (std::find(names.begin(), names.end(), typed) != names.end()) return "";
  const std::string closest = ClosestName(typed, names);
  return absl::StrCat("kvlearn: unknown command '", typed, "'",
                      closest.empty() ? "" : absl::StrCat("; did you mean '", closest, "'?"),
                      " (commands: ", absl::StrJoin(names, ", "), "; kvlearn --help)");
}

std::string UnknownFlagSuggestions(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* parsed = &app;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->parsed()) parsed = sub;
  }
  const std::vector<std::string> flags = LongFlags(*parsed);
  std::vector<std::string> hints;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (!arg.starts_with("--")) continue;
    arg = arg.substr(0, arg.find('='));  // --flag=value
    if (std::find(flags.begin(), flags.end(), arg) != flags.end()) continue;
    if (const std::string closest = ClosestName(arg, flags); !closest.empty()) {
      hints.push_back(
          absl::StrCat("unknown flag ", std::string(arg), ": did you mean ", closest, "?"));
    }
  }
  if (hints.empty()) return "";
  return absl::StrCat("kvlearn", parsed == &app ? "" : " " + parsed->get_name(), ": ",
                      absl::StrJoin(hints, "; "), " (see --help)");
}

}  // namespace kvlearn
