// Just enough HTTP/1.1 for one request per connection to the agent: build a POST, and parse one
// response framed by Content-Length, chunked transfer coding, or connection close. Kept free of
// I/O so agent_client.cc only moves bytes and watches the deadline.
#pragma once

#include <cstddef>
#include <string>

namespace istio_cni {

// `Connection: close`: the plugin makes one request and exits, so the agent should not keep the
// connection; it also lets a server that sends neither Content-Length nor chunked end the body
// by closing.
std::string BuildPostRequest(const std::string& path, const std::string& json_body);

class ResponseParser {
 public:
  enum class State { kNeedMore, kDone, kError };

  // Appends bytes read from the socket and tries to complete the response.
  State Feed(const char* data, size_t len);
  // The peer closed: completes a close-delimited body, anything else unfinished is an error.
  State Finish();

  int status() const { return status_; }
  const std::string& body() const { return body_; }
  const std::string& error() const { return error_; }

 private:
  enum class Framing { kLength, kChunked, kClose, kNone };
  State Parse(bool eof);
  State ParseHead();
  State ParseChunked(bool eof);
  State Fail(const std::string& why);

  std::string buf_;
  bool have_head_ = false;
  size_t body_start_ = 0;
  Framing framing_ = Framing::kNone;
  size_t content_length_ = 0;
  int status_ = 0;
  std::string body_;
  std::string error_;
  State state_ = State::kNeedMore;
};

}  // namespace istio_cni
