// The context of one call from a kvlearn command (ctl, model) to a running
// sidecar: a deadline, waiting for a sidecar that is still starting rather
// than failing at once, and the bearer token when one is given.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvlearn {

inline std::unique_ptr<grpc::ClientContext> SidecarCallContext(double timeout_seconds,
                                                               const std::string& token) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  ctx->set_wait_for_ready(true);
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  return ctx;
}

}  // namespace kvlearn
