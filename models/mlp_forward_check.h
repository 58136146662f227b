// Whether a model file's TorchScript forward computes what kvlearn computes.
//
// kvlearn never compiles a model file's code: it reads the weights w<i>, b<i>
// and runs its own MLP (models/mlp_model.h): normalise by feature_mean and
// feature_std, torch.relu between layers, torch.sigmoid at the end. A file
// written in Python may hold those weights behind another forward (tanh, a
// skip connection, a layer left out), which kvlearn would then answer for
// with other numbers than Python's. So the forward's source, as TorchScript
// prints it into the archive (code/__torch__.py), is read as text and
// evaluated symbolically; anything but kvlearn's computation is refused with
// what differs.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"

namespace kvlearn {

// `code`: the printed source holding class `class_name` (unqualified, e.g.
// "KvlearnReuseMlp"). OK if its forward(self, x) returns
//   sigmoid(A[n-1](relu(A[n-2](... relu(A[0]((x - feature_mean) / feature_std))))))
// where A[i](h) is torch.addmm(b<i>, h, torch.t(w<i>)) or
// torch.linear(h, w<i>, b<i>), and n = `layers`; INVALID_ARGUMENT saying
// what differs otherwise.
absl::Status CheckMlpForward(std::string_view code, std::string_view class_name, size_t layers);

}  // namespace kvlearn
