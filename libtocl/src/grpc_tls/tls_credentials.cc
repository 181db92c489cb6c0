#include "grpc_tls/tls_credentials.h"

#include <algorithm>
#include <cctype>

namespace tocl::grpc_tls {
namespace {

bool ContainsIgnoringCase(std::string_view text, std::string_view word) {
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  return std::search(text.begin(), text.end(), word.begin(), word.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != text.end();
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(
    const security::Credentials& credentials) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = credentials.ca_pem;
  options.pem_private_key = credentials.key_pem;
  options.pem_cert_chain = credentials.cert_pem;
  return grpc::SslCredentials(options);
}

void SetServerNameOverride(grpc::ChannelArguments& args) {
  args.SetSslTargetNameOverride(security::kTlsServerName);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(
    const security::Credentials& credentials) {
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = credentials.ca_pem;
  options.pem_key_cert_pairs.push_back({credentials.key_pem, credentials.cert_pem});
  return grpc::SslServerCredentials(options);
}

bool PeerAuthenticated(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated();
}

bool HandshakeFailed(std::string_view grpc_message) {
  // gRPC 1.51's words: "Ssl handshake failed: ... certificate verify
  // failed" for a TLS client; "Socket closed" for a plaintext one (or a TLS
  // client of a plaintext server), as no TLS alert can reach it.
  for (std::string_view word :
       {"handshake", "ssl", "tls", "socket closed", "connection reset", "end of file"}) {
    if (ContainsIgnoringCase(grpc_message, word)) return true;
  }
  return false;
}

}  // namespace tocl::grpc_tls
