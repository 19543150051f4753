/*
 * decimal - the one parser of unsigned decimal numbers in the text the
 * agent reads: the config file, Redis URLs, cluster redirects, a
 * sentinel's answer, /proc. Digits only: no sign, no blanks, no base
 * prefix, no overflow. And the one writer of them the hot path uses
 * (decimal_format). No I/O.
 */
#ifndef SPOA_DECIMAL_H
#define SPOA_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

/* Parse <s>/<len> into <*out> if it is at most <max> (<*out> is left alone
 * otherwise). Returns 0, -1 when it is not a number, -2 when it is above
 * <max>. */
static inline int decimal_parse(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v > UINT64_MAX / 10 || (v == UINT64_MAX / 10 && d > UINT64_MAX % 10))
			return -2;
		v = v * 10 + d;
	}
	if (v > max)
		return -2;
	*out = v;
	return 0;
}

/* Room decimal_format() needs: UINT64_MAX has 20 digits. */
#define DECIMAL_U64_LEN 20

/* Write the decimal text of <v> at <dst> (DECIMAL_U64_LEN bytes of room, no
 * NUL). Returns its length. By hand, not snprintf: the ACK's header values
 * and the Redis arguments format several numbers per decision, and
 * snprintf was a sixth of the agent's instructions per decision. */
static inline size_t decimal_format(uint64_t v, char *dst)
{
	char tmp[DECIMAL_U64_LEN];
	size_t n = sizeof(tmp), len;

	do {
		tmp[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	len = sizeof(tmp) - n;
	for (n = 0; n < len; n++)
		dst[n] = tmp[sizeof(tmp) - len + n];
	return len;
}

#endif /* SPOA_DECIMAL_H */
