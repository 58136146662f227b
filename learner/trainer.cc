#include "learner/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace kvlearn {
namespace {

struct Tensors {
  torch::Tensor x, y, mask;
};

Tensors ToTensors(const SampleSet& s, const std::vector<float>& mean,
                  const std::vector<float>& stddev) {
  const auto n = static_cast<int64_t>(s.size());
  const auto k = static_cast<int64_t>(s.num_horizons);
  torch::Tensor x =
      torch::from_blob(const_cast<float*>(s.features.data()), {n, kNumFeatures}, torch::kFloat32)
          .clone();
  x = (x - torch::from_blob(const_cast<float*>(mean.data()), {kNumFeatures}).clone()) /
      torch::from_blob(const_cast<float*>(stddev.data()), {kNumFeatures}).clone();
  torch::Tensor y =
      torch::from_blob(const_cast<float*>(s.reused.data()), {n, k}, torch::kFloat32).clone();
  torch::Tensor mask = torch::from_blob(const_cast<uint8_t*>(s.known.data()), {n, k}, torch::kUInt8)
                           .to(torch::kFloat32);
  return {x, y, mask};
}

torch::Tensor MaskedBce(const torch::Tensor& logits, const Tensors& t, const torch::Tensor& rows) {
  namespace F = torch::nn::functional;
  const torch::Tensor y = rows.defined() ? t.y.index_select(0, rows) : t.y;
  const torch::Tensor m = rows.defined() ? t.mask.index_select(0, rows) : t.mask;
  const torch::Tensor per = F::binary_cross_entropy_with_logits(
      logits, y, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  return (per * m).sum() / m.sum().clamp_min(1.0);
}

DenseLayer ToDense(const torch::nn::Linear& linear) {
  const torch::Tensor w = linear->weight.detach().contiguous();
  const torch::Tensor b = linear->bias.detach().contiguous();
  DenseLayer d;
  d.weight =
      Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          w.data_ptr<float>(), w.size(0), w.size(1));
  d.bias = Eigen::Map<const Eigen::VectorXf>(b.data_ptr<float>(), b.size(0));
  return d;
}

}  // namespace

double RocAuc(const std::vector<float>& scores, const std::vector<float>& labels,
              const std::vector<uint8_t>& mask) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (mask[i]) idx.push_back(i);
  }
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Mann-Whitney U with average ranks for ties.
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j < idx.size() && scores[idx[j]] == scores[idx[i]]) ++j;
    const double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t t = i; t < j; ++t) {
      if (labels[idx[t]] > 0.5f) {
        positives += 1;
        rank_sum += avg_rank;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(idx.size()) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

absl::StatusOr<TrainedMlp> TrainMlp(const SampleSet& train, const SampleSet& valid,
                                    const TrainOptions& options,
                                    const std::function<void(const EpochReport&)>& progress) {
  if (train.size() == 0 || valid.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("need training and validation samples, got ",
                                                   train.size(), " and ", valid.size()));
  }
  if (options.batch_size <= 0 || options.max_epochs <= 0 || options.hidden.empty()) {
    return absl::InvalidArgumentError("batch size, epochs and hidden layers must be positive");
  }
  at::set_num_threads(1);  // one thread: deterministic reductions
  torch::manual_seed(options.seed);
  const int64_t k = static_cast<int64_t>(train.num_horizons);

  TrainedMlp out;
  out.feature_mean.assign(kNumFeatures, 0);
  out.feature_std.assign(kNumFeatures, 1);
  for (uint32_t f = 0; f < kNumFeatures; ++f) {
    double sum = 0, sq = 0;
    for (size_t i = 0; i < train.size(); ++i) {
      const double v = train.features[i * kNumFeatures + f];
      sum += v;
      sq += v * v;
    }
    const double n = static_cast<double>(train.size());
    const double mean = sum / n;
    const double var = std::max(sq / n - mean * mean, 0.0);
    out.feature_mean[f] = static_cast<float>(mean);
    // A constant feature keeps scale 1 so it cannot blow up at inference.
    out.feature_std[f] = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  }
  const Tensors tr = ToTensors(train, out.feature_mean, out.feature_std);
  const Tensors va = ToTensors(valid, out.feature_mean, out.feature_std);

  std::vector<torch::nn::Linear> linears;
  torch::nn::Sequential net;
  // The first layer is drawn as schema 4's was, over its inputs only; the
  // inputs schema 5 added start from zero weights. On traffic that does not
  // label requests (they read 0 throughout, so their gradients are 0 too)
  // training then gives schema 4's network with zero columns added (equal to
  // float rounding: the products are summed in another order), rather than
  // one drawn afresh from another random stream.
  int64_t width = kOriginTurnLog;
  for (const int h : options.hidden) {
    linears.emplace_back(width, h);
    net->push_back(linears.back());
    net->push_back(torch::nn::ReLU());
    width = h;
  }
  linears.emplace_back(width, k);
  net->push_back(linears.back());
  {
    torch::NoGradGuard guard;
    torch::Tensor& first = linears.front()->weight;
    first.set_data(torch::cat(
        {first, torch::zeros({first.size(0), int64_t{kNumFeatures} - kOriginTurnLog})}, 1));
  }
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(options.learning_rate));

  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> order(train.size());
  std::iota(order.begin(), order.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  std::vector<DenseLayer> best_layers;
  int since_best = 0;
  for (int epoch = 1; epoch <= options.max_epochs; ++epoch) {
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    net->train();
    double loss_sum = 0;
    int batches = 0;
    for (size_t start = 0; start < order.size(); start += options.batch_size) {
      const size_t end = std::min(order.size(), start + options.batch_size);
      const torch::Tensor rows =
          torch::from_blob(order.data() + start, {static_cast<int64_t>(end - start)}, torch::kInt64)
              .clone();
      adam.zero_grad();
      const torch::Tensor loss = MaskedBce(net->forward(tr.x.index_select(0, rows)), tr, rows);
      loss.backward();
      adam.step();
      loss_sum += loss.item<double>();
      ++batches;
      if (options.samples_done) {
        options.samples_done->fetch_add(end - start, std::memory_order_relaxed);
      }
    }
    EpochReport report;
    report.epoch = epoch;
    report.train_loss = loss_sum / batches;
    {
      torch::NoGradGuard guard;
      net->eval();
      const torch::Tensor logits = net->forward(va.x);
      report.valid_loss = MaskedBce(logits, va, torch::Tensor()).item<double>();
      const torch::Tensor p = torch::sigmoid(logits).contiguous();
      const auto prob = p.accessor<float, 2>();
      for (int64_t h = 0; h < k; ++h) {
        std::vector<float> scores(valid.size()), labels(valid.size());
        std::vector<uint8_t> mask(valid.size());
        for (size_t i = 0; i < valid.size(); ++i) {
          scores[i] = prob[i][h];
          labels[i] = valid.reused[i * k + h];
          mask[i] = valid.known[i * k + h];
        }
        report.valid_auc.push_back(RocAuc(scores, labels, mask));
      }
    }
    out.history.push_back(report);
    if (progress) progress(report);
    if (report.valid_loss < best) {
      best = report.valid_loss;
      out.best_epoch = epoch;
      best_layers.clear();
      for (const auto& l : linears) best_layers.push_back(ToDense(l));
      since_best = 0;
    } else if (++since_best >= options.patience) {
      break;
    }
  }
  out.layers = std::move(best_layers);
  return out;
}

}  // namespace kvlearn
