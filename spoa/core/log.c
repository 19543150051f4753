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

/* Bytes of the character at <s> (<len> bytes left, s[0] >= 0x80) when it
 * is valid UTF-8 and printable on one line, else 0 (see log.h). */
static size_t log_utf8_printable(const unsigned char *s, size_t len)
{
	uint32_t cp;
	size_t n, i;

	if (s[0] < 0xc2 || s[0] > 0xf4)     /* a continuation, overlong, past U+10FFFF */
		return 0;
	n = s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
	if (len < n)
		return 0;
	cp = s[0] & (0x7fu >> n);
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	/* C1 controls (a terminal may act on them), the line and paragraph
	 * separators, and the marks that make a line show in another order */
	if (cp < 0xa0 || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
	    (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
		return 0;
	return n;
}

/* See log.h. Borrows <src>; writes only <dst>. */
const char *log_escape_text(char *dst, size_t cap, const char *src, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)src;
	size_t o = 0, i = 0;

	if (cap < 4) {
		if (cap)
			dst[0] = '\0';
		return dst;
	}
	while (i < len) {
		unsigned char ch = u[i];
		size_t n = ch >= 0x80 ? log_utf8_printable(u + i, len - i) : 0;
		size_t need = n ? n : (ch < 0x20 || ch >= 0x7f) ? 4 : (ch == '"' || ch == '\\') ? 2 : 1;

		/* keep room for the cut mark and the NUL */
		if (o + need + 4 > cap)
			break;
		if (n) {
			memcpy(dst + o, u + i, n);
			o += n;
			i += n;
			continue;
		}
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
		i++;
	}
	if (i < len) {
		memcpy(dst + o, "...", 3);
		o += 3;
	}
	dst[o] = '\0';
	return dst;
}

/* See log.h. Borrows <src>; writes only <dst>. */
const char *log_quote(char *dst, size_t cap, const char *src, size_t len)
{
	size_t o;

	if (cap < 6) {
		if (cap)
			dst[0] = '\0';
		return dst;
	}
	dst[0] = '"';
	log_escape_text(dst + 1, cap - 2, src, len);
	o = 1 + strlen(dst + 1);
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
