// A failed system call, described without any Node-API types so that kernel-facing code
// can report errors from any thread. binding.cc turns it into a Node-style system error.
#pragma once

#include <string>

namespace ana {

struct SysError {
  int errnum = 0;       // positive errno value; 0 means "no error"
  std::string syscall;  // the call or library function that failed
  std::string path;     // file or object the call was about, when there is one
  std::string detail;   // extra text (for example nft's own error message)

  explicit operator bool() const { return errnum != 0; }

  static SysError FromErrno(int errnum, std::string syscall, std::string path = "", std::string detail = "") {
    SysError e;
    e.errnum = errnum == 0 ? 5 /* EIO: never report success as a failure */ : errnum;
    e.syscall = std::move(syscall);
    e.path = std::move(path);
    e.detail = std::move(detail);
    return e;
  }
};

}  // namespace ana
