/*
 * resolve - getaddrinfo() on a thread per lookup, answers on the loop
 * (see resolve.h).
 *
 * A lookup thread may outlive its resolver: resolve_free() cannot wait for
 * a DNS timeout. So what threads touch (the lock, the finished list, the
 * ev_async) lives in a reference-counted struct resolve_shared, and a
 * request is owned by its thread until the thread hands it to the loop
 * (finished list) or, when the resolver is gone, frees it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <ev.h>

#include "resolve.h"

#define RESOLVE_HOST_MAX    256
#define RESOLVE_STACK_SIZE  (256u * 1024u)  /* NSS modules need some room */

struct resolve_shared {
	pthread_mutex_t mu;
	unsigned refs;                  /* the resolver's + one per running thread */
	bool dead;                      /* resolve_free() ran: nobody to answer */
	struct ev_loop *loop;
	ev_async wake;                  /* a lookup finished */
	struct resolve_req *done;       /* finished, not yet delivered (LIFO) */
};

struct resolve_req {
	struct resolve_req *done_next;  /* on shared->done */
	struct resolve_req *prev, *next;/* on resolve->pending (loop side) */
	struct resolve_shared *sh;
	resolve_cb cb;
	void *arg;
	bool cancelled;                 /* loop side only */
	char host[RESOLVE_HOST_MAX];
	int port;
	struct resolve_result res;
};

struct resolve {
	struct resolve_shared *sh;
	struct resolve_req *pending;    /* started, neither answered nor cancelled */
	unsigned npending;
};

/* Drops one reference of <sh> (held by the caller, not locked); frees it
 * with the last. */
static void resolve_shared_put(struct resolve_shared *sh)
{
	bool last;

	pthread_mutex_lock(&sh->mu);
	last = --sh->refs == 0;
	pthread_mutex_unlock(&sh->mu);
	if (last) {
		pthread_mutex_destroy(&sh->mu);
		free(sh);
	}
}

/* Unlinks <q> from <r>'s pending list (loop side). */
static void resolve_unlink(struct resolve *r, struct resolve_req *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		r->pending = q->next;
	if (q->next)
		q->next->prev = q->prev;
	q->prev = q->next = NULL;
	r->npending--;
}

/* getaddrinfo() of <q> into q->res: numeric addresses, duplicates dropped. */
static void resolve_lookup(struct resolve_req *q)
{
	struct addrinfo hints, *ai = NULL, *p;
	struct resolve_result *res = &q->res;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	rc = getaddrinfo(q->host, NULL, &hints, &ai);
	if (rc != 0) {
		res->status = rc;
		snprintf(res->err, sizeof(res->err), "%s",
		         rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return;
	}
	for (p = ai; p && res->naddrs < RESOLVE_MAX_ADDRS; p = p->ai_next) {
		struct resolve_addr *a = &res->addrs[res->naddrs];
		const void *bin;
		size_t i;

		if (p->ai_family == AF_INET)
			bin = &((const struct sockaddr_in *)(const void *)p->ai_addr)->sin_addr;
		else if (p->ai_family == AF_INET6)
			bin = &((const struct sockaddr_in6 *)(const void *)p->ai_addr)->sin6_addr;
		else
			continue;
		if (!inet_ntop(p->ai_family, bin, a->ip, sizeof(a->ip)))
			continue;
		for (i = 0; i < res->naddrs; i++)
			if (strcmp(res->addrs[i].ip, a->ip) == 0)
				break;
		if (i < res->naddrs)
			continue;
		a->family = p->ai_family;
		a->port = q->port;
		res->naddrs++;
	}
	freeaddrinfo(ai);
	if (res->naddrs == 0) {
		res->status = EAI_NONAME;
		snprintf(res->err, sizeof(res->err), "no IPv4 or IPv6 address");
	}
}

/* The lookup thread: owns <arg> (a request) until it is on the finished
 * list, or frees it when the resolver is gone. */
static void *resolve_thread(void *arg)
{
	struct resolve_req *q = arg;
	struct resolve_shared *sh = q->sh;

	resolve_lookup(q);
	pthread_mutex_lock(&sh->mu);
	if (sh->dead) {
		pthread_mutex_unlock(&sh->mu);
		free(q);
	} else {
		q->done_next = sh->done;
		sh->done = q;
		ev_async_send(sh->loop, &sh->wake);
		pthread_mutex_unlock(&sh->mu);
	}
	resolve_shared_put(sh);
	return NULL;
}

/* On the loop: answer every finished lookup that was not cancelled. */
static void resolve_on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
	struct resolve *r = w->data;
	struct resolve_req *q, *next;

	(void)loop;
	(void)revents;
	pthread_mutex_lock(&r->sh->mu);
	q = r->sh->done;
	r->sh->done = NULL;
	pthread_mutex_unlock(&r->sh->mu);
	for (; q; q = next) {
		next = q->done_next;
		if (!q->cancelled) {
			resolve_unlink(r, q);
			q->cb(q->arg, &q->res);
		}
		free(q);
	}
}

