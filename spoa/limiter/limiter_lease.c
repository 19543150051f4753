/*
 * limiter_lease - the release of an in-flight lease (inflight=): HAProxy's
 * "ratelimit-done" message names it, and this sends the release to the
 * link that serves the account (RATELIMIT.RELEASE on the module, the
 * script's release mode otherwise). A release is never dropped silently:
 * one that cannot reach Redis (no ready link, an error, a dropped
 * connection) is tried again, backing off, until the lease would have
 * ended anyway (lease= after the release was asked: the take was earlier,
 * so that is an upper bound); then it is counted as release-failed and
 * logged. Releases are idempotent in Redis, so a retry after a lost reply
 * changes nothing. Nothing answers HAProxy for a release: the response goes
 * on. A settle is sent and tried again the same way; its first answer (what
 * the windows have left, or a failure) goes to its caller's callback, so
 * that HAProxy's response carries the state after it.
 */
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>
#include "limiter_call.h"
#include "limiter_cluster.h"
#include "limiter_int.h"
#include "limiter_verdict.h"
#include "log.h"
#include "stored.h"

#define LEASE_RETRY_MIN_S 0.1
#define LEASE_RETRY_MAX_S 2.0
/* Answered records kept for the next release or settle (l->release_spare),
 * so that one ratelimit-done neither zeroes nor frees 7 KB (its argument
 * buffer); limiter_trim() keeps LEASE_SPARE_KEEP of them once a burst is
 * over. */
#define LEASE_SPARE_MAX 64
#define LEASE_SPARE_KEEP 8

/* One release until Redis answers it or its lease has ended: owned by
 * its limiter's list (l->releases). */
struct limiter_release {
	struct limiter *l;
	struct limiter_release *prev, *next;
	ev_timer retry;
	double backoff;                 /* s until the next try */
	int64_t until_us;               /* no try after this */
	bool full;                      /* the script's source (after NOSCRIPT) */
	bool sent;                      /* hiredis holds it */
	bool settle;                    /* a settle (limiter_settle), not a release */
	unsigned nwin;                  /* a settle's windows */
	limiter_settle_cb cb;           /* a settle's caller, until its first answer */
	void *cb_arg;
	ev_timer answer_by;             /* the caller's answer at redis-timeout at the latest */
	/* (last: a record is never zeroed whole, only what is above) */
	struct window_args a;           /* "EVALSHA" "" 1 <leases key> "release" <id>, or
	                                 * window_build_settle()'s */
};

/* The key and id <r>'s log lines name (a settle: its record's key). */
static void lease_names(const struct limiter_release *r, int *klen, const char **k, int *ilen,
                        const char **id)
{
	size_t at = r->settle ? 2 + r->a.nkeys : 3;

	*k = r->a.argv[at];
	*klen = (int)r->a.argvlen[at];
	*id = r->settle ? "-" : r->a.argv[5];
	*ilen = r->settle ? 1 : (int)r->a.argvlen[5];
}

/* Count one lease event <what> in <l>'s metrics, if any. */
static void lease_count(struct limiter *l, enum metrics_lease what)
{
	if (l->metrics)
		metrics_add(&l->metrics->leases[what], 1);
}

static void lease_try(struct limiter_release *r);
static void lease_on_retry(struct ev_loop *loop, ev_timer *w, int revents);

/* Count one settle event <what> in <l>'s metrics, if any. */
static void lease_count_settle(struct limiter *l, enum metrics_settle what)
{
	if (l->metrics)
		metrics_add(&l->metrics->settles[what], 1);
}

/* Tells <r>'s caller, once, what its settle answered (<st>; NULL: none). */
static void lease_answer(struct limiter_release *r, const struct stored_settle *st)
{
	limiter_settle_cb cb = r->cb;

	ev_timer_stop(r->l->loop, &r->answer_by);
	r->cb = NULL;
	if (cb)
		cb(r->cb_arg, st);
}

