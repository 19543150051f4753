/*
 * ctl - `ratelimit-spoa ctl`: live control of accounts in the agents'
 * Redis (ctl_args.h for the command line, redis_sync.h for Redis,
 * live_rule.h for what is stored). A short synchronous program: one
 * command, its answer on stdout, what it changed on stderr.
 */
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hiredis_compat.h"

#include "config.h"
#include "ctl.h"
#include "ctl_args.h"
#include "ctl_int.h"
#include "ctl_keys.h"
#include "live_rule.h"
#include "log.h"
#include "redis_sync.h"
#include "stored.h"

#define CTL_TIMEOUT_MS 3000

/*
 * The change, atomically on the node of the {ctl} slot. KEYS: version,
 * rules, events. ARGV: field, value ("" removes), event text ("" none),
 * the index of the last event kept (LIVE_EVENTS_MAX - 1). Expired
 * rules are pruned, the hash's TTL becomes its latest expiry, the version
 * is bumped and the event (prefixed with the version and Redis's time)
 * pushed onto the capped list. Returns { version, removed or set 0|1 }.
 */
static const char ctl_change_lua[] =
"local t = redis.call('TIME')\n"
"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
"local all = redis.call('HGETALL', KEYS[2])\n"
"local latest, hit = 0, 0\n"
"for i = 1, #all, 2 do\n"
"  local e = tonumber(string.match(all[i + 1], '^v1 (%d+) '))\n"
"  if all[i] == ARGV[1] then hit = 1 end\n"
"  if not e or e <= now then redis.call('HDEL', KEYS[2], all[i])\n"
"  elseif all[i] ~= ARGV[1] and e > latest then latest = e end\n"
"end\n"
"if ARGV[2] ~= '' then\n"
"  local e = tonumber(string.match(ARGV[2], '^v1 (%d+) '))\n"
"  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])\n"
"  if e > latest then latest = e end\n"
"  hit = 1\n"
"else\n"
"  redis.call('HDEL', KEYS[2], ARGV[1])\n"
"end\n"
"if latest > 0 then redis.call('PEXPIREAT', KEYS[2], string.format('%d', latest)) end\n"
"local v = redis.call('INCR', KEYS[1])\n"
"if ARGV[3] ~= '' then\n"
"  redis.call('LPUSH', KEYS[3], v .. ' ' .. string.format('%d', now) .. ' ' .. ARGV[3])\n"
"  redis.call('LTRIM', KEYS[3], 0, ARGV[4])\n"
"end\n"
"return { v, hit }\n";

/* "user@host" of whoever runs ctl (sudo's caller when under sudo). */
static void ctl_who(char *dst, size_t cap)
{
	const char *u = getenv("SUDO_USER");
	struct passwd *pw;
	char host[64];

	if (!u || !u[0]) {
		pw = getpwuid(getuid());
		u = pw ? pw->pw_name : "uid";
	}
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	snprintf(dst, cap, "%.60s@%.63s", u, host);
}

/* A duration in ms as "1h2m3s" (rounded up to seconds) into <dst>. */
static const char *ctl_left(int64_t ms, char *dst, size_t cap)
{
	int64_t s = ms <= 0 ? 0 : (ms + 999) / 1000;

	if (s >= 3600)
		snprintf(dst, cap, "%" PRId64 "h%" PRId64 "m%" PRId64 "s", s / 3600, s / 60 % 60, s % 60);
	else if (s >= 60)
		snprintf(dst, cap, "%" PRId64 "m%" PRId64 "s", s / 60, s % 60);
	else
		snprintf(dst, cap, "%" PRId64 "s", s);
	return dst;
}

/* The live rule of the account under x->p, if one is stored (expired or
 * not): 1 found, 0 none, -1 error. */
static int ctl_get_rule(struct ctl *x, struct live_rule *r)
{
	char field[LIVE_FIELD_MAX];
	const char *argv[3] = { "HGET", LIVE_KEY_RULES, field };
	size_t len[3] = { 4, sizeof(LIVE_KEY_RULES) - 1, 0 };
	redisReply *rep;
	int n, rc = 0;

	memset(r, 0, sizeof(*r));
	r->policy_len = x->p->name_len;
	memcpy(r->policy, x->p->name, r->policy_len);
	r->key_len = strlen(x->a.account);
	memcpy(r->key, x->a.account, r->key_len);
	n = live_rule_field(r, field, sizeof(field));
	len[2] = (size_t)n;
	rep = ctl_cmd(x, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1, 3, argv, len);
	if (!rep)
		return -1;
	if (rep->type == REDIS_REPLY_STRING)
		rc = live_rule_decode(rep->str, rep->len, r) == 0 ? 1 : 0;
	freeReplyObject(rep);
	/* a bucket's live rate gets its bucket, as the agents give it */
	if (rc == 1 && !r->block && r->nwin && x->p->algorithm == WINDOW_ALGO_GCRA)
		r->win[0].burst = live_rule_gcra_burst(x->p, r);
	return rc;
}

