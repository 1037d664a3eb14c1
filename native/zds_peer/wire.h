// The few ZDS protobuf messages the benchmark peer needs, hand-encoded (proto3 wire format,
// src/zds/zds.proto): decoding a WorkloadRequest, encoding the hello and the acks.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>

namespace zds_peer {

enum class RequestKind { kNone, kAdd, kDel, kSnapshotSent, kKeep };

struct Request {
  RequestKind kind = RequestKind::kNone;
  std::string uid;
  std::string name;           // add: workload_info.name
  std::string pod_namespace;  // add: workload_info.namespace
};

// False (with *why) for bytes that are not a valid WorkloadRequest; unknown fields are skipped.
bool DecodeRequest(const uint8_t* data, size_t len, Request* out, std::string* why);

std::string EncodeHello();                        // ZdsHello{version: V1}
std::string EncodeAck(const std::string& error);  // WorkloadResponse{ack: {error}}

}  // namespace zds_peer
