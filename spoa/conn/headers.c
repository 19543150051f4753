/*
 * headers - RateLimit-Policy / RateLimit field values (see headers.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "decimal.h"
#include "headers.h"

int64_t headers_window_seconds(uint64_t window_ms)
{
	uint64_t s = window_ms / 1000 + (window_ms % 1000 != 0);

	if (s < 1)
		s = 1;
	if (s > INT64_MAX)
		s = INT64_MAX;
	return (int64_t)s;
}

/* Append the item name of window <idx> (quoted) at <dst>+<*len>.
 * Returns 0, or -1 when it does not fit. */
static int headers_put_name(const char *name, size_t name_len,
                            const struct window_limit *lim, unsigned nwin,
                            unsigned idx, char *dst, size_t cap, size_t *len)
{
	char ws[32];
	int n;

	if (*len + name_len + 2 >= cap)
		return -1;
	dst[(*len)++] = '"';
	memcpy(dst + *len, name, name_len);
	*len += name_len;
	if (nwin > 1) {
		/* a quota by its period ("api-month"), not its nominal length */
		if (lim[idx].cal)
			n = snprintf(ws, sizeof(ws), "%s", window_cal_name((enum window_cal)lim[idx].cal));
		else
			n = window_format_ms(lim[idx].window_ms, ws, sizeof(ws));
		if (n < 0 || *len + 1 + (size_t)n + 1 >= cap)
			return -1;
		dst[(*len)++] = '-';
		memcpy(dst + *len, ws, (size_t)n);
		*len += (size_t)n;
	}
	dst[(*len)++] = '"';
	dst[*len] = '\0';
	return 0;
}

/* Append ";<k1>=<v1>;<k2>=<v2>" (one-letter keys, v1 and v2 >= 0) at
 * <dst>+<*len>. Returns 0, or -1 when it does not fit (NUL included). */
static int headers_put_params(char *dst, size_t cap, size_t *len,
                              char k1, int64_t v1, char k2, int64_t v2)
{
	char d1[DECIMAL_U64_LEN], d2[DECIMAL_U64_LEN];
	size_t n1, n2;

	if (v1 < 0 || v2 < 0)
		return -1;
	n1 = decimal_format((uint64_t)v1, d1);
	n2 = decimal_format((uint64_t)v2, d2);
	if (6 + n1 + n2 >= cap - *len)
		return -1;
	dst[(*len)++] = ';';
	dst[(*len)++] = k1;
	dst[(*len)++] = '=';
	memcpy(dst + *len, d1, n1);
	*len += n1;
	dst[(*len)++] = ';';
	dst[(*len)++] = k2;
	dst[(*len)++] = '=';
	memcpy(dst + *len, d2, n2);
	*len += n2;
	dst[*len] = '\0';
	return 0;
}

int headers_format_policy(const char *name, size_t name_len,
                          const struct window_limit *lim, unsigned nwin,
                          char *dst, size_t cap)
{
	size_t len = 0;
	unsigned i;

	if (!name_len || !nwin || nwin > WINDOW_MAX_WINDOWS || cap == 0)
		return -1;
	for (i = 0; i < nwin; i++) {
		if (i > 0) {
			if (len + 2 >= cap)
				return -1;
			dst[len++] = ',';
			dst[len++] = ' ';
		}
		if (lim[i].limit > INT64_MAX ||
		    headers_put_name(name, name_len, lim, nwin, i, dst, cap, &len) == -1 ||
		    headers_put_params(dst, cap, &len, 'q', (int64_t)lim[i].limit,
		                       'w', headers_window_seconds(lim[i].window_ms)) == -1)
			return -1;
	}
	return (int)len;
}

