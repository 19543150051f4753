/*
 * limiter_engine_module - the module engine: RATELIMIT.DECIDE <numkeys>
 * <key>... <arg>..., the script's KEYS and ARGV as they are, answered with
 * the script's reply (module/). Nothing to load: a server without the
 * module answers "ERR unknown command". See limiter_engine.h.
 */
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "limiter_engine.h"
#include "limiter_int.h"

#define LIMITER_MODULE_CMD "RATELIMIT.DECIDE"

/* window.c's "EVALSHA" <sha> becomes RATELIMIT.DECIDE alone: the first
 * word is not sent. */
static void limiter_module_head(const struct limiter_script *sc, bool full, const char **cmd,
                                size_t *cmd_len, const char **head, size_t *head_len, int *skip)
{
	(void)sc;
	(void)full;
	*cmd = "";
	*cmd_len = 0;
	*head = LIMITER_MODULE_CMD;
	*head_len = sizeof(LIMITER_MODULE_CMD) - 1;
	*skip = 1;
}

/* Does <s>/<len> hold <needle>, ASCII case aside? */
static bool limiter_module_has(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle), i;

	for (i = 0; i + n <= len; i++)
		if (strncasecmp(s + i, needle, n) == 0)
			return true;
	return false;
}

/* "ERR unknown command 'RATELIMIT.DECIDE'..." (no module, or one unloaded
 * at runtime), or an ACL that does not let this user run it. */
static bool limiter_module_missing(const struct window_reply *v)
{
	if (v->kind != WINDOW_REPLY_ERROR || !v->str)
		return false;
	if (!limiter_module_has(v->str, v->len, LIMITER_MODULE_CMD))
		return false;
	return limiter_module_has(v->str, v->len, "unknown command") ||
	       (v->len >= 6 && strncmp(v->str, "NOPERM", 6) == 0);
}

const struct limiter_engine limiter_engine_module = {
	.id = LIMITER_ENGINE_MODULE,
	.name = "module",
	.head = limiter_module_head,
	.missing = limiter_module_missing,
};
