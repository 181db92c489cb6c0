// `tocl keygen`: a cluster CA, one credentials directory per host
// (credentials.h) and the data plane's shared secret.
//
//   DIR/ca/ca.pem, ca.key, cluster.secret   the cluster's root: keep ca.key
//                                           off the hosts
//   DIR/<host>/ca.pem, cert.pem, key.pem, cluster.secret
//                                           copy to <host>, point its
//                                           toclsd's `credentials` at it
//
// Run again with more hosts, it reuses DIR/ca (same CA, same secret), so a
// host can join later; a host directory that exists is an error rather than
// a silent replacement.
#pragma once

#include <string>
#include <vector>

#include "tocl/status.h"

namespace tocl::security {

struct KeygenHost {
  std::string name;  // the certificate's common name and a DNS name in it
  // More names the certificate lists (DNS names or IP literals), for
  // tools that want to check them; tocl's own clients check kTlsServerName.
  std::vector<std::string> extra_names;
};

struct KeygenOptions {
  std::string directory;
  std::vector<KeygenHost> hosts;
  int valid_days = 3650;
};

// Writes what is missing. The paths written, in order, for the caller to
// print.
Result<std::vector<std::string>> GenerateCredentials(const KeygenOptions& options);

}  // namespace tocl::security
