#include "server/peer_stream_slots.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"

namespace kvlearn {

std::string StreamPeer(const grpc::ServerContextBase& context, bool authenticated) {
  if (authenticated) {
    // CheckCaller let the call in on one of these: a bearer token decides
    // alone, else the certificate's identity.
    const auto& metadata = context.client_metadata();
    if (const auto it = metadata.find("authorization"); it != metadata.end()) {
      return absl::StrCat("token:", std::string(it->second.data(), it->second.size()));
    }
    if (const auto auth = context.auth_context(); auth != nullptr) {
      for (const grpc::string_ref& id : auth->GetPeerIdentity()) {
        return absl::StrCat("cert:", std::string(id.data(), id.size()));
      }
    }
  }
  // "ipv4:127.0.0.1:5432", "ipv6:[::1]:5432": the address without the port.
  std::string peer = context.peer();
  const size_t colon = peer.rfind(':');
  const bool ip = peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0;
  if (ip && colon != std::string::npos && colon > 5) peer.resize(colon);
  return peer;
}

bool PeerStreamSlots::TryOpen(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t& n = open_[peer];
  if (max_per_peer_ != 0 && n >= max_per_peer_) {
    ++refused_;
    return false;
  }
  ++n;
  return true;
}

void PeerStreamSlots::Close(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = open_.find(peer);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

uint32_t PeerStreamSlots::open(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = open_.find(peer);
  return it == open_.end() ? 0 : it->second;
}

uint64_t PeerStreamSlots::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

std::string PeerStreamSlots::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrCat(
      "# HELP kvlearn_report_stream_peers peers (principals, or addresses without "
      "authentication) with a ReportEvents stream open\n"
      "# TYPE kvlearn_report_stream_peers gauge\n"
      "kvlearn_report_stream_peers ",
      open_.size(),
      "\n# HELP kvlearn_report_streams_peer_refused_total ReportEvents streams refused by "
      "--max-streams-per-peer\n"
      "# TYPE kvlearn_report_streams_peer_refused_total counter\n"
      "kvlearn_report_streams_peer_refused_total ",
      refused_, "\n");
}

}  // namespace kvlearn