/*
 * Read <k> (kind decides the layout) at its node's time <now_us> into <w>,
 * through the one reader of the stored data (stored.h: counted as the
 * engines count; a key they refuse reads full). Returns 0 or -1.
 */
static int ctl_read_window(struct ctl *x, const struct ctl_key *k, int64_t now_us,
                           struct stored_usage *w)
{
	char cuts[32];
	const char *argv[5];
	size_t len[5], i, n = 0;
	struct stored_entry *e = NULL;
	struct stored_field *f = NULL;
	redisReply *r = NULL;
	int rc = 0;

	memset(w, 0, sizeof(*w));
	switch (k->kind) {
	case CTL_KEY_GCRA:
	case CTL_KEY_QUOTA:
		argv[0] = "GET"; argv[1] = k->name;
		len[0] = 3; len[1] = k->len;
		r = ctl_cmd(x, k->name, k->len, 2, argv, len);
		if (!r)
			return -1;
		(k->kind == CTL_KEY_GCRA ? stored_read_gcra : stored_read_quota)(
			r->type == REDIS_REPLY_STRING ? r->str : NULL,
			r->type == REDIS_REPLY_STRING ? (size_t)r->len : 0, &k->lim, now_us, w);
		break;
	case CTL_KEY_LOG:
		/* the entries after the cut, oldest first: the reader counts
		 * from both ends, as the engines do */
		snprintf(cuts, sizeof(cuts), "(%" PRId64, now_us - (int64_t)k->lim.window_ms * 1000);
		argv[0] = "ZRANGEBYSCORE"; argv[1] = k->name; argv[2] = cuts; argv[3] = "+inf";
		argv[4] = "WITHSCORES";
		for (i = 0; i < 5; i++)
			len[i] = strlen(argv[i]);
		len[1] = k->len;
		r = ctl_cmd(x, k->name, k->len, 5, argv, len);
		if (!r)
			return -1;
		if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
		    !(e = calloc(r->elements / 2, sizeof(*e))))
			goto oom;
		for (i = 0; e && i + 1 < r->elements; i += 2, n++) {
			e[n].member = r->element[i]->str ? r->element[i]->str : "";
			e[n].len = r->element[i]->str ? (size_t)r->element[i]->len : 0;
			e[n].score = r->element[i + 1]->str ? strtoll(r->element[i + 1]->str, NULL, 10) : 0;
		}
		stored_read_log(e, n, &k->lim, now_us, w);
		break;
	case CTL_KEY_BUCKETS:
		argv[0] = "HGETALL"; argv[1] = k->name;
		len[0] = 7; len[1] = k->len;
		r = ctl_cmd(x, k->name, k->len, 2, argv, len);
		if (!r)
			return -1;
		if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
		    !(f = calloc(r->elements / 2, sizeof(*f))))
			goto oom;
		for (i = 0; f && i + 1 < r->elements; i += 2, n++) {
			f[n].name = r->element[i]->str ? r->element[i]->str : "";
			f[n].name_len = r->element[i]->str ? (size_t)r->element[i]->len : 0;
			f[n].value = r->element[i + 1]->str;
			f[n].value_len = r->element[i + 1]->str ? (size_t)r->element[i + 1]->len : 0;
		}
		stored_read_buckets(f, n, &k->lim, now_us, w);
		break;
	default:
		return -1;
	}
	goto out;
oom:
	snprintf(x->err, sizeof(x->err), "out of memory");
	rc = -1;
out:
	free(e);
	free(f);
	freeReplyObject(r);
	return rc;
}

/* Does <r> apply now (<now_ms>) to x->p? Sets <why> when it does not. */
static bool ctl_rule_applies(struct ctl *x, const struct live_rule *r, int64_t now_ms,
                             char *why, size_t cap)
{
	if (r->expires_ms <= now_ms) {
		snprintf(why, cap, "expired");
		return false;
	}
	return live_rule_check(x->p, r, why, cap) == 0;
}

