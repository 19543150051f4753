/*
 * limiter_engine_script - the script engine: EVALSHA of
 * lua/sliding_window.lua by its SHA, EVAL with the whole source after
 * NOSCRIPT. Its part of a link's setup is SCRIPT LOAD; it owns the source
 * and the SHA (l->script) and, per link, whether a load is in flight. See
 * limiter_engine.h.
 */
#include <string.h>

#include <ev.h>
#include "hiredis_compat.h"
#include <hiredis/async.h>

#include "limiter_engine.h"
#include "limiter_health.h"
#include "limiter_int.h"
#include "limiter_link.h"
#include "log.h"

/* "EVALSHA" <sha>, or "EVAL" <source> when <full>; both borrowed from <sc>. */
static void limiter_script_head(const struct limiter_script *sc, bool full, const char **cmd,
                                size_t *cmd_len, const char **head, size_t *head_len, int *skip)
{
	*skip = 0;
	if (full) {
		*cmd = "EVAL";
		*cmd_len = 4;
		*head = sc->text;
		*head_len = sc->len;
	} else {
		*cmd = "EVALSHA";
		*cmd_len = 7;
		*head = sc->sha;
		*head_len = strlen(sc->sha);
	}
}

/* Borrows <text> until the next call or limiter_free(). */
bool limiter_script_set(struct limiter_script *sc, const char *text, size_t len)
{
	bool changed = len != sc->len || !sc->text || memcmp(text, sc->text, len) != 0;

	sc->text = text;
	sc->len = len;
	return changed;
}

/* The SHA <sha>/<len> SCRIPT LOAD answered, copied. */
int limiter_script_set_sha(struct limiter_script *sc, const char *sha, size_t len)
{
	if (len == 0 || len >= sizeof(sc->sha))
		return -1;
	memcpy(sc->sha, sha, len);
	sc->sha[len] = '\0';
	return 0;
}

/* SCRIPT LOAD answered on <ac>: at setup this is the script's part done;
 * later (after a NOSCRIPT, or a reload with a new script) it refreshes the
 * SHA. A failure at setup drops the link (retried with backoff). */
static void limiter_script_on_load(redisAsyncContext *ac, void *r, void *privdata)
{
	struct limiter_link *k = ac->data;
	struct limiter *l = k->l;
	const redisReply *reply = r;

	(void)privdata;
	if (ac != k->ac || !reply)
		return;
	limiter_link_heard(k, limiter_now_us());
	k->script.loading = false;
	if (reply->type != REDIS_REPLY_STRING ||
	    limiter_script_set_sha(&l->script, reply->str, reply->len) == -1) {
		if (k->state != LIMITER_ST_CONNECTING || limiter_link_count_failure(k))
			log_warn("redis_script_load_failed", "addr=%s reply=\"%.*s\"", k->addr,
			         reply->type == REDIS_REPLY_ERROR ? (int)reply->len : 0,
			         reply->type == REDIS_REPLY_ERROR ? reply->str : "");
		limiter_count_error(l, METRICS_REDIS_ERR_SCRIPT);
		limiter_note_error(l, k->addr, "SCRIPT LOAD failed");
		if (k->state == LIMITER_ST_CONNECTING)
			limiter_link_drop(k, "script load failed");
		return;
	}
	limiter_link_setup_done(k);
}

/* Queue SCRIPT LOAD on <k>'s connection. */
static void limiter_script_load(struct limiter_link *k)
{
	const struct limiter_script *sc = &k->l->script;
	const char *argv[3] = { "SCRIPT", "LOAD", sc->text };
	size_t argvlen[3] = { 6, 4, sc->len };

	if (redisAsyncCommandArgv(k->ac, limiter_script_on_load, NULL, 3, argv, argvlen) == REDIS_OK)
		k->script.loading = true;
}

/* The script's part of <k>'s setup (or of a reload): SCRIPT LOAD. */
static void limiter_script_setup(struct limiter_link *k)
{
	limiter_script_load(k);
}

/* NOSCRIPT on <ac> of <k>: Redis lost its script cache (restarted, failed
 * over, SCRIPT FLUSH): load it there again, once, so later calls find it;
 * the caller re-sends its call as EVAL (true). */
static bool limiter_script_gone(struct limiter_link *k, const redisAsyncContext *ac)
{
	if (ac == k->ac && !k->script.loading && k->state == LIMITER_ST_READY)
		limiter_script_load(k);
	return true;
}

/* A new target for <k>: no load in flight. */
static void limiter_script_link_reset(struct limiter_link *k)
{
	k->script.loading = false;
}

const struct limiter_engine limiter_engine_script = {
	.id = LIMITER_ENGINE_SCRIPT,
	.name = "script",
	.head = limiter_script_head,
	.setup = limiter_script_setup,
	.gone = limiter_script_gone,
	.link_reset = limiter_script_link_reset,
};
