/*
 * limiter_engine_script - the script engine: EVALSHA of
 * lua/sliding_window.lua by its SHA (SCRIPT LOAD at setup), EVAL with the
 * whole source after NOSCRIPT. See limiter_engine.h.
 */
#include <string.h>

#include "limiter_engine.h"
#include "limiter_int.h"

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

const struct limiter_engine limiter_engine_script = {
	.id = LIMITER_ENGINE_SCRIPT,
	.name = "script",
	.head = limiter_script_head,
	.missing = window_reply_is_noscript,
};
