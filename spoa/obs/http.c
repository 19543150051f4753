/*
 * http - GET on a fixed table of paths (/metrics, /healthz, /readyz), nothing else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "http.h"
#include "log.h"
#include "net.h"

#define HTTP_REQ_MAX     2048
#define HTTP_CLIENTS_MAX 64
#define HTTP_TIMEOUT     2.0
#define HTTP_BODY_INIT   (64 * 1024)
#define HTTP_BODY_MAX    (8 * 1024 * 1024)

struct http_client {
	struct http_server *srv;
	int fd;
	ev_io io;
	ev_timer timer;
	char req[HTTP_REQ_MAX];
	size_t req_len;
	char *resp;                 /* owned; header + body */
	size_t resp_len, resp_off;
	struct http_client *prev, *next;   /* h->clients, newest first */
};

struct http_server {
	struct ev_loop *loop;
	int fd;
	struct net_unix unix_sock;      /* a unix: endpoint, to remove at the end */
	ev_io accept_w;
	const struct http_route *routes;    /* borrowed */
	size_t nroutes;
	void *arg;
	struct http_client *clients;    /* newest first */
	struct http_client *oldest;     /* the list's tail */
	unsigned nclients;
	unsigned long long evicted;     /* clients closed to make room */
};

static void http_client_free(struct http_client *c)
{
	struct http_server *h = c->srv;

	if (c->prev)
		c->prev->next = c->next;
	else
		h->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		h->oldest = c->prev;
	h->nclients--;
	ev_io_stop(h->loop, &c->io);
	ev_timer_stop(h->loop, &c->timer);
	close(c->fd);
	free(c->resp);
	free(c);
}

/* The route for the request line in <req> ("GET /path[?query] HTTP/1.x"),
 * or NULL: a path outside the table. */
static const struct http_route *http_find_route(const struct http_server *h, const char *req)
{
	const char *path = req + 4;
	size_t len = strcspn(path, " ?\r\n"), i;

	for (i = 0; i < h->nroutes; i++)
		if (strlen(h->routes[i].path) == len && memcmp(h->routes[i].path, path, len) == 0)
			return &h->routes[i];
	return NULL;
}

static const char *http_status_line(int status)
{
	switch (status) {
	case 200: return "200 OK";
	case 404: return "404 Not Found";
	case 405: return "405 Method Not Allowed";
	case 503: return "503 Service Unavailable";
	default:  return "500 Internal Server Error";
	}
}

/* Build the whole response for the request in <c>. Returns 0 or -1. */
static int http_client_respond(struct http_client *c)
{
	const struct http_route *rt = NULL;
	const char *ctype = "text/plain";
	char *body = NULL, *p;
	size_t cap = HTTP_BODY_INIT;
	int n = -1, hl, status = 200;

	if (strncmp(c->req, "GET ", 4) != 0)
		status = 405;
	else if (!(rt = http_find_route(c->srv, c->req)))
		status = 404;
	else {
		for (;;) {
			p = realloc(body, cap);
			if (!p)
				break;
			body = p;
			status = 200;
			n = rt->handler(c->srv->arg, body, cap, &status);
			if (n >= 0 || cap >= HTTP_BODY_MAX)
				break;
			cap *= 2;
		}
		if (n < 0)
			status = 500;
		else
			ctype = rt->content_type;
	}
	if (n < 0)
		n = 0;
	c->resp = malloc(256 + (size_t)n);
	if (!c->resp) {
		free(body);
		return -1;
	}
	hl = snprintf(c->resp, 256, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
	              "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
	              http_status_line(status), ctype, n);
	if (n)
		memcpy(c->resp + hl, body, (size_t)n);
	c->resp_len = (size_t)hl + (size_t)n;
	free(body);
	return 0;
}

static void http_on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	struct http_client *c = w->data;
	ssize_t n;

	(void)revents;
	if (!c->resp) {
		n = read(c->fd, c->req + c->req_len, sizeof(c->req) - 1 - c->req_len);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			goto done;
		c->req_len += (size_t)n;
		c->req[c->req_len] = '\0';
		if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n")) {
			if (c->req_len == sizeof(c->req) - 1)
				goto done;      /* too big: not a scraper */
			return;
		}
		if (http_client_respond(c) == -1)
			goto done;
		ev_io_stop(loop, &c->io);
		ev_io_set(&c->io, c->fd, EV_WRITE);
		ev_io_start(loop, &c->io);
		return;
	}
	n = send(c->fd, c->resp + c->resp_off, c->resp_len - c->resp_off, MSG_NOSIGNAL);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0)
		goto done;
	c->resp_off += (size_t)n;
	if (c->resp_off < c->resp_len)
		return;
done:
	http_client_free(c);
}

static void http_on_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	http_client_free(t->data);
}

/*
 * Make room for one more client by closing the one that waited longest for
 * nothing: the oldest still sending its request (idle or slow), else the
 * oldest reading its answer (a slow reader). A probe sends its request as
 * soon as it connects and is answered in the same loop iteration, so idle
 * or slow clients, however many, push each other out, never a probe: with
 * the cap full of them, a probe's connection evicts the oldest of them.
 */
static void http_evict_oldest(struct http_server *h)
{
	struct http_client *c, *victim = h->oldest;

	for (c = h->oldest; c; c = c->prev) {
		if (!c->resp) {
			victim = c;
			break;
		}
	}
	if (!victim)
		return;
	h->evicted++;
	/* a line a second at most: a flood of idle clients is the reason */
	log_limited(CONFIG_LOG_WARN, "http_evict", "http_client_evicted",
	            "clients=%u evicted=%llu waited=%s", h->nclients, h->evicted,
	            victim->resp ? "answer" : "request");
	http_client_free(victim);
}

static void http_on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct http_server *h = w->data;
	struct http_client *c;
	int fd;

	(void)revents;
	fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1)
		return;
	if (h->nclients >= HTTP_CLIENTS_MAX)
		http_evict_oldest(h);
	if (!(c = calloc(1, sizeof(*c)))) {
		close(fd);
		return;
	}
	c->srv = h;
	c->fd = fd;
	ev_io_init(&c->io, http_on_io, fd, EV_READ);
	ev_timer_init(&c->timer, http_on_timeout, HTTP_TIMEOUT, 0.0);
	c->io.data = c->timer.data = c;
	c->next = h->clients;
	if (h->clients)
		h->clients->prev = c;
	else
		h->oldest = c;
	h->clients = c;
	h->nclients++;
	ev_io_start(loop, &c->io);
	ev_timer_start(loop, &c->timer);
}

struct http_server *http_new(struct ev_loop *loop, const char *addr,
                             const struct http_route *routes, size_t nroutes, void *arg,
                             char *err, size_t errlen)
{
	struct http_server *h = calloc(1, sizeof(*h));

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->loop = loop;
	h->routes = routes;
	h->nroutes = nroutes;
	h->arg = arg;
	h->fd = net_listen(addr, &h->unix_sock, err, errlen);
	if (h->fd == -1) {
		free(h);
		return NULL;
	}
	ev_io_init(&h->accept_w, http_on_accept, h->fd, EV_READ);
	h->accept_w.data = h;
	ev_io_start(loop, &h->accept_w);
	log_info("metrics_listening", "addr=%s", addr);
	return h;
}

void http_free(struct http_server *h)
{
	struct http_client *c, *next;

	if (!h)
		return;
	for (c = h->clients; c; c = next) {
		next = c->next;
		http_client_free(c);
	}
	ev_io_stop(h->loop, &h->accept_w);
	close(h->fd);
	net_unix_remove(&h->unix_sock);
	free(h);
}
