// CheckMlpForward on TorchScript source as LibTorch and Python torch print it
// into an archive: kvlearn's own forward passes, every way of computing
// something else is refused with what differs.
#include "models/mlp_forward_check.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace kvlearn {
namespace {

constexpr char kClass[] = "KvlearnReuseMlp";

// What LibTorch printed for a 3-layer network `kvlearn train` wrote (unzip -p
// model.pt '*/code/__torch__.py').
const std::string kKvlearnSource = R"(class KvlearnReuseMlp(Module):
  __parameters__ = ["w0", "b0", "w1", "b1", "w2", "b2", ]
  __buffers__ = ["feature_mean", "feature_std", ]
  feature_mean : Tensor
  feature_std : Tensor
  w0 : Tensor
  b0 : Tensor
  w1 : Tensor
  b1 : Tensor
  w2 : Tensor
  b2 : Tensor
  def forward(self: __torch__.KvlearnReuseMlp,
    x: Tensor) -> Tensor:
    feature_mean = self.feature_mean
    _0 = torch.sub(x, feature_mean)
    feature_std = self.feature_std
    h = torch.div(_0, feature_std)
    b0 = self.b0
    w0 = self.w0
    h0 = torch.relu(torch.addmm(b0, h, torch.t(w0)))
    b1 = self.b1
    w1 = self.w1
    h1 = torch.relu(torch.addmm(b1, h0, torch.t(w1)))
    b2 = self.b2
    w2 = self.w2
    h2 = torch.sigmoid(torch.addmm(b2, h1, torch.t(w2)))
    return h2
)";

// What Python torch printed for a 2-layer nn.Module scripted from a file
// (its own attribute list, another input name, F.linear, a helper method).
const std::string kPythonSource = R"(class KvlearnReuseMlp(Module):
  __parameters__ = ["w0", "b0", "w1", "b1", ]
  __buffers__ = ["feature_mean", "feature_std", ]
  w0 : Tensor
  b0 : Tensor
  w1 : Tensor
  b1 : Tensor
  feature_mean : Tensor
  feature_std : Tensor
  training : bool
  _is_full_backward_hook : Optional[bool]
  def scale(self: __torch__.KvlearnReuseMlp,
    y: Tensor) -> Tensor:
    return torch.mul(y, 2)
  def forward(self: __torch__.KvlearnReuseMlp,
    rows: Tensor) -> Tensor:
    _0 = torch.div(torch.sub(rows, self.feature_mean), self.feature_std)
    hidden = torch.relu(torch.linear(_0, self.w0, self.b0))
    _1 = torch.sigmoid(torch.linear(hidden, self.w1, self.b1))
    return _1
class Other(Module):
  def forward(self: __torch__.Other,
    x: Tensor) -> Tensor:
    return torch.tanh(x)
)";

std::string Replaced(const std::string& source, const std::string& from, const std::string& to) {
  EXPECT_NE(source.find(from), std::string::npos) << from;
  return absl::StrReplaceAll(source, {{from, to}});
}

TEST(MlpForwardCheckTest, AcceptsKvlearnsForwardAsLibTorchAndPythonPrintIt) {
  EXPECT_TRUE(CheckMlpForward(kKvlearnSource, kClass, 3).ok())
      << CheckMlpForward(kKvlearnSource, kClass, 3);
  EXPECT_TRUE(CheckMlpForward(kPythonSource, kClass, 2).ok())
      << CheckMlpForward(kPythonSource, kClass, 2);
  // One layer: sigmoid straight over the normalised input.
  const std::string one = R"(class KvlearnReuseMlp(Module):
  def forward(self: __torch__.KvlearnReuseMlp, x: Tensor) -> Tensor:
    _0 = torch.sigmoid(torch.addmm(self.b0, torch.div(torch.sub(x, self.feature_mean),
        self.feature_std), torch.t(self.w0)))
    return _0
)";
  EXPECT_TRUE(CheckMlpForward(one, kClass, 1).ok()) << CheckMlpForward(one, kClass, 1);
}

