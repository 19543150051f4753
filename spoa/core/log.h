/*
 * log - levelled, one line per event, key=value, on stderr.
 *
 *   ts=2026-12-02T14:00:00.123Z level=info event=redis_connected addr=127.0.0.1:6379
 *
 * Callers pass the event name and a printf-style tail of key=value pairs.
 * Never log secrets (passwords, tokens): callers redact before.
 * Thread-safe: each line is written with one write(2).
 */
#ifndef SPOA_LOG_H
#define SPOA_LOG_H

#include <stdbool.h>

/* The levels (the config's log-level directive names them). */
enum config_log_level {
	CONFIG_LOG_ERROR = 0,
	CONFIG_LOG_WARN,
	CONFIG_LOG_INFO,
	CONFIG_LOG_DEBUG,
	CONFIG_LOG_COUNT
};

void log_set_level(enum config_log_level l);
enum config_log_level log_get_level(void);
bool log_enabled(enum config_log_level l);

__attribute__((format(printf, 3, 4)))
void log_event(enum config_log_level l, const char *event, const char *fmt, ...);

/*
 * Like log_event, at most one line a second per <key> (a string with static
 * storage, e.g. the event name or a reason) and thread; the lines left out
 * are counted and the next line says "suppressed=N". For states that
 * refuse traffic: an outage logs a few lines a second, not one per request.
 */
__attribute__((format(printf, 4, 5)))
void log_limited(enum config_log_level l, const char *key, const char *event,
                 const char *fmt, ...);

/* Bytes log_escape_text() needs for <n> input bytes: each may become \xHH,
 * plus room kept for a "..." cut mark and the NUL. */
#define LOG_ESCAPED_MAX(n) (4 * (n) + 4)

/* Bytes log_quote() needs for <n> input bytes: log_escape_text()'s and the
 * quotes. */
#define LOG_QUOTED_MAX(n) (LOG_ESCAPED_MAX(n) + 2)

/*
 * The one escaping of a string that did not come from this program (an
 * account, a policy name read from Redis, an SPOP engine-id, who set an
 * override and why) for a line a person or a parser reads: the agent's
 * log values (log_quote()) and ctl's text output. '\\' and '"' get a
 * backslash; control bytes (below 0x20, 0x7f), bytes that are not valid
 * UTF-8, and the characters that break or reorder a line (C1 controls
 * U+0080..U+009F, U+2028, U+2029, the bidirectional marks and overrides
 * U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) become \xHH, one per
 * byte; every other byte, valid UTF-8 included, stays. So the output is
 * printable and one line, and decodes back to exactly <src> (no two
 * inputs give one output). What does not fit in <dst>/<cap> is cut before
 * a whole escape or character and marked "..."; <dst> is the caller's and
 * always NUL-terminated (cap >= 4, else ""). Returns <dst>, for "%s".
 */
const char *log_escape_text(char *dst, size_t cap, const char *src, size_t len);

/*
 * The one way a string from a peer (an SPOP engine-id, a DISCONNECT message,
 * an account key) enters a log line: <src>/<len> written into <dst>/<cap>
 * as a quoted value escaped by log_escape_text(), so nothing in it can end
 * the value and forge key=value pairs or a line. What does not fit is cut
 * and marked "..." inside the quotes. <dst> is the caller's and always
 * NUL-terminated (cap >= 6, else ""). Returns <dst>, for use as a "%s"
 * argument.
 */
const char *log_quote(char *dst, size_t cap, const char *src, size_t len);

#define log_error(ev, ...) log_event(CONFIG_LOG_ERROR, ev, __VA_ARGS__)
#define log_warn(ev, ...)  log_event(CONFIG_LOG_WARN, ev, __VA_ARGS__)
#define log_info(ev, ...)  log_event(CONFIG_LOG_INFO, ev, __VA_ARGS__)
#define log_debug(ev, ...) do { if (log_enabled(CONFIG_LOG_DEBUG)) log_event(CONFIG_LOG_DEBUG, ev, __VA_ARGS__); } while (0)

#endif /* SPOA_LOG_H */
