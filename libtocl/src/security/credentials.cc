#include "security/credentials.h"

#include <fmt/format.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/environment.h"
#include "core/posix.h"
#include "security/openssl_util.h"

namespace tocl::security {

namespace {

Result<std::string> ReadFile(const std::string& path, bool secret) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return NotFound(
          fmt::format("{} is missing (a credentials directory holds ca.pem, cert.pem, key.pem and "
                      "cluster.secret, as `tocl keygen` writes them)",
                      path));
    }
    return ErrnoStatus(fmt::format("stat {}", path), errno);
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(fmt::format("{} is not a file", path));
  if (secret && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return PermissionDenied(
        fmt::format("{} can be read by others (mode {:04o}); it must be 0600: chmod 600 {}", path,
                    st.st_mode & 07777, path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(fmt::format("open {}", path), errno);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The certificate is signed by the CA and valid now.
Status Verify(X509* ca, X509* certificate, const std::string& cert_path) {
  std::unique_ptr<X509_STORE, openssl::Free> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, openssl::Free> context(X509_STORE_CTX_new());
  if (!store || !context || X509_STORE_add_cert(store.get(), ca) != 1 ||
      X509_STORE_CTX_init(context.get(), store.get(), certificate, nullptr) != 1) {
    return openssl::Error("setting up certificate verification");
  }
  if (X509_verify_cert(context.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(context.get());
    return PermissionDenied(fmt::format("{} does not verify against ca.pem: {}", cert_path,
                                        X509_verify_cert_error_string(error)));
  }
  return Status::Ok();
}

}  // namespace

Result<Credentials> LoadCredentials(const std::string& directory) {
  Credentials credentials;
  credentials.directory = directory;
  const std::string ca_path = directory + "/ca.pem";
  const std::string cert_path = directory + "/cert.pem";
  const std::string key_path = directory + "/key.pem";
  const std::string secret_path = directory + "/cluster.secret";
  TOCL_ASSIGN_OR_RETURN(credentials.ca_pem, ReadFile(ca_path, false));
  TOCL_ASSIGN_OR_RETURN(credentials.cert_pem, ReadFile(cert_path, false));
  TOCL_ASSIGN_OR_RETURN(credentials.key_pem, ReadFile(key_path, true));
  TOCL_ASSIGN_OR_RETURN(std::string secret_text, ReadFile(secret_path, true));
  auto secret = ClusterKey::FromHex(secret_text);
  if (!secret.ok()) return secret.status().WithContext(secret_path);
  credentials.secret = *secret;

  TOCL_ASSIGN_OR_RETURN(openssl::X509Ptr ca,
                        openssl::ParseCertificate(credentials.ca_pem, ca_path));
  TOCL_ASSIGN_OR_RETURN(openssl::X509Ptr certificate,
                        openssl::ParseCertificate(credentials.cert_pem, cert_path));
  TOCL_ASSIGN_OR_RETURN(openssl::KeyPtr key,
                        openssl::ParsePrivateKey(credentials.key_pem, key_path));
  TOCL_RETURN_IF_ERROR(Verify(ca.get(), certificate.get(), cert_path));
  if (X509_check_private_key(certificate.get(), key.get()) != 1) {
    (void)openssl::Error("");  // empties the queue
    return InvalidArgument(fmt::format("{} is not the key of {}", key_path, cert_path));
  }
  credentials.host = openssl::CommonName(certificate.get());
  return credentials;
}

std::optional<std::string> CredentialsDirectoryFromEnvironment() {
  std::string value = FromEnvironment("TOCL_CREDENTIALS");
  if (value.empty()) return std::nullopt;
  return value;
}

}  // namespace tocl::security
