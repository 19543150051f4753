/*
 * denied_flush - the denial counts written to Redis (denied.h), on the
 * live-control thread: the shards' tables taken (denied_take), one
 * pipelined ZINCRBY per account to the minute's sorted set, the tables
 * given back (denied_give_back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hiredis_compat.h"

#include "denied.h"
#include "live_rule.h"
#include "redis_sync.h"

/* Send <n> entries of <t> as one pipeline of ZINCRBY to minute key <key>
 * and its EXPIRE. Returns 0 or -1 with <err>. */
static int denied_send(struct redis_sync *rs, const char *key, size_t keylen,
                       const struct denied_entry *const *t, size_t n, char *err, size_t errlen)
{
	size_t i, total = n + 1;
	int *argc = calloc(total, sizeof(*argc));
	const char *(*argv)[4] = calloc(total, sizeof(*argv));
	size_t (*len)[4] = calloc(total, sizeof(*len));
	const char *const **pv = calloc(total, sizeof(*pv));
	const size_t **pl = calloc(total, sizeof(*pl));
	char (*num)[16] = calloc(total, sizeof(*num));
	struct redisReply **out = calloc(total, sizeof(*out));
	char ttl[16];
	int rc = -1;

	if (!argc || !argv || !len || !pv || !pl || !num || !out) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		snprintf(num[i], sizeof(num[i]), "%u", t[i]->count);
		argc[i] = 4;
		argv[i][0] = "ZINCRBY"; len[i][0] = 7;
		argv[i][1] = key; len[i][1] = keylen;
		argv[i][2] = num[i]; len[i][2] = strlen(num[i]);
		argv[i][3] = t[i]->member; len[i][3] = t[i]->len;
	}
	snprintf(ttl, sizeof(ttl), "%d", LIVE_DENIED_TTL_S);
	argc[n] = 3;
	argv[n][0] = "EXPIRE"; len[n][0] = 6;
	argv[n][1] = key; len[n][1] = keylen;
	argv[n][2] = ttl; len[n][2] = strlen(ttl);
	for (i = 0; i < total; i++) {
		pv[i] = argv[i];
		pl[i] = len[i];
	}
	if (redis_sync_pipeline(rs, key, keylen, total, argc, pv, pl, out, err, errlen) == -1)
		goto out;
	rc = 0;
	for (i = 0; i < total; i++) {
		if (out[i]->type == REDIS_REPLY_ERROR && rc == 0) {
			snprintf(err, errlen, "%s", out[i]->str);
			rc = -1;
		}
		freeReplyObject(out[i]);
	}
out:
	free(argc);
	free(argv);
	free(len);
	free(pv);
	free(pl);
	free(num);
	free(out);
	return rc;
}

/* See denied.h: borrows <rs>; the tables taken go back to <d>. */
int denied_flush(struct denied *d, struct redis_sync *rs, char *err, size_t errlen)
{
	const struct denied_entry **t = NULL;
	struct denied_entry *taken[DENIED_SHARDS];
	size_t n, i, j;
	char key[96];
	int64_t now_ms;
	int rc = -1, klen;

	n = denied_take(d, taken);
	if (n == 0) {
		rc = 0;
		goto out;
	}
	t = calloc(n, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0, n = 0; i < DENIED_SHARDS; i++)
		for (j = 0; taken[i] && j < DENIED_SLOTS; j++)
			if (taken[i][j].count)
				t[n++] = &taken[i][j];
	/* the minute on Redis's clock, as ctl top-denied reads it */
	now_ms = redis_sync_time_ms(rs, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1, err, errlen);
	if (now_ms < 0)
		goto out;
	klen = snprintf(key, sizeof(key), "%s%lld", LIVE_KEY_DENIED, (long long)(now_ms / 60000));
	if (denied_send(rs, key, (size_t)klen, t, n, err, errlen) == 0)
		rc = (int)n;
out:
	denied_give_back(d, taken, rc < 0);
	free(t);
	return rc;
}
