// OpenSSL objects owned by unique_ptrs, and OpenSSL's error queue as text.
// Internal to security/.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <string_view>

#include "tocl/status.h"

namespace tocl::security::openssl {

struct Free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(ASN1_INTEGER* p) const { ASN1_INTEGER_free(p); }
};
using X509Ptr = std::unique_ptr<X509, Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Free>;

// `what` failed, with the reasons OpenSSL queued (the queue is emptied).
Status Error(std::string_view what);

Result<X509Ptr> ParseCertificate(std::string_view pem, std::string_view source);
Result<KeyPtr> ParsePrivateKey(std::string_view pem, std::string_view source);
Result<std::string> CertificatePem(X509* certificate);
Result<std::string> PrivateKeyPem(EVP_PKEY* key);

// The certificate's subject common name ("" when it has none).
std::string CommonName(X509* certificate);

}  // namespace tocl::security::openssl
