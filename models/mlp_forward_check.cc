#include "models/mlp_forward_check.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/one_line.h"

namespace kvlearn {
namespace {

// Deeper nesting than any printed forward has; a hostile file cannot recurse
// the parser off the stack.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxStatements = 4096;

// A value of the forward: the input, an attribute of self, or a call.
struct Node {
  enum class Kind { kInput, kAttribute, kCall } kind;
  std::string name;  // "self.w0" for an attribute, "torch.addmm" for a call
  std::vector<std::shared_ptr<const Node>> args;
};
using NodePtr = std::shared_ptr<const Node>;

std::string Describe(const Node& n) {
  if (n.kind == Node::Kind::kInput) return "the input x";
  if (n.kind == Node::Kind::kAttribute) return OneLine(n.name, 60);
  return absl::StrCat(OneLine(n.name, 60), "(...)");
}

absl::Status Differs(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "forward: ", std::string(what),
      "; kvlearn reads only the weights and computes (x - feature_mean) / feature_std, torch.relu "
      "between layers, torch.sigmoid last (docs/training.md, 'A model written in Python')"));
}

size_t Indent(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

std::string_view StripTrailing(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view Strip(std::string_view s) {
  s = StripTrailing(s);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  return s;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// One statement's expression: dotted names and calls, nothing else.
class ExpressionParser {
 public:
  ExpressionParser(std::string_view text, const std::map<std::string, NodePtr>& values,
                   const std::string& input)
      : text_(text), values_(values), input_(input) {}

  absl::StatusOr<NodePtr> ParseAll() {
    auto n = Parse(0);
    if (!n.ok()) return n;
    SkipSpace();
    if (at_ != text_.size()) return Unsupported();
    return n;
  }

 private:
  absl::Status Unsupported() const {
    return Differs(absl::StrCat("'", OneLine(text_.substr(at_), 60), "' is not a name or a call"));
  }

  void SkipSpace() {
    while (at_ < text_.size() && text_[at_] == ' ') ++at_;
  }

  absl::StatusOr<NodePtr> Parse(int depth) {
    if (depth > kMaxDepth) return Differs("expressions nested too deep");
    SkipSpace();
    const size_t start = at_;
    while (at_ < text_.size() && (IsNameChar(text_[at_]) || text_[at_] == '.')) ++at_;
    const std::string name(text_.substr(start, at_ - start));
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      at_ = start;
      return Unsupported();
    }
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == '=') {
      return Differs(absl::StrCat("a keyword argument ('", OneLine(name, 60), "=')"));
    }
    if (at_ < text_.size() && text_[at_] == '(') {
      ++at_;
      auto call = std::make_shared<Node>(Node{Node::Kind::kCall, name, {}});
      SkipSpace();
      if (at_ < text_.size() && text_[at_] == ')') {
        ++at_;
        return NodePtr(call);
      }
      while (true) {
        auto arg = Parse(depth + 1);
        if (!arg.ok()) return arg;
        call->args.push_back(*std::move(arg));
        SkipSpace();
        if (at_ < text_.size() && text_[at_] == ',') {
          ++at_;
          continue;
        }
        if (at_ < text_.size() && text_[at_] == ')') {
          ++at_;
          return NodePtr(call);
        }
        return Unsupported();  // a keyword argument, an operator, a literal...
      }
    }
    if (name == input_) return std::make_shared<Node>(Node{Node::Kind::kInput, "x", {}});
    if (name.rfind("self.", 0) == 0 && name.find('.', 5) == std::string::npos) {
      return std::make_shared<Node>(Node{Node::Kind::kAttribute, name, {}});
    }
    const auto it = values_.find(name);
    if (it == values_.end()) {
      return Differs(absl::StrCat("'", OneLine(name, 60), "' is used before it is assigned"));
    }
    return it->second;
  }

  std::string_view text_;
  size_t at_ = 0;
  const std::map<std::string, NodePtr>& values_;
  const std::string& input_;
};

// The lines of class `class_name`'s forward: its signature, then its body.
struct ForwardSource {
  std::string signature;  // from "def forward(" to the closing ':'
  std::vector<std::string> statements;
};

absl::StatusOr<ForwardSource> FindForward(std::string_view code, std::string_view class_name) {
  const std::vector<std::string_view> lines = Lines(code);
  const std::string header = absl::StrCat("class ", std::string(class_name), "(");
  size_t i = 0;
  while (i < lines.size() && lines[i].rfind(header, 0) != 0) ++i;
  if (i == lines.size()) {
    return Differs(absl::StrCat("no class ", std::string(class_name), " in its source"));
  }
  // The class ends at the next line that starts in column 0.
  for (++i; i < lines.size() && (lines[i].empty() || lines[i][0] == ' '); ++i) {
    if (Strip(lines[i]).rfind("def forward(", 0) == 0) break;
  }
  if (i == lines.size() || lines[i].empty() || lines[i][0] != ' ') {
    return Differs("the class has no forward method");
  }
  ForwardSource f;
  const size_t indent = Indent(lines[i]);
  // The signature may wrap; it ends at the line ending in ':'.
  for (; i < lines.size(); ++i) {
    absl::StrAppend(&f.signature, std::string(Strip(lines[i])), " ");
    const std::string_view end = StripTrailing(lines[i]);
    if (!end.empty() && end.back() == ':') break;
  }
  if (i == lines.size()) return Differs("its signature does not end");
  // The body: lines indented deeper than the def; a statement whose
  // parentheses are open continues on the next line.
  std::string pending;
  int open = 0;
  for (++i; i < lines.size(); ++i) {
    const std::string_view line = StripTrailing(lines[i]);
    if (line.empty()) continue;
    if (open == 0 && Indent(line) <= indent) break;
    for (char c : line) open += c == '(' ? 1 : c == ')' ? -1 : 0;
    absl::StrAppend(&pending, pending.empty() ? "" : " ", std::string(Strip(line)));
    if (open < 0) return Differs("a statement closes more parentheses than it opens");
    if (open == 0) {
      f.statements.push_back(std::move(pending));
      pending.clear();
      if (f.statements.size() > kMaxStatements) return Differs("more statements than a network");
    }
  }
  if (!pending.empty()) return Differs("its last statement does not end");
  return f;
}

// forward(self, x): the name of the one input.
absl::StatusOr<std::string> InputName(std::string_view signature) {
  const size_t open = signature.find('(');
  const size_t close = signature.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return Differs("its signature is not 'def forward(self, x)'");
  }
  std::vector<std::string> names;
  int depth = 0;
  std::string current;
  for (char c : signature.substr(open + 1, close - open - 1)) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      names.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (!Strip(current).empty()) names.push_back(current);
  for (std::string& n : names) {
    if (n.find('=') != std::string::npos) return Differs("an argument of forward has a default");
    n = std::string(Strip(std::string_view(n).substr(0, n.find(':'))));
  }
  if (names.size() != 2 || names[0] != "self") {
    return Differs(absl::StrCat("forward takes ", names.size() - (names.empty() ? 0 : 1),
                                " inputs besides self; kvlearn gives it one, the feature rows"));
  }
  return names[1];
}

