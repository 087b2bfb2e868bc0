// OpenSSL for Swift. Function-like macros are invisible to Swift; the typed static inline
// wrappers below (prefixed rouse_) stand in for the ones Rouse uses.
#ifndef ROUSE_COPENSSL_H
#define ROUSE_COPENSSL_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/rand.h>
#include <openssl/hmac.h>
#include <openssl/ec.h>
#include <openssl/rsa.h>
#include <openssl/bn.h>

/// SSL_CTX_set_mode is a macro over SSL_CTX_ctrl.
static inline long rouse_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
/// SSL_CTX_set_min_proto_version is a macro over SSL_CTX_ctrl.
static inline int rouse_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
/// BIO_get_mem_data is a macro over BIO_ctrl.
static inline long rouse_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}
/// BIO_set_mem_eof_return is a macro over BIO_ctrl.
static inline long rouse_BIO_set_mem_eof_return(BIO *bio, int value) {
    return BIO_set_mem_eof_return(bio, value);
}
/// SSL_set_tlsext_host_name is a macro over SSL_ctrl.
static inline long rouse_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
#endif
