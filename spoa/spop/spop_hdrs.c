/*
 * spop_hdrs - HAProxy's binary header list (req.hdrs_bin / res.hdrs_bin),
 * as a message argument carries it: for each header <str:name><str:value>,
 * then two empty strings; a string is a varint length (SPOP's encoding)
 * and its bytes. Pure: no I/O, no allocation.
 */
#include <strings.h>

#include "spop.h"

/* One string of the list at <*p> (before <end>) into <s>, <*p> past it.
 * Borrows the bytes. 0 or -1 (truncated, or a length past the end). */
static int hdrs_get_str(const unsigned char **p, const unsigned char *end, struct spop_str *s)
{
	uint64_t n;
	int k = spop_decode_varint(*p, (size_t)(end - *p), &n);

	if (k < 0 || n > (uint64_t)(end - *p - k))
		return -1;
	s->ptr = (const char *)*p + k;
	s->len = (size_t)n;
	*p += (size_t)k + n;
	return 0;
}

/* See spop.h. Borrows <hdrs>; <value> points into it. */
int spop_hdrs_find(const unsigned char *hdrs, size_t len, const char *name, size_t name_len,
                   struct spop_str *value)
{
	const unsigned char *p, *end;
	struct spop_str n, v;
	int found = 0;

	if (!hdrs || name_len == 0)
		return -1;
	p = hdrs;
	end = hdrs + len;
	/* the whole list is read, so that a truncated one is refused even
	 * when the header came first (a list cut short may have lost more) */
	for (;;) {
		if (hdrs_get_str(&p, end, &n) == -1 || hdrs_get_str(&p, end, &v) == -1)
			return -1;
		if (n.len == 0)
			return v.len == 0 && p == end ? found : -1;
		if (!found && n.len == name_len && strncasecmp(n.ptr, name, name_len) == 0) {
			*value = v;
			found = 1;
		}
	}
}