int headers_format_ratelimit(const char *name, size_t name_len,
                             const struct window_limit *lim, unsigned nwin,
                             unsigned idx, int64_t remaining, int64_t reset_s,
                             char *dst, size_t cap)
{
	size_t len = 0;

	if (!name_len || idx >= nwin || nwin > WINDOW_MAX_WINDOWS || cap == 0 ||
	    remaining < 0 || reset_s < 0)
		return -1;
	if (headers_put_name(name, name_len, lim, nwin, idx, dst, cap, &len) == -1 ||
	    headers_put_params(dst, cap, &len, 'r', remaining, 't', reset_s) == -1)
		return -1;
	return (int)len;
}

/* Append the pool's item name ("pool-<name>", quoted) at <dst>+<*len>.
 * Returns 0, or -1 when it does not fit. */
static int headers_put_pool_name(const struct window_pool *pool, char *dst, size_t cap,
                                 size_t *len)
{
	if (!pool->name_len || *len + 5 + pool->name_len + 2 >= cap)
		return -1;
	dst[(*len)++] = '"';
	memcpy(dst + *len, "pool-", 5);
	*len += 5;
	memcpy(dst + *len, pool->name, pool->name_len);
	*len += pool->name_len;
	dst[(*len)++] = '"';
	dst[*len] = '\0';
	return 0;
}

int headers_append_pool_policy(const struct window_pool *pool, char *dst, size_t cap, size_t len)
{
	if (cap == 0 || len + 2 >= cap || pool->limit > INT64_MAX)
		return -1;
	dst[len++] = ',';
	dst[len++] = ' ';
	if (headers_put_pool_name(pool, dst, cap, &len) == -1 ||
	    headers_put_params(dst, cap, &len, 'q', (int64_t)pool->limit,
	                       'w', headers_window_seconds(pool->window_ms)) == -1)
		return -1;
	return (int)len;
}

int headers_format_pool_ratelimit(const struct window_pool *pool, int64_t remaining,
                                  int64_t reset_s, char *dst, size_t cap)
{
	size_t len = 0;

	if (cap == 0 || remaining < 0 || reset_s < 0)
		return -1;
	if (headers_put_pool_name(pool, dst, cap, &len) == -1 ||
	    headers_put_params(dst, cap, &len, 'r', remaining, 't', reset_s) == -1)
		return -1;
	return (int)len;
}

unsigned headers_parse_vars(const char *s, size_t len)
{
	static const char *const names[HEADERS_VAR_COUNT] = {
		[HEADERS_VAR_STATUS] = "status",           [HEADERS_VAR_LIMIT] = "limit",
		[HEADERS_VAR_REMAINING] = "remaining",     [HEADERS_VAR_RESET] = "reset",
		[HEADERS_VAR_RETRY_AFTER] = "retry_after", [HEADERS_VAR_REASON] = "reason",
		[HEADERS_VAR_WINDOW] = "window",           [HEADERS_VAR_POLICY_HDR] = "policy_hdr",
		[HEADERS_VAR_RATELIMIT_HDR] = "ratelimit_hdr",
	};
	unsigned mask = HEADERS_VAR_BIT(HEADERS_VAR_STATUS);
	size_t i = 0, start, n;
	unsigned v;

	while (i < len) {
		while (i < len && (s[i] == ' ' || s[i] == ',' || s[i] == '+' || s[i] == '|'))
			i++;
		start = i;
		while (i < len && s[i] != ' ' && s[i] != ',' && s[i] != '+' && s[i] != '|')
			i++;
		n = i - start;
		if (n == 4 && memcmp(s + start, "ietf", 4) == 0) {
			mask |= HEADERS_VAR_BIT(HEADERS_VAR_RETRY_AFTER) | HEADERS_VAR_BIT(HEADERS_VAR_REASON) |
			        HEADERS_VAR_BIT(HEADERS_VAR_POLICY_HDR) |
			        HEADERS_VAR_BIT(HEADERS_VAR_RATELIMIT_HDR);
			continue;
		}
		for (v = 0; v < HEADERS_VAR_COUNT; v++)
			if (n && strlen(names[v]) == n && memcmp(s + start, names[v], n) == 0)
				mask |= HEADERS_VAR_BIT(v);
	}
	return mask;
}
