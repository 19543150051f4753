/*
 * limiter_verdict - what a decision's Redis reply says, read without
 * acting on it (pure: a struct redisReply in, plain values out; no I/O,
 * no clock, no hiredis call). One call's reply and each call's part of a
 * batch's reply are read here, the same way; limiter_reply.c acts on the
 * verdict.
 */
#ifndef SPOA_LIMITER_VERDICT_H
#define SPOA_LIMITER_VERDICT_H

#include "hiredis_compat.h"

#include "limiter_engine.h"
#include "window.h"

/* What a reply asks of the call it answers. */
enum limiter_verdict {
	LIMITER_VERDICT_RESULT = 0,     /* the engine's result (integers, or its error,
	                                 * window_decide_reply() reads either) */
	LIMITER_VERDICT_LOST,           /* no reply: the connection went after the send */
	LIMITER_VERDICT_REDIRECT,       /* MOVED or ASK: the key's slot is served elsewhere */
	LIMITER_VERDICT_TRYAGAIN,       /* the slot's keys are mid-migration */
	LIMITER_VERDICT_CLUSTERDOWN,    /* the cluster cannot serve the slot now */
	LIMITER_VERDICT_READONLY,       /* the link's Redis is a replica now (failover) */
	LIMITER_VERDICT_MISSING,        /* the engine is not on that server: NOSCRIPT, or
	                                 * RATELIMIT.DECIDE unknown (or not allowed) */
	LIMITER_VERDICT_COUNT
};

/* The verdict of <r> (borrowed; NULL: no reply) to a call sent with the
 * engine <engine>. */
enum limiter_verdict limiter_verdict_of(const redisReply *r, enum limiter_engine_id engine);

/* What call <i> of a batch of <n> calls was answered, in the batch's
 * reply <r> (borrowed; the result borrows from it): its element when <r>
 * is an array of <n>; <r> itself when it is an error (every call gets it)
 * or NULL; else a nil reply, static (not a batch's reply: each call's an
 * error). */
const redisReply *limiter_verdict_element(const redisReply *r, unsigned n, unsigned i);

/* The view window.c reads of <r>: an error's text, or an array's integers
 * (<v> borrows from <r> until hiredis frees it). */
void limiter_verdict_view(const redisReply *r, struct window_reply *v);

#endif /* SPOA_LIMITER_VERDICT_H */
