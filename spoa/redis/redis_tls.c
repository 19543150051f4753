/*
 * redis_tls - OpenSSL context and per-connection SSL for hiredis_ssl
 * (see redis_tls.h).
 *
 * hiredis's own redisCreateSSLContext() sets SNI but does not check the
 * server's name, and takes no key passphrase: the context is built here
 * with OpenSSL and each connection gets its SSL object through
 * redisInitiateSSL(), which then owns it.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"
#include "redis_tls.h"

#if SPOA_TLS

#include <hiredis/async.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "redis_url.h"

#define REDIS_TLS_KEY_PASS_ENV "RATELIMIT_SPOA_REDIS_TLS_KEY_PASSWORD"

struct redis_tls {
	SSL_CTX *ctx;
	bool verify;
	char server_name[REDIS_TLS_PATH_MAX];     /* "" = the host connected to */
	/* why the last handshake's certificate check failed: hiredis reports a
	 * failed handshake as a closed connection, this says why */
	char last_error[160];
};

/* OpenSSL's verify callback: remembers the first failure of a handshake in
 * its redis_tls (the SSL's app data) and keeps OpenSSL's verdict. */
static int tls_on_verify(int ok, X509_STORE_CTX *x)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct redis_tls *t = ssl ? SSL_get_app_data(ssl) : NULL;

	if (!ok && t && !t->last_error[0])
		snprintf(t->last_error, sizeof(t->last_error), "certificate verify failed: %s",
		         X509_verify_cert_error_string(X509_STORE_CTX_get_error(x)));
	return ok;
}

/* The last OpenSSL error of this thread as text into <err>, after <what>. */
static void tls_error(const char *what, char *err, size_t errlen)
{
	unsigned long e = ERR_peek_last_error();
	char buf[256];

	if (e) {
		ERR_error_string_n(e, buf, sizeof(buf));
		snprintf(err, errlen, "%s: %s", what, buf);
	} else {
		snprintf(err, errlen, "%s", what);
	}
	ERR_clear_error();
}

/* OpenSSL's passphrase callback: <u> is the passphrase (borrowed). */
static int tls_key_pass(char *buf, int size, int rwflag, void *u)
{
	size_t n = strlen(u);

	(void)rwflag;
	if (size <= 0 || n >= (size_t)size)
		return 0;
	memcpy(buf, u, n);
	return (int)n;
}

/* Owns the returned context (redis_tls_free()). */
struct redis_tls *redis_tls_new(const struct config_tls *c, char *err, size_t errlen)
{
	char pass[256];
	bool has_pass = false;
	struct redis_tls *t = calloc(1, sizeof(*t));

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->verify = c->verify;
	snprintf(t->server_name, sizeof(t->server_name), "%s", c->server_name);
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (!t->ctx) {
		tls_error("TLS context", err, errlen);
		goto fail;
	}
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, c->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, tls_on_verify);
	if (c->ca[0] || c->ca_dir[0]) {
		if (SSL_CTX_load_verify_locations(t->ctx, c->ca[0] ? c->ca : NULL,
		                                  c->ca_dir[0] ? c->ca_dir : NULL) != 1) {
			tls_error("redis-tls-ca", err, errlen);
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		/* a managed service's certificate chains to a public CA */
		tls_error("the system's CA certificates", err, errlen);
		goto fail;
	}
	if (c->cert[0]) {
		if (redis_url_secret_from_env(REDIS_TLS_KEY_PASS_ENV, pass, sizeof(pass), &has_pass,
		                              err, errlen) == -1)
			goto fail;
		if (has_pass) {
			SSL_CTX_set_default_passwd_cb(t->ctx, tls_key_pass);
			SSL_CTX_set_default_passwd_cb_userdata(t->ctx, pass);
		}
		if (SSL_CTX_use_certificate_chain_file(t->ctx, c->cert) != 1) {
			tls_error("redis-tls-cert", err, errlen);
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(t->ctx, c->key, SSL_FILETYPE_PEM) != 1) {
			tls_error("redis-tls-key", err, errlen);
			goto fail;
		}
		if (SSL_CTX_check_private_key(t->ctx) != 1) {
			tls_error("redis-tls-key does not match redis-tls-cert", err, errlen);
			goto fail;
		}
		/* the key is loaded: the passphrase is not needed any more */
		SSL_CTX_set_default_passwd_cb(t->ctx, NULL);
		SSL_CTX_set_default_passwd_cb_userdata(t->ctx, NULL);
	}
	explicit_bzero(pass, sizeof(pass));
	return t;
fail:
	explicit_bzero(pass, sizeof(pass));
	redis_tls_free(t);
	return NULL;
}

/* hiredis owns the SSL object once redisInitiateSSL() accepts it. */
int redis_tls_start(struct redis_tls *t, struct redisAsyncContext *ac, const char *host,
                    char *err, size_t errlen)
{
	return redis_tls_start_sync(t, &ac->c, host, err, errlen);
}

/* The same on a plain (synchronous) context <c>; hiredis owns the SSL. */
int redis_tls_start_sync(struct redis_tls *t, struct redisContext *c, const char *host,
                         char *err, size_t errlen)
{
	const char *name = t->server_name[0] ? t->server_name : host;
	unsigned char bin[16];
	bool ip = inet_pton(AF_INET, name, bin) == 1 || inet_pton(AF_INET6, name, bin) == 1;
	SSL *ssl = SSL_new(t->ctx);

	if (!ssl) {
		tls_error("TLS", err, errlen);
		return -1;
	}
	t->last_error[0] = '\0';
	SSL_set_app_data(ssl, t);
	if (ip) {
		/* no SNI for an address (RFC 6066); the certificate must name it */
		if (t->verify && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) != 1)
			goto fail;
	} else {
		if (SSL_set_tlsext_host_name(ssl, name) != 1)
			goto fail;
		if (t->verify && SSL_set1_host(ssl, name) != 1)
			goto fail;
	}
	if (redisInitiateSSL(c, ssl) != REDIS_OK) {
		snprintf(err, errlen, "TLS: %s", c->errstr[0] ? c->errstr : "cannot start");
		SSL_free(ssl);
		return -1;
	}
	return 0;
fail:
	tls_error("TLS: server name", err, errlen);
	SSL_free(ssl);
	return -1;
}

bool redis_tls_verify_off(const struct redis_tls *t)
{
	return !t->verify;
}

const char *redis_tls_last_error(const struct redis_tls *t)
{
	return t->last_error;
}

void redis_tls_free(struct redis_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

#else /* !SPOA_TLS */

struct redis_tls {
	int unused;
};

static const char no_tls[] = "this build has no TLS; build with make WITH_TLS=1";

struct redis_tls *redis_tls_new(const struct config_tls *c, char *err, size_t errlen)
{
	(void)c;
	snprintf(err, errlen, "%s", no_tls);
	return NULL;
}

int redis_tls_start(struct redis_tls *t, struct redisAsyncContext *ac, const char *host,
                    char *err, size_t errlen)
{
	(void)ac;
	return redis_tls_start_sync(t, NULL, host, err, errlen);
}

int redis_tls_start_sync(struct redis_tls *t, struct redisContext *c, const char *host,
                         char *err, size_t errlen)
{
	(void)t;
	(void)c;
	(void)host;
	snprintf(err, errlen, "%s", no_tls);
	return -1;
}

bool redis_tls_verify_off(const struct redis_tls *t)
{
	(void)t;
	return false;
}

const char *redis_tls_last_error(const struct redis_tls *t)
{
	(void)t;
	return "";
}

void redis_tls_free(struct redis_tls *t)
{
	free(t);
}

#endif /* SPOA_TLS */
