/*
 * limiter_engine_script - the script engine: EVALSHA of
 * lua/sliding_window.lua by its SHA (SCRIPT LOAD at setup), EVAL with the
 * whole source after NOSCRIPT. See limiter_engine.h.
 */
#include <string.h>

#include "limiter_engine.h"
#include "limiter_int.h"

/* "EVALSHA" <sha>, or "EVAL" <source> when <full>; both borrowed from <l>. */
static void limiter_script_head(const struct limiter *l, bool full, const char **cmd,
                                size_t *cmd_len, const char **head, size_t *head_len, int *skip)
{
	*skip = 0;
	if (full) {
		*cmd = "EVAL";
		*cmd_len = 4;
		*head = l->script;
		*head_len = l->script_len;
	} else {
		*cmd = "EVALSHA";
		*cmd_len = 7;
		*head = l->sha;
		*head_len = strlen(l->sha);
	}
}

const struct limiter_engine limiter_engine_script = {
	.id = LIMITER_ENGINE_SCRIPT,
	.name = "script",
	.head = limiter_script_head,
	.missing = window_reply_is_noscript,
};