/* show POLICY ACCOUNT */
static int ctl_show(struct ctl *x)
{
	const char *acc = x->a.account;
	size_t acc_len = strlen(acc);
	struct live_rule r;
	struct ctl_key keys[CTL_KEYS_MAX];
	struct ctl_leases ls;
	struct stored_usage w[CTL_KEYS_MAX];
	int64_t at_us[CTL_KEYS_MAX];   /* each key's node time when read */
	const struct window_limit *lim;
	const char *source;
	char why[256] = "", left[32], ws[32], limits[128];
	/* text output: what came from outside, escaped (log_escape_text) */
	char ea[LOG_ESCAPED_MAX(WINDOW_KEY_MAX)], ek[LOG_ESCAPED_MAX(WINDOW_REDIS_KEY_MAX)];
	char ew[LOG_ESCAPED_MAX(LIVE_WHO_MAX)], er[LOG_ESCAPED_MAX(LIVE_REASON_MAX)];
	char ey[LOG_ESCAPED_MAX(256)];
	int64_t now_ms;
	unsigned nwin, i, kept;
	int found, nkeys;
	bool live = false;

	found = ctl_get_rule(x, &r);
	now_ms = redis_sync_time_ms(x->rs, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1, x->err,
	                            sizeof(x->err));
	if (found < 0 || now_ms < 0)
		return 1;
	lim = window_limits_for(x->p, acc, acc_len, &nwin);
	source = lim == x->p->win ? "policy" : "config-override";
	if (x->a.plan) {   /* below an override, above the policy: as a request naming it */
		const struct window_plan *pl = window_plan_find(x->p, x->a.plan, strlen(x->a.plan));

		if (!pl) {
			snprintf(x->err, sizeof(x->err), "policy '%s' has no plan '%.64s'", x->p->name,
			         x->a.plan);
			return 1;
		}
		if (lim == x->p->win) {
			lim = pl->win;
			nwin = pl->nwin;
			source = "plan";
		}
	}
	if (found && ctl_rule_applies(x, &r, now_ms, why, sizeof(why))) {
		live = true;
		source = r.block ? "live-block" : "live-override";
		if (!r.block) {
			lim = r.win;
			nwin = r.nwin;
		}
	}
	nkeys = ctl_keys_for(x->p, lim, nwin, acc, acc_len, keys, 0);
	if (nkeys < 0) {
		snprintf(x->err, sizeof(x->err), "account '%s' makes no key", acc);
		return 1;
	}
	for (i = 0, kept = 0; i < (unsigned)nkeys; i++) {
		/* each key's own node's clock, as its decisions use */
		int64_t t = redis_sync_time_us(x->rs, keys[i].name, keys[i].len, x->err,
		                               sizeof(x->err));

		if (t < 0 || ctl_read_window(x, &keys[i], t, &w[kept]) == -1)
			return 1;
		/* a 1.0.x key is shown while it counts (an upgrade's first window) */
		if (keys[i].legacy && w[kept].used == 0)
			continue;
		at_us[kept] = t;
		keys[kept++] = keys[i];
	}
	nkeys = (int)kept;
	if (x->p->inflight && ctl_leases_read(x, &ls) == -1)
		return 1;
	if (found)
		live_rule_format_limits(&r, limits, sizeof(limits));
	if (x->a.json) {
		printf("{\"policy\":");
		ctl_json_str(stdout, x->p->name, x->p->name_len);
		printf(",\"account\":");
		ctl_json_str(stdout, acc, acc_len);
		printf(",\"limits\":\"%s\",\"plans\":[", source);
		for (i = 0; i < x->p->nplans; i++)   /* (names of A-Z a-z 0-9 _ . -) */
			printf("%s\"%s\"", i ? "," : "", x->p->plans[i].name);
		printf("],\"windows\":[");
		for (i = 0; i < (unsigned)nkeys; i++) {
			uint64_t l = w[i].quota;

			printf("%s{\"limit\":%" PRIu64 ",\"window_ms\":%" PRIu64 ",\"used\":%" PRIu64
			       ",\"remaining\":%" PRIu64 ",\"reset\":%" PRId64 ",\"key\":",
			       i ? "," : "", l, keys[i].lim.window_ms, w[i].used,
			       w[i].remaining, window_us_to_s_ceil(w[i].reset_us));
			ctl_json_str(stdout, keys[i].name, keys[i].len);
			/* a quota: its period and the exact instant it resets (ms) */
			if (keys[i].kind == CTL_KEY_QUOTA)
				printf(",\"period\":\"%s\",\"reset_at_ms\":%" PRId64,
				       window_cal_name((enum window_cal)keys[i].lim.cal),
				       (at_us[i] + w[i].reset_us) / 1000);
			printf("}");
		}
		printf("],\"live\":");
		if (!found || r.expires_ms <= now_ms) {
			printf("null");
		} else {
			printf("{\"limits\":\"%s\",\"block\":%s,\"applies\":%s,\"expires_in_ms\":%" PRId64
			       ",\"who\":", limits, r.block ? "true" : "false", live ? "true" : "false",
			       r.expires_ms - now_ms);
			ctl_json_str(stdout, r.who, strlen(r.who));
			printf(",\"reason\":");
			ctl_json_str(stdout, r.reason, strlen(r.reason));
			if (!live) {
				printf(",\"refused\":");
				ctl_json_str(stdout, why, strlen(why));
			}
			printf("}");
		}
		if (x->p->inflight)
			ctl_leases_print(&ls, true);
		printf("}\n");
		return 0;
	}
	printf("policy %s account %s limits %s\n", x->p->name,
	       log_escape_text(ea, sizeof(ea), acc, acc_len), source);
	for (i = 0; i < x->p->nplans; i++)
		printf("%s%s%s", i ? " " : "plans ", x->p->plans[i].name, i + 1 == x->p->nplans ? "\n" : "");
	for (i = 0; i < (unsigned)nkeys; i++) {
		uint64_t l = w[i].quota;

		window_format_ms(keys[i].lim.window_ms, ws, sizeof(ws));
		if (keys[i].kind == CTL_KEY_QUOTA)
			printf("quota %" PRIu64 "/%s used %" PRIu64 " remaining %" PRIu64 " reset %" PRId64
			       "s at %" PRId64 ".%03d key %s\n", l,
			       window_cal_name((enum window_cal)keys[i].lim.cal), w[i].used, w[i].remaining,
			       window_us_to_s_ceil(w[i].reset_us), (at_us[i] + w[i].reset_us) / 1000000,
			       (int)((at_us[i] + w[i].reset_us) / 1000 % 1000),
			       log_escape_text(ek, sizeof(ek), keys[i].name, keys[i].len));
		else if (keys[i].kind == CTL_KEY_GCRA)
			printf("bucket %" PRIu64 "/%s burst %" PRIu64 " used %" PRIu64 " remaining %"
			       PRIu64 " full in %" PRId64 "s key %s\n", keys[i].lim.limit, ws, l,
			       w[i].used, w[i].remaining, window_us_to_s_ceil(w[i].reset_us),
			       log_escape_text(ek, sizeof(ek), keys[i].name, keys[i].len));
		else
			printf("window %" PRIu64 "/%s used %" PRIu64 " remaining %" PRIu64 " reset %"
			       PRId64 "s key %s\n", l, ws, w[i].used, w[i].remaining,
			       window_us_to_s_ceil(w[i].reset_us),
			       log_escape_text(ek, sizeof(ek), keys[i].name, keys[i].len));
	}
	if (x->p->inflight)
		ctl_leases_print(&ls, false);
	if (found && r.expires_ms > now_ms)
		printf("live %s for %s more, by %s, reason \"%s\"%s%s\n", limits,
		       ctl_left(r.expires_ms - now_ms, left, sizeof(left)),
		       r.who[0] ? log_escape_text(ew, sizeof(ew), r.who, strlen(r.who)) : "-",
		       log_escape_text(er, sizeof(er), r.reason, strlen(r.reason)),
		       live ? "" : "; not applied: ", live ? "" : log_escape_text(ey, sizeof(ey), why,
		                                                                   strlen(why)));
	if (r.block && live)
		printf("blocked: every request is denied (reason=blocked) without Redis\n");
	return 0;
}

