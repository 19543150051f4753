/*
 * resolve - host names to addresses without blocking the event loop.
 *
 * getaddrinfo() may wait seconds on DNS; a worker's loop must not. Each
 * lookup runs on a short-lived thread of its own; the answer comes back to
 * the loop's thread through an ev_async, and the callback runs there, never
 * inside resolve_start(). A managed Redis moves its name to a new address
 * on failover, so callers resolve again before every connect.
 *
 *   struct resolve *r = resolve_new(loop);
 *   struct resolve_req *q = resolve_start(r, "redis.example.com", 6380, on_addrs, k);
 *   ... on_addrs(k, &result) later on the loop, or resolve_cancel(q) first
 *   resolve_free(r);                   cancels what is pending
 *
 * Literal addresses take the same path (no special case for the caller);
 * glibc answers them without DNS.
 */
#ifndef SPOA_RESOLVE_H
#define SPOA_RESOLVE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#define RESOLVE_MAX_ADDRS 16
#define RESOLVE_IP_MAX    INET6_ADDRSTRLEN  /* with NUL */
#define RESOLVE_ERR_MAX   128

struct ev_loop;
struct resolve;
struct resolve_req;

struct resolve_addr {
	int family;                     /* AF_INET or AF_INET6 */
	char ip[RESOLVE_IP_MAX];        /* numeric, no brackets */
	int port;
};

struct resolve_result {
	int status;                     /* 0, or a getaddrinfo EAI_* code */
	char err[RESOLVE_ERR_MAX];      /* "" on success */
	size_t naddrs;                  /* >= 1 on success, in getaddrinfo's order */
	struct resolve_addr addrs[RESOLVE_MAX_ADDRS];
};

/* On the loop's thread; <res> is borrowed for the call only. */
typedef void (*resolve_cb)(void *arg, const struct resolve_result *res);

/* A resolver for lookups answered on <loop> (whose thread calls every
 * function below). Returns NULL on allocation failure. */
struct resolve *resolve_new(struct ev_loop *loop);

/* Look <host>:<port> up (TCP). Returns a handle valid until <cb> has run or
 * resolve_cancel(), or NULL (out of memory, no thread: <cb> never runs).
 * <host> is copied. */
struct resolve_req *resolve_start(struct resolve *r, const char *host, int port,
                                  resolve_cb cb, void *arg);

/* <cb> of <q> will not run. A lookup blocked in getaddrinfo() finishes on
 * its thread and is discarded. */
void resolve_cancel(struct resolve_req *q);

/* Lookups started and not yet answered or cancelled. */
unsigned resolve_pending(const struct resolve *r);

/* Is <host> an IPv4 or IPv6 literal (no lookup needed)? */
bool resolve_is_address(const char *host);

/* Cancel everything and release <r>; threads still blocked in getaddrinfo()
 * clean up after themselves. NULL is a no-op. */
void resolve_free(struct resolve *r);

#endif /* SPOA_RESOLVE_H */
