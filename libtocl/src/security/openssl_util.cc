#include "security/openssl_util.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>

namespace tocl::security::openssl {

namespace {

using BioPtr = std::unique_ptr<BIO, Free>;

BioPtr ReadBio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

Result<std::string> Drain(BIO* bio) {
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  if (length < 0) return Error("reading a memory BIO");
  return std::string(data, static_cast<size_t>(length));
}

}  // namespace

Status Error(std::string_view what) {
  std::string reasons;
  while (unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    if (!reasons.empty()) reasons += "; ";
    reasons += text;
  }
  if (reasons.empty()) return Internal(std::string(what));
  return InvalidArgument(fmt::format("{}: {}", what, reasons));
}

Result<X509Ptr> ParseCertificate(std::string_view pem, std::string_view source) {
  BioPtr bio = ReadBio(pem);
  X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!certificate) return Error(fmt::format("{} is not a PEM certificate", source));
  return certificate;
}

Result<KeyPtr> ParsePrivateKey(std::string_view pem, std::string_view source) {
  BioPtr bio = ReadBio(pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return Error(fmt::format("{} is not an unencrypted PEM private key", source));
  return key;
}

Result<std::string> CertificatePem(X509* certificate) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), certificate) != 1) {
    return Error("writing a certificate");
  }
  return Drain(bio.get());
}

Result<std::string> PrivateKeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Error("writing a private key");
  }
  return Drain(bio.get());
}

std::string CommonName(X509* certificate) {
  X509_NAME* subject = X509_get_subject_name(certificate);
  char name[256] = {};
  if (subject == nullptr ||
      X509_NAME_get_text_by_NID(subject, NID_commonName, name, sizeof(name)) < 0) {
    return "";
  }
  return name;
}

}  // namespace tocl::security::openssl
