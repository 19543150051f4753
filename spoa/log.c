/*
 * log - levelled key=value lines on stderr (see log.h).
 *
 * Each line is formatted into a stack buffer and written with one write(2):
 * lines from several threads never interleave (a pipe keeps writes of up to
 * PIPE_BUF bytes whole, and LOG_LINE_MAX stays below it). Control bytes in
 * the caller's tail are escaped, so a key from the network cannot forge a
 * second line.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define LOG_LINE_MAX 4096

static _Atomic int log_level = CONFIG_LOG_INFO;

static const char *const level_names[CONFIG_LOG_COUNT] = {
	[CONFIG_LOG_ERROR] = "error",
	[CONFIG_LOG_WARN]  = "warn",
	[CONFIG_LOG_INFO]  = "info",
	[CONFIG_LOG_DEBUG] = "debug",
};

/* Lines up to <l> are written from now on. */
void log_set_level(enum config_log_level l)
{
	if ((unsigned)l >= CONFIG_LOG_COUNT)
		l = CONFIG_LOG_DEBUG;
	atomic_store_explicit(&log_level, (int)l, memory_order_relaxed);
}

/* The current level. */
enum config_log_level log_get_level(void)
{
	return (enum config_log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

/* Would a line at level <l> be written? */
bool log_enabled(enum config_log_level l)
{
	return (int)l <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

/* Copy <src>/<len> to <dst>/<cap> escaping control bytes as \xHH; stops
 * before a byte that would not fit. Returns the bytes written. */
static size_t log_escape(char *dst, size_t cap, const char *src, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i;

	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)src[i];

		if (ch >= 0x20 && ch != 0x7f) {
			if (o + 1 > cap)
				break;
			dst[o++] = (char)ch;
		} else {
			if (o + 4 > cap)
				break;
			dst[o++] = '\\';
			dst[o++] = 'x';
			dst[o++] = hex[ch >> 4];
			dst[o++] = hex[ch & 15];
		}
	}
	return o;
}

/* See log.h. Borrows <src>; writes only <dst>. */
const char *log_quote(char *dst, size_t cap, const char *src, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i;

	if (cap < 6) {
		if (cap)
			dst[0] = '\0';
		return dst;
	}
	dst[o++] = '"';
	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)src[i];
		size_t need = (ch < 0x20 || ch == 0x7f) ? 4 : (ch == '"' || ch == '\\') ? 2 : 1;

		/* keep room for the cut mark, the closing quote and the NUL */
		if (o + need + 5 > cap)
			break;
		if (need == 4) {
			dst[o++] = '\\';
			dst[o++] = 'x';
			dst[o++] = hex[ch >> 4];
			dst[o++] = hex[ch & 15];
		} else {
			if (need == 2)
				dst[o++] = '\\';
			dst[o++] = (char)ch;
		}
	}
	if (i < len) {
		memcpy(dst + o, "...", 3);
		o += 3;
	}
	dst[o++] = '"';
	dst[o] = '\0';
	return dst;
}

/* One line "ts=... level=... event=<event> <fmt...>" at level <l>. A line
 * longer than LOG_LINE_MAX is cut and ends with "...". */
void log_event(enum config_log_level l, const char *event, const char *fmt, ...)
{
	char line[LOG_LINE_MAX], tail[LOG_LINE_MAX];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	size_t o, tlen;
	int n;

	if (!log_enabled(l))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
	             "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s",
	             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	             tm.tm_sec, ts.tv_nsec / 1000000L,
	             (unsigned)l < CONFIG_LOG_COUNT ? level_names[l] : "unknown",
	             event ? event : "-");
	if (n < 0)
		return;
	o = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;

	va_start(ap, fmt);
	n = vsnprintf(tail, sizeof(tail), fmt, ap);
	va_end(ap);
	if (n > 0) {
		tlen = (size_t)n < sizeof(tail) ? (size_t)n : sizeof(tail) - 1;
		/* Room for " ", the tail, "..." and "\n". */
		if (o + 1 + 4 < sizeof(line)) {
			size_t room = sizeof(line) - o - 1 - 4, w;

			line[o++] = ' ';
			w = log_escape(line + o, room, tail, tlen);
			o += w;
			if (w < tlen || (size_t)n >= sizeof(tail)) {
				memcpy(line + o, "...", 3);
				o += 3;
			}
		}
	}
	if (o >= sizeof(line))
		o = sizeof(line) - 1;
	line[o++] = '\n';

	for (;;) {
		ssize_t wr = write(STDERR_FILENO, line, o);

		if (wr == -1 && errno == EINTR)
			continue;
		break;
	}
}

/* ------------------------------------------------------------------------ */
/* Rate-limited lines                                                         */
/* ------------------------------------------------------------------------ */

#define LOG_LIMIT_SLOTS 32
#define LOG_LIMIT_US    1000000         /* one line per key per second */

struct log_limit_slot {
	const char *key;                /* static string; NULL = free */
	int64_t last_us;                /* monotonic, when the last line went out */
	unsigned long long suppressed;  /* lines left out since */
};

/* Per thread: each worker keeps its own pace, and no lock is needed. */
static _Thread_local struct log_limit_slot log_slots[LOG_LIMIT_SLOTS];

/* The slot of <key> in this thread's table (a free one taken on first
 * use), or NULL when the table is full. */
static struct log_limit_slot *log_limit_slot(const char *key)
{
	unsigned i;

	for (i = 0; i < LOG_LIMIT_SLOTS; i++) {
		if (!log_slots[i].key) {
			log_slots[i].key = key;
			return &log_slots[i];
		}
		if (log_slots[i].key == key || strcmp(log_slots[i].key, key) == 0)
			return &log_slots[i];
	}
	return NULL;
}

/* See log.h. <key> must be a string with static storage. */
void log_limited(enum config_log_level l, const char *key, const char *event,
                 const char *fmt, ...)
{
	struct log_limit_slot *s;
	struct timespec ts;
	char tail[LOG_LINE_MAX];
	va_list ap;
	int64_t now;

	if (!log_enabled(l))
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	s = log_limit_slot(key);
	if (s && s->last_us && now - s->last_us < LOG_LIMIT_US) {
		s->suppressed++;
		return;
	}
	va_start(ap, fmt);
	if (vsnprintf(tail, sizeof(tail), fmt, ap) < 0)
		tail[0] = '\0';
	va_end(ap);
	log_event(l, event, "%s suppressed=%llu", tail, s ? s->suppressed : 0ULL);
	if (s) {
		s->last_us = now;
		s->suppressed = 0;
	}
}
