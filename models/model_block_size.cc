#include "models/model_block_size.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvlearn {

absl::Status CheckModelBlockSize(const ModelMetadata& meta, uint32_t block_size,
                                 std::string_view path, std::string_view used_as) {
  if (!meta.training_traffic.has_value()) return absl::OkStatus();
  const uint32_t trained = meta.training_traffic->block_size_tokens;
  if (trained == 0 || trained == block_size) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      std::string(path), " was trained on ", trained, "-token blocks but ", std::string(used_as),
      " ", block_size, "-token blocks (--block-size ", block_size,
      "): its features count blocks, so it would judge other traffic; train a model on these "
      "blocks (kvlearn train --block-size ",
      block_size, "), or pass --block-size ", trained, " if the blocks are ", trained, " tokens"));
}

}  // namespace kvlearn