/* Run ctl_change_lua with field <f>, value <v> ("" removes) and event
 * text <ev>; sets <*version> and <*hit>. Returns 0 or -1. */
static int ctl_change(struct ctl *x, const char *f, size_t flen, const char *v,
                      const char *ev, long long *version, long long *hit)
{
	char last[16];
	const char *argv[10] = { "EVAL", ctl_change_lua, "3", LIVE_KEY_VERSION, LIVE_KEY_RULES,
	                         LIVE_KEY_EVENTS, f, v, ev, last };
	size_t len[10];
	redisReply *r;
	int i;

	snprintf(last, sizeof(last), "%d", LIVE_EVENTS_MAX - 1);
	for (i = 0; i < 10; i++)
		len[i] = strlen(argv[i]);
	len[6] = flen;
	r = ctl_cmd(x, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1, 10, argv, len);
	if (!r)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
		snprintf(x->err, sizeof(x->err), "unexpected reply to the change");
		freeReplyObject(r);
		return -1;
	}
	*version = r->element[0]->integer;
	*hit = r->element[1]->integer;
	freeReplyObject(r);
	return 0;
}

/* The event text "<what> <policy> <account%> <who%> <detail%>". */
static int ctl_event(struct ctl *x, const char *what, const char *detail, char *dst, size_t cap)
{
	char acc[3 * WINDOW_KEY_MAX + 2], who[3 * LIVE_WHO_MAX + 2], det[3 * 400 + 2];
	int n;

	if (live_rule_escape(x->a.account, strlen(x->a.account), acc, sizeof(acc)) < 0 ||
	    live_rule_escape(x->who, strlen(x->who), who, sizeof(who)) < 0 ||
	    live_rule_escape(detail, strlen(detail), det, sizeof(det)) < 0)
		return -1;
	n = snprintf(dst, cap, "%s %s %s %s %s", what, x->p->name, acc, who, det);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* reset POLICY ACCOUNT */
static int ctl_reset(struct ctl *x)
{
	const char *acc = x->a.account;
	size_t acc_len = strlen(acc);
	struct ctl_key keys[CTL_KEYS_MAX];
	const struct window_limit *lim;
	struct live_rule r;
	struct ctl_leases ls;
	char ev[2048], detail[64], ea[LOG_ESCAPED_MAX(WINDOW_KEY_MAX)];
	char ew[LOG_ESCAPED_MAX(LIVE_WHO_MAX)];
	long long version, hit, deleted = 0;
	unsigned nwin, i;
	int n, found;

	/* every key form the account may have now: the policy's, its config
	 * override's, its live override's, its plans' (a different number of
	 * windows is a different form) */
	n = ctl_keys_for(x->p, x->p->win, x->p->nwin, acc, acc_len, keys, 0);
	lim = window_limits_for(x->p, acc, acc_len, &nwin);
	if (n >= 0)
		n = ctl_keys_for(x->p, lim, nwin, acc, acc_len, keys, (size_t)n);
	found = ctl_get_rule(x, &r);
	if (found < 0)
		return 1;
	if (n >= 0 && found == 1 && !r.block)
		n = ctl_keys_for(x->p, r.win, r.nwin, acc, acc_len, keys, (size_t)n);
	for (i = 0; n >= 0 && i < x->p->nplans; i++)   /* a plan's windows of other lengths */
		n = ctl_keys_for(x->p, x->p->plans[i].win, x->p->plans[i].nwin, acc, acc_len, keys,
		                 (size_t)n);
	if (n < 0) {
		snprintf(x->err, sizeof(x->err), "account '%s' makes no key", acc);
		return 1;
	}
	for (i = 0; i < (unsigned)n; i++) {
		const char *argv[2] = { "DEL", keys[i].name };
		size_t len[2] = { 3, keys[i].len };
		redisReply *rep = ctl_cmd(x, keys[i].name, keys[i].len, 2, argv, len);

		if (!rep)
			return 1;
		deleted += rep->integer;
		freeReplyObject(rep);
	}
	/* a pool keeps what it counted: removing the account's entries from
	 * its log would leave its count (a running total's difference) as it
	 * was, and taking them out exactly rewrites every later entry */
	if (x->p->pooled) {
		int64_t units = ctl_pool_units(x);

		if (units < 0)
			return 1;
		fprintf(stderr, "ctl: pool %s keeps the account's %" PRId64 " units until they leave "
		        "its window (not removed: the pool's log would have to be rewritten)\n",
		        x->p->pool.name, units);
	}
	/* (leases are requests still running: see ctl_leases.c) */
	if (x->p->inflight && ctl_leases_read(x, &ls) == 0 && ls.running > 0)
		fprintf(stderr, "ctl: the account's %lld in-flight leases stay (requests still "
		        "running): each ends at its response or at lease=\n", ls.running);
	snprintf(detail, sizeof(detail), "keys=%lld", deleted);
	if (ctl_event(x, "reset", detail, ev, sizeof(ev)) == -1 ||
	    ctl_change(x, "", 0, "", ev, &version, &hit) == -1)
		return 1;
	fprintf(stderr, "ctl: reset policy=%s account=%s keys_deleted=%lld by=%s version=%lld\n",
	        x->p->name, log_escape_text(ea, sizeof(ea), acc, acc_len), deleted,
	        log_escape_text(ew, sizeof(ew), x->who, strlen(x->who)), version);
	return 0;
}

/* override POLICY ACCOUNT LIMITS|block --for D [--reason T] | --remove */
static int ctl_override(struct ctl *x)
{
	struct live_rule *r = &x->a.rule;
	char field[LIVE_FIELD_MAX + 1], value[LIVE_VALUE_MAX], ev[2048], limits[128], why[256];
	char detail[LIVE_REASON_MAX + 200], ea[LOG_ESCAPED_MAX(WINDOW_KEY_MAX)];
	char ew[LOG_ESCAPED_MAX(LIVE_WHO_MAX)], er[LOG_ESCAPED_MAX(LIVE_REASON_MAX)];
	long long version, hit;
	int64_t now_ms;
	int flen;

	flen = live_rule_field(r, field, sizeof(field));
	if (flen < 0)
		return 1;
	if (x->a.remove) {
		if (ctl_event(x, "remove", "", ev, sizeof(ev)) == -1 ||
		    ctl_change(x, field, (size_t)flen, "", ev, &version, &hit) == -1)
			return 1;
		fprintf(stderr, "ctl: override removed policy=%s account=%s by=%s version=%lld%s\n",
		        x->p->name, log_escape_text(ea, sizeof(ea), r->key, r->key_len),
		        log_escape_text(ew, sizeof(ew), x->who, strlen(x->who)), version,
		        hit ? "" : " (there was none)");
		return 0;
	}
	/* the agents check this too: a ctl from another config cannot loosen */
	if (live_rule_check(x->p, r, why, sizeof(why)) == -1) {
		snprintf(x->err, sizeof(x->err), "override refused: %s", why);
		x->refused = true;
		return 1;
	}
	now_ms = redis_sync_time_ms(x->rs, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1, x->err,
	                            sizeof(x->err));
	if (now_ms < 0)
		return 1;
	r->set_ms = now_ms;
	r->expires_ms = now_ms + (int64_t)x->a.for_ms;
	snprintf(r->who, sizeof(r->who), "%s", x->who);
	live_rule_format_limits(r, limits, sizeof(limits));
	snprintf(detail, sizeof(detail), "%s for=%" PRIu64 "s reason=%s", limits,
	         x->a.for_ms / 1000, r->reason);
	if (live_rule_encode(r, value, sizeof(value)) < 0 ||
	    ctl_event(x, "override", detail, ev, sizeof(ev)) == -1) {
		snprintf(x->err, sizeof(x->err), "override too long to store");
		return 1;
	}
	if (ctl_change(x, field, (size_t)flen, value, ev, &version, &hit) == -1)
		return 1;
	fprintf(stderr, "ctl: override set policy=%s account=%s limits=%s for=%s by=%s "
	        "reason=\"%s\" version=%lld\n", x->p->name,
	        log_escape_text(ea, sizeof(ea), r->key, r->key_len), limits,
	        ctl_left((int64_t)x->a.for_ms, why, sizeof(why)),
	        log_escape_text(ew, sizeof(ew), x->who, strlen(x->who)),
	        log_escape_text(er, sizeof(er), r->reason, strlen(r->reason)), version);
	return 0;
}

/* overrides */
static int ctl_overrides(struct ctl *x)
{
	const char *argv[2] = { "HGETALL", LIVE_KEY_RULES };
	size_t len[2] = { 7, sizeof(LIVE_KEY_RULES) - 1 }, i;
	int64_t now_ms = redis_sync_time_ms(x->rs, LIVE_KEY_RULES, len[1], x->err, sizeof(x->err));
	redisReply *rep;
	unsigned n = 0;

	if (now_ms < 0 || !(rep = ctl_cmd(x, LIVE_KEY_RULES, len[1], 2, argv, len)))
		return 1;
	if (x->a.json)
		printf("[");
	for (i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
		struct live_rule r;
		char limits[128], left[32], ep[LOG_ESCAPED_MAX(WINDOW_NAME_MAX)];
		char ea[LOG_ESCAPED_MAX(WINDOW_KEY_MAX)], ew[LOG_ESCAPED_MAX(LIVE_WHO_MAX)];
		char er[LOG_ESCAPED_MAX(LIVE_REASON_MAX)];

		memset(&r, 0, sizeof(r));
		if (live_rule_parse_field(rep->element[i]->str, rep->element[i]->len, &r) == -1 ||
		    live_rule_decode(rep->element[i + 1]->str, rep->element[i + 1]->len, &r) == -1 ||
		    r.expires_ms <= now_ms)
			continue;
		live_rule_format_limits(&r, limits, sizeof(limits));
		if (x->a.json) {
			printf("%s{\"policy\":", n ? "," : "");
			ctl_json_str(stdout, r.policy, r.policy_len);
			printf(",\"account\":");
			ctl_json_str(stdout, r.key, r.key_len);
			printf(",\"limits\":\"%s\",\"expires_in_ms\":%" PRId64 ",\"who\":", limits,
			       r.expires_ms - now_ms);
			ctl_json_str(stdout, r.who, strlen(r.who));
			printf(",\"reason\":");
			ctl_json_str(stdout, r.reason, strlen(r.reason));
			printf("}");
		} else {
			if (n == 0)
				printf("%-16s %-24s %-20s %-10s %-24s %s\n", "POLICY", "ACCOUNT", "LIMITS",
				       "LEFT", "WHO", "REASON");
			printf("%-16s %-24s %-20s %-10s %-24s %s\n",
			       log_escape_text(ep, sizeof(ep), r.policy, r.policy_len),
			       log_escape_text(ea, sizeof(ea), r.key, r.key_len), limits,
			       ctl_left(r.expires_ms - now_ms, left, sizeof(left)),
			       r.who[0] ? log_escape_text(ew, sizeof(ew), r.who, strlen(r.who)) : "-",
			       log_escape_text(er, sizeof(er), r.reason, strlen(r.reason)));
		}
		n++;
	}
	if (x->a.json)
		printf("]\n");
	else if (n == 0)
		printf("no live overrides\n");
	freeReplyObject(rep);
	return 0;
}

/* One account's denials, summed over the minutes. */
struct ctl_denied {
	char *member;                   /* "<policy> <account>", owned */
	size_t len;
	uint64_t n;
};

/* qsort order of struct ctl_denied by member (borrowed, compared only). */
static int ctl_denied_by_member(const void *a, const void *b)
{
	const struct ctl_denied *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->member, y->member, n);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* qsort order: most denied first, then by member (borrowed). */
static int ctl_denied_by_count(const void *a, const void *b)
{
	const struct ctl_denied *x = a, *y = b;

	if (x->n != y->n)
		return x->n < y->n ? 1 : -1;
	return ctl_denied_by_member(a, b);
}

/* top-denied: the minute keys' members summed, sorted by count. */
static int ctl_top_denied(struct ctl *x)
{
	struct ctl_denied *d = NULL;
	size_t nd = 0, cap = 0, i, j, k, plen = x->a.only_policy ? strlen(x->a.only_policy) : 0;
	int64_t now_ms = redis_sync_time_ms(x->rs, LIVE_KEY_RULES, sizeof(LIVE_KEY_RULES) - 1,
	                                    x->err, sizeof(x->err));
	unsigned m, shown = 0;
	int rc = 1;

	if (now_ms < 0)
		return 1;
	for (m = 0; m < x->a.minutes; m++) {
		char key[96];
		const char *argv[5] = { "ZRANGE", key, "0", "-1", "WITHSCORES" };
		size_t len[5] = { 6, 0, 1, 2, 10 };
		redisReply *r;

		len[1] = (size_t)snprintf(key, sizeof(key), "%s%" PRId64, LIVE_KEY_DENIED,
		                          now_ms / 60000 - (int64_t)m);
		r = ctl_cmd(x, key, len[1], 5, argv, len);
		if (!r)
			goto out;
		for (i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
			const redisReply *e = r->element[i];

			/* "<policy> <account>", a pool's refusal "<policy>/<reason> ..." */
			if (plen && (e->len <= plen || memcmp(e->str, x->a.only_policy, plen) != 0 ||
			             (e->str[plen] != ' ' && e->str[plen] != '/')))
				continue;
			if (nd == cap) {
				struct ctl_denied *g = realloc(d, (cap = cap ? cap * 2 : 64) * sizeof(*d));

				if (!g) {
					freeReplyObject(r);
					snprintf(x->err, sizeof(x->err), "out of memory");
					goto out;
				}
				d = g;
			}
			d[nd].member = malloc(e->len + 1);
			if (!d[nd].member) {
				freeReplyObject(r);
				snprintf(x->err, sizeof(x->err), "out of memory");
				goto out;
			}
			memcpy(d[nd].member, e->str, e->len);
			d[nd].member[e->len] = '\0';
			d[nd].len = e->len;
			d[nd].n = strtoull(r->element[i + 1]->str, NULL, 10);
			nd++;
		}
		freeReplyObject(r);
	}
	/* the same account in several minutes: one line */
	if (nd)
		qsort(d, nd, sizeof(*d), ctl_denied_by_member);
	for (i = 0, k = 0; i < nd; i = j) {
		uint64_t sum = 0;

		for (j = i; j < nd && ctl_denied_by_member(&d[i], &d[j]) == 0; j++)
			sum += d[j].n;
		for (size_t z = i + 1; z < j; z++)
			free(d[z].member);
		d[k] = d[i];
		d[k++].n = sum;
	}
	nd = k;
	if (nd)
		qsort(d, nd, sizeof(*d), ctl_denied_by_count);
	if (x->a.json)
		printf("[");
	else
		printf("%-10s %-16s %s\n", "DENIED", "POLICY", "ACCOUNT");
	for (i = 0; i < nd && shown < x->a.count; i++, shown++) {
		const char *sp = memchr(d[i].member, ' ', d[i].len);
		size_t pl = sp ? (size_t)(sp - d[i].member) : d[i].len;
		const char *acc = sp ? sp + 1 : "";

		if (x->a.json) {
			const char *sl = memchr(d[i].member, '/', pl);

			printf("%s{\"policy\":", i ? "," : "");
			ctl_json_str(stdout, d[i].member, sl ? (size_t)(sl - d[i].member) : pl);
			printf(",\"reason\":");
			ctl_json_str(stdout, sl ? sl + 1 : "account",
			             sl ? pl - (size_t)(sl + 1 - d[i].member) : 7);
			printf(",\"account\":");
			ctl_json_str(stdout, acc, d[i].len - pl - (sp ? 1 : 0));
			printf(",\"denied\":%" PRIu64 "}", d[i].n);
		} else {
			char ep[LOG_ESCAPED_MAX(WINDOW_NAME_MAX)], ea[LOG_ESCAPED_MAX(WINDOW_KEY_MAX)];

			printf("%-10" PRIu64 " %-16s %s\n", d[i].n,
			       log_escape_text(ep, sizeof(ep), d[i].member, pl),
			       log_escape_text(ea, sizeof(ea), acc, d[i].len - pl - (sp ? 1 : 0)));
		}
	}
	if (x->a.json)
		printf("]\n");
	rc = 0;
out:
	for (i = 0; i < nd; i++)
		free(d[i].member);
	free(d);
	return rc;
}

/* See ctl.h. Owns the run (struct ctl: config, Redis client); borrows <argv>. */
int ctl_main(int argc, char **argv)
{
	struct ctl *x = calloc(1, sizeof(*x));
	int rc = 1;

	if (!x) {
		fputs("ratelimit-spoa ctl: out of memory\n", stderr);
		return 1;
	}
	config_init(&x->cfg);
	/* an error may quote what was typed or read (an account): escaped */
	if (ctl_parse_args(argc, argv, &x->a, x->err, sizeof(x->err)) == -1) {
		fprintf(stderr, "ratelimit-spoa ctl: %s\n%s",
		        log_escape_text(x->eerr, sizeof(x->eerr), x->err, strlen(x->err)),
		        ctl_usage(x->a.cmd));
		rc = 2;
		goto out;
	}
	if (x->a.help) {
		fputs(ctl_usage(x->a.cmd), stdout);
		rc = 0;
		goto out;
	}
	if (config_load_file(&x->cfg, x->a.config, x->err, sizeof(x->err)) == -1)
		goto fail;
	config_tag_pool_accounts(&x->cfg);
	if (config_validate(&x->cfg, x->err, sizeof(x->err)) == -1)
		goto fail;
	if (x->a.policy && !(x->p = config_find_policy(&x->cfg, x->a.policy, strlen(x->a.policy)))) {
		snprintf(x->err, sizeof(x->err), "%s: no policy '%s'", x->a.config, x->a.policy);
		goto fail;
	}
	ctl_who(x->who, sizeof(x->who));
	x->rs = redis_sync_new(x->cfg.redis, &x->cfg.tls, CTL_TIMEOUT_MS, x->err, sizeof(x->err));
	if (!x->rs)
		goto fail;
	switch (x->a.cmd) {
	case CTL_CMD_SHOW: rc = ctl_show(x); break;
	case CTL_CMD_RESET: rc = ctl_reset(x); break;
	case CTL_CMD_OVERRIDE: rc = ctl_override(x); break;
	case CTL_CMD_OVERRIDES: rc = ctl_overrides(x); break;
	case CTL_CMD_TOP_DENIED: rc = ctl_top_denied(x); break;
	case CTL_CMD_SHOW_POOL: rc = ctl_show_pool(x); break;
	default: rc = 2; break;
	}
	if (rc == 0)
		goto out;
fail:
	fprintf(stderr, "ratelimit-spoa ctl: %s%s%s\n",
	        log_escape_text(x->eerr, sizeof(x->eerr), x->err, strlen(x->err)),
	        x->rs && !x->refused ? " on " : "", x->rs && !x->refused ? redis_sync_addr(x->rs) : "");
	rc = 1;
out:
	redis_sync_free(x->rs);
	config_release(&x->cfg);
	free(x);
	return rc;
}
