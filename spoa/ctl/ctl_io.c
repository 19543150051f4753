/*
 * ctl_io - what every ctl command uses (ctl_int.h): a Redis call on its
 * key's node, a JSON string on stdout.
 */
#include <stdio.h>

#include "hiredis_compat.h"

#include "ctl_int.h"
#include "redis_sync.h"

/* See ctl_int.h: the caller frees the reply. */
redisReply *ctl_cmd(struct ctl *x, const char *key, size_t keylen, int argc,
                    const char **argv, const size_t *len)
{
	redisReply *r = redis_sync_command(x->rs, key, keylen, argc, argv, len, x->err,
	                                   sizeof(x->err));

	if (r && r->type == REDIS_REPLY_ERROR) {
		snprintf(x->err, sizeof(x->err), "%s: %s", argv[0], r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

/* See ctl_int.h. */
void ctl_json_str(FILE *f, const char *s, size_t len)
{
	size_t i;

	fputc('"', f);
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}
