// AF_UNIX SOCK_SEQPACKET sockets for ZDS: Node's `net` can neither open them nor pass fds.
// All calls are non-blocking; the caller waits for readiness on the event loop (fd_poller).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sys_error.h"

namespace ana {

// ztunnel reads into a 1024-byte buffer; the same limit applies both ways.
constexpr size_t kZdsMaxDatagram = 1024;

struct ListenOptions {
  std::string path;
  unsigned mode = 0600;      // permissions of the socket file
  unsigned dir_mode = 0755;  // for directories that have to be created
  int backlog = 16;
};

// Creates missing parent directories, removes a stale socket file (but never anything that is
// not a socket), binds, chmods and listens. Returns the listening fd or -1.
int SeqpacketListen(const ListenOptions& opts, SysError* err);

// Returns the accepted fd, -1 with err set, or -2 when no connection is waiting (EAGAIN).
int SeqpacketAccept(int listen_fd, SysError* err);

int SeqpacketConnect(const std::string& path, SysError* err);

// Sends one datagram with at most one fd in SCM_RIGHTS. Returns 1 when sent, 0 when the socket
// buffer is full (EAGAIN: wait for writability), -1 on error.
int SeqpacketSend(int fd, const unsigned char* data, size_t len, int pass_fd, SysError* err);

struct Datagram {
  std::vector<unsigned char> data;
  std::vector<int> fds;            // received with MSG_CMSG_CLOEXEC; the caller owns them
  bool truncated = false;          // MSG_TRUNC: the datagram was larger than the buffer
  bool control_truncated = false;  // MSG_CTRUNC: more fds than the control buffer holds
  bool eof = false;                // recvmsg returned 0: peer closed (or sent an empty datagram)
};

// Returns 1 when a datagram (or EOF) was read, 0 when nothing is waiting (EAGAIN), -1 on error.
int SeqpacketRecv(int fd, Datagram* out, SysError* err);

}  // namespace ana
