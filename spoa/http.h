/*
 * http - the tiny, bounded Prometheus endpoint: GET /metrics only.
 *
 * Runs on the main thread's loop. Requests are capped at 2 KB and 2 s; at
 * most 16 scrapers at once; anything but GET /metrics gets 404 (or 405).
 */
#ifndef SPOA_HTTP_H
#define SPOA_HTTP_H

#include <stddef.h>

struct ev_loop;
struct http_server;

/* Render the body into <dst>/<cap>: bytes written, or -1 if it does not fit. */
typedef int (*http_render_fn)(void *arg, char *dst, size_t cap);

/* Listen on <addr> (as net_listen). <render>/<arg> are borrowed until
 * http_free(). Returns NULL with <err>. */
struct http_server *http_new(struct ev_loop *loop, const char *addr,
                             http_render_fn render, void *arg,
                             char *err, size_t errlen);
void http_free(struct http_server *h);

#endif /* SPOA_HTTP_H */
