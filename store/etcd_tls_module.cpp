// The etcd_tls module (libccrun_etcd_tls.so): TLS to etcd with OpenSSL,
// behind etcd_tls.h's interfaces, so that only jobs with etcd_tls=1 load
// OpenSSL (module_loader.h).
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl.hpp>
#include <boost/asio/ssl/rfc2818_verification.hpp>

#include "ccrun/error.h"
#include "etcd_tls.h"

namespace ccrun::store::etcd {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

class OpensslSession : public TlsSession {
 public:
  OpensslSession(boost::beast::tcp_stream& lower, asio::ssl::context& context,
                 const std::string& host)
      : stream_(lower, context) {
    if (!SSL_set_tlsext_host_name(stream_.native_handle(), host.c_str())) {
      throw ConnectionError("etcd store " + host + ": cannot ask for this name (SNI): " +
                            error_code(static_cast<int>(::ERR_get_error()),
                                       asio::error::get_ssl_category())
                                .message());
    }
    stream_.set_verify_callback(asio::ssl::rfc2818_verification(host));
  }
  void async_handshake(Done done) override {
    stream_.async_handshake(asio::ssl::stream_base::client,
                            [done = std::move(done)](error_code ec) { done(ec, 0); });
  }
  void async_read_some(asio::mutable_buffer into, Done done) override {
    stream_.async_read_some(into, std::move(done));
  }
  void async_write_some(asio::const_buffer from, Done done) override {
    stream_.async_write_some(from, std::move(done));
  }

 private:
  asio::ssl::stream<boost::beast::tcp_stream&> stream_;
};

class OpensslClient : public TlsClient {
 public:
  explicit OpensslClient(const EtcdStoreOptions& o) : context_(asio::ssl::context::tls_client) {
    context_.set_verify_mode(asio::ssl::verify_peer);
    try {
      if (o.ca_file.empty()) {
        context_.set_default_verify_paths();
      } else {
        context_.load_verify_file(o.ca_file);
      }
      if (!o.cert_file.empty()) {
        context_.use_certificate_chain_file(o.cert_file);
        context_.use_private_key_file(o.key_file, asio::ssl::context::pem);
      }
    } catch (const boost::system::system_error& e) {
      throw ConfigError("etcd store: cannot load TLS files (ca \"" + o.ca_file + "\", cert \"" +
                        o.cert_file + "\", key \"" + o.key_file + "\"): " + e.what() +
                        "; give readable PEM files");
    }
  }
  std::unique_ptr<TlsSession> session(boost::beast::tcp_stream& lower,
                                      const std::string& host) override {
    return std::make_unique<OpensslSession>(lower, context_, host);
  }

 private:
  asio::ssl::context context_;
};

}  // namespace
}  // namespace ccrun::store::etcd

// The module's entry point (etcd_tls.h, kMakeTlsClientSymbol).
extern "C" __attribute__((visibility("default"))) ccrun::store::etcd::TlsClient*
ccrun_etcd_tls_client(const ccrun::store::EtcdStoreOptions* o) {
  return new ccrun::store::etcd::OpensslClient(*o);
}