// The value the forward returns, every name resolved to what it holds.
absl::StatusOr<NodePtr> Evaluate(const ForwardSource& f, const std::string& input) {
  std::map<std::string, NodePtr> values;
  for (const std::string& s : f.statements) {
    if (s.rfind("return ", 0) == 0) {
      return ExpressionParser(std::string_view(s).substr(7), values, input).ParseAll();
    }
    size_t name_end = 0;
    while (name_end < s.size() && IsNameChar(s[name_end])) ++name_end;
    size_t eq = name_end;
    while (eq < s.size() && s[eq] == ' ') ++eq;
    if (name_end == 0 || eq >= s.size() || s[eq] != '=' ||
        (eq + 1 < s.size() && s[eq + 1] == '=')) {
      return Differs(
          absl::StrCat("statement '", OneLine(s, 60), "' is neither an assignment nor a return"));
    }
    auto value = ExpressionParser(std::string_view(s).substr(eq + 1), values, input).ParseAll();
    if (!value.ok()) return value.status();
    values[s.substr(0, name_end)] = *std::move(value);
  }
  return Differs("it has no return statement");
}

bool IsCall(const Node& n, std::string_view op, size_t args) {
  return n.kind == Node::Kind::kCall && n.name == op && n.args.size() == args;
}

bool IsAttribute(const Node& n, std::string_view name) {
  return n.kind == Node::Kind::kAttribute && n.name == name;
}

// (x - self.feature_mean) / self.feature_std
absl::Status MatchNormalisedInput(const Node& n) {
  if (IsCall(n, "torch.div", 2) && IsAttribute(*n.args[1], "self.feature_std")) {
    const Node& d = *n.args[0];
    if (IsCall(d, "torch.sub", 2) && d.args[0]->kind == Node::Kind::kInput &&
        IsAttribute(*d.args[1], "self.feature_mean")) {
      return absl::OkStatus();
    }
  }
  return Differs(absl::StrCat("layer 0 reads ", Describe(n),
                              ", not (x - self.feature_mean) / self.feature_std"));
}

absl::Status MatchLayer(const Node& n, size_t i);

// What layer i reads: the normalised input for layer 0, else relu(layer i-1).
absl::Status MatchLayerInput(const Node& n, size_t i) {
  if (i == 0) return MatchNormalisedInput(n);
  if (!IsCall(n, "torch.relu", 1)) {
    return Differs(absl::StrCat("layer ", i - 1, "'s output goes through ", Describe(n),
                                " where kvlearn applies torch.relu"));
  }
  return MatchLayer(*n.args[0], i - 1);
}

// torch.addmm(self.b<i>, h, torch.t(self.w<i>)) or torch.linear(h, self.w<i>, self.b<i>).
absl::Status MatchLayer(const Node& n, size_t i) {
  const std::string w = absl::StrCat("self.w", i), b = absl::StrCat("self.b", i);
  if (IsCall(n, "torch.addmm", 3) && IsAttribute(*n.args[0], b) &&
      IsCall(*n.args[2], "torch.t", 1) && IsAttribute(*n.args[2]->args[0], w)) {
    return MatchLayerInput(*n.args[1], i);
  }
  if (IsCall(n, "torch.linear", 3) && IsAttribute(*n.args[1], w) && IsAttribute(*n.args[2], b)) {
    return MatchLayerInput(*n.args[0], i);
  }
  return Differs(absl::StrCat("layer ", i, " is ", Describe(n), ", not torch.addmm(", b,
                              ", h, torch.t(", w, ")) or torch.linear(h, ", w, ", ", b, ")"));
}

}  // namespace

absl::Status CheckMlpForward(std::string_view code, std::string_view class_name, size_t layers) {
  if (layers == 0) return Differs("the network has no layers");
  auto forward = FindForward(code, class_name);
  if (!forward.ok()) return forward.status();
  auto input = InputName(forward->signature);
  if (!input.ok()) return input.status();
  auto result = Evaluate(*forward, *input);
  if (!result.ok()) return result.status();
  const Node& out = **result;
  if (!IsCall(out, "torch.sigmoid", 1)) {
    return Differs(
        absl::StrCat("it returns ", Describe(out), " where kvlearn ends with torch.sigmoid"));
  }
  return MatchLayer(*out.args[0], layers - 1);
}

}  // namespace kvlearn
