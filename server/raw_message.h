// Protobuf messages to and from gRPC ByteBuffers, for the service's raw
// callback methods (server/retention_service.h).
//
// Why raw: when gRPC itself deserializes a callback method's request and the
// bytes are not the message, 1.51's CallbackUnaryHandler ends the call with
// UNIMPLEMENTED and an empty message, and a client stream's Read just
// reports "no more messages", which looks like a normal end of stream. The
// service takes the bytes instead and parses them here, so garbage is
// INVALID_ARGUMENT naming the message type (and counted in /metrics).
//
// Thread-safety: stateless functions.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message.h"

namespace kvlearn {

// Parses `buffer` (copied: the slices are reference-counted, not the bytes)
// into `message`. INVALID_ARGUMENT naming `what` and the message type when
// the bytes are not that message's wire form.
inline absl::Status ParseRawMessage(const grpc::ByteBuffer& buffer,
                                    google::protobuf::Message* message, const std::string& what) {
  grpc::ByteBuffer copy(buffer);
  const size_t bytes = copy.Length();
  const grpc::Status s =
      grpc::GenericDeserialize<grpc::ProtoBufferReader, google::protobuf::Message>(&copy, message);
  if (s.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes, " bytes that are not a ",
                                                 message->GetTypeName(), " in protobuf wire form"));
}

// Serializes `message` into `buffer` (replacing what it held).
inline absl::Status SerializeRawMessage(const google::protobuf::Message& message,
                                        grpc::ByteBuffer* buffer) {
  bool own = false;
  const grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(
      message, buffer, &own);
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cannot serialize the ", message.GetTypeName(), " response"));
}

}  // namespace kvlearn
