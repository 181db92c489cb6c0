// tocl-netns-probe: small network checks the netns cluster's test runs
// inside a host's namespace.
//
//   tocl-netns-probe connect ADDR:PORT [TIMEOUT_MS]   exit 0 once a TCP connection is made
//   tocl-netns-probe listen ADDR:PORT                 print "listening", accept and close forever
//   tocl-netns-probe hosts DAEMON                     the daemon's hosts: "host h2 name=...
//   networks=..."
//
// Exit codes: 0 success, 1 the check failed (the reason on stderr), 2 usage.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tocl/directory_client.h"

namespace {

bool ParseAddress(const std::string& text, sockaddr_in& address) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return ::inet_pton(AF_INET, text.substr(0, colon).c_str(), &address.sin_addr) == 1;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "tocl-netns-probe: %s: %s\n", what.c_str(), std::strerror(errno));
  return 1;
}

int Connect(const sockaddr_in& address, int timeout_ms) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail("socket");
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 &&
      errno != EINPROGRESS) {
    return Fail("connect");
  }
  pollfd waiting = {fd, POLLOUT, 0};
  int ready = ::poll(&waiting, 1, timeout_ms);
  if (ready == 0) {
    std::fprintf(stderr, "tocl-netns-probe: connect: no answer within %d ms\n", timeout_ms);
    return 1;
  }
  int error = 0;
  socklen_t length = sizeof error;
  if (ready < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
    return Fail("poll");
  }
  if (error != 0) {
    errno = error;
    return Fail("connect");
  }
  std::printf("connected\n");
  ::close(fd);
  return 0;
}

int Listen(const sockaddr_in& address) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return Fail("socket");
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return Fail("bind");
  }
  if (::listen(fd, 64) != 0) return Fail("listen");
  std::printf("listening\n");
  std::fflush(stdout);
  for (;;) {
    int client = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client >= 0) ::close(client);
  }
}

int Hosts(const std::string& daemon) {
  auto client = tocl::DirectoryClient::Connect(daemon, std::chrono::seconds(5));
  if (!client.ok()) {
    std::fprintf(stderr, "tocl-netns-probe: %s\n", client.status().ToString().c_str());
    return 1;
  }
  auto hosts = (*client)->QueryAll("kind=host");
  if (!hosts.ok()) {
    std::fprintf(stderr, "tocl-netns-probe: %s\n", hosts.status().ToString().c_str());
    return 1;
  }
  for (const tocl::Entity& host : *hosts) {
    auto networks = host.attributes.find("networks");
    std::printf("host %s name=%s networks=%s\n", host.gid.ToString().c_str(), host.name.c_str(),
                networks == host.attributes.end() ? "" : networks->second.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  sockaddr_in address{};
  if (command == "connect" && (argc == 3 || argc == 4) && ParseAddress(argv[2], address)) {
    return Connect(address, argc == 4 ? std::atoi(argv[3]) : 2000);
  }
  if (command == "listen" && argc == 3 && ParseAddress(argv[2], address)) return Listen(address);
  if (command == "hosts" && argc == 3) return Hosts(argv[2]);
  std::fprintf(stderr,
               "usage: tocl-netns-probe connect ADDR:PORT [TIMEOUT_MS] | listen ADDR:PORT | "
               "hosts DAEMON\n");
  return 2;
}
