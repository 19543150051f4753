/*
 * http - the tiny, bounded metrics and health endpoint: GET on a fixed
 * table of paths (the agent's: /metrics, /healthz, /readyz).
 *
 * Runs on the main thread's loop. Requests are capped at 2 KB and 2 s; at
 * most 64 clients at once, and a new one closes the oldest still sending
 * its request (else the oldest still reading its answer), so idle or slow
 * clients cannot starve the probes; any other path gets 404, any other
 * method 405.
 */
#ifndef SPOA_HTTP_H
#define SPOA_HTTP_H

#include <stddef.h>

struct ev_loop;
struct http_server;

/* Render the body into <dst>/<cap>: bytes written, or -1 if it does not
 * fit (called again with more room). <*status> is 200 unless it sets it
 * (503: not ready). */
typedef int (*http_handler_fn)(void *arg, char *dst, size_t cap, int *status);

/* One path answered to GET (the query string is ignored). */
struct http_route {
	const char *path;               /* "/metrics" */
	const char *content_type;
	http_handler_fn handler;
};

/* Listen on <addr> (as net_listen). <routes>[<nroutes>] and <arg> are
 * borrowed until http_free(). Returns NULL with <err>. */
struct http_server *http_new(struct ev_loop *loop, const char *addr,
                             const struct http_route *routes, size_t nroutes, void *arg,
                             char *err, size_t errlen);
void http_free(struct http_server *h);

#endif /* SPOA_HTTP_H */
