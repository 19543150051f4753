/*
 * limiter_call - one decision's call to Redis (struct limiter_call,
 * limiter_int.h): answers that need no Redis (queued, delivered on the
 * next loop iteration), the call pool, sending a call and reading its
 * reply, its deadline, TRYAGAIN parking.
 *
 * Life of a call: limiter_check() (limiter.c) takes one from the pool,
 * arms its deadline and sends it (or queues it for a batch,
 * limiter_batch.c). It is answered exactly once, by whichever comes first:
 * the reply, the deadline, the loss of the connection, or limiter_free().
 * hiredis holds the call as privdata until it hands it back (reply or
 * NULL), so a call answered by its deadline stays out of the pool until
 * then, and its late reply is ignored.
 */
#ifndef SPOA_LIMITER_CALL_H
#define SPOA_LIMITER_CALL_H

#include "limiter_int.h"

/* Queue <d> for <cb>/<arg>, delivered on the next loop iteration (the
 * queue is owned by <l>). Returns 0, or -1 when memory runs out. */
int limiter_defer(struct limiter *l, limiter_cb cb, void *arg, const struct window_decision *d);
/* libev: deliver the answers queued before this iteration (l->kick). */
void limiter_on_kick(struct ev_loop *loop, ev_timer *w, int revents);
/* A call from <l>'s pool, which owns it; NULL when memory runs out. */
struct limiter_call *limiter_call_get(struct limiter *l);
/* Give <c> back to its limiter's pool (hiredis no longer holds it). */
void limiter_call_put(struct limiter_call *c);
/* Answer <c> with <d>, once: later answers of the same call are no-ops. */
void limiter_call_answer(struct limiter_call *c, const struct window_decision *d);
/* Send <c> on link <k> (its key's link when NULL), ASKING first when
 * <asking>; a link not ready yet: <c> waits for it (l->waiting) within its
 * deadline. 0: hiredis holds <c>, or it waits; -1: neither (the caller
 * answers it). */
int limiter_call_send(struct limiter *l, struct limiter_call *c, struct limiter_link *k,
                      bool asking);
/* May a decision for link <k> (NULL: its slot has no primary yet) wait for
 * it: the waiting list has room, and a link can be ready within <l>'s
 * timeout (it is connecting, or its next attempt comes by then)? */
bool limiter_call_may_wait(const struct limiter *l, const struct limiter_link *k);
/* <c>, filled, waits for link <k> (NULL: its key's) from now, its deadline
 * armed. 0, or -1 when the list is full (<c> untouched: the caller answers
 * and recycles it). */
int limiter_call_queue(struct limiter *l, struct limiter_call *c, struct limiter_link *k);
/* l->wake: send the waiting calls whose link is ready now. */
void limiter_wake(struct limiter *l);
/* Answer every waiting call "unavailable" (limiter_free()). */
void limiter_call_unwait_all(struct limiter *l);
/* hiredis: call <privdata> handed back on <ac> with its reply <r>
 * (borrowed), or NULL when the connection is gone. */
void limiter_on_reply(redisAsyncContext *ac, void *r, void *privdata);
/* TRYAGAIN: re-send <c> LIMITER_TRYAGAIN_MS later, its deadline running. */
void limiter_call_park(struct limiter *l, struct limiter_call *c);
/* libev: re-send the parked calls (l->park). */
void limiter_on_park(struct ev_loop *loop, ev_timer *w, int revents);
/* The view window.c reads of <r>; <v> borrows from <r>. */
void limiter_reply_view(const redisReply *r, struct window_reply *v);
/* Answer <c> from its result <view> (borrowed) given on <k> at <now>. */
void limiter_call_finish(struct limiter *l, struct limiter_link *k, struct limiter_call *c,
                         const struct window_reply *view, int64_t now);
/* Answer <c> "unavailable" if it still waits (<defer>: on the next loop
 * iteration) and give it back to the pool. */
void limiter_call_fail(struct limiter *l, struct limiter_call *c, bool defer);
/* <c> waits for its answer from now: count it, arm its deadline. */
void limiter_call_arm(struct limiter *l, struct limiter_call *c);

#endif /* SPOA_LIMITER_CALL_H */
