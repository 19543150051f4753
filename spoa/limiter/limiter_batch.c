/*
 * limiter_batch - redis-batch: the calls of one loop iteration sent as one
 * script call. See limiter_batch.h.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_batch.h"
#include "limiter_call.h"
#include "limiter_link.h"
#include "limiter_reply.h"

static void limiter_on_batch_reply(redisAsyncContext *ac, void *r, void *privdata);

/* A batch from <l>'s pool (which owns it, freed by limiter_free()), or NULL
 * when memory runs out. */
static struct limiter_batch *limiter_batch_get(struct limiter *l)
{
	struct limiter_batch *b = l->batch.free;

	if (b)
		l->batch.free = b->next;
	else if (!(b = malloc(sizeof(*b))))
		return NULL;
	b->l = l;
	b->next = NULL;
	b->retried = false;
	b->n = 0;
	return b;
}

/* Give <b> back to its limiter's pool (hiredis no longer holds it). */
static void limiter_batch_put(struct limiter_batch *b)
{
	b->next = b->l->batch.free;
	b->l->batch.free = b;
}

/* limiter_call_fail() each call of <b> (<defer> as there), and give <b>
 * back to the pool. */
static void limiter_batch_fail(struct limiter_batch *b, bool defer)
{
	unsigned i;

	for (i = 0; i < b->n; i++)
		limiter_call_fail(b->l, b->calls[i], defer);
	limiter_batch_put(b);
}

/* Grow <l>'s scratch of a batch's command to <n> decisions (the words,
 * their lengths, the numbers). Returns 0, or -1 when memory runs out (the
 * scratch stays as it was: <l> owns it). */
static int limiter_batch_scratch(struct limiter *l, size_t n)
{
	const char **v;
	size_t *vl;
	char *nums;

	if (n <= l->batch.cap)
		return 0;
	v = realloc(l->batch.argv, WINDOW_BATCH_ARGC(n) * sizeof(*v));
	if (v)
		l->batch.argv = v;
	vl = realloc(l->batch.argvlen, WINDOW_BATCH_ARGC(n) * sizeof(*vl));
	if (vl)
		l->batch.argvlen = vl;
	nums = realloc(l->batch.nums, WINDOW_BATCH_NUMS(n));
	if (nums)
		l->batch.nums = nums;
	if (!v || !vl || !nums)
		return -1;
	l->batch.cap = n;
	return 0;
}

/* Room for <n> queued requests in <l>'s batch.args (owned by <l>), while
 * the queue is empty: a move would leave a queued entry's argv pointing
 * into its old place. Returns 0, or -1 when memory runs out. */
static int limiter_batch_keep_room(struct limiter *l, size_t n)
{
	struct window_args *a;

	if (n <= l->batch.args_cap)
		return 0;
	if (l->batch.nqueued)
		return -1;
	a = realloc(l->batch.args, n * sizeof(*a));
	if (!a)
		return -1;
	l->batch.args = a;
	l->batch.args_cap = n;
	return 0;
}

/* Copy request <src> (window_build_args()'s: its argv point into its own
 * buf) into <dst>: only the bytes its words use (a hundred or so of the
 * four kilobytes), its argv pointing into <dst>'s buf. A word from
 * elsewhere (none today) keeps its pointer. */
static void limiter_batch_copy_args(struct window_args *dst, const struct window_args *src)
{
	uintptr_t lo = (uintptr_t)src->buf, hi = lo + sizeof(src->buf);
	size_t used = 0;
	int i;

	for (i = 0; i < src->argc; i++) {
		uintptr_t at = (uintptr_t)src->argv[i];

		if (at >= lo && at < hi && at - lo + src->argvlen[i] > used)
			used = at - lo + src->argvlen[i];
	}
	memcpy(dst->buf, src->buf, used);
	for (i = 0; i < src->argc; i++) {
		uintptr_t at = (uintptr_t)src->argv[i];

		dst->argv[i] = at >= lo && at < hi ? dst->buf + (at - lo) : src->argv[i];
		dst->argvlen[i] = src->argvlen[i];
	}
	dst->argc = src->argc;
	dst->nkeys = src->nkeys;
}