/* <w>'s settle (w->data, borrowed) has waited redis-timeout for Redis: its
 * caller (HAProxy's response) is answered without the state; the settle
 * itself still waits for its reply, or is tried again. */
static void lease_on_answer_by(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	lease_answer(w->data, NULL);
}

/* A record for <l>'s next release or settle, owned by the caller until
 * lease_link() gives it to <l>'s list: a spare one or a new one, its
 * fields above <a> set (<a> is window_build_*()'s to fill), or NULL. */
static struct limiter_release *lease_new(struct limiter *l, const struct window_policy *p)
{
	struct limiter_release *r = l->release_spare;

	if (r) {
		l->release_spare = r->next;
		l->nrelease_spare--;
	} else if (!(r = malloc(sizeof(*r)))) {
		return NULL;
	}
	r->l = l;
	r->prev = r->next = NULL;
	r->backoff = LEASE_RETRY_MIN_S;
	r->until_us = limiter_now_us() + (int64_t)p->lease_ms * 1000;
	r->full = r->sent = r->settle = false;
	r->nwin = 0;
	r->cb = NULL;
	r->cb_arg = NULL;
	ev_timer_init(&r->retry, lease_on_retry, 0., 0.);
	r->retry.data = r;
	ev_timer_init(&r->answer_by, lease_on_answer_by, 0., 0.);
	r->answer_by.data = r;
	return r;
}

/* Keeps <r> (owned by the caller, unlinked) as a spare of its limiter, or
 * frees it when there are enough. */
static void lease_drop(struct limiter_release *r)
{
	struct limiter *l = r->l;

	if (l->closing || l->nrelease_spare >= LEASE_SPARE_MAX) {
		free(r);
		return;
	}
	r->next = l->release_spare;
	l->release_spare = r;
	l->nrelease_spare++;
}

/* Gives <r> (owned by the caller) to its limiter's list and sends it. */
static void lease_link(struct limiter_release *r)
{
	struct limiter *l = r->l;

	r->next = l->releases;
	if (l->releases)
		l->releases->prev = r;
	l->releases = r;
	lease_try(r);
}

/* Unlinks <r> (owned by its limiter's list), its timer stopped, and drops
 * it (a spare, or freed). */
static void lease_free(struct limiter_release *r)
{
	struct limiter *l = r->l;

	ev_timer_stop(l->loop, &r->retry);
	ev_timer_stop(l->loop, &r->answer_by);
	if (r->prev)
		r->prev->next = r->next;
	else
		l->releases = r->next;
	if (r->next)
		r->next->prev = r->prev;
	lease_drop(r);
}

/* Try <r> again later, or give it up when its lease has ended by then. */
static void lease_later(struct limiter_release *r, const char *why)
{
	struct limiter *l = r->l;

	/* (HAProxy's response waits for a settle's first answer only) */
	lease_answer(r, NULL);
	if (l->closing || limiter_now_us() + (int64_t)(r->backoff * 1e6) >= r->until_us) {
		int kl, il;
		const char *k, *id;

		lease_names(r, &kl, &k, &il, &id);
		if (!r->settle)
			lease_count(l, METRICS_LEASE_RELEASE_FAILED);
		else
			lease_count_settle(l, METRICS_SETTLE_FAILED);
		log_warn(r->settle ? "settle_failed" : "lease_release_failed",
		         "key=%.*s lease=%.*s reason=\"%s\"", kl, k, il, id, why);
		lease_free(r);
		return;
	}
	ev_timer_set(&r->retry, r->backoff, 0.);
	ev_timer_start(l->loop, &r->retry);
	r->backoff = r->backoff * 2 < LEASE_RETRY_MAX_S ? r->backoff * 2 : LEASE_RETRY_MAX_S;
}

/* <w>'s release (w->data, borrowed) is due for another try. */
static void lease_on_retry(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	lease_try(w->data);
}

