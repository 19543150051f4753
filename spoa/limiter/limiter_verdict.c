/*
 * limiter_verdict - what a decision's Redis reply says, pure. See
 * limiter_verdict.h.
 */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "cluster.h"
#include "limiter_verdict.h"

#define LIMITER_VERDICT_MODULE_CMD "RATELIMIT.DECIDE"

/* A batch's reply that is not one: each call reads it as nothing (an
 * error each, as window_decide_reply() says of any reply it cannot read). */
static const redisReply limiter_verdict_nil = { .type = REDIS_REPLY_NIL };

/* Does <s>/<len> hold <needle>, ASCII case aside? */
static bool limiter_verdict_has(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle), i;

	for (i = 0; i + n <= len; i++)
		if (strncasecmp(s + i, needle, n) == 0)
			return true;
	return false;
}

/* "ERR unknown command 'RATELIMIT.DECIDE'..." (no module, or one unloaded
 * at runtime), or an ACL that does not let this user run it. */
static bool limiter_verdict_module_missing(const struct window_reply *v)
{
	if (v->kind != WINDOW_REPLY_ERROR || !v->str)
		return false;
	if (!limiter_verdict_has(v->str, v->len, LIMITER_VERDICT_MODULE_CMD))
		return false;
	return limiter_verdict_has(v->str, v->len, "unknown command") ||
	       (v->len >= 6 && strncmp(v->str, "NOPERM", 6) == 0);
}

/* See limiter_verdict.h. A result is told apart first: it is what nearly
 * every reply is. */
enum limiter_verdict limiter_verdict_of(const redisReply *r, enum limiter_engine_id engine)
{
	struct window_reply v;
	bool missing;

	if (!r)
		return LIMITER_VERDICT_LOST;
	if (r->type != REDIS_REPLY_ERROR || !r->str)
		return LIMITER_VERDICT_RESULT;
	switch (cluster_classify_error(r->str, r->len)) {
	case CLUSTER_REPLY_MOVED:
	case CLUSTER_REPLY_ASK:
		return LIMITER_VERDICT_REDIRECT;
	case CLUSTER_REPLY_TRYAGAIN:
		return LIMITER_VERDICT_TRYAGAIN;
	case CLUSTER_REPLY_CLUSTERDOWN:
		return LIMITER_VERDICT_CLUSTERDOWN;
	case CLUSTER_REPLY_READONLY:
		return LIMITER_VERDICT_READONLY;
	default:
		break;
	}
	/* each engine's own "not here": NOSCRIPT says nothing of the module */
	limiter_verdict_view(r, &v);
	missing = engine == LIMITER_ENGINE_MODULE ? limiter_verdict_module_missing(&v) :
	          window_reply_is_noscript(&v);
	return missing ? LIMITER_VERDICT_MISSING : LIMITER_VERDICT_RESULT;
}

/* See limiter_verdict.h. */
const redisReply *limiter_verdict_element(const redisReply *r, unsigned n, unsigned i)
{
	if (!r || r->type == REDIS_REPLY_ERROR)
		return r;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == n && r->element && i < n && r->element[i])
		return r->element[i];
	return &limiter_verdict_nil;
}

/* See limiter_verdict.h. */
void limiter_verdict_view(const redisReply *r, struct window_reply *v)
{
	size_t i;

	memset(v, 0, sizeof(*v));
	if (!r)
		return;
	if (r->type == REDIS_REPLY_ERROR && r->str) {
		v->kind = WINDOW_REPLY_ERROR;
		v->str = r->str;
		v->len = r->len;
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || (r->elements && !r->element))
		return;
	for (i = 0; i < r->elements; i++) {
		if (!r->element[i] || r->element[i]->type != REDIS_REPLY_INTEGER)
			return;
		if (i < WINDOW_REPLY_INTS)
			v->v[i] = r->element[i]->integer;
	}
	v->kind = WINDOW_REPLY_INTEGERS;
	v->n = r->elements;
}
