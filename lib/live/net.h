// The collector's sockets: HOST:PORT to listen on (read/endpoint.h's Listen rules: port 0 = any, "*" = every IPv4
// address), and a peer's name for the log. Used by the live server and the relay.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "read/endpoint.h"

namespace ncw::live {

// "ip:port" of a peer; its ip alone in `ip`.
std::string peer_name(const sockaddr_storage& ss, std::string& ip);
// Binds HOST:PORT (parse_endpoint, EndpointKind::Listen; "*" is 0.0.0.0) and listens (non-blocking, close-on-exec);
// the bound port in port_out. -1 with *err, one line: "cannot listen on 'ADDR': WHY (expected ...)" for an address
// the parser refuses, else the resolver's or the socket's error.
int listen_on(const std::string& addr, uint16_t& port_out, std::string* err);

// A non-blocking connection to `ep` (close-on-exec), under way or made: its descriptor, or -1 with *why ("cannot
// resolve HOST: ...", or the last address's error). The shim's digest client and the relay both reach a collector so.
int connect_start(const Endpoint& ep, std::string* why);
// Once the descriptor is writable: whether the connection was made (else *why, the socket's error); a made one gets
// TCP_NODELAY and SO_KEEPALIVE (small frames go at once; a peer gone without a FIN is noticed).
bool connect_finished(int fd, std::string* why);

}  // namespace ncw::live
