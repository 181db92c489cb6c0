#include "protocol.h"

namespace tocl::bench::msg {

std::string_view ContenderName(Contender contender) {
  switch (contender) {
    case Contender::kRawShmPingPong:
      return "raw shm ping-pong";
    case Contender::kRawTcpPingPong:
      return "raw tcp ping-pong";
    case Contender::kRawTcpPollPingPong:
      return "raw tcp polling ping-pong";
    case Contender::kRawFutexPingPong:
      return "raw futex ping-pong";
    case Contender::kMemcpy:
      return "memcpy";
    case Contender::kRawShmStream:
      return "raw shm stream";
    case Contender::kRawTcpStream:
      return "raw tcp stream";
    case Contender::kToclPingPong:
      return "tocl ping-pong";
    case Contender::kToclStream:
      return "tocl stream";
    case Contender::kToclIrecvPingPong:
      return "tocl Irecv ping-pong";
    case Contender::kToclHandlerPingPong:
      return "tocl handler ping-pong";
    case Contender::kToclPackedPingPong:
      return "tocl packed, header handler";
    case Contender::kToclPrepackedPingPong:
      return "tocl pre-packed Send, Recv";
    case Contender::kToclPrepackedIntoPingPong:
      return "tocl pre-packed Send, RecvInto";
  }
  return "unknown";
}

}  // namespace tocl::bench::msg