/* Send batch <b> on its link: EVALSHA, or EVAL with the whole script when
 * <eval> (after NOSCRIPT, as one call would be re-sent). <args>: its
 * calls' requests as limiter_check() built them (the queue's), or NULL:
 * built again here, into memory of this call's own (the queue may hold
 * other calls' requests meanwhile), freed before it returns. hiredis holds
 * <b> and its calls when this returns 0; -1: nothing was sent. */
static int limiter_batch_send(struct limiter *l, struct limiter_batch *b, bool eval,
                              struct window_args *args)
{
	struct limiter_link *k = b->link;
	struct window_args *own = NULL;
	const struct limiter_engine *e;
	enum window_reason why;
	unsigned i;
	int argc, first, rc = -1;

	if (!k->ac || limiter_batch_scratch(l, b->n) == -1)
		return -1;
	if (!args) {
		own = malloc(b->n * sizeof(*own));
		if (!own)
			return -1;
		for (i = 0; i < b->n; i++) {
			struct limiter_call *c = b->calls[i];

			if (window_build_args(&c->policy, "", c->key, c->key_len, c->cost,
			                      &own[i], &why) == -1)
				goto out;
		}
		args = own;
	}
	argc = window_build_batch(args, b->n, "EVALSHA", "", 0, l->batch.argv, l->batch.argvlen, l->batch.nums);
	if (argc == -1)
		goto out;
	e = eval ? &limiter_engine_script : k->engine;
	first = limiter_engine_apply(e, &l->script, eval, l->batch.argv, l->batch.argvlen);
	if (limiter_call_command(l, k->ac, limiter_on_batch_reply, b, argc - first, l->batch.argv + first,
	                         l->batch.argvlen + first) != REDIS_OK)
		goto out;
	b->engine = e;
	b->retried = eval;
	limiter_link_hold_n(k, b->n);
	for (i = 0; i < b->n; i++)
		b->calls[i]->engine = e;   /* each is answered by this engine */
	rc = 0;
out:
	free(own);
	return rc;
}

/*
 * Send what limiter_check() queued in this loop iteration: one call as
 * today (EVALSHA of one decision), several as one batch. Calls answered
 * meanwhile (limiter_free()) are not sent; a link that went away answers
 * them "unavailable", as a send that fails would.
 */
void limiter_flush(struct limiter *l)
{
	struct limiter_link *k;
	struct limiter_batch *b;
	unsigned i, n = l->batch.nqueued;
	bool kept = l->batch.kept;

	if (n == 0)
		return;
	l->batch.nqueued = 0;
	k = l->batch.queue[0]->link;
	if (n == 1) {
		/* alone: exactly the call redis-batch 1 sends (an answer given
		 * meanwhile comes after its request was last used) */
		struct limiter_call *c = l->batch.queue[0];

		if (l->closing || !c->cb ||
		    (kept ? limiter_call_send_args(l, c, k, &l->batch.args[0]) :
		     limiter_call_send(l, c, k, false)) == -1)
			limiter_call_fail(l, c, true);
		return;
	}
	if (!l->closing && k->state != LIMITER_ST_READY) {
		/* the link went since they were queued: each waits for it (its
		 * request built again: an answer given in this loop may queue
		 * new calls over the kept requests) */
		for (i = 0; i < n; i++)
			if (!l->batch.queue[i]->cb || limiter_call_send(l, l->batch.queue[i], k, false) == -1)
				limiter_call_fail(l, l->batch.queue[i], true);
		return;
	}
	b = limiter_batch_get(l);
	if (!b) {
		for (i = 0; i < n; i++)
			limiter_call_fail(l, l->batch.queue[i], true);
		return;
	}
	b->link = k;
	b->n = n;
	memcpy(b->calls, l->batch.queue, n * sizeof(b->calls[0]));
	if (l->closing || limiter_batch_send(l, b, false, kept ? l->batch.args : NULL) == -1)
		limiter_batch_fail(b, true);
}

/* The loop is about to wait: send this iteration's calls, and write them
 * out before it waits (one wakeup less per flush). */
static void limiter_on_flush(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct limiter *l = w->data;
	struct limiter_link *k = l->batch.nqueued ? l->batch.queue[0]->link : NULL;

	(void)revents;
	ev_prepare_stop(loop, w);
	limiter_flush(l);
	if (k)
		limiter_link_write_now(k);
}

/* s->eval of a batch: its first s->n calls (those that still wait)
 * re-sent as one EVAL with the whole script (after NOSCRIPT, or the
 * module gone), as one call would be re-sent. */