/* Owns the returned resolver until resolve_free(). */
struct resolve *resolve_new(struct ev_loop *loop)
{
	struct resolve *r = calloc(1, sizeof(*r));
	struct resolve_shared *sh = calloc(1, sizeof(*sh));

	if (!r || !sh || pthread_mutex_init(&sh->mu, NULL) != 0) {
		free(r);
		free(sh);
		return NULL;
	}
	sh->refs = 1;
	sh->loop = loop;
	ev_async_init(&sh->wake, resolve_on_wake);
	sh->wake.data = r;
	ev_async_start(loop, &sh->wake);
	ev_unref(loop);                 /* a resolver alone keeps no loop running */
	r->sh = sh;
	return r;
}

/* The request is shared with its thread (see the top); the handle stays
 * valid until its callback or resolve_cancel(). */
struct resolve_req *resolve_start(struct resolve *r, const char *host, int port,
                                  resolve_cb cb, void *arg)
{
	struct resolve_req *q;
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int rc;

	if (strlen(host) >= RESOLVE_HOST_MAX)
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	snprintf(q->host, sizeof(q->host), "%s", host);
	q->port = port;
	q->cb = cb;
	q->arg = arg;
	q->sh = r->sh;
	if (pthread_attr_init(&attr) != 0) {
		free(q);
		return NULL;
	}
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, RESOLVE_STACK_SIZE);
	pthread_mutex_lock(&r->sh->mu);
	r->sh->refs++;
	pthread_mutex_unlock(&r->sh->mu);
	/* signals stay with the threads that handle them */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&tid, &attr, resolve_thread, q);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		resolve_shared_put(r->sh);
		free(q);
		return NULL;
	}
	q->next = r->pending;
	if (r->pending)
		r->pending->prev = q;
	r->pending = q;
	r->npending++;
	return q;
}

/* Borrows <q>: freed later by the loop or by its thread. */
void resolve_cancel(struct resolve_req *q)
{
	struct resolve *r = q->sh->wake.data;

	if (q->cancelled)
		return;
	q->cancelled = true;
	resolve_unlink(r, q);
}

bool resolve_is_address(const char *host)
{
	unsigned char bin[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1;
}

unsigned resolve_pending(const struct resolve *r)
{
	return r->npending;
}

/* Frees <r>; finished lookups are dropped here, running ones by their
 * threads. */
void resolve_free(struct resolve *r)
{
	struct resolve_shared *sh;
	struct resolve_req *q, *next;

	if (!r)
		return;
	sh = r->sh;
	pthread_mutex_lock(&sh->mu);
	sh->dead = true;
	q = sh->done;
	sh->done = NULL;
	pthread_mutex_unlock(&sh->mu);
	for (; q; q = next) {
		next = q->done_next;
		free(q);
	}
	ev_ref(sh->loop);
	ev_async_stop(sh->loop, &sh->wake);
	free(r);
	resolve_shared_put(sh);
}