/* A settle's reply <rep> (borrowed): 2 integers, or 6 from protocol 6 on
 * (what the windows have left), read by stored_read_settle() and handed to
 * <r>'s caller. 0, or -1 when it is no settle's answer. */
static int lease_settled(struct limiter_release *r, const redisReply *rep)
{
	struct window_reply v;
	struct stored_settle st;

	/* (the decisions' reading of a reply's integers; a longer one than a
	 * decision's is no settle's either) */
	limiter_verdict_view(rep, &v);
	if (v.kind != WINDOW_REPLY_INTEGERS || v.n > WINDOW_REPLY_INTS ||
	    stored_read_settle(v.v, v.n, r->nwin, &st) == -1)
		return -1;
	log_debug("settled", "key=%.*s code=%d delta=%lld known=%d",
	          (int)r->a.argvlen[2 + r->a.nkeys], r->a.argv[2 + r->a.nkeys], st.settled,
	          (long long)st.delta, st.known);
	lease_count_settle(r->l, !st.settled ? METRICS_SETTLE_GONE :
	                         st.delta > 0 ? METRICS_SETTLE_CHARGED :
	                         st.delta < 0 ? METRICS_SETTLE_REFUNDED : METRICS_SETTLE_EVEN);
	lease_answer(r, &st);
	return 0;
}

/* hiredis's answer <reply> (borrowed; NULL: the connection went first) to
 * release <privdata>, which it frees or tries again. */
static void lease_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct limiter_release *r = privdata;
	const redisReply *rep = reply;

	(void)ac;
	r->sent = false;
	if (r->settle && lease_settled(r, rep) == 0) {
		lease_free(r);
		return;
	}
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_INTEGER) {
		long long code = rep->element[0]->integer;

		lease_count(r->l, code == 1 ? METRICS_LEASE_RELEASED :
		                  code == 2 ? METRICS_LEASE_ENDED_EARLY : METRICS_LEASE_GONE);
		if (code == 2)
			log_info("lease_ended_early", "key=%.*s lease=%.*s", (int)r->a.argvlen[3],
			         r->a.argv[3], (int)r->a.argvlen[5], r->a.argv[5]);
		lease_free(r);
		return;
	}
	if (rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0 &&
	    !r->full) {
		r->full = true;
		lease_try(r);
		return;
	}
	/* (a settle's error is its arguments' or its data's: the same again) */
	if (r->settle && rep && rep->type == REDIS_REPLY_ERROR &&
	    strncmp(rep->str, "NOSCRIPT", 8) != 0) {
		r->until_us = 0;
		lease_later(r, rep->str);
		return;
	}
	lease_later(r, !rep ? "connection lost" : rep->type == REDIS_REPLY_ERROR ? rep->str
	                                                                          : "bad reply");
}

/* Send <r> (borrowed; hiredis holds it until its answer) on the link that
 * serves its key, or try again later. */
static void lease_try(struct limiter_release *r)
{
	struct limiter *l = r->l;
	struct limiter_link *k = limiter_route(l, r->a.argv[3], r->a.argvlen[3]);
	const char *argv[WINDOW_SCRIPT_ARGC_MAX];
	size_t argvlen[WINDOW_SCRIPT_ARGC_MAX];
	int argc = r->a.argc, first = 0;

	if (!k || k->state != LIMITER_ST_READY || !k->ac || !k->engine) {
		lease_later(r, "no ready connection");
		return;
	}
	memcpy(argv, r->a.argv, (size_t)argc * sizeof(argv[0]));
	memcpy(argvlen, r->a.argvlen, (size_t)argc * sizeof(argvlen[0]));
	if (k->engine->id == LIMITER_ENGINE_MODULE && r->settle) {
		/* RATELIMIT.SETTLE <numkeys> <keys>... <real> <pairs>...: the
		 * script's arguments without their mode word */
		size_t nk = r->a.nkeys, i;

		argv[1] = "RATELIMIT.SETTLE";
		argvlen[1] = 16;
		for (i = 3 + nk; i + 1 < (size_t)argc; i++) {
			argv[i] = argv[i + 1];
			argvlen[i] = argvlen[i + 1];
		}
		first = 1;
		argc--;
	} else if (k->engine->id == LIMITER_ENGINE_MODULE) {
		/* RATELIMIT.RELEASE <key> <lease>: no key count, no mode word */
		argv[1] = "RATELIMIT.RELEASE";
		argvlen[1] = 17;
		argv[2] = argv[3];
		argvlen[2] = argvlen[3];
		argv[3] = argv[5];
		argvlen[3] = argvlen[5];
		first = 1;
		argc = 4;
	} else {
		first = limiter_engine_apply(k->engine, &l->script, r->full, argv, argvlen);
	}
	if (limiter_call_command(l, k->ac, lease_on_reply, r, argc - first, argv + first,
	                         argvlen + first) != REDIS_OK) {
		lease_later(r, "send failed");
		return;
	}
	r->sent = true;
}

