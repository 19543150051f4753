/*
 * resp_cmd - a Redis command written as RESP into the caller's buffer (see
 * resp_cmd.h).
 */
#include <string.h>

#include "resp_cmd.h"

/* Digits of <v> in decimal. */
static size_t resp_cmd_digits(size_t v)
{
	size_t n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* See resp_cmd.h. */
size_t resp_cmd_size(size_t argc, const size_t *argvlen)
{
	size_t i, n = 1 + resp_cmd_digits(argc) + 2;

	for (i = 0; i < argc; i++) {
		if (argvlen[i] > RESP_CMD_MAX)
			return 0;
		n += 1 + resp_cmd_digits(argvlen[i]) + 2 + argvlen[i] + 2;
		if (n > RESP_CMD_MAX)
			return 0;
	}
	return n;
}

/* Write <mark> and the decimal <v> then CRLF at <dst> + <*at>, if that fits
 * in <cap>. Returns 0, or -1 (nothing written). The digits go straight to
 * their place, last first: most lengths here have one to three digits, and
 * this runs for every argument of every decision. */
static int resp_cmd_put_head(char *dst, size_t cap, size_t *at, char mark, size_t v)
{
	size_t n = resp_cmd_digits(v), i;
	char *p;

	if (cap - *at < 1 + n + 2)
		return -1;
	p = dst + *at;
	p[0] = mark;
	for (i = n; i > 0; i--) {
		p[i] = (char)('0' + v % 10);
		v /= 10;
	}
	p[n + 1] = '\r';
	p[n + 2] = '\n';
	*at += 1 + n + 2;
	return 0;
}

/* See resp_cmd.h: bounded at every step, so the size need not be known
 * first (the limiter's buffer is almost always large enough). */
long resp_cmd_write(char *dst, size_t cap, size_t argc, const char *const *argv,
                    const size_t *argvlen)
{
	size_t i, at = 0;

	if (cap > RESP_CMD_MAX)
		cap = RESP_CMD_MAX;
	if (resp_cmd_put_head(dst, cap, &at, '*', argc) == -1)
		return -1;
	for (i = 0; i < argc; i++) {
		size_t len = argvlen[i];

		if (resp_cmd_put_head(dst, cap, &at, '$', len) == -1 || len > cap - at ||
		    cap - at - len < 2)
			return -1;
		if (len)
			memcpy(dst + at, argv[i], len);
		at += len;
		dst[at++] = '\r';
		dst[at++] = '\n';
	}
	return (long)at;
}
