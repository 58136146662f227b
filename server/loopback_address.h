// Whether an address stays on this machine: the listen address of
// `kvlearn serve` (plaintext and unauthenticated serving are allowed only
// there) and the peer of a call (a ReloadModel without --model-dir is taken
// only from there).
//
// A host is loopback when getaddrinfo resolves it and every address it gives
// is in 127.0.0.0/8 or is ::1 (an IPv4-mapped ::ffff:127.x.y.z too). The
// name is resolved, never matched as text: "127.evil.example" may resolve to
// 0.0.0.0, and "localhost" passes because it resolves to 127.0.0.1 / ::1.
//
// Thread-safety: stateless functions; getaddrinfo is thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvlearn {

// Splits "host:port" / "[v6]:port"; the error names `flag`.
absl::Status SplitHostPort(absl::string_view listen, std::string& host, int& port,
                           absl::string_view flag);

// True when `host` (a name or a numeric address, no port) resolves and every
// address it resolves to is loopback; false for an empty host (all
// interfaces) and one that does not resolve.
bool IsLoopbackHost(const std::string& host);

// True when the host of "host:port" is loopback (IsLoopbackHost).
bool IsLoopbackAddress(absl::string_view listen);

// True for a gRPC peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000",
// "unix:/path") that is on this machine. Numeric only: peers are never names.
bool IsLoopbackPeer(absl::string_view peer);

}  // namespace kvlearn
