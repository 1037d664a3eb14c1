#include "http.h"

#include <strings.h>

#include <cctype>
#include <cstdlib>

namespace istio_cni {
namespace {

// Agent replies are a status word or an error text; anything this large is not one of ours.
constexpr size_t kMaxResponseBytes = 1 << 20;

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

bool ParseSize(const std::string& text, int base, size_t* out) {
  if (text.empty()) return false;
  for (char c : text) {
    if (base == 10 ? !isdigit(static_cast<unsigned char>(c)) : !isxdigit(static_cast<unsigned char>(c))) return false;
  }
  if (text.size() > 15) return false;  // far beyond kMaxResponseBytes; avoids overflow
  *out = static_cast<size_t>(strtoull(text.c_str(), nullptr, base));
  return true;
}

}  // namespace

std::string BuildPostRequest(const std::string& path, const std::string& json_body) {
  std::string req;
  req.reserve(160 + json_body.size());
  req += "POST " + path + " HTTP/1.1\r\n";
  req += "Host: unix\r\n";  // what Go's client sends for http://unix/...
  req += "User-Agent: istio-cni\r\n";
  req += "Content-Type: application/json\r\n";
  req += "Content-Length: " + std::to_string(json_body.size()) + "\r\n";
  req += "Connection: close\r\n\r\n";
  req += json_body;
  return req;
}

ResponseParser::State ResponseParser::Fail(const std::string& why) {
  error_ = why;
  state_ = State::kError;
  return state_;
}

ResponseParser::State ResponseParser::Feed(const char* data, size_t len) {
  if (state_ != State::kNeedMore) return state_;
  buf_.append(data, len);
  if (buf_.size() > kMaxResponseBytes) return Fail("reply larger than 1 MiB");
  return Parse(false);
}

ResponseParser::State ResponseParser::Finish() {
  if (state_ != State::kNeedMore) return state_;
  return Parse(true);
}

ResponseParser::State ResponseParser::ParseHead() {
  for (;;) {
    size_t end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) return State::kNeedMore;
    const std::string head = buf_.substr(0, end);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    // "HTTP/1.x NNN reason"
    if (status_line.compare(0, 7, "HTTP/1.") != 0 || status_line.size() < 12 || status_line[8] != ' ') {
      return Fail("malformed status line \"" + status_line.substr(0, 80) + "\"");
    }
    const std::string code = status_line.substr(9, 3);
    size_t status = 0;
    if (!ParseSize(code, 10, &status) || status < 100 || status > 999) return Fail("malformed status code");
    status_ = static_cast<int>(status);

    bool chunked = false, has_length = false;
    size_t length = 0;
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t next = head.find("\r\n", pos);
      if (next == std::string::npos) next = head.size();
      const std::string line = head.substr(pos, next - pos);
      pos = next + 2;
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string name = line.substr(0, colon), value = Trim(line.substr(colon + 1));
      if (strcasecmp(name.c_str(), "Content-Length") == 0) {
        if (!ParseSize(value, 10, &length)) return Fail("bad Content-Length");
        has_length = true;
      } else if (strcasecmp(name.c_str(), "Transfer-Encoding") == 0) {
        // Any coding other than a final "chunked" would need decoding we do not do.
        chunked = value.size() >= 7 && strcasecmp(value.c_str() + value.size() - 7, "chunked") == 0;
        if (!chunked) return Fail("unsupported Transfer-Encoding \"" + value + "\"");
      }
    }
    buf_.erase(0, end + 4);
    // 1xx interim responses precede the real one (a server may send 100 Continue unasked).
    if (status_ >= 100 && status_ < 200) continue;
    have_head_ = true;
    body_start_ = 0;
    if (status_ == 204 || status_ == 304)
      framing_ = Framing::kNone;
    else if (chunked)
      framing_ = Framing::kChunked;  // chunked wins over Content-Length (RFC 9112)
    else if (has_length)
      framing_ = Framing::kLength, content_length_ = length;
    else
      framing_ = Framing::kClose;
    if (framing_ == Framing::kLength && content_length_ > kMaxResponseBytes) return Fail("reply larger than 1 MiB");
    return State::kNeedMore;
  }
}

ResponseParser::State ResponseParser::ParseChunked(bool eof) {
  // Decodes from the start each time: replies are small and arrive in one or two reads.
  std::string decoded;
  size_t pos = 0;
  for (;;) {
    size_t line_end = buf_.find("\r\n", pos);
    if (line_end == std::string::npos) break;
    std::string size_text = buf_.substr(pos, line_end - pos);
    size_t ext = size_text.find(';');
    if (ext != std::string::npos) size_text.resize(ext);
    size_t size = 0;
    if (!ParseSize(Trim(size_text), 16, &size)) return Fail("bad chunk size");
    if (size == 0) {
      // Trailers, if any, end with an empty line; we do not need them, only their end.
      size_t trailers_end = buf_.find("\r\n", line_end + 2);
      while (trailers_end != std::string::npos && trailers_end != line_end + 2) {
        line_end = trailers_end;
        trailers_end = buf_.find("\r\n", line_end + 2);
      }
      if (trailers_end == std::string::npos) break;
      body_ = std::move(decoded);
      state_ = State::kDone;
      return state_;
    }
    if (size > kMaxResponseBytes) return Fail("reply larger than 1 MiB");
    size_t data = line_end + 2;
    if (buf_.size() < data + size + 2) break;
    if (buf_.compare(data + size, 2, "\r\n") != 0) return Fail("chunk not terminated by CRLF");
    decoded.append(buf_, data, size);
    pos = data + size + 2;
  }
  return eof ? Fail("connection closed inside a chunked body") : State::kNeedMore;
}

ResponseParser::State ResponseParser::Parse(bool eof) {
  if (!have_head_) {
    State s = ParseHead();
    if (s == State::kError) return s;
    if (!have_head_)
      return eof ? Fail(buf_.empty() ? "connection closed without a reply"
                                     : "connection closed inside the reply header")
                 : s;
  }
  switch (framing_) {
    case Framing::kNone: state_ = State::kDone; return state_;
    case Framing::kLength:
      if (buf_.size() >= content_length_) {
        body_ = buf_.substr(0, content_length_);
        state_ = State::kDone;
        return state_;
      }
      return eof ? Fail("connection closed before Content-Length bytes arrived") : State::kNeedMore;
    case Framing::kChunked: return ParseChunked(eof);
    case Framing::kClose:
      if (!eof) return State::kNeedMore;
      body_ = buf_;
      state_ = State::kDone;
      return state_;
  }
  return Fail("unreachable");
}

}  // namespace istio_cni
