#include "wire.h"

namespace zds_peer {
namespace {

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool done() const { return p_ == end_; }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      uint8_t b = *p_++;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  bool Bytes(const uint8_t** data, size_t* len) {
    uint64_t n = 0;
    if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    *data = p_;
    *len = static_cast<size_t>(n);
    p_ += n;
    return true;
  }

  bool Skip(int wire_type) {
    uint64_t v = 0;
    const uint8_t* d = nullptr;
    size_t n = 0;
    switch (wire_type) {
      case 0: return Varint(&v);
      case 1: return Advance(8);
      case 2: return Bytes(&d, &n);
      case 5: return Advance(4);
      default: return false;
    }
  }

 private:
  bool Advance(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

// Visits each (field, wire type) of a message; `field` returns false on a malformed value.
template <typename F>
bool ForEachField(const uint8_t* data, size_t len, F field) {
  Reader r(data, len);
  while (!r.done()) {
    uint64_t tag = 0;
    if (!r.Varint(&tag) || (tag >> 3) == 0) return false;
    if (!field(static_cast<uint32_t>(tag >> 3), static_cast<int>(tag & 7), &r)) return false;
  }
  return true;
}

bool StringField(Reader* r, int wire_type, std::string* out) {
  const uint8_t* d = nullptr;
  size_t n = 0;
  if (wire_type != 2 || !r->Bytes(&d, &n)) return false;
  out->assign(reinterpret_cast<const char*>(d), n);
  return true;
}

bool Message(Reader* r, int wire_type, const uint8_t** d, size_t* n) { return wire_type == 2 && r->Bytes(d, n); }

bool DecodeInfo(const uint8_t* d, size_t n, Request* out) {
  return ForEachField(d, n, [out](uint32_t f, int wt, Reader* r) {
    if (f == 1) return StringField(r, wt, &out->name);
    if (f == 2) return StringField(r, wt, &out->pod_namespace);
    return r->Skip(wt);
  });
}

// `uid_field`: 1 in AddWorkload and KeepWorkload, 2 in DelWorkload.
bool DecodeUidMessage(const uint8_t* d, size_t n, uint32_t uid_field, Request* out) {
  return ForEachField(d, n, [out, uid_field](uint32_t f, int wt, Reader* r) {
    if (f == uid_field) return StringField(r, wt, &out->uid);
    if (f == 2 && out->kind == RequestKind::kAdd) {
      const uint8_t* info = nullptr;
      size_t len = 0;
      return Message(r, wt, &info, &len) && DecodeInfo(info, len, out);
    }
    return r->Skip(wt);
  });
}

void PutVarint(std::string* s, uint64_t v) {
  while (v >= 0x80) {
    s->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s->push_back(static_cast<char>(v));
}

}  // namespace

bool DecodeRequest(const uint8_t* data, size_t len, Request* out, std::string* why) {
  bool ok = ForEachField(data, len, [out](uint32_t f, int wt, Reader* r) {
    const uint8_t* d = nullptr;
    size_t n = 0;
    // Within a oneof the last member on the wire wins: each one resets the request.
    switch (f) {
      case 1: *out = Request{RequestKind::kAdd}; return Message(r, wt, &d, &n) && DecodeUidMessage(d, n, 1, out);
      case 2: *out = Request{RequestKind::kDel}; return Message(r, wt, &d, &n) && DecodeUidMessage(d, n, 2, out);
      case 3: *out = Request{RequestKind::kSnapshotSent}; return Message(r, wt, &d, &n);
      case 5: *out = Request{RequestKind::kKeep}; return Message(r, wt, &d, &n) && DecodeUidMessage(d, n, 1, out);
      default: return r->Skip(wt);
    }
  });
  if (!ok)
    *why = "malformed WorkloadRequest";
  else if (out->kind == RequestKind::kNone)
    *why = "WorkloadRequest without a payload";
  return ok && out->kind != RequestKind::kNone;
}

std::string EncodeHello() { return std::string("\x08\x01", 2); }

std::string EncodeAck(const std::string& error) {
  std::string ack;
  if (!error.empty()) {
    ack.push_back(0x0a);
    PutVarint(&ack, error.size());
    ack += error;
  }
  std::string out;
  out.push_back(0x0a);
  PutVarint(&out, ack.size());
  return out + ack;
}

}  // namespace zds_peer
