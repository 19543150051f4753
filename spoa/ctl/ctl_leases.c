/*
 * ctl_leases - an account's in-flight leases (inflight=) for `ctl show`,
 * and reset's note about them. Read at the leases key's own node's clock,
 * as its decisions count them: a lease runs while its end is after now.
 * reset never deletes them: each is a request still running, and without
 * it the account could run more than inflight= at once.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"

#include "ctl_int.h"
#include "redis_sync.h"

/* The running leases of x->a.account under x->p into <l>. 0, or -1 with
 * x->err. */
int ctl_leases_read(struct ctl *x, struct ctl_leases *l)
{
	struct window_args a;
	char from[24];
	const char *cnt[4] = { "ZCOUNT", NULL, from, "+inf" };
	const char *first[7] = { "ZRANGEBYSCORE", NULL, from, "+inf", "WITHSCORES", "LIMIT", "0" };
	const char *one[8];
	size_t len[8];
	redisReply *r;
	int i;

	memset(l, 0, sizeof(*l));
	l->limit = x->p->inflight;
	/* the one builder of the key: a release's (its lease id unused) */
	if (window_build_release(x->p, x->a.account, strlen(x->a.account), "0", &a) == -1 ||
	    a.argvlen[3] >= sizeof(l->key)) {
		snprintf(x->err, sizeof(x->err), "account '%s' makes no leases key", x->a.account);
		return -1;
	}
	memcpy(l->key, a.argv[3], a.argvlen[3]);
	l->len = a.argvlen[3];
	l->now_us = redis_sync_time_us(x->rs, l->key, l->len, x->err, sizeof(x->err));
	if (l->now_us < 0)
		return -1;
	/* (exclusive: a lease that ends exactly now has ended) */
	snprintf(from, sizeof(from), "(%" PRId64, l->now_us);
	cnt[1] = l->key;
	for (i = 0; i < 4; i++)
		len[i] = strlen(cnt[i]);
	r = ctl_cmd(x, l->key, l->len, 4, cnt, len);
	if (!r)
		return -1;
	l->running = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
	freeReplyObject(r);
	memcpy(one, first, sizeof(first));
	one[1] = l->key;
	one[7] = "1";
	for (i = 0; i < 8; i++)
		len[i] = strlen(one[i]);
	r = ctl_cmd(x, l->key, l->len, 8, one, len);
	if (!r)
		return -1;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->str)
		l->next_end_us = strtoll(r->element[1]->str, NULL, 10) - l->now_us;
	freeReplyObject(r);
	return 0;
}

/* <l> as show prints it: a JSON member after the others, or a line. */
void ctl_leases_print(const struct ctl_leases *l, bool json)
{
	char ek[LOG_ESCAPED_MAX(WINDOW_REDIS_KEY_MAX)];

	if (json) {
		printf(",\"inflight\":{\"limit\":%" PRIu64 ",\"running\":%lld,\"next_end_ms\":%" PRId64
		       ",\"key\":", l->limit, l->running, (l->next_end_us + 999) / 1000);
		ctl_json_str(stdout, l->key, l->len);
		printf("}");
		return;
	}
	printf("inflight %" PRIu64 " running %lld", l->limit, l->running);
	if (l->running > 0)
		printf(" next ends in %" PRId64 "s", window_us_to_s_ceil(l->next_end_us));
	printf(" key %s\n", log_escape_text(ek, sizeof(ek), l->key, l->len));
}