static int limiter_batch_eval(const struct limiter_sent *s)
{
	struct limiter_batch *b = s->owner;

	b->n = s->n;
	return limiter_batch_send(b->l, b, true, NULL);
}

/* hiredis hands batch <privdata> back on <ac> with the script's reply <r>
 * (borrowed), or NULL when the connection is gone: acted on as the reply
 * of its calls, each answered by its element (limiter_reply_act()); then
 * the batch returns to the pool, unless it was sent again. */
static void limiter_on_batch_reply(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_batch *b = privdata;
	struct limiter_sent s = {
		.calls = b->calls, .n = b->n, .batch = true, .retried = b->retried,
		.engine = b->engine, .eval = limiter_batch_eval, .owner = b,
	};

	if (limiter_reply_act(b->link, ac, r, &s) == 0)
		limiter_batch_put(b);
}

/* ------------------------------------------------------------------ */
/* the batcher's life with the limiter's                                */

/* See limiter_batch.h. */
void limiter_batch_init(struct limiter *l, unsigned size)
{
	ev_prepare_init(&l->batch.flush, limiter_on_flush);
	l->batch.flush.data = l;
	limiter_batch_set_size(l, size);
}

/* See limiter_batch.h. */
void limiter_batch_set_size(struct limiter *l, unsigned n)
{
	limiter_flush(l);   /* calls queued under the old size go as they were */
	l->batch.size = n < 1 ? 1 : n > LIMITER_BATCH_MAX ? LIMITER_BATCH_MAX : n;
}

/*
 * See limiter_batch.h: a decision limiter_check() validated (<a>, its
 * request) goes to the call layer, which takes a call or answers it
 * without Redis; a call for a ready link is then sent now, or queued for
 * this loop iteration's batch (sent by limiter_flush() before the loop
 * next waits, or now when the batch is full; its deadline runs from now).
 */
int limiter_batch_submit(struct limiter *l, const struct window_policy *p, const char *key,
                         size_t key_len, uint64_t cost, struct window_args *a,
                         limiter_cb cb, void *arg)
{
	struct limiter_call *c;
	struct limiter_batcher *bq = &l->batch;

	if (limiter_call_take(l, p, key, key_len, cost, a, cb, arg, &c) == -1)
		return -1;
	if (!c)
		return 0;   /* answered without Redis, or waiting for its link */
	if (bq->size <= 1 || l->cluster)
		return limiter_call_start(l, c, c->link, a);
	if (bq->nqueued && bq->queue[0]->link != c->link)
		limiter_flush(l);   /* the primary moved (sentinel) */
	/* its request as built, for the batch (out of memory: built again) */
	if (bq->nqueued == 0)
		bq->kept = limiter_batch_keep_room(l, bq->size) == 0;
	if (bq->kept)
		limiter_batch_copy_args(&bq->args[bq->nqueued], a);
	bq->queue[bq->nqueued++] = c;
	if (bq->nqueued >= bq->size)
		limiter_flush(l);
	else if (!ev_is_active(&bq->flush))
		ev_prepare_start(l->loop, &bq->flush);
	return 0;
}

/* See limiter_batch.h: idle batches above LIMITER_BATCH_KEEP (those in
 * flight are not on the freelist). */
unsigned limiter_batch_trim(struct limiter *l)
{
	struct limiter_batch *b, **bp = &l->batch.free;
	unsigned kept = 0, ntrim = 0;

	while ((b = *bp) != NULL) {
		if (kept < LIMITER_BATCH_KEEP) {
			kept++;
			bp = &b->next;
		} else {
			*bp = b->next;
			free(b);
			ntrim++;
		}
	}
	return ntrim;
}

/* See limiter_batch.h: what is queued is answered "unavailable" first. */
void limiter_batch_free(struct limiter *l)
{
	struct limiter_batcher *bq = &l->batch;

	limiter_flush(l);
	ev_prepare_stop(l->loop, &bq->flush);
	while (bq->free) {
		struct limiter_batch *b = bq->free;

		bq->free = b->next;
		free(b);
	}
	free(bq->args); bq->args = NULL; bq->args_cap = 0;
	free(bq->argv); bq->argv = NULL;
	free(bq->argvlen); bq->argvlen = NULL;
	free(bq->nums); bq->nums = NULL;
}
