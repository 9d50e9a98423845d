// Test helper: listens on ADDR:PORT, accepts one connection, reads one line and
// answers "echo:<line>". Lets shell tests exchange bytes between namespaces without
// nc/socat/python (bash's /dev/tcp can connect but not listen). Bounded by TIMEOUT_S.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/deadline.h"

namespace {

int Fail(const char* what) {
  std::fprintf(stderr, "tcp_echo: %s: %s\n", what, errno ? std::strerror(errno) : "timed out");
  return 1;
}

bool WaitReadable(int fd, const chorus::Deadline& deadline) {
  pollfd p{fd, POLLIN, 0};
  errno = 0;
  return poll(&p, 1, deadline.RemainingMs()) == 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tcp_echo ADDR PORT TIMEOUT_S\n");
    return 2;
  }
  chorus::Deadline deadline = chorus::Deadline::AfterMs(std::atoi(argv[3]) * 1000LL);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
  if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
    std::fprintf(stderr, "tcp_echo: bad IPv4 address '%s'\n", argv[1]);
    return 2;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return Fail("bind");
  if (listen(fd, 1) != 0) return Fail("listen");
  std::printf("listening on %s:%s\n", argv[1], argv[2]);
  std::fflush(stdout);
  if (!WaitReadable(fd, deadline)) return Fail("accept");
  int conn = accept(fd, nullptr, nullptr);
  if (conn < 0) return Fail("accept");
  std::string line;
  char c;
  while (line.size() < 4096) {
    if (!WaitReadable(conn, deadline)) return Fail("read");
    ssize_t n = read(conn, &c, 1);
    if (n < 0) return Fail("read");
    if (n == 0 || c == '\n') break;
    line += c;
  }
  std::string reply = "echo:" + line + "\n";
  if (write(conn, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) return Fail("write");
  std::printf("served '%s'\n", line.c_str());
  close(conn);
  close(fd);
  return 0;
}
