/*
 * redis_open - open one hiredis async connection on a libev loop, the same
 * way for every caller (a link to a Redis node, a sentinel query, the
 * +switch-master subscription), whatever the hiredis generation:
 *
 *   hiredis >= 1.1   redisAsyncConnectWithOptions() with a connect timeout
 *                    (a black-holed address fails on its own, so the next
 *                    address of a name gets its turn)
 *   hiredis 0.14     redisAsyncConnect(); the caller's own timer bounds it
 *
 * and, with <tls>, TLS started at once (the handshake runs as part of the
 * non-blocking connect). <ip> is a numeric address (resolve.h did the
 * lookup): hiredis's own getaddrinfo() then never waits on DNS.
 */
#ifndef SPOA_REDIS_OPEN_H
#define SPOA_REDIS_OPEN_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct redisAsyncContext;
struct redis_tls;

/* A context to <ip>:<port> (or the unix socket <ip> when <port> is 0),
 * attached to <loop>, <data> set, TLS verified against <tls_name> when
 * <tls> is not NULL. The caller owns it (redisAsyncFree, or hiredis frees
 * it after a failed connect or a disconnect). Returns NULL with <err>. */
struct redisAsyncContext *redis_open(struct ev_loop *loop, const char *ip, int port,
                                     uint64_t connect_timeout_ms, struct redis_tls *tls,
                                     const char *tls_name, void *data, char *err, size_t errlen);

#endif /* SPOA_REDIS_OPEN_H */
