// A host's cluster credentials (issue #7 §1), as `tocl keygen` writes them
// into one directory per host:
//
//   ca.pem          the cluster CA's certificate (whom to trust)
//   cert.pem        this host's certificate, signed by the CA
//   key.pem         its private key (0600)
//   cluster.secret  the data plane's shared secret, 64 hex digits (0600)
//
// The daemon (`credentials` in its config), the tools (--credentials or
// $TOCL_CREDENTIALS) and the netns test harness load them; processes get
// the secret from their daemon at enrollment, not from these files.
#pragma once

#include <optional>
#include <string>

#include "security/cluster_key.h"
#include "tocl/status.h"

namespace tocl::security {

// The name every cluster certificate carries (a DNS subject alternative
// name) and every TLS client checks the server's certificate against:
// trust means "signed by this cluster's CA", wherever the peer's address
// came from (a join list, the directory), so no certificate names an IP.
inline constexpr const char* kTlsServerName = "tocl-cluster";

struct Credentials {
  std::string directory;
  std::string host;  // the certificate's common name (the keygen host name)
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  ClusterKey secret;
};

// Reads and checks a credentials directory: every file present, the key
// and the secret readable by their owner only (as ssh insists), the
// certificate signed by the CA, valid now, and matching the key. Errors
// name the file and what to do.
Result<Credentials> LoadCredentials(const std::string& directory);

// $TOCL_CREDENTIALS when set and not empty.
std::optional<std::string> CredentialsDirectoryFromEnvironment();

}  // namespace tocl::security
