/*
 * limiter_reply - a decision's reply acted on: one call's, or a batch's
 * (each call answered by its element), in one place with one set of side
 * effects. limiter_verdict.c reads the reply; limiter_reply_act() then
 * notes what it says of the link (heard, lost, a replica now, the engine
 * gone), sends calls on (MOVED, ASK, TRYAGAIN, EVAL after "missing") and
 * answers the others (limiter_call_finish(), or "unavailable"). The
 * hiredis callbacks (limiter_on_reply() here, the batch's in
 * limiter_batch.c) only hand the reply over.
 */
#ifndef SPOA_LIMITER_REPLY_H
#define SPOA_LIMITER_REPLY_H

#include "limiter_int.h"

/* The calls one reply answers, as they were sent. */
struct limiter_sent {
	struct limiter_call **calls;    /* the sender's array, borrowed; compacted in
	                                 * place to the calls an EVAL re-send takes */
	unsigned n;
	bool batch;                     /* the batch form: call i reads element i */
	bool retried;                   /* sent as EVAL after "missing" already */
	const struct limiter_engine *engine;    /* what they were sent with */
	/* send the first <n> calls again as EVAL with the script, on the
	 * link's context: 0 when hiredis holds them (and <owner>) again */
	int (*eval)(const struct limiter_sent *s);
	void *owner;                    /* the sender's: a call, or a batch */
};

/* Act on reply <r> (borrowed: hiredis frees it after the callback; NULL:
 * the connection is gone) on <ac> of link <k> to the calls <s> says,
 * which hiredis held until now. Returns 1 when they were sent again as
 * EVAL (hiredis holds s->owner again); else 0: each call is answered (and
 * back in the pool) or sent on by itself (a redirect, TRYAGAIN). */
int limiter_reply_act(struct limiter_link *k, redisAsyncContext *ac, const redisReply *r,
                      struct limiter_sent *s);

/* hiredis: call <privdata> handed back on <ac> with its reply <r>
 * (borrowed), or NULL when the connection is gone (l->on_reply: the call
 * layer sends with it and never names it). */
void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata);

#endif /* SPOA_LIMITER_REPLY_H */