TEST(MlpForwardCheckTest, RefusesEveryOtherComputationSayingWhatDiffers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // another activation between layers
      {Replaced(kKvlearnSource, "h1 = torch.relu(", "h1 = torch.tanh("),
       "layer 1's output goes through torch.tanh(...) where kvlearn applies torch.relu"},
      // another activation at the end
      {Replaced(kKvlearnSource, "torch.sigmoid(", "torch.softmax("),
       "it returns torch.softmax(...) where kvlearn ends with torch.sigmoid"},
      // no normalisation
      {Replaced(kKvlearnSource, "h = torch.div(_0, feature_std)", "h = x"),
       "layer 0 reads the input x, not (x - self.feature_mean) / self.feature_std"},
      // mean and std swapped
      {Replaced(Replaced(kKvlearnSource, "feature_mean = self.feature_mean",
                         "feature_mean = self.feature_std"),
                "feature_std = self.feature_std", "feature_std = self.feature_mean"),
       "layer 0 reads torch.div(...)"},
      // a layer left out: the file holds three, the forward uses two
      {Replaced(kKvlearnSource, "torch.addmm(b2, h1, torch.t(w2))",
                "torch.addmm(b1, h0, torch.t(w1))"),
       "layer 2 is torch.addmm(...), not torch.addmm(self.b2, h, torch.t(self.w2))"},
      // a weight of another layer
      {Replaced(kKvlearnSource, "w1 = self.w1", "w1 = self.w0"), "layer 1 is torch.addmm(...)"},
      // a skip connection
      {Replaced(kKvlearnSource, "h1 = torch.relu(torch.addmm(b1, h0, torch.t(w1)))",
                "h1 = torch.relu(torch.add(torch.addmm(b1, h0, torch.t(w1)), h0))"),
       "layer 1 is torch.add(...)"},
      // an operator, a literal, a keyword argument
      {Replaced(kKvlearnSource, "return h2", "return h2 * 2"), "is not a name or a call"},
      {Replaced(kKvlearnSource, "torch.sub(x, feature_mean)",
                "torch.sub(x, feature_mean, alpha=1)"),
       "a keyword argument ('alpha=')"},
      // a name used before it holds anything
      {Replaced(kKvlearnSource, "return h2", "return h3"), "'h3' is used before it is assigned"},
      // control flow
      {Replaced(kKvlearnSource, "    return h2", "    if bool(torch.any(h2)):\n      return h2"),
       "is neither an assignment nor a return"},
      // no return
      {Replaced(kKvlearnSource, "    return h2\n", ""), "it has no return statement"},
      // a second input
      {Replaced(kKvlearnSource, "x: Tensor) -> Tensor:", "x: Tensor, y: Tensor) -> Tensor:"),
       "forward takes 2 inputs besides self"},
      {Replaced(kKvlearnSource, "x: Tensor) -> Tensor:", "x: Tensor=None) -> Tensor:"),
       "has a default"},
      // no such class, no forward, parentheses that do not close
      {Replaced(kKvlearnSource, "class KvlearnReuseMlp(", "class Mlp("),
       "no class KvlearnReuseMlp in its source"},
      {Replaced(kKvlearnSource, "def forward(", "def forward2("),
       "the class has no forward method"},
      {Replaced(kKvlearnSource, "return h2", "return torch.relu(h2"),
       "its last statement does not end"},
      {Replaced(kKvlearnSource, "return h2", "return h2)"), "closes more parentheses"},
  };
  for (const auto& [source, what] : cases) {
    const absl::Status s = CheckMlpForward(source, kClass, 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << what << "\n" << s;
    EXPECT_NE(s.message().find("docs/training.md"), std::string::npos) << s;
  }
  // The right forward for another number of layers than the file holds.
  EXPECT_FALSE(CheckMlpForward(kKvlearnSource, kClass, 2).ok());
  EXPECT_FALSE(CheckMlpForward(kKvlearnSource, kClass, 4).ok());
  EXPECT_FALSE(CheckMlpForward(kKvlearnSource, kClass, 0).ok());
}

// Hostile source: deep nesting, a name of control bytes, nothing at all.
TEST(MlpForwardCheckTest, HostileSourceIsRefusedWithoutRecursingOffTheStack) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "torch.relu(";
  deep += "x" + std::string(100000, ')');
  const std::string nested = absl::StrCat(
      "class KvlearnReuseMlp(Module):\n  def forward(self, x):\n    return ", deep, "\n");
  EXPECT_NE(CheckMlpForward(nested, kClass, 1).message().find("nested too deep"),
            std::string::npos);
  const std::string control = Replaced(kKvlearnSource, "return h2", "return h\x01\x02");
  const absl::Status s = CheckMlpForward(control, kClass, 3);
  EXPECT_FALSE(s.ok());
  for (char c : s.message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << s;
  EXPECT_FALSE(CheckMlpForward("", kClass, 3).ok());
  EXPECT_FALSE(CheckMlpForward("class KvlearnReuseMlp(", kClass, 3).ok());
}

}  // namespace
}  // namespace kvlearn
