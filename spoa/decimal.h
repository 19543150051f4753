/*
 * decimal - the one parser of unsigned decimal numbers in the text the
 * agent reads: the config file, Redis URLs, cluster redirects, a
 * sentinel's answer, /proc. Digits only: no sign, no blanks, no base
 * prefix, no overflow. No I/O.
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

#endif /* SPOA_DECIMAL_H */
