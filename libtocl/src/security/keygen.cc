#include "security/keygen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/posix.h"
#include "security/cluster_key.h"
#include "security/credentials.h"
#include "security/openssl_util.h"
#include "security/random_bytes.h"

namespace tocl::security {

namespace {

namespace fs = std::filesystem;
using openssl::KeyPtr;
using openssl::X509Ptr;

struct Authority {
  X509Ptr certificate;
  KeyPtr key;
  std::string certificate_pem;
  ClusterKey secret;
};

Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd.valid()) return ErrnoStatus(fmt::format("create {}", path), errno);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(fmt::format("write {}", path), errno);
    written += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0) return ErrnoStatus(fmt::format("fsync {}", path), errno);
  return Status::Ok();
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(fmt::format("open {}", path), errno);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status MakeDirectory(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoStatus(fmt::format("mkdir {}", path), errno);
  }
  return Status::Ok();
}

Result<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return openssl::Error("generating a P-256 key");
  return key;
}

Status AddExtension(X509* certificate, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, openssl::Free> extension(
      X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str()));
  if (!extension || X509_add_ext(certificate, extension.get(), -1) != 1) {
    return openssl::Error(fmt::format("certificate extension {} = {}", OBJ_nid2sn(nid), value));
  }
  return Status::Ok();
}

// A certificate for `subject_key` named `common_name`, signed by `issuer`
// (itself when null: the CA).
Result<X509Ptr> NewCertificate(const std::string& common_name, EVP_PKEY* subject_key, X509* issuer,
                               EVP_PKEY* issuer_key, int valid_days,
                               const std::vector<std::string>& alt_names) {
  X509Ptr certificate(X509_new());
  if (!certificate) return openssl::Error("X509_new");
  X509_set_version(certificate.get(), 2);  // v3
  // A random 128-bit serial: certificates of one CA must not share one.
  std::array<std::byte, 16> serial_bytes;
  TOCL_RETURN_IF_ERROR(FillRandom(serial_bytes));
  serial_bytes[0] &= std::byte{0x7f};  // positive
  std::unique_ptr<BIGNUM, openssl::Free> serial(
      BN_bin2bn(reinterpret_cast<const unsigned char*>(serial_bytes.data()),
                static_cast<int>(serial_bytes.size()), nullptr));
  if (!serial || !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate.get()))) {
    return openssl::Error("certificate serial");
  }
  // An hour of slack for clocks a little behind the keygen machine's.
  X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(certificate.get()), 86400L * valid_days);
  X509_set_pubkey(certificate.get(), subject_key);
  X509_NAME* name = X509_get_subject_name(certificate.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("tocl cluster"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer : certificate.get();
  X509_set_issuer_name(certificate.get(), X509_get_subject_name(signer));

  X509* self = certificate.get();
  TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_subject_key_identifier, "hash"));
  TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_authority_key_identifier, "keyid:always"));
  if (issuer == nullptr) {
    TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_basic_constraints, "critical,CA:TRUE"));
    TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_basic_constraints, "critical,CA:FALSE"));
    TOCL_RETURN_IF_ERROR(
        AddExtension(self, signer, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
    TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_ext_key_usage, "serverAuth,clientAuth"));
    std::string alt;
    for (const std::string& alt_name : alt_names) {
      in6_addr ignored;
      const bool ip = inet_pton(AF_INET, alt_name.c_str(), &ignored) == 1 ||
                      inet_pton(AF_INET6, alt_name.c_str(), &ignored) == 1;
      if (!alt.empty()) alt += ",";
      alt += fmt::format("{}:{}", ip ? "IP" : "DNS", alt_name);
    }
    TOCL_RETURN_IF_ERROR(AddExtension(self, signer, NID_subject_alt_name, alt));
  }
  if (X509_sign(self, issuer_key != nullptr ? issuer_key : subject_key, EVP_sha256()) == 0) {
    return openssl::Error("signing a certificate");
  }
  return certificate;
}

