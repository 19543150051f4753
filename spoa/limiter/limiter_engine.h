/*
 * limiter_engine - how a link asks Redis for a decision: the request of
 * one decision or of a batch, and what the engine does when a reply says
 * it is not on that server (limiter_verdict.c reads that reply, NOSCRIPT
 * or an unknown RATELIMIT.DECIDE, by the engine's id). Both engines take exactly the same KEYS and ARGV (window.c
 * lays them out) and give exactly the same reply (window.c reads it):
 *   script  EVALSHA <sha> (EVAL <source> after NOSCRIPT) of
 *           lua/sliding_window.lua: limiter_engine_script.c
 *   module  RATELIMIT.DECIDE of the Redis module (module/):
 *           limiter_engine_module.c
 * A link's engine (k->engine) is set at every (re)connect by the engines'
 * own part of the setup (load, probe: setup()); a call and a batch remember
 * the engine they were sent with, and a "missing" verdict goes to its
 * gone(). The engines sit above the link (they queue their setup on it and
 * report through limiter_link_setup_done()); the link reaches them only
 * through l->engines and k->engine, never by name.
 */
#ifndef SPOA_LIMITER_ENGINE_H
#define SPOA_LIMITER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "window.h"

struct limiter_link;
struct limiter_script;
struct redisAsyncContext;

enum limiter_engine_id {
	LIMITER_ENGINE_SCRIPT = 0,
	LIMITER_ENGINE_MODULE,
	LIMITER_ENGINE_COUNT
};

struct limiter_engine {
	enum limiter_engine_id id;
	const char *name;               /* "script", "module": logs, the metric */
	/* The first two words of a request, where window.c lays out
	 * "EVALSHA" <sha> (window_build_args(), window_build_batch()), for
	 * the script's SHA and source <sc> (borrowed); <full>: the source
	 * instead of the SHA (after NOSCRIPT). <*skip> of them are not sent. */
	void (*head)(const struct limiter_script *sc, bool full, const char **cmd, size_t *cmd_len,
	             const char **head, size_t *head_len, int *skip);
	/* The engine's part of link <k>'s setup on its new connection (the
	 * script: SCRIPT LOAD; the module: COMMAND INFO + RATELIMIT.VERSION,
	 * whose verdict under redis-engine sets k->engine), or again on a
	 * ready link (a reload). It tells limiter_link_setup_done() when its
	 * part is through, or drops the link. */
	void (*setup)(struct limiter_link *k);
	/* A call sent with this engine on <k> was answered "missing" on <ac>:
	 * the engine's remedy (reload the script; the module gone: the script
	 * from now on, or the link dropped under redis-engine module). True
	 * when the call may be re-sent with the script (EVAL). */
	bool (*gone)(struct limiter_link *k, const struct redisAsyncContext *ac);
	/* A link struct gets a new target: forget what the engine kept of the
	 * last one (k->script, k->module). */
	void (*link_reset)(struct limiter_link *k);
};

extern const struct limiter_engine limiter_engine_script;
extern const struct limiter_engine limiter_engine_module;

/* Make the request window.c laid out in <argv>/<argvlen> (one decision or
 * a batch) engine <e>'s, with the script <sc> (<full> as in head()). The
 * words to send start at the index returned. */
static inline int limiter_engine_apply(const struct limiter_engine *e,
                                       const struct limiter_script *sc, bool full,
                                       const char **argv, size_t *argvlen)
{
	int skip;

	e->head(sc, full, &argv[0], &argvlen[0], &argv[1], &argvlen[1], &skip);
	return skip;
}

/* The script engine's state (struct limiter_script, l->script, owned by
 * limiter_engine_script.c): the source <text>/<len> (borrowed from the
 * settings until the next one), true when it differs from the last; the
 * SHA a SCRIPT LOAD answered, 0 or -1 when it cannot be one. */
bool limiter_script_set(struct limiter_script *sc, const char *text, size_t len);
int limiter_script_set_sha(struct limiter_script *sc, const char *sha, size_t len);

#endif /* SPOA_LIMITER_ENGINE_H */
