// tocl-multinet-raw: the baseline of `tocl-bench multinet`, a plain TCP
// stream of fixed-size messages between two hosts of the netns cluster.
//
//   tocl-multinet-raw recv ADDR:PORT                       (host 2) prints "listening",
//                                                          takes one connection, exits 0
//   tocl-multinet-raw send ADDR:PORT BYTES WARMUP COUNT    (host 1) prints
//                                                          "seconds S bytes B"
//
// The sender first sends a header (message size, warm-up and measured
// counts), then WARMUP messages, which the receiver acknowledges with one
// byte; the clock starts at that acknowledgement; then COUNT messages, the
// last acknowledged again, and the clock stops. Every message is written
// and read whole with sized send/recv loops into one buffer each side (the
// receiver reads every byte; nothing is checked but the length).
//
// Exit codes: 0 success, 1 a socket error (on stderr), 2 usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Header {
  uint64_t bytes;
  uint64_t warmup;
  uint64_t count;
};

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "tocl-multinet-raw: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

bool ParseAddress(const std::string& text, sockaddr_in& address) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return ::inet_pton(AF_INET, text.substr(0, colon).c_str(), &address.sin_addr) == 1;
}

void SendAll(int fd, const void* data, size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t sent = ::send(fd, at, size, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) Die("send");
    at += sent;
    size -= static_cast<size_t>(sent);
  }
}

void RecvAll(int fd, void* data, size_t size) {
  char* at = static_cast<char*>(data);
  while (size > 0) {
    ssize_t got = ::recv(fd, at, size, MSG_WAITALL);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) {
      errno = ECONNRESET;
      Die("recv (the peer closed the connection)");
    }
    if (got < 0) Die("recv");
    at += got;
    size -= static_cast<size_t>(got);
  }
}

int Receive(const sockaddr_in& address) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (listener < 0 || ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    Die("socket");
  }
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    Die("bind");
  }
  if (::listen(listener, 1) != 0) Die("listen");
  std::printf("listening\n");
  std::fflush(stdout);
  int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) Die("accept");
  ::close(listener);
  Header header{};
  RecvAll(fd, &header, sizeof header);
  if (header.bytes == 0 || header.bytes > (uint64_t{1} << 32)) {
    std::fprintf(stderr, "tocl-multinet-raw: bad header (%llu bytes)\n",
                 static_cast<unsigned long long>(header.bytes));
    return 1;
  }
  std::vector<char> buffer(header.bytes);
  const char ack = 'a';
  for (uint64_t i = 0; i < header.warmup; ++i) RecvAll(fd, buffer.data(), buffer.size());
  SendAll(fd, &ack, 1);
  for (uint64_t i = 0; i < header.count; ++i) RecvAll(fd, buffer.data(), buffer.size());
  SendAll(fd, &ack, 1);
  ::close(fd);
  return 0;
}

int Send(const sockaddr_in& address, Header header) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    Die("connect");
  }
  std::vector<char> buffer(header.bytes, 'x');
  char ack = 0;
  SendAll(fd, &header, sizeof header);
  for (uint64_t i = 0; i < header.warmup; ++i) SendAll(fd, buffer.data(), buffer.size());
  RecvAll(fd, &ack, 1);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < header.count; ++i) SendAll(fd, buffer.data(), buffer.size());
  RecvAll(fd, &ack, 1);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  std::printf("seconds %.9f bytes %llu\n", took.count(),
              static_cast<unsigned long long>(header.bytes * header.count));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  sockaddr_in address{};
  if (command == "recv" && argc == 3 && ParseAddress(argv[2], address)) return Receive(address);
  if (command == "send" && argc == 6 && ParseAddress(argv[2], address)) {
    Header header{std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                  std::strtoull(argv[5], nullptr, 10)};
    if (header.bytes > 0 && header.count > 0) return Send(address, header);
  }
  std::fprintf(stderr,
               "usage: tocl-multinet-raw recv ADDR:PORT | send ADDR:PORT BYTES WARMUP COUNT\n");
  return 2;
}