// DIR/ca: read when it exists, created otherwise.
Result<Authority> LoadOrCreateAuthority(const std::string& directory, int valid_days,
                                        std::vector<std::string>& written) {
  const std::string ca_dir = directory + "/ca";
  const std::string cert_path = ca_dir + "/ca.pem";
  const std::string key_path = ca_dir + "/ca.key";
  const std::string secret_path = ca_dir + "/cluster.secret";
  Authority authority;
  if (fs::exists(cert_path)) {
    TOCL_ASSIGN_OR_RETURN(authority.certificate_pem, ReadWholeFile(cert_path));
    TOCL_ASSIGN_OR_RETURN(std::string key_pem, ReadWholeFile(key_path));
    TOCL_ASSIGN_OR_RETURN(std::string secret_text, ReadWholeFile(secret_path));
    TOCL_ASSIGN_OR_RETURN(authority.certificate,
                          openssl::ParseCertificate(authority.certificate_pem, cert_path));
    TOCL_ASSIGN_OR_RETURN(authority.key, openssl::ParsePrivateKey(key_pem, key_path));
    auto secret = ClusterKey::FromHex(secret_text);
    if (!secret.ok()) return secret.status().WithContext(secret_path);
    authority.secret = *secret;
    return authority;
  }
  TOCL_RETURN_IF_ERROR(MakeDirectory(ca_dir, 0700));
  TOCL_ASSIGN_OR_RETURN(authority.key, NewKey());
  TOCL_ASSIGN_OR_RETURN(
      authority.certificate,
      NewCertificate("tocl cluster CA", authority.key.get(), nullptr, nullptr, valid_days, {}));
  TOCL_ASSIGN_OR_RETURN(authority.secret, ClusterKey::Random());
  TOCL_ASSIGN_OR_RETURN(authority.certificate_pem,
                        openssl::CertificatePem(authority.certificate.get()));
  TOCL_ASSIGN_OR_RETURN(std::string key_pem, openssl::PrivateKeyPem(authority.key.get()));
  TOCL_RETURN_IF_ERROR(WriteNewFile(key_path, key_pem, 0600));
  TOCL_RETURN_IF_ERROR(WriteNewFile(secret_path, authority.secret.Hex() + "\n", 0600));
  TOCL_RETURN_IF_ERROR(WriteNewFile(cert_path, authority.certificate_pem, 0644));
  written.insert(written.end(), {cert_path, key_path, secret_path});
  return authority;
}

Status CheckHostName(const std::string& name) {
  if (name.empty() || name == "ca" || name.size() > 64 || name.front() == '.' ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
          std::string::npos) {
    return InvalidArgument(fmt::format(
        "host name '{}': use 1 to 64 letters, digits, '.', '-' or '_', not starting with '.', "
        "and not 'ca'",
        name));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> GenerateCredentials(const KeygenOptions& options) {
  if (options.hosts.empty()) return InvalidArgument("keygen: name at least one host");
  if (options.valid_days < 1) return InvalidArgument("keygen: valid days must be at least 1");
  for (const KeygenHost& host : options.hosts) {
    TOCL_RETURN_IF_ERROR(CheckHostName(host.name));
    const std::string host_dir = options.directory + "/" + host.name;
    if (fs::exists(host_dir)) {
      return AlreadyExists(
          fmt::format("{} exists; remove it to make new credentials for {}", host_dir, host.name));
    }
  }
  std::vector<std::string> written;
  TOCL_RETURN_IF_ERROR(MakeDirectory(options.directory, 0700));
  TOCL_ASSIGN_OR_RETURN(Authority authority,
                        LoadOrCreateAuthority(options.directory, options.valid_days, written));
  for (const KeygenHost& host : options.hosts) {
    const std::string host_dir = options.directory + "/" + host.name;
    TOCL_RETURN_IF_ERROR(MakeDirectory(host_dir, 0700));
    TOCL_ASSIGN_OR_RETURN(KeyPtr key, NewKey());
    std::vector<std::string> alt_names{host.name, kTlsServerName};
    alt_names.insert(alt_names.end(), host.extra_names.begin(), host.extra_names.end());
    TOCL_ASSIGN_OR_RETURN(X509Ptr certificate,
                          NewCertificate(host.name, key.get(), authority.certificate.get(),
                                         authority.key.get(), options.valid_days, alt_names));
    TOCL_ASSIGN_OR_RETURN(std::string cert_pem, openssl::CertificatePem(certificate.get()));
    TOCL_ASSIGN_OR_RETURN(std::string key_pem, openssl::PrivateKeyPem(key.get()));
    const std::vector<std::pair<std::string, std::pair<std::string, mode_t>>> files{
        {"ca.pem", {authority.certificate_pem, 0644}},
        {"cert.pem", {cert_pem, 0644}},
        {"key.pem", {key_pem, 0600}},
        {"cluster.secret", {authority.secret.Hex() + "\n", 0600}},
    };
    for (const auto& [file, content] : files) {
      const std::string path = host_dir + "/" + file;
      TOCL_RETURN_IF_ERROR(WriteNewFile(path, content.first, content.second));
      written.push_back(path);
    }
  }
  return written;
}

}  // namespace tocl::security