/* See limiter.h. Borrows <p>, <key> and <lease>: the release keeps its
 * own copy of its arguments. */
int limiter_release(struct limiter *l, const struct window_policy *p, const char *key,
                    size_t key_len, const char *lease)
{
	struct limiter_release *r;

	if (!l || l->closing || !p || !p->inflight)
		return -1;
	r = lease_new(l, p);
	if (!r)
		return -1;
	if (window_build_release(p, key, key_len, lease, &r->a) == -1) {
		lease_drop(r);
		return -1;
	}
	lease_link(r);
	return 0;
}

/* See limiter.h. Borrows <p>, <key> and <lease>: the settle keeps its
 * own copy of its arguments. */
int limiter_settle(struct limiter *l, const struct window_policy *p, const char *key,
                   size_t key_len, const char *lease, uint64_t real, limiter_settle_cb cb,
                   void *arg)
{
	struct limiter_release *r;

	if (!l || l->closing || !p || !p->settle_hdr[0])
		return -1;
	r = lease_new(l, p);
	if (!r)
		return -1;
	if (window_build_settle(p, key, key_len, lease, real, &r->a) == -1) {
		lease_drop(r);
		return -1;
	}
	r->settle = true;
	r->nwin = r->a.nkeys - 1;
	r->cb = cb;
	r->cb_arg = arg;
	/* (a slow Redis holds HAProxy's response no longer than a decision) */
	if (cb) {
		ev_timer_set(&r->answer_by, (double)l->timeout_ms / 1000., 0.);
		ev_timer_start(l->loop, &r->answer_by);
	}
	lease_link(r);
	return 0;
}

/* Frees <l>'s spare records beyond <keep>. Returns how many. */
static unsigned lease_spares_free(struct limiter *l, unsigned keep)
{
	struct limiter_release *r;
	unsigned n = 0;

	while (l->nrelease_spare > keep && (r = l->release_spare)) {
		l->release_spare = r->next;
		l->nrelease_spare--;
		free(r);
		n++;
	}
	return n;
}

/* See limiter_int.h: at limiter_free(), after hiredis answered what it
 * held (each such release freed itself as failed). */
void limiter_releases_free(struct limiter *l)
{
	struct limiter_release *r, *next;

	for (r = l->releases; r; r = next) {
		next = r->next;
		lease_answer(r, NULL);
		if (!r->settle)
			lease_count(l, METRICS_LEASE_RELEASE_FAILED);
		else
			lease_count_settle(l, METRICS_SETTLE_FAILED);
		ev_timer_stop(l->loop, &r->retry);
		ev_timer_stop(l->loop, &r->answer_by);
		free(r);
	}
	l->releases = NULL;
	lease_spares_free(l, 0);
}

/* See limiter_int.h. */
unsigned limiter_releases_trim(struct limiter *l)
{
	return lease_spares_free(l, LEASE_SPARE_KEEP);
}
